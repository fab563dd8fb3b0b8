"""Exact CGM98 prior over trees with categorical features and missing values (MIA), by brute-force
enumeration: the ground truth of ``docs/categorical-missing.md``, written from that page alone
(plain numpy recursion over row sets; no kernel, prior table or routing of the samplers is used).

:func:`bdtree_jax.exact.enumerate_trees` calls :func:`enumerate_mixed_trees` when ``X`` has a
missing cell, a categorical column, or missing-value bits are forced on.  :func:`parse_tree_string`
reads the canonical grammar (commas inside ``{...}`` included) and :func:`string_leaf_partition`
routes rows through a tree string, both independently of :mod:`bdtree_jax.tree`.
"""

from __future__ import annotations

import math
import re
from itertools import combinations

import numpy as np

from ..priors import TreePrior
from ..tree import _fmt
from ._shared import _box_arrays, _cut_log_probs, _leaf_terms, _total_log_lik, _valid_cuts

__all__ = ["enumerate_mixed_trees", "resolve_categorical", "parse_tree_string", "string_leaf_partition"]

_LOG2 = math.log(2.0)


def resolve_categorical(X, categorical=None, missing_bits=None) -> tuple[np.ndarray, np.ndarray, bool]:
    """Validate the mixed-data arguments of :func:`bdtree_jax.exact.enumerate_trees`.

    Returns ``(X as float (n, F), categorical (F,) bool, missing_bits)``; ``missing_bits=None``
    becomes True iff ``X`` has a NaN cell or some feature is categorical.  A categorical column
    must hold non-negative integer level codes (or NaN); ``missing_bits=False`` with a NaN cell is
    an error (a missing row has no direction without the bit)."""
    X = np.asarray(X, float)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-d (n, F); got shape {X.shape}.")
    if np.isinf(X).any():
        raise ValueError("X has an infinite value; only NaN (missing) is allowed.")
    F = X.shape[1]
    if categorical is None:
        cat = np.zeros(F, bool)
    else:
        cat = np.asarray(categorical)
        if cat.dtype != bool or cat.shape != (F,):
            raise ValueError(f"categorical must be a ({F},) bool mask; got {categorical!r}.")
    has_nan = bool(np.isnan(X).any())
    for f in np.flatnonzero(cat):
        v = X[~np.isnan(X[:, f]), f]
        if np.any(v < 0) or np.any(v != np.round(v)):
            raise ValueError(f"categorical column {f} must hold non-negative integer level codes (or NaN).")
    if missing_bits is None:
        missing_bits = has_nan or bool(cat.any())
    elif not isinstance(missing_bits, (bool, np.bool_)):
        raise ValueError(f"missing_bits must be None, True or False; got {missing_bits!r}.")
    if has_nan and not missing_bits:
        raise ValueError("X has a missing (NaN) cell but missing_bits=False: missing rows need the bits.")
    return X, cat, bool(missing_bits)


