"""The CGM98 tree prior shared by every hard-split sampler.

A node at depth ``d`` splits with probability ``alpha * (1 + d) ** -beta``; the probability is 0 at
``max_depth`` and 0 where no candidate cut leaves both children with at least ``min_leaf_size``
rows.  The rule is uniform over the features that have a valid cut in the node, then a cut among
that feature's valid cuts chosen by ``split_prior``.  The prior is therefore *truncated* at
``max_depth`` (renormalised by construction: a node at ``max_depth`` is a leaf with probability 1).

Valid cuts of feature ``f`` in a node form the integer interval ``[lo_f, hi_f)`` where ``lo_f`` is
the ``m``-th smallest bin of the node's rows and ``hi_f`` the ``(n_node - m + 1)``-th smallest
(``m = min_leaf_size``); for ``m = 1`` these are the node's minimum and maximum bins.

``split_prior`` (:class:`TreePrior`) picks the cut of feature ``f``:

* ``"uniform"`` (default, CGM98): uniform over the valid cuts, ``p(c) = 1 / (hi_f - lo_f)``.
* ``"range"`` (Lakshminarayanan et al. 2013): proportional to the width of the cut's gap in the
  feature's own units.  Cut ``c`` separates the global sorted distinct training values
  ``u_c < u_{c+1}`` of the feature; with ``w_f[c] = u_{c+1} - u_c``,
  ``p(c) = w_f[c] / sum(w_f[c'] for c' in [lo_f, hi_f))``.  With ``min_leaf_size = 1`` this is
  exactly "draw ``tau ~ U(node min, node max)`` and snap it to the global gap that contains it";
  for ``min_leaf_size > 1`` the same formula is applied over the valid-cut interval (the gaps
  between the ``m``-th smallest and the ``m``-th largest value of the node's rows).

Both use one table, :attr:`~bdtree_jax.data.TreeData.cut_cumwidth` (cumulative weights per
feature; ``arange`` for "uniform", so its draws and log-probabilities are those of the plain
uniform rule bit for bit): ``p(c) = (cum[f, c+1] - cum[f, c]) / (cum[f, hi] - cum[f, lo])``.
The "range" table is float32 and normalised per feature, so its probabilities are exact up to
float32 rounding relative to the feature's range.

``valid_cuts`` (:class:`TreePrior`) says where a node's valid cuts come from:

* ``"data"`` (default, CGM98): the cuts that split the node's training rows, as above.
* ``"ancestors"`` (BART: Chipman, George & McCulloch 2010 as implemented by BayesTree, the BART
  package and bartz): the root's valid cuts of feature ``f`` are all its candidate cuts
  ``[0, cut_count_f)``, a left child's are its parent's below the parent's cut on the parent's
  feature and a right child's those above (``[lo, c)`` and ``[c + 1, hi)``); the other
  features' are inherited.  Rule availability, split probabilities and the rule prior then do not
  depend on the data (a node may split although its rows are all on one side, so leaves can be
  small or empty).  ``min_leaf_size`` becomes a *truncation*: trees with a leaf of fewer than
  ``min_leaf_size`` training rows have prior 0 (1, the default: no empty leaves; BayesTree
  uses 5), and the rest is renormalised (a global constant that :func:`log_tree_prior` omits,
  exact for every MH ratio).  The bounds ``lo, hi`` of every node are then
  :func:`ancestor_bounds` of the tree and a grow computes its children's in O(F)
  (:func:`child_bounds`), with no pass over the rows -- what makes BART's sweep cheap.

**Pinball prior** (``structure="pinball"``; Wu, Tjelmeland & West 2007's mechanism, with the
*[derived]* parametrisation of ``wu-restructure_spec.md`` §3, not a transcription of the paper).
The tree's number of leaves ``K`` has its own law and the shape its own::

    K - 1 ~ Poisson(pinball_rate)  truncated to 1 <= K <= K_max       (p_size)
    k_L - 1 | k ~ BetaBinomial(k - 2, pinball_balance, pinball_balance)  (p_shape, k >= 2)

A node holding ``k >= 2`` leaf counts splits them into ``k_L`` left and ``k - k_L`` right; a node
holding 1 is a leaf.  ``pinball_balance`` (``γ``) large favours balanced splits, ``γ < 1``
unbalanced (``γ = 1``: ``k_L`` uniform on ``1..k-1``).  Rules are the same rule prior as above
(uniform valid feature, then a cut by ``split_prior``)::

    π(T) ∝ p_size(K) · Π_internal p_shape(k_L(η) | k(η)) · Π_internal p_rule(η)

No factor for leaves (their number is fixed by ``K``).  ``K_max`` (``pinball_max_leaves``)
defaults to the padded heap's leaf capacity ``2**max_depth`` and cannot exceed it.  The prior
is **truncated**: a tree deeper than ``max_depth``, with a rule that is not a valid cut of its
node's rows, or cutting a box has prior 0, and the rest is renormalised (a global constant, so
exact for every MH ratio; :func:`log_tree_prior` omits it).  Because of that truncation the size
law of the normalised prior is ``p_size(K) Z_K / sum_K' p_size(K') Z_K'`` with ``Z_K`` the
probability that the generative process with ``K`` leaves yields a valid tree on the data (1 when
every node it can reach holding >= 2 counts has a valid cut within the depth, e.g. small ``K``);
the same holds for the balance law.  The numeric tables (:class:`PinballTables`) travel in
:attr:`TreeData.split_prob <bdtree_jax.data.TreeData>` in place of the CGM98 split
probabilities, so changing ``pinball_rate``, ``pinball_balance`` or ``pinball_max_leaves``
reuses compiled programs.  Samplers: CGM (``method="cgm"``, also with ``proposal="cgm+perturb"``),
whose MH ratios use the full ``log p(T*) - log p(T)``, and WU (``method="wu"``: its restructure's
``Φ`` and fibre DP with the shape factors, :mod:`bdtree_jax.kernels.wu`); the samplers that draw
subtrees or rules from the CGM98 generative process (regrow, the edit prior, SMC, PG, BART) raise
a ``ValueError`` naming ``structure``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._types import Array
from .data import SPLIT_PRIORS, VALID_CUTS, TreeData
from .tree import Tree, active_nodes, in_subtree, leaf_index, leaf_nodes, max_depth_of, node_depths

__all__ = [
    "TreePrior", "mask_bounds", "level_bounds", "node_bounds", "node_stats", "log_tree_prior", "split_probability", "box_sides",
    "violates_boxes", "regrow_subtree", "log_rule_prob", "log_cut_probs", "draw_cut", "SPLIT_PRIORS",
    "STRUCTURES", "PinballTables", "pinball_tables", "pinball_log_size", "pinball_log_shape",
    "pinball_log_shape_parts", "pinball_shape",
    "check_cgm_structure", "sum_by_node", "node_lanes", "sum_by_lane", "VALID_CUTS", "ancestor_bounds", "child_bounds",
    "check_valid_cuts", "leaf_size_log_prior",
]

#: Tree-structure priors: CGM98's depth-dependent split probabilities, or the pinball prior.
STRUCTURES = ("cgm", "pinball")

_BIG = np.int32(2**30)


@dataclass(frozen=True)
class TreePrior:
    """Hyperparameters of the tree prior (static).

    ``split_prior``: how a rule's cut is chosen among a feature's valid cuts, ``"uniform"``
    (CGM98) or ``"range"`` (proportional to the gap width in the feature's units; see the
    module docstring).

    ``valid_cuts``: ``"data"`` (CGM98: the cuts that split the node's rows) or ``"ancestors"``
    (BART: the cuts inside the range its ancestors' rules leave; ``min_leaf_size`` is then a
    truncation, every leaf holds at least that many rows; module docstring).

    ``structure``: ``"cgm"`` (the default: a node at depth ``d`` splits with probability
    ``alpha (1 + d)**-beta``) or ``"pinball"`` (module docstring: ``K - 1 ~ Poisson(pinball_rate)``
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
        if not isinstance(self.max_depth, (int, np.integer)) or self.max_depth < 1:
            raise ValueError(f"max_depth must be an integer >= 1; got {self.max_depth!r}.")
        if not 0.0 < float(self.alpha) < 1.0:
            raise ValueError(f"alpha must be in (0, 1); got {self.alpha!r}.")
        if float(self.beta) < 0.0:
            raise ValueError(f"beta must be >= 0; got {self.beta!r}.")
        if not isinstance(self.min_leaf_size, (int, np.integer)) or self.min_leaf_size < 1:
            raise ValueError(f"min_leaf_size must be an integer >= 1; got {self.min_leaf_size!r}.")
        if not isinstance(self.split_prior, str) or self.split_prior not in SPLIT_PRIORS:
            raise ValueError(f"split_prior must be one of {SPLIT_PRIORS}; got {self.split_prior!r}.")
        if not isinstance(self.valid_cuts, str) or self.valid_cuts not in VALID_CUTS:
            raise ValueError(f"valid_cuts must be one of {VALID_CUTS}; got {self.valid_cuts!r}.")
        if not isinstance(self.structure, str) or self.structure not in STRUCTURES:
            raise ValueError(f"structure must be one of {STRUCTURES}; got {self.structure!r}.")
        for name in ("pinball_rate", "pinball_balance"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not (
                    np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0; got {v!r}.")
        k = self.pinball_max_leaves
        if k is not None:
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
                raise ValueError(f"pinball_max_leaves must be None or an integer >= 1; got {k!r}.")
            if k > 2**self.max_depth:
                raise ValueError(
                    f"pinball_max_leaves={k} does not fit the padded tree: max_depth={self.max_depth} holds at most "
                    f"2**max_depth = {2**self.max_depth} leaves; raise max_depth or lower pinball_max_leaves.")

    @property
    def max_leaves(self) -> int:
        """The pinball prior's ``K_max``: ``pinball_max_leaves``, or ``2**max_depth`` if None."""
        return 2**self.max_depth if self.pinball_max_leaves is None else int(self.pinball_max_leaves)


class PinballTables(NamedTuple):
    """The pinball prior's numbers (a pytree; it stands in :attr:`TreeData.split_prob
    <bdtree_jax.data.TreeData>` for the CGM98 split probabilities, so the kernels' prior switches
    on its type at trace time and a change of hyperparameters reuses the compiled program).

    Attributes
    ----------
    may_split : (N,) float32 1 for heap slots above ``max_depth``, 0 at ``max_depth`` (the
        "positive split probability" test of :func:`splittable`).
    log_size : (L + 1,) float32 ``log p_size(K)``, ``L = 2**max_depth``; ``-inf`` for ``K = 0``
        and ``K > K_max``.
    shape_total, shape_part : (L + 1,) float32 the BetaBinomial shape law in separable form,
        ``log p_shape(k_L | k) = shape_total[k] + shape_part[k_L] + shape_part[k - k_L]``
        (:func:`pinball_log_shape_parts`; ``-inf`` outside ``k >= 2``, ``1 <= k_L <= k - 1``):
        memory ``O(L)`` rather than an ``(L + 1)^2`` table, and every term is ``O(log L)`` (no
        cancellation in float32).  :func:`pinball_shape` reads it.
    """

    may_split: Array
    log_size: Array
    shape_total: Array
    shape_part: Array


def pinball_log_size(rate: float, max_leaves: int, capacity: int) -> np.ndarray:
    """(capacity + 1,) float64 ``log p_size(K)``: ``K - 1 ~ Poisson(rate)`` renormalised over
    ``1 <= K <= max_leaves``; ``-inf`` elsewhere."""
    from scipy.special import gammaln, logsumexp

    j = np.arange(max_leaves, dtype=np.float64)  # K - 1
    log_p = -rate + j * np.log(rate) - gammaln(j + 1)
    out = np.full(capacity + 1, -np.inf)
    out[1 : max_leaves + 1] = log_p - logsumexp(log_p)
    return out


def pinball_log_shape_parts(balance: float, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """(capacity + 1,) float64 ``total, part`` with ``log p_shape(k_L | k) = total[k] + part[k_L] +
    part[k - k_L]``.  With ``n = k - 2``, ``j = k_L - 1``, ``γ = balance``::

        log BetaBinomial(j; n, γ, γ) = [lgamma(n + 1) - lgamma(n + 2γ) - log B(γ, γ)]
                                       + [lgamma(j + γ) - lgamma(j + 1)] + [lgamma(n - j + γ) - lgamma(n - j + 1)]

    ``total[k]`` is the first bracket (``-inf`` for ``k < 2``), ``part[k_L]`` the second with
    ``j = k_L - 1`` (``-inf`` for ``k_L = 0``)."""
    from scipy.special import betaln, gammaln

    g = float(balance)
    k = np.arange(capacity + 1, dtype=np.float64)
    n = k - 2
    total = np.where(k >= 2, gammaln(np.maximum(n, 0) + 1) - gammaln(np.maximum(n, 0) + 2 * g) - betaln(g, g), -np.inf)
    j = k - 1
    part = np.where(k >= 1, gammaln(np.maximum(j, 0) + g) - gammaln(np.maximum(j, 0) + 1), -np.inf)
    return total, part


def pinball_shape(tables: "PinballTables", k: Array, k_left: Array) -> Array:
    """``log p_shape(k_left | k)`` from :class:`PinballTables` (any broadcasting shapes; indices
    clipped into the tables; ``-inf`` unless ``k >= 2`` and ``1 <= k_left <= k - 1``)."""
    size = tables.shape_part.shape[-1]
    k = jnp.asarray(k)
    k_left = jnp.asarray(k_left)
    return (tables.shape_total[jnp.clip(k, 0, size - 1)] + tables.shape_part[jnp.clip(k_left, 0, size - 1)]
            + tables.shape_part[jnp.clip(k - k_left, 0, size - 1)])


def pinball_log_shape(balance: float, capacity: int) -> np.ndarray:
    """(capacity + 1, capacity + 1) float64 ``log p_shape(k_L | k)``: ``k_L - 1 ~
    BetaBinomial(k - 2, balance, balance)`` for ``k >= 2``, ``1 <= k_L <= k - 1``; ``-inf`` elsewhere."""
    from scipy.special import betaln, gammaln

    out = np.full((capacity + 1, capacity + 1), -np.inf)
    g = float(balance)
    for k in range(2, capacity + 1):
        n = k - 2
        j = np.arange(n + 1, dtype=np.float64)
        out[k, 1:k] = (gammaln(n + 1) - gammaln(j + 1) - gammaln(n - j + 1) + betaln(j + g, n - j + g) - betaln(g, g))
    return out


def pinball_tables(prior: TreePrior) -> PinballTables:
    """The :class:`PinballTables` of a ``structure="pinball"`` prior (numpy, float32)."""
    capacity = 2**prior.max_depth
    d = node_depths(prior.max_depth)
    return PinballTables(
        (d < prior.max_depth).astype(np.float32),
        pinball_log_size(float(prior.pinball_rate), prior.max_leaves, capacity).astype(np.float32),
        *(a.astype(np.float32) for a in pinball_log_shape_parts(float(prior.pinball_balance), capacity)),
    )


def check_cgm_structure(split_prob, who: str) -> None:
    """Raise a ``ValueError`` naming ``structure`` when a sampler that draws trees from the CGM98
    generative process (``who``) is given the pinball prior's tables."""
    if isinstance(split_prob, PinballTables):
        raise ValueError(
            f"{who} draws subtrees or rules from the CGM98 prior's generative process and does not support "
            "structure='pinball'; use method='cgm' with proposal 'cgm' or 'cgm+perturb', method='wu', or "
            "structure='cgm'.")


def _split_mask(split_prob):
    """The (N,) split probabilities of the CGM98 prior, or the pinball prior's ``may_split``."""
    return split_prob.may_split if isinstance(split_prob, PinballTables) else split_prob


def split_probability(prior: TreePrior) -> np.ndarray:
    """(N,) ``alpha (1+d)^-beta`` per heap slot, 0 at ``max_depth``."""
    d = node_depths(prior.max_depth)
    p = prior.alpha * (1.0 + d) ** (-prior.beta)
    return np.where(d < prior.max_depth, p, 0.0).astype(np.float32)


def mask_bounds(mask: Array, data: TreeData, min_leaf_size: int) -> tuple[Array, Array]:
    """Valid-cut interval ``[lo, hi)`` per feature for the rows in ``mask``.

    Parameters
    ----------
    mask : (n,) bool rows in the node.

    Returns
    -------
    lo, hi : (F,) int32 each; ``hi - lo <= 0`` means no valid cut (0, 0 for an empty node).
    """
    if min_leaf_size == 1:
        lo = jnp.min(jnp.where(mask[:, None], data.bins, _BIG), axis=0)
        hi = jnp.max(jnp.where(mask[:, None], data.bins, -1), axis=0)
    else:
        count = mask.sum()
        member = mask[data.sorted_index]  # (F, n) in each feature's sorted order
        csum = jnp.cumsum(member, axis=1)
        first = jnp.argmax(csum >= min_leaf_size, axis=1)
        last = jnp.argmax(csum >= count - min_leaf_size + 1, axis=1)
        lo = jnp.take_along_axis(data.sorted_bins, first[:, None], axis=1)[:, 0]
        hi = jnp.take_along_axis(data.sorted_bins, last[:, None], axis=1)[:, 0]
        ok = count >= 2 * min_leaf_size
        lo, hi = jnp.where(ok, lo, 0), jnp.where(ok, hi, 0)
    empty = ~jnp.any(mask)
    return jnp.where(empty, 0, lo).astype(jnp.int32), jnp.where(empty, 0, hi).astype(jnp.int32)


def _upward(values: Array, op) -> Array:
    """Reduce every node's subtree: ``out[i] = op(values[i], out[2i+1], out[2i+2])``.

    values : (N, ...) per-node values of the rows sitting *at* each node (i.e. filled at leaves,
    the identity of ``op`` elsewhere).  Bottom-up over the heap's levels: a level's children are a
    contiguous slice, reshaped to pairs, so each level is one small fused loop.
    """
    n = values.shape[0]
    depth = int(np.log2(n + 1)) - 1
    out = values[2**depth - 1 :]
    levels = [out]
    for d in range(depth - 1, -1, -1):
        pairs = out.reshape((2**d, 2) + out.shape[1:])
        out = op(values[2**d - 1 : 2 ** (d + 1) - 1], op(pairs[:, 0], pairs[:, 1]))
        levels.append(out)
    return jnp.concatenate(levels[::-1])


def node_stats(tree: Tree, data: TreeData) -> tuple[Array, Array]:
    """Leaf assignment and sufficient statistics of every node.

    Returns
    -------
    leaf_id : (n,) int32 heap index of each row's leaf.
    stats : (N, S) float32 summed ``point_stats`` of the rows below each node (0 if inactive).
    """
    leaf_id = leaf_index(tree, data.bins, max_cut=data.bins.shape[0])
    return leaf_id, subtree_sums(data.point_stats, leaf_id, tree.is_split.shape[-1])


def subtree_sums(point_stats: Array, leaf_id: Array, n_nodes: int, rows: Array | None = None) -> Array:
    """(N, S) summed ``point_stats`` (n, S) of the rows below every node, from each row's leaf;
    with ``rows`` (n,) bool only those rows are summed (right for the nodes holding no others)."""
    slots = node_lanes(leaf_id, n_nodes)
    if rows is not None:  # the others go to an out-of-range slot, which the scatter skips
        slots = jnp.where(rows, slots, _n_lanes(leaf_id.shape[-1]) * n_nodes)
    return _upward(sum_by_lane(point_stats, slots, n_nodes), jnp.add)


#: Accumulators of :func:`sum_by_node` (rows ``i`` and ``i + 1`` land in different ones).
SCATTER_LANES = 16


def _n_lanes(n: int) -> int:
    """Accumulator copies :func:`sum_by_node` uses for ``n`` rows."""
    return min(SCATTER_LANES, n)


def sum_by_node(values: Array, node: Array, n_nodes: int) -> Array:
    """``jax.ops.segment_sum(values, node, n_nodes)`` for rows that fall into few nodes.

    values : (n,) or (n, S); node : (n,) int in ``[0, n_nodes)``.  Returns (n_nodes,) or
    (n_nodes, S).  XLA's scatter-add on CPU is a serial loop, and when consecutive rows go to the
    same node each addition waits for the previous one; rows are therefore spread over
    :data:`SCATTER_LANES` interleaved copies of the output (row ``i`` into copy ``i % lanes``),
    which are summed at the end -- about 3x faster for a tree's few leaves, and the same sums up
    to float rounding order."""
    return sum_by_lane(values, node_lanes(node, n_nodes), n_nodes)


def node_lanes(node: Array, n_nodes: int) -> Array:
    """(..., n) the scatter slots of :func:`sum_by_node`: ``node + (i % lanes) * n_nodes`` for row
    ``i`` (int16 when they fit, else int32; computed once when the same rows are summed many times)."""
    n = node.shape[-1]
    lanes = _n_lanes(n)
    dtype = jnp.int16 if lanes * n_nodes < 2**15 else jnp.int32
    return node.astype(dtype) + ((jnp.arange(n, dtype=jnp.int32) % lanes) * n_nodes).astype(dtype)


def sum_by_lane(values: Array, slots: Array, n_nodes: int) -> Array:
    """:func:`sum_by_node` from the slots of :func:`node_lanes`."""
    lanes = _n_lanes(slots.shape[-1])
    out = jax.ops.segment_sum(values, slots, num_segments=lanes * n_nodes)
    return out.reshape((lanes, n_nodes) + values.shape[1:]).sum(0)


def level_bounds(slot: Array, count: int, data: TreeData, min_leaf_size: int) -> tuple[Array, Array]:
    """Valid-cut intervals of ``count`` disjoint nodes at once (see :func:`mask_bounds`).

    Parameters
    ----------
    slot : (n,) int32 node of every row in ``0..count-1``, or ``count`` for rows in none of them.

    Returns
    -------
    lo, hi : (count, F) int32.

    For ``min_leaf_size > 1`` one sort per feature groups the rows by node while keeping each
    feature's ascending order (the key ``slot * n + rank`` is unique), so every node's ``m``-th
    smallest and ``m``-th largest bins are read at its offset: ``O(F n log n)`` for all nodes
    instead of one masked pass per node.
    """
    if min_leaf_size == 1:
        lo = jax.ops.segment_min(data.bins, slot, num_segments=count + 1)[:count]
        hi = jax.ops.segment_max(data.bins, slot, num_segments=count + 1)[:count]
        empty = lo > hi
        return jnp.where(empty, 0, lo).astype(jnp.int32), jnp.where(empty, 0, hi).astype(jnp.int32)
    if data.bin_onehot is not None:
        return _histogram_bounds(jax.ops.segment_sum(data.bin_onehot, slot, num_segments=count + 1)[:count],
                                 min_leaf_size)
    n = data.bins.shape[0]
    if (count + 1) * n >= 2**31:
        raise ValueError(f"too many rows ({n}) for a tree this deep ({count} nodes in one level).")
    rank = jnp.arange(n, dtype=jnp.int32)
    key = jnp.sort(slot.astype(jnp.int32)[data.sorted_index] * n + rank, axis=1)  # (F, n)
    grouped = jnp.take_along_axis(data.sorted_bins, key % n, axis=1)  # bins by node, ascending
    size = jax.ops.segment_sum(jnp.ones(n, jnp.int32), slot, num_segments=count + 1)[:count]
    start = jnp.cumsum(size) - size
    lo = grouped[:, jnp.clip(start + min_leaf_size - 1, 0, n - 1)].T
    hi = grouped[:, jnp.clip(start + size - min_leaf_size, 0, n - 1)].T
    ok = (size >= 2 * min_leaf_size)[:, None]
    return jnp.where(ok, lo, 0).astype(jnp.int32), jnp.where(ok, hi, 0).astype(jnp.int32)


def _histogram_bounds(hist: Array, min_leaf_size: int) -> tuple[Array, Array]:
    """Valid-cut intervals (M, F) from per-node bin histograms ``hist`` (M, F, B): the ``m``-th
    smallest bin is the first whose cumulative count reaches ``m``."""
    csum = jnp.cumsum(hist, axis=-1)
    size = csum[:, :1, -1]  # (M, 1) rows in the node
    lo = jnp.argmax(csum >= min_leaf_size, axis=-1)
    hi = jnp.argmax(csum >= size[:, :, None] - min_leaf_size + 1, axis=-1)
    ok = size >= 2 * min_leaf_size
    return jnp.where(ok, lo, 0).astype(jnp.int32), jnp.where(ok, hi, 0).astype(jnp.int32)


def node_bounds(tree: Tree, leaf_id: Array, data: TreeData, min_leaf_size: int,
                rows: Array | None = None) -> tuple[Array, Array]:
    """Valid-cut intervals ``lo, hi`` (N, F) of every node (see :func:`mask_bounds`; with
    ``valid_cuts="ancestors"`` :func:`ancestor_bounds`, which does not read the rows).  ``rows``
    (n,) bool: the caller needs only the nodes that hold no other rows (the others' values are
    then meaningless); the costly reduction skips the rest when it can."""
    if data.cut_count is not None:
        return ancestor_bounds(tree, data.cut_count)
    n_nodes = tree.is_split.shape[-1]
    depth = max_depth_of(tree)
    if min_leaf_size == 1:
        # min/max are composable: reduce rows into their leaves, then leaves into ancestors; one
        # max-reduction of (-bins, bins) gives both (a scatter is the costly step on CPU, and it
        # skips out-of-range slots).
        both = jnp.concatenate([-data.bins, data.bins], axis=1)
        slot = leaf_id if rows is None else jnp.where(rows, leaf_id, n_nodes)
        both = _upward(jax.ops.segment_max(both, slot, num_segments=n_nodes), jnp.maximum)
        lo, hi = -both[:, : data.bins.shape[1]], both[:, data.bins.shape[1] :]
        empty = hi < 0  # no rows: the reduction's identity (bins are >= 0)
        return jnp.where(empty, 0, lo).astype(jnp.int32), jnp.where(empty, 0, hi).astype(jnp.int32)
    if data.bin_onehot is not None:
        # bin histograms compose: rows into leaves, leaves into ancestors
        hist = jax.ops.segment_sum(data.bin_onehot, leaf_id, num_segments=n_nodes)
        return _histogram_bounds(_upward(hist, jnp.add), min_leaf_size)
    # Order statistics do not compose: one grouped sort per level (the levels' nodes are disjoint).
    leaf_depth = jnp.asarray(node_depths(depth))[leaf_id]
    los, his = [], []
    for d in range(depth + 1):
        first, count = 2**d - 1, 2**d
        ancestor = ((leaf_id + 1) >> jnp.maximum(leaf_depth - d, 0)) - 1
        lo, hi = level_bounds(jnp.where(leaf_depth >= d, ancestor - first, count), count, data, min_leaf_size)
        los.append(lo)
        his.append(hi)
    return jnp.concatenate(los), jnp.concatenate(his)


def ancestor_bounds(tree: Tree, cut_count: Array) -> tuple[Array, Array]:
    """Valid-cut intervals ``lo, hi`` (N, F) int32 of every node under ``valid_cuts="ancestors"``:
    ``[0, cut_count)`` at the root, narrowed by each ancestor's rule on its feature (module
    docstring); 0 for inactive slots.  Top-down over the heap's levels, no pass over the rows."""
    los, his = [], []
    for level in range(max_depth_of(tree) + 1):
        lo, hi = _narrow_level(tree, level, los, his, cut_count)
        los.append(lo)
        his.append(hi)
    return jnp.concatenate(los), jnp.concatenate(his)


def _narrow_level(tree: Tree, level: int, los: list, his: list, cut_count: Array) -> tuple[Array, Array]:
    """``valid_cuts="ancestors"`` bounds (2**level, F) of the slots of ``level`` from their parents'
    (``los[-1]``, ``his[-1]``, the level above) and rules; the root's are ``[0, cut_count)``."""
    n_features = cut_count.shape[-1]
    if level == 0:
        return jnp.zeros((1, n_features), jnp.int32), jnp.asarray(cut_count, jnp.int32)[None, :]
    parents = slice(2 ** (level - 1) - 1, 2**level - 1)
    own = tree.feature[parents][:, None] == jnp.arange(n_features)
    lo, hi = _narrow(los[-1], his[-1], own, tree.cut[parents][:, None])  # (2, parents, F): left, right
    keep = jnp.repeat(tree.is_split[parents], 2)[:, None]  # children of splitting nodes
    by_slot = lambda a: jnp.swapaxes(a, 0, 1).reshape(-1, n_features)  # noqa: E731  (left, right per parent)
    return jnp.where(keep, by_slot(lo), 0).astype(jnp.int32), jnp.where(keep, by_slot(hi), 0).astype(jnp.int32)


def _narrow(lo: Array, hi: Array, own: Array, cut: Array) -> tuple[Array, Array]:
    """The ancestors' rule: the two children's intervals of a node with ``lo, hi`` (..., F) split
    at ``cut`` (broadcasting) on the feature where ``own`` (..., F) is true -- the left child keeps
    the cuts below it, the right child those above.  Returns ``lo, hi`` stacked (2, ..., F)."""
    return (jnp.stack([lo, jnp.where(own, jnp.maximum(lo, cut + 1), lo)]),
            jnp.stack([jnp.where(own, jnp.minimum(hi, cut), hi), hi]))


def child_bounds(lo: Array, hi: Array, feature: Array, cut: Array, rows: Array, goes_left: Array, data: TreeData,
                 min_leaf_size: int) -> tuple[Array, Array]:
    """Valid-cut intervals (2, F) of the two children of a node with bounds ``lo, hi`` (F,) split
    by ``(feature, cut)``: its rows ``rows`` (n,) bool, and the rule's left rows ``goes_left``
    (n,) bool, ``bins[:, feature] <= cut`` (the bitset path reads the rule from the bitsets).

    ``valid_cuts="data"``: from the children's rows (:func:`mask_bounds`; for ``min_leaf_size = 1``
    from the row bitsets :attr:`~bdtree_jax.data.TreeData.bin_bits` when the data keeps them, else
    both sets' minima and maxima from one masked max-reduction of ``(-bins, bins)``).
    ``valid_cuts="ancestors"``: the node's interval narrowed by the rule, in O(F) (the rows are
    not read)."""
    if data.cut_count is not None:
        new_lo, new_hi = _narrow(lo, hi, jnp.arange(lo.shape[-1]) == feature, cut)
        return new_lo.astype(jnp.int32), new_hi.astype(jnp.int32)
    left, right = rows & goes_left, rows & ~goes_left
    if min_leaf_size > 1:
        (lo_l, hi_l), (lo_r, hi_r) = (mask_bounds(m, data, min_leaf_size) for m in (left, right))
        return jnp.stack([lo_l, lo_r]), jnp.stack([hi_l, hi_r])
    if data.bin_bits is not None:
        # a bin is present in a child iff its bitset meets the child's rows: pack the node's
        # rows once, take the rule's left rows from the bitsets of the bins <= cut
        bits = data.bin_bits  # (W, F, B)
        n_bins = bits.shape[-1]
        packed = _pack_rows(rows)  # (W,)
        left_bits = jax.lax.reduce(
            jnp.where(jnp.arange(n_bins) <= cut, jnp.take(bits, feature, axis=1), jnp.uint32(0)),
            jnp.uint32(0), jax.lax.bitwise_or, (1,))  # (W,)
        sides = jnp.stack([packed & left_bits, packed & ~left_bits], axis=1)  # (W, 2)
        present = jnp.any((bits[:, None] & sides[:, :, None, None]) != 0, axis=0)  # (2, F, B)
        b = jnp.arange(n_bins)
        lo_c, hi_c = jnp.min(jnp.where(present, b, n_bins), axis=2), jnp.max(jnp.where(present, b, -1), axis=2)
        empty = hi_c < 0
        return jnp.where(empty, 0, lo_c).astype(jnp.int32), jnp.where(empty, 0, hi_c).astype(jnp.int32)
    n_features = data.bins.shape[1]
    # bins fit in int16 when the grid has fewer than 2**15 - 1 cut slots (static): twice the lanes
    small = data.cut_cumwidth.shape[-1] < 2**15 - 1
    dtype, none = (jnp.int16, -(2**15)) if small else (jnp.int32, -_BIG)
    both = jnp.concatenate([-data.bins, data.bins], axis=1).astype(dtype)  # (n, 2F)
    masks = jnp.stack([left, right])[:, :, None]
    extreme = jnp.max(jnp.where(masks, both[None], jnp.asarray(none, dtype)), axis=1).astype(jnp.int32)  # (2, 2F)
    lo, hi = -extreme[:, :n_features], extreme[:, n_features:]
    empty = hi < 0  # no rows (bins are >= 0)
    return jnp.where(empty, 0, lo).astype(jnp.int32), jnp.where(empty, 0, hi).astype(jnp.int32)


def _pack_rows(mask: Array) -> Array:
    """(W,) uint32 bitset of the rows in ``mask`` (n,) bool, laid out as
    :attr:`~bdtree_jax.data.TreeData.bin_bits` (row ``i`` at bit ``i // W`` of word ``i % W``)."""
    n = mask.shape[-1]
    words = -(-n // 32)
    grid = jnp.pad(mask, (0, 32 * words - n)).reshape(32, words).astype(jnp.uint32)
    return jnp.sum(grid << jnp.arange(32, dtype=jnp.uint32)[:, None], axis=0, dtype=jnp.uint32)


def leaf_size_log_prior(rows: Array, is_leaf: Array, data: TreeData, min_leaf_size: int) -> Array:
    """The ``valid_cuts="ancestors"`` truncation: ``-inf`` if a leaf (``is_leaf``, any shape)
    holds fewer than ``min_leaf_size`` rows (``rows``, same shape), else 0.  Always 0 under
    ``valid_cuts="data"``, whose rule availability already keeps every leaf that large."""
    if data.cut_count is None:
        return jnp.float32(0.0)
    return jnp.where(jnp.any(is_leaf & (rows < min_leaf_size)), -jnp.inf, 0.0).astype(jnp.float32)


def check_valid_cuts(data: TreeData, who: str) -> None:
    """Raise a ``ValueError`` naming ``valid_cuts`` when a sampler that supports only the CGM98
    rule availability (``who``) is given ``valid_cuts="ancestors"`` data."""
    if getattr(data, "cut_count", None) is not None:
        raise ValueError(
            f"{who} does not support valid_cuts='ancestors'; it is supported by method='cgm' (proposal 'cgm'), "
            "method='pg' (proposal 'prior') and BART; use valid_cuts='data'.")


def log_rule_prob(lo: Array, hi: Array, feature: Array, cut: Array, cumwidth: Array) -> Array:
    """log p_rule(feature, cut | node) from the node's ``lo, hi`` (F,) and the cut weights
    ``cumwidth`` (F, B) (:attr:`~bdtree_jax.data.TreeData.cut_cumwidth`); ``-inf`` if invalid."""
    width = jnp.maximum(hi - lo, 0)
    n_valid_features = jnp.sum(width > 0)
    B = cumwidth.shape[-1]
    # one gather of the four cumulative weights: node interval [lo, hi) and the cut [c, c + 1)
    at = jnp.clip(jnp.stack([lo[feature], hi[feature], cut, cut + 1]), 0, B - 1)
    v = cumwidth.reshape(-1)[jnp.asarray(feature, jnp.int32) * B + at]
    ok = (cut >= lo[feature]) & (cut < hi[feature])
    return jnp.where(ok, -jnp.log(n_valid_features) + jnp.log(v[3] - v[2]) - jnp.log(v[1] - v[0]), -jnp.inf)


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
    return jnp.any(hi > lo, axis=-1) & (_split_mask(split_prob) > 0)


def log_tree_prior(tree: Tree, lo: Array, hi: Array, split_prob: Array | PinballTables, cumwidth: Array,
                   box_side: Array | None = None) -> Array:
    """log p(T) under the truncated CGM98 prior, or the pinball prior when ``split_prob`` is a
    :class:`PinballTables`; ``-inf`` if a rule is invalid for its node or (with ``box_side``) the
    tree cuts through a constrained box.

    With box constraints the prior is the CGM98 prior *conditioned* on no box being cut:
    ``p(T | boxes) = p(T) 1[T respects the boxes] / Z``.  The value returned omits ``log Z``
    (a constant), so it is exact for every MH ratio.  The pinball prior's value likewise omits its
    truncation constant (module docstring): ``log p_size(K) + sum over internal nodes of
    log p_shape(k_L | k) + log p_rule``, with ``-inf`` for ``K > K_max``.

    Parameters
    ----------
    lo, hi : (N, F) int32 node bounds of this tree (:func:`node_bounds`).
    split_prob : (N,) :func:`split_probability` of the prior, or its :class:`PinballTables`
        (:attr:`~bdtree_jax.data.TreeData.split_prob` holds the one the prior needs).
    cumwidth : (F, B) cumulative cut weights (:attr:`~bdtree_jax.data.TreeData.cut_cumwidth`).
    box_side : (K, F, C) int8 from :func:`box_sides`, or None.
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
    terms = jnp.where(invalid, -jnp.inf, jnp.log(jnp.where(invalid, 1.0, value)))
    log_p = jnp.sum(jnp.where(active, terms, 0.0))
    if pinball is not None:
        log_p = log_p + _log_pinball_structure(tree, active, pinball)
    if box_side is not None:
        log_p = jnp.where(violates_boxes(tree, box_side), -jnp.inf, log_p)
    return log_p


def _log_pinball_structure(tree: Tree, active: Array, tables: PinballTables) -> Array:
    """``log p_size(K) + sum_internal log p_shape(k_L | k)`` from the subtree leaf counts (one
    bottom-up sum over the heap); ``-inf`` for ``K > K_max``."""
    n_nodes = tree.is_split.shape[-1]
    size = tables.log_size.shape[-1]  # L + 1
    counts = _upward((active & ~tree.is_split).astype(jnp.int32), jnp.add)  # (N,) leaves below each node
    inner = (n_nodes - 1) // 2  # slots that have children in the heap
    shape = pinball_shape(tables, counts[:inner], counts[1::2][:inner])  # k, k_L = counts[2i + 1]
    split = tree.is_split[:inner]
    log_shape = jnp.sum(jnp.where(split, shape, 0.0))
    return tables.log_size[jnp.clip(counts[0], 0, size - 1)] + log_shape


# ----------------------------------------------------------------------------------------------
# Box constraints (Angelopoulos & Cussens 2005): regions declared to have a constant class
# distribution, so no tree may split inside them.


def box_sides(boxes, thresholds: np.ndarray, feature_names=None, *, where: str = "") -> np.ndarray:
    """Encode box constraints against the split grid.

    Parameters
    ----------
    boxes : list of dicts ``{feature: (low, high)}``; a feature is a column name (from
        ``feature_names``) or an integer index; features not named are unbounded.  ``low`` /
        ``high`` may be ``-inf`` / ``inf`` (or None).
    thresholds : (F, C) candidate thresholds (:class:`~bdtree_jax.data.SplitGrid`).
    feature_names : list of str, optional.

    Returns
    -------
    (K, F, C) int8: 0 if box ``k`` lies left of threshold ``c`` of feature ``f``
    (``high <= t``), 1 if right (``low >= t``), 2 if the threshold cuts through it.
    """
    thresholds = np.asarray(thresholds, float)
    F = thresholds.shape[0]
    names = list(feature_names) if feature_names is not None else [f"x{f}" for f in range(F)]
    if isinstance(boxes, dict):
        boxes = [boxes]
    if not isinstance(boxes, (list, tuple)):
        raise ValueError(f"{where}box_constraints must be a list of dicts {{feature: (low, high)}}; got {type(boxes).__name__}.")
    low = np.full((len(boxes), F), -np.inf)
    high = np.full((len(boxes), F), np.inf)
    for k, box in enumerate(boxes):
        if not isinstance(box, dict) or not box:
            raise ValueError(f"{where}box_constraints[{k}] must be a non-empty dict {{feature: (low, high)}}; got {box!r}.")
        for feat, bounds in box.items():
            if isinstance(feat, (int, np.integer)) and not isinstance(feat, bool):
                if not 0 <= feat < F:
                    raise ValueError(f"{where}box_constraints[{k}]: feature index {feat} is out of range (X has {F} features).")
                f = int(feat)
            elif isinstance(feat, str) and feat in names:
                f = names.index(feat)
            else:
                raise ValueError(f"{where}box_constraints[{k}]: unknown feature {feat!r}; features are {names}.")
            try:
                a, b = bounds
                a = -np.inf if a is None else float(a)
                b = np.inf if b is None else float(b)
            except (TypeError, ValueError):
                raise ValueError(f"{where}box_constraints[{k}][{feat!r}] must be a pair (low, high) of numbers; got {bounds!r}.") from None
            if np.isnan(a) or np.isnan(b) or not a < b:
                raise ValueError(f"{where}box_constraints[{k}][{feat!r}] needs low < high; got ({a}, {b}).")
            low[k, f], high[k, f] = a, b
    t = thresholds[None]
    side = np.where(high[:, :, None] <= t, 0, np.where(low[:, :, None] >= t, 1, 2))
    return side.astype(np.int8)


def violates_boxes(tree: Tree, box_side: Array) -> Array:
    """() bool: some box is cut by a rule of a node whose region holds it.

    Each box starts at the root and follows the side it lies on at every split (a box never
    cut stays inside one node per level and ends inside one leaf)."""
    depth = max_depth_of(tree)
    tree = Tree(*(jnp.asarray(a) for a in tree))

    def one(side):  # side: (F, C)
        node, bad = jnp.int32(0), jnp.bool_(False)
        for _ in range(depth):
            split = tree.is_split[node]
            s = side[tree.feature[node], tree.cut[node]]
            bad = bad | (split & (s == 2))
            node = jnp.where(split, 2 * node + 1 + jnp.minimum(s, 1).astype(jnp.int32), node)
        return bad

    return jnp.any(jax.vmap(one)(box_side))


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
            lo_l, hi_l = _narrow_level(tree, level, new_lo, new_hi, data.cut_count)
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
        counts = jnp.cumsum((width > 0).astype(jnp.int32), axis=1)  # (count, F)
        k = jnp.floor(uniforms[level_slots, 1] * counts[:, -1]).astype(jnp.int32)
        feature = jnp.argmax(counts > k[:, None], axis=1).astype(jnp.int32)
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
