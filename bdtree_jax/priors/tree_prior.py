"""The tree prior: its hyperparameters (:class:`TreePrior`), its numbers for the kernels
(:func:`split_probability`, :func:`pinball_tables`), its density (:func:`log_tree_prior`, the rule
prior :func:`log_rule_prob`, :func:`log_cut_probs`, :func:`splittable`) and draws from it
(:func:`draw_cut`, :func:`regrow_subtree`).  The prior itself is described in
:mod:`bdtree_jax.priors`.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array
from ..data import SPLIT_PRIORS, VALID_CUTS
from ..tree import MAX_DEPTH, Tree, active_nodes, in_subtree, leaf_nodes, max_depth_of, node_depths
from .boxes import violates_boxes
from .feature_weights import log_feature_prob, pick_feature
from .pinball import (
    PinballTables, check_cgm_structure, log_pinball_structure, pinball_log_shape_parts, pinball_log_size, split_mask,
)
from .valid_cuts import ancestor_level_bounds, level_bounds
from .._validate import check_one_of, is_int

__all__ = [
    "STRUCTURES", "TreePrior", "split_probability", "pinball_tables", "log_rule_prob", "log_cut_probs", "draw_cut",
    "splittable", "log_tree_prior", "regrow_subtree",
]

#: Tree-structure priors: CGM98's depth-dependent split probabilities, or the pinball prior.
STRUCTURES = ("cgm", "pinball")


def _slots_text(max_depth: int) -> str:
    """``2**(max_depth+1) - 1`` written out for an error message, or its order of magnitude when the
    number would have thousands of digits (``max_depth`` read from a file can be anything)."""
    if max_depth < 200:
        return f"{2**(max_depth + 1) - 1:,}"
    return f"about 10**{int((max_depth + 1) * 0.30103)}"


@dataclass(frozen=True)
class TreePrior:
    """Hyperparameters of the tree prior (static).

    ``split_prior``: how a rule's cut is chosen among a feature's valid cuts, ``"uniform"``
    (CGM98) or ``"range"`` (proportional to the gap width in the feature's units; see
    :mod:`bdtree_jax.priors`).

    ``valid_cuts``: ``"data"`` (CGM98: the cuts that split the node's rows) or ``"ancestors"``
    (BART: the cuts inside the range its ancestors' rules leave; ``min_leaf_size`` is then a
    truncation, every leaf holds at least that many rows; :mod:`bdtree_jax.priors`).

    ``structure``: ``"cgm"`` (the default: a node at depth ``d`` splits with probability
    ``alpha (1 + d)**-beta``) or ``"pinball"`` (:mod:`bdtree_jax.priors`: ``K - 1 ~ Poisson(pinball_rate)``
    truncated at ``pinball_max_leaves``, each split's left leaf count ``k_L - 1 ~
    BetaBinomial(k - 2, pinball_balance, pinball_balance)``; ``alpha`` and ``beta`` are then not
    used).  ``pinball_max_leaves`` (``K_max``): None for the heap's capacity ``2**max_depth``.
    """

    max_depth: int = 6
    alpha: float = 0.95
    beta: float = 1.0
    min_leaf_size: int = 1
    split_prior: str = "uniform"
    structure: str = "cgm"
    pinball_rate: float = 3.0
    pinball_balance: float = 1.0
    pinball_max_leaves: int | None = None
    valid_cuts: str = "data"

    def __post_init__(self):
        if not is_int(self.max_depth) or self.max_depth < 1:
            raise ValueError(f"max_depth must be an integer >= 1; got {self.max_depth!r}.")
        if self.max_depth > MAX_DEPTH:
            raise ValueError(
                f"max_depth={self.max_depth} is over the cap of {MAX_DEPTH}: a tree is stored as a padded heap of "
                f"2**(max_depth+1) - 1 slots ({_slots_text(self.max_depth)} here, {2**(MAX_DEPTH + 1) - 1:,} at "
                f"{MAX_DEPTH}) in every chain's state, particle and kept draw, so its memory doubles with each "
                f"level; a tree of depth {MAX_DEPTH} already holds up to {2**MAX_DEPTH:,} leaves.  Lower max_depth "
                f"to at most {MAX_DEPTH} (docs/memory.md).")
        for name, ok, what in (("alpha", lambda v: 0.0 < v < 1.0, "in (0, 1)"), ("beta", lambda v: v >= 0.0, ">= 0")):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not (
                    np.isfinite(v) and ok(float(v))):
                raise ValueError(f"{name} must be {what}, a finite number; got {v!r}.")
        if not is_int(self.min_leaf_size) or \
                self.min_leaf_size < 1:
            raise ValueError(f"min_leaf_size must be an integer >= 1; got {self.min_leaf_size!r}.")
        check_one_of("split_prior", self.split_prior, SPLIT_PRIORS)
        check_one_of("valid_cuts", self.valid_cuts, VALID_CUTS)
        check_one_of("structure", self.structure, STRUCTURES)
        for name in ("pinball_rate", "pinball_balance"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not (
                    np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0; got {v!r}.")
        k = self.pinball_max_leaves
        if k is not None:
            if not is_int(k) or k < 1:
                raise ValueError(f"pinball_max_leaves must be None or an integer >= 1; got {k!r}.")
            if k > 2**self.max_depth:
                raise ValueError(
                    f"pinball_max_leaves={k} does not fit the padded tree: max_depth={self.max_depth} holds at most "
                    f"2**max_depth = {2**self.max_depth} leaves; raise max_depth or lower pinball_max_leaves.")

    @property
    def max_leaves(self) -> int:
        """The pinball prior's ``K_max``: ``pinball_max_leaves``, or ``2**max_depth`` if None."""
        return 2**self.max_depth if self.pinball_max_leaves is None else int(self.pinball_max_leaves)


def pinball_tables(prior: TreePrior) -> PinballTables:
    """The :class:`PinballTables` of a ``structure="pinball"`` prior (numpy, float32)."""
    capacity = 2**prior.max_depth
    d = node_depths(prior.max_depth)
    return PinballTables(
        (d < prior.max_depth).astype(np.float32),
        pinball_log_size(float(prior.pinball_rate), prior.max_leaves, capacity).astype(np.float32),
        *(a.astype(np.float32) for a in pinball_log_shape_parts(float(prior.pinball_balance), capacity)),
    )


def split_probability(prior: TreePrior) -> np.ndarray:
    """(N,) ``alpha (1+d)^-beta`` per heap slot, 0 at ``max_depth``."""
    d = node_depths(prior.max_depth)
    p = prior.alpha * (1.0 + d) ** (-prior.beta)
    return np.where(d < prior.max_depth, p, 0.0).astype(np.float32)


def log_rule_prob(lo: Array, hi: Array, feature: Array, cut: Array, cumwidth: Array,
                  log_weight: Array | None = None) -> Array:
    """log p_rule(feature, cut | node) from the node's ``lo, hi`` (F,) and the cut weights
    ``cumwidth`` (F, B) (:attr:`~bdtree_jax.data.TreeData.cut_cumwidth`); ``-inf`` if invalid.
    ``log_weight`` (F,): the feature's probability is ``s_f / sum of the available s_k``
    (:mod:`~bdtree_jax.priors.feature_weights`) instead of uniform."""
    width = jnp.maximum(hi - lo, 0)
    n_valid_features = jnp.sum(width > 0)
    B = cumwidth.shape[-1]
    # one gather of the four cumulative weights: node interval [lo, hi) and the cut [c, c + 1)
    at = jnp.clip(jnp.stack([lo[feature], hi[feature], cut, cut + 1]), 0, B - 1)
    v = cumwidth.reshape(-1)[jnp.asarray(feature, jnp.int32) * B + at]
    ok = (cut >= lo[feature]) & (cut < hi[feature])
    log_feature = -jnp.log(n_valid_features) if log_weight is None else log_feature_prob(width > 0, log_weight, feature)
    return jnp.where(ok, log_feature + jnp.log(v[3] - v[2]) - jnp.log(v[1] - v[0]), -jnp.inf)


def log_cut_probs(cumwidth: Array, lo: Array, hi: Array) -> Array:
    """(F, B - 1) ``log p(cut c | feature f, node)`` of every cut ``c`` of every feature, from the
    node's ``lo, hi`` (F,); meaningful only for ``lo[f] <= c < hi[f]`` (mask the rest)."""
    total = jnp.take_along_axis(cumwidth, hi[:, None], axis=1) - jnp.take_along_axis(cumwidth, lo[:, None], axis=1)
    return jnp.log(jnp.diff(cumwidth, axis=1)) - jnp.log(total)


def draw_cut(cumwidth: Array, feature: Array, lo: Array, hi: Array, u: Array) -> Array:
    """Inverse-CDF draw of a cut of ``feature`` in ``[lo, hi)``, cut ``c`` with probability
    ``(cumwidth[f, c + 1] - cumwidth[f, c]) / (cumwidth[f, hi] - cumwidth[f, lo])``.

    ``feature, lo, hi, u`` share one shape (a node, or a batch of nodes); ``u`` in [0, 1).  The
    cut is the largest ``c`` with ``cumwidth[f, c] - cumwidth[f, lo] <= u * total``, clipped into
    ``[lo, hi - 1]`` (rounding, NaN).  With the uniform table (``arange``) this is exactly
    ``lo + floor(u * (hi - lo))``.
    """
    row = cumwidth[feature]  # (..., B)
    base = jnp.take_along_axis(row, lo[..., None], axis=-1)[..., 0]
    top = jnp.take_along_axis(row, hi[..., None], axis=-1)[..., 0]
    target = u * (top - base)
    count = jnp.sum(row - base[..., None] <= target[..., None], axis=-1)
    return jnp.maximum(jnp.minimum(count - 1, hi - 1), jnp.minimum(lo, hi - 1)).astype(jnp.int32)


def splittable(lo: Array, hi: Array, split_prob: Array) -> Array:
    """(N,) bool: the node has a valid cut and a positive split probability (above max_depth).
    ``split_prob``: (N,) CGM98 split probabilities, or :class:`PinballTables` (slots above
    ``max_depth``)."""
    return jnp.any(hi > lo, axis=-1) & (split_mask(split_prob) > 0)


def log_tree_prior(tree: Tree, lo: Array, hi: Array, split_prob: Array | PinballTables, cumwidth: Array,
                   box_side: Array | None = None, log_weight: Array | None = None) -> Array:
    """log p(T) under the truncated CGM98 prior, or the pinball prior when ``split_prob`` is a
    :class:`PinballTables`; ``-inf`` if a rule is invalid for its node or (with ``box_side``) the
    tree cuts through a constrained box.

    With box constraints the prior is the CGM98 prior *conditioned* on no box being cut:
    ``p(T | boxes) = p(T) 1[T respects the boxes] / Z``.  The value returned omits ``log Z``
    (a constant), so it is exact for every MH ratio.  The pinball prior's value likewise omits its
    truncation constant (:mod:`bdtree_jax.priors`): ``log p_size(K) + sum over internal nodes of
    log p_shape(k_L | k) + log p_rule``, with ``-inf`` for ``K > K_max``.

    Parameters
    ----------
    lo, hi : (N, F) int32 node bounds of this tree (:func:`node_bounds`).
    split_prob : (N,) :func:`split_probability` of the prior, or its :class:`PinballTables`
        (:attr:`~bdtree_jax.data.TreeData.split_prob` holds the one the prior needs).
    cumwidth : (F, B) cumulative cut weights (:attr:`~bdtree_jax.data.TreeData.cut_cumwidth`).
    box_side : (K, F, C) int8 from :func:`box_sides`, or None.
    log_weight : (F,) log feature weights (DART's ``log s``,
        :attr:`~bdtree_jax.data.TreeData.feature_log_weight`), or None for uniform features.
    """
    pinball = split_prob if isinstance(split_prob, PinballTables) else None
    if pinball is not None:
        split_prob = pinball.may_split
    active = active_nodes(tree)
    width = jnp.maximum(hi - lo, 0)
    n_valid = jnp.sum(width > 0, axis=-1)
    can = (n_valid > 0) & (split_prob > 0)
    # each node's own feature by a one-hot select (fuses; a per-node gather does not)
    own = tree.feature[:, None] == jnp.arange(lo.shape[-1])
    pick = lambda a: jnp.sum(jnp.where(own, a, 0), axis=-1)  # noqa: E731
    lo_own, hi_own = pick(lo), pick(hi)
    valid_rule = can & (tree.cut >= lo_own) & (tree.cut < hi_own)
    # the rule's cut weight and its node's total: one gather of four cumulative weights per node
    B = cumwidth.shape[-1]
    at = jnp.clip(jnp.stack([lo_own, hi_own, tree.cut, tree.cut + 1], axis=-1), 0, B - 1)
    cum = cumwidth.reshape(-1)[tree.feature.astype(jnp.int32)[:, None] * B + at]  # (N, 4)
    denom = n_valid * (cum[:, 1] - cum[:, 0])
    # one log per node: split  p w_c / (n_valid * total)  (p_rule = 1/n_valid * w_c/total), leaf  1 - p
    invalid = tree.is_split & ~valid_rule
    # pinball: no leaf factor (K fixes the leaves), the rule prior alone at internal nodes
    leaf_value = 1.0 if pinball is not None else 1.0 - jnp.where(can, split_prob, 0.0)
    value = jnp.where(tree.is_split, split_prob * (cum[:, 3] - cum[:, 2]) / jnp.where(denom > 0, denom, 1.0),
                      leaf_value)
    if log_weight is not None:  # the feature's share s_f / sum_A s_k in place of 1 / n_valid
        value = jnp.where(tree.is_split, value * n_valid, value)
    terms = jnp.where(invalid, -jnp.inf, jnp.log(jnp.where(invalid, 1.0, value)))
    if log_weight is not None:
        log_share = log_feature_prob(width > 0, log_weight, tree.feature)
        terms = jnp.where(tree.is_split & ~invalid, terms + log_share, terms)
    log_p = jnp.sum(jnp.where(active, terms, 0.0))
    if pinball is not None:
        log_p = log_p + log_pinball_structure(tree, active, pinball)
    if box_side is not None:
        log_p = jnp.where(violates_boxes(tree, box_side), -jnp.inf, log_p)
    return log_p


# ----------------------------------------------------------------------------------------------
# Simulation from the prior below a node (prune-and-regrow proposals, prior checks).


def regrow_subtree(tree: Tree, leaf_id: Array, lo: Array, hi: Array, node: Array, uniforms: Array, data,
                   min_leaf_size: int) -> tuple[Tree, Array, Array, Array]:
    """Replace the subtree at ``node`` by a draw from the prior given the rows reaching ``node``.

    The draw follows the prior's generative process level by level: an active leaf of the new
    subtree at depth ``d`` splits with probability ``split_prob`` if it has a valid cut, with a
    rule from ``p_rule`` (uniform valid feature, then a valid cut by the prior's ``split_prior``,
    :func:`draw_cut`).  The probability of the drawn subtree is therefore the product of the
    prior's factors of its nodes, which (as those factors depend only on each node's rows) is
    ``p(T') / p(T' outside the subtree)``.  Box constraints are *not* applied here (the MH step
    rejects a violating tree).

    The valid-cut bounds each level needs are those of the new tree's nodes, so they are returned
    with it: only the subtree's nodes change (rows outside it keep their nodes).  Levels above
    ``node`` and below the deepest new leaf are skipped (``lax.cond``).

    Parameters
    ----------
    tree : Tree (N,) arrays; leaf_id : (n,) int32 leaf of every row.
    lo, hi : (N, F) int32 valid-cut bounds of ``tree``'s nodes (:func:`node_bounds`).
    node : () int32 heap index of the regrown subtree's root (must be active).
    uniforms : (N, 3) float32 in [0, 1): per heap slot (split?, feature, cut).

    Returns
    -------
    tree, leaf_id, lo, hi of the new tree.
    """
    check_cgm_structure(data.split_prob, "prune-and-regrow (regrow_subtree: the regrow proposal, the edit prior)")
    depth = max_depth_of(tree)
    depths = jnp.asarray(node_depths(depth))
    d0 = depths[node]
    in_sub = in_subtree(node, depth)
    tree = Tree(tree.is_split & ~in_sub, jnp.where(in_sub, 0, tree.feature), jnp.where(in_sub, 0, tree.cut))
    row_depth = depths[leaf_id]
    leaf_id = jnp.where(in_sub[leaf_id], ((leaf_id + 1) >> jnp.maximum(row_depth - d0, 0)) - 1, leaf_id).astype(jnp.int32)
    flat = data.bins.reshape(-1)
    row_offset = jnp.arange(data.bins.shape[0], dtype=jnp.int32) * data.bins.shape[1]
    new_lo, new_hi = [], []
    for level in range(depth + 1):
        # only the slots of this level can grow now; their rows are exactly the rows whose
        # leaf is the slot (deeper levels of the subtree are still empty)
        first, count = 2**level - 1, 2**level
        level_slots = slice(first, first + count)
        sub = in_sub[level_slots]
        growing = sub & leaf_nodes(tree)[level_slots]  # the subtree's active leaves at this level
        old = (lo[level_slots], hi[level_slots])
        at_level = (leaf_id >= first) & (leaf_id < first + count)
        if data.cut_count is not None:  # ancestors' rules: narrow the parents' bounds (no pass over the rows)
            lo_l, hi_l = ancestor_level_bounds(tree, level, new_lo, new_hi, data.cut_count)
        else:
            lo_l, hi_l = jax.lax.cond(
                jnp.any(growing),
                lambda: level_bounds(jnp.where(at_level, leaf_id - first, count), count, data, min_leaf_size),
                lambda: (jnp.zeros_like(old[0]), jnp.zeros_like(old[1])),
            )
        new_lo.append(jnp.where(sub[:, None], lo_l, old[0]))
        new_hi.append(jnp.where(sub[:, None], hi_l, old[1]))
        if level == depth:
            break
        p = data.split_prob[level_slots]
        can = jnp.any(hi_l > lo_l, axis=-1) & (p > 0)
        grow_here = growing & can & (uniforms[level_slots, 0] < p)
        width = jnp.maximum(hi_l - lo_l, 0)
        if data.feature_log_weight is None:
            counts = jnp.cumsum((width > 0).astype(jnp.int32), axis=1)  # (count, F)
            k = jnp.floor(uniforms[level_slots, 1] * counts[:, -1]).astype(jnp.int32)
            feature = jnp.argmax(counts > k[:, None], axis=1).astype(jnp.int32)
        else:  # DART: features by their weights among the available ones
            feature = pick_feature(width > 0, data.feature_log_weight, uniforms[level_slots, 1])
        lo_f = jnp.take_along_axis(lo_l, feature[:, None], axis=1)[:, 0]
        hi_f = jnp.take_along_axis(hi_l, feature[:, None], axis=1)[:, 0]
        cut = draw_cut(data.cut_cumwidth, feature, lo_f, hi_f, uniforms[level_slots, 2])
        tree = Tree(
            tree.is_split.at[level_slots].set(tree.is_split[level_slots] | grow_here),
            tree.feature.at[level_slots].set(
                jnp.where(grow_here, feature, tree.feature[level_slots]).astype(tree.feature.dtype)),
            tree.cut.at[level_slots].set(jnp.where(grow_here, cut, tree.cut[level_slots]).astype(tree.cut.dtype)),
        )
        moves = at_level & grow_here[jnp.clip(leaf_id - first, 0, count - 1)]
        right = flat[row_offset + tree.feature[leaf_id]] > tree.cut[leaf_id]
        leaf_id = jnp.where(moves, 2 * leaf_id + 1 + right.astype(jnp.int32), leaf_id)
    return tree, leaf_id, jnp.concatenate(new_lo), jnp.concatenate(new_hi)
