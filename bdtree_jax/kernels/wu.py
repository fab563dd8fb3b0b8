"""The restructure move of Wu, Tjelmeland & West (2007) and their local/restructure schedule.

Derivation: ``docs/theory/wu-restructure.md``.  **This is our construction, consistent with the
paper but not a transcription of it**: the proposal, its weights ("Variant Π") and the
acceptance formula below are derived for this library's CGM98 prior (:mod:`bdtree_jax.priors`:
``split_prob``, valid-cut intervals ``[lo, hi)`` with ``min_leaf_size``, ``split_prior`` cut
weights).

**Groups.**  The current tree ``T`` (a :class:`~bdtree_jax.kernels.cgm.CGMState`) partitions the
training rows into its ``K`` leaves, the groups ``G_k`` (indexed by their heap slot; in the
prior's support every leaf holds >= 1 row).  A restructure proposes a tree ``T'`` with the same
partition ``P``, so the likelihood ratio is exactly 1 (at any inverse temperature).  Per group
and feature the smallest and largest bin of its rows (``segment_min / max`` by ``leaf_id``).

**Proposal** ``q(T' | P)``, top-down over the heap in breadth-first order, one level at a time
(all the level's nodes at once, fixed shapes).  A node ``η`` at depth ``d`` holds a set ``S`` of
groups (its rows are their union):

* ``|S| = 1``: a leaf; ``|S| = 0``: the slot is unused.
* ``|S| >= 2``: a rule ``(v, c)`` is *compatible* when it sends every group of ``S`` wholly to one
  side (no group has ``lo_k(v) <= c < hi_k(v)``) **and** is valid under the prior at ``η``:
  ``c`` in the node's valid-cut interval ``[lo_v(η), hi_v(η))`` from its rows (with
  ``min_leaf_size = m`` that leaves >= m rows on each side, hence >= 1 group).  Its weight is
  the prior's rule probability at ``η``::

      w(v, c | S) = r_η(v, c) = 1 / n_v(η) * w_v[c] / sum_{c' in [lo_v, hi_v)} w_v[c']

  (``n_v`` the features with a valid cut at ``η``, ``w_v`` the ``split_prior`` cut weights,
  :func:`~bdtree_jax.priors.log_rule_prob`), ``W(S) = sum`` over the compatible rules.  The rule
  is drawn with probability ``w / W(S)`` (inverse CDF over the flattened (feature, cut) array)
  and the groups go to the children ``2η+1`` (bins ``<= c``) and ``2η+2``.

No dead ends: restricting ``T`` to the rows of ``S`` gives a tree whose leaves are ``S``'s groups;
its top rule separates two non-empty unions of whole groups of >= m rows each, so it is
compatible and valid at ``η`` (``W(S) > 0``).  **Capacity rule**: a node at ``max_depth`` holding
>= 2 groups cannot split in the padded heap (the prior's split probability is 0 there), so such a
``T'`` has prior 0: the proposal is rejected (the chain stays; MH stays exact -- the heap only
limits which trees exist, as ``max_depth`` does in the prior).

**Acceptance.**  ``q(T' | P) = prod_{internal η of T'} w(rule_η | S_η) / W(S_η)``; the reverse
proposal ``q(T | P)`` is the same product over ``T``'s internal nodes (``S_η`` = the groups below
``η``; ``T`` is reachable: its rules are compatible and valid).  The prior is
``π(T) = prod_int p_s(η) r_η(rule_η) * prod_leaf (1 - p_s(η) 1[η has a valid cut])`` (a leaf
whose rows have no valid cut, or at ``max_depth``, has factor 1, as in
:func:`~bdtree_jax.priors.log_tree_prior`).  With ``w = r`` the rule probabilities cancel::

    π(T) / q(T | P) = prod_int p_s(η) W(S_η) * prod_leaf (1 - p_s(η) 1[valid cut])  =:  Φ(T)

    α = min{1, π(T') q(T | P) / (π(T) q(T' | P))} = min{1, Φ(T') / Φ(T)}.

Leaves' factors depend on their group and depth, internal ones on the node's rows and depth, so
``Φ`` is computed by the same top-down sweep, once drawing ``T'`` and once replaying ``T``.  The
code evaluates ``log Φ = log π - log q`` from the sweep's pieces (``log π`` is checked against
:func:`~bdtree_jax.priors.log_tree_prior` in the tests); ``weights="uniform"`` (Variant U,
``w = 1`` on the compatible rules) uses the same general ratio.  With box constraints the prior
is ``π 1[T respects the boxes]``, so ``T'`` violating a box is rejected and the ratio is otherwise
unchanged.  The accepted state's caches are rebuilt consistently: ``leaf_id`` maps every group
to its new leaf, the sufficient statistics are re-summed from it, and the node bounds are the
sweep's own (the groups' min / max bins for ``min_leaf_size = 1``, else the rows' order
statistics, one :func:`~bdtree_jax.priors.level_bounds` per level) -- equal to a full re-score's
(tested).

**Cost** per restructure: ``O(n F)`` for the groups' bins, then the two sweeps (``T'`` drawn,
``T`` replayed) batched in one program, per level ``O(2^d F C)`` (``C`` cut slots) for the
compatibility counts (a scatter of ``±1`` at every group's ``lo, hi`` then a cumulative sum over
cuts); levels from depth 3 on that no group reaches are skipped.

**Exact fibre-Gibbs variant** (``kind="gibbs"`` / ``"auto"``): ``T'`` drawn from ``π`` restricted to
the fibre ``{T': P(T') = P}`` and always accepted (:mod:`bdtree_jax.kernels.fibre_gibbs`).

**Pinball prior** (``structure="pinball"``, :mod:`bdtree_jax.priors`: the ``Φ`` formula with
``p_s`` replaced by shape factors).  Then ``π(T) = p_size(K) prod_int p_shape(k_L(η) |
k(η)) r_η(rule_η)`` with no leaf factors; ``k(η) = |S_η|`` (a node's leaves are its groups) and
``k_L(η) = |S_L|``.  ``K`` is the same for ``T`` and ``T'``, so ``p_size`` cancels and Variant Π
gives::

    Φ(T) = prod_int p_shape(|S_L| | |S_η|) W(S_η),

computed as before as ``log π - log q`` (the sweep adds each internal node's shape factor, from
the groups its chosen rule sends left, and ``log p_size(K)``).  The fibre DP becomes::

    Z(S, d) = 1                                                                |S| = 1
    Z(S, d) = sum_{compatible valid (v, c) at S} r(v, c | S) p_shape(|S_L| | |S|) Z(S_L, d+1) Z(S_R, d+1)
    Z(S, D) = 1[|S| = 1]

(the shape factor is folded into each block's ``log_w``, so the top-down draw is unchanged), and
``Z(P, 0) = sum of π / p_size(K)`` over the fibre (tested against the enumeration).  The capacity
rule is the pinball prior's own truncation at ``max_depth``.

**Schedule** (:func:`wu`): one iteration = ``n_local`` CGM steps, one restructure, ``n_local``
CGM steps (the paper's published protocol uses 25).  The restructure is not ergodic alone (the
partition never changes), the CGM steps are; each piece leaves ``p(T) L(T)^beta`` invariant.

**Categorical features and missing values** (docs/categorical-missing.md; ``CGMConfig.general_rules``,
decided statically from the data).  A node's rule is ``(v, c, nan_left)`` on an ordered feature or
``(v, S, nan_left)`` on a categorical one, with the rule prior of :mod:`bdtree_jax.priors.categorical`
(``valid_cuts="data"``, ``min_leaf_size = 1``, CGM98 structure): availability from the node's rows
whose value is not missing, a categorical feature's ``2**(k-1) - 1`` level partitions uniform (the
smallest available level on the right), the missing-value bit ``Bernoulli(1/2)``.  The groups'
codes, missing cells and levels are :func:`~bdtree_jax.kernels.wu_groups.group_codes`.  A rule is
compatible at a node holding ``S`` when every group lies wholly on one side (a group's rows missing
``v`` on the nan side):

* ordered ``v``: no group's values straddle ``c`` (over its rows with a value), ``c`` valid at the
  node; with ``nan_left`` every group with both missing and present values lies left (``c >= max
  hi_k`` over them), else right (``c < min lo_k``).  A group whose rows all miss ``v`` follows the bit.
* categorical ``v``: the groups' present levels form connected components (two groups sharing a
  level go together; :func:`~bdtree_jax.kernels.wu_groups.components`).  ``S`` is a union of
  components, never the one holding the smallest available level.  With ``m`` components and ``M``
  of them holding a group with missing rows (``M0``: one of them holds the smallest level),
  ``nan_left`` forces those into ``S`` (impossible when ``M0``) and leaves ``2**(m-1-M) - [M = 0]``
  sets; ``nan_left`` false forces them out and leaves ``2**(m - 1 - M + M0) - 1``.

Variant Π weighs a compatible rule by its prior probability at the node (every categorical rule of
``v`` the same), so ``W(S)`` sums the ordered rules' weights and ``r * count`` per categorical feature
and bit; the sweep draws a block (ordered ``(v, c, bit)``, or categorical ``(v, bit)``) by inverse CDF,
then a categorical rule's free components uniformly among the allowed subsets
(:func:`~bdtree_jax.kernels.wu_groups.draw_levels`; its randomness: (2N + 1,) uniforms and a key,
:func:`draw_restructure`).  The replay checks every node's rule group by group and weighs it by
:func:`~bdtree_jax.priors.categorical.log_rule_prob_general`; the proposed tree is re-scored in full
(:func:`~bdtree_jax.kernels._moves.score`) and ``π`` in ``Φ`` is the scored states' prior.  The
local steps are the general-rule CGM chain's (:func:`~bdtree_jax.kernels.cgm.step_with_uniforms`).  The
fibre-Gibbs variant is not implemented for such data: ``restructure="auto"`` is the MH move,
``"gibbs"`` is refused.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors import PinballTables, check_valid_cuts, level_bounds, pinball_shape, subtree_sums
from ..priors.categorical import (
    _log_partitions, _pack, _unpack, categorical, general_rules, log_rule_prob_general, rule_available,
)
from ..tree import Rule, Tree, make_tree, n_nodes
from . import _moves, cgm
from ._moves import with_scores
from .base import SamplingAlgorithm
from .fibre_gibbs import MAX_GROUPS, gibbs_propose, group_bins
from .wu_groups import BIG, GroupCodes, components, draw_levels, group_codes
from .._validate import check_one_of, is_int

__all__ = [
    "RestructureConfig", "RestructureInfo", "WUConfig", "WUInfo", "WEIGHTS", "RESTRUCTURES", "MAX_GROUPS",
    "GroupCodes", "check_restructure", "draw_restructure", "group_codes", "propose", "restructure_step", "wu",
]

WEIGHTS = ("prior", "uniform")
RESTRUCTURES = ("auto", "pi", "gibbs")
_GIBBS_CONTROLS = ("", "drop_leaf", "drop_rule")
_SKIP_FROM = 3  # levels from this depth on are skipped when no group reaches them (a cond costs compile time)


@dataclass(frozen=True)
class RestructureConfig:
    """Static configuration of the restructure move.

    Attributes
    ----------
    max_depth, min_leaf_size : the tree prior's structure (as :class:`~bdtree_jax.kernels.cgm.CGMConfig`).
    weights : "prior" (Variant Π, the default: the rule prior at the node) or "uniform"
        (Variant U: every compatible rule weighs 1); both are exact.
    drop_w : **negative control only** -- leave ``W(S)`` out of ``Φ`` (a wrong ratio; the chain
        is then not invariant).
    kind : "pi" (the default: the MH move above, Variant Π or U by ``weights``), "gibbs" (the exact
        fibre-Gibbs draw, always accepted; needs ``2**max_depth <= max_groups`` so that every tree
        of the heap is handled) or "auto" (Gibbs when the tree has ``K <= max_groups`` leaves,
        else the MH move; only Gibbs is compiled when ``2**max_depth <= max_groups``).
    max_groups : the largest ``K`` of the fibre DP (2 .. :data:`MAX_GROUPS`; tables of
        ``2**max_groups`` subsets).
    gibbs_control : **negative control only** -- "drop_leaf" (leaf factors left out of ``Z``) or
        "drop_rule" (every compatible cut weighs 1): the draws are then not ``π`` on the fibre.
    """

    max_depth: int
    min_leaf_size: int = 1
    weights: str = "prior"
    drop_w: bool = False
    kind: str = "pi"
    max_groups: int = 10
    gibbs_control: str = ""

    def __post_init__(self):
        check_one_of("weights", self.weights, WEIGHTS)
        check_restructure(self.kind, self.max_groups, self.max_depth)
        check_one_of("gibbs_control", self.gibbs_control, _GIBBS_CONTROLS)

    @property
    def gibbs_only(self) -> bool:
        """Every restructure is the fibre-Gibbs draw (statically: no MH branch is compiled)."""
        return self.kind == "gibbs" or (self.kind == "auto" and 2**self.max_depth <= self.max_groups)


def check_restructure(kind, max_groups, max_depth, where=""):
    """The ``restructure`` / ``max_groups`` options (clear ``ValueError`` s)."""
    check_one_of(f"{where}restructure", kind, RESTRUCTURES)
    if (not is_int(max_groups)
            or not 2 <= max_groups <= MAX_GROUPS):
        raise ValueError(f"{where}max_groups must be an integer in [2, {MAX_GROUPS}]; got {max_groups!r}.")
    if kind == "gibbs" and 2**max_depth > max_groups:
        raise ValueError(
            f"{where}restructure='gibbs' needs max_groups >= 2**max_depth = {2**max_depth} (a tree of depth "
            f"{max_depth} can have that many leaves; got max_groups={max_groups}); use restructure='auto' to fall "
            "back to Variant Π above max_groups leaves."
        )


class RestructureInfo(NamedTuple):
    """Per-proposal diagnostics: ``accepted`` () bool (False when ``K < 2``: no move),
    ``log_accept_ratio`` () float32 ``log Φ(T') - log Φ(T)`` (``-inf`` if rejected for capacity
    or boxes), ``n_groups`` () int32 ``K``, ``overflow`` () bool (``T'`` needed a split at
    ``max_depth``, i.e. depth beyond the heap: rejected), ``kind`` () int32 the variant used
    (0 the MH move, 1 the fibre-Gibbs draw, whose ``log_accept_ratio`` is 0, -inf if ``T'``
    violates a box)."""

    accepted: Array
    log_accept_ratio: Array
    n_groups: Array
    overflow: Array
    kind: Array


class _Sweep(NamedTuple):
    """One or more sweeps (leading axis ``B``)."""

    tree: Tree  # (B, N) arrays (a MixedTree with categorical features or missing values)
    leaf_of_group: Array  # (B, N) new leaf slot of every group (groups: heap slots of T's leaves)
    lo: Array  # (B, N, F) node bounds of the swept tree
    hi: Array
    log_prior: Array  # log π of the swept tree (no box term; numeric data only, else 0)
    log_q: Array  # log q(tree | P)
    log_W: Array  # sum over internal nodes of log W(S)
    valid: Array  # every internal node had a compatible chosen rule above max_depth
    overflow: Array  # a node at max_depth held >= 2 groups


def draw_restructure(key: PRNGKey, max_depth: int, kind: str = "pi", general: bool = False):
    """The randomness of one restructure: (N + 1,) uniforms for ``kind="pi"`` (one rule draw per
    heap slot, accept), else (2N + 1,) (Gibbs: a block and a cut per slot; the MH move of "auto"
    reads the first N and the last).  ``general`` (categorical features or missing values): (2N + 1,)
    uniforms (a block and the lowest included component per slot, accept) and a key (the
    components' fair coins)."""
    N = n_nodes(max_depth)
    if not general:
        return jax.random.uniform(key, (N + 1 if kind == "pi" else 2 * N + 1,))
    k_uniform, k_coins = jax.random.split(key)
    return jax.random.uniform(k_uniform, (2 * N + 1,)), k_coins


def _sweep(u: Array, key: PRNGKey | None, forced: Tree, free: Array, state: cgm.CGMState, g: GroupCodes,
           data: TreeData, config: RestructureConfig) -> _Sweep:
    """Top-down proposals over the groups ``g``, several at once (leading axis ``B`` of ``free``):
    where ``free`` draw ``T'`` with the uniforms ``u`` ((N,); (2N,) and the key ``key`` with
    categorical features), elsewhere replay ``forced`` (the current tree) to evaluate ``π`` and
    ``q`` on it.  The modes share one batched program per level, and a level from depth 3 on that
    no group reaches is skipped."""
    D, m = config.max_depth, config.min_leaf_size
    N = n_nodes(D)
    B = free.shape[0]
    F = data.bins.shape[1]
    cum = data.cut_cumwidth  # (F, C + 2)
    C = cum.shape[1] - 2  # cut slots: valid cuts lie in [0, C)
    wcut = jnp.diff(cum, axis=1)[:, :C]  # (F, C)
    fidx, cidx = jnp.arange(F), jnp.arange(C)
    general = general_rules(data)
    bits = forced.nan_left is not None
    nb = 2 if bits else 1
    words = 0 if data.level_masks is None else data.level_masks.shape[-1]
    L = 32 * words
    cat = categorical(data) if words else None
    prior_weights = config.weights == "prior"
    gnon = g.hi >= 0  # the group has a row with a value
    pm = g.missing & gnon
    u_coin = jax.random.uniform(key, (N, L)) if words else None
    zero = jnp.zeros(B, jnp.float32)
    pinball = data.split_prob if isinstance(data.split_prob, PinballTables) else None
    split_prob = data.split_prob if pinball is None else pinball.may_split

    pos = jnp.broadcast_to(jnp.where(g.is_group, 0, N).astype(jnp.int32), (B, N))  # node of each group (N: none)
    leaf_of_group = jnp.zeros((B, N), jnp.int32)
    acc = dict(log_prior=zero, log_q=zero, log_W=zero, valid=jnp.ones(B, bool), overflow=jnp.zeros(B, bool))
    out = {k: [] for k in ("is_split", "feature", "cut", "nan_left", "levels_left", "lo", "hi")}

    for d in range(D + 1):
        first, count = 2**d - 1, 2**d
        sl = slice(first, first + count)
        rel = pos - first
        here = g.is_group & (rel >= 0) & (rel < count)  # (B, N)
        jg = jnp.where(here, rel, count).astype(jnp.int32)  # node (within the level) of each group
        p = split_prob[sl]
        forced_rule = Rule(forced.feature[sl].astype(jnp.int32),
                           jnp.clip(forced.cut[sl].astype(jnp.int32), 0, max(C - 1, 0)),
                           forced.nan_left[sl] if bits else None, forced.levels_left[sl] if words else None)

        def level(jg, free, d=d, count=count, p=p, sl=sl, forced_rule=forced_rule):
            def seg(x, op):
                return op(x, jg, num_segments=count + 1)[:count]

            size = seg(jnp.ones(N, jnp.int32), jax.ops.segment_sum)
            internal = size >= 2
            if m == 1:  # min / max codes compose over groups
                lo, hi = seg(g.lo, jax.ops.segment_min), seg(g.hi, jax.ops.segment_max)
                empty = hi < 0 if cat is None else (hi < 0) | cat[None]  # no value, or a categorical feature
                lo, hi = jnp.where(empty, 0, lo), jnp.where(empty, 0, hi)
            else:  # order statistics: from the rows
                lo, hi = level_bounds(jg[state.leaf_id], count, data, m)
            present = seg(g.levels.astype(jnp.int8), jax.ops.segment_max) > 0 if words else None  # (count, F, L)
            levels = _pack(present, words) if words else None
            n_valid = jnp.sum(rule_available(lo, hi, levels), axis=-1)
            can = (n_valid > 0) & (p > 0)
            if pinball is None:
                leaf_terms = jnp.sum(jnp.where(size == 1, jnp.log1p(-jnp.where(can, p, 0.0)), 0.0))
            else:  # pinball: no leaf factors (p is 1 above max_depth: log p = 0 below)
                leaf_terms = jnp.float32(0.0)
            zf, zi = jnp.float32(0.0), jnp.zeros(count, jnp.int32)
            if d == D:  # capacity: a node here cannot split
                none = Rule(zi, zi, jnp.zeros(count, bool) if bits else None,
                            jnp.zeros((count, words), jnp.uint32) if words else None)
                return lo, hi, internal, none, jnp.zeros(N, bool), leaf_terms, zf, zf, jnp.bool_(True), jnp.any(internal)
            # ordered rules: groups straddling cut c of feature f (+1 at lo_k(f), -1 at hi_k(f), summed over
            # cuts; groups without a value of f count on neither side)
            rows = jnp.broadcast_to(jg[:, None], (N, F))
            cols = jnp.broadcast_to(fidx[None, :], (N, F))
            step = gnon.astype(jnp.int32)
            diff = jnp.zeros((count + 1, F, C + 1), jnp.int32)
            diff = diff.at[rows, cols, jnp.clip(g.lo, 0, C)].add(step).at[rows, cols, jnp.clip(g.hi, 0, C)].add(-step)
            straddle = jnp.cumsum(diff[:count], axis=-1)[:, :, :C]
            in_range = (cidx >= lo[:, :, None]) & (cidx < hi[:, :, None])
            compatible = (straddle == 0) & in_range & internal[:, None, None]
            if cat is not None:
                compatible = compatible & ~cat[None, :, None]
            if bits:  # nan_left: every group with missing and present values lies left, else right
                pm_hi = seg(jnp.where(pm, g.hi, -1), jax.ops.segment_max)[..., None]
                pm_lo = seg(jnp.where(pm, g.lo, BIG), jax.ops.segment_min)[..., None]
                compatible = jnp.stack([compatible & (cidx >= pm_hi), compatible & (cidx < pm_lo)], -1)
            else:
                compatible = compatible[..., None]
            total = cum[fidx, hi] - cum[fidx, lo]  # (count, F) weight of the valid cuts
            denom = nb * n_valid[:, None] * total
            rule = jnp.where(compatible, (wcut[None] / jnp.where(denom > 0, denom, 1.0)[:, :, None])[..., None], 0.0)
            w = rule if prior_weights else compatible.astype(jnp.float32)  # (count, F, C, nb)
            blocks = [w.reshape(count, -1)]
            if words:  # categorical rules: (count, F, nb) blocks of equal rules
                t, label = components(g.levels, jg, count)
                lidx = jnp.arange(L)
                reps = present & (t == lidx)
                pm_rep = seg((pm[..., None] & (label[..., None] == lidx)).astype(jnp.int8), jax.ops.segment_max) > 0
                low = lidx == jnp.argmax(present, -1)[..., None]
                n_comp, n_pm = jnp.sum(reps, -1), jnp.sum(pm_rep, -1)
                low_pm = jnp.any(pm_rep & low, -1)
                k = jnp.sum(present, -1)
                if bits:
                    n_left = jnp.where(low_pm, 0.0, jnp.exp2(n_comp - 1.0 - n_pm) - (n_pm == 0))
                    n_right = jnp.exp2(n_comp - 1.0 - n_pm + low_pm) - 1.0
                    n_rules = jnp.stack([n_left, n_right], -1)
                else:
                    n_rules = (jnp.exp2(n_comp - 1.0) - 1.0)[..., None]
                usable = cat[None] & (k >= 2) & internal[:, None]
                n_rules = jnp.where(usable[..., None], jnp.maximum(n_rules, 0.0), 0.0)
                r_cat = jnp.exp(-_log_partitions(k)) / (nb * jnp.maximum(n_valid, 1)[:, None])
                blocks.append((n_rules * r_cat[..., None] if prior_weights else n_rules).reshape(count, -1))
            flat = jnp.concatenate(blocks, -1) if words else blocks[0]
            W = flat.sum(-1)
            cdf = jnp.cumsum(flat, axis=-1)  # inverse CDF over the flattened blocks' weights
            idx = jnp.sum(cdf <= (u[sl] * cdf[:, -1])[:, None], axis=-1)
            idx = jnp.minimum(idx, flat.shape[-1] - 1 - jnp.argmax((flat > 0)[:, ::-1], axis=-1))  # rounding guard
            n_o = F * C * nb
            ordered = idx < n_o
            new = Rule(jnp.where(ordered, idx // (C * nb), (idx - n_o) // nb), jnp.where(ordered, (idx // nb) % C, 0),
                       jnp.where(ordered, idx % nb, (idx - n_o) % nb) == 0 if bits else None, None)
            if words:
                take = lambda a: jnp.take_along_axis(a, new.feature[:, None, None], axis=1)[:, 0]  # noqa: E731
                s_new = draw_levels(take(reps), take(pm_rep), take(t), take(present), take(low),
                                    new.nan_left if bits else jnp.zeros(count, bool), u[N + first : N + first + count],
                                    u_coin[sl], words)
                new = new._replace(levels_left=jnp.where(ordered[:, None], jnp.uint32(0), s_new))
            rule_new = Rule(*(None if a is None else jnp.where(free, a, b).astype(b.dtype) for a, b in zip(new, forced_rule)))
            f_new, c_new = rule_new.feature, rule_new.cut
            jc = jnp.clip(jg, 0, count - 1)
            right = g.lo[jnp.arange(N), f_new[jc]] > c_new[jc]  # (N,) the group's side of an ordered rule
            if general:  # the chosen rule checked group by group; its weight the rule prior at the node
                fg = f_new[jc][:, None]
                at = lambda a: jnp.take_along_axis(a, fg, axis=1)[:, 0]  # noqa: E731
                miss_g, non_g = at(g.missing), at(gnon)
                nan_g = rule_new.nan_left[jc] if bits else jnp.zeros(N, bool)
                left_v, right_v = ~non_g | (at(g.hi) <= c_new[jc]), ~non_g | right
                if words:
                    lev = jnp.take_along_axis(g.levels, fg[..., None], axis=1)[:, 0]  # (N, L)
                    s_g = _unpack(rule_new.levels_left[jc])
                    is_cat = cat[fg[:, 0]]
                    left_v = jnp.where(is_cat, ~jnp.any(lev & ~s_g, -1), left_v)
                    right_v = jnp.where(is_cat, ~jnp.any(lev & s_g, -1), right_v)
                all_left = left_v & (~miss_g | nan_g)
                all_right = right_v & (~miss_g | ~nan_g)
                bad = (jg < count) & ~(all_left | all_right)
                log_r = jax.vmap(log_rule_prob_general, in_axes=(0, 0, 0 if words else None, 0, None))(
                    lo, hi, levels, rule_new, data)
                ok = ~internal | ((p > 0) & (W > 0) & (seg(bad.astype(jnp.int32), jax.ops.segment_max) == 0)
                                  & jnp.isfinite(log_r))
                use = internal & ok
                log_W = jnp.sum(jnp.where(use, jnp.log(jnp.where(use, W, 1.0)), 0.0))
                log_q = jnp.sum(jnp.where(use, log_r if prior_weights else 0.0, 0.0)) - log_W
                return lo, hi, internal, rule_new, ~all_left, zf, log_q, log_W, jnp.all(ok), jnp.bool_(False)
            j = jnp.arange(count)
            w_chosen = w[j, f_new, c_new, 0]
            r_chosen = rule[j, f_new, c_new, 0]
            ok = ~internal | ((p > 0) & (W > 0) & (w_chosen > 0))
            log = lambda a: jnp.where(internal & ok, jnp.log(jnp.where(internal & ok, a, 1.0)), 0.0)  # noqa: E731
            log_prior = leaf_terms + jnp.sum(log(p) + log(r_chosen))
            if pinball is not None:  # the shape factor p_shape(k_L | k) of every internal node
                k_left = seg(((jg < count) & ~right).astype(jnp.int32), jax.ops.segment_sum)
                log_prior = log_prior + jnp.sum(jnp.where(internal & ok, pinball_shape(pinball, size, k_left), 0.0))
            log_q = jnp.sum(log(w_chosen) - log(W))
            return lo, hi, internal, rule_new, right, log_prior, log_q, jnp.sum(log(W)), jnp.all(ok), jnp.bool_(False)

        batched = jax.vmap(level)
        if d < _SKIP_FROM or d == D:  # small levels (and the last, which has no rules) always run
            res = batched(jg, free)
        else:
            def skip(jg, free):  # no group reaches this level: zeros, valid
                res = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(batched, jg, free))
                return res[:8] + (jnp.ones(B, bool), res[9])

            res = jax.lax.cond(jnp.any(here), batched, skip, jg, free)
        lo, hi, internal, rule_new, right, lp, lq, lw, ok, over = res
        acc["log_prior"] += lp
        acc["log_q"] += lq
        acc["log_W"] += lw
        acc["valid"] &= ok
        acc["overflow"] |= over
        split = internal if d < D else jnp.zeros((B, count), bool)
        out["is_split"].append(split)
        out["feature"].append(jnp.where(split, rule_new.feature, 0).astype(forced.feature.dtype))
        out["cut"].append(jnp.where(split, rule_new.cut, 0).astype(forced.cut.dtype))
        out["nan_left"].append(split & rule_new.nan_left if bits else None)
        out["levels_left"].append(jnp.where(split[..., None], rule_new.levels_left, jnp.uint32(0)) if words else None)
        out["lo"].append(lo)
        out["hi"].append(hi)
        # groups at leaves stop here; the others go to their side of the node's rule
        jc = jnp.clip(jg, 0, count - 1)
        internal_g = jnp.take_along_axis(internal, jc, axis=1)
        at_leaf = here & ~internal_g
        leaf_of_group = jnp.where(at_leaf, pos, leaf_of_group)
        moving = here & internal_g
        pos = jnp.where(moving, 2 * pos + 1 + right.astype(jnp.int32), jnp.where(at_leaf, N, pos))

    if pinball is not None:  # p_size(K): the same K for T and T' (cancels in Φ; kept so log_prior is π's)
        size = pinball.log_size.shape[-1]
        acc["log_prior"] += pinball.log_size[jnp.clip(g.is_group.sum(), 0, size - 1)]
    fields = {k: None if v[0] is None else jnp.concatenate(v, 1) for k, v in out.items()}
    tree = make_tree(fields["is_split"], fields["feature"], fields["cut"], fields["nan_left"], fields["levels_left"])
    return _Sweep(tree, leaf_of_group, fields["lo"], fields["hi"], acc["log_prior"], acc["log_q"], acc["log_W"],
                  acc["valid"], acc["overflow"])


def _log_phi(s: _Sweep, config: RestructureConfig, log_prior: Array | None = None) -> Array:
    """``log Φ = log π - log q`` (Variant Π: ``Σ log p_s + Σ log W + Σ leaf terms``); ``log_prior``:
    ``π`` of the scored tree (categorical features or missing values), else the sweep's own."""
    out = (s.log_prior if log_prior is None else log_prior) - s.log_q
    return out - s.log_W if config.drop_w else out


def propose(draws, state: cgm.CGMState, data: TreeData, config: RestructureConfig):
    """The proposed state and the pieces of the ratio; ``draws`` from :func:`draw_restructure`.

    Returns
    -------
    proposed : CGMState of ``T'`` (caches consistent with it: numeric data from the sweep's own
        bounds and the groups' new leaves, else re-scored in full).
    log_phi_new, log_phi_old : () ``log Φ(T')``, ``log Φ(T)``.
    ok : () bool ``T'`` is admissible (fits the heap, every rule valid, respects the boxes).
    n_groups : () int32 ``K``.
    sweeps : the two :class:`_Sweep` records (``T'`` drawn, ``T`` replayed), for tests.
    """
    general = general_rules(data)
    uniforms, key = draws if general else (draws, None)
    g = group_codes(state, data)
    both = _sweep(uniforms[:-1], key, state.tree, jnp.array([True, False]), state, g, data, config)
    new, old = (jax.tree.map(lambda a, i=i: a[i], both) for i in (0, 1))
    if general:
        proposed = _moves.score(new.tree, data, config, state.beta)
        proposed = proposed._replace(leaf_id=proposed.leaf_id.astype(state.leaf_id.dtype))
        phi_new, phi_old = _log_phi(new, config, proposed.log_prior), _log_phi(old, config, state.log_prior)
    else:
        leaf_id = new.leaf_of_group[state.leaf_id]
        stats = subtree_sums(data.point_stats, leaf_id, state.tree.is_split.shape[0])
        proposed = with_scores(new.tree, leaf_id, stats, new.lo, new.hi, data, state.beta)
        phi_new, phi_old = _log_phi(new, config), _log_phi(old, config)
    ok = new.valid & ~new.overflow & old.valid & jnp.isfinite(proposed.log_prior)
    return proposed, phi_new, phi_old, ok, g.is_group.sum().astype(jnp.int32), (new, old)


def _mh_step(draws, state: cgm.CGMState, data: TreeData, config: RestructureConfig):
    proposed, log_phi_new, log_phi_old, ok, K, (new, _) = propose(draws, state, data, config)
    log_ratio = jnp.where(ok, log_phi_new - log_phi_old, -jnp.inf)
    log_ratio = jnp.where(jnp.isnan(log_ratio), -jnp.inf, log_ratio)
    u_accept = (draws[0] if general_rules(data) else draws)[-1]
    accepted = (K >= 2) & (jnp.log(u_accept) < log_ratio)
    new_state = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)
    return new_state, RestructureInfo(accepted, log_ratio, K, new.overflow, jnp.int32(0))


