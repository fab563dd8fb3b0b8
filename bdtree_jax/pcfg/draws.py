"""What a built :class:`~bdtree_jax.pcfg.grammar.BoxGrammar` answers: exact posterior draws of
whole trees, the MAP tree, the probability of a tree, path sampling and the exact posterior
predictive (:mod:`bdtree_jax.pcfg` describes the method).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from ..tree import MISSING_CODE, Tree, make_tree, n_nodes
from .grammar import BoxGrammar, level_chunks

__all__ = ["sample_trees", "map_tree", "log_prob", "sample_paths", "predictive", "query_codes"]


# ----------------------------------------------------------------------------------------------
# Trees: sampling, MAP, probability


def _device(g: BoxGrammar, mode: str) -> dict:
    """The grammar's arrays the descent programs read (device arrays, cached on the grammar)."""
    cache = g.__dict__.setdefault("_device_cache", {})
    if mode not in cache:
        scores = g.log_q if mode == "sample" else g.log_qmax
        cache[mode] = dict(
            log_leaf=jnp.asarray(np.r_[g.log_leaf, -np.inf].astype(np.float32)), left=jnp.asarray(g.left),
            right=jnp.asarray(g.right), valid=jnp.asarray(g.valid), scores=jnp.asarray(scores),
            cand_feature=jnp.asarray(g.cand_feature), cand_code=jnp.asarray(g.cand_code),
            cand_cut=jnp.asarray(g.cand_cut), log_phi=jnp.float32(g.log_phi_split),
        )
        if g.cand_nan_left is not None:  # categorical features or missing values: the rules' extra fields
            cache[mode]["cand_nan"] = jnp.asarray(g.cand_nan_left)
        if g.cand_levels is not None:
            cache[mode]["cand_levels"] = jnp.asarray(g.cand_levels)
    return cache[mode]


def _logits(arrs, box, remaining, bounded: bool):
    """Log weights (..., 1 + K) of stop and each split of ``box`` (pad ``S`` = none) with
    ``remaining`` more levels allowed (traced int; only used when ``bounded``)."""
    S = arrs["left"].shape[0]
    b = jnp.minimum(box, S - 1)
    stop = arrs["log_leaf"][box]
    scores = arrs["scores"]
    q = scores[jnp.maximum(remaining - 1, 0)] if bounded else scores[0]
    split = jnp.where(arrs["valid"][b], q[arrs["left"][b]] + q[arrs["right"][b]] - arrs["log_phi"], -jnp.inf)
    if bounded:
        split = jnp.where(remaining > 0, split, -jnp.inf)
    return jnp.concatenate([stop[..., None], split], axis=-1)


def _choose(key, logits, mode: str):
    if mode == "sample":
        return jax.random.categorical(key, logits, axis=-1)
    return jnp.argmax(logits, axis=-1)


@functools.partial(jax.jit, static_argnames=("num", "heap_depth", "max_depth", "mode"))
def _descend_program(key, arrs, num: int, heap_depth: int, max_depth, mode: str):
    D = heap_depth
    N = n_nodes(D)
    S = arrs["left"].shape[0]
    is_split = jnp.zeros((num, N), bool)
    feature = jnp.zeros((num, N), jnp.int32)
    cut = jnp.zeros((num, N), jnp.int32)
    box = jnp.full((num, N), S, jnp.int32).at[:, 0].set(0)
    nan_left = jnp.zeros((num, N), bool) if "cand_nan" in arrs else None
    levels = jnp.zeros((num, N, arrs["cand_levels"].shape[1]), jnp.uint32) if "cand_levels" in arrs else None
    truncated = jnp.zeros(num, bool)
    keys = jax.random.split(key, D + 1)
    for d in range(D + 1):
        lo, hi = 2**d - 1, 2 ** (d + 1) - 1
        cur = box[:, lo:hi]
        remaining = (max_depth - d) if max_depth is not None else 1
        logits = _logits(arrs, cur, jnp.int32(remaining), max_depth is not None)
        choice = _choose(keys[d], logits, mode)
        split = (cur < S) & (choice > 0)
        if d == D:
            truncated = split.any(axis=1)
            break
        k = jnp.maximum(choice - 1, 0)
        c = jnp.minimum(cur, S - 1)
        is_split = is_split.at[:, lo:hi].set(split)
        feature = feature.at[:, lo:hi].set(jnp.where(split, arrs["cand_feature"][k], 0))
        cut = cut.at[:, lo:hi].set(jnp.where(split, arrs["cand_cut"][k], 0))
        if nan_left is not None:
            nan_left = nan_left.at[:, lo:hi].set(split & arrs["cand_nan"][k])
        if levels is not None:
            levels = levels.at[:, lo:hi].set(jnp.where(split[..., None], arrs["cand_levels"][k], 0))
        lch = jnp.where(split, arrs["left"][c, k], S)
        rch = jnp.where(split, arrs["right"][c, k], S)
        children = jnp.stack([lch, rch], axis=-1).reshape(num, -1)  # slots 2i+1, 2i+2 are adjacent
        box = box.at[:, 2 * lo + 1 : 2 * hi + 1].set(children)
    return make_tree(is_split, feature, cut, nan_left, levels), box, truncated


