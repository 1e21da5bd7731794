"""Summarise Nsight Compute's per-SASS-instruction warp-stall samples (``ncu -i REP --page
source --csv --print-source sass``) so two builds of one kernel can be compared: which
instructions, and which kinds of instruction, the warps newly wait on.

    python bench/tools/sass_stalls.py plain.csv zero_edit.csv [--top 25]
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from collections import Counter


def load(path: str) -> list[dict]:
    """Rows of the CSV (ncu may print a few lines before its header)."""
    text = open(path, encoding="utf-8", errors="replace").read()
    start = text.find('"Address"')
    if start < 0:
        start = text.find('"#"')
    rows = list(csv.DictReader(io.StringIO(text[max(start, 0):])))
    if not rows:
        raise SystemExit(f"{path}: no rows (is it `--page source --csv --print-source sass` output?)")
    return rows


def column(rows: list[dict], *needles: str) -> str:
    for name in rows[0]:
        if all(n.lower() in name.lower() for n in needles):
            return name
    raise SystemExit(f"no column with {needles} among {list(rows[0])}")


def number(text: str) -> float:
    text = (text or "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return 0.0


def opcode(source: str) -> str:
    """The mnemonic with its first modifier (``HGMMA.64x128x16``, ``SYNCS.PHASECHK``...)."""
    body = re.sub(r"^\s*@!?U?P\w+\s+", "", source.strip())
    word = body.split(" ", 1)[0]
    parts = word.split(".")
    return ".".join(parts[:2]) if parts[0] in ("SYNCS", "WARPGROUP", "BAR", "MEMBAR", "HGMMA") else parts[0]


def summary(path: str, top: int) -> tuple[Counter, float]:
    rows = load(path)
    samples = column(rows, "stall sampling", "all")
    source = column(rows, "source")
    executed = column(rows, "instructions executed")
    by_op: Counter = Counter()
    total = 0.0
    for row in rows:
        n = number(row[samples])
        by_op[opcode(row[source])] += n
        total += n
    print(f"== {path}: {len(rows)} SASS instructions, {total:,.0f} stall samples, "
          f"{sum(number(r[executed]) for r in rows):,.0f} warp instructions executed")
    ranked = sorted(rows, key=lambda r: -number(r[samples]))[:top]
    for r in ranked:
        print(f"  {number(r[samples]) / total:6.2%} {number(r[executed]):>12,.0f}  "
              f"{r.get('Address', '')}  {r[source].strip()[:90]}")
    return by_op, total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    tables = [summary(path, args.top) for path in args.csv]
    ops = sorted(set().union(*(t[0] for t in tables)), key=lambda o: -max(t[0][o] / t[1] for t in tables))
    print("\nstall samples by opcode, share of each build's total")
    print(f"{'opcode':<22}" + "".join(f"{p.rsplit('/', 1)[-1][:18]:>20}" for p in args.csv))
    for op in ops[:30]:
        print(f"{op:<22}" + "".join(f"{t[0][op] / t[1]:>20.2%}" for t in tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
