"""Plots of :mod:`bdtree_jax.inspection` with matplotlib: partial dependence with its credible band
(ICE curves optional; categorical features as bars with interval whiskers; a pair as a heatmap or
filled contours) and variable importance with intervals.  Each returns the matplotlib Axes."""

from __future__ import annotations

import numpy as np

from .importance import VariableImportance, permutation_importance, split_inclusion
from .partial_dependence import PartialDependence, partial_dependence

__all__ = ["plot_partial_dependence", "plot_variable_importance"]


def _axes(ax):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    return plt.subplots()[1]


def _label(pd_: PartialDependence, k: int) -> str:
    if len(pd_.outputs) == 1:
        return f"partial dependence ({pd_.response})"
    return f"partial dependence (P(y = {pd_.outputs[k]}))"


def plot_partial_dependence(pd_or_est, X=None, features=None, *, target=None, ax=None, ice: bool = False,
                            max_ice: int = 50, band: bool = True, **kwargs):
    """Draw a partial dependence (a :class:`~bdtree_jax.inspection.PartialDependence`, or a fitted
    estimator with ``X`` and ``features``, computed by
    :func:`~bdtree_jax.inspection.partial_dependence` with ``kwargs``).

    One numeric feature: the posterior mean curve, its credible band (``band``) and, with ``ice``,
    up to ``max_ice`` rows' ICE curves (evenly spaced rows).  One categorical feature: a bar per
    level with the band as whiskers.  A pair: the posterior mean as filled contours (numeric) or
    a heatmap (a categorical feature among them), with a colour bar.  ``target``: the class of a
    classifier (default: the positive class of two; required for more).  Returns the Axes."""
    if isinstance(pd_or_est, PartialDependence):
        pd_ = pd_or_est
    else:
        if X is None or features is None:
            raise ValueError("plot_partial_dependence: give a PartialDependence, or an estimator with X and features.")
        pd_ = partial_dependence(pd_or_est, X, features, ice=ice, **kwargs)
    k = pd_.output_index(target)
    ax = _axes(ax)
    mean, lo, hi = pd_.mean[..., k], pd_.lower[..., k], pd_.upper[..., k]
    pct = f"{100 * pd_.prob:g}%"
    if len(pd_.features) == 2:
        return _plot_pair(pd_, mean, ax, _label(pd_, k))
    grid = pd_.grid[0]
    if pd_.categorical[0]:
        pos = np.arange(len(grid))
        ax.bar(pos, mean, yerr=np.vstack([mean - lo, hi - mean]) if band else None, capsize=4, color="C0",
               alpha=0.8, label=f"posterior mean ({pct} band)" if band else "posterior mean")
        ax.set_xticks(pos)
        ax.set_xticklabels([str(g) for g in grid])
    else:
        x = np.asarray(grid, np.float64)
        if ice and pd_.ice_mean is not None:
            n = pd_.ice_mean.shape[0]
            rows = np.unique(np.linspace(0, n - 1, min(int(max_ice), n)).round().astype(int))
            ax.plot(x, pd_.ice_mean[rows, :, k].T, color="0.6", lw=0.6, alpha=0.5)
        if band:
            ax.fill_between(x, lo, hi, color="C0", alpha=0.3, label=f"{pct} credible band")
        ax.plot(x, mean, color="C0", lw=2, label="posterior mean")
        ax.plot(x, np.full_like(x, ax.get_ylim()[0]), "|", color="k", ms=8)  # the grid points (a rug)
    ax.set_xlabel(pd_.features[0])
    ax.set_ylabel(_label(pd_, k))
    ax.legend(loc="best", fontsize="small")
    return ax


def _plot_pair(pd_: PartialDependence, mean: np.ndarray, ax, label: str):
    g0, g1 = pd_.grid
    if any(pd_.categorical):
        image = ax.imshow(mean.T, origin="lower", aspect="auto", cmap="viridis")
        for axis, grid, ticks in ((ax.xaxis, g0, ax.set_xticks), (ax.yaxis, g1, ax.set_yticks)):
            ticks(np.arange(len(grid)))
            axis.set_ticklabels([str(g) if isinstance(g, str) or not np.issubdtype(type(g), np.number)
                                 else f"{g:.3g}" for g in grid])
    else:
        image = ax.contourf(np.asarray(g0, np.float64), np.asarray(g1, np.float64), mean.T, levels=12, cmap="viridis")
    ax.figure.colorbar(image, ax=ax, label=label)
    ax.set_xlabel(pd_.features[0])
    ax.set_ylabel(pd_.features[1])
    return ax


def plot_variable_importance(imp_or_est, X=None, y=None, *, kind: str = "inclusion", ax=None, top: int | None = None,
                             **kwargs):
    """Draw a variable importance (a :class:`~bdtree_jax.inspection.VariableImportance`, or a fitted
    estimator: ``kind="inclusion"`` its split inclusion, ``kind="permutation"`` its permutation
    importance on ``(X, y)`` with ``kwargs``): one horizontal bar per feature (the ``top`` largest,
    default all), largest at the top, with the credible interval as whiskers.  Returns the Axes."""
    if isinstance(imp_or_est, VariableImportance):
        imp = imp_or_est
    elif kind == "inclusion":
        imp = split_inclusion(imp_or_est, **kwargs)
    elif kind == "permutation":
        if X is None or y is None:
            raise ValueError("plot_variable_importance: kind='permutation' needs X and y.")
        imp = permutation_importance(imp_or_est, X, y, **kwargs)
    else:
        raise ValueError(f"plot_variable_importance: kind must be 'inclusion' or 'permutation'; got {kind!r}.")
    mean, lo, hi = imp.mean, imp.lower, imp.upper
    order = np.argsort(np.nan_to_num(mean, nan=-np.inf))[::-1][: top if top is not None else None]
    ax = _axes(ax)
    pos = np.arange(len(order))[::-1]
    ax.barh(pos, mean[order], xerr=np.vstack([mean[order] - lo[order], hi[order] - mean[order]]), capsize=3,
            color="C0", alpha=0.8)
    ax.set_yticks(pos)
    ax.set_yticklabels([imp.features[j] for j in order])
    what = {"split inclusion": "split inclusion", "R^2": "R² lost when permuted",
            "log-loss": "log-loss gained when permuted"}.get(imp.kind, imp.kind)
    ax.set_xlabel(f"{what} (mean, {100 * imp.prob:g}% interval)")
    if imp.kind != "split inclusion":
        ax.axvline(0.0, color="k", lw=0.8)
    return ax
