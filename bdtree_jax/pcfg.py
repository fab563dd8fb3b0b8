"""BCART-PCFG: the exact posterior over trees by dynamic programming over bounding boxes.

Sullivan, Tiwari, Thrun & Piech (2023).  The tree prior is ``Pr[T | X] ∝ φ^(-b(T))`` (``b`` leaves)
over every tree that satisfies the paper's *Tree Constraints*: every node holds at least one
training row, and splits of a node that give the same two sets of rows are one split (whatever
feature or threshold produces them).  With a leaf-factorised marginal likelihood ``L`` the score
of a box ``N`` (a set of rows)::

    Q(N) = L(N) + (1/φ) Σ_{s ∈ S(N)} Q(N ∩ s) Q(N ∩ s̄)

sums ``φ^(1-b) Π L(leaves)`` over every subtree rooted at ``N``, and drawing productions top-down
with probabilities ``L(N)/Q(N)`` (stop) and ``Q(N∩s)Q(N∩s̄)/(φ Q(N))`` (split ``s``) samples trees
exactly from the posterior (paper eqs. 13-16, Theorem 5.1).  ``Q_max`` (max instead of sum) gives
the MAP tree.  Everything is in log space.

How it is computed
------------------
* **Codes.**  Each feature is coded by the rank of its (optionally bucketed, ``n_buckets``)
  value.  Candidate split ``k`` is "code of feature ``f_k`` ``<= t_k``"; there are
  ``K = Σ_f (B_f - 1)`` of them.  A row is stored as a *thermometer* bit vector: bit ``k`` is 1
  when the row goes right at candidate ``k``.
* **Boxes are sets of rows**, identified by their tight bounding box (the code range of their
  rows in every feature): two boxes with the same rows have the same key.  In thermometer form
  the tight box is the pair (bitwise AND, bitwise OR) over the rows, and candidate ``k`` splits a
  box into two non-empty boxes iff its code threshold lies inside the box's range.
* **Enumeration** (:func:`build_grammar`): breadth first from the root, a jitted, fixed-shape JAX
  program computes the tight boxes of both children of every (box, candidate) of a chunk of boxes
  (per feature, running AND / OR over the rows in sorted order give all its thresholds' children
  at once); the packed keys are merged into a sorted table on the host.  This is
  the memoised recursion keyed on the set of rows of a box, done a level at a time; its size is
  checked against ``max_boxes`` and the memory budget ``max_bytes`` before every level (a clear
  error, never an out-of-memory crash).
* **Duplicate splits** (same two row sets from different candidates) are removed per box, keeping
  the first candidate in (feature, threshold) order as the split's representative.
* **The DP** (:func:`_scores`) is a jitted JAX program over chunks of boxes.  Without a depth bound
  a child is strictly narrower than its parent (the width ``popcount(OR) - popcount(AND)`` drops),
  so one pass over boxes in order of width computes ``Q`` exactly.  With ``max_depth = D`` the
  score depends on the remaining depth and ``D + 1`` layers ``Q_r`` are computed
  (``Q_0 = L``; ``Q_r`` from ``Q_{r-1}``).  This is the prior ``φ^(-b(T))`` restricted to trees of
  depth at most ``D`` (renormalised over those trees): exactly the same posterior conditioned on
  ``depth(T) <= D``.

What you get
------------
:class:`BoxGrammar` holds the boxes, their splits and scores; :func:`sample_trees` draws whole trees
(padded heap :class:`~bdtree_jax.tree.Tree`, the library's format), :func:`map_tree` gives the
MAP tree, :func:`log_prob` the exact posterior probability of any tree, :func:`predictive` the exact
posterior predictive (average over *all* trees) by a second DP, :func:`sample_paths` the paper's
Algorithm 1 (only the path a query follows) and, with ``mode="max"``, Algorithm 2.  The
estimators' ``method="pcfg"`` wraps all of it in a :class:`PCFGPosterior`.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from .tree import Tree, n_nodes

__all__ = [
    "BoxGrammar",
    "code_features",
    "build_grammar",
    "sample_trees",
    "map_tree",
    "log_prob",
    "predictive",
    "sample_paths",
    "estimate_boxes",
]

_MAX_HEAP_DEPTH = 10  # heap depth used for draws when max_depth is None (2047 slots)


# ----------------------------------------------------------------------------------------------
# Codes


def code_features(X: np.ndarray, n_buckets=None) -> tuple[np.ndarray, list[np.ndarray]]:
    """Integer codes of every feature and, per feature, the raw cut index of each code boundary.

    Parameters
    ----------
    X : (n, F) float array of training inputs.
    n_buckets : None, int or sequence of F ints.  A feature with more distinct values than its
        bucket count is cut into that many equal-width buckets between its smallest and largest
        training value (buckets without rows are dropped, so gaps in the data stay gaps); others
        keep one code per distinct value.  ``None``: no bucketing.

    Returns
    -------
    codes : (n, F) int32, ``0 .. B_f - 1`` per feature, increasing with the value.
    boundary_cut : list of F arrays of length ``B_f - 1``: the split "code ``<= t``" equals the
        split ``x_f <= thresholds[f, boundary_cut[f][t]]`` of :func:`bdtree_jax.data.make_split_grid`
        on the same ``X`` (the midpoint between the last value of bucket ``t`` and the first of
        bucket ``t + 1``).
    """
    X = np.asarray(X, float)
    n, F = X.shape
    if n_buckets is None or np.isscalar(n_buckets):
        buckets = [n_buckets] * F
    else:
        buckets = list(n_buckets)
    codes = np.empty((n, F), np.int32)
    boundary_cut = []
    for f in range(F):
        u, rank = np.unique(X[:, f], return_inverse=True)
        b = buckets[f]
        if b is not None and len(u) > b:
            edges = np.linspace(u[0], u[-1], b + 1)[1:-1]
            raw = np.searchsorted(edges, X[:, f], side="right")
            _, code = np.unique(raw, return_inverse=True)
        else:
            code = rank
        code = code.astype(np.int32).ravel()
        codes[:, f] = code
        n_codes = int(code.max()) + 1
        # largest raw rank inside each code = the raw cut between this code and the next
        last_rank = np.full(n_codes, -1)
        np.maximum.at(last_rank, code, rank.ravel())
        boundary_cut.append(last_rank[:-1].astype(np.int32))
    return codes, boundary_cut


# ----------------------------------------------------------------------------------------------
# The grammar


@dataclass(frozen=True, eq=False)
class BoxGrammar:
    """Boxes (distinct row sets reachable by splits), their splits and scores.

    ``S`` boxes (box 0 is the root), ``K`` split candidates, ``P`` statistics per row.

    Attributes
    ----------
    lo, hi : (S, F) int32 tight code range of each box in every feature (its bounding box).
    depth : (S,) int32 smallest depth at which the box occurs in some tree.
    stats : (S, P) float32 summed row statistics (class counts, or ``[n, Σy, Σy²]``).
    log_leaf : (S,) float32 ``log L(N)``.
    left, right : (S, K) int32 child boxes of each candidate (``S`` where not a split).
    valid : (S, K) bool candidate is a split of the box (both sides non-empty, first of its
        duplicates).
    cand_feature, cand_code, cand_cut : (K,) int32 feature, code threshold and raw cut of each
        candidate (left child: ``code <= cand_code``, i.e. ``bin <= cand_cut``).
    log_q, log_qmax : (R, S + 1) float32 scores ``log Q`` / ``log Q_max`` (slot ``S`` is a
        ``-inf`` pad).  ``R = max_depth + 1`` layers (layer ``r``: at most ``r`` more levels) when
        the depth is bounded, otherwise ``R = 1``.
    log_phi : float; max_depth : int or None; height : int, the deepest tree the boxes allow.
    width : (S,) int64 ``Σ_f (hi_f - lo_f)``; a child is strictly narrower than its parent.
    log_prior_q : (S + 1,) ``log Q`` with ``L = 1``: the prior's mass (root entry, times φ).
    """

    lo: np.ndarray
    hi: np.ndarray
    depth: np.ndarray
    stats: np.ndarray
    log_leaf: np.ndarray
    left: np.ndarray
    right: np.ndarray
    valid: np.ndarray
    cand_feature: np.ndarray
    cand_code: np.ndarray
    cand_cut: np.ndarray
    log_q: np.ndarray
    log_qmax: np.ndarray
    log_phi: float
    max_depth: int | None
    height: int
    likelihood: object
    n_features: int
    width: np.ndarray
    log_prior_q: np.ndarray

    @property
    def n_boxes(self) -> int:
        return self.lo.shape[0]

    @property
    def n_candidates(self) -> int:
        return self.cand_feature.shape[0]

    @property
    def log_z(self) -> float:
        """``log Σ_T φ^(-b(T)) Π L(leaves)`` over the allowed trees (the unnormalised posterior's
        total mass; ``log Q(root) - log φ``)."""
        return float(self.log_q[-1, 0]) - self.log_phi

    @property
    def log_evidence(self) -> float:
        """``log p(Y | X) = log Z - log Z_prior``: the posterior's total mass over the prior's."""
        return self.log_z - (float(self.log_prior_q[0]) - self.log_phi)

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_device_cache"}

    def __setstate__(self, state):
        self.__dict__.update(state)

    @property
    def heap_depth(self) -> int:
        """Depth of the padded heap the draws are stored in."""
        if self.max_depth is not None:
            return int(min(self.max_depth, self.height))
        return int(min(self.height, _MAX_HEAP_DEPTH))

    def layer(self, remaining: int) -> int:
        """Score layer for a node with ``remaining`` more levels allowed."""
        return remaining if self.max_depth is not None else 0


def _thermometer(codes: np.ndarray):
    """Thermometer bits of every row: (n, W) uint32, and the candidates' feature and code."""
    n, F = codes.shape
    n_codes = codes.max(axis=0) + 1
    cand_feature = np.concatenate([np.full(b - 1, f, np.int32) for f, b in enumerate(n_codes)] + [np.zeros(0, np.int32)])
    cand_code = np.concatenate([np.arange(b - 1, dtype=np.int32) for b in n_codes] + [np.zeros(0, np.int32)])
    K = len(cand_feature)
    W = max(1, -(-K // 32))
    bits = codes[:, cand_feature] > cand_code[None, :]  # (n, K) 1 = goes right
    words = np.zeros((n, W), np.uint64)
    for k in range(K):
        words[:, k // 32] |= bits[:, k].astype(np.uint64) << np.uint64(k % 32)
    return words.astype(np.uint32), cand_feature, cand_code


def _pack(lo, hi, fields, n_words: int):
    """Pack code ranges ``lo, hi`` (..., F) into (..., n_words) uint32 words (jnp or np)."""
    xp = jnp if isinstance(lo, jax.Array) else np
    out = [xp.zeros(lo.shape[:-1], xp.uint32) for _ in range(n_words)]
    for i, (w, shift, _) in enumerate(fields):
        v = (lo if i % 2 == 0 else hi)[..., i // 2].astype(xp.uint32)
        out[w] = out[w] | (v << xp.uint32(shift))
    return xp.stack(out, axis=-1)


class _Layout:
    """Static layout of the enumeration: rows sorted per feature, candidate positions, and how a
    box's code range ``(lo_f, hi_f)`` is packed into ``n_words`` uint32 words (fields never cross
    a word; with at most two words the host uses one exact uint64 key)."""

    def __init__(self, codes: np.ndarray):
        self.codes = codes
        n, F = codes.shape
        self.therm, self.cand_feature, self.cand_code = _thermometer(codes)
        self.K, self.W = len(self.cand_feature), self.therm.shape[1]
        n_codes = codes.max(axis=0) + 1
        self.order = [np.argsort(codes[:, f], kind="stable") for f in range(F)]
        # position (in feature f's sorted order) of the last row with code <= t
        self.pos = np.array([np.searchsorted(codes[self.order[f], f], t, side="right") - 1
                             for f, t in zip(self.cand_feature, self.cand_code)], np.int32)
        # bit masks of each feature's thermometer bits, (F, W)
        self.fmask = np.zeros((F, self.W), np.uint64)
        for k, f in enumerate(self.cand_feature):
            self.fmask[f, k // 32] |= np.uint64(1) << np.uint64(k % 32)
        self.fmask = self.fmask.astype(np.uint32)
        widths = [max(1, int(np.ceil(np.log2(b)))) if b > 1 else 1 for b in n_codes]
        fields, word, used = [], 0, 0
        for f in range(F):
            for part in range(2):  # lo then hi
                if used + widths[f] > 32:
                    word, used = word + 1, 0
                fields.append((word, used, widths[f]))
                used += widths[f]
        self.fields = tuple(fields)  # 2F entries: (word, shift, bits) for lo_0, hi_0, lo_1, ...
        self.n_words = word + 1
        # what the compiled scans depend on besides array shapes (so folds of the same data share
        # one executable), and the arrays they read
        self.static = (tuple(int((self.cand_feature == f).sum()) for f in range(F)), self.fields, self.n_words)
        self.arrays = dict(
            codes=jnp.asarray(codes), therm=jnp.asarray(self.therm), fmask=jnp.asarray(self.fmask),
            order=jnp.asarray(np.array(self.order, np.int32).reshape(F, n)), pos=jnp.asarray(self.pos),
        )

    def pack(self, lo, hi):
        """Pack code ranges (..., F) into (..., n_words) uint32 (jnp or np)."""
        return _pack(lo, hi, self.fields, self.n_words)

    def unpack(self, words: np.ndarray):
        """Inverse of :meth:`pack` on the host: ``(lo, hi)`` (S, F) int32."""
        F = self.codes.shape[1]
        lo = np.zeros((words.shape[0], F), np.int32)
        hi = np.zeros((words.shape[0], F), np.int32)
        for i, (w, shift, bits) in enumerate(self.fields):
            v = (words[:, w] >> np.uint32(shift)) & np.uint32((1 << bits) - 1)
            (lo if i % 2 == 0 else hi)[:, i // 2] = v
        return lo, hi

    def host_key(self, words: np.ndarray) -> np.ndarray:
        """Exact sortable key per row: uint64 for one or two words, else a void view."""
        words = np.ascontiguousarray(words, np.uint32)
        if self.n_words == 1:
            return words[..., 0].astype(np.uint64)
        if self.n_words == 2:
            return (words[..., 0].astype(np.uint64) << np.uint64(32)) | words[..., 1].astype(np.uint64)
        return words.view(np.dtype((np.void, 4 * self.n_words))).reshape(words.shape[:-1])


def _range_reduce(x: np.ndarray, axis: int, op) -> np.ndarray:
    """Replace an axis of length B by its B(B+1)/2 ranges ``[a, b]`` (triangular order), each holding
    ``op`` over the range."""
    B = x.shape[axis]
    parts = [op.accumulate(np.take(x, np.arange(a, B), axis=axis), axis=axis) for a in range(B)]
    return np.concatenate(parts, axis=axis)


def _range_index(a, b, B):
    """Triangular index of range ``[a, b]`` among ``B`` codes (matches :func:`_range_reduce`)."""
    return a * B - a * (a - 1) // 2 + (b - a)


class _GridTables:
    """Tight boxes of every box of the code grid: for small grids, a child's tight box is one
    lookup.  ``table[(range index of every feature)] = (lo_0, hi_0, lo_1, hi_1, ...)`` of the rows
    inside (``lo > hi`` when empty)."""

    def __init__(self, codes: np.ndarray, n_codes: np.ndarray):
        F = codes.shape[1]
        dtype = np.int8 if n_codes.max() < 127 else np.int16
        empty = np.iinfo(dtype).max
        occupied = np.zeros(tuple(n_codes), bool)
        occupied[tuple(codes.T)] = True
        self.n_codes = n_codes
        # last axis: (lo_0, -hi_0, lo_1, -hi_1, ...): one minimum over ranges gives both
        x = np.empty(tuple(n_codes) + (2 * F,), dtype)
        for g in range(F):
            coord = np.arange(n_codes[g]).reshape([-1 if f == g else 1 for f in range(F)])
            x[..., 2 * g] = np.where(occupied, coord, empty)
            x[..., 2 * g + 1] = np.where(occupied, -coord, empty)
        for f in range(F):
            x = _range_reduce(x, f, np.minimum)
        self.table = x.reshape(-1, 2 * F)  # (G, 2F)
        sizes = n_codes * (n_codes + 1) // 2
        self.strides = np.array([int(np.prod(sizes[f + 1:])) for f in range(F)], np.int64)

    @staticmethod
    def size(n_codes: np.ndarray) -> float:
        """Bytes of the table for these code counts."""
        return float(np.prod(n_codes * (n_codes + 1) / 2.0)) * 2 * len(n_codes)

    def tight(self, lo: np.ndarray, hi: np.ndarray):
        """Tight ``(lo, hi)`` of the rows in boxes ``[lo, hi]`` (..., F)."""
        idx = (_range_index(lo.astype(np.int64), hi.astype(np.int64), self.n_codes) * self.strides).sum(-1)
        t = self.table[idx].astype(np.int32)
        return t[..., 0::2], -t[..., 1::2]


def _members(codes, lo, hi):
    """Rows inside the box ``[lo, hi]`` (F,) each: (n,) bool."""
    return jnp.all((codes >= lo) & (codes <= hi), axis=1)


def _scan(op, x, reverse):
    return jax.lax.associative_scan(op, x, reverse=reverse, axis=0)


@functools.partial(jax.jit, static_argnames=("static",))
def _expand(lo, hi, arrays, static):
    """Packed keys of both children of every candidate for a chunk of boxes ``lo, hi`` (m, F):
    (m, K, 2, n_words) uint32.  Per feature, the rows are scanned in sorted order with running
    bitwise AND / OR of their thermometer words (prefix: left children; suffix: right children).
    ``arrays`` and ``static`` come from :class:`_Layout`."""
    per_feature, fields, n_words = static
    codes, therm, fmask = arrays["codes"], arrays["therm"], arrays["fmask"]
    ones, zero = jnp.uint32(0xFFFFFFFF), jnp.uint32(0)

    def one_box(lo_b, hi_b):
        member = _members(codes, lo_b, hi_b)
        sides, offset = [], 0
        for f, k_f in enumerate(per_feature):
            if k_f == 0:
                continue
            o = arrays["order"][f]
            m, t = member[o][:, None], therm[o]
            a_in, o_in = jnp.where(m, t, ones), jnp.where(m, t, zero)
            pos = arrays["pos"][offset : offset + k_f]
            offset += k_f
            left = (_scan(jnp.bitwise_and, a_in, False)[pos], _scan(jnp.bitwise_or, o_in, False)[pos])
            right = (_scan(jnp.bitwise_and, a_in, True)[pos + 1], _scan(jnp.bitwise_or, o_in, True)[pos + 1])
            sides.append(jnp.stack([jnp.stack(left, 1), jnp.stack(right, 1)], 1))  # (K_f, 2, 2, W)
        words = jnp.concatenate(sides)  # (K, 2 sides, AND/OR, W)
        counts = jax.lax.population_count(words[..., None, :] & fmask).sum(-1).astype(jnp.int32)  # (K, 2, 2, F)
        return _pack(counts[:, :, 0], counts[:, :, 1], fields, n_words)

    return jax.vmap(one_box)(lo, hi)


@jax.jit
def _box_stats(lo, hi, codes, point_stats):
    """Summed row statistics of a chunk of boxes: (m, P)."""
    return jax.vmap(lambda a, b: _members(codes, a, b).astype(point_stats.dtype) @ point_stats)(lo, hi)


def _padded(fn, arrays, size: int):
    """``fn(*chunks)`` (jitted) over the leading axis of ``arrays`` in fixed-size chunks, one
    compile: the posterior's :func:`~bdtree_jax.posterior._over_draws` over row indices."""
    from .posterior import _over_draws

    n = arrays[0].shape[0]
    return _over_draws(lambda _, chunk: fn(*chunk), tuple(arrays), np.arange(n), size)


def estimate_boxes(codes: np.ndarray, max_depth=None) -> float:
    """A quick upper bound on the number of boxes: the number of grid boxes
    ``Π_f B_f (B_f + 1) / 2`` and, with a depth bound, the number of rule sequences
    ``Σ_{d <= D} (2K)^d``."""
    n_codes = codes.max(axis=0) + 1
    grid = float(np.prod(n_codes * (n_codes + 1) / 2.0))
    if max_depth is None:
        return grid
    K = float(np.sum(n_codes - 1))
    return min(grid, sum((2 * K) ** d for d in range(max_depth + 1)))


def build_grammar(
    codes: np.ndarray,
    point_stats: np.ndarray,
    likelihood,
    *,
    log_phi: float = 2.0,
    max_depth: int | None = None,
    boundary_cut=None,
    max_boxes: int | None = None,
    max_bytes: float | None = None,
    grid_bytes: float = 2.0**28,
    where: str = "",
) -> BoxGrammar:
    """Enumerate the boxes of ``codes`` and compute ``log Q`` and ``log Q_max``.

    Parameters
    ----------
    codes : (n, F) int codes (:func:`code_features`).
    point_stats : (n, P) per-row statistics (``likelihood.point_stats(y)``).
    likelihood : a likelihood with ``leaf_log_lik(stats) -> (...)`` (per-leaf marginal).
    log_phi : ``log φ`` (paper: 2).  max_depth : optional depth bound (see the module notes).
    boundary_cut : list of per-feature raw cut indices of each code boundary (default: codes are
        the raw ranks).
    max_boxes : refuse (``ValueError``) when the enumeration would exceed this many boxes
        (default: as many as fit in ``max_bytes``).
    max_bytes : memory the enumeration may use (default: 30 % of the machine's RAM).  Before each
        level is expanded its memory is estimated; a level that would not fit is refused with a
        ``ValueError`` saying how big it is, never an out-of-memory crash.
    grid_bytes : when the table of tight boxes of *every* box of the code grid fits in this many
        bytes (few features: iris, vertebral with 5 buckets), children are found by lookups in it;
        otherwise (e.g. 20 binary features) by the scans of :func:`_expand`.  Same boxes either way.
    """
    codes = np.ascontiguousarray(codes, np.int32)
    n, F = codes.shape
    layout = _Layout(codes)
    K = layout.K
    cand_feature, cand_code = layout.cand_feature, layout.cand_code
    if boundary_cut is None:
        cand_cut = cand_code.copy()
    else:
        cand_cut = np.array([boundary_cut[f][t] for f, t in zip(cand_feature, cand_code)], np.int32)
    # boxes per expansion call: about 2**21 (row, feature, word) cells of scans
    chunk = int(max(8, min(2048, 2 ** int(np.log2(max(1, 2**21 // max(1, n * F * layout.W)))))))

    n_codes = codes.max(axis=0) + 1
    grid = _GridTables(codes, n_codes) if _GridTables.size(n_codes) <= grid_bytes else None
    if max_bytes is None:
        max_bytes = 0.3 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    # per box: left/right/valid (9K), the DP's (box, candidate) temporaries (~12K), lo/hi, stats,
    # score layers and the key table
    # (x3: the measured peak RSS per box was 2.4-2.8x the sum of the arrays)
    per_box = 3 * (21 * K + 8 * F + 4 * point_stats.shape[1] + 8 * ((max_depth or 0) + 1) * 2 + 24)
    if max_boxes is None:
        max_boxes = int(max_bytes // per_box)

    lo_all = [codes.min(axis=0)[None]]
    hi_all = [codes.max(axis=0)[None]]
    depths = [np.zeros(1, np.int32)]
    table = layout.host_key(layout.pack(lo_all[0], hi_all[0]))  # sorted keys
    table_index = np.zeros(1, np.int64)  # box index of each sorted key
    children = []  # (box indices, (m, K, 2) child indices) per level
    frontier = np.zeros(1, np.int64)
    n_boxes, level = 1, 0
    while len(frontier) and K and (max_depth is None or level < max_depth):
        lo_cat, hi_cat = np.concatenate(lo_all), np.concatenate(hi_all)
        flo, fhi = lo_cat[frontier], hi_cat[frontier]
        splits = (flo[:, cand_feature] <= cand_code) & (cand_code < fhi[:, cand_feature])  # (m, K)
        v = int(splits.sum())
        need = n_boxes * per_box + v * (2 * 8 + 4 * 4 * F + 8 * layout.n_words) + splits.size * (8 + 8 * layout.n_words)
        if need > max_bytes:
            raise ValueError(
                f"{where}expanding depth {level + 1} of the tree space needs about {need / 2**30:.1f} GiB "
                f"({n_boxes:,} boxes so far, {v:,} splits to follow; n={n}, {F} features, {K} split candidates), "
                f"over the max_bytes={max_bytes / 2**30:.1f} GiB allowed. Bucket the features (n_buckets=, "
                "e.g. 10 or 5) or bound the depth (max_depth=)."
            )
        if grid is not None:  # one lookup per child
            s_i, k_i = np.nonzero(splits)
            f_i, t_i = cand_feature[k_i], cand_code[k_i]
            llo, lhi = flo[s_i].copy(), fhi[s_i].copy()
            rlo, rhi = flo[s_i].copy(), fhi[s_i].copy()
            rows = np.arange(len(s_i))
            lhi[rows, f_i] = t_i
            rlo[rows, f_i] = t_i + 1
            clo, chi = grid.tight(np.stack([llo, rlo], 1), np.stack([lhi, rhi], 1))  # (v, 2, F)
            split_words = layout.pack(clo, chi)  # (v, 2, Wk)
        else:
            split_words = _padded(lambda a, b: _expand(a, b, layout.arrays, layout.static), (flo, fhi), chunk)[splits]
        cand_keys = layout.host_key(split_words)  # (v, 2)
        new, first = np.unique(cand_keys.ravel(), return_index=True)
        pos = np.searchsorted(table, new)
        known = (pos < len(table)) & (table[np.minimum(pos, len(table) - 1)] == new)
        new, first = new[~known], first[~known]
        if n_boxes + len(new) > max_boxes:
            raise ValueError(
                f"{where}the tree space has more than max_boxes={max_boxes:,} distinct boxes (row sets) "
                f"already at depth {level + 1} (n={n}, {F} features, {K} split candidates; upper bound "
                f"{estimate_boxes(codes, max_depth):.3g}). Bucket the features (n_buckets=, e.g. 10 or 5), "
                f"bound the depth (max_depth=) or raise max_boxes if memory allows (about {per_box} bytes "
                "per box)."
            )
        new_words = split_words.reshape(-1, layout.n_words)[first]
        nlo, nhi = layout.unpack(new_words)
        new_index = np.arange(n_boxes, n_boxes + len(new))
        lo_all.append(nlo)
        hi_all.append(nhi)
        depths.append(np.full(len(new), level + 1, np.int32))
        at = np.searchsorted(table, new)  # new keys are sorted and absent: merge, no re-sort
        table = np.insert(table, at, new)
        table_index = np.insert(table_index, at, new_index)
        idx = np.full((len(frontier), K, 2), -1, np.int32)
        if splits.any():
            idx[splits] = table_index[np.searchsorted(table, cand_keys)]
        children.append((frontier, idx))
        n_boxes += len(new)
        frontier = new_index
        level += 1

    lo, hi = np.concatenate(lo_all), np.concatenate(hi_all)
    depth = np.concatenate(depths)
    S = n_boxes
    left = np.full((S, K), S, np.int32)
    right = np.full((S, K), S, np.int32)
    for boxes, idx in children:
        ok = idx[..., 0] >= 0
        left[boxes] = np.where(ok, idx[..., 0], S)
        right[boxes] = np.where(ok, idx[..., 1], S)
    valid = left < S
    # one split per distinct (unordered) pair of row sets: keep the first candidate
    if valid.any():
        s_idx, k_idx = np.nonzero(valid)
        a = np.minimum(left[s_idx, k_idx], right[s_idx, k_idx])
        b = np.maximum(left[s_idx, k_idx], right[s_idx, k_idx])
        order = np.lexsort((k_idx, b, a, s_idx))
        s_o, a_o, b_o = s_idx[order], a[order], b[order]
        dup = np.zeros(len(order), bool)
        dup[1:] = (s_o[1:] == s_o[:-1]) & (a_o[1:] == a_o[:-1]) & (b_o[1:] == b_o[:-1])
        valid[s_o[dup], k_idx[order][dup]] = False
        left[~valid], right[~valid] = S, S

    stats = _padded(
        lambda a, b: _box_stats(a, b, jnp.asarray(codes), jnp.asarray(point_stats, jnp.float32)), (lo, hi), 4096
    ).astype(np.float32)
    log_leaf = np.asarray(likelihood.leaf_log_lik(jnp.asarray(stats)), np.float32)
    width = (hi - lo).sum(axis=1).astype(np.int64)  # a child is strictly narrower than its parent
    log_q, log_qmax = _scores(log_leaf, left, right, valid, float(log_phi), max_depth, width)
    height = _dag_height(left, valid, right, width)
    log_prior_q = _scores(np.zeros_like(log_leaf), left, right, valid, float(log_phi), max_depth, width)[0][-1]
    return BoxGrammar(
        lo=lo, hi=hi, depth=depth, stats=stats, log_leaf=log_leaf, left=left, right=right, valid=valid,
        cand_feature=cand_feature, cand_code=cand_code, cand_cut=cand_cut, log_q=log_q, log_qmax=log_qmax,
        log_phi=float(log_phi), max_depth=max_depth, height=height, likelihood=likelihood, n_features=F,
        width=width, log_prior_q=log_prior_q,
    )


def _dag_height(left, valid, right, width) -> int:
    """Longest chain of splits from the root (host; boxes processed by increasing width)."""
    S = left.shape[0]
    h = np.zeros(S + 1, np.int64)
    order = np.argsort(width, kind="stable")
    for w in np.unique(width):
        idx = order[width[order] == w]
        sub = np.where(valid[idx], np.maximum(h[left[idx]], h[right[idx]]) + 1, 0)
        h[idx] = sub.max(axis=1) if sub.shape[1] else 0
    return int(h[0])


# ----------------------------------------------------------------------------------------------
# Scores


def _level_chunks(width: np.ndarray, size: int) -> np.ndarray:
    """Box indices in order of width, cut into chunks of ``size`` that never mix widths; padded
    with the pad slot ``S``.  Shape (n_chunks, size)."""
    S = len(width)
    order = np.argsort(width, kind="stable")
    rows = []
    w_sorted = width[order]
    starts = np.flatnonzero(np.r_[True, w_sorted[1:] != w_sorted[:-1]])
    ends = np.r_[starts[1:], S]
    for s, e in zip(starts, ends):
        for c0 in range(s, e, size):
            c1 = min(e, c0 + size)
            row = np.full(size, S, np.int64)
            row[: c1 - c0] = order[c0:c1]
            rows.append(row)
    return np.array(rows, np.int32).reshape(-1, size)


@functools.partial(jax.jit, static_argnames=("use_max",))
def _pass_in_order(log_leaf, left, right, valid, log_phi, chunks, use_max: bool):
    """Unbounded depth: one pass over chunks of boxes in order of width (children first)."""
    S = log_leaf.shape[0]
    q0 = jnp.full(S + 1, -jnp.inf, jnp.float32)

    def body(c, q):
        idx = chunks[c]
        idx_c = jnp.minimum(idx, S - 1)
        pair = jnp.where(valid[idx_c], q[left[idx_c]] + q[right[idx_c]], -jnp.inf)
        split = (jnp.max(pair, axis=1) if use_max else logsumexp(pair, axis=1)) - log_phi
        leaf = log_leaf[idx_c]
        new = jnp.maximum(leaf, split) if use_max else jnp.logaddexp(leaf, split)
        new = jnp.where(idx < S, new, -jnp.inf)
        return q.at[idx].set(new)

    return jax.lax.fori_loop(0, chunks.shape[0], body, q0)


@functools.partial(jax.jit, static_argnames=("n_layers", "use_max"))
def _layers(log_leaf, left, right, valid, log_phi, n_layers: int, use_max: bool):
    """Bounded depth: layers ``Q_0 = L``, ``Q_r`` from ``Q_{r-1}``.  Shape (n_layers, S + 1)."""
    pad = jnp.full(1, -jnp.inf, jnp.float32)
    q = jnp.concatenate([log_leaf, pad])

    def step(q, _):
        pair = jnp.where(valid, q[left] + q[right], -jnp.inf)
        split = (jnp.max(pair, axis=1) if use_max else logsumexp(pair, axis=1)) - log_phi
        new = jnp.maximum(log_leaf, split) if use_max else jnp.logaddexp(log_leaf, split)
        new = jnp.concatenate([new, pad])
        return new, new

    first = q
    _, rest = jax.lax.scan(step, q, None, length=n_layers - 1)
    return jnp.concatenate([first[None], rest])


def _scores(log_leaf, left, right, valid, log_phi, max_depth, width):
    args = (jnp.asarray(log_leaf), jnp.asarray(left), jnp.asarray(right), jnp.asarray(valid), jnp.float32(log_phi))
    if max_depth is None:
        chunks = jnp.asarray(_level_chunks(width, 1024 if len(width) > 4096 else 64))
        out = [np.asarray(_pass_in_order(*args, chunks, use_max=m))[None] for m in (False, True)]
    else:
        out = [np.asarray(_layers(*args, n_layers=max_depth + 1, use_max=m)) for m in (False, True)]
    return out[0], out[1]


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
            cand_cut=jnp.asarray(g.cand_cut), log_phi=jnp.float32(g.log_phi),
        )
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
        lch = jnp.where(split, arrs["left"][c, k], S)
        rch = jnp.where(split, arrs["right"][c, k], S)
        children = jnp.stack([lch, rch], axis=-1).reshape(num, -1)  # slots 2i+1, 2i+2 are adjacent
        box = box.at[:, 2 * lo + 1 : 2 * hi + 1].set(children)
    return Tree(is_split, feature, cut), box, truncated


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
        empty = Tree(np.zeros((0, N), bool), np.zeros((0, N), np.int32), np.zeros((0, N), np.int32))
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
    return Tree(*(a[0] for a in trees))


def log_prob(g: BoxGrammar, tree: Tree, bins: np.ndarray, point_stats: np.ndarray) -> float:
    """Exact ``log Pr[T | X, Y]`` of one tree.

    ``tree`` uses raw cuts (a row goes left iff ``bins[:, feature] <= cut``), ``bins`` (n, F) and
    ``point_stats`` (n, P) are the training rows the grammar was built from.  Trees that break the
    Tree Constraints (a node without rows) or the depth bound have probability 0 (``-inf``).  Trees
    that differ only in which threshold or feature produces the same split of the rows are the
    same tree and get the same value.  Paper eq. 25: ``φ^(1-b) Π L(leaves) / Q(root)``.
    """
    is_split, feature, cut = (np.asarray(a) for a in tree)
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
            go_left = bins[rows, int(feature[i])] <= int(cut[i])
            stack.append((2 * i + 1, depth + 1, rows[go_left]))
            stack.append((2 * i + 2, depth + 1, rows[~go_left]))
        else:
            leaf_stats.append(point_stats[rows].sum(axis=0))
    log_lik = float(np.sum(np.asarray(g.likelihood.leaf_log_lik(jnp.asarray(np.array(leaf_stats))))))
    return (1 - len(leaf_stats)) * g.log_phi + log_lik - float(g.log_q[-1, 0])


# ----------------------------------------------------------------------------------------------
# Queries: path sampling (Algorithms 1 and 2) and the exact posterior predictive


def _goes_left(g: BoxGrammar, q_codes: np.ndarray) -> np.ndarray:
    """(nq, K) bool: query goes left at each candidate."""
    return q_codes[:, g.cand_feature] <= g.cand_code[None, :]


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
        chunks = jnp.asarray(_level_chunks(g.width, 256 if S > 4096 else 32))
        r = _predictive_in_order(log_leaf, left, right, valid, jnp.asarray(g.log_q[0]), m, left_q,
                                 jnp.float32(g.log_phi), chunks)
        return np.asarray(r[0])
    r = None
    for layer in range(g.max_depth + 1):
        r = _predictive_layer(log_leaf, left, right, valid, jnp.asarray(g.log_q[max(layer - 1, 0)]),
                              jnp.asarray(g.log_q[layer]), m, left_q, jnp.float32(g.log_phi), r,
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