def _descend(g: BoxGrammar, key, num: int, mode: str):
    """Top-down draws (``mode="sample"``) or the argmax tree (``"max"``) as heap arrays (numpy).

    Returns the trees (num, N), the box of every slot (num, N; ``S`` for unused slots) and a flag
    (num,) for draws that wanted to split deeper than the heap allows (unbounded depth only)."""
    out = _descend_program(key, _device(g, mode), num, g.heap_depth, g.max_depth, mode)
    trees, box, truncated = jax.tree.map(np.asarray, out)
    return trees, box, truncated


def sample_trees(g: BoxGrammar, key, num_samples: int, *, where: str = ""):
    """``num_samples`` independent exact posterior draws.

    Returns
    -------
    trees : Tree of (num_samples, N) numpy arrays (heap depth :attr:`BoxGrammar.heap_depth`).
    log_lik : (num_samples,) log marginal likelihood of each draw (sum of its leaves' ``log L``).
    n_leaves : (num_samples,) int.
    """
    if num_samples == 0:
        N = n_nodes(g.heap_depth)
        empty = make_tree(np.zeros((0, N), bool), np.zeros((0, N), np.int32), np.zeros((0, N), np.int32),
                          None if g.cand_nan_left is None else np.zeros((0, N), bool),
                          None if g.cand_levels is None else np.zeros((0, N, g.cand_levels.shape[1]), np.uint32))
        return empty, np.zeros(0, np.float32), np.zeros(0, np.int64)
    trees, box, truncated = _descend(g, key, num_samples, "sample")
    if truncated.any():
        raise ValueError(
            f"{where}{truncated.mean():.2%} of the posterior draws are deeper than {g.heap_depth} levels, the "
            "deepest tree that can be stored (the unbounded prior puts real mass on deep trees). Either pass "
            "num_samples=0: the exact MAP tree, predictive, log_prob and path sampling need no draws; or pass "
            "max_depth= (it conditions the prior on depth <= max_depth)."
        )
    return (trees, *_leaf_summary(g, trees, box))


def _leaf_summary(g: BoxGrammar, trees: Tree, box: np.ndarray):
    is_leaf = (box < g.n_boxes) & ~trees.is_split
    log_lik = np.where(is_leaf, g.log_leaf[np.minimum(box, g.n_boxes - 1)], 0.0).sum(axis=1)
    return log_lik, is_leaf.sum(axis=1)


def map_tree(g: BoxGrammar) -> Tree:
    """The maximum a posteriori tree (Q_max descent; ties to the first production)."""
    trees, _, truncated = _descend(g, jax.random.key(0), 1, "max")
    if truncated.any():
        raise ValueError(f"the MAP tree is deeper than {g.heap_depth} levels; pass max_depth= to bound it.")
    return jax.tree.map(lambda a: a[0], trees)


def log_prob(g: BoxGrammar, tree: Tree, bins: np.ndarray, point_stats: np.ndarray) -> float:
    """Exact ``log Pr[T | X, Y]`` of one tree.

    ``tree`` uses raw cuts (a row goes left iff ``bins[:, feature] <= cut``), ``bins`` (n, F) and
    ``point_stats`` (n, P) are the training rows the grammar was built from.  Trees that break the
    Tree Constraints (a node without rows) or the depth bound have probability 0 (``-inf``).  Trees
    that differ only in which threshold or feature produces the same split of the rows are the
    same tree and get the same value.  Paper eq. 25: ``φ^(1-b) Π L(leaves) / Q(root)``.

    A grammar of data with categorical features or missing values (:mod:`~bdtree_jax.pcfg.mixed`)
    takes a :class:`~bdtree_jax.tree.MixedTree` on the grid's bins (level indices, ``MISSING_CODE``):
    each split's bit adds ``log 1/2``, and a rule that leaves the node's rows with a value of its
    feature all on one side (a split on missingness alone) has probability 0.
    """
    mixed = g.cand_nan_left is not None
    is_split, feature, cut = (np.asarray(a) for a in tree[:3])
    if mixed and tree.nan_left is None and is_split.any():
        raise ValueError("this grammar's trees have missing-value bits (nan_left): pass a MixedTree.")
    N = is_split.shape[-1]
    bins, point_stats = np.asarray(bins), np.asarray(point_stats, np.float32)
    stack = [(0, 0, np.arange(bins.shape[0]))]
    leaf_stats = []
    while stack:
        i, depth, rows = stack.pop()
        if len(rows) == 0:
            return -math.inf
        if i < N and is_split[i]:
            if g.max_depth is not None and depth >= g.max_depth:
                return -math.inf
            code = bins[rows, int(feature[i])]
            if mixed:
                go_left, present = _mixed_left(g, tree, i, code)
                if go_left[present].all() or not go_left[present].any():
                    return -math.inf
            else:
                go_left = code <= int(cut[i])
            stack.append((2 * i + 1, depth + 1, rows[go_left]))
            stack.append((2 * i + 2, depth + 1, rows[~go_left]))
        else:
            leaf_stats.append(point_stats[rows].sum(axis=0))
    log_lik = float(np.sum(np.asarray(g.likelihood.leaf_log_lik(jnp.asarray(np.array(leaf_stats))))))
    return (1 - len(leaf_stats)) * g.log_phi_split + log_lik - float(g.log_q[-1, 0])


