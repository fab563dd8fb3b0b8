"""Argument checks shared by the configuration classes, estimators and entry points: they run
before anything is compiled and name the argument in their error."""

from __future__ import annotations

import numpy as np


def is_int(v) -> bool:
    """True for a Python or NumPy integer (``bool`` excluded)."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def check_one_of(name: str, value, choices: tuple) -> None:
    """Raise ``ValueError("{name} must be one of {choices}; got {value!r}.")`` unless ``value`` is
    one of ``choices`` (an array or other value whose ``in`` test fails counts as not one of them)."""
    try:
        ok = bool(value in choices)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be one of {choices}; got {value!r}.")
