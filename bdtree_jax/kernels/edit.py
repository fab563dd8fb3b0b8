"""The EDITTREE prior (Angelopoulos & Cussens 2005): trees near a given initial tree.

**Prior.**  Start at an initial tree ``T0`` (a tree the user believes in, e.g. one fitted by
greedy CART) and apply ``K`` random edits, ``P(K = k) ∝ q^k`` for ``k = 0 .. max_edits`` with
``q = mean_edits / (1 + mean_edits)`` (a geometric number of edits, truncated).  One edit of ``T``:
a move among grow / prune / change (probability 1/3 each, renormalised over the moves that have a
target), a node uniformly among the move's targets (grow: leaves above ``max_depth`` with a valid
cut; prune: nodes whose children are leaves; change: internal nodes), and for grow / change a
rule from the CGM98 rule prior ``p_rule`` of the node's rows.  An edit that yields a tree outside
the CGM98 prior's support (a change that leaves a descendant rule without valid rows, or a box
cut) is a no-op.  The prior of a tree is the probability that this process ends there.

**Sampler.**  That probability is a sum over edit paths with no closed form, so the chain runs on
the paths themselves -- the "proof" of the tree, as in the paper's stochastic logic programs:
the state is ``(K, U_1 .. U_K)`` with ``U_k`` the four uniforms that drive edit ``k``, the target
is ``q^K L(T(K, U))^β`` (the uniforms have density 1) and the tree marginal is the edit prior
times the likelihood.  Two kinds of MH move:

* **local** (CGM-style): append one edit drawn from the edit process to the current tree, or
  delete the last edit (``P_append = 1/2``, 1 at ``K = 0``, 0 at ``K = max_edits``)::

      r_append = q (L(T') / L(T))^β P_delete(K + 1) / P_append(K)

* **regrow** (the paper's uniform-choice backtracking): pick a choice point ``j`` uniformly in
  ``0 .. K``, keep the first ``j`` edits and regrow the rest from the prior (a new truncated
  geometric number of further edits with fresh uniforms)::

      r_regrow = (L(T') / L(T))^β (K + 1) / (K' + 1)

``regrow_prob`` mixes the two (0: local only, 1: regrow only).

**Categorical features and missing values** (docs/categorical-missing.md; decided statically from
the data).  The initial tree is a :class:`~bdtree_jax.tree.MixedTree` (:func:`initial_tree`).  An
edit's targets are then grow: leaves with an available rule and a positive split probability;
prune: splitting nodes whose children are leaves; change: splitting nodes; and grow / change draw
a whole rule from the general rule prior at the node
(:func:`~bdtree_jax.priors.categorical.draw_rule_general`: a feature uniformly among those with an
available rule, then an ordered cut with the ``split_prior`` weights, or a categorical level set
uniformly among the ``2^(k-1) - 1`` partitions of the node's ``k`` available levels, and the
missing-value bit ``Bernoulli(1/2)``).  A change keeps the node's subtrees, so replacing a level
set, flipping a missing-value bit, or both at once are each *one* edit.  The sampler and its
ratios are the same (each edit's randomness is drawn from its base law by both moves); an edit's
randomness is five uniforms (move, node, feature, cut, missing bit) and a PRNG key (the level
set's words, redrawn while empty), which the path stores as ``(max_edits, 5)`` float32 and
``(max_edits, K)`` uint32 key data, and each edit re-scores the whole tree.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors.categorical import general_rules
from ..tree import Tree, n_leaves, tree_depth
from . import cgm
from ._moves import change_rule, draw_prior_rule, moved_tree, pick, propose_grow, propose_prune, score, targets
from .base import SamplingAlgorithm
from .._validate import is_int

__all__ = ["EditConfig", "EditData", "EditState", "apply_edit", "replay", "edit_prior", "initial_tree"]

MOVES = ("append", "delete", "regrow")


@dataclass(frozen=True)
class EditConfig:
    """Static configuration.

    Attributes
    ----------
    max_depth, min_leaf_size : the CGM98 prior's (the support of the edited trees).
    mean_edits : mean of the (untruncated) geometric number of edits.
    max_edits : truncation of the number of edits (a static shape).
    regrow_prob : probability that a step is a regrow move (else a local append / delete).
    trace_dtypes : integer types of the recorded trees.
    general_rules : the data have categorical features or missing values (the edits' draws).
    """

    max_depth: int
    min_leaf_size: int = 1
    mean_edits: float = 2.0
    max_edits: int = 20
    regrow_prob: float = 0.5
    trace_dtypes: tuple = ("int32", "int32")
    general_rules: bool = False

    def __post_init__(self):
        if not (np.isfinite(self.mean_edits) and self.mean_edits > 0):
            raise ValueError(f"mean_edits must be a finite number > 0; got {self.mean_edits!r}.")
        if not is_int(self.max_edits) or self.max_edits < 1:
            raise ValueError(f"max_edits must be an integer >= 1; got {self.max_edits!r}.")
        if not 0.0 <= float(self.regrow_prob) <= 1.0:
            raise ValueError(f"regrow_prob must be in [0, 1]; got {self.regrow_prob!r}.")

    @property
    def q(self) -> float:
        return float(self.mean_edits) / (1.0 + float(self.mean_edits))

    @property
    def cgm(self) -> cgm.CGMConfig:
        return cgm.CGMConfig(self.max_depth, self.min_leaf_size, trace_dtypes=self.trace_dtypes,
                             general_rules=self.general_rules)


class EditData(NamedTuple):
    """The data of the edit-prior sampler: the training data and the initial tree (arrays)."""

    tree_data: TreeData
    initial_tree: Tree


class EditState(NamedTuple):
    """Chain state.

    Attributes
    ----------
    current : CGMState of the current tree ``T(K, U)`` (its cached statistics).
    n_edits : () int32 ``K``.
    edits : (max_edits, 4) float32 the uniforms of the edits (rows ``>= K`` are 0); on general
        data ((max_edits, 5) float32, (max_edits, K) uint32 key data).
    log_lik : () float32 ``log L(T)`` (untempered).
    beta : () float32 inverse temperature.
    """

    current: cgm.CGMState
    n_edits: Array
    edits: Array
    log_lik: Array
    beta: Array


def apply_edit(state: cgm.CGMState, edit, data: TreeData, config: cgm.CGMConfig) -> cgm.CGMState:
    """One edit of the prior's process driven by ``edit``: (4,) uniforms (move, node, feature,
    cut), on general data ((5,) uniforms (those and the missing-value bit), (K,) key data); the
    state unchanged when the edit is a no-op.  Numeric data: a grow or a prune touches one node
    (:func:`~bdtree_jax.kernels._moves.propose_grow`); general data: every edit re-scores the tree."""
    general = general_rules(data)
    u, key = (edit[0], jax.random.wrap_key_data(edit[1])) if general else (edit, None)
    move_targets = targets(state, data)[:3]
    counts = move_targets.sum(1)
    w = (counts > 0).astype(jnp.float32)
    cdf = jnp.cumsum(w)
    move = jnp.minimum(jnp.sum(u[0] * cdf[-1] >= cdf[:-1]), 2).astype(jnp.int32)
    node = pick(move_targets[move], u[1])
    levels = None if state.levels is None else state.levels[node]
    rule = draw_prior_rule(u[2], u[3], u[4] if general else None, key, state.lo[node], state.hi[node], levels, data,
                           state.tree.nan_left is not None)
    if general:
        proposed = score(moved_tree(state.tree, move, node, rule), data, config, state.beta)
        proposed = proposed._replace(leaf_id=proposed.leaf_id.astype(state.leaf_id.dtype))
    else:
        proposed = jax.lax.switch(
            move,
            (
                lambda: propose_grow(state, node, rule.feature, rule.cut, data, config),
                lambda: propose_prune(state, node, data),
                lambda: score(change_rule(state.tree, node, rule), data, config, state.beta),
            ),
        )
    ok = (counts[move] > 0) & jnp.isfinite(proposed.log_prior)
    return jax.tree.map(lambda a, b: jnp.where(ok, a, b), proposed, state)


def replay(start: cgm.CGMState, edits, n_edits: Array, data: TreeData, config: cgm.CGMConfig) -> cgm.CGMState:
    """The state after the first ``n_edits`` rows of ``edits`` (:class:`EditState`'s) applied to
    ``start``."""

    def body(state, xs):
        k, edit = xs
        new = apply_edit(state, edit, data, config)
        return jax.tree.map(lambda a, b: jnp.where(k < n_edits, a, b), new, state), None

    return jax.lax.scan(body, start, (jnp.arange(jax.tree.leaves(edits)[0].shape[0]), edits))[0]


def _p_append(k, max_edits):
    return jnp.where(k == 0, 1.0, jnp.where(k >= max_edits, 0.0, 0.5))


def _truncated_geometric(u, q: float, m_max):
    """Inverse CDF of ``P(m) ∝ q^m`` on ``0 .. m_max`` for ``u ~ U[0, 1)``."""
    total = 1.0 - q ** (m_max + 1.0)
    m = jnp.floor(jnp.log1p(-u * total) / np.log(q)).astype(jnp.int32)
    return jnp.clip(m, 0, m_max)


def _key_words() -> int:
    """Words of the default PRNG implementation's key data."""
    return int(jax.random.key_data(jax.random.key(0)).shape[-1])


def _draw_edits(key: PRNGKey, shape: tuple, general_rules: bool):
    """Randomness of edits: ``shape + (4,)`` uniforms; with ``general_rules`` ``shape + (5,)``
    uniforms and ``shape + (K,)`` uint32 key data."""
    if not general_rules:
        return jax.random.uniform(key, shape + (4,))
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):  # a raw uint32 key
        key = jax.random.wrap_key_data(key)
    k1, k2 = jax.random.split(key)
    n = int(np.prod(shape, dtype=int))
    keys = jax.random.key_data(jax.random.split(k2, max(n, 1)))[:n]
    return jax.random.uniform(k1, shape + (5,)), keys.reshape(shape + (-1,))


