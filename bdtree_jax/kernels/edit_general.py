"""The EDITTREE prior (:mod:`bdtree_jax.kernels.edit`) with categorical features and missing-value
bits (docs/categorical-missing.md): ``initial_tree`` on such data.

**Edits.**  The prior is the law of the tree after ``K`` random edits of the initial tree ``T0``,
``P(K = k) ∝ q^k`` on ``0 .. max_edits``, as for numeric data.  One edit: a move among grow /
prune / change (probability 1/3 each, renormalised over the moves that have a target), a node
uniformly among the move's targets (grow: leaves with an available rule and a positive split
probability; prune: splitting nodes whose children are leaves; change: splitting nodes), and for
grow / change a whole rule from the general rule prior at the node
(:func:`~bdtree_jax.priors.categorical.draw_rule_general`: a feature uniformly among those with
an available rule, then an ordered cut with the ``split_prior`` weights, or a categorical level
set uniformly among the ``2^(k-1) - 1`` partitions of the node's ``k`` available levels, and the
missing-value bit ``Bernoulli(1/2)``).  A change keeps the node's subtrees.  So replacing a
categorical rule's level set, flipping a rule's missing-value bit, or both at once are each *one*
edit (a change whose new rule happens to differ from the old one only there); an edit that
leaves the prior's support (a descendant's rule no longer available) is a no-op.

**Sampler.**  As :mod:`bdtree_jax.kernels.edit`: the chain runs on the edit paths ``(K, U_1 ..
U_K)``, target ``q^K L(T(K, U))^β``, with the local append / delete moves and the backtracking
regrow move (the same ratios: each edit's randomness is drawn from its base law by both moves).
An edit's randomness is five uniforms (move, node, feature, cut, missing bit) and a PRNG key (the
level set's words, redrawn while empty); the path stores them as ``(max_edits, 5)`` float32 and
``(max_edits, K)`` uint32 key data.  Each edit re-scores the whole tree
(:func:`~bdtree_jax.kernels.cgm_general.score`).
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors.categorical import draw_rule_general
from ..tree import change, grow, n_leaves, prune, tree_depth
from . import cgm, cgm_general
from ._moves import CGMState, pick
from .base import SamplingAlgorithm
from .edit import EditConfig, EditData, EditState, _p_append, _truncated_geometric

__all__ = ["apply_edit", "replay", "step_with_uniforms", "edit_prior_general", "initial_tree_general"]


def _key_words() -> int:
    """Words of the default PRNG implementation's key data."""
    return int(jax.random.key_data(jax.random.key(0)).shape[-1])


def _draw_edits(key: PRNGKey, shape: tuple):
    """Randomness of edits: ``shape + (5,)`` uniforms and ``shape + (K,)`` uint32 key data."""
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):  # a raw uint32 key
        key = jax.random.wrap_key_data(key)
    k1, k2 = jax.random.split(key)
    n = int(np.prod(shape, dtype=int))
    keys = jax.random.key_data(jax.random.split(k2, max(n, 1)))[:n]
    return jax.random.uniform(k1, shape + (5,)), keys.reshape(shape + (-1,))


def draw(key: PRNGKey, max_edits: int):
    """Randomness of one step: (4,) uniforms (kind, accept, choice point, tail length), the
    appended edit ((5,), (K,)) and the regrown tail ((max_edits, 5), (max_edits, K))."""
    k1, k2, k3 = jax.random.split(key, 3)
    return jax.random.uniform(k1, (4,)), _draw_edits(k2, ()), _draw_edits(k3, (max_edits,))


def apply_edit(state: CGMState, edit, data: TreeData, config) -> CGMState:
    """One edit of the prior's process (module docstring) driven by ``edit`` = ((5,) uniforms,
    (K,) key data); the state unchanged when the edit is a no-op."""
    u, key_data = edit
    tree = state.tree
    move_targets = cgm_general.targets(state, data)[:3]
    counts = move_targets.sum(1)
    cdf = jnp.cumsum((counts > 0).astype(jnp.float32))
    move = jnp.minimum(jnp.sum(u[0] * cdf[-1] >= cdf[:-1]), 2).astype(jnp.int32)
    node = pick(move_targets[move], u[1])
    levels = None if state.levels is None else state.levels[node]
    rule = draw_rule_general(jax.random.wrap_key_data(key_data), u[2], u[3], u[4], state.lo[node], state.hi[node],
                             levels, data, tree.nan_left is not None)
    candidates = [grow(tree, node, rule.feature, rule.cut, rule), prune(tree, node),
                  change(tree, node, rule.feature, rule.cut, rule)]
    new_tree = jax.tree.map(lambda *xs: jnp.select([move == 0, move == 1], list(xs[:2]), xs[2]), *candidates)
    proposed = cgm_general.score(new_tree, data, config, state.beta)
    proposed = proposed._replace(leaf_id=proposed.leaf_id.astype(state.leaf_id.dtype))
    ok = (counts[move] > 0) & jnp.isfinite(proposed.log_prior)
    return jax.tree.map(lambda a, b: jnp.where(ok, a, b), proposed, state)


