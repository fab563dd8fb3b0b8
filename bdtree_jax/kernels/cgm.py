"""CGM: Chipman, George & McCulloch (1998) grow / prune / change / swap Metropolis–Hastings.

One step proposes one move on one chain's padded tree and accepts it with the exact MH ratio::

    log r = beta (log L(T*) - log L(T)) + log p(T*) - log p(T) + log q(T | T*) - log q(T* | T)

* The move type is drawn from ``move_probs`` renormalised over the moves that have a target in
  the current tree (grow: leaves with a valid cut above ``max_depth``; prune: nogs; change:
  splitting nodes; swap: splitting nodes other than the root), so ``q`` includes the
  move-probability ratio ``P_{T*}(reverse) / P_T(move)``.
* The target node is uniform among the move's targets (the node-count terms), and grow / change
  draw the new rule from the prior's rule distribution ``p_rule`` (which therefore cancels against
  the prior for grow, CGM98 eq. 19, and for change).
* Change and swap are symmetric given the tree's shape; their ratio is the likelihood ratio times
  the prior ratio of the re-partitioned subtree (rule availability below the node changes) and a
  proposal that leaves a rule without both children populated has prior 0 and is rejected.

The state caches every node's sufficient statistics and valid-cut bounds so the log-prior and
move counts are available without touching the data.  With ``CGMConfig(incremental=True)`` (the
CPU default) a move pays for what it touches: grow, prune and a change at a nog re-split one
node's rows and update the likelihood (the likelihood's ``split_gain``), the prior (the node's
and its children's factors under CGM98; the whole proposed tree under the pinball prior or box
constraints) and the move counts by their local change, then write the state in place gated by
the acceptance; a change higher up and a swap re-route and re-sum only the rows below the node
they change (a proposal that leaves a leaf too small is rejected there), then re-score the tree.
Under the pinball prior (:mod:`bdtree_jax.priors`) the rule draw does not cancel against a split
probability, but the ratio above is written with the full ``log p(T*) - log p(T)`` and the
rule-proposal terms, so it holds for either prior.

With ``incremental=False`` (chains ``vmap``-ped, the accelerator default) every step edits the tree
with selects and re-scores the proposed tree whole (:func:`_score_batched`).  Under ``vmap`` a
``lax.cond`` whose predicate differs between chains becomes a select: every chain pays for both
branches, so the incremental kernel batched costs more than the full re-score (on bcw, 478 rows
and ``max_depth`` 6, XLA's cost analysis gives about 560 kB accessed per chain and step for it,
of which a local move alone is about 105 kB and the subtree re-score about 470 kB).  What a batched
chain pays for is the width and the number of its per-row and per-node arrays, so the re-score
keeps them narrow: the rows descend the tree with uint8 node ids reading bins in the narrowest
integer type, the node sums are one plain segment sum (no CPU scatter lanes, which multiply what
each chain writes), and the valid-cut bounds one max of ``(-bins, bins)`` in that narrow type --
about 250 kB per chain and step instead of 450 kB, the same chain (the same trees and acceptances
as the incremental kernel; ``benchmarks/cgm_many_chains.py`` measures it).

**Categorical features and missing values** (docs/categorical-missing.md; decided statically from
the data, :func:`~bdtree_jax.priors.categorical.general_rules`, with ``CGMConfig.general_rules``
for the draws).  The same chain with the rule prior of :mod:`bdtree_jax.priors.categorical`: a
rule may be a set of levels of a categorical feature, and every rule carries the side missing
values go to (:func:`~bdtree_jax.kernels._moves.draw_prior_rule`,
:func:`~bdtree_jax.kernels._moves.log_prior_rule`).  Each step edits the tree and re-scores it
whole (the branch-free path above, for sequential and batched chains alike): the rules'
availability at every node (ordered cut intervals from the rows with a value, level sets) comes
from that pass.  After each proposal a **flip step** changes one rule locally: at a splitting node
chosen uniformly, its missing-value bit is flipped or (at a categorical rule, half of the time when
the tree has bits) one of its available levels but the smallest moves to the other side; the
choice does not depend on the flipped value, so the proposal is symmetric and the ratio is the
posterior ratio of the two trees.  A step's randomness (:func:`draw` with ``general_rules``) is
ten uniforms (move, node, feature, cut, accept, missing bit; flip node, kind, level, accept) and a
key for the level set (its words are redrawn while the set is empty, which makes it exactly
uniform over the non-empty subsets).  With box constraints (:mod:`bdtree_jax.priors.boxes`:
ordered intervals and level sets) :func:`~bdtree_jax.kernels._moves.score` gives prior 0 to a
tree with a rule cutting a box, so every move rejects such a proposal: the chain targets the
prior restricted to the trees respecting the boxes.
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
from ..priors import PinballTables, TreePrior, child_bounds, leaf_size_log_prior, log_tree_prior
from ..priors import node_bounds, reduce_subtrees, split_mask, subtree_sums
from ..priors.categorical import general_rules
from ..tree import Rule, Tree, change, empty_tree, in_subtree, leaf_index, leaf_nodes, rule_at, swap
from ._moves import (
    CGMState, change_rule, draw_prior_rule, log_prior_rule, mh_log_ratio, moved_tree, pick, score, targets, with_scores,
)
from .base import SamplingAlgorithm

__all__ = [
    "CGMConfig", "CGMState", "CGMInfo", "MOVES", "MOVE_PROBS", "init", "draw", "step", "step_with_uniforms", "trace",
    "build_kernel", "cgm", "LocalProposal", "propose", "apply_local", "flip_proposal",
]

MOVES = ("grow", "prune", "change", "swap")
MOVE_PROBS = (0.25, 0.25, 0.40, 0.10)  # CGM's default probabilities of MOVES
_REVERSE = (1, 0, 2, 3)  # the move that undoes each of MOVES (a tuple: no JAX work on import)


def _small_int(limit: int | None) -> str:
    """The smallest signed integer type holding ``0..limit`` (int32 if unknown)."""
    if limit is None:
        return "int32"
    return "int8" if limit < 2**7 else "int16" if limit < 2**15 else "int32"


@dataclass(frozen=True)
class CGMConfig:
    """Static configuration of the CGM kernel.

    Only structure lives here; numbers that do not change the program (alpha, beta, likelihood
    hyperparameters) travel in :class:`~bdtree_jax.data.TreeData`, so refitting with other values
    or other data of the same shape reuses the compiled program.

    Attributes
    ----------
    max_depth : int
    min_leaf_size : int
    move_probs : (grow, prune, change, swap) probabilities, default (0.25, 0.25, 0.40, 0.10).
    trace_dtypes : integer types of the recorded trees' ``feature`` and ``cut`` arrays.
    incremental : re-score only what a move touches (``lax.cond`` between the local and the
        subtree update; best when each chain runs its own program, as on CPU), or re-score the
        whole proposed tree with one branch-free program (best when chains are ``vmap``-ped, as
        on GPU).  Both give the same chain.
    general_rules : the data have categorical features or missing-value bits: the steps draw a
        level set and a missing-value bit too (:func:`draw`) and re-score the whole tree (module
        docstring).
    """

    max_depth: int
    min_leaf_size: int = 1
    move_probs: tuple = MOVE_PROBS
    trace_dtypes: tuple = ("int32", "int32")
    incremental: bool = True
    general_rules: bool = False

    @classmethod
    def from_prior(
        cls, prior: TreePrior, move_probs=MOVE_PROBS, n_features: int | None = None,
        n_cuts: int | None = None, incremental: bool = True, general_rules: bool = False,
    ) -> "CGMConfig":
        """Config for ``prior``; with the data's ``n_features`` and largest number of candidate
        cuts ``n_cuts`` the recorded trees use the smallest integer types that hold them (the
        per-iteration tree record dominates memory traffic with many chains)."""
        dtypes = (_small_int(n_features), _small_int(n_cuts))
        return cls(prior.max_depth, prior.min_leaf_size, tuple(move_probs), dtypes, bool(incremental),
                   bool(general_rules))

    def __post_init__(self):
        p = tuple(float(x) for x in self.move_probs)
        if len(p) != 4 or min(p) < 0 or not np.isclose(sum(p), 1.0) or p[0] <= 0 or p[1] <= 0:
            raise ValueError(
                "move_probs must be 4 non-negative numbers (grow, prune, change, swap) summing to 1 "
                f"with grow and prune > 0; got {self.move_probs!r}."
            )
        object.__setattr__(self, "move_probs", p)


class CGMInfo(NamedTuple):
    """Per-step diagnostics: ``move`` () int32 index into :data:`MOVES` (-1: no move possible),
    ``accepted`` () bool, ``log_accept_ratio`` () float32."""

    move: Array
    accepted: Array
    log_accept_ratio: Array


def init(key: PRNGKey | None, data: TreeData, config: CGMConfig, tree: Tree | None = None, beta=1.0) -> CGMState:
    """Initial state at ``tree`` (default: the stump, with the rule fields the data need).  ``key``
    is unused (kept for the protocol)."""
    del key
    if tree is None:
        words = 0 if data.level_masks is None else data.level_masks.shape[-1]
        tree = empty_tree(config.max_depth, nan_bits=data.missing_code is not None, level_words=words)
    return score(tree, data, config, beta)


def _choose_move(log_p: Array, u: Array) -> Array:
    """Inverse-CDF draw from the (4,) move log-probabilities."""
    cdf = jnp.cumsum(jnp.exp(log_p))
    return jnp.minimum(jnp.sum(u * cdf[-1] >= cdf[:-1]), 3).astype(jnp.int32)


def _log_move_probs(counts: Array, move_probs: tuple) -> Array:
    """(4,) log probabilities of the moves, renormalised over moves with targets."""
    w = jnp.asarray(move_probs, jnp.float32) * (counts > 0)
    return jnp.log(w) - jnp.log(jnp.maximum(w.sum(), 1e-30))


def draw(key: PRNGKey, general_rules: bool = False):
    """The randomness of one step: (5,) uniforms (move, node, feature, cut, accept); with
    ``general_rules`` (10,) uniforms (those, the missing-value bit, and the flip step's node, kind,
    level and accept) and a key for the level set, from one split."""
    if not general_rules:
        return jax.random.uniform(key, (5,))
    k_uniform, k_rule = jax.random.split(key)
    return jax.random.uniform(k_uniform, (10,)), k_rule


def step(key: PRNGKey, state: CGMState, data: TreeData, config: CGMConfig) -> tuple[CGMState, CGMInfo]:
    """One CGM98 MH proposal (see module docstring)."""
    return step_with_uniforms(draw(key, config.general_rules), state, data, config)


def step_with_uniforms(draws, state: CGMState, data: TreeData, config: CGMConfig) -> tuple[CGMState, CGMInfo]:
    """:func:`step` given its :func:`draw`; the discrete choices are made by inverse CDF, so the
    step needs no other randomness (but a categorical rule's level set, from the draw's key)."""
    if general_rules(data):
        uniforms, key = draws
        move, node, rule, counts, log_p, any_move = _choose(uniforms, state, data, config, key=key)
        state, info = _full_step(state, move, node, rule, counts, log_p, any_move, uniforms[4], data, config)
        return _flip_step(uniforms[6:], state, data, config), info
    u_accept = draws[4]
    tree = state.tree
    move, node, rule, counts, log_p, any_move = _choose(draws, state, data, config)
    feature, cut = rule.feature, rule.cut

    if config.incremental:
        # Grow, prune and a change at a nog only touch one node and its two children: re-score
        # them in place (no pass over the tree's other nodes).  Change elsewhere and swap
        # re-partition a subtree: re-route and re-sum only its rows (:func:`_subtree_step`).
        local = (move == 0) | (move == 1) | ((move == 2) & _children_are_leaves(tree, node))
        return jax.lax.cond(
            local,
            lambda: _local_step(state, move, node, feature, cut, counts, log_p, any_move, u_accept, data, config),
            lambda: _subtree_step(state, move, node, feature, cut, counts, log_p, any_move, u_accept, data, config),
        )
    return _full_step(state, move, node, rule, counts, log_p, any_move, u_accept, data, config)


def _children_are_leaves(tree: Tree, node: Array) -> Array:
    """() bool: both children slots of ``node`` are leaves or inactive (the node is a leaf or a
    nog); False at ``max_depth``, which has no children slots."""
    n = tree.is_split.shape[-1]
    child = 2 * node + 1
    inside = child + 1 < n
    kids = jax.lax.dynamic_slice(tree.is_split, (jnp.minimum(child, n - 2),), (2,))
    return inside & ~jnp.any(kids)


def _availability(state: CGMState, node: Array):
    """``lo, hi`` (F,) and ``levels`` (F, W) (None without categorical features) of ``node``."""
    return state.lo[node], state.hi[node], None if state.levels is None else state.levels[node]


def _rule_probs(state, node, rule, data):
    """log p_rule of the proposed ``rule`` and of the current rule at ``node`` (its availability
    is the same before and after any move that draws a rule there)."""
    lo, hi, levels = _availability(state, node)
    return log_prior_rule(lo, hi, levels, rule, data), log_prior_rule(lo, hi, levels, rule_at(state.tree, node), data)


def _log_q_ratio(move, counts, log_p, counts_new, rule_new, rule_old, config):
    """``log q(T | T*) - log q(T* | T)`` of a move from a tree with move ``counts`` and move
    log-probabilities ``log_p`` to one with ``counts_new``: move choice, target node and
    rule-proposal terms (module docstring)."""
    log_p_new = _log_move_probs(counts_new, config.move_probs)
    reverse = jnp.asarray(_REVERSE, jnp.int32)[move]
    log_q_forward = log_p[move] - jnp.log(counts[move]) + jnp.where((move == 0) | (move == 2), rule_new, 0.0)
    log_q_reverse = (
        log_p_new[reverse]
        - jnp.log(jnp.maximum(counts_new[reverse], 1))
        + jnp.where((move == 1) | (move == 2), rule_old, 0.0)
    )
    log_q_reverse = jnp.where(counts_new[reverse] > 0, log_q_reverse, -jnp.inf)
    return log_q_reverse - log_q_forward


def _full_step(state, move, node, rule, counts, log_p, any_move, u_accept, data, config):
    """Batched chains (``config.incremental=False``) and general data: edit the tree (cheap
    selects) and re-score it whole (one pass over the data), whatever the move, then accept or
    reject."""
    new_tree = moved_tree(state.tree, move, node, rule)
    if general_rules(data):
        proposed = score(new_tree, data, config, state.beta)
    else:
        proposed = _score_batched(new_tree, data, config, state.beta)
    return _accept_full(state, proposed, move, node, rule, counts, log_p, any_move, u_accept, data, config)


def _narrow_bins_dtype(data: TreeData):
    """The narrowest signed integer type holding every bin code and its negation (static: from
    the cut grid's size)."""
    top = data.cut_cumwidth.shape[-1]  # bins are < top
    return jnp.int8 if top <= 2**7 else jnp.int16 if top <= 2**15 else jnp.int32


def _leaf_index_narrow(tree: Tree, data: TreeData) -> Array:
    """(n,) :func:`~bdtree_jax.tree.leaf_index` of every row, in uint8 for trees of at most 255
    slots (``max_depth`` <= 7) and reading the bins in :func:`_narrow_bins_dtype`: the descent's
    per-row arrays are what every batched chain reads and writes at each of its levels, so their
    width is its cost.  The same leaves as ``leaf_index(tree, data.bins, max_cut=n)``."""
    n_nodes = tree.is_split.shape[-1]
    n, n_features = data.bins.shape
    shift = max(n, 1).bit_length()
    if n_nodes > 255 or n_features << shift >= 2**31:
        return leaf_index(tree, data.bins, max_cut=n)
    flat = data.bins.astype(_narrow_bins_dtype(data)).reshape(-1)  # the same for every chain
    row_offset = jnp.arange(n, dtype=jnp.int32) * n_features
    # each node's rule packed in one integer (feature high, cut low; -1: leaf), one gather a level
    code = jnp.where(tree.is_split, (tree.feature.astype(jnp.int32) << shift) + tree.cut, -1)
    mask = (1 << shift) - 1
    node = jnp.zeros(n, jnp.uint8)
    for _ in range(int(np.log2(n_nodes + 1)) - 1):
        c = code[node]
        go_right = flat[row_offset + (c >> shift)] > (c & mask)
        node = jnp.where(c >= 0, 2 * node + 1 + go_right.astype(jnp.uint8), node)
    return node


def _score_batched(tree: Tree, data: TreeData, config: CGMConfig, beta) -> CGMState:
    """:func:`~bdtree_jax.kernels._moves.score` (the same state) for chains that are ``vmap``-ped.

    The per-node sums are one plain ``segment_sum`` of the rows' statistics into their leaves
    (the ``SCATTER_LANES`` copies of :func:`~bdtree_jax.priors.subtree_sums` pay off only for the
    serial scatter of one CPU chain: batched, they multiply the bytes each chain writes and reads
    by 16), and the valid-cut bounds (``valid_cuts="data"``, ``min_leaf_size = 1``) are a max of
    ``(-bins, bins)`` in the narrowest integer type holding the bins (int8 for up to 127 cut
    slots): the batched scatter broadcasts its (n, 2F) updates to every chain, so their width is
    what every chain pays.  Min and max are exact in any width; the sums of integer statistics
    (counts) are exact, others differ from :func:`score` by float rounding only.
    """
    n_nodes = tree.is_split.shape[-1]
    leaf_id = _leaf_index_narrow(tree, data)
    stats = reduce_subtrees(jax.ops.segment_sum(data.point_stats, leaf_id, num_segments=n_nodes), jnp.add)
    if data.cut_count is None and config.min_leaf_size == 1:
        n_features = data.bins.shape[1]
        both = jnp.concatenate([-data.bins, data.bins], axis=1).astype(_narrow_bins_dtype(data))  # (n, 2F)
        both = reduce_subtrees(jax.ops.segment_max(both, leaf_id, num_segments=n_nodes), jnp.maximum)  # (N, 2F)
        lo, hi = -both[:, :n_features].astype(jnp.int32), both[:, n_features:].astype(jnp.int32)
        empty = hi < 0  # no rows: the max's identity (bins are >= 0)
        lo, hi = jnp.where(empty, 0, lo), jnp.where(empty, 0, hi)
    else:
        lo, hi = node_bounds(tree, leaf_id, data, config.min_leaf_size)
    return with_scores(tree, leaf_id, stats, lo, hi, data, beta, config.min_leaf_size)


def _accept_full(state, proposed, move, node, rule, counts, log_p, any_move, u_accept, data, config):
    """The MH step from ``state`` to the re-scored ``proposed`` state."""
    proposed = proposed._replace(leaf_id=proposed.leaf_id.astype(state.leaf_id.dtype))  # BART keeps int16
    counts_new = targets(proposed, data).sum(1)
    rule_new, rule_old = _rule_probs(state, node, rule, data)
    log_ratio = mh_log_ratio(state.beta * (proposed.log_lik - state.log_lik), proposed.log_prior - state.log_prior,
                             _log_q_ratio(move, counts, log_p, counts_new, rule_new, rule_old, config))
    accepted = any_move & (jnp.log(u_accept) < log_ratio)
    new_state = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)
    info = CGMInfo(jnp.where(any_move, move, -1), accepted, jnp.where(any_move, log_ratio, -jnp.inf))
    return new_state, info