def draw(key: PRNGKey, max_edits: int, general_rules: bool = False):
    """Randomness of one step: (4,) (kind, accept, choice point, tail length), the appended edit
    and the regrown tail (``max_edits`` edits), each as :func:`_draw_edits`."""
    k1, k2, k3 = jax.random.split(key, 3)
    return (jax.random.uniform(k1, (4,)), _draw_edits(k2, (), general_rules),
            _draw_edits(k3, (max_edits,), general_rules))


def _rows_where(mask: Array, a, b):
    """Per edit row: ``a`` where ``mask`` (M,), else ``b`` (pytrees of (M, ...) arrays)."""
    return jax.tree.map(lambda x, y: jnp.where(mask.reshape((-1,) + (1,) * (x.ndim - 1)), x, y), a, b)


def _initial(data: EditData, config: EditConfig) -> cgm.CGMState:
    return score(data.initial_tree, data.tree_data, config.cgm, 1.0)


def step_with_uniforms(uniforms, state: EditState, data: EditData, config: EditConfig):
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

    # regrow: keep edits < j, a fresh tail of m edits; delete: drop edit K - 1
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
    """Recorded per iteration; ``log_prior`` is the path's ``K log q`` (the edit prior of the tree
    itself has no closed form) and ``n_edits`` is ``K``."""
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
def edit_prior(config: EditConfig) -> SamplingAlgorithm:
    """The edit-prior sampler as a :class:`SamplingAlgorithm` over :class:`EditData`; chains start
    at the initial tree (``K = 0``)."""

    M = config.max_edits

    def init_fn(key, data):
        del key
        start = _initial(data, config)
        if config.general_rules:
            edits = (jnp.zeros((M, 5), jnp.float32), jnp.zeros((M, _key_words()), jnp.uint32))
        else:
            edits = jnp.zeros((M, 4), jnp.float32)
        return EditState(start, jnp.int32(0), edits, start.log_lik, jnp.float32(1.0))

    def kernel(uniforms, state, data):
        return step_with_uniforms(uniforms, state, data, config)

    def trace_fn(state, info):
        return trace(state, info, config)

    return SamplingAlgorithm(init_fn, kernel, trace_fn,
                             functools.partial(draw, max_edits=M, general_rules=config.general_rules))


