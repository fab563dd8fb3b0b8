"""BCART-PCFG on data with categorical features and missing values (docs/categorical-missing.md).

The grammar of :mod:`bdtree_jax.pcfg` with the rules of the contract, exactly:

* **Codes.**  An ordered feature is coded as before (ranks of its non-missing values, optionally
  bucketed), a categorical feature by its level index ``0 .. L - 1``, and a missing cell by
  :data:`~bdtree_jax.tree.MISSING_CODE` (:func:`code_mixed_features`).
* **Rules** (availability ``valid_cuts="data"``, from the node's rows that have a value of the
  feature): an ordered feature's thresholds with at least one such row on each side; a
  categorical feature with ``k >= 2`` levels among them, its ``2^(k-1) - 1`` two-way partitions
  (the left set ``S`` a non-empty subset of those levels without the smallest).  Every rule comes
  in two variants, the missing rows with the left or with the right child.  A split on
  missingness alone is not a rule.  At most :data:`MAX_LEVELS` levels per categorical feature
  (:func:`check_levels`: every partition is a candidate, ``2^(L-1) - 1`` of them).
* **The prior.**  ``Pr[T] ∝ φ^(-b(T)) 2^(-(b(T) - 1))``: each split carries the missing-value
  bit's prior factor 1/2.  As in the paper, splits of a node that give the same two row sets are
  one split: the row-set pair of a rule *without* missing rows in its feature at the node comes
  from both bit values, and then weighs ``2 × 1/2 = 1``, otherwise 1/2.  A pair produced by
  several rules weighs the most any one rule gives it (1 if some rule produces it with either
  bit), and is written with the first such rule in (feature, threshold or level mask as an
  integer) order, with the bit(s) that produce it.  Without missing cells every split weighs 1,
  so the posterior over row-set trees is the plain PCFG's and each bit is a fair coin (a prior
  draw); on numeric data without missing cells :func:`~bdtree_jax.pcfg.build_grammar` does not
  come here at all.
* **Boxes** are keyed by their rows (a bit set, ``n / 8`` bytes), which a region's codes — per
  feature an interval of codes or a set of levels, plus whether missing rows are included —
  determine; children are bitwise ANDs with each rule's left rows.  Each kept rule variant is a
  production of weight ``1 / (2 φ)``: a split of weight 1 is its two variants (same children),
  so the DP, the draws (a variant, hence the bit, drawn with its production) and the predictive
  are the plain grammar's with ``log φ + log 2`` per split
  (:attr:`~bdtree_jax.pcfg.grammar.BoxGrammar.log_phi_split`).
"""

from __future__ import annotations

import math
import os

import jax.numpy as jnp
import numpy as np

from ..data import code_features
from ..tree import MISSING_CODE, level_words
from .grammar import BoxGrammar, _dag_height, _scores, build_box_grammar

__all__ = ["MAX_LEVELS", "build_grammar", "build_mixed_grammar", "check_levels", "code_mixed_features"]

#: Most levels a categorical feature may have in the PCFG grammar (every one of the
#: ``2^(L-1) - 1`` partitions of its levels is a candidate split: 127 at 8 levels).
MAX_LEVELS = 8
_LOG2 = math.log(2.0)
_BIG = np.iinfo(np.int64).max


def check_levels(level_count, names=None, where: str = "") -> None:
    """``ValueError`` naming the first categorical feature with more than :data:`MAX_LEVELS`
    levels (``level_count`` (F,), 0 for ordered features; ``names`` the F column names)."""
    for f, count in enumerate(np.asarray(level_count, np.int64)):
        if count > MAX_LEVELS:
            col = repr(names[f]) if names is not None else str(f)
            raise ValueError(
                f"{where}method='pcfg' enumerates every partition of a categorical feature's levels (2^(L-1) - 1 "
                f"candidate splits) and takes at most {MAX_LEVELS} levels; column {col} has {int(count)}. One-hot "
                "encode it (e.g. pandas.get_dummies) or group its rare levels, or use method='cgm', which takes up "
                "to 64 levels.")