def enumerate_mixed_trees(X, point_stats, prior: TreePrior, likelihood, *, categorical=None, missing_bits=None,
                          boxes=None, initial_tree: str | None = None, mean_edits: float = 2.0,
                          max_edits: int = 20) -> list[tuple[str, float, float]]:
    """Every tree with positive prior mass as ``(string, log_prior, log_lik)``, with categorical
    features and missing values (``docs/categorical-missing.md``).

    X : (n, F) floats; ordered columns raw values, categorical columns level codes, NaN missing.
    categorical : (F,) bool mask or None; missing_bits : None (bits iff a NaN cell or a
    categorical feature), True or False.  boxes : ``{feature: bounds}`` dicts (integer or
    ``"x{f}"`` keys), ``bounds`` an ordered feature's ``(low, high)`` or a categorical feature's
    collection of level codes ``B`` (a feature not named: every value or level).  A box holds no
    missing value, so the bit never cuts it; a rule at a node whose region holds the box cuts it
    (prior 0) if its threshold lies strictly inside ``(low, high)``, or if ``S`` holds some but
    not all of ``B`` (an unnamed categorical feature: any ``S``); else the box goes to the child
    holding all of it (ordered: ``high <= t`` left, ``low >= t`` right; categorical: ``B`` inside
    ``S`` left, ``B`` disjoint from ``S`` right).

    The prior at a node of depth ``d``: it splits with probability ``alpha (1 + d)**-beta`` (leaf
    at ``max_depth`` or when no feature is eligible), and a split's rule has probability
    ``1 / #eligible features * p(cut or S | feature) * (1/2 if bits)``.  An ordered feature's cuts
    are the midpoints of its distinct non-missing values; a categorical feature's levels its
    distinct non-missing codes.  Available rules, ``prior.valid_cuts == "data"``: from the node's
    rows not missing the feature (ordered: cuts with ``>= min_leaf_size`` of them on each side;
    categorical: their levels); ``"ancestors"``: ordered cut ranges and categorical level sets
    narrowed by the ancestors' rules (left child of ``S``: ``S``, right: the rest), and trees with a
    node of fewer than ``min_leaf_size`` rows left out (``log_prior`` stays the untruncated one).
    A categorical feature with ``k >= 2`` available levels has the ``2**(k-1) - 1`` rules ``S``:
    non-empty subsets of its available levels without the smallest, each of probability
    ``1 / (2**(k-1) - 1)``.  Both values of every bit are enumerated as distinct trees.

    Strings: ``x{f}<={t}`` or ``x{f}in{a,b}`` (codes of ``S`` ascending), then ``|NA=L`` /
    ``|NA=R`` when the model has bits, then ``(left,right)``; a leaf is ``L``.

    ``initial_tree`` (a string; ``valid_cuts="data"`` only): ``log_prior`` is instead the EDITTREE
    prior around it (:func:`_edit_log_prior`), and only the trees it reaches are listed.
    """
    X, cat, bits = resolve_categorical(X, categorical, missing_bits)
    if getattr(prior, "structure", "cgm") == "pinball":
        raise ValueError("the pinball prior is not enumerated with categorical features or missing-value bits.")
    n, F = X.shape
    point_stats = np.asarray(point_stats, float)
    miss = np.isnan(X)
    values = [np.unique(X[~miss[:, f], f]) for f in range(F)]  # sorted distinct non-missing values
    code = np.full((n, F), -1)
    for f in range(F):
        code[~miss[:, f], f] = np.searchsorted(values[f], X[~miss[:, f], f])  # value index (= bin)
    thresholds = [(u[:-1] + u[1:]) / 2.0 for u in values]
    gaps = [np.diff(u) for u in values]
    m = prior.min_leaf_size
    ancestors = getattr(prior, "valid_cuts", "data") == "ancestors"
    box_list = _box_arrays([{k: v for k, v in box.items() if not cat[_box_key(k)]} for box in boxes or []], F)
    box_levels = [{_box_key(k): frozenset(float(c) for c in v) for k, v in box.items() if cat[_box_key(k)]}
                  for box in boxes or []]
    for box in box_levels:
        for f, B in box.items():
            if not B or any(c < 0 or c != round(c) for c in B):
                raise ValueError(f"a box's levels of categorical column {f} must be a non-empty collection of "
                                 f"non-negative integer level codes; got {sorted(B)}.")
    bit_choices = (("L", -_LOG2), ("R", -_LOG2)) if bits else ((None, 0.0),)
    memo: dict = {}

    def rules(rows: np.ndarray, avail) -> dict[int, list]:
        """``{feature: [(text, log p(rule | feature), goes-left mask over the non-missing rows of
        rows, ancestor state of the left child, of the right child, threshold or None)]}``."""
        out = {}
        for f in range(F):
            present = rows[~miss[rows, f]]
            if cat[f]:
                levels = avail[f] if ancestors else tuple(int(c) for c in np.unique(code[present, f]))
                k = len(levels)
                if k < 2:
                    continue
                lp = -math.log(2 ** (k - 1) - 1)
                opts = []
                for size in range(1, k):
                    for S in combinations(levels[1:], size):  # the smallest level always goes right
                        names = ",".join(str(int(values[f][c])) for c in S)
                        opts.append((f"x{f}in{{{names}}}", lp, np.isin(code[present, f], S),
                                     tuple(S), tuple(c for c in levels if c not in S), None))
                out[f] = opts
            else:
                cuts = list(range(*avail[f])) if ancestors else _valid_cuts(code[present, f], m)
                if not cuts:
                    continue
                lo, hi = avail[f] if ancestors else (None, None)
                out[f] = [(f"x{f}<={_fmt(thresholds[f][c])}", lp, code[present, f] <= c, (lo, c), (c + 1, hi),
                           thresholds[f][c])
                          for c, lp in zip(cuts, _cut_log_probs(gaps[f], cuts, prior.split_prior))]
        return out

    def box_side(b: int, f: int, t, s_left) -> str:
        """Where box ``b`` goes at the rule on ``f`` with threshold ``t`` or left level indices
        ``s_left``: "left", "right" or "cut"."""
        if cat[f]:
            if f not in box_levels[b]:
                return "cut"
            B, S = box_levels[b][f], {float(values[f][c]) for c in s_left}
            return "left" if B <= S else "right" if not B & S else "cut"
        low, high = box_list[b][0][f], box_list[b][1][f]
        return "left" if high <= t else "right" if low >= t else "cut"

    def trees(rows: np.ndarray, depth: int, avail, held) -> list:
        """``[(string, log prior, [leaf terms])]`` of the subtrees on ``rows``; ``avail``: per
        feature, the ancestors' cut range ``(lo, hi)`` or level tuple (``"ancestors"`` only);
        ``held``: the boxes inside the node's region."""
        key = (rows.tobytes(), depth, avail, held)
        if key in memo:
            return memo[key]
        if ancestors and len(rows) < m:
            memo[key] = []
            return []
        leaf = _leaf_terms(likelihood, point_stats[rows].sum(0))
        options = rules(rows, avail) if depth < prior.max_depth else {}
        if not options:
            memo[key] = [("L", 0.0, [leaf])]
            return memo[key]
        p = prior.alpha * (1.0 + depth) ** (-prior.beta)
        out = [("L", math.log1p(-p), [leaf])]
        for f, opts in options.items():
            present, absent = rows[~miss[rows, f]], rows[miss[rows, f]]
            for text, lp, goes_left, a_left, a_right, t in opts:
                sides = [box_side(b, f, t, a_left) for b in held]
                if "cut" in sides:
                    continue  # the rule cuts a box: prior 0
                h_left = tuple(b for b, side in zip(held, sides) if side == "left")
                h_right = tuple(b for b, side in zip(held, sides) if side == "right")
                av_left = tuple(a_left if g == f else a for g, a in enumerate(avail)) if ancestors else avail
                av_right = tuple(a_right if g == f else a for g, a in enumerate(avail)) if ancestors else avail
                for bit, lp_bit in bit_choices:
                    left = np.sort(np.concatenate([present[goes_left], absent if bit == "L" else absent[:0]]))
                    right = np.sort(np.concatenate([present[~goes_left], absent if bit == "R" else absent[:0]]))
                    lp_rule = math.log(p) - math.log(len(options)) + lp + lp_bit
                    name = text if bit is None else f"{text}|NA={bit}"
                    for ls, llp, lleaves in trees(left, depth + 1, av_left, h_left):
                        for rs, rlp, rleaves in trees(right, depth + 1, av_right, h_right):
                            out.append((f"{name}({ls},{rs})", lp_rule + llp + rlp, lleaves + rleaves))
        memo[key] = out
        return out

    root_avail = tuple(tuple(range(len(values[f]))) if cat[f] else (0, max(len(values[f]) - 1, 0))
                       for f in range(F)) if ancestors else None
    root = trees(np.arange(n), 0, root_avail, tuple(range(len(box_list))))
    out = [(s, lp, _total_log_lik(likelihood, leaves)) for s, lp, leaves in root]
    if initial_tree is None:
        return out
    if ancestors:
        raise ValueError("the edit prior (initial_tree) is enumerated under valid_cuts='data' only.")
    log_edit = _edit_log_prior(X, lambda rows: rules(rows, None), {s for s, _, _ in out}, prior.max_depth,
                               values, bits, initial_tree, mean_edits, max_edits)
    return [(s, log_edit[s], ll) for s, _, ll in out if s in log_edit]


