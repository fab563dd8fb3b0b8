"""The tree space of a single-tree posterior (:class:`~bdtree_jax.posterior.Posterior`) summarised
for people: the most visited trees with their posterior probabilities and Monte Carlo intervals
(:func:`top_trees`), and a tree's leaves with credible intervals of their parameters
(:func:`leaf_summary`), which the drawn trees print at their leaves (:func:`leaf_labels`)."""

from __future__ import annotations

import warnings

import jax
import numpy as np

from ..tree import Tree, distinct_trees, leaf_index, leaf_nodes
from . import streaming
from ._leaf_draws import _leaf_draws, _train_cell
from .._validate import is_int

__all__ = ["leaf_labels", "leaf_summary", "top_trees"]


def _mean_ess(indicator: np.ndarray) -> float:
    """ArviZ's ESS for the mean of a (C, S) series (NaN when it never changes)."""
    from .._arviz import _import_arviz

    indicator = np.asarray(indicator, np.float64)
    if np.ptp(indicator) == 0 or indicator.shape[1] < 4:
        return float("nan")
    az = _import_arviz()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # ArviZ 0.2x warns on short chains
        return float(np.asarray(az.ess(indicator, method="mean")))


def top_trees(post, k: int = 5, prob: float = 0.95):
    """The ``k`` most visited trees of ``post``, a pandas DataFrame indexed by ``rank`` (1 = most
    visited) with columns ``tree`` (the tree string with feature names, as ``most_visited_tree``),
    ``probability`` (the share of draws that visit it: the Monte Carlo estimate of its posterior
    probability), ``lower`` and ``upper`` (a ``prob`` normal interval of that estimate, ``p +- z
    sqrt(p (1 - p) / ess)`` clipped to [0, 1], with ``ess`` ArviZ's effective sample size of the
    visit indicator over the (C, S) draws; NaN when the indicator never changes, and the interval
    then the point), ``ess``, ``draws`` (visits), ``n_leaves`` and ``log_posterior`` (the tree's
    unnormalised log posterior)."""
    import pandas as pd
    from scipy.stats import norm

    if not is_int(k) or k < 1:
        raise ValueError(f"k must be an integer >= 1; got {k!r}.")
    if not 0 < prob < 1:
        raise ValueError(f"prob must be in (0, 1); got {prob!r}.")
    C, S = post.num_chains, post.num_draws
    if C * S == 0:
        raise ValueError("top_trees needs draws; this posterior has none (num_samples=0).")
    first, inverse, counts = distinct_trees(post._flat_trees())
    order = np.argsort(-counts, kind="stable")[:k]
    named = post.tree_strings(names=True)
    lp = np.asarray(post.stats["log_posterior"], np.float64).reshape(-1)
    leaves = np.asarray(post.stats["n_leaves"]).reshape(-1)
    z = norm.ppf(0.5 + prob / 2)
    rows = []
    for u in order:
        p = counts[u] / (C * S)
        ess = _mean_ess((inverse == u).reshape(C, S))
        half = 0.0 if np.isnan(ess) else z * np.sqrt(p * (1 - p) / ess)
        d = first[u]
        rows.append(dict(tree=named[d], probability=p, lower=max(p - half, 0.0), upper=min(p + half, 1.0), ess=ess,
                         draws=int(counts[u]), n_leaves=int(leaves[d]), log_posterior=float(lp[d])))
    table = pd.DataFrame(rows)
    table.index = pd.RangeIndex(1, len(rows) + 1, name="rank")
    return table


def tree_at_rank(post, rank: int) -> Tree:
    """The ``rank``-th most visited tree (1: the most visited; ties by first visit)."""
    flat = post._flat_trees()
    first, _, counts = distinct_trees(flat)
    order = np.argsort(-counts, kind="stable")
    if not is_int(rank) or not 1 <= rank <= len(order):
        raise ValueError(f"rank must be an integer in [1, {len(order)}] (the distinct trees visited); got {rank!r}.")
    return jax.tree.map(lambda a: np.asarray(a)[first[order[rank - 1]]], flat)