def initial_tree(tree, *, X: np.ndarray, bins: np.ndarray, thresholds: np.ndarray, max_depth: int,
                 level_count: np.ndarray | None = None, nan_bits: bool = False, where: str = "") -> Tree:
    """The initial tree as padded numpy arrays on the training data's cut grid.

    Parameters
    ----------
    tree : a tree string (:func:`~bdtree_jax.tree.to_string` grammar, thresholds matched to the
        nearest candidate: ``x{f}<={t}``, ``x{f}in{a,b}`` with level indices, ``|NA=L`` / ``|NA=R``
        after every rule when the data have missing-value bits); on numeric data a
        :class:`~bdtree_jax.tree.Tree` or a fitted scikit-learn ``DecisionTreeClassifier`` /
        ``DecisionTreeRegressor`` (its threshold ``t`` on feature ``f`` becomes the cut that sends
        the same training rows left: ``x_f <= t``); on general data a
        :class:`~bdtree_jax.tree.MixedTree` with the data's fields.
    X : (n, F) training inputs; bins : (n, F) their bin codes; thresholds : (F, C) cut grid.
    max_depth : depth of the padded arrays (the prior's).
    level_count : (F,) levels per feature (0: ordered; None: no categorical feature).
    nan_bits : the data have missing-value bits.

    Returns a :class:`~bdtree_jax.tree.Tree`, or on data with categorical features or missing
    values a :class:`~bdtree_jax.tree.MixedTree` with the data's fields.
    """
    from ..tree import MixedTree, from_string, level_words, n_nodes

    words = level_words(level_count)
    general = nan_bits or words > 0
    n = n_nodes(max_depth)
    is_cat = np.zeros(X.shape[1], bool) if level_count is None else np.asarray(level_count) > 0
    kind = lambda f: f"a level set 'x{f}in{{...}}'" if is_cat[f] else f"a threshold 'x{f}<=t'"  # noqa: E731
    if isinstance(tree, str):
        for f, op in re.findall(r"x(\d+)(<=|in\{)", tree):
            f = int(f)
            if f >= len(is_cat):
                raise ValueError(f"{where}initial_tree: feature {f} does not exist (the data have {len(is_cat)}).")
            if is_cat[f] != (op != "<="):
                raise ValueError(f"{where}initial_tree: a rule on feature {f} must be {kind(f)}.")
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
    elif general and isinstance(tree, MixedTree):
        out = MixedTree(*(None if a is None else np.asarray(a) for a in tree))
        if (out.nan_left is None) == nan_bits or (out.levels_left is None) != (words == 0) or (
                out.levels_left is not None and out.levels_left.shape[-1] != words):
            raise ValueError(f"{where}initial_tree: a MixedTree needs nan_left and levels_left ({words} words) as the "
                             "data have them.")
        if out.is_split.shape[-1] != n:
            raise ValueError(f"{where}initial_tree has {out.is_split.shape[-1]} heap slots; max_depth={max_depth} "
                             f"needs {n}.")
    elif general:
        raise ValueError(f"{where}initial_tree must be a tree string or a MixedTree on data with categorical features "
                         f"or missing values; got {type(tree).__name__}.")
    else:
        return _numeric_initial_tree(tree, X=X, bins=bins, max_depth=max_depth, where=where)
    for i in np.flatnonzero(out.is_split):
        f = int(out.feature[i])
        has_levels = out.levels_left is not None and bool(np.any(out.levels_left[i] != 0))
        if is_cat[f] != has_levels:
            raise ValueError(f"{where}initial_tree: the rule at node {i} on feature {f} must be {kind(f)}.")
        if has_levels:
            bits = [32 * w + b for w in range(words) for b in range(32) if (int(out.levels_left[i, w]) >> b) & 1]
            if max(bits) >= level_count[f]:
                raise ValueError(f"{where}initial_tree: feature {f} has {level_count[f]} levels; the rule at node {i} "
                                 f"names level {max(bits)}.")
    if not general:
        return out
    nan_left = np.zeros(n, bool) if nan_bits and out.nan_left is None else out.nan_left
    levels_left = np.zeros((n, words), np.uint32) if words and out.levels_left is None else out.levels_left
    return MixedTree(np.asarray(out.is_split), np.asarray(out.feature), np.asarray(out.cut), nan_left, levels_left)


