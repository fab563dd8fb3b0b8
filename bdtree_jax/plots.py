"""Posterior plots that read at a glance: a tree drawn with its features' names, thresholds in the
data's units, categorical level sets and the missing-value side (:func:`draw_tree`), and the
tree-space summary as a bar chart of the most visited trees with Monte Carlo intervals
(:func:`plot_top_trees`).  The posteriors' methods call these
(:meth:`~bdtree_jax.posterior.Posterior.plot_tree`,
:meth:`~bdtree_jax.posterior.Posterior.plot_top_trees`).

matplotlib is imported when a plot is drawn (an ``ImportError`` saying how to install it when it
is missing), never when :mod:`bdtree_jax` is imported.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["draw_tree", "plot_top_trees"]


def pyplot():
    """``matplotlib.pyplot``, or an ``ImportError`` that says how to install matplotlib."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # matplotlib is a dependency, but an environment may lack it
        raise ImportError("bdtree_jax's plots need matplotlib: pip install matplotlib") from err
    return plt


_SPLIT_BOX = dict(boxstyle="round", fc="#dde8f5", ec="#4a6fa5")
_LEAF_BOX = dict(boxstyle="round", fc="#eef5dd", ec="#6a8f3a")


def draw_tree(
    is_split,
    rules: dict,
    leaf_labels: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
):
    """Draw one tree with matplotlib; returns the Axes.

    is_split : (N,) bool per heap slot; rules : ``{slot: (text, left edge, right edge)}`` of every
    split (:func:`bdtree_jax.tree.plot_tree` writes them: the rule in the data's units or the
    levels that go left, ``yes`` / ``no`` with ``+ NA`` where a missing value goes); leaf_labels :
    (N,) text per heap slot, drawn at the leaves (default ``leaf``).  A new figure is sized to the
    tree when ``ax`` is None.
    """
    plt = pyplot()
    is_split = np.asarray(is_split)
    xpos: dict[int, float] = {}
    order = [0]

    def place(i: int) -> float:  # leaves at in-order positions, a split centred over its children
        if not is_split[i]:
            xpos[i] = order[0]
            order[0] += 1
        else:
            xpos[i] = (place(2 * i + 1) + place(2 * i + 2)) / 2
        return xpos[i]

    place(0)
    depth = {i: int(np.floor(np.log2(i + 1))) for i in xpos}
    lines = max((str(leaf_labels[i]).count("\n") + 1 for i in xpos if leaf_labels is not None and not is_split[i]),
                default=1)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4.0, 2.2 * order[0]), max(2.5, (1.4 + 0.25 * lines) * (max(depth.values()) + 1))))
    for i, x in xpos.items():
        y = -depth[i]
        if is_split[i]:
            text, left, right = rules[i]
            for child, edge in ((2 * i + 1, left), (2 * i + 2, right)):
                cx, cy = xpos[child], -depth[child]
                ax.plot([x, cx], [y, cy], color="0.6", zorder=1)
                ax.text((x + cx) / 2, (y + cy) / 2, edge, ha="center", va="center", fontsize=7, color="0.35",
                        bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none"), zorder=2)
            box = _SPLIT_BOX
        else:
            text = str(leaf_labels[i]) if leaf_labels is not None else "leaf"
            box = _LEAF_BOX
        ax.text(x, y, text, ha="center", va="center", bbox=box, zorder=3, fontsize=8)
    ax.set_xlim(-0.7, max(order[0] - 0.3, 0.7))
    ax.set_ylim(-max(depth.values()) - 0.7, 0.6)
    ax.axis("off")
    if title:
        ax.set_title(title)
    return ax


def plot_top_trees(table, ax=None):
    """Horizontal bars of the most visited trees' posterior probabilities with their Monte Carlo
    intervals: ``table`` is :meth:`~bdtree_jax.posterior.Posterior.top_trees`'s DataFrame
    (columns ``probability``, ``lower``, ``upper``, ``n_leaves``; index ``rank``).  Each bar is
    labelled with its rank and leaves (the table holds the trees' strings).  Returns the Axes."""
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 0.45 * len(table) + 1.2))
    y = np.arange(len(table))[::-1]
    p = table["probability"].to_numpy()
    err = np.stack([p - table["lower"].to_numpy(), table["upper"].to_numpy() - p])
    ax.barh(y, p, xerr=err, color="#4a6fa5", ecolor="0.2", capsize=3)
    ax.set_yticks(y, [f"#{r}: {k} leaves" for r, k in zip(table.index, table["n_leaves"])])
    ax.set_xlabel("posterior probability (visit frequency, Monte Carlo interval)")
    ax.set_xlim(0, min(1.0, max(float(np.max(table["upper"].to_numpy(), initial=0.0)) * 1.15, 0.05)))
    return ax
