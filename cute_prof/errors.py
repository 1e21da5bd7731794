"""Exceptions and warnings raised by cute_prof's host side.

Every bad input (a buffer that is not a profile buffer, a tag name that is not a string,
a trace path in a directory that does not exist, ...) raises :class:`ProfileBufferError`.
It subclasses ``ValueError`` so code written against the reference API, which raised
``ValueError``, keeps working. Its messages say what was wrong *and* what to do about it.

Conditions that leave a usable trace behind (records dropped because the buffer was full,
slots that were claimed but never written) are reported with :class:`ProfileWarning`
instead, so a profiling run never fails because it lost some records.

Owns the exception and warning types; it may import nothing else of cute_prof.
"""

from __future__ import annotations


class ProfileBufferError(ValueError):
    """A profile buffer, tag table, trace path or option that cute_prof cannot use."""


class ClockRateError(ProfileBufferError):
    """Clock-mode records were found but no SM clock rate is known to convert them.

    Fix: call ``cute_prof.device.clock_sync`` at the start and at the end of the kernel
    (so the buffer carries calibration pairs), or pass ``clock_hz=`` to the decoder."""


class ProfileWarning(UserWarning):
    """A trace was decoded but is missing records (overflow, incomplete or invalid slots).

    Filter it like any warning, e.g. ``warnings.simplefilter("error", ProfileWarning)``
    to make a CI run fail when a buffer was too small."""


class KernelHangError(RuntimeError):
    """A profiled launch was still running when its watchdog expired.

    ``report`` (a :class:`cute_prof.flight.FlightReport`) says where every recording warp
    was; the partial trace has been written. The CUDA context cannot be recovered while the
    kernel runs: end the process (``os._exit``), since a normal interpreter exit waits for
    the kernel forever."""

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report
