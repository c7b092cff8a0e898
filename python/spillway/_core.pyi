"""
spillway's C++ core (nanobind); use the spillway package, not this module
"""

from typing import Annotated

import numpy
from numpy.typing import NDArray


def device_count() -> int:
    """Usable CUDA devices (0 on a machine with no GPU or driver)."""

def no_gpu_reason() -> str:
    """Why no GPU is usable, in words ('' when one is)."""

class BitMatrix:
    """
    A 0/1 matrix packed 32 columns per word (spillway's layout: rows of ld_words uint32 words, ld_words a multiple of 32, padding zero, 128-byte aligned).
    """

    def __init__(self, rows: int, cols: int, pinned: bool = False) -> None:
        """
        An all-zero bit matrix; pinned=True page-locks it (GPU copies then run at full rate).
        """

    @property
    def rows(self) -> int: ...

    @property
    def cols(self) -> int: ...

    @property
    def ld_words(self) -> int: ...

    @property
    def shape(self) -> tuple: ...

    @property
    def nbytes(self) -> int: ...

    @property
    def pinned(self) -> bool: ...

    @property
    def words(self) -> Annotated[NDArray[numpy.uint32], dict(shape=(None, None))]:
        """The packed words as a (rows, ld_words) uint32 view (no copy)."""

    def unpack(self) -> object:
        """The 0/1 matrix as a (rows, cols) uint8 array."""

    def row_popcounts(self) -> object:
        """The number of ones in each row (int32)."""

    def __repr__(self) -> str: ...
