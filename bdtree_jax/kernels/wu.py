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

**Categorical features and missing values** (``CGMConfig.general_rules``): :func:`wu` returns
:func:`~bdtree_jax.kernels.wu_general.wu_general` (the general-rule CGM steps and the MH
restructure over rules with level sets and missing-value bits).  Numeric data never reach it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors import PinballTables, check_valid_cuts, level_bounds, pinball_shape, subtree_sums
from ..tree import Tree, n_nodes
from . import cgm
from ._moves import with_scores
from .fibre_gibbs import MAX_GROUPS, gibbs_propose, group_bins
from .base import SamplingAlgorithm

__all__ = [
    "RestructureConfig", "RestructureInfo", "WUConfig", "WUInfo", "WEIGHTS", "RESTRUCTURES", "MAX_GROUPS",
    "check_restructure", "draw_restructure", "propose", "restructure_step", "wu",
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
        if self.weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {WEIGHTS}; got {self.weights!r}.")
        check_restructure(self.kind, self.max_groups, self.max_depth)
        if self.gibbs_control not in _GIBBS_CONTROLS:
            raise ValueError(f"gibbs_control must be one of {_GIBBS_CONTROLS}; got {self.gibbs_control!r}.")

    @property
    def gibbs_only(self) -> bool:
        """Every restructure is the fibre-Gibbs draw (statically: no MH branch is compiled)."""
        return self.kind == "gibbs" or (self.kind == "auto" and 2**self.max_depth <= self.max_groups)


def check_restructure(kind, max_groups, max_depth, where=""):
    """The ``restructure`` / ``max_groups`` options (clear ``ValueError`` s)."""
    if not isinstance(kind, str) or kind not in RESTRUCTURES:
        raise ValueError(f"{where}restructure must be one of {RESTRUCTURES}; got {kind!r}.")
    if (not isinstance(max_groups, (int, np.integer)) or isinstance(max_groups, bool)
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

    tree: Tree  # (B, N) arrays
    leaf_of_group: Array  # (B, N) new leaf slot of every group (groups: heap slots of T's leaves)
    lo: Array  # (B, N, F) node bounds of the swept tree
    hi: Array
    log_prior: Array  # log π of the swept tree (no box term)
    log_q: Array  # log q(tree | P)
    log_W: Array  # sum over internal nodes of log W(S)
    valid: Array  # every internal node had a compatible chosen rule above max_depth
    overflow: Array  # a node at max_depth held >= 2 groups


def draw_restructure(key: PRNGKey, max_depth: int, kind: str = "pi") -> Array:
    """The randomness of one restructure: (N + 1,) uniforms for ``kind="pi"`` (one rule draw per
    heap slot, accept), else (2N + 1,) (Gibbs: a block and a cut per slot; the MH move of "auto"
    reads the first N and the last)."""
    N = n_nodes(max_depth)
    return jax.random.uniform(key, (N + 1 if kind == "pi" else 2 * N + 1,))


def _sweep(u: Array, forced: Tree, free: Array, state: cgm.CGMState, is_group, glo, ghi, data: TreeData,
           config: RestructureConfig) -> _Sweep:
    """Top-down proposals over the groups, several at once (leading axis ``B`` of ``free``): where
    ``free`` draw ``T'`` with the (N,) uniforms ``u``, elsewhere replay ``forced`` (the current
    tree) to evaluate ``π`` and ``q`` on it.  The modes share one batched program per level, and a
    level from depth 3 on that no group reaches is skipped."""
    D, m = config.max_depth, config.min_leaf_size
    N = n_nodes(D)
    B = free.shape[0]
    F = data.bins.shape[1]
    cum = data.cut_cumwidth  # (F, C + 2)
    C = cum.shape[1] - 2  # cut slots: valid cuts lie in [0, C)
    wcut = jnp.diff(cum, axis=1)[:, :C]  # (F, C)
    fidx = jnp.arange(F)
    cidx = jnp.arange(C)
    feat_dtype, cut_dtype = state.tree.feature.dtype, state.tree.cut.dtype
    zero = jnp.zeros(B, jnp.float32)
    pinball = data.split_prob if isinstance(data.split_prob, PinballTables) else None
    split_prob = data.split_prob if pinball is None else pinball.may_split

    pos = jnp.broadcast_to(jnp.where(is_group, 0, N).astype(jnp.int32), (B, N))  # node of each group (N: none)
    leaf_of_group = jnp.zeros((B, N), jnp.int32)
    acc = dict(log_prior=zero, log_q=zero, log_W=zero, valid=jnp.ones(B, bool), overflow=jnp.zeros(B, bool))
    is_split, feature, cut, los, his = [], [], [], [], []

    for d in range(D + 1):
        first, count = 2**d - 1, 2**d
        rel = pos - first
        here = is_group & (rel >= 0) & (rel < count)  # (B, N)
        jg = jnp.where(here, rel, count).astype(jnp.int32)  # node (within the level) of each group
        p = split_prob[first : first + count]
        u_level = u[first : first + count]
        forced_f = forced.feature[first : first + count].astype(jnp.int32)
        forced_c = jnp.clip(forced.cut[first : first + count].astype(jnp.int32), 0, max(C - 1, 0))

        def level(jg, free, d=d, count=count, p=p, u_level=u_level, forced_f=forced_f, forced_c=forced_c):
            size = jax.ops.segment_sum(jnp.ones(N, jnp.int32), jg, num_segments=count + 1)[:count]
            if m == 1:  # min / max bins compose over groups
                lo = jax.ops.segment_min(glo, jg, num_segments=count + 1)[:count]
                hi = jax.ops.segment_max(ghi, jg, num_segments=count + 1)[:count]
                empty = (size == 0)[:, None]
                lo, hi = jnp.where(empty, 0, lo).astype(jnp.int32), jnp.where(empty, 0, hi).astype(jnp.int32)
            else:  # order statistics: from the rows
                lo, hi = level_bounds(jg[state.leaf_id], count, data, m)
            n_valid = jnp.sum(hi > lo, axis=-1)
            can = (n_valid > 0) & (p > 0)
            internal = size >= 2
            if pinball is None:
                leaf_terms = jnp.sum(jnp.where(size == 1, jnp.log1p(-jnp.where(can, p, 0.0)), 0.0))
            else:  # pinball: no leaf factors (p is 1 above max_depth: log p = 0 below)
                leaf_terms = jnp.float32(0.0)
            zf = jnp.float32(0.0)
            if d == D:  # capacity: a node here cannot split
                zi = jnp.zeros(count, jnp.int32)
                return lo, hi, internal, zi, zi, leaf_terms, zf, zf, jnp.bool_(True), jnp.any(internal)
            # groups straddling cut c of feature f: +1 at lo_k(f), -1 at hi_k(f), summed over cuts
            rows = jnp.broadcast_to(jg[:, None], (N, F))
            cols = jnp.broadcast_to(fidx[None, :], (N, F))
            diff = jnp.zeros((count + 1, F, C + 1), jnp.int32)
            diff = diff.at[rows, cols, jnp.clip(glo, 0, C)].add(1)
            diff = diff.at[rows, cols, jnp.clip(ghi, 0, C)].add(-1)
            straddle = jnp.cumsum(diff[:count], axis=-1)[:, :, :C]
            in_range = (cidx >= lo[:, :, None]) & (cidx < hi[:, :, None])
            compatible = (straddle == 0) & in_range & internal[:, None, None]
            total = cum[fidx, hi] - cum[fidx, lo]  # (count, F) weight of the valid cuts
            denom = n_valid[:, None] * total
            rule = jnp.where(compatible, wcut[None] / jnp.where(denom > 0, denom, 1.0)[:, :, None], 0.0)
            w = rule if config.weights == "prior" else compatible.astype(jnp.float32)
            flat = w.reshape(count, F * C)
            W = flat.sum(-1)
            cdf = jnp.cumsum(flat, axis=-1)  # inverse CDF over the flattened (feature, cut) weights
            idx = jnp.sum(cdf <= (u_level * cdf[:, -1])[:, None], axis=-1)
            idx = jnp.minimum(idx, F * C - 1 - jnp.argmax((flat > 0)[:, ::-1], axis=-1))  # rounding guard
            f_new = jnp.where(free, idx // C, forced_f).astype(jnp.int32)
            c_new = jnp.where(free, idx % C, forced_c).astype(jnp.int32)
            j = jnp.arange(count)
            w_chosen = w[j, f_new, c_new]
            r_chosen = rule[j, f_new, c_new]
            ok = ~internal | ((p > 0) & (W > 0) & (w_chosen > 0))
            log = lambda a: jnp.where(internal & ok, jnp.log(jnp.where(internal & ok, a, 1.0)), 0.0)  # noqa: E731
            log_prior = leaf_terms + jnp.sum(log(p) + log(r_chosen))
            if pinball is not None:  # the shape factor p_shape(k_L | k) of every internal node
                jc = jnp.clip(jg, 0, count - 1)
                right_g = glo[jnp.arange(N), f_new[jc]] > c_new[jc]
                k_left = jax.ops.segment_sum(((jg < count) & ~right_g).astype(jnp.int32), jg,
                                             num_segments=count + 1)[:count]
                log_prior = log_prior + jnp.sum(jnp.where(internal & ok, pinball_shape(pinball, size, k_left), 0.0))
            log_q = jnp.sum(log(w_chosen) - log(W))
            return lo, hi, internal, f_new, c_new, log_prior, log_q, jnp.sum(log(W)), jnp.all(ok), jnp.bool_(False)

        batched = jax.vmap(level)
        if d < _SKIP_FROM or d == D:  # small levels (and the last, which has no rules) always run
            out = batched(jg, free)
        else:
            def skip(jg, free, count=count):  # no group reaches this level
                zi = jnp.zeros((B, count), jnp.int32)
                zb = jnp.zeros((B, count), bool)
                zl = jnp.zeros((B, count, F), jnp.int32)
                return zl, zl, zb, zi, zi, zero, zero, zero, jnp.ones(B, bool), jnp.zeros(B, bool)

            out = jax.lax.cond(jnp.any(here), batched, skip, jg, free)
        lo, hi, internal, f_new, c_new, lp, lq, lw, ok, over = out
        acc["log_prior"] += lp
        acc["log_q"] += lq
        acc["log_W"] += lw
        acc["valid"] &= ok
        acc["overflow"] |= over
        split = internal if d < D else jnp.zeros((B, count), bool)
        is_split.append(split)
        feature.append(jnp.where(split, f_new, 0).astype(feat_dtype))
        cut.append(jnp.where(split, c_new, 0).astype(cut_dtype))
        los.append(lo)
        his.append(hi)
        # groups at leaves stop here; the others go to their side of the node's rule
        jc = jnp.clip(jg, 0, count - 1)
        internal_g = jnp.take_along_axis(internal, jc, axis=1)
        at_leaf = here & ~internal_g
        leaf_of_group = jnp.where(at_leaf, pos, leaf_of_group)
        if d < D:
            fk, ck = jnp.take_along_axis(f_new, jc, axis=1), jnp.take_along_axis(c_new, jc, axis=1)
            right = glo[jnp.arange(N), fk] > ck  # (B, N) the group's side (it lies wholly on one)
            moving = here & internal_g
            pos = jnp.where(moving, 2 * pos + 1 + right.astype(jnp.int32), jnp.where(at_leaf, N, pos))

    if pinball is not None:  # p_size(K): the same K for T and T' (cancels in Φ; kept so log_prior is π's)
        size = pinball.log_size.shape[-1]
        acc["log_prior"] += pinball.log_size[jnp.clip(is_group.sum(), 0, size - 1)]
    tree = Tree(jnp.concatenate(is_split, 1), jnp.concatenate(feature, 1), jnp.concatenate(cut, 1))
    return _Sweep(tree, leaf_of_group, jnp.concatenate(los, 1), jnp.concatenate(his, 1), acc["log_prior"],
                  acc["log_q"], acc["log_W"], acc["valid"], acc["overflow"])


def _log_phi(s: _Sweep, config: RestructureConfig) -> Array:
    """``log Φ = log π - log q`` (Variant Π: ``Σ log p_s + Σ log W + Σ leaf terms``)."""
    out = s.log_prior - s.log_q
    return out - s.log_W if config.drop_w else out


def propose(uniforms: Array, state: cgm.CGMState, data: TreeData, config: RestructureConfig):
    """The proposed state and the pieces of the ratio.

    Returns
    -------
    proposed : CGMState of ``T'`` (caches consistent with it).
    log_phi_new, log_phi_old : () ``log Φ(T')``, ``log Φ(T)``.
    ok : () bool ``T'`` is admissible (fits the heap, every rule valid, respects the boxes).
    n_groups : () int32 ``K``.
    sweeps : the two :class:`_Sweep` records (``T'`` drawn, ``T`` replayed), for tests.
    """
    u = uniforms[:-1]
    is_group, glo, ghi = group_bins(state, data)
    both = _sweep(u, state.tree, jnp.array([True, False]), state, is_group, glo, ghi, data, config)
    new, old = (jax.tree.map(lambda a, i=i: a[i], both) for i in (0, 1))
    leaf_id = new.leaf_of_group[state.leaf_id]
    stats = subtree_sums(data.point_stats, leaf_id, state.tree.is_split.shape[0])
    proposed = with_scores(new.tree, leaf_id, stats, new.lo, new.hi, data, state.beta)
    ok = new.valid & ~new.overflow & old.valid & jnp.isfinite(proposed.log_prior)
    return proposed, _log_phi(new, config), _log_phi(old, config), ok, is_group.sum().astype(jnp.int32), (new, old)


def _mh_step(uniforms: Array, state: cgm.CGMState, data: TreeData, config: RestructureConfig):
    proposed, log_phi_new, log_phi_old, ok, K, (new, _) = propose(uniforms, state, data, config)
    log_ratio = jnp.where(ok, log_phi_new - log_phi_old, -jnp.inf)
    log_ratio = jnp.where(jnp.isnan(log_ratio), -jnp.inf, log_ratio)
    accepted = (K >= 2) & (jnp.log(uniforms[-1]) < log_ratio)
    new_state = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)
    return new_state, RestructureInfo(accepted, log_ratio, K, new.overflow, jnp.int32(0))


def _gibbs_step(uniforms: Array, state: cgm.CGMState, data: TreeData, config: RestructureConfig):
    proposed, ok, fib = gibbs_propose(uniforms, state, data, config)
    accepted = (fib.K >= 2) & ok
    new_state = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)
    return new_state, RestructureInfo(accepted, jnp.where(ok, 0.0, -jnp.inf).astype(jnp.float32), fib.K,
                                      jnp.bool_(False), jnp.int32(1))


def restructure_step(uniforms: Array, state: cgm.CGMState, data: TreeData, config: RestructureConfig):
    """One restructure (module docstring): the MH move, the fibre-Gibbs draw, or ("auto") Gibbs when
    the tree has ``K <= max_groups`` leaves, else the MH move; ``uniforms`` from
    :func:`draw_restructure` with the config's ``kind``.  The prior is the one ``data`` carries
    (CGM98 or pinball; module docstring)."""
    if config.kind == "pi":
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
        if not isinstance(self.n_local, (int, np.integer)) or isinstance(self.n_local, bool) or self.n_local < 1:
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
    """The WU schedule as a :class:`SamplingAlgorithm` (chains start at the stump).  Recorded per
    iteration: CGM's trace (the tree after the iteration; ``move`` / ``accepted`` as in
    :class:`WUInfo`) plus ``restructure_accepted``, ``restructure_kind`` and ``local_accept_rate``."""
    if config.cgm_config.general_rules:  # categorical features or missing values
        raise ValueError("wu(config) with general_rules: use bdtree_jax.kernels.wu_general.wu_general(config).")
    cgm_config, rconfig, n_local = config.cgm_config, config.restructure_config, config.n_local

    def init_fn(key, data):
        check_valid_cuts(data, "The WU restructure (method='wu')")
        return cgm.init(key, data, cgm_config)

    def draw_fn(key):
        k1, k2 = jax.random.split(key)
        return jax.random.uniform(k1, (2, n_local, 5)), draw_restructure(k2, cgm_config.max_depth, rconfig.kind)

    def local(state, uniforms, data):
        def body(s, u):
            s, info = cgm.step_with_uniforms(u, s, data, cgm_config)
            return s, (info.move, info.accepted)

        return jax.lax.scan(body, state, uniforms)

    return schedule(cgm_config, rconfig, n_local, init_fn, draw_fn, local, restructure_step)


def schedule(cgm_config, rconfig, n_local: int, init_fn, draw_fn, local, restructure) -> SamplingAlgorithm:
    """One WU iteration around its pieces: ``n_local`` local steps, the restructure, ``n_local``
    more local steps (the numeric chain's :func:`wu` and the general-rule chain's
    :func:`~bdtree_jax.kernels.wu_general.wu_general` differ only in the pieces).

    ``local(state, uniforms, data) -> (state, (moves (n_local,), accepted (n_local,)))`` runs the
    local steps of one half; ``restructure(draws, state, data, rconfig) -> (state,
    RestructureInfo)``; ``draw_fn(key)`` returns ``(local_draws (2, n_local, ...), restructure_draws)``.
    """

    def kernel(uniforms, state, data):
        u_local, u_restructure = uniforms

        # One compiled copy of the local steps: two halves, the restructure after the first
        # (the predicate is the same for every chain, so the cond stays a branch under vmap).
        def half(s, xs):
            u, first = xs
            s, (moves, acc) = local(s, u, data)

            def move(s):
                return restructure(u_restructure, s, data, rconfig)

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
