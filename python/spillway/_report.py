"""spillway.Report: what a job did, as an object (``return_report=True``) as well as a dict (``report=``)."""

from __future__ import annotations

import time
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import List, Optional


@dataclass
class Report:
    """What one call did. ``gram``, ``similarity``, ``matmul``, ``stream`` and the ``rk4`` calls
    return ``(result, Report)`` with ``return_report=True``, and fill a dict with the same keys
    with ``report={}`` (:meth:`to_dict`).

    ``on_host``: the host implementation ran (no GPU). ``cancelled``: Ctrl-C stopped it.
    ``tasks_total`` / ``tasks_completed`` / ``completed_tasks``: the job's tasks (strips, blocks,
    chunks; one task for a call that is one launch). ``devices``: the GPU ordinals used, with
    ``tasks_per_device`` and ``bytes_per_device`` their shares (empty on the host);
    ``seconds_per_device`` (``stream`` only, empty for the other calls): each GPU's seconds from
    the start of its first chunk's work to the end of its last chunk's (CUDA events on the chunks'
    streams).
    ``elapsed_seconds``: host wall-clock seconds of the call -- for an asynchronous call (device
    input of ``gram``'s dense sinks and of ``rk4``) the time to enqueue the work, not the GPU's
    time: measure that with :class:`spillway.timer`. ``bytes_moved``: bytes copied between host
    and devices.
    """

    on_host: bool = False
    cancelled: bool = False
    tasks_total: int = 0
    tasks_completed: int = 0
    completed_tasks: List[int] = field(default_factory=list)
    devices: List[int] = field(default_factory=list)
    tasks_per_device: List[int] = field(default_factory=list)
    bytes_per_device: List[int] = field(default_factory=list)
    seconds_per_device: List[float] = field(default_factory=list)
    elapsed_seconds: float = 0.0
    bytes_moved: int = 0

    @classmethod
    def from_dict(cls, d: dict) -> "Report":
        """A Report from a report dict (keys it does not know are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_dict(self) -> dict:
        """The report as the dict ``report=`` is filled with."""
        return asdict(self)


def complete(rep: dict) -> dict:
    """Gives a report dict every key of :class:`Report` (the defaults for those the job does not
    fill), in place, so ``report=`` and ``Report.to_dict()`` agree; returns it."""
    for f in fields(Report):
        if f.name not in rep:
            rep[f.name] = f.default_factory() if f.default_factory is not MISSING else f.default
    return rep


def one_launch(start: float, device: Optional[int], on_host: bool = False, bytes_moved: int = 0) -> dict:
    """The report dict of a call that is one launch (rk4, gram's dense sinks of device input):
    one task, done when the call returns (enqueued, for device input), ``start`` a
    ``time.perf_counter()`` taken as the call began."""
    devs = [] if on_host or device is None else [int(device)]
    return {
        "on_host": bool(on_host),
        "cancelled": False,
        "tasks_total": 1,
        "tasks_completed": 1,
        "completed_tasks": [0],
        "devices": devs,
        "tasks_per_device": [1] if devs else [],
        "bytes_per_device": [int(bytes_moved)] if devs else [],
        "elapsed_seconds": time.perf_counter() - start,
        "bytes_moved": int(bytes_moved),
    }


def deliver(result, rep: dict, report: Optional[dict], return_report: bool):
    """Fills the caller's ``report`` dict and returns ``result`` or ``(result, Report)``."""
    complete(rep)
    if report is not None:
        report.clear()
        report.update(rep)
    if return_report:
        return result, Report.from_dict(rep)
    return result
