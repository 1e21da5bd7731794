"""``python -m cute_prof``: the ``cute-prof`` command (e.g. ``python -m cute_prof record -- app.py``).

Owns nothing but the entry point; it may import only the CLI."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