def code_mixed_features(X, categorical, n_buckets=None) -> tuple[np.ndarray, list[np.ndarray]]:
    """Codes of a table with categorical features and missing cells: ``(codes, boundary_cut)``.

    X : (n, F) floats (categorical features: level indices; NaN: missing).  An ordered feature's
    non-missing values are coded by :func:`~bdtree_jax.data.code_features` (with its
    ``n_buckets``), a categorical feature's by their level index; a missing cell by
    :data:`~bdtree_jax.tree.MISSING_CODE`.  ``boundary_cut[f]``: as ``code_features``'s for an
    ordered feature (raw cut of each code boundary), empty for a categorical one."""
    X = np.asarray(X, float)
    n, F = X.shape
    buckets = [n_buckets] * F if n_buckets is None or np.isscalar(n_buckets) else list(n_buckets)
    codes = np.full((n, F), MISSING_CODE, np.int32)
    boundary_cut = []
    for f in range(F):
        present = ~np.isnan(X[:, f])
        if categorical[f] or not present.any():
            codes[present, f] = X[present, f].astype(np.int32)
            boundary_cut.append(np.zeros(0, np.int32))
            continue
        c, cut = code_features(X[present, f][:, None], [buckets[f]])
        codes[present, f] = c[:, 0]
        boundary_cut.append(cut[0])
    return codes, boundary_cut


def _candidates(codes, categorical, level_count, boundary_cut):
    """Rule variants in (feature, threshold or level mask, bit) order, the bit ``L`` first:
    feature, code threshold, raw cut, nan_left, left level mask (int64; 0 for ordered)."""
    rows = []
    for f in range(codes.shape[1]):
        if categorical[f]:
            # the left set never holds level 0 (it is the smallest whenever it is available)
            rules = [(0, 0, m << 1) for m in range(1, 2 ** max(int(level_count[f]) - 1, 0))]
        else:
            present = codes[:, f] != MISSING_CODE
            n_codes = int(codes[present, f].max()) + 1 if present.any() else 0
            cuts = range(n_codes - 1) if boundary_cut is None else boundary_cut[f]
            rules = [(t, int(c), 0) for t, c in zip(range(n_codes - 1), cuts)]
        rows += [(f, t, c, bit, m) for t, c, m in rules for bit in (True, False)]
    feat, code, cut, nan, mask = (np.array(col, dtype) for col, dtype in zip(
        zip(*rows) if rows else [()] * 5, (np.int32, np.int32, np.int32, bool, np.int64)))
    return feat, code, cut, nan, mask


