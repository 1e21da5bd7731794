"""Imported by Python at startup in a program that ``cute-prof record`` runs (this folder is
first on its ``PYTHONPATH``): start the run, then run the environment's own ``sitecustomize``,
if it has one, as Python would have.

Owns that start-up order; it may import only :mod:`cute_prof.record_run`."""

import importlib.machinery
import importlib.util
import os
import sys


def _chain_to_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _start() -> None:
    try:
        from cute_prof.record_run import start
    except ImportError as error:
        print(f"cute-prof record: this Python ({sys.executable}) cannot import cute_prof "
              f"({error}): nothing will be recorded; run the program with the Python that has "
              f"cute_prof installed", file=sys.stderr)
        return
    start()


_start()
_chain_to_next_sitecustomize()
