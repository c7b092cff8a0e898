"""Argument checks shared by every call, raising by spillway's rule (``_errors.py``): a wrong kind
of object is a TypeError (:class:`ArgumentTypeError` where the check raised ValueError before), a
wrong value a ValueError."""

from __future__ import annotations

import numbers

import numpy as np

from ._errors import ArgumentTypeError


def choice(who: str, name: str, value, choices) -> str:
    """A string naming one of `choices`."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{who}: {name} must be a string, one of {', '.join(map(repr, choices))}; "
                                f"got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{who}: {name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def is_integer(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def integer(who: str, name: str, value, what: str, compat: bool = True) -> int:
    """An integer (not bool, not float); `what` words the range for the message. Range checks are
    the caller's (ValueError). ``compat=False`` (arguments new in this version) raises a plain
    TypeError instead of :class:`ArgumentTypeError`."""
    if not is_integer(value):
        cls = ArgumentTypeError if compat else TypeError
        raise cls(f"{who}: {name} must be {what}, got {type(value).__name__} {value!r}")
    return int(value)


def real(who: str, name: str, value, compat: bool = True) -> float:
    """A real number (int, float, NumPy scalar; not bool, not a string). ``compat=False`` where
    the check raised TypeError before: a plain TypeError."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise (ArgumentTypeError if compat else TypeError)(f"{who}: {name} must be a real number, got {type(value).__name__} {value!r}")
    return float(value)


def same_place(who: str, a_dev: bool, b_dev: bool, names=("a", "b")) -> None:
    """Both device arrays or both host data."""
    if a_dev != b_dev:
        x, y = names
        raise ArgumentTypeError(f"{who}: {x} and {y} must both be device arrays or both host data; got {x} on the "
                                f"{'GPU' if a_dev else 'host'} and {y} on the {'GPU' if b_dev else 'host'}")
