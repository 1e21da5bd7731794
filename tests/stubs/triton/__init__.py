"""Stand-in for triton on a CPU box without it, for compiling FA4 in a test child only:
quack (FA4's dependency) subclasses triton's cache manager and names a few of its
decorators and types at import time. Nothing here runs a kernel."""
import sys as _sys
import types as _types

from . import runtime  # noqa: F401


def jit(fn=None, **kw):
    return fn if fn is not None else (lambda f: f)


def autotune(*args, **kwargs):
    return lambda f: f


heuristics = autotune


class Config:
    def __init__(self, *args, **kwargs):
        pass


language = _types.ModuleType("triton.language")


class _Dtype:
    pass


language.dtype = _Dtype
language.constexpr = object
_sys.modules["triton.language"] = language
