"""Exceptions and warnings of the spillway package."""

from __future__ import annotations

import warnings


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