def _numeric_initial_tree(tree, *, X: np.ndarray, bins: np.ndarray, max_depth: int, where: str) -> Tree:
    """:func:`initial_tree` from a :class:`~bdtree_jax.tree.Tree` or a fitted scikit-learn tree."""
    from ..tree import n_nodes

    n = n_nodes(max_depth)
    if isinstance(tree, Tree):
        arrays = [np.asarray(a) for a in tree]
        if arrays[0].shape[-1] > n:
            raise ValueError(f"{where}initial_tree has {arrays[0].shape[-1]} heap slots; max_depth={max_depth} allows {n}.")
        out = [np.zeros(n, bool), np.zeros(n, np.int32), np.zeros(n, np.int32)]
        for o, a in zip(out, arrays):
            o[: a.shape[-1]] = a
        return Tree(*out)
    sk = getattr(tree, "tree_", None)
    if sk is None or not hasattr(sk, "children_left"):
        raise ValueError(
            f"{where}initial_tree must be a Tree, a tree string or a fitted scikit-learn decision tree; "
            f"got {type(tree).__name__}."
        )
    if getattr(tree, "n_features_in_", X.shape[1]) != X.shape[1]:
        raise ValueError(f"{where}initial_tree was fitted on {tree.n_features_in_} features; X has {X.shape[1]}.")
    is_split, feature, cut = np.zeros(n, bool), np.zeros(n, np.int32), np.zeros(n, np.int32)

    def rec(sk_node: int, heap: int):
        left, right = sk.children_left[sk_node], sk.children_right[sk_node]
        if left < 0:
            return
        if 2 * heap + 2 >= n:
            raise ValueError(f"{where}initial_tree is deeper than max_depth={max_depth}; raise max_depth or prune it.")
        f, t = int(sk.feature[sk_node]), float(sk.threshold[sk_node])
        goes_left = X[:, f] <= t
        if goes_left.all() or not goes_left.any():
            raise ValueError(f"{where}initial_tree: the split x{f} <= {t:g} does not separate the training rows.")
        is_split[heap], feature[heap], cut[heap] = True, f, int(bins[goes_left, f].max())
        rec(left, 2 * heap + 1)
        rec(right, 2 * heap + 2)

    rec(0, 0)
    return Tree(is_split, feature, cut)