def _subtree_step(state, move, node, feature, cut, counts, log_p, any_move, u_accept, data, config):
    """A change (not at a nog) or a swap: the tree keeps its shape and only the rows below the
    changed node (the swapped child's parent) move.  Those rows are routed again from that node,
    and only they are summed into the nodes below it; every other node keeps its cached
    statistics and bounds (same rows).  A proposal that leaves a leaf with fewer than
    ``min_leaf_size`` rows (at least one) has prior 0 under either rule availability (some rule
    above it has no valid cut there, or the truncation) and is rejected there, before the bounds
    and the prior are computed; the rest are scored and accepted as usual."""
    tree = state.tree
    root = jnp.where(move == 2, node, (node - 1) // 2)
    new_tree = jax.tree.map(lambda a, b: jnp.where(move == 2, a, b), change(tree, node, feature, cut), swap(tree, node))
    below = in_subtree(root, config.max_depth)  # (N,)
    moved = below[state.leaf_id]  # (n,) rows below root
    n_nodes = below.shape[0]
    leaf_id = leaf_index(new_tree, data.bins, max_cut=data.bins.shape[0], start=jnp.where(moved, root, state.leaf_id))
    stats = jnp.where(below[:, None], subtree_sums(data.point_stats, leaf_id, n_nodes, rows=moved), state.stats)
    is_leaf = leaf_nodes(tree)  # the same leaves after the move
    too_small = jnp.any(below & is_leaf & (data.likelihood.rows(stats) < max(config.min_leaf_size, 1) - 0.5))

    def rescore():
        lo, hi = node_bounds(new_tree, leaf_id, data, config.min_leaf_size, rows=moved)
        lo, hi = jnp.where(below[:, None], lo, state.lo), jnp.where(below[:, None], hi, state.hi)
        proposed = with_scores(new_tree, leaf_id, stats, lo, hi, data, state.beta, config.min_leaf_size)
        return _accept_full(state, proposed, move, node, Rule(feature, cut), counts, log_p, any_move, u_accept, data,
                            config)

    def reject():
        return state, CGMInfo(jnp.where(any_move, move, -1), jnp.bool_(False), jnp.float32(-jnp.inf))

    return jax.lax.cond(too_small, reject, rescore)


class LocalProposal(NamedTuple):
    """A grow at a leaf, a prune of a nog or a change of a nog's rule, apart from its likelihood.

    Nothing here depends on the rows' responses (only on the tree, its rows' leaves, its bounds
    and the inputs), so BART proposes a move for every tree of the ensemble at once before its
    sequential sweep (:mod:`bdtree_jax.kernels.bart`); the CGM kernel adds the likelihood from its cached
    node statistics (:func:`_local_step`).

    Attributes
    ----------
    move, node, feature, cut : () int32 the move, its node and the new rule (meaningless for a
        prune).
    splits : () bool ``node`` splits after the move (not a prune).
    was_split : () bool ``node`` splits before the move (prune, change).
    in_node : (n,) bool rows of ``node`` (with its children's rows when it is a nog).
    goes_left : (n,) bool rows with ``x_feature <= cut`` (the new rule).
    lo, hi : (2, F) int32 valid-cut bounds of ``node``'s children after the move (0 when it does
        not split).
    kids_can_split : (2,) bool whether those children are splittable (False when it does not split).
    d_log_prior : () ``log p(T*) - log p(T)``.
    log_q_ratio : () ``log q(T | T*) - log q(T* | T)`` (move choice, target node, rule).
    possible : () bool the tree has a move at all (else nothing is proposed).
    kid_rows : (2,) int32 rows of the new children (computed for ``valid_cuts="ancestors"``, whose
        truncation needs them; None otherwise).
    """

    move: Array
    node: Array
    feature: Array
    cut: Array
    splits: Array
    was_split: Array
    in_node: Array
    goes_left: Array
    lo: Array
    hi: Array
    kids_can_split: Array
    d_log_prior: Array
    log_q_ratio: Array
    possible: Array
    kid_rows: Array | None = None


def propose(uniforms: Array, state: CGMState, data: TreeData, config: CGMConfig,
            can_split: Array | None = None, count_rows: bool = True) -> LocalProposal:
    """The response-free part of one step from its :func:`draw` (move, node and rule by inverse
    CDF, as :func:`step_with_uniforms`), for configurations whose moves are all local: grow and
    prune only (``move_probs`` with no change or swap, BART's grow-prune).  Reads ``state.tree``,
    ``leaf_id``, ``lo``, ``hi`` (not ``stats``, ``log_lik`` or ``log_prior``); ``can_split`` (N,)
    the nodes' :func:`~bdtree_jax.priors.splittable` if the caller keeps it.  ``count_rows=False``
    (``valid_cuts="ancestors"``): the new children's rows are not counted here (``kid_rows`` is
    None and ``d_log_prior`` leaves out the truncation to leaves of ``min_leaf_size`` rows, which
    the caller applies when it counts them: BART, in its pass over the tree's rows)."""
    if config.move_probs[2] > 0 or config.move_probs[3] > 0:
        raise ValueError("propose() covers grow and prune only; change and swap need the whole-tree re-score "
                         f"(move_probs={config.move_probs}).")
    move, node, rule, counts, log_p, any_move = _choose(uniforms, state, data, config, can_split)
    return _propose_local(state, move, node, rule.feature, rule.cut, counts, log_p, any_move, data, config, count_rows)


def _choose(uniforms, state, data, config, can_split=None, key=None):
    """The move (by ``move_probs`` renormalised over the moves with targets), its node (uniform
    over the targets) and a rule from ``p_rule`` at that node, each by inverse CDF of one of the
    step's uniforms (general data: the missing-value bit ``uniforms[5]``, the level set from
    ``key``).  Returns ``(move, node, rule, counts, log_p, any_move)``: the (4,) target counts and
    move log-probabilities, and whether any move is possible."""
    u_move, u_node, u_feature, u_cut = uniforms[0], uniforms[1], uniforms[2], uniforms[3]
    target_nodes = targets(state, data, can_split)
    counts = target_nodes.sum(1)
    log_p = _log_move_probs(counts, config.move_probs)
    move = _choose_move(log_p, u_move)
    node = pick(target_nodes[move], u_node)
    u_nan = uniforms[5] if key is not None else None
    rule = draw_prior_rule(u_feature, u_cut, u_nan, key, *_availability(state, node), data, state.tree.nan_left is not None)
    return move, node, rule, counts, log_p, jnp.any(counts > 0)


def _bins_by_feature(data: TreeData) -> Array:
    """(F, n) the bins transposed, so one feature's are contiguous (a proposal reads one row; many
    when vmapped over trees), in int16 when the grid allows (half the bytes)."""
    small = data.cut_cumwidth.shape[-1] < 2**15 - 1
    return data.bins.T.astype(jnp.int16 if small else jnp.int32)


def _propose_local(state, move, node, feature, cut, counts, log_p, any_move, data, config,
                   count_rows: bool = True) -> LocalProposal:
    """:class:`LocalProposal` of a grow at a leaf, a prune of a nog or a change of a nog's rule:
    the new children's bounds, and the prior and proposal terms of the MH ratio by their local
    change (the node's and its children's prior factors, the move counts of the node, its
    children and its parent)."""
    tree = state.tree
    n_nodes = tree.is_split.shape[-1]
    left_child = 2 * node + 1
    sibling = jnp.where(node % 2 == 1, node + 1, node - 1)
    was_split = tree.is_split[node]  # False: grow at a leaf; True: prune or change at a nog
    splits = move != 1

    # re-partition the node's rows (its children's rows when it is a nog); a prune has no new
    # children
    in_node = (state.leaf_id == node) | ((((state.leaf_id - left_child) >> 1) == 0) & was_split)
    goes_left = _bins_by_feature(data)[feature] <= cut
    n_features = data.bins.shape[1]
    left, right = in_node & goes_left, in_node & ~goes_left
    children = lambda: child_bounds(state.lo[node], state.hi[node], feature, cut, in_node, goes_left,  # noqa: E731
                                    data, config.min_leaf_size)
    if data.cut_count is not None:  # O(F), no pass over the rows: no branch needed
        new_lo, new_hi = children()
    else:
        new_lo, new_hi = jax.lax.cond(
            splits, children,
            lambda: (jnp.zeros((2, n_features), jnp.int32), jnp.zeros((2, n_features), jnp.int32)),
        )
    start = (jnp.minimum(left_child, n_nodes - 2), 0)
    old_lo = jax.lax.dynamic_slice(state.lo, start, (2, n_features))
    old_hi = jax.lax.dynamic_slice(state.hi, start, (2, n_features))

    # prior: with CGM98's split probabilities and no box constraints, the change is the factor of
    # ``node`` (leaf 1 - p, split p * p_rule) and its children's leaf factors; otherwise (pinball
    # prior, boxes: factors that reach beyond the three nodes) the proposed tree's prior in full
    may_child = split_mask(data.split_prob)[jnp.minimum(left_child, n_nodes - 1)] > 0
    can_old = jnp.any(old_hi > old_lo, axis=1) & may_child
    can_new = jnp.any(new_hi > new_lo, axis=1) & may_child
    rule_new, rule_old = _rule_probs(state, node, Rule(feature, cut), data)
    if isinstance(data.split_prob, PinballTables) or data.box_side is not None:
        proposed_tree = Tree(
            tree.is_split.at[node].set(splits),
            tree.feature.at[node].set(jnp.where(splits, feature, 0).astype(tree.feature.dtype)),
            tree.cut.at[node].set(jnp.where(splits, cut, 0).astype(tree.cut.dtype)),
        )
        lo_p = jax.lax.dynamic_update_slice(state.lo, jnp.where(splits, new_lo, 0), start)
        hi_p = jax.lax.dynamic_update_slice(state.hi, jnp.where(splits, new_hi, 0), start)
        d_log_prior = (
            log_tree_prior(proposed_tree, lo_p, hi_p, data.split_prob, data.cut_cumwidth, data.box_side)
            - state.log_prior
        )
    else:
        p_node, p_child = data.split_prob[node], data.split_prob[jnp.minimum(left_child, n_nodes - 1)]
        leaf_factor = jnp.log1p(-p_node)  # node is growable as a leaf (grow's target, or a nog's node)
        kids = lambda can: jnp.sum(jnp.log1p(-jnp.where(can, p_child, 0.0)))  # noqa: E731
        old_factor = jnp.where(was_split, jnp.log(p_node) + rule_old + kids(can_old), leaf_factor)
        new_factor = jnp.where(splits, jnp.log(p_node) + rule_new + kids(can_new), leaf_factor)
        d_log_prior = new_factor - old_factor
    kid_rows = None
    if data.cut_count is not None and count_rows:  # the truncation: the new children hold >= min_leaf_size rows
        kid_rows = jnp.sum(jnp.stack([left, right]), axis=1, dtype=jnp.int32)  # one pass over the rows
        d_log_prior = d_log_prior + jnp.where(
            splits, leaf_size_log_prior(kid_rows, jnp.ones(2, bool), data, config.min_leaf_size), 0.0)

    # move counts after the move (grow, prune, change, swap targets)
    growable_old = jnp.where(was_split, jnp.sum(can_old), 1)
    growable_new = jnp.where(splits, jnp.sum(can_new), 1)
    grown = (move == 0).astype(jnp.int32) - (move == 1).astype(jnp.int32)  # +1 grow, -1 prune, 0 change
    has_parent = node > 0
    sibling_leaf = ~tree.is_split[sibling]
    # grow: node becomes a nog, its parent stops being one (if its other child is a leaf); prune:
    # the reverse
    d_nogs = grown * (1 - (has_parent & sibling_leaf).astype(jnp.int32))
    d_internal = grown
    d_swappable = grown * has_parent.astype(jnp.int32)
    counts_new = counts + jnp.stack([growable_new - growable_old, d_nogs, d_internal, d_swappable]).astype(counts.dtype)
    log_q = _log_q_ratio(move, counts, log_p, counts_new, rule_new, rule_old, config)
    return LocalProposal(move, node, feature, cut, splits, was_split, in_node, goes_left, new_lo, new_hi,
                         can_new & splits, d_log_prior, log_q, any_move, kid_rows)


def _local_step(state, move, node, feature, cut, counts, log_p, any_move, u_accept, data, config):
    """Grow at a leaf, prune a nog, or change the rule of a nog, touching only ``node`` and its
    two children.

    Every quantity of the MH ratio is the current one plus a local change
    (:func:`_propose_local`): the likelihood by the likelihood's ``split_gain`` of the old and the
    new split of ``node`` (both measured from the tree with ``node`` a leaf), the prior by the
    factors of ``node`` and its children, and the move counts by the targets that can appear or
    disappear (``node``, its children, its parent).  The state is then updated in place, gated by
    the acceptance (:func:`apply_local`).
    """
    prop = _propose_local(state, move, node, feature, cut, counts, log_p, any_move, data, config)
    tree = state.tree
    n_nodes = tree.is_split.shape[-1]
    left_child = 2 * node + 1
    start = (jnp.minimum(left_child, n_nodes - 2), 0)
    stats_left = (prop.in_node & prop.goes_left).astype(data.point_stats.dtype) @ data.point_stats
    old_stats = jax.lax.dynamic_slice(state.stats, start, (2, state.stats.shape[1]))

    # likelihood: split gains of the old (if any) and the new (if any) split, from ``node`` a leaf
    is_leaf = leaf_nodes(tree)
    idx = jnp.arange(n_nodes)
    as_leaf = jnp.where(prop.was_split, (is_leaf & (((idx - left_child) >> 1) != 0)) | (idx == node), is_leaf)
    gains = data.likelihood.split_gain(state.stats, as_leaf, node, jnp.stack([old_stats[0], stats_left]))
    d_log_lik = jnp.where(prop.splits, gains[1], 0.0) - jnp.where(prop.was_split, gains[0], 0.0)
    log_ratio = mh_log_ratio(state.beta * d_log_lik, prop.d_log_prior, prop.log_q_ratio)
    accepted = any_move & (jnp.log(u_accept) < log_ratio)

    new_tree, leaf_id, lo, hi = apply_local(state, prop, accepted)
    new_stats = jnp.stack([stats_left, state.stats[node] - stats_left])
    stats = jax.lax.dynamic_update_slice(
        state.stats, jnp.where(accepted, jnp.where(prop.splits, new_stats, 0), old_stats), start)
    new_state = CGMState(
        new_tree, leaf_id, stats, lo, hi,
        state.log_lik + jnp.where(accepted, d_log_lik, 0.0),
        state.log_prior + jnp.where(accepted, prop.d_log_prior, 0.0),
        state.beta,
    )
    info = CGMInfo(jnp.where(any_move, move, -1), accepted, jnp.where(any_move, log_ratio, -jnp.inf))
    return new_state, info


def apply_local(state: CGMState, prop: LocalProposal, accepted: Array) -> tuple[Tree, Array, Array, Array]:
    """The tree, rows' leaves and bounds (``lo``, ``hi``) after ``prop`` if ``accepted`` (else the
    current ones), written in place at ``prop.node`` and its children."""
    tree = state.tree
    node, splits = prop.node, prop.splits
    n_nodes = tree.is_split.shape[-1]
    left_child = 2 * node + 1
    start = (jnp.minimum(left_child, n_nodes - 2), 0)
    n_features = state.lo.shape[1]
    child_value = lambda new, old: jnp.where(accepted, jnp.where(splits, new, 0), old)  # noqa: E731
    at_node = lambda a, v: a.at[node].set(jnp.where(accepted, v, a[node]))  # noqa: E731
    new_tree = Tree(
        at_node(tree.is_split, splits),
        at_node(tree.feature, jnp.where(splits, prop.feature, 0).astype(tree.feature.dtype)),
        at_node(tree.cut, jnp.where(splits, prop.cut, 0).astype(tree.cut.dtype)),
    )
    new_id = jnp.where(splits, jnp.where(prop.goes_left, left_child, left_child + 1), node)
    leaf_id = jnp.where(accepted & prop.in_node, new_id, state.leaf_id).astype(state.leaf_id.dtype)
    put = lambda a, v: jax.lax.dynamic_update_slice(a, v, start)  # noqa: E731
    old = lambda a: jax.lax.dynamic_slice(a, start, (2, n_features))  # noqa: E731
    return (new_tree, leaf_id, put(state.lo, child_value(prop.lo, old(state.lo))),
            put(state.hi, child_value(prop.hi, old(state.hi))))


def flip_proposal(uniforms: Array, state: CGMState) -> tuple[Array, Rule, Array]:
    """The flip step's proposal (module docstring) from ``uniforms`` (3,) (node, kind, level):
    ``(node, rule, possible)``, the splitting node, its rule with the missing-value bit flipped or
    one available level but the smallest moved to the other side, and whether a flip is possible
    (the tree splits, and has bits or the node's rule is categorical)."""
    tree = state.tree
    internal = tree.is_split
    node = pick(internal, uniforms[0])
    rule = rule_at(tree, node)
    bits = tree.nan_left is not None
    categorical = jnp.any(rule.levels_left != 0) if rule.levels_left is not None else jnp.bool_(False)
    flip_level = categorical & ((uniforms[1] < 0.5) if bits else True)
    possible = jnp.any(internal) & (flip_level | bits)
    new_rule = rule
    if bits:
        new_rule = new_rule._replace(nan_left=jnp.where(flip_level, rule.nan_left, ~rule.nan_left))
    if rule.levels_left is not None:
        avail = state.levels[node, rule.feature]
        low = avail & (~avail + jnp.uint32(1))
        low = jnp.where(jnp.cumsum(avail != 0) - (avail != 0) > 0, jnp.uint32(0), low)  # the lowest word's only
        eligible = avail & ~low
        bit_index = jnp.arange(32 * eligible.shape[-1])
        on = ((eligible[bit_index // 32] >> (bit_index % 32).astype(jnp.uint32)) & 1) == 1
        chosen = pick(on, uniforms[2])
        flip = jnp.where(jnp.arange(eligible.shape[-1]) == chosen // 32,
                         jnp.uint32(1) << (chosen % 32).astype(jnp.uint32), jnp.uint32(0))
        new_rule = new_rule._replace(levels_left=jnp.where(flip_level, rule.levels_left ^ flip, rule.levels_left))
    return node, new_rule, possible


def _flip_step(uniforms, state: CGMState, data: TreeData, config) -> CGMState:
    """The flip step after each proposal on general data (:func:`flip_proposal`; a flip that
    empties the left set has prior 0 and is rejected).  ``uniforms``: (4,) node, kind, level,
    accept."""
    node, rule, possible = flip_proposal(uniforms, state)
    proposed = score(change_rule(state.tree, node, rule), data, config, state.beta)
    proposed = proposed._replace(leaf_id=proposed.leaf_id.astype(state.leaf_id.dtype))
    log_ratio = mh_log_ratio(state.beta * (proposed.log_lik - state.log_lik), proposed.log_prior - state.log_prior, 0.0)
    accepted = possible & (jnp.log(uniforms[3]) < log_ratio)
    return jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)


def trace(state: CGMState, info: CGMInfo, trace_dtypes=("int32", "int32")) -> dict:
    """What the driver records per iteration (the tree in ``trace_dtypes``).  ``n_leaves`` and
    ``depth`` are derived from the recorded trees by the driver after each block
    (:func:`~bdtree_jax.tree.tree_summaries`), outside the compiled loop."""
    t = state.tree
    return dict(
        tree=t._replace(feature=t.feature.astype(trace_dtypes[0]), cut=t.cut.astype(trace_dtypes[1])),
        log_lik=state.log_lik,
        log_prior=state.log_prior,
        accepted=info.accepted,
        move=info.move,
    )


def build_kernel(config: CGMConfig):
    """``kernel(uniforms, state, data) -> (state, info)`` closed over the static config (the
    uniforms from :func:`draw`)."""

    def kernel(uniforms, state, data):
        return step_with_uniforms(uniforms, state, data, config)

    return kernel


@functools.lru_cache(maxsize=64)
def cgm(config: CGMConfig) -> SamplingAlgorithm:
    """The CGM sampler as a :class:`SamplingAlgorithm` (chains start at the stump).

    Cached per configuration, so equal configurations share compiled programs in the driver.
    """

    def trace_fn(state, info):
        return trace(state, info, config.trace_dtypes)

    def init_fn(key, data):
        return init(key, data, config)

    # one step per loop pass (SamplingAlgorithm.steps_per_pass): two per pass saved 6-10 % of a
    # long run's time but compiled the step three times, 1.2 s more per fit (the README's bcw fit
    # took 5.7-6.1 s against 4.6-4.9 s), which most CGM runs never won back
    return SamplingAlgorithm(init_fn, build_kernel(config), trace_fn,
                             functools.partial(draw, general_rules=config.general_rules))
