"""spillway: GPU work whose data does not fit, or should not sit, in device memory.

The Python binding of the header-only CUDA C++ library. What it offers today:

- ``spillway.gram(a, metric=..., sink=...)`` -- the binary Gram matrix A·Aᵀ (or A·Bᵀ) of a 0/1
  matrix: co-occurrence counts, Jaccard, cosine or Hamming, on the GPU's b1 tensor cores, out of
  core under a device-memory budget on one or several GPUs; dense, packed-triangle, SciPy
  condensed, per-row top-k or threshold -> ``scipy.sparse.coo_array`` results.
- ``spillway.pack_bits(a)`` / ``spillway.BitMatrix`` -- 0/1 data packed 32 columns per word (an
  ``np.load(..., mmap_mode="r")`` file is read in row blocks, never copied whole).
- ``spillway.stream(fn, inputs, outputs, budget=...)`` -- host arrays larger than the card through
  your own GPU code (CuPy, PyTorch or Numba) chunk by chunk, copies overlapped with compute.
- ``spillway.similarity(emb, sink="topk", k=32)`` -- all-pairs cosine / inner-product /
  Euclidean similarity of float32, float16 or bf16 rows (embeddings): every row's k nearest rows,
  all scores, or the pairs past a threshold, on the tensor cores, out of core.
- ``spillway.matmul(a, b)`` -- ``a @ b`` of host arrays larger than the card (float32, float64,
  float16, int8), streamed through one or several GPUs under a budget (spillway's out-of-core GEMM);
  ``spillway.pinned_empty(shape, dtype)`` for page-locked arrays its copies read at the full rate.
- ``spillway.ode`` -- ODE ensembles with the state on the device: ``lorenz_ensemble`` and
  ``mean_field`` (RK4; also as ``spillway.rk4``), ``lorenz_dopri5`` and ``mean_field_dopri5``
  (adaptive Dormand--Prince 5(4)).
- ``spillway.gpu_available()`` / ``spillway.no_gpu_reason()``: on a machine with no GPU the host
  implementations run instead, and spillway says so once (``spillway.HostFallbackWarning``).
- ``spillway.show_config()``: the version, the CUDA architectures compiled into this build, the
  CUDA runtime, the GPUs seen and which code each runs, whether the host fallback is in use.

Ctrl-C during a long job cancels it cleanly (the tasks in flight drain) and raises
``spillway.Cancelled``, a ``KeyboardInterrupt`` carrying the partial report.
"""

from __future__ import annotations

from . import _core, ode, rk4
from ._core import BitMatrix
from ._errors import Cancelled, HostFallbackWarning
from ._errors import ArgumentTypeError, BudgetError, DTypeError
from ._gram import from_packed_bytes, gram, pack_bits
from ._gufunc import gufunc, team_sum
from ._matmul import matmul, pinned_empty
from ._similarity import similarity
from ._stream import Chunk, stream
from ._report import Report
from ._timer import Timing, time, timer
from ._config import show_config

__version__: str = _core.__version__

__all__ = [
    "ArgumentTypeError",
    "BudgetError",
    "DTypeError",
    "Report",
    "Timing",
    "time",
    "timer",
    "BitMatrix",
    "Cancelled",
    "Chunk",
    "HostFallbackWarning",
    "__version__",
    "device_count",
    "from_packed_bytes",
    "gpu_available",
    "gram",
    "gufunc",
    "matmul",
    "no_gpu_reason",
    "pack_bits",
    "pinned_empty",
    "ode",
    "rk4",
    "show_config",
    "similarity",
    "stream",
    "team_sum",
]


def device_count() -> int:
    """The number of usable CUDA devices (0 on a machine without a GPU or driver)."""
    return _core.device_count()


def gpu_available() -> bool:
    """True when at least one CUDA device is usable; else see :func:`no_gpu_reason`."""
    return _core.device_count() > 0


def no_gpu_reason() -> str:
    """Why no GPU can be used, in words ("" when one can)."""
    return _core.no_gpu_reason()
