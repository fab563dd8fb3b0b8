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

Unused slots are canonical: ``is_split=False``, ``feature=0``, ``cut=0``.  Every function here
works on a single tree; ``vmap`` it over chains or draws.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ._types import Array

__all__ = [
    "Tree",
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
    """

    is_split: Array
    feature: Array
    cut: Array


def n_nodes(max_depth: int) -> int:
    """Number of heap slots ``2**(max_depth+1) - 1``."""
    return 2 ** (max_depth + 1) - 1


def max_depth_of(tree: Tree) -> int:
    """The ``max_depth`` a padded tree was built for (from its static size)."""
    return int(np.log2(tree.is_split.shape[-1] + 1)) - 1


def node_depths(max_depth: int) -> np.ndarray:
    """Depth of every heap slot, shape (N,) int32."""
    return np.floor(np.log2(np.arange(n_nodes(max_depth)) + 1)).astype(np.int32)


def empty_tree(max_depth: int) -> Tree:
    """The stump (root is a leaf) of size ``n_nodes(max_depth)``."""
    n = n_nodes(max_depth)
    return Tree(jnp.zeros(n, bool), jnp.zeros(n, jnp.int32), jnp.zeros(n, jnp.int32))


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


def grow(tree: Tree, node: Array, feature: Array, cut: Array) -> Tree:
    """Split leaf ``node`` on ``(feature, cut)``; the caller guarantees ``node`` is a growable leaf."""
    return Tree(
        tree.is_split.at[node].set(True),
        tree.feature.at[node].set(feature),
        tree.cut.at[node].set(cut),
    )


def prune(tree: Tree, node: Array) -> Tree:
    """Turn nog ``node`` into a leaf (its two leaf children disappear)."""
    return Tree(
        tree.is_split.at[node].set(False),
        tree.feature.at[node].set(0),
        tree.cut.at[node].set(0),
    )


def change(tree: Tree, node: Array, feature: Array, cut: Array) -> Tree:
    """Replace the rule of splitting ``node``."""
    return Tree(tree.is_split, tree.feature.at[node].set(feature), tree.cut.at[node].set(cut))


def swap(tree: Tree, child: Array) -> Tree:
    """Swap the rule of splitting ``child`` with its parent's (CGM98's SWAP).

    If both children of the parent split with the same rule, the parent's rule is swapped with
    both children's, as in CGM98.
    """
    parent = (child - 1) // 2
    sibling = jnp.where(child % 2 == 1, child + 1, child - 1)
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
    if shift is not None and n_features << shift < 2**31:
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
        [np.ascontiguousarray(np.asarray(a)).reshape(np.shape(a)[0], -1).view(np.uint8) for a in trees], axis=1
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


def to_string(tree: Tree, thresholds: np.ndarray) -> str:
    """The tree in the library's canonical grammar.

    Leaf ``L``; split ``x{f}<={t}({left},{right})`` where the left child holds ``x_f <= t``.

    Parameters
    ----------
    tree : Tree of numpy or jax arrays, one tree.
    thresholds : (F, C) float array, ``thresholds[f, c]`` is cut ``c`` of feature ``f``.

    Examples
    --------
    >>> import numpy as np
    >>> t = Tree(np.array([True, False, False]), np.array([1, 0, 0]), np.array([0, 0, 0]))
    >>> to_string(t, np.array([[0.5], [2.5]]))
    'x1<=2.5(L,L)'
    """
    is_split = np.asarray(tree.is_split)
    feature = np.asarray(tree.feature)
    cut = np.asarray(tree.cut)

    def rec(i: int) -> str:
        if not is_split[i]:
            return "L"
        f = int(feature[i])
        return f"x{f}<={_fmt(thresholds[f, cut[i]])}({rec(2 * i + 1)},{rec(2 * i + 2)})"

    return rec(0)


def from_string(text: str, thresholds: np.ndarray, max_depth: int) -> Tree:
    """Parse :func:`to_string` output back into a padded tree (numpy arrays).

    Thresholds are matched to the nearest candidate of the feature.
    """
    n = n_nodes(max_depth)
    is_split = np.zeros(n, bool)
    feature = np.zeros(n, np.int32)
    cut = np.zeros(n, np.int32)
    pos = 0

    def rec(i: int) -> None:
        nonlocal pos
        if text[pos] == "L":
            pos += 1
            return
        if i >= n or 2 * i + 1 >= n:
            raise ValueError(f"tree string is deeper than max_depth={max_depth}: {text!r}")
        end = text.index("(", pos)
        lhs, t = text[pos + 1 : end].split("<=")
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
    return Tree(is_split, feature, cut)


def tree_text(
    tree: Tree,
    thresholds: np.ndarray,
    feature_names: Sequence[str] | None = None,
    leaf_labels: Sequence[str] | None = None,
) -> str:
    """Indented, human-readable text of one tree.

    ``leaf_labels`` (optional) maps heap index -> label printed at that leaf.
    """
    is_split = np.asarray(tree.is_split)
    feature = np.asarray(tree.feature)
    cut = np.asarray(tree.cut)
    names = list(feature_names) if feature_names is not None else None
    lines: list[str] = []

    def rec(i: int, indent: str) -> None:
        if not is_split[i]:
            label = f": {leaf_labels[i]}" if leaf_labels is not None else ""
            lines.append(f"{indent}leaf {i}{label}")
            return
        f = int(feature[i])
        name = names[f] if names is not None else f"x{f}"
        t = _fmt(thresholds[f, cut[i]])
        lines.append(f"{indent}{name} <= {t}")
        rec(2 * i + 1, indent + "|   ")
        lines.append(f"{indent}{name} > {t}")
        rec(2 * i + 2, indent + "|   ")

    rec(0, "")
    return "\n".join(lines)


def plot_tree(
    tree: Tree,
    thresholds: np.ndarray,
    feature_names: Sequence[str] | None = None,
    leaf_labels: Sequence[str] | None = None,
    ax=None,
):
    """Draw one tree with matplotlib; returns the Axes."""
    import matplotlib.pyplot as plt

    is_split = np.asarray(tree.is_split)
    feature = np.asarray(tree.feature)
    cut = np.asarray(tree.cut)
    names = list(feature_names) if feature_names is not None else None
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 5))
    # x position of each leaf: in-order index; internal nodes centred over their children.
    xpos: dict[int, float] = {}
    order = [0]

    def place(i: int) -> float:
        if not is_split[i]:
            xpos[i] = order[0]
            order[0] += 1
            return xpos[i]
        xl, xr = place(2 * i + 1), place(2 * i + 2)
        xpos[i] = (xl + xr) / 2
        return xpos[i]

    place(0)
    depth = {i: int(np.floor(np.log2(i + 1))) for i in xpos}
    for i, x in xpos.items():
        y = -depth[i]
        if is_split[i]:
            for c in (2 * i + 1, 2 * i + 2):
                ax.plot([x, xpos[c]], [y, -depth[c]], color="0.6", zorder=1)
            f = int(feature[i])
            name = names[f] if names is not None else f"x{f}"
            text = f"{name} <= {_fmt(thresholds[f, cut[i]])}"
            box = dict(boxstyle="round", fc="#dde8f5", ec="#4a6fa5")
        else:
            text = str(leaf_labels[i]) if leaf_labels is not None else "leaf"
            box = dict(boxstyle="round", fc="#eef5dd", ec="#6a8f3a")
        ax.text(x, y, text, ha="center", va="center", bbox=box, zorder=2, fontsize=9)
    ax.set_xlim(-0.7, max(order[0] - 0.3, 0.7))
    ax.set_ylim(-max(depth.values()) - 0.6, 0.6)
    ax.axis("off")
    return ax
