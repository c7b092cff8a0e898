"""Progress bars: tqdm when it is installed, nothing otherwise (``progress=False`` turns it off)."""

from __future__ import annotations

from ._report import complete


class _Bar:
    def __init__(self, desc: str):
        from tqdm.auto import tqdm

        self._bar = tqdm(total=0, desc=desc, unit="task", leave=False)

    def __call__(self, done: int, total: int) -> None:
        if self._bar.total != total:
            self._bar.total = total
        self._bar.n = done
        self._bar.refresh()

    def close(self) -> None:
        self._bar.close()


class _Callable:
    def __init__(self, fn):
        self._fn = fn

    def __call__(self, done: int, total: int) -> None:
        self._fn(done, total)

    def close(self) -> None:
        pass


def make_progress(progress, desc: str):
    """None, a tqdm bar, or the caller's own ``fn(done, total)``."""
    if progress is False or progress is None:
        return None
    if callable(progress):
        return _Callable(progress)
    try:
        return _Bar(desc)
    except ImportError:
        return None


def run_with_progress(call, progress, desc: str, report=None) -> dict:
    """``call(bar)`` -- a ``_core`` job taking the progress object -- with the bar ``progress`` asks
    for (closed whatever happens); ``report``, when a dict, is filled with the job's report.
    Returns the job's result."""
    bar = make_progress(progress, desc)
    try:
        res = call(bar)
    finally:
        if bar is not None:
            bar.close()
    complete(res["report"])
    if report is not None:
        report.clear()
        report.update(res["report"])
    return res
