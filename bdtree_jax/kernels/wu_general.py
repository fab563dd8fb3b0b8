"""The WU restructure and schedule with categorical features and missing values
(docs/categorical-missing.md; the numeric move is :mod:`bdtree_jax.kernels.wu`, whose docstring
defines the groups, the partition ``P``, the proposal ``q(T' | P)`` and the ratio).

**Rules.**  A node's rule is ``(v, c, nan_left)`` on an ordered feature or ``(v, S, nan_left)`` on a
categorical one, with the rule prior of :mod:`bdtree_jax.priors.categorical` (``valid_cuts="data"``
and ``min_leaf_size = 1``, the general rules' only setting here): availability from the node's rows
whose value is not missing, a categorical feature's ``2**(k-1) - 1`` level partitions uniform (the
smallest available level on the right), the missing-value bit ``Bernoulli(1/2)``.

**Compatibility** at a node holding the groups ``S`` (every group wholly on one side, a group's rows
missing ``v`` counted on the nan side):

* ordered ``v``: no group's values straddle ``c`` (``lo_k(v) <= c < hi_k(v)``, over its rows with a
  value), ``c`` valid at the node; with ``nan_left`` every group with both missing and present
  values lies left (``c >= max hi_k`` over them), else right (``c < min lo_k``).  A group whose
  rows all miss ``v`` just follows the bit.
* categorical ``v``: the groups' present levels form connected components (two groups sharing a
  level go together; computed by min-label propagation over groups and levels).  ``S`` is a union
  of components, never the one holding the smallest available level.  With ``m`` components and
  ``M`` components holding a group with missing rows (``M0``: one of them holds the smallest
  level), ``nan_left`` forces those into ``S`` (impossible when ``M0``) and leaves
  ``2**(m-1-M) - [M = 0]`` sets; ``nan_left`` false forces them out and leaves
  ``2**(m - 1 - M + M0) - 1``.  (Without missing rows: ``2**(m-1) - 1`` per bit, as the design
  note's ``2**(#components - 1) - 1`` times the bit's two values.)

**Weights** (Variant Π): a compatible rule weighs its prior probability at the node ``r`` (every
categorical rule of ``v`` the same ``1 / (n_v (2**(k-1) - 1) 2)``), so ``W(S)`` sums the ordered
rules' weights and ``r * count`` per categorical feature and bit; the proposal draws a block
(ordered ``(v, c, bit)``, or categorical ``(v, bit)``) by inverse CDF, then a categorical rule's free
components uniformly among the allowed subsets (the lowest included one from its exact law
``2**(n-1-j) / (2**n - 1)`` when the set must not be empty, the others by fair coins).  Variant U
(``weights="uniform"``) weighs every compatible rule 1.

**Ratio.**  ``q(T' | P)`` and the reverse ``q(T | P)`` come from one batched sweep (``T'`` drawn,
``T`` replayed: every node's rule checked compatible group by group and weighed by
:func:`~bdtree_jax.priors.categorical.log_rule_prob_general`); the proposed tree is re-scored in
full (:func:`~bdtree_jax.kernels.cgm_general.score`), and ``α = min{1, π(T') q(T|P) / (π(T)
q(T'|P))}`` with ``π`` the general prior of the two scored states (the likelihood ratio is 1).  The
capacity rule and ``K < 2`` are as for numeric data.

**Schedule** (:func:`wu_general`): ``n_local`` general CGM steps (:func:`~bdtree_jax.kernels.
cgm_general.step`), one restructure, ``n_local`` general CGM steps.  The fibre-Gibbs variant is
not implemented for such data: ``restructure="auto"`` uses this move, ``"gibbs"`` is refused.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors.categorical import _log_partitions, _pack, _unpack, categorical, log_rule_prob_general, rule_available
from ..tree import MixedTree, Rule, make_tree, n_nodes, leaf_nodes
from . import cgm_general
from .base import SamplingAlgorithm

__all__ = ["GroupCodes", "group_codes", "draw_restructure", "propose", "restructure_step", "wu_general"]

_BIG = np.int32(2**30)
_SKIP_FROM = 3  # levels from this depth on are skipped when no group reaches them


class GroupCodes(NamedTuple):
    """Per group (the current tree's non-empty leaves, by heap slot) and feature: ``lo``, ``hi``
    (N, F) int32 the smallest / largest code of its rows with a value (``_BIG`` / -1 if none),
    ``missing`` (N, F) bool some row misses the feature, ``levels`` (N, F, L) bool the levels of its
    rows (None without categorical features); ``is_group`` (N,) bool."""

    is_group: Array
    lo: Array
    hi: Array
    missing: Array
    levels: Array | None


def group_codes(state, data: TreeData) -> GroupCodes:
    """:class:`GroupCodes` of ``state`` (a :class:`~bdtree_jax.kernels._moves.CGMState`)."""
    N = state.tree.is_split.shape[0]
    bins, leaf_id = data.bins, state.leaf_id
    miss = bins == data.missing_code if data.missing_code is not None else jnp.zeros(bins.shape, bool)
    count = jax.ops.segment_sum(jnp.ones_like(leaf_id), leaf_id, num_segments=N)
    is_group = leaf_nodes(state.tree) & (count > 0)
    g = is_group[:, None]
    lo = jnp.where(g, jax.ops.segment_min(jnp.where(miss, _BIG, bins), leaf_id, num_segments=N), _BIG)
    hi = jnp.where(g, jax.ops.segment_max(jnp.where(miss, -1, bins), leaf_id, num_segments=N), -1)
    missing = g & (jax.ops.segment_max(miss.astype(jnp.int8), leaf_id, num_segments=N) > 0)
    levels = None
    if data.level_masks is not None:
        L = 32 * data.level_masks.shape[-1]
        present = (bins[:, :, None] == jnp.arange(L, dtype=bins.dtype)) & categorical(data)[None, :, None]
        levels = g[..., None] & (jax.ops.segment_max(present.astype(jnp.int8), leaf_id, num_segments=N) > 0)
    return GroupCodes(is_group, lo.astype(jnp.int32), hi.astype(jnp.int32), missing, levels)


def draw_restructure(key: PRNGKey, max_depth: int):
    """The randomness of one restructure: (2N + 1,) uniforms (a block and the lowest included
    component per heap slot, accept) and a key (the components' fair coins)."""
    k1, k2 = jax.random.split(key)
    return jax.random.uniform(k1, (2 * n_nodes(max_depth) + 1,)), k2


class _Sweep(NamedTuple):
    tree: MixedTree  # (B, N) arrays
    log_q: Array  # (B,) log q(tree | P)
    log_W: Array  # (B,) sum over internal nodes of log W(S)
    valid: Array  # (B,) every internal node's rule compatible and valid, above max_depth
    overflow: Array  # (B,) a node at max_depth held >= 2 groups


def _components(levels: Array, jg: Array, count: int) -> tuple[Array, Array]:
    """Connected components of the groups' present levels at every node (two levels joined when one
    group at the node has both): ``t`` (count, F, L) int32 every present level's component label
    (its smallest level; L where absent) and ``label`` (N, F) every group's (L: none)."""
    L = levels.shape[-1]
    start = jnp.where(jnp.any(levels, -1), jnp.argmax(levels, -1), L).astype(jnp.int32)
    jc = jnp.clip(jg, 0, count - 1)

    def node_labels(label):
        return jax.ops.segment_min(jnp.where(levels, label[..., None], L), jg, num_segments=count + 1)[:count]

    def body(carry):
        label, _ = carry
        t = node_labels(label)
        new = jnp.where(jg[:, None] < count, jnp.min(jnp.where(levels, t[jc], L), axis=-1), label)
        return new, jnp.any(new != label)

    label, _ = jax.lax.while_loop(lambda c: c[1], body, (start, jnp.bool_(True)))
    return node_labels(label), label


def _draw_levels(reps, forced_in, t, present, low, nan_left, u_j, u_coin, words: int) -> Array:
    """A categorical rule's level set (count, W) uint32, uniform among the compatible sets of the
    chosen feature and bit (module docstring): the free components (``reps`` not ``forced_in``
    nor ``low``) each in with probability 1/2, conditioned on a non-empty set when nothing is
    forced in."""
    L = reps.shape[-1]
    ii = jnp.arange(L)
    forced = forced_in & nan_left[:, None]
    free = reps & ~forced_in & ~low
    need = ~jnp.any(forced, -1)
    n = jnp.sum(free, -1)
    rank = jnp.cumsum(free, -1) - 1
    cdf = (1.0 - jnp.exp2(-(ii + 1.0))) / (1.0 - jnp.exp2(-jnp.maximum(n, 1).astype(jnp.float32)))[:, None]
    first = jnp.minimum(jnp.sum((cdf <= u_j[:, None]) & (ii < n[:, None]), -1), jnp.maximum(n - 1, 0))
    coin = u_coin < 0.5
    chosen = free & jnp.where(need[:, None], (rank == first[:, None]) | ((rank > first[:, None]) & coin), coin)
    chosen = chosen | forced
    left = present & jnp.take_along_axis(chosen, jnp.clip(t, 0, L - 1), axis=-1)
    return _pack(left, words)


def _sweep(u: Array, key: PRNGKey, forced: MixedTree, free: Array, g: GroupCodes, data: TreeData, config) -> _Sweep:
    """Top-down draws of ``T'`` (where ``free``) and replays of ``forced`` (elsewhere), batched
    (leading axis ``B`` of ``free``), one heap level at a time."""
    D = config.max_depth
    N = n_nodes(D)
    B = free.shape[0]
    F = data.bins.shape[1]
    cum = data.cut_cumwidth
    C = cum.shape[1] - 2
    wcut = jnp.diff(cum, axis=1)[:, :C]
    fidx, cidx = jnp.arange(F), jnp.arange(C)
    bits = forced.nan_left is not None
    nb = 2 if bits else 1
    words = 0 if data.level_masks is None else data.level_masks.shape[-1]
    L = 32 * words
    cat = categorical(data) if words else jnp.zeros(F, bool)
    prior_weights = config.weights == "prior"
    gnon = g.hi >= 0
    pm = g.missing & gnon
    u_coin = jax.random.uniform(key, (N, max(L, 1)))
    zero = jnp.zeros(B, jnp.float32)

    pos = jnp.broadcast_to(jnp.where(g.is_group, 0, N).astype(jnp.int32), (B, N))
    acc = dict(log_q=zero, log_W=zero, valid=jnp.ones(B, bool), overflow=jnp.zeros(B, bool))
    out = {k: [] for k in ("is_split", "feature", "cut", "nan_left", "levels_left")}

    for d in range(D + 1):
        first, count = 2**d - 1, 2**d
        rel = pos - first
        here = g.is_group & (rel >= 0) & (rel < count)
        jg = jnp.where(here, rel, count).astype(jnp.int32)
        p = data.split_prob[first : first + count]
        sl = slice(first, first + count)
        forced_rule = (forced.feature[sl].astype(jnp.int32), forced.cut[sl].astype(jnp.int32),
                       forced.nan_left[sl] if bits else jnp.zeros(count, bool),
                       forced.levels_left[sl] if words else jnp.zeros((count, 1), jnp.uint32))

        def level(jg, free, d=d, count=count, p=p, sl=sl, forced_rule=forced_rule):
            def seg(x, op):
                return op(x, jg, num_segments=count + 1)[:count]

            size = seg(jnp.ones(N, jnp.int32), jax.ops.segment_sum)
            internal = size >= 2
            zi, zb = jnp.zeros(count, jnp.int32), jnp.zeros(count, bool)
            zw = jnp.zeros((count, max(words, 1)), jnp.uint32)
            if d == D:  # capacity: nothing splits here
                z = jnp.float32(0.0)
                return zb, zi, zi, zb, zw, jnp.zeros(N, bool), z, z, jnp.bool_(True), jnp.any(internal)
            lo, hi = seg(g.lo, jax.ops.segment_min), seg(g.hi, jax.ops.segment_max)
            empty = (hi < 0) | cat[None]
            lo, hi = jnp.where(empty, 0, lo), jnp.where(empty, 0, hi)
            present = seg(g.levels.astype(jnp.int8), jax.ops.segment_max) > 0 if words else None
            levels = _pack(present, words) if words else None
            n_valid = jnp.sum(rule_available(lo, hi, levels), -1)

            # ordered rules: (count, F, C, nb)
            rows = jnp.broadcast_to(jg[:, None], (N, F))
            cols = jnp.broadcast_to(fidx[None, :], (N, F))
            step = gnon.astype(jnp.int32)
            diff = jnp.zeros((count + 1, F, C + 1), jnp.int32)
            diff = diff.at[rows, cols, jnp.clip(g.lo, 0, C)].add(step).at[rows, cols, jnp.clip(g.hi, 0, C)].add(-step)
            straddle = jnp.cumsum(diff[:count], axis=-1)[:, :, :C]
            in_range = (cidx >= lo[:, :, None]) & (cidx < hi[:, :, None])
            ok_c = (straddle == 0) & in_range & internal[:, None, None] & ~cat[None, :, None]
            if bits:
                pm_hi = seg(jnp.where(pm, g.hi, -1), jax.ops.segment_max)[..., None]
                pm_lo = seg(jnp.where(pm, g.lo, _BIG), jax.ops.segment_min)[..., None]
                compat = jnp.stack([ok_c & (cidx >= pm_hi), ok_c & (cidx < pm_lo)], -1)
            else:
                compat = ok_c[..., None]
            total = cum[fidx, hi] - cum[fidx, lo]
            denom = nb * n_valid[:, None] * total
            rule_o = jnp.where(compat, (wcut[None] / jnp.where(denom > 0, denom, 1.0)[:, :, None])[..., None], 0.0)
            blocks = [(rule_o if prior_weights else compat.astype(jnp.float32)).reshape(count, -1)]

            if words:  # categorical rules: (count, F, nb) blocks of equal rules
                t, label = _components(g.levels, jg, count)
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
            w = jnp.concatenate(blocks, -1)
            W = w.sum(-1)
            cdf = jnp.cumsum(w, -1)
            idx = jnp.sum(cdf <= (u[sl] * cdf[:, -1])[:, None], -1)
            idx = jnp.minimum(idx, w.shape[-1] - 1 - jnp.argmax((w > 0)[:, ::-1], -1))  # rounding guard
            n_o = F * C * nb
            ordered = idx < n_o
            f_new = jnp.where(ordered, idx // (C * nb), (idx - n_o) // nb)
            c_new = jnp.where(ordered, (idx // nb) % C, 0)
            nan_new = jnp.where(ordered, idx % nb, (idx - n_o) % nb) == 0
            s_new = zw
            if words:
                take = lambda a: jnp.take_along_axis(a, f_new[:, None, None], axis=1)[:, 0]  # noqa: E731
                s_new = _draw_levels(take(reps), take(pm_rep), take(t), take(present), take(low),
                                     nan_new if bits else jnp.zeros(count, bool), u[N + first : N + first + count],
                                     u_coin[sl], words)
                s_new = jnp.where(ordered[:, None], jnp.uint32(0), s_new)
            f_f, c_f, nan_f, s_f = forced_rule
            f_new, c_new = jnp.where(free, f_new, f_f), jnp.where(free, c_new, c_f)
            nan_new, s_new = jnp.where(free, nan_new, nan_f), jnp.where(free, s_new, s_f)

            # every group's side under its node's rule; compatible: each wholly on one side
            jc = jnp.clip(jg, 0, count - 1)
            fg = f_new[jc][:, None]
            at = lambda a: jnp.take_along_axis(a, fg, axis=1)[:, 0]  # noqa: E731
            nan_g, miss_g, non_g = nan_new[jc], at(g.missing), at(gnon)
            left_v, right_v = ~non_g | (at(g.hi) <= c_new[jc]), ~non_g | (at(g.lo) > c_new[jc])
            if words:
                lev = jnp.take_along_axis(g.levels, fg[..., None], axis=1)[:, 0]  # (N, L)
                s_g = _unpack(s_new[jc])
                is_cat = cat[fg[:, 0]]
                left_v = jnp.where(is_cat, ~jnp.any(lev & ~s_g, -1), left_v)
                right_v = jnp.where(is_cat, ~jnp.any(lev & s_g, -1), right_v)
            all_left = left_v & (~miss_g | nan_g)
            all_right = right_v & (~miss_g | ~nan_g)
            bad = (jg < count) & ~(all_left | all_right)
            compatible = seg(bad.astype(jnp.int32), jax.ops.segment_max) == 0
            rule = Rule(f_new, c_new, nan_new if bits else None, s_new if words else None)
            log_r = jax.vmap(log_rule_prob_general, in_axes=(0, 0, 0 if words else None, 0, None))(
                lo, hi, levels, rule, data)
            log_w = log_r if prior_weights else jnp.zeros(count, jnp.float32)
            ok = ~internal | ((p > 0) & (W > 0) & compatible & jnp.isfinite(log_r))
            use = internal & ok
            log_W = jnp.sum(jnp.where(use, jnp.log(jnp.where(use, W, 1.0)), 0.0))
            log_q = jnp.sum(jnp.where(use, log_w, 0.0)) - log_W
            return internal, f_new, c_new, nan_new, s_new, ~all_left, log_q, log_W, jnp.all(ok), jnp.bool_(False)

        batched = jax.vmap(level)
        if d < _SKIP_FROM or d == D:
            res = batched(jg, free)
        else:
            def skip(jg, free, count=count):
                zi, zb = jnp.zeros((B, count), jnp.int32), jnp.zeros((B, count), bool)
                return (zb, zi, zi, zb, jnp.zeros((B, count, max(words, 1)), jnp.uint32), jnp.zeros((B, N), bool),
                        zero, zero, jnp.ones(B, bool), jnp.zeros(B, bool))

            res = jax.lax.cond(jnp.any(here), batched, skip, jg, free)
        internal, f_new, c_new, nan_new, s_new, right, log_q, log_W, ok, over = res
        acc["log_q"] += log_q
        acc["log_W"] += log_W
        acc["valid"] &= ok
        acc["overflow"] |= over
        split = internal if d < D else jnp.zeros((B, count), bool)
        out["is_split"].append(split)
        out["feature"].append(jnp.where(split, f_new, 0).astype(forced.feature.dtype))
        out["cut"].append(jnp.where(split, c_new, 0).astype(forced.cut.dtype))
        out["nan_left"].append(split & nan_new)
        out["levels_left"].append(jnp.where(split[..., None], s_new, jnp.uint32(0)))
        jc = jnp.clip(jg, 0, count - 1)
        internal_g = jnp.take_along_axis(internal, jc, axis=1)
        moving = here & internal_g
        pos = jnp.where(moving, 2 * pos + 1 + right.astype(jnp.int32), jnp.where(here, N, pos))

    cat_fields = {k: jnp.concatenate(v, 1) for k, v in out.items()}
    tree = make_tree(cat_fields["is_split"], cat_fields["feature"], cat_fields["cut"],
                     cat_fields["nan_left"] if bits else None, cat_fields["levels_left"] if words else None)
    return _Sweep(tree, acc["log_q"], acc["log_W"], acc["valid"], acc["overflow"])


def propose(draws, state, data: TreeData, config):
    """The proposed state (re-scored in full), ``log π - log q`` of ``T'`` and of ``T``, whether
    ``T'`` is admissible, ``K``, and the two :class:`_Sweep` records (``T'`` drawn, ``T`` replayed)."""
    uniforms, key = draws
    g = group_codes(state, data)
    both = _sweep(uniforms[:-1], key, state.tree, jnp.array([True, False]), g, data, config)
    new, old = (jax.tree.map(lambda a, i=i: a[i], both) for i in (0, 1))
    proposed = cgm_general.score(new.tree, data, config, state.beta)
    proposed = proposed._replace(leaf_id=proposed.leaf_id.astype(state.leaf_id.dtype))
    ok = new.valid & ~new.overflow & old.valid & jnp.isfinite(proposed.log_prior)
    return (proposed, proposed.log_prior - new.log_q, state.log_prior - old.log_q, ok,
            g.is_group.sum().astype(jnp.int32), (new, old))


def restructure_step(draws, state, data: TreeData, config):
    """One MH restructure (module docstring); ``draws`` from :func:`draw_restructure`, ``config`` a
    :class:`~bdtree_jax.kernels.wu.RestructureConfig` (its ``max_depth``, ``min_leaf_size``,
    ``weights`` and ``drop_w`` are read; ``drop_w``, a negative control, leaves ``W`` out)."""
    from .wu import RestructureInfo

    proposed, phi_new, phi_old, ok, K, (new, old) = propose(draws, state, data, config)
    if config.drop_w:  # negative control: Σ log W left out of log Φ (a wrong ratio)
        phi_new, phi_old = phi_new - new.log_W, phi_old - old.log_W
    log_ratio = jnp.where(ok, phi_new - phi_old, -jnp.inf)
    log_ratio = jnp.where(jnp.isnan(log_ratio), -jnp.inf, log_ratio)
    accepted = (K >= 2) & (jnp.log(draws[0][-1]) < log_ratio)
    new_state = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)
    return new_state, RestructureInfo(accepted, log_ratio, K, new.overflow, jnp.int32(0))


@functools.lru_cache(maxsize=64)
def wu_general(config) -> SamplingAlgorithm:
    """The WU schedule (a :class:`~bdtree_jax.kernels.wu.WUConfig` whose ``cgm_config`` has
    ``general_rules``) as a :class:`SamplingAlgorithm`: the trace of :func:`~bdtree_jax.kernels.wu.wu`."""
    from ..priors import check_valid_cuts
    from .wu import schedule

    cgm_config, rconfig, n_local = config.cgm_config, config.restructure_config, config.n_local
    if rconfig.kind == "gibbs":
        raise ValueError("restructure='gibbs' (the fibre-Gibbs draw) is not available with categorical features or "
                         "missing values; use restructure='auto' or 'pi' (the Metropolis-Hastings move).")

    def init_fn(key, data):
        check_valid_cuts(data, "The WU restructure (method='wu')")
        return cgm_general.init(key, data, cgm_config)

    def draw_fn(key):
        k1, k2 = jax.random.split(key)
        local = jax.vmap(jax.vmap(cgm_general.draw))(jax.random.split(k1, (2, n_local)))
        return local, draw_restructure(k2, cgm_config.max_depth)

    def local(state, u, data):
        def body(s, u):
            s, info = cgm_general.step(u, s, data, cgm_config)
            return s, (info.move, info.accepted)

        return jax.lax.scan(body, state, u)

    return schedule(cgm_config, rconfig, n_local, init_fn, draw_fn, local, restructure_step)
