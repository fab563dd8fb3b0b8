"""The acceptance rates of a tempered run's swaps between rungs, from its recorded swap arrays
(:mod:`bdtree_jax.kernels.tempering` records them; :meth:`~bdtree_jax.posterior.Posterior.swap_rates`
and :func:`bdtree_jax.diagnostics.swap_rates` read them)."""

from __future__ import annotations

import numpy as np

__all__ = ["swap_rates"]


def swap_rates(swap_pair: np.ndarray, swap_accepted: np.ndarray, num_temperatures: int) -> np.ndarray:
    """(R, R) acceptance rate of swaps proposed between rungs ``i < j`` (upper triangle; NaN where
    never proposed) from the recorded ``swap_pair`` / ``swap_accepted`` arrays (any shape)."""
    R = int(num_temperatures)
    pair = np.asarray(swap_pair).ravel()
    acc = np.asarray(swap_accepted).ravel().astype(float)
    proposed = np.bincount(pair, minlength=R * R).reshape(R, R).astype(float)
    accepted = np.bincount(pair, weights=acc, minlength=R * R).reshape(R, R)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(proposed > 0, accepted / proposed, np.nan)