def _mixed_left(g: BoxGrammar, tree, i: int, code: np.ndarray):
    """Rows (their codes of node ``i``'s feature) going left at node ``i`` of a MixedTree, and
    which of them have a value (docs/categorical-missing.md)."""
    present = code != MISSING_CODE
    f = int(np.asarray(tree.feature)[i])
    if g.categorical[f]:
        if tree.levels_left is None:
            raise ValueError(f"feature {f} is categorical: the tree needs levels_left.")
        words = np.asarray(tree.levels_left)[i].astype(np.int64)
        c = np.where(present, code, 0)
        left = ((words[np.minimum(c >> 5, len(words) - 1)] >> (c & 31)) & 1) == 1
    else:
        left = code <= int(np.asarray(tree.cut)[i])
    return np.where(present, left, bool(np.asarray(tree.nan_left)[i])), present


# ----------------------------------------------------------------------------------------------
# Queries: path sampling (Algorithms 1 and 2) and the exact posterior predictive


def _goes_left(g: BoxGrammar, q_codes: np.ndarray) -> np.ndarray:
    """(nq, K) bool: query goes left at each candidate (with categorical features and missing
    values: the candidate's level set and missing-value bit, as :func:`~bdtree_jax.tree.goes_left`)."""
    col = q_codes[:, g.cand_feature]
    left = col <= g.cand_code[None, :]
    if g.cand_nan_left is None:
        return left
    missing = col == MISSING_CODE
    if g.cand_levels is not None:
        c = np.where(missing, 0, col).astype(np.int64)
        word = np.minimum(c >> 5, g.cand_levels.shape[1] - 1)
        bits = g.cand_levels.astype(np.int64)[np.arange(len(g.cand_feature))[None, :], word]
        left = np.where(g.categorical[g.cand_feature][None, :], ((bits >> (c & 31)) & 1) == 1, left)
    return np.where(missing, g.cand_nan_left[None, :], left)


def query_codes(g: BoxGrammar, bins: np.ndarray) -> np.ndarray:
    """The grammar's codes (n, F) of rows given by their grid bins
    (:meth:`~bdtree_jax.data.SplitGrid.bin`): an ordered feature's code is the number of its
    code boundaries (raw cuts) below the bin, so ``code <= t`` iff ``bin <= cand_cut``; a
    categorical feature's code is its level index and a missing value keeps
    :data:`~bdtree_jax.tree.MISSING_CODE`."""
    bins = np.asarray(bins)
    out = []
    for f in range(g.n_features):
        cuts = g.cand_cut[g.cand_feature == f]
        if g.cand_nan_left is None:
            out.append(np.searchsorted(cuts, bins[:, f], side="left"))
        elif g.categorical[f]:
            out.append(bins[:, f])
        else:
            out.append(np.where(bins[:, f] == MISSING_CODE, MISSING_CODE,
                                np.searchsorted(np.unique(cuts), bins[:, f], side="left")))
    return np.stack(out, axis=1).astype(np.int32)


@functools.partial(jax.jit, static_argnames=("num", "depth", "max_depth", "mode"))
def _paths_program(key, arrs, left_q, num: int, depth: int, max_depth, mode: str):
    S = arrs["left"].shape[0]
    nq = left_q.shape[0]
    box = jnp.zeros((num, nq), jnp.int32)
    done = jnp.zeros((num, nq), bool)
    for d, k_d in enumerate(jax.random.split(key, depth + 1)):
        remaining = (max_depth - d) if max_depth is not None else 1
        choice = _choose(k_d, _logits(arrs, box, jnp.int32(remaining), max_depth is not None), mode)
        stop = done | (choice == 0)
        k = jnp.maximum(choice - 1, 0)
        b = jnp.minimum(box, S - 1)
        go_left = jnp.take_along_axis(jnp.broadcast_to(left_q, (num, nq, left_q.shape[1])), k[..., None], -1)[..., 0]
        nxt = jnp.where(go_left, arrs["left"][b, k], arrs["right"][b, k])
        box = jnp.where(stop, box, nxt)
        done = stop
    return box


