"""Exceptions and warnings of the spillway package."""

from __future__ import annotations

import warnings


# ---- the exception rule (docs/python.md, "Exceptions") --------------------------------------------
#
#   TypeError    a wrong kind of object or a wrong dtype
#   ValueError   a wrong value, shape or size
#   MemoryError  a budget too small for the job, or memory that could not be allocated
#   RuntimeError a CUDA error, or no usable GPU where one is needed
#
# Where a call raised another type before this rule, it raises a class deriving from both, for the
# 0.1 series; from 0.2 they are the plain types of the rule. Catch the rule's type.


class DTypeError(TypeError, ValueError):
    """A wrong dtype. A ``TypeError`` by spillway's rule; also a ``ValueError`` for the 0.1 series,
    because ``gram``, ``pack_bits``, ``from_packed_bytes`` and ``rk4`` raised ``ValueError`` for a
    dtype before (``similarity`` and ``matmul`` raised ``TypeError``)."""


class ArgumentTypeError(TypeError, ValueError):
    """A wrong kind of object (a string where a number belongs, a float step count, a device
    array beside a host array). A ``TypeError`` by spillway's rule; also a ``ValueError`` for the
    0.1 series, which these checks raised before."""


class BudgetError(MemoryError, ValueError):
    """The device-memory budget is too small for the job (the message says the minimum). A
    ``MemoryError`` by spillway's rule; also a ``ValueError`` for the 0.1 series, which the C++
    planners' ``logic_error`` became before."""


class HostFallbackWarning(UserWarning):
    """Emitted once per process when a job runs on the host because no GPU is usable."""


class Cancelled(KeyboardInterrupt):
    """Ctrl-C stopped a job: no further task started and those in flight were drained.

    ``report`` holds what had completed (``tasks_completed``, ``tasks_total``,
    ``completed_tasks``, ``devices``, ...); ``partial`` the partial result where one exists.
    """

    def __init__(self, message: str, report: dict, partial=None):
        super().__init__(message)
        self.report = report
        self.partial = partial


_warned_host = False


def warn_host_fallback(what: str, reason: str) -> None:
    global _warned_host
    if _warned_host:
        return
    _warned_host = True
    warnings.warn(
        f"spillway: no usable GPU ({reason}); {what} runs spillway's host implementation "
        "(multi-threaded C++, the same results); pass host_fallback=False to get an error instead",
        HostFallbackWarning,
        stacklevel=3,
    )
