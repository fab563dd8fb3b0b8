"""Exact posteriors of hard-split trees by brute-force enumeration (see :mod:`bdtree_jax.exact`):
the CGM98 and pinball priors (:func:`enumerate_trees`), BCART-PCFG (:func:`enumerate_pcfg_trees`)
and the EDITTREE prior (:func:`enumerate_edit_prior`), and the visit frequencies of sampled trees
to compare with them (:func:`tree_frequencies`, :func:`tv_distance`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp

from ..data import code_features, make_split_grid
from ..priors import TreePrior
from ..tree import Tree, _fmt, distinct_trees, from_string, to_string

__all__ = [
    "enumerate_trees", "enumerate_posterior", "tree_frequencies", "tv_distance", "enumerate_pcfg_trees",
    "enumerate_pcfg_posterior", "enumerate_edit_prior", "enumerate_edit_posterior", "enumerate_pinball_trees",
    "leaf_partition",
]


from ._shared import _box_arrays, _cut_log_probs, _gaps, _leaf_terms, _total_log_lik, _valid_cuts  # noqa: F401
from .._validate import is_int


def _require_no_missing(X, what: str) -> None:
    if np.isnan(np.asarray(X, float)).any():
        raise ValueError(f"{what} does not handle missing (NaN) values; enumerate_trees does (CGM98 prior).")


def enumerate_trees(X, point_stats, prior: TreePrior, likelihood, *, boxes=None, categorical=None,
                    missing_bits=None) -> list[tuple[str, float, float]]:
    """Every tree with positive prior mass as ``(string, log_prior, log_lik)``.

    Parameters
    ----------
    X : (n, F) raw inputs (split candidates are midpoints of distinct values, as everywhere).
    point_stats : (n, S) rows of ``likelihood.point_stats(y)``.
    prior : TreePrior (its ``split_prior``: a rule's cut is uniform among the feature's valid
        cuts, or ``"range"``: proportional to the width of the gap between the consecutive
        distinct values of ``X[:, f]`` that it separates)
    likelihood : DirichletMultinomial or NormalMeanShift
    boxes : box constraints (``{feature: (low, high)}`` dicts, integer or ``"x{f}"`` keys): trees
        with a rule whose threshold lies strictly inside a box held by its node are left out, and
        ``log_prior`` is the unconstrained prior's (renormalise over the returned trees).

    With ``prior.valid_cuts == "ancestors"`` a node's cuts are those its ancestors' rules leave
    (:mod:`bdtree_jax.priors`), and trees with a leaf of fewer than ``min_leaf_size`` rows are
    left out; ``log_prior`` is again the untruncated prior's (renormalise).

    Returns
    -------
    list of ``(to_string(tree), log p(T), log p(Y | X, T))``.

    With ``prior.structure == "pinball"`` the trees are those of the pinball prior
    (:func:`enumerate_pinball_trees`) and ``log p(T)`` is its *unnormalised* weight.

    categorical : (F,) bool mask or None: categorical columns of ``X`` hold level codes (floats
        ``0..L-1``); NaN anywhere in ``X`` is a missing value.
    missing_bits : None (the trees carry missing-value bits iff ``X`` has a NaN cell or a
        categorical feature), True or False.  With a categorical feature, a NaN or bits, the
        trees are those of ``docs/categorical-missing.md``
        (:func:`bdtree_jax.exact.categorical.enumerate_mixed_trees`; CGM98 structure only, boxes
        on ordered features only); otherwise the enumeration is the one above.
    """
    if categorical is not None or missing_bits is not None or np.isnan(np.asarray(X, float)).any():
        from .categorical import enumerate_mixed_trees, resolve_categorical

        _, cat, bits = resolve_categorical(X, categorical, missing_bits)
        if cat.any() or bits:
            return enumerate_mixed_trees(X, point_stats, prior, likelihood, categorical=cat, missing_bits=bits,
                                         boxes=boxes)
    if getattr(prior, "structure", "cgm") == "pinball":
        return enumerate_pinball_trees(X, point_stats, prior, likelihood, boxes=boxes)
    grid = make_split_grid(X)
    bins = grid.bin(X)
    point_stats = np.asarray(point_stats, float)
    m = prior.min_leaf_size
    gaps = _gaps(X)
    ancestors = getattr(prior, "valid_cuts", "data") == "ancestors"

    box_list = _box_arrays(boxes, bins.shape[1])

    def trees(rows: np.ndarray, depth: int, held=tuple(range(len(box_list))), ranges=None):
        """List of (string, log_prior, [leaf terms]) for the subtree on ``rows``; ``held``: the
        boxes inside this node's region; ``ranges``: with ``valid_cuts="ancestors"``, each
        feature's cuts ``[lo, hi)`` left by the ancestors' rules."""
        if ancestors:
            if ranges is None:
                ranges = tuple((0, int(k)) for k in grid.n_cuts)
            options = {f: list(range(lo, hi)) for f, (lo, hi) in enumerate(ranges) if hi > lo}
            if len(rows) < m:  # the truncation: every leaf holds >= m rows, so does every node
                return []
        else:
            options = {f: _valid_cuts(bins[rows, f], m) for f in range(bins.shape[1])}
            options = {f: c for f, c in options.items() if c}
        leaf = _leaf_terms(likelihood, point_stats[rows].sum(0))
        if depth >= prior.max_depth or not options:
            return [("L", 0.0, [leaf])]
        p = prior.alpha * (1.0 + depth) ** (-prior.beta)
        out = [("L", math.log1p(-p), [leaf])]
        for f, cuts in options.items():
            for c, lp_cut in zip(cuts, _cut_log_probs(gaps[f], cuts, prior.split_prior)):
                t = grid.thresholds[f, c]
                if any(box_list[k][0][f] < t < box_list[k][1][f] for k in held):
                    continue  # the rule cuts a box: prior 0
                held_left = tuple(k for k in held if box_list[k][1][f] <= t)
                held_right = tuple(k for k in held if box_list[k][0][f] >= t)
                left = rows[bins[rows, f] <= c]
                right = rows[bins[rows, f] > c]
                lp_rule = math.log(p) - math.log(len(options)) + lp_cut
                if ancestors:
                    r_left = tuple((lo, c) if g == f else (lo, hi) for g, (lo, hi) in enumerate(ranges))
                    r_right = tuple((c + 1, hi) if g == f else (lo, hi) for g, (lo, hi) in enumerate(ranges))
                else:
                    r_left = r_right = None
                for ls, llp, lleaves in trees(left, depth + 1, held_left, r_left):
                    for rs, rlp, rleaves in trees(right, depth + 1, held_right, r_right):
                        text = f"x{f}<={_fmt(grid.thresholds[f, c])}({ls},{rs})"
                        out.append((text, lp_rule + llp + rlp, lleaves + rleaves))
        return out

    return [(s, lp, _total_log_lik(likelihood, leaves)) for s, lp, leaves in trees(np.arange(bins.shape[0]), 0)]


def _pinball_log_size(rate: float, max_leaves: int) -> dict[int, float]:
    """``{K: log p_size(K)}``: ``K - 1 ~ Poisson(rate)`` renormalised over ``1..max_leaves``
    (scipy's pmf; independent of :func:`bdtree_jax.priors.pinball_log_size`)."""
    from scipy.stats import poisson

    p = {K: float(poisson.pmf(K - 1, rate)) for K in range(1, max_leaves + 1)}
    total = sum(p.values())
    return {K: math.log(v / total) for K, v in p.items()}


def _pinball_log_shape(balance: float, k: int, k_left: int) -> float:
    """``log p_shape(k_L | k)``: ``k_L - 1 ~ BetaBinomial(k - 2, balance, balance)`` (scipy)."""
    from scipy.stats import betabinom

    return float(betabinom.logpmf(k_left - 1, k - 2, balance, balance))


def enumerate_pinball_trees(X, point_stats, prior: TreePrior, likelihood, *,
                            boxes=None) -> list[tuple[str, float, float]]:
    """Every tree of positive pinball-prior mass as ``(string, log weight, log_lik)``.

    The pinball prior (:mod:`bdtree_jax.priors`, ``docs/theory/pinball.md``):
    ``π(T) ∝ p_size(K) · Π_internal p_shape(k_L | k) · Π_internal p_rule``, ``K - 1 ~
    Poisson(prior.pinball_rate)`` truncated to ``K <= prior.max_leaves``, ``k_L - 1 ~
    BetaBinomial(k - 2, γ, γ)`` with ``γ = prior.pinball_balance``, ``p_rule`` the CGM98 rule
    prior (uniform valid feature, cut by ``split_prior``).  Trees deeper than ``max_depth``, with
    more than ``K_max`` leaves, with a rule outside its node's valid cuts, or cutting a box are
    left out (prior 0).  The weight is **not** normalised: over the returned trees it sums to
    ``sum_K p_size(K) Z_K`` with ``Z_K`` the probability that the generative process with ``K``
    leaves gives a valid tree (1 when no dead end is reachable); renormalise over the returned
    trees (:func:`enumerate_posterior` does).  Plain recursion over row sets, independent of the
    JAX prior (:func:`bdtree_jax.priors.log_tree_prior`) and of its tables.
    """
    _require_no_missing(X, "enumerate_pinball_trees")
    grid = make_split_grid(X)
    bins = grid.bin(X)
    point_stats = np.asarray(point_stats, float)
    m = prior.min_leaf_size
    gaps = _gaps(X)
    box_list = _box_arrays(boxes, bins.shape[1])
    k_max = prior.max_leaves
    log_size = _pinball_log_size(float(prior.pinball_rate), k_max)
    gamma = float(prior.pinball_balance)

    def trees(rows: np.ndarray, depth: int, held):
        """``(string, log weight, [leaf terms], leaves)`` of the subtrees on ``rows`` with at most
        ``k_max`` leaves; the weight is the product of the rule and shape factors inside."""
        out = [("L", 0.0, [_leaf_terms(likelihood, point_stats[rows].sum(0))], 1)]
        if depth >= prior.max_depth:
            return out
        options = {f: _valid_cuts(bins[rows, f], m) for f in range(bins.shape[1])}
        options = {f: c for f, c in options.items() if c}
        for f, cuts in options.items():
            for c, lp_cut in zip(cuts, _cut_log_probs(gaps[f], cuts, prior.split_prior)):
                t = grid.thresholds[f, c]
                if any(box_list[k][0][f] < t < box_list[k][1][f] for k in held):
                    continue
                held_left = tuple(k for k in held if box_list[k][1][f] <= t)
                held_right = tuple(k for k in held if box_list[k][0][f] >= t)
                lp_rule = -math.log(len(options)) + lp_cut
                left = trees(rows[bins[rows, f] <= c], depth + 1, held_left)
                right = trees(rows[bins[rows, f] > c], depth + 1, held_right)
                for ls, lw, ll, lk in left:
                    for rs, rw, rl, rk in right:
                        if lk + rk > k_max:
                            continue
                        shape = _pinball_log_shape(gamma, lk + rk, lk)
                        text = f"x{f}<={_fmt(grid.thresholds[f, c])}({ls},{rs})"
                        out.append((text, lp_rule + shape + lw + rw, ll + rl, lk + rk))
        return out

    root = trees(np.arange(bins.shape[0]), 0, tuple(range(len(box_list))))
    return [(s, log_size[k] + w, _total_log_lik(likelihood, leaves)) for s, w, leaves, k in root]


def enumerate_posterior(X, point_stats, prior: TreePrior, likelihood, *, beta: float = 1.0, boxes=None,
                        categorical=None, missing_bits=None) -> dict[str, float]:
    """Exact posterior ``p(T | X, Y) ∝ p(T) p(Y | X, T)**beta`` over every tree (see
    :func:`enumerate_trees`; the CGM98 or the pinball prior by ``prior.structure``); ``beta`` is an
    inverse temperature (1 = the posterior, 0 = the normalised prior); ``boxes`` conditions the
    prior on the box constraints; ``categorical`` and ``missing_bits`` as there.

    Returns
    -------
    dict mapping :func:`bdtree_jax.tree.to_string` strings to probabilities (summing to 1).
    """
    all_trees = enumerate_trees(X, point_stats, prior, likelihood, boxes=boxes, categorical=categorical,
                                missing_bits=missing_bits)
    log_post = np.array([lp + beta * ll for _, lp, ll in all_trees])
    probs = np.exp(log_post - logsumexp(log_post))
    return {s: float(p) for (s, _, _), p in zip(all_trees, probs)}


def enumerate_pcfg_trees(X, point_stats, likelihood, *, log_phi: float = 2.0, max_depth=None,
                         n_buckets=None) -> list[tuple[str, float, list]]:
    """Every tree of the BCART-PCFG prior as ``(string, log weight, leaf row sets)``, by explicit
    recursion over sets of rows (no boxes, no dynamic programming; tiny data only).

    A node's splits are the distinct unordered pairs of non-empty row sets given by a threshold
    on one feature's codes (:func:`bdtree_jax.data.code_features`); each is written with the first
    (feature, threshold) that produces it.  The weight is ``-b(T) log φ + Σ log L(leaf)``, where
    ``L`` is ``likelihood.leaf_log_lik``.  Strings are :func:`bdtree_jax.tree.to_string`'s, with
    the thresholds of :func:`bdtree_jax.data.make_split_grid` on ``X``.
    """
    import jax.numpy as jnp

    X = np.asarray(X, float)
    _require_no_missing(X, "enumerate_pcfg_trees")
    codes, boundary_cut = code_features(X, n_buckets)
    thresholds = make_split_grid(X).thresholds
    stats = np.asarray(point_stats, float)

    def leaf_log_lik(rows):
        return float(likelihood.leaf_log_lik(jnp.asarray(stats[list(rows)].sum(0), jnp.float32)))

    def trees(rows: tuple, depth: int):
        out = [("L", -log_phi + leaf_log_lik(rows), [rows])]
        if max_depth is not None and depth >= max_depth:
            return out
        seen = set()
        for f in range(codes.shape[1]):
            for t in range(int(codes[:, f].max())):
                left = tuple(r for r in rows if codes[r, f] <= t)
                right = tuple(r for r in rows if codes[r, f] > t)
                key = frozenset([left, right])
                if not left or not right or key in seen:
                    continue
                seen.add(key)
                name = f"x{f}<={_fmt(thresholds[f, boundary_cut[f][t]])}"
                for ls, lw, ll in trees(left, depth + 1):
                    for rs, rw, rl in trees(right, depth + 1):
                        out.append((f"{name}({ls},{rs})", lw + rw, ll + rl))
        return out

    return trees(tuple(range(X.shape[0])), 0)


def enumerate_pcfg_posterior(X, point_stats, likelihood, **kw) -> dict[str, float]:
    """Exact BCART-PCFG posterior ``{tree string: probability}`` (see :func:`enumerate_pcfg_trees`)."""
    all_trees = enumerate_pcfg_trees(X, point_stats, likelihood, **kw)
    w = np.array([w for _, w, _ in all_trees])
    probs = np.exp(w - logsumexp(w))
    return {s: float(p) for (s, _, _), p in zip(all_trees, probs)}


def leaf_partition(tree, bins: np.ndarray, *, categorical=None, missing_code=None) -> frozenset:
    """The partition of the rows into leaves, as a frozenset of frozensets of row indices.

    tree : :class:`~bdtree_jax.tree.Tree` (or its arrays ``is_split, feature, cut[, nan_left,
    levels_left]``) of one padded tree.  bins : (n, F) int codes.  A numpy descent (cheap for the
    thousands of trees of a WU fibre, :mod:`bdtree_jax.kernels.wu`).  With categorical features
    (``categorical`` (F,) bool) a row goes left iff bit ``code`` of the node's ``levels_left``
    ((N, W) words, bit ``l`` of word ``l // 32``) is set; a row whose code is ``missing_code``
    goes left iff the node's ``nan_left`` is set (``docs/categorical-missing.md``).
    """
    arrays = list(tree)
    is_split, feature, cut = (np.asarray(a) for a in arrays[:3])
    nan_left, levels_left = (None if a is None else np.asarray(a) for a in (arrays[3:] + [None, None])[:2])
    cat = None if categorical is None else np.asarray(categorical, bool)
    bins = np.asarray(bins)
    rows = np.arange(len(bins))
    leaf = np.zeros(len(bins), int)
    for _ in range(int(np.log2(len(is_split) + 1))):
        split = is_split[leaf]
        f = feature[leaf]
        code = bins[rows, f]
        right = code > cut[leaf]
        if cat is not None and levels_left is not None:
            words = levels_left[leaf, np.minimum(code // 32, levels_left.shape[-1] - 1)].astype(np.int64)
            right = np.where(cat[f], ((words >> (code % 32)) & 1) == 0, right)
        if missing_code is not None and nan_left is not None:
            right = np.where(code == missing_code, ~nan_left[leaf].astype(bool), right)
        leaf = np.where(split, 2 * leaf + 1 + right, leaf)
    return frozenset(frozenset(np.flatnonzero(leaf == i).tolist()) for i in np.unique(leaf))


def tree_frequencies(trees: Tree, thresholds: np.ndarray, weights=None, levels=None) -> dict[str, float]:
    """Visit frequencies ``{tree string: frequency}`` of sampled trees (a Tree of (..., N) arrays,
    any leading axes; fields that are None, or with trailing axes after N such as a levels mask,
    are kept as such), to compare with the exact distributions above (:func:`tv_distance`).
    ``weights`` (same leading shape, optional): importance weights (e.g. SMC particles'),
    normalised over all trees.  ``levels``: per feature, its level labels if categorical, else
    None, passed to :func:`bdtree_jax.tree.to_string` (categorical rules print ``x{f}in{...}``)."""
    cls = type(trees) if hasattr(trees, "_fields") else Tree  # Tree, or a tree type with more fields
    lead = np.ndim(trees[0]) - 1
    flat = cls(*(None if a is None else np.asarray(a).reshape((-1,) + np.shape(a)[lead:]) for a in trees))
    first, inverse, counts = distinct_trees(tuple(a for a in flat if a is not None))
    mass = counts if weights is None else np.bincount(inverse, np.asarray(weights, float).ravel(), len(first))
    out: dict[str, float] = {}
    for i, c in zip(first, mass):  # distinct heaps can print alike (e.g. unused padded slots)
        tree = cls(*(None if a is None else a[i] for a in flat))
        name = to_string(tree, thresholds) if levels is None else to_string(tree, thresholds, levels)
        out[name] = out.get(name, 0.0) + c / mass.sum()
    return out


def tv_distance(p: dict, q: dict) -> float:
    """Total-variation distance between two distributions given as ``{tree string: probability}``."""
    keys = set(p) | set(q)
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in keys)


# ----------------------------------------------------------------------------------------------
# The EDITTREE prior (Angelopoulos & Cussens 2005): K random edits of an initial tree


def _node_depth(i: int) -> int:
    return (i + 1).bit_length() - 1


class _EditModel:
    """The edit process on one data set (numpy; independent of the JAX kernels).

    A tree is a tuple of ``(node, feature, cut)`` of its internal nodes sorted by heap index
    (parents before children); the stump is ``()``.
    """

    def __init__(self, X, prior: TreePrior, boxes=None):
        _require_no_missing(X, "the EDITTREE enumerator")
        self.grid = make_split_grid(X)
        self.bins = self.grid.bin(X)
        self.n, self.F = self.bins.shape
        self.m = prior.min_leaf_size
        self.D = prior.max_depth
        self.split_prior = prior.split_prior
        self.gaps = _gaps(X)
        self.box_list = _box_arrays(boxes, self.F)
        self._regions_cache: dict = {}
        self._valid_cache: dict = {}
        self._edit_cache: dict = {}

    def options(self, rows: np.ndarray) -> dict[int, list[int]]:
        """``{feature: valid cuts}`` of the node holding ``rows`` (features without a cut left out)."""
        out = {f: _valid_cuts(self.bins[rows, f], self.m) for f in range(self.F)}
        return {f: c for f, c in out.items() if c}

    def regions(self, tree: tuple):
        """``(rows, held, cut_box)``: rows (dict node -> row indices) and held boxes (dict node ->
        tuple of box indices) of every active node; ``cut_box`` whether some rule cuts a box."""
        if tree in self._regions_cache:
            return self._regions_cache[tree]
        rows = {0: np.arange(self.n)}
        held = {0: tuple(range(len(self.box_list)))}
        cut_box = False
        for i, f, c in tree:  # sorted by heap index: a parent comes before its children
            r, h = rows[i], held[i]
            t = self.grid.thresholds[f, c]
            if any(self.box_list[k][0][f] < t < self.box_list[k][1][f] for k in h):
                cut_box = True
            rows[2 * i + 1] = r[self.bins[r, f] <= c]
            rows[2 * i + 2] = r[self.bins[r, f] > c]
            held[2 * i + 1] = tuple(k for k in h if self.box_list[k][1][f] <= t)
            held[2 * i + 2] = tuple(k for k in h if self.box_list[k][0][f] >= t)
        out = (rows, held, cut_box)
        self._regions_cache[tree] = out
        return out

    def leaves(self, tree: tuple) -> list[int]:
        internal = {i for i, _, _ in tree}
        if not internal:
            return [0]
        return sorted(j for i in internal for j in (2 * i + 1, 2 * i + 2) if j not in internal)

    def is_valid(self, tree: tuple) -> bool:
        """Every internal node above ``max_depth`` with a parent that splits, its rule among the
        valid cuts of its own rows, and no rule cutting a box."""
        if tree in self._valid_cache:
            return self._valid_cache[tree]
        internal = {i for i, _, _ in tree}
        ok = all(_node_depth(i) < self.D and (i == 0 or (i - 1) // 2 in internal) for i in internal)
        ok = ok and len(internal) == len(tree)
        if ok:
            rows, _, cut_box = self.regions(tree)
            ok = not cut_box and all(c in self.options(rows[i]).get(f, ()) for i, f, c in tree)
        self._valid_cache[tree] = ok
        return ok

    def parse(self, text: str) -> tuple:
        t = from_string(text, self.grid.thresholds, self.D)
        return tuple((int(i), int(t.feature[i]), int(t.cut[i])) for i in np.flatnonzero(t.is_split))

    def to_string(self, tree: tuple) -> str:
        rules = {i: (f, c) for i, f, c in tree}

        def rec(i: int) -> str:
            if i not in rules:
                return "L"
            f, c = rules[i]
            return f"x{f}<={_fmt(self.grid.thresholds[f, c])}({rec(2 * i + 1)},{rec(2 * i + 2)})"

        return rec(0)

    def edit(self, tree: tuple) -> dict[tuple, float]:
        """Distribution ``{T': P(T -> T')}`` of one edit of the valid tree ``tree`` (an invalid
        edited tree is replaced by ``tree`` itself)."""
        if tree in self._edit_cache:
            return self._edit_cache[tree]
        rows, _, _ = self.regions(tree)
        rules = {i: (f, c) for i, f, c in tree}
        grow = [j for j in self.leaves(tree) if _node_depth(j) < self.D and self.options(rows[j])]
        prune = [i for i in rules if 2 * i + 1 not in rules and 2 * i + 2 not in rules]
        change = sorted(rules)
        moves = [(kind, targets) for kind, targets in (("grow", grow), ("prune", prune), ("change", change)) if targets]
        out: dict[tuple, float] = {}

        def add(new_rules: dict, p: float) -> None:
            new = tuple(sorted((i, f, c) for i, (f, c) in new_rules.items()))
            if not self.is_valid(new):
                new = tree
            out[new] = out.get(new, 0.0) + p

        if not moves:  # the stump of a node with no valid cut: nothing to edit
            out[tree] = 1.0
        for kind, targets in moves:
            p_node = 1.0 / len(moves) / len(targets)
            for node in targets:
                if kind == "prune":
                    add({i: r for i, r in rules.items() if i != node}, p_node)
                    continue
                opts = self.options(rows[node])
                for f, cuts in opts.items():
                    if self.split_prior == "uniform":
                        probs = [p_node / len(opts) / len(cuts)] * len(cuts)
                    else:
                        log_p = _cut_log_probs(self.gaps[f], cuts, "range")
                        probs = [p_node / len(opts) * math.exp(lp) for lp in log_p]
                    for c, p_cut in zip(cuts, probs):
                        add({**rules, node: (f, c)}, p_cut)
        self._edit_cache[tree] = out
        return out


def _edit_prior_trees(X, prior: TreePrior, initial_tree: str, mean_edits: float, max_edits: int, boxes):
    """``(model, {internal tree: probability})`` of the EDITTREE prior."""
    if not (math.isfinite(float(mean_edits)) and float(mean_edits) >= 0.0):
        raise ValueError(f"mean_edits must be >= 0; got {mean_edits!r}.")
    if not is_int(max_edits) or max_edits < 0:
        raise ValueError(f"max_edits must be an integer >= 0; got {max_edits!r}.")
    model = _EditModel(X, prior, boxes)
    try:
        t0 = model.parse(initial_tree)
    except (ValueError, AssertionError, IndexError) as err:
        raise ValueError(
            f"initial_tree {initial_tree!r} cannot be parsed for max_depth={prior.max_depth}: {err}"
        ) from err
    if not model.is_valid(t0):
        raise ValueError(
            f"initial_tree {initial_tree!r} is not valid: some rule is not a valid cut of its node's rows "
            f"(min_leaf_size={prior.min_leaf_size}) or cuts a box."
        )
    q = float(mean_edits) / (1.0 + float(mean_edits))
    p_k = np.array([q**k for k in range(int(max_edits) + 1)])
    p_k = p_k / p_k.sum()
    dist = {t0: 1.0}
    total: dict[tuple, float] = {}
    for k in range(int(max_edits) + 1):
        if p_k[k] > 0:
            for t, p in dist.items():
                total[t] = total.get(t, 0.0) + p_k[k] * p
        if k == max_edits:
            break
        new: dict[tuple, float] = {}
        for t, p in dist.items():
            for t2, p2 in model.edit(t).items():
                new[t2] = new.get(t2, 0.0) + p * p2
        dist = new
    s = sum(total.values())
    return model, {t: p / s for t, p in total.items() if p > 0}


def enumerate_edit_prior(X, prior: TreePrior, initial_tree: str, *, mean_edits: float, max_edits: int,
                         boxes=None) -> dict[str, float]:
    """Exact EDITTREE prior (Angelopoulos & Cussens 2005): the tree after ``K`` random edits of
    ``initial_tree``, ``P(K = k) ∝ q**k`` (``q = mean_edits / (1 + mean_edits)``, ``k = 0..max_edits``).

    One edit of a tree: a move uniform among grow / prune / change that have a target (grow: leaves
    above ``max_depth`` with a valid cut; prune: internal nodes with two leaf children; change: all
    internal nodes), a node uniform among the move's targets, and (grow, change) a rule drawn from
    the node's rows as in the CGM98 prior (a feature uniform among those with a valid cut, then a cut
    among its valid cuts by the prior's ``split_prior``).  A change keeps the node's subtrees.  An
    edit giving an invalid
    tree (a rule not among the valid cuts of its node's rows, or cutting a box) leaves the tree
    unchanged; so does an edit of a stump whose root has no valid cut.  Computed by an exact forward
    pass over the distributions after ``k`` edits.

    Parameters
    ----------
    X : (n, F) raw inputs (candidates from :func:`bdtree_jax.data.make_split_grid`).
    prior : TreePrior — only ``max_depth``, ``min_leaf_size`` and ``split_prior`` are used.
    initial_tree : a :func:`bdtree_jax.tree.to_string` string (thresholds matched to the nearest
        candidate); must be valid, else ``ValueError``.
    mean_edits : float >= 0; max_edits : int >= 0.
    boxes : box constraints as in :func:`enumerate_trees`.

    Returns
    -------
    dict mapping :func:`bdtree_jax.tree.to_string` strings (as in :func:`enumerate_trees`) to
    probabilities summing to 1 (trees of positive probability only).
    """
    model, probs = _edit_prior_trees(X, prior, initial_tree, mean_edits, max_edits, boxes)
    return {model.to_string(t): float(p) for t, p in probs.items()}


def enumerate_edit_posterior(X, point_stats, prior: TreePrior, likelihood, initial_tree: str, *, mean_edits: float,
                             max_edits: int, boxes=None, beta: float = 1.0) -> dict[str, float]:
    """Exact posterior ``∝ p_edit(T) p(Y | X, T)**beta`` under the EDITTREE prior of
    :func:`enumerate_edit_prior`; ``point_stats`` (n, S) rows of ``likelihood.point_stats(y)``; the
    marginal likelihood is :func:`enumerate_trees`'s.  Returns ``{tree string: probability}``."""
    model, probs = _edit_prior_trees(X, prior, initial_tree, mean_edits, max_edits, boxes)
    point_stats = np.asarray(point_stats, float)
    names, logs = [], []
    for t, p in probs.items():
        rows, _, _ = model.regions(t)
        leaves = [_leaf_terms(likelihood, point_stats[rows[j]].sum(0)) for j in model.leaves(t)]
        names.append(model.to_string(t))
        logs.append(math.log(p) + beta * _total_log_lik(likelihood, leaves))
    logs = np.array(logs)
    post = np.exp(logs - logsumexp(logs))
    return {s: float(p) for s, p in zip(names, post)}