def sample_paths(g: BoxGrammar, key, q_codes: np.ndarray, num: int, mode: str = "sample") -> np.ndarray:
    """Leaf box reached by each query along ``num`` independently sampled paths (the paper's
    Algorithm 1: only the productions on the query's path are drawn), or along the MAP tree's path
    (``mode="max"``, Algorithm 2).  ``q_codes`` (nq, F) codes of the queries.  Returns (num, nq)
    box indices; ``g.likelihood.leaf_mean(g.stats[box])`` is the leaf's answer."""
    left_q = jnp.asarray(_goes_left(g, np.asarray(q_codes)))
    depth = g.max_depth if g.max_depth is not None else g.height
    return np.asarray(_paths_program(key, _device(g, mode), left_q, num, depth, g.max_depth, mode))


def predictive(g: BoxGrammar, q_codes: np.ndarray) -> np.ndarray:
    """Exact posterior predictive over all trees: ``E[leaf_mean(leaf of q)]`` for each query,
    (nq, P) (class probabilities, or the regression mean).  A DP over the boxes (the expectation
    of Algorithm 1's answer): ``r(N) = Pr[stop] m(N) + Σ_s Pr[s] r(child of N containing q)``."""
    q_codes = np.asarray(q_codes)
    left_q = jnp.asarray(_goes_left(g, q_codes))  # (nq, K)
    m = jnp.asarray(g.likelihood.leaf_mean(jnp.asarray(g.stats)))  # (S, P)
    S = g.n_boxes
    left, right, valid = (jnp.asarray(a) for a in (g.left, g.right, g.valid))
    log_leaf = jnp.asarray(g.log_leaf)
    if g.max_depth is None:
        chunks = jnp.asarray(level_chunks(g.width, 256 if S > 4096 else 32))
        r = _predictive_in_order(log_leaf, left, right, valid, jnp.asarray(g.log_q[0]), m, left_q,
                                 jnp.float32(g.log_phi_split), chunks)
        return np.asarray(r[0])
    r = None
    for layer in range(g.max_depth + 1):
        r = _predictive_layer(log_leaf, left, right, valid, jnp.asarray(g.log_q[max(layer - 1, 0)]),
                              jnp.asarray(g.log_q[layer]), m, left_q, jnp.float32(g.log_phi_split), r,
                              first=layer == 0)
    return np.asarray(r[0])


def _expected_value(idx_c, log_leaf, left, right, valid, q_child, q_self, m, left_q, log_phi, r):
    """r (chunk, nq, P) for boxes ``idx_c`` given children's r (S + 1, nq, P)."""
    p_stop = jnp.exp(log_leaf[idx_c] - q_self[idx_c])  # (c,)
    lp = jnp.where(valid[idx_c], q_child[left[idx_c]] + q_child[right[idx_c]] - log_phi - q_self[idx_c][:, None], -jnp.inf)
    p_split = jnp.exp(lp)  # (c, K)
    child = jnp.where(left_q[None, :, :], left[idx_c][:, None, :], right[idx_c][:, None, :])  # (c, nq, K)
    rc = r[child, jnp.arange(left_q.shape[0])[None, :, None]]  # (c, nq, K, P)
    return p_stop[:, None, None] * m[idx_c][:, None, :] + jnp.einsum("ck,cqkp->cqp", p_split, rc)


@jax.jit
def _predictive_in_order(log_leaf, left, right, valid, log_q, m, left_q, log_phi, chunks):
    S = log_leaf.shape[0]
    nq, P = left_q.shape[0], m.shape[1]
    r0 = jnp.zeros((S + 1, nq, P), jnp.float32)

    def body(c, r):
        idx = chunks[c]
        idx_c = jnp.minimum(idx, S - 1)
        new = _expected_value(idx_c, log_leaf, left, right, valid, log_q, log_q, m, left_q, log_phi, r)
        new = jnp.where((idx < S)[:, None, None], new, 0.0)
        return r.at[idx].set(new)

    return jax.lax.fori_loop(0, chunks.shape[0], body, r0)


@functools.partial(jax.jit, static_argnames=("first",))
def _predictive_layer(log_leaf, left, right, valid, q_child, q_self, m, left_q, log_phi, r_prev, first: bool):
    S = log_leaf.shape[0]
    nq, P = left_q.shape[0], m.shape[1]
    if first:
        r = jnp.broadcast_to(m[:, None, :], (S, nq, P))
    else:
        r = _expected_value(jnp.arange(S), log_leaf, left, right, valid, q_child, q_self, m, left_q, log_phi, r_prev)
    return jnp.concatenate([r, jnp.zeros((1, nq, P), r.dtype)])