def replay(start: CGMState, edits, n_edits: Array, data: TreeData, config) -> CGMState:
    """The state after the first ``n_edits`` edits of ``edits`` ((M, 5), (M, K)) from ``start``."""

    def body(state, xs):
        k, edit = xs
        new = apply_edit(state, edit, data, config)
        return jax.tree.map(lambda a, b: jnp.where(k < n_edits, a, b), new, state), None

    return jax.lax.scan(body, start, (jnp.arange(edits[0].shape[0]), edits))[0]


def _rows_where(mask: Array, a, b):
    """Per edit row: ``a`` where ``mask`` (M,), else ``b`` (pytrees of (M, ...) arrays)."""
    return jax.tree.map(lambda x, y: jnp.where(mask.reshape((-1,) + (1,) * (x.ndim - 1)), x, y), a, b)


def _initial(data: EditData, config: EditConfig) -> CGMState:
    return cgm_general.score(data.initial_tree, data.tree_data, config.cgm, 1.0)


def step_with_uniforms(uniforms, state: EditState, data: EditData, config: EditConfig):
    """One MH step on the edit path (the moves and ratios of :mod:`bdtree_jax.kernels.edit`)."""
    from ..priors import check_cgm_structure, check_valid_cuts

    check_cgm_structure(data.tree_data.split_prob, "The edit prior (initial_tree)")
    check_valid_cuts(data.tree_data, "The edit prior (initial_tree)")
    (u_kind, u_accept, u_point, u_len), u_edit, u_tail = uniforms
    K, M, q = state.n_edits, config.max_edits, config.q
    cfg, td = config.cgm, data.tree_data
    slots = jnp.arange(M)
    regrow = u_kind < config.regrow_prob
    append = ~regrow & (jnp.where(K == 0, 0.0, jnp.where(K >= M, 1.0, u_point)) < _p_append(K, M))
    zeros = jax.tree.map(jnp.zeros_like, state.edits)

    j = jnp.minimum(jnp.floor(u_point * (K + 1)).astype(jnp.int32), K)
    m = _truncated_geometric(u_len, q, M - j)
    k_regrow = j + m
    edits_regrow = _rows_where(slots < k_regrow, _rows_where(slots < j, state.edits, u_tail), zeros)
    k_delete = jnp.maximum(K - 1, 0)
    edits_delete = _rows_where(slots < k_delete, state.edits, zeros)
    edits_append = jax.tree.map(lambda a, e: a.at[jnp.minimum(K, M - 1)].set(e), state.edits, u_edit)
    new_k = jnp.where(append, K + 1, jnp.where(regrow, k_regrow, k_delete))
    new_edits = jax.tree.map(lambda a, r, d: jnp.where(append, a, jnp.where(regrow, r, d)),
                             edits_append, edits_regrow, edits_delete)

    current = state.current
    proposed = jax.lax.cond(
        append,
        lambda: apply_edit(current, u_edit, td, cfg),
        lambda: replay(_initial(data, config), new_edits, new_k, td, cfg),
    )
    log_lr = state.beta * (proposed.log_lik - state.log_lik)
    log_r_append = np.log(q) + jnp.log1p(-_p_append(K + 1, M)) - jnp.log(_p_append(K, M))
    log_r_delete = -np.log(q) + jnp.log(_p_append(k_delete, M)) - jnp.log1p(-_p_append(K, M))
    log_r_regrow = jnp.log(K + 1.0) - jnp.log(new_k + 1.0)
    log_ratio = log_lr + jnp.where(append, log_r_append, jnp.where(regrow, log_r_regrow, log_r_delete))
    log_ratio = jnp.where(jnp.isnan(log_ratio), -jnp.inf, log_ratio)
    accepted = jnp.log(u_accept) < log_ratio
    new_state = EditState(proposed, new_k, new_edits, proposed.log_lik, state.beta)
    new_state = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), new_state, state)
    move = jnp.where(append, 0, jnp.where(regrow, 2, 1)).astype(jnp.int32)
    return new_state, cgm.CGMInfo(move, accepted, log_ratio)


def trace(state: EditState, info: cgm.CGMInfo, config: EditConfig) -> dict:
    """As :func:`bdtree_jax.kernels.edit.trace`, the tree with its level sets and bits."""
    t = state.current.tree
    return dict(
        tree=t._replace(feature=t.feature.astype(config.trace_dtypes[0]), cut=t.cut.astype(config.trace_dtypes[1])),
        log_lik=state.log_lik,
        log_prior=state.n_edits.astype(jnp.float32) * np.float32(np.log(config.q)),
        n_leaves=n_leaves(t),
        depth=tree_depth(t),
        accepted=info.accepted,
        move=info.move,
        n_edits=state.n_edits,
    )


