"""Run-to-run diagnostics of tree posteriors (Angelopoulos & Cussens 2005, "Tempering for Bayesian
C&RT", §7): do independent runs (different seeds) agree on the probabilities of individual trees
(Tables 2–5), on the class probabilities of hold-out rows (Figs 1–9) and on predictive accuracy
(Table 6)?

* :func:`top_tree_table` — visit frequencies of the most visited trees, one column per run;
* :func:`probability_agreement` / :func:`plot_probability_agreement` — the posterior probability
  of a "positive" class at every hold-out row under two runs, and their scatter plot;
* :func:`accuracy_max_prob` — ``acc_max`` (predict the most probable class) and ``acc_prob``
  (predict at random with the posterior class probabilities);
* :func:`swap_rates` — the acceptance rate of a tempered run's swaps between each pair of rungs;
* :func:`convergence_diagnostics` / :func:`check_convergence` — R-hat and bulk ESS of the
  log-likelihood and of the number of leaves, and the :class:`ConvergenceWarning` that every fit
  issues when they look bad (``R-hat > 1.05`` or bulk ESS ``< 100``, as PyMC warns).

Example
-------
>>> import bdtree_jax as bd
>>> from bdtree_jax import diagnostics
>>> X, y = bd.datasets.load("bcw")
>>> runs = [bd.sample(X, y, num_warmup=0, num_samples=5000, num_chains=1, seed=s) for s in range(3)]
>>> diagnostics.top_tree_table(runs, k=5)                       # doctest: +SKIP
>>> diagnostics.plot_probability_agreement(runs[0], runs[1], X)  # doctest: +SKIP
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ._renamed import accepts_renamed

__all__ = [
    "ConvergenceWarning",
    "ESS_MIN",
    "RHAT_MAX",
    "accuracy_max_prob",
    "check_convergence",
    "convergence_diagnostics",
    "plot_agreement",
    "plot_probability_agreement",
    "positive_proba",
    "probability_agreement",
    "swap_rates",
    "top_tree_table",
]


# ----------------------------------------------------------------------------------------------
# validation


def _check_classification(post, name: str = "post") -> None:
    if not hasattr(post, "task") or not hasattr(post, "predict_proba"):
        raise ValueError(f"{name} must be a posterior returned by bdtree_jax.sample; got {type(post).__name__}.")
    if post.task != "classification":
        raise ValueError(f"{name} is a {post.task} posterior; class probabilities need a classification posterior.")


def _check_same_classes(post_a, post_b) -> None:
    _check_classification(post_a, "post_a")
    _check_classification(post_b, "post_b")
    ca, cb = np.asarray(post_a.classes), np.asarray(post_b.classes)
    if ca.shape != cb.shape or not np.array_equal(ca, cb):
        raise ValueError(f"post_a and post_b were fitted with different classes: {ca.tolist()} vs {cb.tolist()}.")


def _class_index(classes, label, what: str) -> int:
    for i, c in enumerate(np.asarray(classes).tolist()):
        if c == label:
            return i
    raise ValueError(f"{what} {label!r} is not one of the posterior's classes {np.asarray(classes).tolist()}.")


# ----------------------------------------------------------------------------------------------
# class probabilities


def positive_proba(post, X, positive=None) -> np.ndarray:
    """(n,) posterior probability of the class ``positive`` (a class label; default the second
    class, ``post.classes[1]``) at every row of X."""
    _check_classification(post)
    classes = np.asarray(post.classes)
    if positive is None:
        if len(classes) < 2:
            raise ValueError("the posterior has a single class; pass positive= explicitly.")
        k = 1
    else:
        k = _class_index(classes, positive, "positive class")
    return np.asarray(post.predict_proba(X), np.float64)[:, k]


def probability_agreement(post_a, post_b, X, positive=None) -> tuple[np.ndarray, np.ndarray]:
    """Per row of X, the posterior probability of the ``positive`` class (a label; default the
    second class) under two runs: ``(pa, pb)``, each (n,) float64.  Identical posteriors give
    ``pa == pb``; the spread around the diagonal measures how far the runs disagree."""
    _check_same_classes(post_a, post_b)
    return positive_proba(post_a, X, positive), positive_proba(post_b, X, positive)


def plot_agreement(pa, pb, ax=None, title=None, labels=("run A", "run B")):
    """Scatter of two runs' probabilities ``pa`` vs ``pb`` (each (n,), in [0, 1]) with the
    diagonal, both axes [0, 1] and the mean absolute difference annotated; returns the Axes.
    (The plotting half of :func:`plot_probability_agreement`, for probabilities already computed.)"""
    import matplotlib.pyplot as plt

    pa, pb = np.asarray(pa, np.float64).ravel(), np.asarray(pb, np.float64).ravel()
    if pa.shape != pb.shape:
        raise ValueError(f"pa and pb must have the same length; got {pa.shape[0]} and {pb.shape[0]}.")
    if pa.size and (np.nanmin(np.r_[pa, pb]) < -1e-9 or np.nanmax(np.r_[pa, pb]) > 1 + 1e-9):
        raise ValueError("pa and pb must be probabilities in [0, 1].")
    if ax is None:
        _, ax = plt.subplots(figsize=(4.2, 4.2))
    ax.scatter(pa, pb, s=10, alpha=0.6, clip_on=False, zorder=3)
    ax.plot([0, 1], [0, 1], color="0.5", lw=1, ls="--", zorder=2)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    mad = float(np.mean(np.abs(pa - pb))) if pa.size else float("nan")
    ax.text(0.03, 0.97, f"mean |diff| = {mad:.4f}\nn = {pa.size}", transform=ax.transAxes, va="top", ha="left",
            fontsize=8, bbox=dict(boxstyle="round", fc="white", ec="0.8"))
    if title is not None:
        ax.set_title(title)
    return ax


def plot_probability_agreement(post_a, post_b, X, positive=None, ax=None, title=None):
    """The paper's Figs 1–9: scatter of :func:`probability_agreement` (run A on x, run B on y)
    with the diagonal, axes [0, 1], the mean absolute difference annotated.  Returns the Axes."""
    pa, pb = probability_agreement(post_a, post_b, X, positive)
    label = np.asarray(post_a.classes)[1] if positive is None else positive
    seeds = [p.info.get("seed") if isinstance(getattr(p, "info", None), dict) else None for p in (post_a, post_b)]
    labels = tuple(f"P(y={label}) run {n}" + (f" (seed {s})" if s is not None else "")
                   for n, s in zip("AB", seeds))
    return plot_agreement(pa, pb, ax=ax, title=title, labels=labels)


# ----------------------------------------------------------------------------------------------
# accuracy


def accuracy_max_prob(post, X, y) -> tuple[float, float]:
    """Hold-out accuracies of a classification posterior (paper §7.3).

    Returns ``(acc_max, acc_prob)``: ``acc_max`` is the accuracy of predicting the most probable
    class; ``acc_prob`` the expected accuracy of predicting a class drawn from the posterior
    class probabilities, i.e. the mean over rows of ``predict_proba[row, true class]``.
    ``y`` (n,) holds class labels, each one of ``post.classes``.
    """
    _check_classification(post)
    y = np.asarray(y).ravel().tolist()
    index = {c: i for i, c in enumerate(np.asarray(post.classes).tolist())}
    codes = []
    for v in y:
        if v not in index:
            raise ValueError(f"y contains the label {v!r}, which is not one of the posterior's classes "
                             f"{list(index)}.")
        codes.append(index[v])
    codes = np.asarray(codes, int)
    proba = np.asarray(post.predict_proba(X), np.float64)
    if proba.shape[0] != len(codes):
        raise ValueError(f"X has {proba.shape[0]} rows but y has {len(codes)}.")
    if not len(codes):
        raise ValueError("X and y are empty.")
    rows = np.arange(len(codes))
    acc_max = float(np.mean(np.argmax(proba, axis=1) == codes))
    acc_prob = float(np.mean(proba[rows, codes]))
    return acc_max, acc_prob


# ----------------------------------------------------------------------------------------------
# individual trees


def top_tree_table(posteriors, k: int = 5, names=None) -> pd.DataFrame:
    """The paper's Tables 2–5: visit frequencies of the ``k`` most visited trees.

    Parameters
    ----------
    posteriors : sequence of R runs (one per seed): posteriors with ``tree_frequencies()`` or
        mappings ``{tree string: frequency}`` as it returns.
    k : number of trees (rows); fewer if the runs visited fewer distinct trees.
    names : R column names; default ``p_seed0 .. p_seed{R-1}``.

    Returns
    -------
    DataFrame (k, R): index = tree string (:func:`~bdtree_jax.tree.to_string`), column ``r`` =
    run ``r``'s visit frequency of the tree (0 if never visited).  Rows are the trees with the
    largest pooled frequency (the mean over runs, each run weighted equally), in decreasing order
    (ties by tree string).
    """
    if isinstance(posteriors, Mapping) or not isinstance(posteriors, Sequence) or not len(posteriors):
        raise ValueError("posteriors must be a non-empty list of posteriors (or of tree-frequency dicts).")
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be an integer >= 1; got {k!r}.")
    names = [f"p_seed{i}" for i in range(len(posteriors))] if names is None else list(names)
    if len(names) != len(posteriors) or len(set(names)) != len(names):
        raise ValueError(f"names must be {len(posteriors)} distinct column names; got {names!r}.")
    freqs, tasks = [], set()
    for i, p in enumerate(posteriors):
        if isinstance(p, Mapping):
            freqs.append({str(t): float(f) for t, f in p.items()})
            continue
        if not hasattr(p, "tree_frequencies"):
            raise ValueError(f"posteriors[{i}] has no tree_frequencies(); got {type(p).__name__}.")
        classes = None if getattr(p, "classes", None) is None else tuple(np.asarray(p.classes).tolist())
        tasks.add((getattr(p, "task", None), classes))
        freqs.append(p.tree_frequencies())
    if len(tasks) > 1:
        raise ValueError(f"the posteriors differ in task or classes: {sorted(tasks, key=repr)}; "
                         "compare runs of the same model only.")
    trees = set().union(*freqs)
    pooled = {t: sum(f.get(t, 0.0) for f in freqs) / len(freqs) for t in trees}
    top = sorted(trees, key=lambda t: (-pooled[t], t))[:k]
    table = pd.DataFrame({n: [f.get(t, 0.0) for t in top] for n, f in zip(names, freqs)},
                         index=pd.Index(top, name="tree"))
    return table


# ----------------------------------------------------------------------------------------------
# tempering


@accepts_renamed("n_temperatures")
def swap_rates(swap_pair: np.ndarray, swap_accepted: np.ndarray, num_temperatures: int) -> np.ndarray:
    """(R, R) acceptance rate of swaps proposed between rungs ``i < j`` (upper triangle; NaN where
    never proposed) from the recorded ``swap_pair`` / ``swap_accepted`` arrays (any shape)."""
    R = int(num_temperatures)
    pair = np.asarray(swap_pair).ravel()
    acc = np.asarray(swap_accepted).ravel().astype(float)
    proposed = np.bincount(pair, minlength=R * R).reshape(R, R).astype(float)
    accepted = np.bincount(pair, weights=acc, minlength=R * R).reshape(R, R)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(proposed > 0, accepted / proposed, np.nan)


# ----------------------------------------------------------------------------------------------
# convergence of a run's chains

#: R-hat above this warns (PyMC's threshold for its convergence warning).
RHAT_MAX = 1.05
#: Bulk ESS below this warns.
ESS_MIN = 100

# the per-draw scalars checked: (key of ``posterior.stats``, what the warning calls it); the
# log-likelihood is ``log_lik`` for single trees and ``train_log_lik`` for BART, whose
# ``n_leaves`` is the mean number of leaves over its trees
_CHECKED = (("log_lik", "log-likelihood"), ("train_log_lik", "log-likelihood"), ("n_leaves", "number of leaves"))


class ConvergenceWarning(UserWarning):
    """Issued once after a fit (:func:`~bdtree_jax.sample`, an estimator's ``fit``) whose chains
    show they have not converged or mixed: R-hat of the log-likelihood or of the number of leaves
    above :data:`RHAT_MAX` (with at least 2 chains), or their bulk ESS below :data:`ESS_MIN`.

    Silence it with the standard warnings filter:
    ``warnings.filterwarnings("ignore", category=bdtree_jax.ConvergenceWarning)``.
    """


def convergence_diagnostics(posterior) -> dict[str, dict[str, float]]:
    """R-hat and bulk ESS of the run's log-likelihood and number of leaves, by ArviZ
    (``az.rhat``: rank-normalised split R-hat; ``az.ess``: bulk ESS; Vehtari et al. 2021).

    Parameters
    ----------
    posterior : a posterior of draws (``bd.sample``'s, an estimator's ``posterior_``) whose
        ``stats`` holds (C, S) arrays ``log_lik`` (BART: ``train_log_lik``) and ``n_leaves``.

    Returns
    -------
    dict ``{name: {"rhat": float, "ess_bulk": float}}`` for ``name`` in the keys of
    ``posterior.stats`` checked (``log_lik`` or ``train_log_lik``, ``n_leaves``); ``rhat`` is NaN
    with one chain, both are NaN for a quantity that never changes or is not finite everywhere
    (nothing to diagnose).  Exact posteriors (method "pcfg": independent draws, and its
    predictions do not use them) give ``{}``.
    """
    from ._arviz import _import_arviz

    az = _import_arviz()
    if getattr(posterior, "method", None) == "pcfg":
        return {}
    stats = getattr(posterior, "stats", None)
    if not isinstance(stats, Mapping):
        raise ValueError(f"posterior must be a posterior returned by bdtree_jax.sample or an estimator's fit; "
                         f"got {type(posterior).__name__}.")
    out = {}
    for key, _ in _CHECKED:
        if key not in stats:
            continue
        draws = np.asarray(stats[key], np.float64)
        if draws.ndim != 2:
            raise ValueError(f"posterior.stats[{key!r}] must be (chains, draws); got shape {draws.shape}.")
        rhat = ess = float("nan")
        if draws.shape[1] >= 4 and np.all(np.isfinite(draws)) and np.ptp(draws) > 0:
            # a chain that never moves makes ArviZ divide by a zero variance (numpy warns; the
            # answer, inf or NaN, is the right one); ArviZ 0.2x also warns on few draws
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                ess = float(np.asarray(az.ess(draws, method="bulk")))
                if draws.shape[0] >= 2:
                    rhat = float(np.asarray(az.rhat(draws, method="rank")))
        out[key] = {"rhat": rhat, "ess_bulk": ess}
    return out


def _advice(posterior) -> str:
    """What to try when the chains of ``posterior`` have not converged."""
    method = getattr(posterior, "method", None)
    if method == "smc":
        return ("try more particles (bd.SMC(num_particles=...)) or more runs (num_chains); "
                "each chain is an independent SMC run")
    more = "more num_warmup and num_samples, more chains (num_chains)"
    if method is None:  # BART
        return f"try {more}, or another tree_sampler"
    return (f"try {more}, tempering (tempering=bd.Tempering(num_temperatures=4)), or another method or "
            "proposal (e.g. method=bd.CGM(proposal='cgm+regrow'))")


def check_convergence(posterior, *, stacklevel: int = 2):
    """Warn one :class:`ConvergenceWarning` if the run's chains have not converged.

    Every fit calls it: a quantity of :func:`convergence_diagnostics` whose R-hat exceeds
    :data:`RHAT_MAX` (2 chains or more) or whose bulk ESS is below :data:`ESS_MIN` is named in the
    warning with its value, followed by what to try.  ``stacklevel`` counts frames from the
    caller as :func:`warnings.warn` does: 1 names the line that calls ``check_convergence``, 2
    (the default) the line that called that function (the user's ``bd.sample(...)``).

    Returns
    -------
    posterior, unchanged (a fit ends with ``return check_convergence(posterior)``).
    """
    names = dict(_CHECKED)
    problems, shape = [], None
    for key, d in convergence_diagnostics(posterior).items():
        shape = np.shape(posterior.stats[key])
        if d["rhat"] > RHAT_MAX:  # NaN (one chain) compares False
            problems.append(f"R-hat of the {names[key]} ({key}) is {d['rhat']:.3f} > {RHAT_MAX}")
        if d["ess_bulk"] < ESS_MIN:
            problems.append(f"bulk ESS of the {names[key]} ({key}) is {d['ess_bulk']:.0f} < {ESS_MIN}")
    if problems:
        warnings.warn(f"the chains ({shape[0]} x {shape[1]} draws) may not have converged: " + "; ".join(problems) + "; "
                      + _advice(posterior) + ". Silence with warnings.filterwarnings('ignore', "
                      "category=bdtree_jax.ConvergenceWarning).", ConvergenceWarning, stacklevel=stacklevel + 1)
    return posterior
