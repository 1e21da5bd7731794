"""The persistent GEMM's what-if table: the ``persistent`` entry of ``bench/whatif_check.py``
(one check script for every kernel; kept so ``bench/persistent_gpu.py`` and old command
lines still work). Writes whatif_table.md/.json into the folder it reads.

    python bench/persistent_whatif_check.py PERSISTENT_OUT
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import whatif_check  # noqa: E402


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    return whatif_check.main([args[0], "--only", "persistent", "--out", args[0], *args[1:]])


if __name__ == "__main__":
    sys.exit(main())