@functools.lru_cache(maxsize=64)
def edit_prior_general(config: EditConfig) -> SamplingAlgorithm:
    """The edit-prior sampler over :class:`~bdtree_jax.kernels.edit.EditData` whose initial tree
    is a :class:`~bdtree_jax.tree.MixedTree` with the data's fields; chains start at it."""

    def init_fn(key, data):
        del key
        start = _initial(data, config)
        edits = (jnp.zeros((config.max_edits, 5), jnp.float32), jnp.zeros((config.max_edits, _key_words()), jnp.uint32))
        return EditState(start, jnp.int32(0), edits, start.log_lik, jnp.float32(1.0))

    return SamplingAlgorithm(init_fn, lambda u, s, data: step_with_uniforms(u, s, data, config),
                             lambda s, info: trace(s, info, config), functools.partial(draw, max_edits=config.max_edits))


def initial_tree_general(tree, *, thresholds: np.ndarray, level_count: np.ndarray, nan_bits: bool, max_depth: int,
                         where: str = ""):
    """The initial tree on data with categorical features or missing-value bits, as a
    :class:`~bdtree_jax.tree.MixedTree` of numpy arrays with the data's fields.

    tree : a tree string (``x{f}<={t}``, ``x{f}in{a,b}`` with level indices, ``|NA=L`` / ``|NA=R``
        after every rule when the data have missing-value bits) or a MixedTree with the data's
        fields.  thresholds : (F, C) cut grid; level_count : (F,) levels per feature (0: ordered).
    """
    from ..tree import MixedTree, from_string, level_words, n_nodes

    words = level_words(level_count)
    n = n_nodes(max_depth)
    is_cat = np.asarray(level_count) > 0
    if isinstance(tree, str):
        for f, op in re.findall(r"x(\d+)(<=|in\{)", tree):
            f = int(f)
            if f >= len(is_cat):
                raise ValueError(f"{where}initial_tree: feature {f} does not exist (the data have {len(is_cat)}).")
            if is_cat[f] != (op != "<="):
                raise ValueError(f"{where}initial_tree: a rule on feature {f} must be "
                                 + (f"a level set 'x{f}in{{...}}'" if is_cat[f] else f"a threshold 'x{f}<=t'") + ".")
        n_rules, n_bits = tree.count("("), tree.count("|NA=")
        if nan_bits and n_bits != n_rules:
            raise ValueError(f"{where}initial_tree: the data have missing values or categorical features, so every "
                             f"rule needs its missing-value side ('|NA=L' or '|NA=R'); got {tree!r}.")
        if not nan_bits and n_bits:
            raise ValueError(f"{where}initial_tree: the data have no missing-value bits; remove '|NA=' from {tree!r}.")
        try:
            out = from_string(tree, thresholds, max_depth, level_count=level_count)
        except (ValueError, IndexError, AssertionError) as e:
            raise ValueError(f"{where}initial_tree: could not read the tree string ({e}).") from None
    elif isinstance(tree, MixedTree):
        out = MixedTree(*(None if a is None else np.asarray(a) for a in tree))
        if (out.nan_left is None) == nan_bits or (out.levels_left is None) != (words == 0) or (
                out.levels_left is not None and out.levels_left.shape[-1] != words):
            raise ValueError(f"{where}initial_tree: a MixedTree needs nan_left and levels_left ({words} words) as the "
                             "data have them.")
        if out.is_split.shape[-1] != n:
            raise ValueError(f"{where}initial_tree has {out.is_split.shape[-1]} heap slots; max_depth={max_depth} "
                             f"needs {n}.")
    else:
        raise ValueError(f"{where}initial_tree must be a tree string or a MixedTree on data with categorical features "
                         f"or missing values; got {type(tree).__name__}.")
    for i in np.flatnonzero(out.is_split):
        f = int(out.feature[i])
        has_levels = out.levels_left is not None and bool(np.any(out.levels_left[i] != 0))
        if is_cat[f] != has_levels:
            raise ValueError(f"{where}initial_tree: the rule at node {i} on feature {f} must be "
                             + (f"a level set 'x{f}in{{...}}'" if is_cat[f] else f"a threshold 'x{f}<=t'") + ".")
        if has_levels:
            bits = [32 * w + b for w in range(words) for b in range(32) if (int(out.levels_left[i, w]) >> b) & 1]
            if max(bits) >= level_count[f]:
                raise ValueError(f"{where}initial_tree: feature {f} has {level_count[f]} levels; the rule at node {i} "
                                 f"names level {max(bits)}.")
    nan_left = np.zeros(n, bool) if nan_bits and out.nan_left is None else out.nan_left
    levels_left = np.zeros((n, words), np.uint32) if words and out.levels_left is None else out.levels_left
    return MixedTree(np.asarray(out.is_split), np.asarray(out.feature), np.asarray(out.cut), nan_left, levels_left)
