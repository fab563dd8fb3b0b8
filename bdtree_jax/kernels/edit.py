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
from ..tree import Tree, change, n_leaves, tree_depth
from . import cgm
from ._moves import draw_rule, pick, propose_grow, propose_prune, score, targets
from .base import SamplingAlgorithm

__all__ = ["EditConfig", "EditData", "EditState", "apply_edit", "replay", "edit_prior", "initial_tree_from"]

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
    """

    max_depth: int
    min_leaf_size: int = 1
    mean_edits: float = 2.0
    max_edits: int = 20
    regrow_prob: float = 0.5
    trace_dtypes: tuple = ("int32", "int32")

    def __post_init__(self):
        if not (np.isfinite(self.mean_edits) and self.mean_edits > 0):
            raise ValueError(f"mean_edits must be a finite number > 0; got {self.mean_edits!r}.")
        if not isinstance(self.max_edits, (int, np.integer)) or isinstance(self.max_edits, bool) or self.max_edits < 1:
            raise ValueError(f"max_edits must be an integer >= 1; got {self.max_edits!r}.")
        if not 0.0 <= float(self.regrow_prob) <= 1.0:
            raise ValueError(f"regrow_prob must be in [0, 1]; got {self.regrow_prob!r}.")

    @property
    def q(self) -> float:
        return float(self.mean_edits) / (1.0 + float(self.mean_edits))

    @property
    def cgm(self) -> cgm.CGMConfig:
        return cgm.CGMConfig(self.max_depth, self.min_leaf_size, trace_dtypes=self.trace_dtypes)


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
    edits : (max_edits, 4) float32 the uniforms of the edits (rows ``>= K`` are 0).
    log_lik : () float32 ``log L(T)`` (untempered).
    beta : () float32 inverse temperature.
    """

    current: cgm.CGMState
    n_edits: Array
    edits: Array
    log_lik: Array
    beta: Array


def apply_edit(state: cgm.CGMState, u: Array, data: TreeData, config: cgm.CGMConfig) -> cgm.CGMState:
    """One edit of the prior's process driven by ``u`` (4,) uniforms (move, node, feature, cut)."""
    move_targets = targets(state, data)[:3]
    counts = move_targets.sum(1)
    w = (counts > 0).astype(jnp.float32)
    cdf = jnp.cumsum(w)
    move = jnp.minimum(jnp.sum(u[0] * cdf[-1] >= cdf[:-1]), 2).astype(jnp.int32)
    node = pick(move_targets[move], u[1])
    feature, cut = draw_rule(u[2], u[3], state.lo[node], state.hi[node], data.cut_cumwidth)
    proposed = jax.lax.switch(
        move,
        (
            lambda: propose_grow(state, node, feature, cut, data, config),
            lambda: propose_prune(state, node, data),
            lambda: score(change(state.tree, node, feature, cut), data, config, state.beta),
        ),
    )
    ok = (counts[move] > 0) & jnp.isfinite(proposed.log_prior)
    return jax.tree.map(lambda a, b: jnp.where(ok, a, b), proposed, state)


def replay(start: cgm.CGMState, edits: Array, n_edits: Array, data: TreeData, config: cgm.CGMConfig) -> cgm.CGMState:
    """The state after the first ``n_edits`` rows of ``edits`` (max_edits, 4) applied to ``start``."""

    def body(state, xs):
        k, u = xs
        new = apply_edit(state, u, data, config)
        return jax.tree.map(lambda a, b: jnp.where(k < n_edits, a, b), new, state), None

    return jax.lax.scan(body, start, (jnp.arange(edits.shape[0]), edits))[0]


def _p_append(k, max_edits):
    return jnp.where(k == 0, 1.0, jnp.where(k >= max_edits, 0.0, 0.5))


def _truncated_geometric(u, q: float, m_max):
    """Inverse CDF of ``P(m) ∝ q^m`` on ``0 .. m_max`` for ``u ~ U[0, 1)``."""
    total = 1.0 - q ** (m_max + 1.0)
    m = jnp.floor(jnp.log1p(-u * total) / np.log(q)).astype(jnp.int32)
    return jnp.clip(m, 0, m_max)


def draw(key: PRNGKey, max_edits: int):
    """Randomness of one step: (4,) (kind, accept, choice point, tail length), (4,) the appended
    edit, (max_edits, 4) the regrown tail."""
    k1, k2, k3 = jax.random.split(key, 3)
    return (jax.random.uniform(k1, (4,)), jax.random.uniform(k2, (4,)), jax.random.uniform(k3, (max_edits, 4)))


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

    # regrow: keep edits < j, a fresh tail of m edits; delete: drop edit K - 1
    j = jnp.minimum(jnp.floor(u_point * (K + 1)).astype(jnp.int32), K)
    m = _truncated_geometric(u_len, q, M - j)
    k_regrow = j + m
    edits_regrow = jnp.where((slots < j)[:, None], state.edits, u_tail)
    edits_regrow = jnp.where((slots < k_regrow)[:, None], edits_regrow, 0.0)
    k_delete = jnp.maximum(K - 1, 0)
    edits_delete = jnp.where((slots < k_delete)[:, None], state.edits, 0.0)
    new_k = jnp.where(append, K + 1, jnp.where(regrow, k_regrow, k_delete))
    new_edits = jnp.where(
        append, state.edits.at[jnp.minimum(K, M - 1)].set(u_edit), jnp.where(regrow, edits_regrow, edits_delete)
    )

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
        tree=Tree(t.is_split, t.feature.astype(config.trace_dtypes[0]), t.cut.astype(config.trace_dtypes[1])),
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

    def init_fn(key, data):
        del key
        start = _initial(data, config)
        return EditState(start, jnp.int32(0), jnp.zeros((config.max_edits, 4), jnp.float32), start.log_lik,
                         jnp.float32(1.0))

    def kernel(uniforms, state, data):
        return step_with_uniforms(uniforms, state, data, config)

    def trace_fn(state, info):
        return trace(state, info, config)

    return SamplingAlgorithm(init_fn, kernel, trace_fn, functools.partial(draw, max_edits=config.max_edits))


def initial_tree_from(tree, *, X: np.ndarray, bins: np.ndarray, thresholds: np.ndarray, max_depth: int,
                      where: str = "") -> Tree:
    """The initial tree as padded numpy arrays on the training data's cut grid.

    Parameters
    ----------
    tree : a :class:`~bdtree_jax.tree.Tree`, a tree string (:func:`~bdtree_jax.tree.to_string`
        grammar; thresholds matched to the nearest candidate), or a fitted scikit-learn
        ``DecisionTreeClassifier`` / ``DecisionTreeRegressor`` (its threshold ``t`` on feature
        ``f`` becomes the cut that sends the same training rows left: ``x_f <= t``).
    X : (n, F) training inputs; bins : (n, F) their bin codes; thresholds : (F, C) cut grid.
    max_depth : depth of the padded arrays (the prior's).
    """
    from ..tree import from_string, n_nodes

    n = n_nodes(max_depth)
    if isinstance(tree, str):
        try:
            return from_string(tree, thresholds, max_depth)
        except (ValueError, IndexError, AssertionError) as e:
            raise ValueError(f"{where}initial_tree: could not read the tree string ({e}).") from None
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