def _gibbs_step(uniforms: Array, state: cgm.CGMState, data: TreeData, config: RestructureConfig):
    proposed, ok, fib = gibbs_propose(uniforms, state, data, config)
    accepted = (fib.K >= 2) & ok
    new_state = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)
    return new_state, RestructureInfo(accepted, jnp.where(ok, 0.0, -jnp.inf).astype(jnp.float32), fib.K,
                                      jnp.bool_(False), jnp.int32(1))


def restructure_step(uniforms, state: cgm.CGMState, data: TreeData, config: RestructureConfig):
    """One restructure (module docstring): the MH move, the fibre-Gibbs draw, or ("auto") Gibbs when
    the tree has ``K <= max_groups`` leaves, else the MH move (always the MH move with categorical
    features or missing values); ``uniforms`` from :func:`draw_restructure` with the config's
    ``kind`` (and ``general``).  The prior is the one ``data`` carries (CGM98 or pinball; module
    docstring)."""
    if config.kind == "pi" or general_rules(data):
        return _mh_step(uniforms, state, data, config)
    if config.gibbs_only:
        return _gibbs_step(uniforms, state, data, config)
    K = group_bins(state, data)[0].sum()
    return jax.lax.cond(K <= config.max_groups, functools.partial(_gibbs_step, config=config),
                        functools.partial(_mh_step, config=config), uniforms, state, data)


