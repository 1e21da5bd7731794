"""The base kernel slowed on every SM (``autoprofile(consumer_delay_ns=D)``) as the what-if
check's GPU halves name and trace it: its probed loads at a lower throughput."""

from __future__ import annotations

import argparse

SLOWED_PREFIX, SLOWED_SUFFIX = "base_slowed", "_arrivals"
SLOWED_HELP = ("comma-separated delays (ns); for each D, --traces probed launches of the base "
               "whose consumers spin D ns after each release (autoprofile(consumer_delay_ns=D), "
               "{file}): the loads at a lower throughput on every SM")


def slowed_delays(text: str, parser: argparse.ArgumentParser) -> list[int]:
    """The delays of ``--slowed``, refused through ``parser`` unless whole ns > 0."""
    try:
        delays = [int(x) for x in filter(None, text.split(","))]
    except ValueError:
        parser.error(f"--slowed: comma-separated whole nanoseconds, got {text!r}")
    if any(d <= 0 for d in delays):
        parser.error(f"--slowed: each delay must be > 0 ns, got {text!r}")
    return delays


def slowed_name(delay: int) -> str:
    """The traced launch's name for a delay (its file: ``trace[_ze]_<name>.npz``)."""
    return f"{SLOWED_PREFIX}{delay}{SLOWED_SUFFIX}"


def slowed_delay(name: str) -> int:
    """The delay a traced launch's name carries, 0 for any other launch."""
    if not (name.startswith(SLOWED_PREFIX) and name.endswith(SLOWED_SUFFIX)):
        return 0
    return int(name[len(SLOWED_PREFIX):-len(SLOWED_SUFFIX)])
