"""Temporary re-export; removed when the particle/wu/bart twins merge.

The general-rule CGM chain (categorical features, missing values) is :mod:`bdtree_jax.kernels.cgm`
(the data decide, statically), its scoring :func:`~bdtree_jax.kernels._moves.score`,
:func:`~bdtree_jax.kernels._moves.rescore` and :func:`~bdtree_jax.kernels._moves.targets`; ``draw``
is :func:`bdtree_jax.kernels.cgm.draw` with ``general_rules=True`` and ``step`` is
:func:`bdtree_jax.kernels.cgm.step_with_uniforms`.
"""

from __future__ import annotations

import functools

from . import cgm
from ._moves import rescore, score, targets
from .cgm import init, step_with_uniforms as step

__all__ = ["init", "draw", "step", "score", "rescore", "targets"]

draw = functools.partial(cgm.draw, general_rules=True)