def _pack_rows(member: np.ndarray) -> np.ndarray:
    """(..., n) bool -> (..., ceil(n / 64)) uint64 bit sets (bit ``r % 64`` of word ``r // 64``)."""
    n = member.shape[-1]
    pad = np.zeros(member.shape[:-1] + (-(-n // 64) * 64 - n,), bool)
    return np.ascontiguousarray(np.packbits(np.concatenate([member, pad], -1), axis=-1, bitorder="little")).view(
        np.uint64)


def _unpack_rows(words: np.ndarray, n: int) -> np.ndarray:
    return np.unpackbits(np.ascontiguousarray(words).view(np.uint8), axis=-1, count=n, bitorder="little").astype(bool)


def _keys(words: np.ndarray) -> np.ndarray:
    """An exact sortable key per bit set: uint64 for one word, else a void view."""
    words = np.ascontiguousarray(words, np.uint64)
    if words.shape[-1] == 1:
        return words[..., 0]
    return words.view(np.dtype((np.void, 8 * words.shape[-1])))[..., 0]


def _summaries(member: np.ndarray, codes: np.ndarray, chunk_cells: int = 2**22):
    """Per box (m, F): lowest and highest code and the set of levels (int64 mask) of its rows
    that have a value of the feature (``lo > hi``, mask 0 when none)."""
    n, F = codes.shape
    present = codes != MISSING_CODE
    c = np.where(present, codes, 0).astype(np.int64)
    bit = np.where(present, np.left_shift(np.int64(1), np.minimum(c, 62)), 0)
    lo, hi, avail = [], [], []
    step = max(1, chunk_cells // max(1, n * F))
    for s in range(0, member.shape[0], step):
        inside = member[s : s + step, :, None] & present[None]
        lo.append(np.where(inside, c[None], _BIG).min(1))
        hi.append(np.where(inside, c[None], -1).max(1))
        avail.append(np.bitwise_or.reduce(np.where(inside, bit[None], 0), axis=1))
    if not lo:
        return np.zeros((0, F), np.int64), np.zeros((0, F), np.int64), np.zeros((0, F), np.int64)
    return np.concatenate(lo), np.concatenate(hi), np.concatenate(avail)


def _dedup(valid, left, right, S):
    """Keep one rule per distinct row-set pair of a box: the first rule (in candidate order) among
    those producing the pair with the most bit values, with each of its variants that does."""
    s_idx, k_idx = np.nonzero(valid)
    if not len(s_idx):
        return
    a = np.minimum(left[s_idx, k_idx], right[s_idx, k_idx])
    b = np.maximum(left[s_idx, k_idx], right[s_idx, k_idx])
    rule = k_idx // 2  # both variants of a rule are adjacent
    order = np.lexsort((k_idx, rule, b, a, s_idx))
    s_o, a_o, b_o, r_o, k_o = s_idx[order], a[order], b[order], rule[order], k_idx[order]
    new_pair = np.r_[True, (s_o[1:] != s_o[:-1]) | (a_o[1:] != a_o[:-1]) | (b_o[1:] != b_o[:-1])]
    new_rule = new_pair | np.r_[True, r_o[1:] != r_o[:-1]]
    rule_id = np.cumsum(new_rule) - 1
    count = np.bincount(rule_id)[rule_id]  # bit values of the rule giving the pair: 1 or 2
    starts = np.flatnonzero(new_pair)
    pair_id = np.cumsum(new_pair) - 1
    most = np.maximum.reduceat(count, starts)[pair_id]
    first = np.minimum.reduceat(np.where(count == most, r_o, _BIG), starts)[pair_id]
    drop = r_o != first
    valid[s_o[drop], k_o[drop]] = False
    left[~valid], right[~valid] = S, S


def build_mixed_grammar(codes, point_stats, likelihood, *, categorical=None, level_count=None, log_phi: float = 2.0,
                        max_depth: int | None = None, boundary_cut=None, max_boxes: int | None = None,
                        max_bytes: float | None = None, where: str = "") -> BoxGrammar:
    """The box grammar of data with categorical features or missing cells (module notes).

    codes : (n, F) int (:func:`code_mixed_features`).  categorical : (F,) bool (default none);
    level_count : (F,) levels of each categorical feature (default: its largest code + 1; at most
    :data:`MAX_LEVELS`).  The other arguments are :func:`~bdtree_jax.pcfg.build_grammar`'s."""
    codes = np.ascontiguousarray(codes, np.int32)
    n, F = codes.shape
    categorical = np.zeros(F, bool) if categorical is None else np.asarray(categorical, bool)
    present = codes != MISSING_CODE
    if level_count is None:
        level_count = np.array([int(codes[present[:, f], f].max(initial=-1)) + 1 if categorical[f] else 0
                                for f in range(F)], np.int64)
    level_count = np.where(categorical, np.asarray(level_count, np.int64), 0)
    check_levels(level_count, where=where)
    feat, code, cut, nan, mask = _candidates(codes, categorical, level_count, boundary_cut)
    K = len(feat)
    is_cat = categorical[feat]
    col = codes[:, feat].T.astype(np.int64)  # (K, n)
    in_set = ((mask[:, None] >> np.where(is_cat[:, None] & (col != MISSING_CODE), col, 0)) & 1) == 1
    go_left = np.where(col == MISSING_CODE, nan[:, None], np.where(is_cat[:, None], in_set, col <= code[:, None]))
    left_words = _pack_rows(go_left)  # (K, Wn)
    Wn = left_words.shape[1] if K else -(-n // 64)
    P = np.asarray(point_stats).shape[1]

    if max_bytes is None:
        max_bytes = 0.3 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    # as build_grammar's estimate, with the boxes' row sets (three copies: rows, key table, sort)
    per_box = 3 * (21 * K + 24 * Wn + 24 * F + 4 * P + 8 * ((max_depth or 0) + 1) * 2 + 24)
    if max_boxes is None:
        max_boxes = int(max_bytes // per_box)

    root = _pack_rows(np.ones((1, n), bool))
    rows_all, summaries = [root], [_summaries(np.ones((1, n), bool), codes)]
    depths = [np.zeros(1, np.int32)]
    table, table_index = _keys(root), np.zeros(1, np.int64)
    children = []
    frontier, n_boxes, level = np.zeros(1, np.int64), 1, 0
    while len(frontier) and K and (max_depth is None or level < max_depth):
        lo, hi, avail = (np.concatenate([s[i] for s in summaries])[frontier] for i in range(3))
        av = avail[:, feat]
        splits = np.where(is_cat, ((mask & ~av) == 0) & ((mask & (av & -av)) == 0),
                          (lo[:, feat] <= code) & (code < hi[:, feat]))  # (m, K)
        v = int(splits.sum())
        need = n_boxes * per_box + v * (2 * 8 * Wn * 3 + 16) + splits.size * 9
        if need > max_bytes:
            raise ValueError(
                f"{where}expanding depth {level + 1} of the tree space needs about {need / 2**30:.1f} GiB "
                f"({n_boxes:,} boxes so far, {v:,} splits to follow; n={n}, {F} features, {K} rule variants), over "
                f"the max_bytes={max_bytes / 2**30:.1f} GiB allowed. Bucket the ordered features (num_buckets=, e.g. 5), "
                "bound the depth (max_depth=) or one-hot encode categorical features with many levels.")
        s_i, k_i = np.nonzero(splits)
        rows = np.concatenate(rows_all)[frontier[s_i]]
        split_words = np.stack([rows & left_words[k_i], rows & ~left_words[k_i]], 1)  # (v, 2, Wn)
        cand_keys = _keys(split_words)
        new, first = np.unique(cand_keys.ravel(), return_index=True)
        pos = np.searchsorted(table, new)
        known = (pos < len(table)) & (table[np.minimum(pos, len(table) - 1)] == new)
        new, first = new[~known], first[~known]
        if n_boxes + len(new) > max_boxes:
            raise ValueError(
                f"{where}the tree space has more than max_boxes={max_boxes:,} distinct boxes (row sets) already at "
                f"depth {level + 1} (n={n}, {F} features, {K} rule variants). Bucket the ordered features "
                f"(num_buckets=, e.g. 5), bound the depth (max_depth=) or raise max_boxes if memory allows (about "
                f"{per_box} bytes per box).")
        new_rows = split_words.reshape(-1, Wn)[first]
        new_index = np.arange(n_boxes, n_boxes + len(new))
        rows_all.append(new_rows)
        summaries.append(_summaries(_unpack_rows(new_rows, n), codes))
        depths.append(np.full(len(new), level + 1, np.int32))
        at = np.searchsorted(table, new)
        table = np.insert(table, at, new)
        table_index = np.insert(table_index, at, new_index)
        idx = np.full((len(frontier), K, 2), -1, np.int32)
        if v:
            idx[splits] = table_index[np.searchsorted(table, cand_keys)]
        children.append((frontier, idx))
        n_boxes += len(new)
        frontier = new_index
        level += 1

    S = n_boxes
    left = np.full((S, K), S, np.int32)
    right = np.full((S, K), S, np.int32)
    for boxes, idx in children:
        ok = idx[..., 0] >= 0
        left[boxes] = np.where(ok, idx[..., 0], S)
        right[boxes] = np.where(ok, idx[..., 1], S)
    valid = left < S
    _dedup(valid, left, right, S)

    rows = np.concatenate(rows_all)
    ps = jnp.asarray(point_stats, jnp.float32)
    stats, width = [], []
    for s in range(0, S, 4096):
        member = _unpack_rows(rows[s : s + 4096], n)
        stats.append(np.asarray(jnp.asarray(member, jnp.float32) @ ps))
        width.append(member.sum(1))
    stats = np.concatenate(stats).astype(np.float32)
    width = np.concatenate(width).astype(np.int64)  # rows: a child has strictly fewer
    log_leaf = np.asarray(likelihood.leaf_log_lik(jnp.asarray(stats)), np.float32)
    log_phi_split = float(log_phi) + _LOG2
    log_q, log_qmax = _scores(log_leaf, left, right, valid, log_phi_split, max_depth, width)
    log_prior_q = _scores(np.zeros_like(log_leaf), left, right, valid, log_phi_split, max_depth, width)[0][-1]
    lo, hi, _ = (np.concatenate([s[i] for s in summaries]) for i in range(3))
    words = level_words(level_count)
    cand_levels = None
    if categorical.any():
        cand_levels = np.stack([(mask >> (32 * w)) & 0xFFFFFFFF for w in range(words)], 1).astype(np.uint32)
    return BoxGrammar(
        lo=np.minimum(lo, 2**31 - 1).astype(np.int32), hi=hi.astype(np.int32), depth=np.concatenate(depths),
        stats=stats, log_leaf=log_leaf, left=left, right=right, valid=valid, cand_feature=feat, cand_code=code,
        cand_cut=cut, log_q=log_q, log_qmax=log_qmax, log_phi=float(log_phi), max_depth=max_depth,
        height=_dag_height(left, valid, right, width), likelihood=likelihood, n_features=F, width=width,
        log_prior_q=log_prior_q, cand_nan_left=nan, cand_levels=cand_levels, categorical=categorical.copy(),
        split_log_weight=-_LOG2,
    )


def build_grammar(codes, point_stats, likelihood, *, categorical=None, level_count=None, **options):
    """The grammar of ``codes``: :func:`~bdtree_jax.pcfg.grammar.build_box_grammar`'s on numeric
    codes without missing cells, else :func:`build_mixed_grammar`'s (``grid_bytes`` does not
    apply there); the options are :func:`~bdtree_jax.pcfg.grammar.build_box_grammar`'s."""
    codes = np.ascontiguousarray(codes, np.int32)
    if (categorical is not None and np.any(categorical)) or (codes == MISSING_CODE).any():
        options.pop("grid_bytes", None)
        return build_mixed_grammar(codes, point_stats, likelihood, categorical=categorical, level_count=level_count,
                                   **options)
    return build_box_grammar(codes, point_stats, likelihood, **options)
