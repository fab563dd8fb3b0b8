"""The kernel protocol shared by all samplers (BlackJAX-like)."""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

__all__ = ["SamplingAlgorithm", "with_config"]


class SamplingAlgorithm(NamedTuple):
    """A sampler as three pure functions.

    ``init(key, data) -> state``; ``step(key, state, data) -> (state, info)``;
    ``trace(state, info) -> dict`` of arrays recorded per iteration (must contain ``tree`` and the
    scalar diagnostics ``log_lik``, ``log_prior``, ``n_leaves``, ``depth``, ``accepted``,
    ``move``).  None of them is jitted; the driver (:mod:`bdtree_jax.driver`) does
    ``jit(vmap(scan(step)))``.

    ``draw(key) -> randomness`` (optional): when given, ``step`` takes that randomness in place
    of the key, and the driver draws it for a whole block of steps in one vectorized call outside
    the loop (a PRNG call inside a cheap step costs as much as the step on CPU).

    ``steps_per_pass`` (default 1): iterations the driver's loop runs per pass.  For steps of a few
    microseconds the loop's own cost per pass is a visible share: 2 saves 6-10 % of CGM's time
    per iteration on CPU but compiles the step three times (two in the pass, one for an odd last
    step), about 1.2 s more per fit, so no kernel uses it today.  The draws do not depend on it.
    """

    init: Callable[..., Any]
    step: Callable[..., Any]
    trace: Callable[..., Any]
    draw: Callable[..., Any] | None = None
    steps_per_pass: int = 1


def with_config(init, step, trace, draw, config, **static) -> SamplingAlgorithm:
    """The :class:`SamplingAlgorithm` of kernel functions that take their static ``config`` (and
    any other ``static`` keywords, given to ``draw``) last: ``init(key, data, config)``,
    ``step(draws, state, data, config)``, ``trace(state, info, config)``, ``draw(key, config,
    **static)``."""
    return SamplingAlgorithm(functools.partial(init, config=config), functools.partial(step, config=config),
                             functools.partial(trace, config=config), functools.partial(draw, config=config, **static))
