"""The padded decision tree: a fixed-size heap of arrays and pure operations on it.

Layout
------
A tree of maximum depth ``D`` is stored as a 0-based heap of ``N = 2**(D+1) - 1`` slots: node ``i``
has children ``2i+1`` (left, ``x_f <= t``) and ``2i+2`` (right) and parent ``(i-1)//2``; node ``i``
sits at depth ``floor(log2(i+1))``.  Nodes at depth ``D`` can only be leaves.  A node is *active*
when all its ancestors split; an active node that does not split is a *leaf*.

Splits are stored as ``(feature, cut)`` where ``cut`` indexes the feature's sorted candidate
thresholds (midpoints between consecutive distinct training values; see :mod:`bdtree_jax.data`).
With inputs coded as bins (``bin = #thresholds strictly below x``), ``x_f <= threshold[f, c]`` is
exactly ``bin_f <= c``, so the same integer comparison serves training and prediction.

Categorical features and missing values (docs/categorical-missing.md) add two optional fields:
``levels_left`` (the levels a categorical rule sends left, a bit mask) and ``nan_left`` (where a
missing value goes).  Trees of data without them carry ``None`` there, and every function below
then does exactly what it did before these fields existed.

Unused slots are canonical: ``is_split=False``, ``feature=0``, ``cut=0`` (and no level bits,
``nan_left=False``).  Every function here works on a single tree; ``vmap`` it over chains or draws.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ._types import Array

__all__ = [
    "MAX_DEPTH",
    "Tree",
    "MixedTree",
    "make_tree",
    "distinct_trees",
    "over_draws",
    "empty_tree",
    "n_nodes",
    "node_depths",
    "active_nodes",
    "leaf_nodes",
    "in_subtree",
    "nog_nodes",
    "grow",
    "prune",
    "change",
    "swap",
    "leaf_index",
    "Rule",
    "rule_at",
    "set_rule",
    "goes_left",
    "level_words",
    "MISSING_CODE",
    "n_leaves",
    "tree_depth",
    "to_string",
    "from_string",
    "tree_text",
    "plot_tree",
]


class Tree(NamedTuple):
    """A padded heap tree (one tree; leading axes may be added for chains/draws).

    Attributes
    ----------
    is_split : (N,) bool
        Whether the node splits.  False for leaves and unused slots.
    feature : (N,) int32
        Split feature of splitting nodes, 0 elsewhere.
    cut : (N,) int32
        Index of the split threshold among the feature's candidates, 0 elsewhere.

    ``nan_left`` and ``levels_left`` are None: trees with those fields are :class:`MixedTree`.
    """

    is_split: Array
    feature: Array
    cut: Array

    @property
    def nan_left(self) -> None:
        return None

    @property
    def levels_left(self) -> None:
        return None


class MixedTree(NamedTuple):
    """A padded heap tree over data with categorical features or missing values
    (docs/categorical-missing.md): :class:`Tree`'s fields and two more.

    Attributes
    ----------
    is_split, feature : as :class:`Tree`.
    cut : (N,) int32 as :class:`Tree` at rules on ordered features, 0 at rules on categorical ones.
    nan_left : (N,) bool or None
        Whether a row whose value of the node's feature is missing goes left (None when the model
        has no missing-value bits).
    levels_left : (N, W) uint32 or None
        At a rule on a categorical feature, the levels that go left (bit ``l % 32`` of word
        ``l // 32``; never empty); 0 elsewhere.  None when no feature is categorical.
    """

    is_split: Array
    feature: Array
    cut: Array
    nan_left: Array | None = None
    levels_left: Array | None = None


def make_tree(is_split, feature, cut, nan_left=None, levels_left=None):
    """A :class:`Tree`, or a :class:`MixedTree` when ``nan_left`` or ``levels_left`` is given."""
    if nan_left is None and levels_left is None:
        return Tree(is_split, feature, cut)
    return MixedTree(is_split, feature, cut, nan_left, levels_left)


#: The deepest padded tree any sampler stores.  A tree of depth ``D`` is a heap of
#: ``2**(D+1) - 1`` slots held in every chain's state, every particle and every kept draw, so its
#: memory doubles with each level whatever the tree's actual size.  At 14 a slot's index still
#: fits an int16 (32,767 slots; BART keeps its rows' leaves as int16 slots) and a tree holds up to
#: 16,384 leaves, more than a prior with ``min_leaf_size`` rows per leaf can fill below 16,384
#: rows; one kept draw is then about 100 kB.  Deeper than this the heap is mostly empty padding
#: (depth 20: 2 million slots, 8 MB a draw; depth 30: 2 billion, 8 GB a draw).
MAX_DEPTH = 14


def n_nodes(max_depth: int) -> int:
    """Number of heap slots ``2**(max_depth+1) - 1``."""
    return 2 ** (max_depth + 1) - 1


def max_depth_of(tree: Tree) -> int:
    """The ``max_depth`` a padded tree was built for (from its static size)."""
    return int(np.log2(tree.is_split.shape[-1] + 1)) - 1


def node_depths(max_depth: int) -> np.ndarray:
    """Depth of every heap slot, shape (N,) int32."""
    return np.floor(np.log2(np.arange(n_nodes(max_depth)) + 1)).astype(np.int32)


def empty_tree(max_depth: int, nan_bits: bool = False, level_words: int = 0) -> Tree:
    """The stump (root is a leaf) of size ``n_nodes(max_depth)``; ``nan_bits``: with a
    ``nan_left`` field, ``level_words`` > 0: with a ``levels_left`` field of that many words."""
    n = n_nodes(max_depth)
    return make_tree(jnp.zeros(n, bool), jnp.zeros(n, jnp.int32), jnp.zeros(n, jnp.int32),
                     jnp.zeros(n, bool) if nan_bits else None,
                     jnp.zeros((n, level_words), jnp.uint32) if level_words else None)


#: The code of a missing value (and of a level not seen in training) among the int32 codes of the
#: inputs: larger than any bin or level, so ``code <= cut`` sends it right unless ``nan_left``.
MISSING_CODE = 2**31 - 1


def level_words(level_count) -> int:
    """Words of a ``levels_left`` mask for categorical features of at most ``max(level_count)``
    levels (0: no categorical feature)."""
    top = int(np.max(np.asarray(level_count), initial=0)) if level_count is not None else 0
    return -(-top // 32)


class Rule(NamedTuple):
    """A node's split rule: ``feature``, ``cut`` () int32, and the optional ``nan_left`` () bool and
    ``levels_left`` (W,) uint32 (None when the tree has no such field)."""

    feature: Array
    cut: Array
    nan_left: Array | None = None
    levels_left: Array | None = None


def rule_at(tree: Tree, node: Array) -> Rule:
    """The rule stored at ``node``."""
    return Rule(*(None if a is None else a[node] for a in tree[1:]))


def set_rule(tree: Tree, node: Array, rule: Rule | None, split: Array | bool = True) -> Tree:
    """``tree`` with ``node``'s split flag set to ``split`` and its rule to ``rule`` (canonical
    zeros where ``split`` is false or ``rule`` is None)."""
    split = jnp.asarray(split)

    def put(a, v):
        if a is None:
            return None
        v = jnp.zeros(a.shape[1:], a.dtype) if v is None else jnp.asarray(v).astype(a.dtype)
        return a.at[node].set(jnp.where(split, v, jnp.zeros_like(v)))

    fields = (None, None, None, None) if rule is None else tuple(rule)
    return make_tree(tree.is_split.at[node].set(split), *(put(a, v) for a, v in zip(tree[1:], fields)))


def goes_left(code: Array, rule: Rule) -> Array:
    """Whether rows with ``code`` (any shape: their codes of the rule's feature) go left under
    ``rule`` (broadcasting): the level's bit for a rule on a categorical feature (whose left set
    is never empty; an ordered feature's rule has no level bits), else ``code <= cut``; and
    ``nan_left`` for a missing value (:data:`MISSING_CODE`)."""
    left = code <= rule.cut
    if rule.levels_left is not None:
        words = rule.levels_left.shape[-1]
        word = jnp.clip(code >> 5, 0, words - 1).astype(jnp.int32)
        bits = jnp.take_along_axis(rule.levels_left, word[..., None], axis=-1)[..., 0] if rule.levels_left.ndim > 1 \
            else rule.levels_left[word]
        in_set = ((bits >> (code & 31).astype(jnp.uint32)) & 1) == 1
        left = jnp.where(jnp.any(rule.levels_left != 0, axis=-1), in_set, left)
    if rule.nan_left is not None:
        left = jnp.where(code == MISSING_CODE, rule.nan_left, left)
    return left


def active_nodes(tree: Tree) -> Array:
    """(N,) bool: node exists (all its ancestors split).  Level by level, each level's slots
    repeating their parents' ``active & is_split`` (no gather: cheap when vmapped over trees)."""
    is_split = tree.is_split
    levels = [jnp.ones(is_split.shape[:-1] + (1,), bool)]
    for d in range(max_depth_of(tree)):
        parents = levels[-1] & is_split[..., 2**d - 1 : 2 ** (d + 1) - 1]
        levels.append(jnp.repeat(parents, 2, axis=-1))
    return jnp.concatenate(levels, axis=-1)


def in_subtree(root: Array, max_depth: int) -> Array:
    """(N,) bool: the heap slots below ``root`` (() int32), ``root`` included."""
    depth = jnp.asarray(node_depths(max_depth))
    below = depth - depth[root]  # levels under the root's (negative: above it)
    idx = jnp.arange(depth.shape[0], dtype=jnp.int32)
    return (below >= 0) & (((idx + 1) >> jnp.maximum(below, 0)) - 1 == root)


def leaf_nodes(tree: Tree) -> Array:
    """(N,) bool: active nodes that do not split."""
    return active_nodes(tree) & ~tree.is_split


def _children_split(tree: Tree) -> tuple[Array, Array]:
    """(N,) bool each: whether the left / right child splits (False below depth D).  Strided
    slices (children ``2i+1``, ``2i+2`` of the first ``(N - 1) / 2`` slots), no gather."""
    is_split = tree.is_split
    n = is_split.shape[-1]
    pad = jnp.zeros(is_split.shape[:-1] + (n - (n - 1) // 2,), bool)
    return (jnp.concatenate([is_split[..., 1::2], pad], axis=-1),
            jnp.concatenate([is_split[..., 2::2], pad], axis=-1))


def nog_nodes(tree: Tree) -> Array:
    """(N,) bool: splitting nodes whose two children are leaves ("nogs", prunable)."""
    left, right = _children_split(tree)
    return tree.is_split & ~left & ~right


def grow(tree: Tree, node: Array, feature: Array, cut: Array, rule: Rule | None = None) -> Tree:
    """Split leaf ``node`` on ``(feature, cut)`` (or the full ``rule``); the caller guarantees
    ``node`` is a growable leaf."""
    if rule is not None or tree.nan_left is not None or tree.levels_left is not None:
        return set_rule(tree, node, rule if rule is not None else Rule(feature, cut))
    return Tree(
        tree.is_split.at[node].set(True),
        tree.feature.at[node].set(feature),
        tree.cut.at[node].set(cut),
    )


def prune(tree: Tree, node: Array) -> Tree:
    """Turn nog ``node`` into a leaf (its two leaf children disappear)."""
    if tree.nan_left is not None or tree.levels_left is not None:
        return set_rule(tree, node, None, False)
    return Tree(
        tree.is_split.at[node].set(False),
        tree.feature.at[node].set(0),
        tree.cut.at[node].set(0),
    )


def change(tree: Tree, node: Array, feature: Array, cut: Array, rule: Rule | None = None) -> Tree:
    """Replace the rule of splitting ``node`` by ``(feature, cut)`` (or the full ``rule``)."""
    if rule is not None or tree.nan_left is not None or tree.levels_left is not None:
        return set_rule(tree, node, rule if rule is not None else Rule(feature, cut), tree.is_split[node])
    return Tree(tree.is_split, tree.feature.at[node].set(feature), tree.cut.at[node].set(cut))


def swap(tree: Tree, child: Array) -> Tree:
    """Swap the rule of splitting ``child`` with its parent's (CGM98's SWAP).

    If both children of the parent split with the same rule, the parent's rule is swapped with
    both children's, as in CGM98.
    """
    parent = (child - 1) // 2
    sibling = jnp.where(child % 2 == 1, child + 1, child - 1)
    if tree.nan_left is not None or tree.levels_left is not None:
        return _swap_rules(tree, parent, child, sibling)
    same = (
        tree.is_split[sibling]
        & (tree.feature[sibling] == tree.feature[child])
        & (tree.cut[sibling] == tree.cut[child])
    )
    pf, pc = tree.feature[parent], tree.cut[parent]
    cf, cc = tree.feature[child], tree.cut[child]
    feature = tree.feature.at[parent].set(cf).at[child].set(pf)
    cut = tree.cut.at[parent].set(cc).at[child].set(pc)
    feature = feature.at[sibling].set(jnp.where(same, pf, feature[sibling]))
    cut = cut.at[sibling].set(jnp.where(same, pc, cut[sibling]))
    return Tree(tree.is_split, feature, cut)


def _swap_rules(tree: Tree, parent: Array, child: Array, sibling: Array) -> Tree:
    """:func:`swap` for trees with missing-value bits or level masks (every rule field)."""
    same = tree.is_split[sibling]
    for a in tree[1:]:
        if a is not None:
            same = same & jnp.all(jnp.atleast_1d(a[sibling] == a[child]))

    def swapped(a):
        if a is None:
            return None
        out = a.at[parent].set(a[child]).at[child].set(a[parent])
        return out.at[sibling].set(jnp.where(same, a[parent], out[sibling]))

    return make_tree(tree.is_split, *(swapped(a) for a in tree[1:]))


def leaf_index(tree: Tree, bins: Array, max_cut: int | None = None, start: Array | None = None) -> Array:
    """Hard leaf assignment.

    Parameters
    ----------
    tree : Tree
    bins : (n, F) int32 bin codes of the inputs.
    max_cut : static bound on the tree's cut indices (e.g. the number of training rows).  When
        given, each node's rule is packed into one integer (feature in the high bits, cut in the
        low ones) so a level of the descent costs two gathers instead of three (it matters for
        batched chains); otherwise the generic path.
    start : (n,) int32 node each row descends from (default: the root), e.g. a subtree's root
        for the rows below it and their leaf for the others.

    Returns
    -------
    (n,) int32 heap index of each row's leaf.
    """
    d = max_depth_of(tree)
    n, n_features = bins.shape
    flat = bins.reshape(-1)
    row_offset = jnp.arange(n, dtype=jnp.int32) * n_features
    node = jnp.zeros(n, jnp.int32) if start is None else start.astype(jnp.int32)
    shift = None if max_cut is None else max(int(max_cut), 1).bit_length()
    if tree.nan_left is not None or tree.levels_left is not None:

        def descend(node):
            rule = rule_at(tree, node)
            left = goes_left(flat[row_offset + rule.feature], rule)
            return jnp.where(tree.is_split[node], 2 * node + 1 + (~left).astype(jnp.int32), node)
    elif shift is not None and n_features << shift < 2**31:
        code = jnp.where(tree.is_split, (tree.feature.astype(jnp.int32) << shift) + tree.cut, -1)  # -1: leaf
        mask = (1 << shift) - 1

        def descend(node):
            c = code[node]
            go_right = flat[row_offset + (c >> shift)] > (c & mask)
            return jnp.where(c >= 0, 2 * node + 1 + go_right.astype(jnp.int32), node)
    else:
        cut = jnp.where(tree.is_split, tree.cut, -1)

        def descend(node):
            c = cut[node]
            go_right = flat[row_offset + tree.feature[node]] > c
            return jnp.where(c >= 0, 2 * node + 1 + go_right.astype(jnp.int32), node)

    for _ in range(d):
        node = descend(node)
    return node


def n_leaves(tree: Tree) -> Array:
    """() int32 number of leaves."""
    return leaf_nodes(tree).sum().astype(jnp.int32)


def tree_depth(tree: Tree) -> Array:
    """() int32 depth of the deepest leaf (0 for the stump)."""
    depths = jnp.asarray(node_depths(max_depth_of(tree)))
    return jnp.max(jnp.where(leaf_nodes(tree), depths, 0)).astype(jnp.int32)


def tree_summaries(is_split: Array) -> tuple[Array, Array]:
    """:func:`n_leaves` and :func:`tree_depth` of a stack of trees, level by level (no gathers).

    is_split : (..., N) bool.  Returns two int32 arrays of shape ``(...)``.  The sampling driver
    derives these per-iteration statistics from a block's recorded trees in one vectorized pass
    after the block's step loop, so the loop does not compute them every step.
    """
    n = is_split.shape[-1]
    active = jnp.ones(is_split.shape[:-1] + (1,), bool)
    count = jnp.zeros(is_split.shape[:-1], jnp.int32)
    depth = jnp.zeros(is_split.shape[:-1], jnp.int32)
    for d in range(int(np.log2(n + 1))):
        splits = is_split[..., 2**d - 1 : 2 ** (d + 1) - 1]
        leaf = active & ~splits
        count = count + leaf.sum(-1, dtype=jnp.int32)
        depth = jnp.where(leaf.any(-1), d, depth)
        active = jnp.repeat(active & splits, 2, axis=-1)
    return count, depth


# ----------------------------------------------------------------------------------------------
# Host-side export (numpy; one tree at a time)


def _fmt(t: float) -> str:
    return format(float(t), ".10g")


def distinct_trees(trees: Tree) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct trees among draws (byte-identical padded heaps).

    trees : Tree of (D, N) arrays (D draws).

    Returns
    -------
    first : (U,) index of each distinct tree's first draw; inverse : (D,) which distinct tree each
    draw is; counts : (U,) draws per distinct tree.
    """
    rows = np.concatenate(
        [np.ascontiguousarray(np.asarray(a)).reshape(np.shape(a)[0], -1).view(np.uint8) for a in trees if a is not None],
        axis=1
    )
    keys = np.ascontiguousarray(rows).view(np.dtype((np.void, rows.shape[1]))).ravel()  # one byte string per draw
    _, first, inverse, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
    return first, inverse.ravel(), counts


def over_draws(program, trees, idx: np.ndarray, chunk: int = 256):
    """Run a jitted per-draw ``program(draws, trees_of_draws)`` over the draws ``idx`` of the flat
    ``trees`` (a pytree of arrays with a leading draw axis) in chunks of one fixed size (the last
    padded with its first draw, so it compiles once); returns its outputs (a pytree) for ``idx``
    concatenated along the draw axis."""
    outs = []
    for s in range(0, len(idx), chunk):
        sel = idx[s : s + chunk]
        pad = np.concatenate([sel, np.full(chunk - len(sel), sel[0])])
        res = program(pad, jax.tree.map(lambda a: jnp.asarray(np.asarray(a)[pad]), trees))
        outs.append(jax.tree.map(lambda r: np.asarray(r)[: len(sel)], res))
    return jax.tree.map(lambda *xs: np.concatenate(xs, axis=0), *outs)


def to_string(tree: Tree, thresholds: np.ndarray, levels: Sequence | None = None,
              feature_names: Sequence[str] | None = None) -> str:
    """The tree in the library's canonical grammar.

    Leaf ``L``; split ``x{f}<={t}({left},{right})`` where the left child holds ``x_f <= t``.

    Parameters
    ----------
    tree : Tree of numpy or jax arrays, one tree.
    thresholds : (F, C) float array, ``thresholds[f, c]`` is cut ``c`` of feature ``f``.
    levels : per feature, its level labels if it is categorical, else None (the grid's
        ``levels``); categorical rules print ``x{f}in{a,b}`` with the left levels' indices, and a
        tree with missing-value bits appends ``|NA=L`` or ``|NA=R`` to every rule.
    feature_names : (F,) names, optional
        Write each rule with the feature's name for ``x{f}`` and a categorical rule with its left
        levels' labels for their indices (``petal_length<=2.45(L,L)``, ``island in{Dream}``): the
        same grammar for people to read; :func:`from_string` parses only the index form.

    Examples
    --------
    >>> import numpy as np
    >>> t = Tree(np.array([True, False, False]), np.array([1, 0, 0]), np.array([0, 0, 0]))
    >>> to_string(t, np.array([[0.5], [2.5]]))
    'x1<=2.5(L,L)'
    """
    is_split = np.asarray(tree.is_split)

    def rec(i: int) -> str:
        if not is_split[i]:
            return "L"
        return f"{_rule_string(tree, i, thresholds, levels, feature_names)}({rec(2 * i + 1)},{rec(2 * i + 2)})"

    return rec(0)


def _is_categorical(levels, f: int) -> bool:
    return levels is not None and levels[f] is not None


def _left_levels(tree: Tree, i: int) -> list[int]:
    """The level indices the rule at node ``i`` sends left (its ``levels_left`` bits)."""
    words = np.asarray(tree.levels_left)[i].astype(np.uint64)
    return [32 * w + b for w in range(len(words)) for b in range(32) if (int(words[w]) >> b) & 1]


def _rule_string(tree: Tree, i: int, thresholds, levels, names=None) -> str:
    """The canonical text of node ``i``'s rule (docs/categorical-missing.md, "Tree strings"); with
    ``names``, the feature's name and the left levels' labels in place of their indices."""
    f = int(np.asarray(tree.feature)[i])
    var = f"x{f}" if names is None else str(names[f])
    if _is_categorical(levels, f):
        left = _left_levels(tree, i)
        text = f"x{f}in{{{','.join(map(str, left))}}}" if names is None else \
            f"{var} in{{{','.join(str(levels[f][lv]) for lv in left)}}}"
    else:
        text = f"{var}<={_fmt(thresholds[f, int(np.asarray(tree.cut)[i])])}"
    if tree.nan_left is not None:
        text += "|NA=L" if bool(np.asarray(tree.nan_left)[i]) else "|NA=R"
    return text


def from_string(text: str, thresholds: np.ndarray, max_depth: int, level_count=None) -> Tree:
    """Parse :func:`to_string` output back into a padded tree (numpy arrays).

    Thresholds are matched to the nearest candidate of the feature.  ``level_count`` (F,): the
    categorical features' level counts (0 for ordered), which size the ``levels_left`` field of
    a string with categorical rules; a string with ``|NA=`` gives a tree with ``nan_left``.
    """
    n = n_nodes(max_depth)
    is_split = np.zeros(n, bool)
    feature = np.zeros(n, np.int32)
    cut = np.zeros(n, np.int32)
    nan_left = np.zeros(n, bool) if "|NA=" in text else None
    words = level_words(level_count) if level_count is not None else (1 if "in{" in text else 0)
    levels_left = np.zeros((n, words), np.uint32) if words else None
    pos = 0

    def rec(i: int) -> None:
        nonlocal pos
        if text[pos] == "L":
            pos += 1
            return
        if i >= n or 2 * i + 1 >= n:
            raise ValueError(f"tree string is deeper than max_depth={max_depth}: {text!r}")
        end = text.index("(", pos)
        rule = text[pos + 1 : end]
        if "|NA=" in rule:
            rule, side = rule.split("|NA=")
            nan_left[i] = side == "L"
        if "in{" in rule:
            lhs, body = rule.split("in{")
            f = int(lhs)
            for lv in (int(v) for v in body.rstrip("}").split(",") if v):
                levels_left[i, lv // 32] |= np.uint32(1 << (lv % 32))
            c = 0
        else:
            lhs, t = rule.split("<=")
            f = int(lhs)
            row = np.asarray(thresholds[f], float)
            c = int(np.nanargmin(np.abs(np.where(np.isfinite(row), row, np.nan) - float(t))))
        is_split[i], feature[i], cut[i] = True, f, c
        pos = end + 1
        rec(2 * i + 1)
        assert text[pos] == ","
        pos += 1
        rec(2 * i + 2)
        assert text[pos] == ")"
        pos += 1

    rec(0)
    if pos != len(text):
        raise ValueError(f"trailing characters in tree string {text!r}")
    return make_tree(is_split, feature, cut, nan_left, levels_left)


def _rule_text(tree: Tree, i: int, thresholds, levels, names) -> tuple[str, str]:
    """Human-readable left and right conditions of node ``i``'s rule."""
    f = int(np.asarray(tree.feature)[i])
    name = names[f] if names is not None else f"x{f}"
    if _is_categorical(levels, f):
        left = set(_left_levels(tree, i))
        labels = [str(v) for v in levels[f]]
        inside = [lab for k, lab in enumerate(labels) if k in left]
        outside = [lab for k, lab in enumerate(labels) if k not in left]
        texts = [f"{name} in {{{', '.join(inside)}}}", f"{name} in {{{', '.join(outside)}}}"]
    else:
        t = _fmt(thresholds[f, int(np.asarray(tree.cut)[i])])
        texts = [f"{name} <= {t}", f"{name} > {t}"]
    if tree.nan_left is not None:
        if bool(np.asarray(tree.nan_left)[i]):
            texts[0] += " (NA→left)"
        else:
            texts[1] += " (NA→right)"
    return texts[0], texts[1]


def tree_text(
    tree: Tree,
    thresholds: np.ndarray,
    feature_names: Sequence[str] | None = None,
    leaf_labels: Sequence[str] | None = None,
    levels: Sequence | None = None,
) -> str:
    """Indented, human-readable text of one tree.

    ``leaf_labels`` (optional) maps heap index -> label printed at that leaf; ``levels`` (the
    grid's): categorical rules print ``color in {E, F, G}``, and a missing value's side is
    written ``NA→left`` / ``NA→right``.
    """
    is_split = np.asarray(tree.is_split)
    names = list(feature_names) if feature_names is not None else None
    lines: list[str] = []

    def rec(i: int, indent: str) -> None:
        if not is_split[i]:
            label = f": {leaf_labels[i]}" if leaf_labels is not None else ""
            lines.append(f"{indent}leaf {i}{label}")
            return
        left, right = _rule_text(tree, i, thresholds, levels, names)
        lines.append(f"{indent}{left}")
        rec(2 * i + 1, indent + "|   ")
        lines.append(f"{indent}{right}")
        rec(2 * i + 2, indent + "|   ")

    rec(0, "")
    return "\n".join(lines)


def plot_tree(
    tree: Tree,
    thresholds: np.ndarray,
    feature_names: Sequence[str] | None = None,
    leaf_labels: Sequence[str] | None = None,
    ax=None,
    levels: Sequence | None = None,
):
    """Draw one tree with matplotlib: :func:`bdtree_jax.plots.draw_tree` (each split labelled
    with its rule, the edges ``yes`` / ``no`` and the missing-value side); returns the Axes."""
    from .plots import draw_tree

    names = list(feature_names) if feature_names is not None else None
    is_split = np.asarray(tree.is_split)
    rules = {int(i): _node_rule(tree, i, thresholds, levels, names) for i in np.flatnonzero(is_split)}
    return draw_tree(is_split, rules, leaf_labels, ax=ax)


def _node_rule(tree, i: int, thresholds, levels, names) -> tuple[str, str, str]:
    """Node ``i``'s rule as drawn, ``(text, left edge, right edge)``: ``name <= t`` (the data's
    units) or ``name in {a, b}`` (the levels that go left), the edges ``yes`` / ``no`` with
    ``+ NA`` on the side a missing value takes (trees with missing-value bits)."""
    text = _rule_text(tree, i, thresholds, levels, names)[0].split(" (NA")[0]
    left, right = "yes", "no"
    if tree.nan_left is not None:
        if bool(np.asarray(tree.nan_left)[i]):
            left += " + NA"
        else:
            right += " + NA"
    return text, left, right

