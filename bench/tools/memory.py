"""Peak-memory probes the host benches share (Linux /proc)."""

from __future__ import annotations


def status_kib(key: str) -> int:
    """A ``/proc/self/status`` field in KiB (``VmRSS``, ``VmHWM``, ...)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/self/status")


def reset_peak() -> None:
    """Reset VmHWM to the current resident size, so the next step's peak is its own."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
