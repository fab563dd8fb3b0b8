"""The kernel protocol shared by all samplers (BlackJAX-like)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

__all__ = ["SamplingAlgorithm"]


class SamplingAlgorithm(NamedTuple):
    """A sampler as three pure functions.

    ``init(key, data) -> state``; ``step(key, state, data) -> (state, info)``;
    ``trace(state, info) -> dict`` of arrays recorded per iteration (must contain ``tree`` and the
    scalar diagnostics ``log_lik``, ``log_prior``, ``n_leaves``, ``depth``, ``accepted``,
    ``move``).  None of them is jitted; the driver (:mod:`bdtree_jax.sampling`) does
    ``jit(vmap(scan(step)))``.
    """

    init: Callable[..., Any]
    step: Callable[..., Any]
    trace: Callable[..., Any]
