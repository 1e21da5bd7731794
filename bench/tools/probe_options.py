"""The GEMM what-if GPU halves' extra probed launches: variants traced with the base's probes
(``--probe-variants``, diagnosis) and the base slowed on every SM (``--slowed``,
``autoprofile(consumer_delay_ns=D)``: its loads at a lower throughput)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable

SLOWED_PREFIX, SLOWED_SUFFIX = "base_slowed", "_arrivals"


def add_probe_options(parser: argparse.ArgumentParser, *, trace_prefix: str,
                      needs: str = "") -> None:
    """``--probe-variants`` and ``--slowed``, their files named ``<trace_prefix><name>``;
    ``needs``: what the options need of the script's others, said first in their help."""
    parser.add_argument("--probe-variants", default="", metavar="NAMES",
                        help=f"{needs}variants also traced with the same probes "
                             f"({trace_prefix}<name>_arrivals.npz, one launch each): diagnosis "
                             "of their loads (bench/whatif_slowed_loads.py), never a model input")
    parser.add_argument("--slowed", default="", metavar="NS",
                        help=f"{needs}comma-separated delays (ns); for each D, --traces probed "
                             "launches of the base whose consumers spin D ns after each release "
                             f"(autoprofile(consumer_delay_ns=D), {trace_prefix}{SLOWED_PREFIX}"
                             f"<D>{SLOWED_SUFFIX}.npz): the loads at a lower throughput on "
                             "every SM")


def probe_variants(args: argparse.Namespace, variants: Iterable[str],
                   parser: argparse.ArgumentParser) -> list[str]:
    """The names of ``--probe-variants``, refused through ``parser`` unless each is one of
    ``variants`` other than the base."""
    allowed = [v for v in variants if v != "base"]
    names = [name for name in args.probe_variants.split(",") if name]
    for name in names:
        if name not in allowed:
            parser.error(f"--probe-variants: {name!r} is not one of {', '.join(allowed)}")
    return names


def slowed_delays(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[int]:
    """The delays of ``--slowed``, refused through ``parser`` unless whole ns > 0."""
    try:
        delays = [int(x) for x in filter(None, args.slowed.split(","))]
    except ValueError:
        parser.error(f"--slowed: comma-separated whole nanoseconds, got {args.slowed!r}")
    if any(d <= 0 for d in delays):
        parser.error(f"--slowed: each delay must be > 0 ns, got {args.slowed!r}")
    return delays


def slowed_name(delay: int) -> str:
    """The traced launch's name for a delay (its file: ``trace[_ze]_<name>.npz``)."""
    return f"{SLOWED_PREFIX}{delay}{SLOWED_SUFFIX}"


def slowed_delay(name: str) -> int:
    """The delay a traced launch's name carries, 0 for any other launch."""
    if not (name.startswith(SLOWED_PREFIX) and name.endswith(SLOWED_SUFFIX)):
        return 0
    return int(name[len(SLOWED_PREFIX):-len(SLOWED_SUFFIX)])
