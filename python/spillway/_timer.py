"""spillway.timer and spillway.time: GPU time from CUDA events recorded on a stream (seed 004).

A kernel launch returns as soon as the launch is queued, so a host clock around it measures the
launch queue, not the kernel. Events are stamped by the GPU as the stream reaches them: the time
between two events is what the GPU took for the work enqueued between them on that stream.
"""

from __future__ import annotations

import statistics
import time as _time
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from . import _arrays, _core
from ._checks import integer

__all__ = ["Timing", "time", "timer"]


def _resolve(stream, device: Optional[int], who: str) -> Tuple[int, int]:
    """(stream handle, device) for `stream` (None: the legacy default stream of the current device)."""
    handle = _arrays.stream_handle(stream)  # a wrong kind of stream is a TypeError, GPU or not
    if handle is None:
        handle = 0
    if device is not None:
        device = integer(who, "device", device, "a GPU ordinal (int)", compat=False)
    if _core.device_count() == 0:
        raise RuntimeError(f"{who} needs a GPU (it times GPU work with CUDA events), and there is none: "
                           f"{_core.no_gpu_reason()}")
    if device is not None:
        if not 0 <= device < _core.device_count():
            raise ValueError(f"{who}: device {device} is not one of the {_core.device_count()} visible GPUs")
        return handle, device
    return handle, int(_core._stream_device(handle))


class timer:
    """GPU time of the work enqueued on a stream between :meth:`start` and :meth:`stop`, from two
    CUDA events (the C++ ``spillway::event_timer``'s method).

    ``stream``: an int handle (0: the legacy default stream), a CuPy / PyTorch / Numba stream
    object, or any object with ``__cuda_stream__``; default the legacy default stream of the
    current device. ``device``: the stream's GPU (default: asked of the stream; the current device
    for the default streams).

    As a context manager::

        with spillway.timer(s) as t:
            kernel[grid, block, s](x)     # enqueued on s, returns at once
        print(t.ms)                       # waits for the GPU to pass the stop event

    Entering records the start event, leaving records the stop event (neither waits); ``t.ms``
    waits for the stop event (the GIL released) and returns the milliseconds between them.
    ``t.ready()`` says without waiting whether the GPU has got there. The work must be enqueued on
    the timed stream, or on a stream that the timed stream waits for (the legacy default stream
    waits for every blocking stream). A single sample includes any launch gap in which the GPU
    waited for the host: use :func:`spillway.time` for a median after a warm-up.

    With no GPU, constructing a timer raises RuntimeError naming
    :func:`spillway.no_gpu_reason`.
    """

    def __init__(self, stream=None, *, device: Optional[int] = None):
        self.stream, self.device = _resolve(stream, device, "spillway.timer")
        self._events = _core._TimingEvents(self.device)
        self._state = "new"

    def start(self) -> "timer":
        """Records the start event on the stream (enqueued; does not wait). Returns the timer."""
        self._events.record_start(self.stream)
        self._state = "started"
        return self

    def stop(self) -> "timer":
        """Records the stop event on the stream (enqueued; does not wait). Returns the timer."""
        if self._state == "new":
            raise RuntimeError("spillway.timer: stop() before start()")
        self._events.record_stop(self.stream)
        self._state = "stopped"
        return self

    def __enter__(self) -> "timer":
        return self.start()

    def __exit__(self, *exc) -> bool:
        if self._state == "started":
            self.stop()
        return False

    def ready(self) -> bool:
        """True once the GPU has passed the stop event (never waits)."""
        return self._state == "stopped" and self._events.ready()

    @property
    def ms(self) -> float:
        """Milliseconds of GPU time between the start and stop events; waits for the stop event."""
        if self._state != "stopped":
            raise RuntimeError(f"spillway.timer: .ms read before the timer was {'started' if self._state == 'new' else 'stopped'}")
        return self._events.elapsed_ms()

    @property
    def seconds(self) -> float:
        """:attr:`ms` in seconds."""
        return self.ms / 1e3

    def __repr__(self) -> str:
        shown = f"{self.ms:.4f} ms" if self._state == "stopped" and self.ready() else self._state
        return f"spillway.timer(stream={self.stream:#x}, device={self.device}, {shown})"


@dataclass(frozen=True)
class Timing:
    """What :func:`spillway.time` measured, in milliseconds.

    ``median``: the median of ``samples``, the GPU time of each timed call of ``fn`` (CUDA events
    on the stream). ``host``: the host wall-clock time of each of those calls -- what a host clock
    around an asynchronous launch reports (the launch queue; seed 004's trap), kept for
    comparison. ``warmup``: the untimed calls made first. ``float(timing)`` is the median.
    """

    median: float
    samples: Tuple[float, ...]
    host: Tuple[float, ...]
    warmup: int
    stream: int
    device: int

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples)

    @property
    def host_median(self) -> float:
        return statistics.median(self.host)

    def __float__(self) -> float:
        return float(self.median)

    def __str__(self) -> str:
        return (f"{self.median:.4f} ms GPU (median of {len(self.samples)}, min {self.min:.4f}; host clock per call "
                f"{self.host_median:.4f} ms)")


def time(fn: Callable[[], object], *, repeats: int = 10, warmup: int = 1, stream=None,
         device: Optional[int] = None) -> Timing:
    """Times ``fn()`` on the GPU: ``warmup`` untimed calls, then ``repeats`` calls each between two
    CUDA events on ``stream``; returns a :class:`Timing` (``.median`` milliseconds, ``.samples``,
    ``.host``).

    ``fn`` takes no arguments and should enqueue its GPU work on ``stream`` (int handle, CuPy /
    PyTorch / Numba stream object or ``__cuda_stream__``; default the legacy default stream of the
    current device) and return without waiting. The calls are enqueued back to back and the
    events read once, after the last: the host waits only at the end. Where ``fn``'s GPU work is
    shorter than its host cost, the GPU idles between launches and the samples show that (as
    ``host`` will). A ``fn`` that synchronizes (a blocking spillway call, ``.get()``, ``.item()``)
    is timed too, its wait included.

    Blocks until the last timed call's work is done. With no GPU raises RuntimeError naming
    :func:`spillway.no_gpu_reason`.
    """
    if not callable(fn):
        raise TypeError(f"spillway.time: fn must be callable as fn(), got {type(fn).__name__}")
    repeats = integer("spillway.time", "repeats", repeats, "a positive integer", compat=False)
    warmup = integer("spillway.time", "warmup", warmup, "a non-negative integer", compat=False)
    if repeats < 1:
        raise ValueError(f"spillway.time: repeats must be >= 1, got {repeats}")
    if warmup < 0:
        raise ValueError(f"spillway.time: warmup must be >= 0, got {warmup}")
    handle, dev = _resolve(stream, device, "spillway.time")
    for _ in range(warmup):
        fn()
    pairs = [_core._TimingEvents(dev) for _ in range(repeats)]
    host = []
    for ev in pairs:
        ev.record_start(handle)
        t0 = _time.perf_counter()
        fn()
        host.append((_time.perf_counter() - t0) * 1e3)
        ev.record_stop(handle)
    samples = tuple(ev.elapsed_ms() for ev in pairs)
    return Timing(statistics.median(samples), samples, tuple(host), warmup, handle, dev)
