"""Where a zero-edit kernel's records sit against its pipeline's instructions: the SASS lines
(``cuobjdump -sass`` output) that read the timer, store a record, wait on or arrive at an
mbarrier, issue a TMA load or a wgmma, or wait for wgmma groups, in program order with their
line numbers. Whether a record's store stalls a ring's round trip shows here: the store
waits for its timer read, and every instruction after it waits behind the store.

    python bench/tools/sass_order.py KERNEL.sass [--from LINE --to LINE]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

KEPT = re.compile(r"GLOBALTIMER|\bSTG\b|SYNCS\.(ARRIVE|PHASECHK)|UTMALDG|HGMMA|WARPGROUP|"
                  r"NANOSLEEP")
COMMENT = re.compile(r"/\*[0-9a-f]*\*/|/\* 0x[0-9a-f]+ \*/")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sass", type=Path)
    ap.add_argument("--from", dest="first", type=int, default=0)
    ap.add_argument("--to", dest="last", type=int, default=sys.maxsize)
    args = ap.parse_args(argv)
    for number, line in enumerate(args.sass.read_text().splitlines(), 1):
        if args.first <= number <= args.last and KEPT.search(line):
            print(f"{number:6d}  {' '.join(COMMENT.sub('', line).split())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
