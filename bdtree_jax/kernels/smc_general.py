"""A particle's grow step (:func:`bdtree_jax.kernels.smc._advance`) with categorical features and
missing values (docs/categorical-missing.md), for SMC and Particle Gibbs.

The same node-wise decision as for numeric data, with the rule prior of
:mod:`bdtree_jax.priors.categorical`: a rule may be a set of levels of a categorical feature, and
every rule carries the side missing values go to (``nan_left``) when the tree has those bits.

* ``"prior"`` proposal: stop with probability ``1 - p_j``, else a rule drawn by
  :func:`~bdtree_jax.priors.categorical.draw_rule_general` (uniform feature among those with an
  available rule, a cut by the prior's weights or a uniform two-way partition of the available
  levels, the bit ``Bernoulli(1/2)``); the increment is ``beta ΔL`` as for numeric data.
* ``"posterior"`` (one-step optimal): every rule is scored from one histogram of the node's rows
  per feature (a missing value in a bin of its own): an ordered feature's cuts as for numeric
  data, a categorical feature's ``2**(k-1) - 1`` partitions of its ``k`` available levels (the
  node's rows summed by the rank of their level among the available ones, then every subset of
  the ranks but the smallest), each with both missing-value bits.  The subsets share the
  candidate axis with the cuts: ``max(n_bins, 2**(R))`` candidates per feature with
  ``R = min(n_bins, MAX_POSTERIOR_LEVELS) - 1`` (``n_bins``, static, is the largest code + 1,
  levels included).  A node where a categorical feature has more available levels than that
  cannot be enumerated: its increment is NaN (the methods refuse features of more than
  :data:`MAX_POSTERIOR_LEVELS` levels before compiling, naming ``proposal="prior"``).

The grown particle is re-scored whole (:func:`bdtree_jax.kernels.cgm_general.score`), which gives
the children's statistics, cut intervals and available levels (from the rows with a value under
``valid_cuts="data"``, from the ancestors' rules under ``"ancestors"``).  A particle's randomness
is the numeric step's three uniforms plus a key (:func:`bdtree_jax.kernels.smc.move_draws`): the
missing-value bit from ``fold_in(key, 0)``, the level set from ``fold_in(key, 1)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors import log_cut_probs
from ..priors.categorical import (
    _log_partitions, _pack, _popcount, _unpack, categorical, draw_rule_general, rule_available,
)
from ..tree import Rule, Tree, grow, leaf_nodes, rule_at
from . import cgm

__all__ = ["MAX_POSTERIOR_LEVELS", "advance", "rule_masses"]

#: The most levels a categorical feature may have for the one-step-optimal proposal, which scores
#: every partition of a node's available levels (``2**(k-1) - 1`` of them).
MAX_POSTERIOR_LEVELS = 8


def _ranks(n_bins: int) -> int:
    """Ranks of available levels (all but the smallest) the subset table covers: codes are below
    ``n_bins``, so no feature has more than ``n_bins`` levels."""
    return max(min(n_bins, MAX_POSTERIOR_LEVELS) - 1, 1)


def rule_masses(state: cgm.CGMState, node: Array, data: TreeData, n_bins: int):
    """Every rule at ``node``: its split gain ``ΔL`` and ``log p_rule`` (``-inf`` where it is not
    available), both (F, C, B) with ``C`` candidates per feature (an ordered feature's cut ``c``,
    or a categorical feature's subset ``c`` of its available levels' ranks: bit ``r - 1`` set
    sends the level of rank ``r`` left; the smallest, rank 0, stays right) and ``B``
    missing-value bits (index 1: missing values left; one index without bits); the (F, 32 W) rank
    of every available level (-1 elsewhere; None without categorical features); and whether a
    categorical feature has more available levels at the node than the table covers.
    ``n_bins``: the largest code (bin or level) + 1."""
    n, F = data.bins.shape
    codes = data.bins
    words = 0 if data.level_masks is None else data.level_masks.shape[-1]
    n_levels = 32 * words
    V = max(n_bins, n_levels)  # value bins; bin V holds the missing values
    missing = jnp.zeros(codes.shape, bool) if data.missing_code is None else codes == data.missing_code
    rows = jnp.where((state.leaf_id == node)[:, None], data.point_stats, 0.0)  # (n, S)
    slot = jnp.where(missing, V, jnp.clip(codes, 0, V - 1)) + jnp.arange(F, dtype=codes.dtype) * (V + 1)
    hist = jax.ops.segment_sum(
        jnp.broadcast_to(rows[:, None, :], (n, F, rows.shape[1])).reshape(n * F, -1), slot.reshape(-1),
        num_segments=F * (V + 1),
    ).reshape(F, V + 1, -1)
    lo, hi = state.lo[node], state.hi[node]
    levels = None if state.levels is None else state.levels[node]
    n_valid = jnp.sum(rule_available(lo, hi, levels))
    base = -jnp.log(jnp.maximum(n_valid, 1).astype(jnp.float32))
    if data.missing_code is not None:
        base = base - jnp.log(2.0)
    R = _ranks(n_bins)
    C = max(n_bins, 2**R) if words else n_bins
    cut = jnp.arange(C)
    pad = lambda a, v: jnp.pad(a, ((0, 0), (0, C - a.shape[1])) + ((0, 0),) * (a.ndim - 2), constant_values=v)  # noqa: E731
    left = pad(jnp.cumsum(hist[:, :n_bins], axis=1), 0.0)  # ordered: codes <= cut
    valid = (cut[None, :] >= lo[:, None]) & (cut[None, :] < hi[:, None])
    log_rule = pad(base + log_cut_probs(data.cut_cumwidth, lo, hi)[:, :n_bins], -jnp.inf)
    rank, too_many = None, jnp.bool_(False)
    if words:
        is_cat = categorical(data)
        avail = _unpack(levels)  # (F, 32 W)
        rank = jnp.where(avail, jnp.cumsum(avail, axis=-1) - 1, -1)
        # the node's rows by the rank of their level (1 .. R), then every subset of those ranks
        by_rank = jnp.einsum("frl,fls->frs", (rank[:, None, :] == jnp.arange(1, R + 1)[None, :, None]).astype(
            hist.dtype), hist[:, :n_levels])
        subsets = (np.arange(C)[:, None] >> np.arange(R)[None, :]) & 1  # (C, R); beyond 2**R: invalid
        left = jnp.where(is_cat[:, None, None], jnp.einsum("tr,frs->fts", jnp.asarray(subsets, hist.dtype), by_rank),
                         left)
        k = _popcount(levels)  # (F,)
        cat_valid = (cut[None, :] > 0) & (cut[None, :] < jnp.left_shift(1, jnp.clip(k - 1, 0, R))[:, None])
        valid = jnp.where(is_cat[:, None], cat_valid & (k[:, None] >= 2), valid)
        log_rule = jnp.where(is_cat[:, None], (base - _log_partitions(k))[:, None], log_rule)
        too_many = jnp.any(is_cat & (k > R + 1))
    if data.missing_code is not None:
        left = jnp.stack([left, left + hist[:, V][:, None, :]], axis=2)
    else:
        left = left[:, :, None, :]
    gain = data.likelihood.split_gain(state.stats, leaf_nodes(state.tree), node, left)
    B = left.shape[2]
    log_rule = jnp.where(valid, log_rule, -jnp.inf)
    return gain, jnp.broadcast_to(log_rule[..., None], log_rule.shape + (B,)), rank, too_many


def advance(uniforms: Array, key: PRNGKey, state: cgm.CGMState, node: Array, has: Array, data: TreeData, config,
            n_bins: int, reference: Tree | None = None, is_reference: Array | bool = False):
    """:func:`bdtree_jax.kernels.smc._advance` for categorical features and missing values
    (module docstring) at the particle's next node ``node`` (``has``: it has one).  Returns
    (state, last, log increment)."""
    from .cgm_general import score

    p = data.split_prob[node]
    beta = state.beta
    tree = state.tree
    nan_bits = tree.nan_left is not None
    levels = None if state.levels is None else state.levels[node]
    if config.proposal == "prior":
        split = has & (uniforms[0] < p)
        rule = draw_rule_general(jax.random.fold_in(key, 1), uniforms[1], uniforms[2],
                                 jax.random.uniform(jax.random.fold_in(key, 0)), state.lo[node], state.hi[node],
                                 levels, data, nan_bits)
    else:
        gain, log_rule, rank, too_many = rule_masses(state, node, data, n_bins)
        F, C, B = gain.shape
        rule_mass = jnp.where(jnp.isneginf(log_rule), -jnp.inf, jnp.log(p) + log_rule + beta * gain)
        log_mass = jnp.concatenate([jnp.log1p(-p)[None], rule_mass.reshape(-1)])
        log_total = jax.nn.logsumexp(log_mass)
        cdf = jnp.cumsum(jnp.exp(log_mass - log_total))
        choice = jnp.minimum(jnp.sum(uniforms[0] * cdf[-1] >= cdf), log_mass.shape[0] - 1)
        split = has & (choice > 0)
        flat = jnp.maximum(choice - 1, 0)
        f = (flat // (C * B)).astype(jnp.int32)
        c = (flat // B) % C
        is_cut, mask = True, None
        if rank is not None:  # the levels whose rank r >= 1 has bit r - 1 set in subset c
            is_cut = ~categorical(data)[f]
            r = rank[f]
            subset = (r >= 1) & ((c >> jnp.clip(r - 1, 0, 31)) & 1 == 1)
            mask = jnp.where(is_cut, jnp.uint32(0), _pack(subset, tree.levels_left.shape[-1]))
        rule = Rule(f, jnp.where(is_cut, c, 0).astype(jnp.int32), (flat % B == 1) if nan_bits else None, mask)
    if reference is not None:
        split = jnp.where(is_reference, has & reference.is_split[node], split)
        rule = Rule(*(None if a is None else jnp.where(is_reference, r, a).astype(a.dtype)
                      for a, r in zip(rule, rule_at(reference, node))))
    grown = score(grow(tree, node, rule.feature, rule.cut, rule), data, config.cgm, beta)
    grown = grown._replace(leaf_id=grown.leaf_id.astype(state.leaf_id.dtype))
    if config.proposal == "prior":
        # valid_cuts="ancestors": a split leaving a leaf below min_leaf_size rows weighs 0
        truncated = jnp.where(jnp.isneginf(grown.log_prior), -jnp.inf, 0.0) if data.cut_count is not None else 0.0
        increment = jnp.where(split, beta * (grown.log_lik - state.log_lik) + truncated, 0.0)
    else:
        increment = jnp.where(has, jnp.where(too_many, jnp.nan, log_total), 0.0)
    new = jax.tree.map(lambda a, b: jnp.where(split, a, b), grown, state)
    n = tree.is_split.shape[-1]
    return new, jnp.where(has, node, n).astype(jnp.int32), increment.astype(jnp.float32)


def n_codes(grid) -> int:
    """The largest code + 1 of a split grid's features (bins, levels): the kernels' static
    ``n_bins`` for the one-step-optimal proposal."""
    count = getattr(grid, "level_count", None)
    return max(int(grid.n_cuts.max()) + 1, int(np.max(count, initial=0)) if count is not None else 0)


def check_data(data: TreeData, grid, proposal: str, structure: str, names, who: str) -> None:
    """Refuse, before anything is compiled, what SMC and Particle Gibbs do not sample with
    categorical features or missing values (a ``ValueError`` naming the option): box constraints,
    another structure than CGM98's, and, for the one-step-optimal proposal, a categorical feature
    of more than :data:`MAX_POSTERIOR_LEVELS` levels (naming the column and ``proposal="prior"``)."""
    from ..priors.categorical import check_general_rules, general_rules

    if not general_rules(data):
        return
    check_general_rules(data, structure, who)
    count = np.asarray(getattr(grid, "level_count", None) if getattr(grid, "level_count", None) is not None else [0])
    if proposal != "prior" and count.max(initial=0) > MAX_POSTERIOR_LEVELS:
        f = int(np.argmax(count))
        col = repr(names[f]) if names is not None else str(f)
        raise ValueError(
            f"{who}: proposal={proposal!r} (the one-step-optimal proposal) scores every partition of a categorical "
            f"feature's levels and supports at most {MAX_POSTERIOR_LEVELS} levels; column {col} has {int(count[f])}. "
            "Use proposal='prior', which draws level sets from the prior for any number of levels, or group rare "
            "levels.")