def _box_key(key) -> int:
    """A box's feature key (an integer or ``"x{f}"``) as the feature index."""
    return int(key[1:]) if isinstance(key, str) else int(key)


def _edit_log_prior(X, rules, support: set, max_depth: int, values, bits: bool, initial_tree: str, mean_edits: float,
                    max_edits: int) -> dict[str, float]:
    """``{tree string: log p_edit}`` of the EDITTREE prior around ``initial_tree`` with general
    rules: ``K`` edits, ``P(K = k) ∝ q**k`` (``q = mean_edits / (1 + mean_edits)``, ``k <= max_edits``);
    one edit is a move uniform among grow / prune / change that have a target (grow: leaves above
    ``max_depth`` with an available rule; prune: splits with two leaf children; change: splits), a
    node uniform among its targets and, for grow / change, a rule with the prior's probability at
    the node (``rules(rows)``: feature uniform, then cut or level set, then each bit 1/2); a change
    keeps the subtrees; an edit giving a tree outside ``support`` (prior 0) leaves the tree as it
    is.  Trees are nested ``(rule, left, right)`` with ``rule = (f, op, arg, nan)`` as
    :func:`parse_tree_string`'s; exact forward pass over the laws after ``k`` edits."""
    q = float(mean_edits) / (1.0 + float(mean_edits))
    bit_values = ("L", "R") if bits else (None,)

    def text(node) -> str:
        if node == "L":
            return "L"
        (f, op, arg, nan), left, right = node
        rule = f"x{f}<={_fmt(arg)}" if op == "<=" else f"x{f}in{{{','.join(str(c) for c in sorted(arg))}}}"
        return f"{rule}{'' if nan is None else '|NA=' + nan}({text(left)},{text(right)})"

    def nodes(node, rows, path=(), depth=0):
        yield path, node, rows, depth
        if node != "L":
            (f, op, arg, nan), left, right = node
            x = X[rows, f]
            goes = np.where(np.isnan(x), nan == "L", (x <= arg) if op == "<=" else np.isin(x, list(arg)))
            yield from nodes(left, rows[goes], path + (1,), depth + 1)
            yield from nodes(right, rows[~goes], path + (2,), depth + 1)

    def put(node, path, new):
        if not path:
            return new
        rule, left, right = node
        return (rule, put(left, path[1:], new), right) if path[0] == 1 else (rule, left, put(right, path[1:], new))

    cache: dict = {}

    def edit(tree) -> dict:
        name = text(tree)
        if name in cache:
            return cache[name]
        every = list(nodes(tree, np.arange(X.shape[0])))
        node_at = {p: nd for p, nd, _, _ in every}
        grow = [(p, r) for p, nd, r, d in every if nd == "L" and d < max_depth and rules(r)]
        prune = [(p, r) for p, nd, r, d in every if nd != "L" and nd[1] == "L" and nd[2] == "L"]
        change = [(p, r) for p, nd, r, d in every if nd != "L"]
        moves = [(k, t) for k, t in (("grow", grow), ("prune", prune), ("change", change)) if t]
        out: dict = {}

        def add(new, p):
            key = text(new)
            if key not in support:
                new, key = tree, name
            out[key] = (new, out.get(key, (None, 0.0))[1] + p)

        if not moves:
            out[name] = (tree, 1.0)
        for kind, targets in moves:
            p_node = 1.0 / len(moves) / len(targets)
            for path, rows in targets:
                old = node_at[path]
                if kind == "prune":
                    add(put(tree, path, "L"), p_node)
                    continue
                options = rules(rows)
                for f, opts in options.items():
                    for _, lp, _, a_left, _, t in opts:
                        arg = t if t is not None else frozenset(int(values[f][c]) for c in a_left)
                        for nan in bit_values:
                            rule = (f, "<=" if t is not None else "in", arg, nan)
                            sub = (rule, "L", "L") if kind == "grow" else (rule, old[1], old[2])
                            add(put(tree, path, sub), p_node / len(options) * math.exp(lp) / len(bit_values))
        cache[name] = out
        return out

    t0 = parse_tree_string(initial_tree)
    if text(t0) not in support:
        raise ValueError(f"initial_tree {initial_tree!r} has prior 0 (a rule not available at its node's rows).")
    weights = np.array([q**k for k in range(int(max_edits) + 1)])
    weights = weights / weights.sum()
    dist, total = {text(t0): (t0, 1.0)}, {}
    for k in range(int(max_edits) + 1):
        for key, (_, p) in dist.items():
            total[key] = total.get(key, 0.0) + weights[k] * p
        if k == max_edits:
            break
        new: dict = {}
        for tree, p in dist.values():
            for key, (t2, p2) in edit(tree).items():
                new[key] = (t2, new.get(key, (None, 0.0))[1] + p * p2)
        dist = new
    return {key: math.log(p) for key, p in total.items() if p > 0}