def _leaf_draw_table(post, tree: Tree, num_draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``num_draws`` draws of ``tree``'s leaf parameters from their posterior given the tree and the
    training rows, (R, N, P) (class probabilities, or leaf means in y's units with sigma drawn
    too), and the training rows per node, (N,)."""
    R = int(num_draws)
    draw_chunk, _ = streaming.plan(R, post.train_stats.shape[0], _train_cell(post.train_stats.shape[1]))
    bins, stats = post._train_blocks(draw_chunk)
    keys = jax.random.split(jax.random.key(seed), R)
    trees = jax.tree.map(lambda a: np.broadcast_to(np.asarray(a), (draw_chunk,) + np.shape(a)), tree)
    params = []
    for s in range(0, R, draw_chunk):  # fixed-size chunks (the last padded): one compiled program
        m = min(draw_chunk, R - s)
        idx = np.concatenate([np.arange(s, s + m), np.full(draw_chunk - m, s)])
        params.append(np.asarray(_leaf_draws(keys[idx], trees, bins, stats, post.likelihood)[0])[:m])
    rows = np.bincount(np.asarray(leaf_index(jax.tree.map(np.asarray, tree), post.train_bins)),
                       minlength=tree.is_split.shape[-1])
    return np.concatenate(params), rows


def leaf_summary(post, tree: Tree, prob: float = 0.9, num_draws: int = 1000, seed: int = 0):
    """A pandas DataFrame, one row per leaf of ``tree`` (index ``node``: its heap slot): ``rows``
    (training rows in the leaf) and per class ``p[label]``, ``p[label]_lower``, ``p[label]_upper``
    (classification: the posterior mean and equal-tailed ``prob`` interval of the class
    probability), or ``mean``, ``lower``, ``upper`` (regression: of the leaf mean, in y's units,
    sigma integrated out), from ``num_draws`` draws of the leaf parameters given the tree (key
    ``split(key(seed), num_draws)``)."""
    import pandas as pd

    if not 0 < prob < 1:
        raise ValueError(f"prob must be in (0, 1); got {prob!r}.")
    if not isinstance(num_draws, (int, np.integer)) or num_draws < 2:
        raise ValueError(f"num_draws must be an integer >= 2; got {num_draws!r}.")
    params, rows = _leaf_draw_table(post, tree, num_draws, seed)
    leaves = np.flatnonzero(np.asarray(leaf_nodes(jax.tree.map(np.asarray, tree))))
    mean = params.mean(0)
    lo, hi = np.quantile(params, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
    out = {"rows": rows[leaves]}
    labels = [f"p[{c}]" for c in post.classes] if post.task == "classification" else ["mean"]
    for j, name in enumerate(labels):
        low, up = (f"{name}_lower", f"{name}_upper") if post.task == "classification" else ("lower", "upper")
        out.update({name: mean[leaves, j], low: lo[leaves, j], up: hi[leaves, j]})
    return pd.DataFrame(out, index=pd.Index(leaves, name="node"))


def leaf_labels(post, tree: Tree, prob: float = 0.9, num_draws: int = 1000, seed: int = 0) -> list[str]:
    """(N,) text per heap slot of ``tree`` for :func:`~bdtree_jax.plots.draw_tree`: at a leaf, the
    most probable class with its probability and ``prob`` interval (classification) or the leaf
    mean with its interval (regression), and the training rows (:func:`leaf_summary`)."""
    table = leaf_summary(post, tree, prob, num_draws, seed)
    labels = [""] * tree.is_split.shape[-1]
    # one dict per leaf, column by column: iterrows() would first interleave the mixed-dtype frame
    # into one array (a numpy deprecation warning on older pandas)
    for node, row in zip(table.index, table.to_dict("records")):
        if post.task == "classification":
            k = int(np.argmax([row[f"p[{c}]"] for c in post.classes]))
            c = f"p[{post.classes[k]}]"
            text = f"{post.classes[k]}\np={row[c]:.2f} [{row[c + '_lower']:.2f}, {row[c + '_upper']:.2f}]"
        else:
            text = f"{row['mean']:.3g}\n[{row['lower']:.3g}, {row['upper']:.3g}]"
        labels[node] = f"{text}\nn={int(row['rows'])}"
    return labels
