"""The rule prior with categorical features and missing-value bits (docs/categorical-missing.md).

A node's rule is a feature drawn uniformly among the features with an available rule (or, with
:attr:`~bdtree_jax.data.TreeData.feature_log_weight` ``log s`` set, DART's weights ``s_f`` renormalised
over them, :mod:`bdtree_jax.priors.feature_weights`), then an
ordered feature's cut (the weights of :mod:`bdtree_jax.priors`), or one of the
``2**(k-1) - 1`` two-way partitions of a categorical feature's ``k >= 2`` available levels
(uniformly; the left set never holds the smallest available level), then the missing-value bit
``Bernoulli(1/2)`` when the tree carries them.

Availability of a categorical feature's levels is kept per node as bit masks ``levels``
(N, F, W) uint32 (0 for ordered features): under ``valid_cuts="data"`` the levels of the node's
rows whose value is not missing, under ``valid_cuts="ancestors"`` the root's all levels narrowed
by the ancestors' rules.  Ordered features keep their ``[lo, hi)`` cut intervals, computed from
the rows whose value is not missing (:func:`~bdtree_jax.priors.node_bounds`); a categorical
feature's interval is empty.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._types import Array
from ..data import TreeData
from ..tree import Rule, Tree, active_nodes, max_depth_of
from .feature_weights import log_feature_prob, pick_feature
from .node_sums import reduce_subtrees

__all__ = [
    "general_rules", "categorical", "available_levels", "rule_available", "log_rule_prob_general",
    "log_tree_prior_general", "draw_rule_general", "check_general_rules",
]


def general_rules(data: TreeData) -> bool:
    """Whether ``data`` has categorical features or missing-value bits (static)."""
    return data.level_masks is not None or data.missing_code is not None


def categorical(data: TreeData) -> Array:
    """(F,) bool: which features are categorical."""
    return jnp.any(data.level_masks != 0, axis=-1)


def _unpack(masks: Array) -> Array:
    """(..., W) uint32 -> (..., 32 W) bool."""
    bits = (masks[..., None] >> jnp.arange(32, dtype=jnp.uint32)) & 1
    return bits.reshape(masks.shape[:-1] + (-1,)) == 1


def _pack(on: Array, words: int) -> Array:
    """(..., 32 W) bool -> (..., W) uint32."""
    shaped = on.reshape(on.shape[:-1] + (words, 32)).astype(jnp.uint32)
    return jnp.sum(shaped << jnp.arange(32, dtype=jnp.uint32), axis=-1, dtype=jnp.uint32)


def available_levels(tree: Tree, leaf_id: Array, data: TreeData) -> Array | None:
    """(N, F, W) uint32 available levels of every node (module docstring); None without
    categorical features.  Inactive slots hold 0."""
    if data.level_masks is None:
        return None
    words = tree.levels_left.shape[-1]
    n_nodes = tree.is_split.shape[-1]
    if data.cut_count is not None:  # ancestors: top-down over the levels of the heap
        root = data.level_masks[None]
        out = [root]
        for level in range(1, max_depth_of(tree) + 1):
            parents = slice(2 ** (level - 1) - 1, 2**level - 1)
            own = (tree.feature[parents][:, None] == jnp.arange(root.shape[1]))[..., None]  # (P, F, 1)
            s = tree.levels_left[parents][:, None, :]  # (P, 1, W)
            up = out[-1]
            left, right = jnp.where(own, up & s, up), jnp.where(own, up & ~s, up)
            kids = jnp.stack([left, right], axis=1).reshape((-1,) + root.shape[1:])
            out.append(jnp.where(jnp.repeat(tree.is_split[parents], 2)[:, None, None], kids, 0))
        return jnp.concatenate(out).astype(jnp.uint32)
    # data: the levels present among each node's rows (missing codes are no level)
    codes = data.bins
    level = jnp.arange(32 * words, dtype=codes.dtype)
    every = _unpack(data.level_masks)  # (F, 32 W) bool
    present = (codes[:, :, None] == level) & every  # (n, F, 32 W)
    per_leaf = jax.ops.segment_max(present.astype(jnp.int8), leaf_id, num_segments=n_nodes)  # (N, F, 32 W)
    per_node = reduce_subtrees(per_leaf, jnp.maximum) > 0
    return jnp.where(active_nodes(tree)[:, None, None], _pack(per_node, words), 0).astype(jnp.uint32)


def _popcount(masks: Array) -> Array:
    """(...,) int32 number of set bits of (..., W) uint32 masks."""
    return jnp.sum(jax.lax.population_count(masks), axis=-1).astype(jnp.int32)


def _lowest_bit(masks: Array) -> Array:
    """(..., W) the lowest set bit of each (..., W) mask (0 where empty)."""
    out, found = [], jnp.zeros(masks.shape[:-1], bool)
    for w in range(masks.shape[-1]):
        word = masks[..., w]
        low = word & (~word + jnp.uint32(1))
        out.append(jnp.where(found, jnp.uint32(0), low))
        found = found | (word != 0)
    return jnp.stack(out, axis=-1)


def _log_partitions(k: Array) -> Array:
    """log(2**(k-1) - 1) for k >= 2 (float32)."""
    k = jnp.maximum(k, 2).astype(jnp.float32)
    return (k - 1) * jnp.log(2.0) + jnp.log1p(-jnp.exp2(1.0 - k))


def rule_available(lo: Array, hi: Array, levels: Array | None) -> Array:
    """(..., F) bool: the feature has an available rule (an ordered cut, or >= 2 levels)."""
    ok = hi > lo
    if levels is not None:
        ok = ok | (_popcount(levels) >= 2)
    return ok


def _rule_terms(lo, hi, levels, feature, cut, nan_left, levels_left, data: TreeData):
    """log p_rule of a rule at nodes with ``lo, hi`` (..., F), ``levels`` (..., F, W) (broadcast
    over leading axes), and whether it is valid there."""
    avail = rule_available(lo, hi, levels)
    n_valid = jnp.sum(avail, axis=-1)
    take = lambda a: jnp.take_along_axis(a, feature[..., None], axis=-1)[..., 0]  # noqa: E731
    lo_f, hi_f = take(lo), take(hi)
    cum = data.cut_cumwidth
    B = cum.shape[-1]
    at = jnp.clip(jnp.stack([lo_f, hi_f, cut, cut + 1], axis=-1), 0, B - 1)
    v = cum.reshape(-1)[feature.astype(jnp.int32)[..., None] * B + at]
    ordered_ok = (cut >= lo_f) & (cut < hi_f)
    ordered = jnp.log(jnp.where(ordered_ok, v[..., 3] - v[..., 2], 1.0)) - jnp.log(
        jnp.where(ordered_ok, v[..., 1] - v[..., 0], 1.0))
    term, ok = ordered, ordered_ok
    if levels is not None:
        a = jnp.take_along_axis(levels, feature[..., None, None], axis=-2)[..., 0, :]  # (..., W)
        s = levels_left
        k = _popcount(a)
        cat_ok = (k >= 2) & jnp.all((s & ~a) == 0, axis=-1) & jnp.any(s != 0, axis=-1) & jnp.all(
            (s & _lowest_bit(a)) == 0, axis=-1)
        is_cat = categorical(data)[feature]
        term = jnp.where(is_cat, -_log_partitions(k), term)
        ok = jnp.where(is_cat, cat_ok, ok)
    if data.feature_log_weight is None:
        term = term - jnp.log(jnp.maximum(n_valid, 1).astype(jnp.float32))
    else:  # DART: s_f over the available features' total (-inf where f is not available: ok is False)
        term = term + log_feature_prob(avail, data.feature_log_weight, feature)
    if nan_left is not None:
        term = term - jnp.log(2.0)
    return term, ok & (n_valid > 0)


def log_rule_prob_general(lo: Array, hi: Array, levels: Array | None, rule: Rule, data: TreeData) -> Array:
    """log p_rule(rule | node) from the node's ``lo, hi`` (F,) and ``levels`` (F, W); -inf if the
    rule is not available there."""
    term, ok = _rule_terms(lo, hi, levels, jnp.asarray(rule.feature, jnp.int32), jnp.asarray(rule.cut, jnp.int32),
                           rule.nan_left, rule.levels_left, data)
    return jnp.where(ok, term, -jnp.inf)


def log_tree_prior_general(tree: Tree, lo: Array, hi: Array, levels: Array | None, data: TreeData) -> Array:
    """log p(T) under the CGM98 structure prior with the rule prior of the module docstring."""
    split_prob = data.split_prob
    active = active_nodes(tree)
    can = jnp.any(rule_available(lo, hi, levels), axis=-1) & (split_prob > 0)
    term, ok = _rule_terms(lo, hi, levels, tree.feature.astype(jnp.int32), tree.cut.astype(jnp.int32),
                           tree.nan_left, tree.levels_left, data)
    split = jnp.log(jnp.where(can, split_prob, 1.0)) + term
    leaf = jnp.log1p(-jnp.where(can, split_prob, 0.0))
    invalid = tree.is_split & ~(ok & can)
    terms = jnp.where(tree.is_split, jnp.where(invalid, -jnp.inf, split), leaf)
    return jnp.sum(jnp.where(active, terms, 0.0))


def draw_rule_general(key, u_feature: Array, u_cut: Array, u_nan: Array, lo: Array, hi: Array,
                      levels: Array | None, data: TreeData, nan_bits: bool) -> Rule:
    """A rule from p_rule at a node with ``lo, hi`` (F,) and ``levels`` (F, W) (module docstring):
    the feature (uniform, or by DART's weights) and an ordered cut by inverse CDF of ``u_feature``,
    ``u_cut``; a categorical feature's left set uniform over the non-empty subsets of its available
    levels but the smallest (random words from ``key``, redrawn while empty); the bit ``u_nan < 1/2``."""
    from .tree_prior import draw_cut

    available = rule_available(lo, hi, levels)
    if data.feature_log_weight is None:
        counts = jnp.cumsum(available.astype(jnp.int32))
        f = jnp.argmax(counts > jnp.floor(u_feature * counts[-1]).astype(jnp.int32)).astype(jnp.int32)
    else:  # DART: by the weights among the available features
        f = pick_feature(available, data.feature_log_weight, u_feature)
    cut = draw_cut(data.cut_cumwidth, f, lo[f], jnp.maximum(hi[f], lo[f] + 1), u_cut)
    cut = jnp.where(hi[f] > lo[f], cut, 0)
    mask = None
    if levels is not None:
        a = levels[f]
        eligible = a & ~_lowest_bit(a)

        def body(carry):
            k, _ = carry
            k, sub = jax.random.split(k)
            return k, jax.random.bits(sub, eligible.shape, jnp.uint32) & eligible

        _, mask = jax.lax.while_loop(lambda c: jnp.all(c[1] == 0) & jnp.any(eligible != 0), body,
                                     (key, jnp.zeros_like(eligible)))
        is_cat = categorical(data)[f]
        mask = jnp.where(is_cat, mask, jnp.uint32(0))
        cut = jnp.where(is_cat, 0, cut)
    nan_left = (u_nan < 0.5) if nan_bits else None
    return Rule(f, cut.astype(jnp.int32), nan_left, mask)


def check_general_rules(data: TreeData, prior_structure: str, who: str, *, boxes: bool = False) -> None:
    """Refuse what the general rules do not support yet (a ``ValueError`` naming the option).

    ``boxes``: whether the caller's sampler honours box constraints (the general CGM chain's
    :func:`~bdtree_jax.kernels._moves.score` does)."""
    if not general_rules(data):
        return
    if data.box_side is not None and not boxes:
        raise ValueError(f"{who}: box constraints are not supported with categorical features or missing values yet "
                         "(method='cgm' supports them).")
    if prior_structure != "cgm":
        raise ValueError(f"{who}: structure={prior_structure!r} is not supported with categorical features or "
                         "missing values yet; use structure='cgm'.")