_RULE = re.compile(r"x(\d+)(?:<=([^(|]+)|in\{([\d,]*)\})(?:\|NA=([LR]))?\(")


def parse_tree_string(text: str):
    """A canonical tree string as nested tuples: ``"L"`` for a leaf, else ``(rule, left, right)``
    with ``rule`` either ``(f, "<=", threshold, nan)`` or ``(f, "in", frozenset of level codes,
    nan)``, ``nan`` being ``"L"``, ``"R"`` or None (no bit).  ``ValueError`` on a malformed string."""
    pos = 0

    def rec():
        nonlocal pos
        if text.startswith("L", pos):
            pos += 1
            return "L"
        match = _RULE.match(text, pos)
        if match is None:
            raise ValueError(f"malformed tree string at {pos}: {text!r}")
        f, t, levels, nan = match.groups()
        rule = (int(f), "<=", float(t), nan) if t is not None else (
            int(f), "in", frozenset(int(c) for c in levels.split(",") if c), nan)
        pos = match.end()
        left = rec()
        if not text.startswith(",", pos):
            raise ValueError(f"malformed tree string at {pos}: {text!r}")
        pos += 1
        right = rec()
        if not text.startswith(")", pos):
            raise ValueError(f"malformed tree string at {pos}: {text!r}")
        pos += 1
        return (rule, left, right)

    tree = rec()
    if pos != len(text):
        raise ValueError(f"trailing characters at {pos}: {text!r}")
    return tree


def string_leaf_partition(text: str, X) -> frozenset:
    """The partition of the rows of ``X`` (n, F; NaN missing) into the non-empty leaves of the tree
    string ``text``, as a frozenset of frozensets of row indices: ordered rules send ``x <= t``
    left, categorical rules the codes in ``S``, missing values follow the bit (an error without)."""
    X = np.asarray(X, float)
    groups = []

    def rec(node, rows: np.ndarray) -> None:
        if node == "L":
            if len(rows):
                groups.append(frozenset(rows.tolist()))
            return
        (f, op, arg, nan), left, right = node
        x = X[rows, f]
        missing = np.isnan(x)
        if missing.any() and nan is None:
            raise ValueError(f"row {rows[missing][0]} misses feature {f} but the rule has no missing-value bit.")
        goes_left = np.where(missing, nan == "L", (x <= arg) if op == "<=" else np.isin(x, list(arg)))
        rec(left, rows[goes_left])
        rec(right, rows[~goes_left])

    rec(parse_tree_string(text), np.arange(X.shape[0]))
    return frozenset(groups)