# ----------------------------------------------------------------------------------------------
# The WU schedule: n_local CGM steps, one restructure, n_local CGM steps.


@dataclass(frozen=True)
class WUConfig:
    """Static configuration of the WU schedule.

    Attributes
    ----------
    cgm_config : CGMConfig of the local (grow / prune / change / swap) steps.
    n_local : CGM steps before and after the restructure (default 25, the paper's protocol).
    weights, drop_w : of the MH restructure move (:class:`RestructureConfig`).
    restructure : "auto" (the default: the exact fibre-Gibbs draw when the tree has at most
        ``max_groups`` leaves, else the MH move with Variant Π), "pi" (always the MH move) or
        "gibbs" (always the Gibbs draw; needs ``2**max_depth <= max_groups``).
    max_groups : the largest number of leaves the Gibbs draw handles (default 10).
    """

    cgm_config: cgm.CGMConfig
    n_local: int = 25
    weights: str = "prior"
    drop_w: bool = False
    restructure: str = "auto"
    max_groups: int = 10

    def __post_init__(self):
        if not is_int(self.n_local) or self.n_local < 1:
            raise ValueError(f"n_local must be an integer >= 1; got {self.n_local!r}.")
        object.__setattr__(self, "n_local", int(self.n_local))
        self.restructure_config  # validates weights, restructure, max_groups

    @property
    def restructure_config(self) -> RestructureConfig:
        return RestructureConfig(self.cgm_config.max_depth, self.cgm_config.min_leaf_size, self.weights, self.drop_w,
                                 self.restructure, self.max_groups)


