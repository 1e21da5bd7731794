"""Trace-time guards for recorders that carry state in registers (WarpRecorder, RoleRecorder).

Two mistakes used to end in silence or in a generic compiler error:

* a warp that exits with records still staged (``flush()`` forgotten) lost them without a
  trace. Every staged recorder now keeps a ledger; when the kernel's body has been traced,
  a ledger with records staged after its last *final* ``flush()`` (one not inside a dynamic
  loop below the recorder's creation) fails the compile with the line that created it.
* a recorder handed to a helper that records inside a dynamic loop or branch, when the DSL
  does not carry it out of that body, failed with "operand #0 does not dominate this use".
  Every use now checks that the recorder's state is reachable from the current point and
  raises our own message saying what to write instead.

The kernel-end check hooks the CuTe DSL's ``generate_func_ret_op`` (called once when a
kernel body has been traced); ``HOOKED`` says whether this DSL version offered it. Other
modules add their own kernel-end work with :func:`on_kernel_end` (zero-edit recording
closes its slices there).

Owns those trace-time checks and the kernel-end hook (:func:`on_kernel_end`) the recorders
register with; it emits no record, and may import no other device module.
"""

from __future__ import annotations

import os
import traceback

from cutlass._mlir import ir

from ..errors import ProfileBufferError

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_open_ledgers: list = []
_kernel_end_callbacks: list = []
_TOP_OPS = ("cuda.kernel", "func.func", "gpu.func", "llvm.func", "gpu.module", "builtin.module")


def is_library_file(filename: str) -> bool:
    """Whether code in ``filename`` belongs to cute_prof or the CUTLASS DSL (not the user's)."""
    name = os.path.abspath(filename)
    return name.startswith(_PACKAGE_DIR) or os.sep + "cutlass" + os.sep in name \
        or "<" in filename


def user_location() -> str:
    """file:line of the innermost caller outside cute_prof and the DSL (for messages)."""
    for frame in reversed(traceback.extract_stack()[:-1]):
        if not is_library_file(frame.filename):
            return f"{frame.filename}:{frame.lineno}"
    return "<unknown>"


def _current_block():
    try:
        return ir.InsertionPoint.current.block
    except (ValueError, RuntimeError):  # no insertion point: not tracing
        return None


def _defining_block(value):
    value = value.ir_value() if hasattr(value, "ir_value") else value
    owner = value.owner
    if isinstance(owner, ir.Block):
        return owner
    return owner.operation.block if hasattr(owner, "operation") else owner.block


def _ancestry(block):
    """The block, then each enclosing block, with the op that owns each step's region."""
    while block is not None:
        op = block.owner
        yield block, op
        if op is None:
            return
        operation = op.operation if hasattr(op, "operation") else op
        # stop at the kernel (or any op outside a block): nothing above it can hold state
        if not operation.attached or operation.name in _TOP_OPS or operation.parent is None:
            return
        block = operation.block


def _encloses(outer, inner) -> bool:
    return any(b == outer for b, _ in _ancestry(inner))


def _loop_between(inner, outer) -> bool:
    """Whether a dynamic loop owns a region on the way from ``inner`` up to ``outer``."""
    for block, op in _ancestry(inner):
        if block == outer:
            return False
        name = op.operation.name if op is not None and hasattr(op, "operation") else ""
        if name in ("scf.for", "scf.while"):
            return True
    return False


def check_state_reachable(value, kind: str) -> None:
    """Raise our message when ``value`` (recorder state) was defined in a loop or branch
    body that does not enclose the current point."""
    here = _current_block()
    if here is None:
        return
    try:
        defined = _defining_block(value)
    except AttributeError:  # not an MLIR value (disabled recorder, Python constant)
        return
    if defined is None or _encloses(defined, here):
        return
    raise ProfileBufferError(
        f"{kind} used at {user_location()} holds state last updated inside a dynamic loop or "
        f"branch that did not hand it back. This happens when the recorder is passed to a "
        f"helper that records inside a `for`/`if` body: the DSL carries locals rebound in "
        f"that body, not objects changed through an argument. Write `rec = helper(rec, ...)` "
        f"and end the helper with `return rec` (or call rec.stop(...) directly in the body)."
    )


class Ledger:
    """What one recorder (all its DSL versions) has staged, as traced."""

    def __init__(self, kind: str):
        self.kind = kind
        self.origin = user_location()
        self.block = _current_block()
        self.kernel = _kernel_of(self.block)
        self.pending = False
        _open_ledgers.append(self)

    def staged(self) -> None:
        self.pending = True

    def flushed(self) -> None:
        here = _current_block()
        if here is None or self.block is None or not _loop_between(here, self.block):
            self.pending = False


def _kernel_of(block):
    """The kernel (or function) op whose body holds ``block``, or None."""
    found = None
    for _, op in _ancestry(block):
        if op is not None:
            found = op.operation if hasattr(op, "operation") else op
    return found


def _check_kernel_end() -> None:
    kernel = _kernel_of(_current_block())
    # ledgers of this kernel only: a trace that failed earlier leaves its own behind
    mine = [led for led in _open_ledgers if kernel is not None and led.kernel == kernel]
    pending = [led for led in mine if led.pending]
    _open_ledgers.clear()
    if pending:
        where = ", ".join(f"{led.kind} created at {led.origin}" for led in pending)
        raise ProfileBufferError(
            f"{where}: records are staged after the last flush() outside a loop, so a warp "
            f"would exit with them unwritten and uncounted. Call rec.flush() once after the "
            f"recording loop, before the warp finishes (for RoleRecorder: probe.flush())."
        )


def _install_hook() -> bool:
    try:
        from cutlass.cutlass_dsl.cutlass import CuTeDSL
    except ImportError:  # pragma: no cover - other DSL layouts
        return False
    original = getattr(CuTeDSL, "generate_func_ret_op", None)
    if original is None or getattr(original, "_cute_prof_hook", False):
        return original is not None

    def generate_func_ret_op(self, *args, **kwargs):
        if _open_ledgers:
            _check_kernel_end()
        for callback in _kernel_end_callbacks:
            callback()
        return original(self, *args, **kwargs)

    generate_func_ret_op._cute_prof_hook = True
    CuTeDSL.generate_func_ret_op = generate_func_ret_op
    return True


def on_kernel_end(callback) -> None:
    """Call ``callback()`` where each kernel body has been traced, before its return is
    emitted (the insertion point is then the body's end)."""
    if callback not in _kernel_end_callbacks:
        _kernel_end_callbacks.append(callback)


def forget_open_ledgers() -> None:
    """Drop ledgers of a trace that failed before its kernel end (tests, retries)."""
    _open_ledgers.clear()


HOOKED = _install_hook()
