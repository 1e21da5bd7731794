"""``python -m cute_prof``: the ``cute-prof`` command (e.g. ``python -m cute_prof record -- app.py``)."""

import sys

from .cli import main

sys.exit(main())
