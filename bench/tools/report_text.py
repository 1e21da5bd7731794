"""The text reports of the bench tools: printed, and written where the tool was asked to
keep a copy (the file committed under bench/results/)."""

from __future__ import annotations

from pathlib import Path


def emit(lines: list[str], out: Path | None) -> None:
    """Print ``lines`` and, with ``out``, write the same text there."""
    text = "\n".join(lines) + "\n"
    if out:
        out.write_text(text)
    print(text, end="")