class WUInfo(NamedTuple):
    """Per-iteration diagnostics: ``move`` () int32 the last local step's move (CGM's
    :data:`~bdtree_jax.kernels.cgm.MOVES` index, -1 none); ``accepted`` () bool some proposal of
    the iteration was accepted; ``restructure_accepted`` () bool; ``local_accept_rate`` ()
    float32 fraction of the ``2 n_local`` local proposals accepted; ``restructure_log_ratio``;
    ``restructure_kind`` () int32 the restructure's variant (0 the MH move, 1 the fibre-Gibbs draw)."""

    move: Array
    accepted: Array
    restructure_accepted: Array
    local_accept_rate: Array
    restructure_log_ratio: Array
    restructure_kind: Array


@functools.lru_cache(maxsize=64)
def wu(config: WUConfig) -> SamplingAlgorithm:
    """The WU schedule as a :class:`SamplingAlgorithm` (chains start at the stump): ``n_local`` local
    steps, the restructure, ``n_local`` more local steps; with ``cgm_config.general_rules``
    (categorical features or missing values) the local steps are the general-rule CGM chain's
    (:func:`~bdtree_jax.kernels.cgm.step_with_uniforms`) and the restructure the MH move.  Recorded per
    iteration: CGM's trace (the tree after the iteration; ``move`` / ``accepted`` as in
    :class:`WUInfo`) plus ``restructure_accepted``, ``restructure_kind`` and ``local_accept_rate``."""
    cgm_config, rconfig, n_local = config.cgm_config, config.restructure_config, config.n_local
    general = cgm_config.general_rules
    if general and rconfig.kind == "gibbs":
        raise ValueError("restructure='gibbs' (the fibre-Gibbs draw) is not available with categorical features or "
                         "missing values; use restructure='auto' or 'pi' (the Metropolis-Hastings move).")
    local_step = cgm.step_with_uniforms if general else cgm.step_with_uniforms

    def init_fn(key, data):
        check_valid_cuts(data, "The WU restructure (method='wu')")
        return (cgm.init if general else cgm.init)(key, data, cgm_config)

    def draw_fn(key):
        k_local, k_restructure = jax.random.split(key)
        if general:
            local = jax.vmap(jax.vmap(functools.partial(cgm.draw, general_rules=True)))(jax.random.split(k_local, (2, n_local)))
        else:
            local = jax.random.uniform(k_local, (2, n_local, 5))
        return local, draw_restructure(k_restructure, cgm_config.max_depth, rconfig.kind, general)

    def kernel(draws, state, data):
        u_local, u_restructure = draws

        def local(s, u):
            s, info = local_step(u, s, data, cgm_config)
            return s, (info.move, info.accepted)

        # One compiled copy of the local steps: two halves, the restructure after the first
        # (the predicate is the same for every chain, so the cond stays a branch under vmap).
        def half(s, xs):
            u, first = xs
            s, (moves, acc) = jax.lax.scan(local, s, u)

            def move(s):
                return restructure_step(u_restructure, s, data, rconfig)

            def stay(s):
                return s, RestructureInfo(jnp.bool_(False), jnp.float32(-jnp.inf), jnp.int32(0), jnp.bool_(False),
                                          jnp.int32(0))

            s, rinfo = jax.lax.cond(first, move, stay, s)
            return s, (moves[-1], acc.sum(), rinfo)

        state, (last_move, n_acc, rinfo) = jax.lax.scan(half, state, (u_local, jnp.array([True, False])))
        rinfo = jax.tree.map(lambda a: a[0], rinfo)
        n_acc = n_acc.sum()
        info = WUInfo(last_move[1], (n_acc > 0) | rinfo.accepted, rinfo.accepted,
                      n_acc.astype(jnp.float32) / (2 * n_local), rinfo.log_accept_ratio, rinfo.kind)
        return state, info

    def trace_fn(state, info):
        out = cgm.trace(state, cgm.CGMInfo(info.move, info.accepted, info.restructure_log_ratio),
                        cgm_config.trace_dtypes)
        out["restructure_accepted"] = info.restructure_accepted
        out["local_accept_rate"] = info.local_accept_rate
        out["restructure_kind"] = info.restructure_kind.astype(jnp.int8)
        return out

    return SamplingAlgorithm(init_fn, kernel, trace_fn, draw_fn)
