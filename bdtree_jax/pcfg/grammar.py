"""The BCART-PCFG grammar: the boxes (distinct row sets reachable by splits) enumerated level by
level, their splits, and the DP that scores them (:mod:`bdtree_jax.pcfg` describes the method).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from ..tree import MISSING_CODE, over_draws

__all__ = ["BoxGrammar", "build_box_grammar", "estimate_boxes", "level_chunks"]

_MAX_HEAP_DEPTH = 10  # heap depth used for draws when max_depth is None (2047 slots)


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
    cand_nan_left, cand_levels, categorical, split_log_weight : only in a grammar of data with
        categorical features or missing values (:mod:`~bdtree_jax.pcfg.mixed`): each candidate's
        missing-value bit (K,) bool and left level set (K, W) uint32 (0 on ordered features), the
        categorical features (F,) bool, and each split production's log weight ``-log 2`` (the
        bit's prior factor).  None / 0 otherwise.
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
    cand_nan_left: np.ndarray | None = None
    cand_levels: np.ndarray | None = None
    categorical: np.ndarray | None = None
    split_log_weight: float = 0.0

    @property
    def log_phi_split(self) -> float:
        """What one split production costs in the DP, ``log φ - split_log_weight`` (``log φ``
        without missing-value bits)."""
        return self.log_phi - self.split_log_weight

    @property
    def n_boxes(self) -> int:
        return self.lo.shape[0]

    @property
    def n_candidates(self) -> int:
        return self.cand_feature.shape[0]

    @property
    def log_z(self) -> float:
        """``log Σ_T φ^(-b(T)) Π L(leaves)`` over the allowed trees (the unnormalised posterior's
        total mass; ``log Q(root) - log φ``; with missing-value bits each tree's prior weight
        carries ``2^-(b-1)`` too)."""
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
    compile: :func:`~bdtree_jax.tree.over_draws` over row indices."""
    n = arrays[0].shape[0]
    return over_draws(lambda _, chunk: fn(*chunk), tuple(arrays), np.arange(n), size)


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


def build_box_grammar(
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
    categorical=None,
    level_count=None,
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
    categorical, level_count : (F,) which features are categorical (their codes are level
        indices) and their level counts.  With a categorical feature or a missing cell
        (:data:`~bdtree_jax.tree.MISSING_CODE` in ``codes``) the grammar is
        :func:`~bdtree_jax.pcfg.mixed.build_mixed_grammar`'s (``grid_bytes`` does not apply).
    """
    codes = np.ascontiguousarray(codes, np.int32)
    if (categorical is not None and np.any(categorical)) or (codes == MISSING_CODE).any():
        raise ValueError("build_box_grammar: categorical features or missing cells need pcfg.build_grammar "
                         "(the mixed grammar).")
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
                f"over the max_bytes={max_bytes / 2**30:.1f} GiB allowed. Bucket the features (num_buckets=, "
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
                f"{estimate_boxes(codes, max_depth):.3g}). Bucket the features (num_buckets=, e.g. 10 or 5), "
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


def level_chunks(width: np.ndarray, size: int) -> np.ndarray:
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
        chunks = jnp.asarray(level_chunks(width, 1024 if len(width) > 4096 else 64))
        out = [np.asarray(_pass_in_order(*args, chunks, use_max=m))[None] for m in (False, True)]
    else:
        out = [np.asarray(_layers(*args, n_layers=max_depth + 1, use_max=m)) for m in (False, True)]
    return out[0], out[1]
