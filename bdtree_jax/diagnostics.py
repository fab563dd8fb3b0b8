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
* :func:`convergence_diagnostics` / :func:`check_convergence` — R-hat, bulk and tail ESS of the
  log-likelihood, the number of leaves and the posterior predictive mean at a few training rows,
  and the :class:`ConvergenceWarning` that every fit issues when they look bad (``R-hat > 1.01``
  or bulk ESS ``< 400``, Vehtari et al. 2021), naming only remedies the run has not tried.

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
from .posterior.swaps import swap_rates as _swap_rates
from ._validate import is_int

__all__ = [
    "ConvergenceWarning",
    "ESS_MIN",
    "PREDICTIVE_ROWS",
    "RHAT_MAX",
    "accuracy_max_prob",
    "check_convergence",
    "convergence_diagnostics",
    "convergence_message",
    "plot_agreement",
    "plot_probability_agreement",
    "positive_proba",
    "predictive_draws",
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
    if not is_int(k) or k < 1:
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

#: (R, R) acceptance rates of a tempered run's swaps between rungs (:func:`bdtree_jax.posterior.swaps.swap_rates`).
swap_rates = accepts_renamed("n_temperatures")(_swap_rates)


# ----------------------------------------------------------------------------------------------
# convergence of a run's chains

#: R-hat above this warns (Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021, "Rank-normalization,
#: folding, and localization: an improved R-hat", recommend 1.01).
RHAT_MAX = 1.01
#: Bulk ESS below this warns (the same paper: 400, i.e. 100 per chain with 4 chains).
ESS_MIN = 400
#: Most training rows at which the posterior predictive mean is checked (evenly spaced indices).
PREDICTIVE_ROWS = 20

# the per-draw scalars checked: (key of ``posterior.stats``, what the warning calls it); the
# log-likelihood is ``log_lik`` for single trees and ``train_log_lik`` for BART, whose
# ``n_leaves`` is the mean number of leaves over its trees
_CHECKED = (("log_lik", "log-likelihood"), ("train_log_lik", "log-likelihood"), ("n_leaves", "number of leaves"))
_PREDICTIVE = "predictive_mean"


class ConvergenceWarning(UserWarning):
    """Issued once after a fit (:func:`~bdtree_jax.sample`, an estimator's ``fit``) whose chains
    show they have not converged or mixed: R-hat of the log-likelihood, of the number of leaves or
    of the posterior predictive mean at some training row above :data:`RHAT_MAX` (with at least 2
    chains), or their bulk ESS below :data:`ESS_MIN`.  Its advice names only what the run has not
    tried (``bdtree run`` words it as ``--set KEY=VALUE`` options).

    Silence it with the standard warnings filter:
    ``warnings.filterwarnings("ignore", category=bdtree_jax.ConvergenceWarning)``.
    """


def _diagnose(draws: np.ndarray, with_tail: bool = True) -> dict[str, float]:
    """``{"rhat", "ess_bulk", "ess_tail"}`` of one (C, S) quantity by ArviZ (NaN: R-hat with one
    chain, the tail ESS unless ``with_tail``; all three for a quantity that never changes, is not
    finite everywhere or has < 4 draws)."""
    from ._arviz import _import_arviz

    az = _import_arviz()
    rhat = bulk = tail = float("nan")
    if draws.shape[1] >= 4 and np.all(np.isfinite(draws)) and np.ptp(draws) > 0:
        # a chain that never moves makes ArviZ divide by a zero variance (numpy warns; the
        # answer, inf or NaN, is the right one); ArviZ 0.2x also warns on few draws
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            bulk = float(np.asarray(az.ess(draws, method="bulk")))
            if with_tail:
                tail = float(np.asarray(az.ess(draws, method="tail")))
            if draws.shape[0] >= 2:
                rhat = float(np.asarray(az.rhat(draws, method="rank")))
    return {"rhat": rhat, "ess_bulk": bulk, "ess_tail": tail}


def _check_rows(n: int) -> np.ndarray:
    """Up to :data:`PREDICTIVE_ROWS` evenly spaced training rows of ``0 .. n - 1``."""
    return np.unique(np.linspace(0, n - 1, min(PREDICTIVE_ROWS, n)).round().astype(np.int64))


def _hard_draws(posterior, rows: np.ndarray, columns: list) -> np.ndarray:
    """(C * S, m, Q) every draw's leaf parameters ``columns`` (of P) at the training rows ``rows``
    of a hard-tree posterior: each *distinct* tree evaluated once (MH chains revisit few trees),
    in chunks of 256 trees (fewer padded to 256: the programs ``predict_draws`` compiles, one
    shape whatever the run)."""
    from .posterior.streaming import MAX_DRAW_CHUNK
    from .tree import distinct_trees

    first, inverse, _ = distinct_trees(posterior._flat_trees())
    idx = np.concatenate([first, np.full(max(MAX_DRAW_CHUNK - len(first), 0), first[0])])
    bins = np.asarray(posterior.train_bins)[rows]
    values = posterior._rows(posterior._tables(False, idx=idx), bins, 0, len(rows))
    return values[: len(first)][..., columns][inverse]


def predictive_draws(posterior):
    """The posterior predictive mean per draw at a few training rows: what
    :func:`convergence_diagnostics` checks besides the per-draw scalars.

    The rows are up to :data:`PREDICTIVE_ROWS` evenly spaced training rows.  The quantity is the
    regression function (single trees: the leaf's posterior mean; BART: ``f(x)``), or the
    probability of each class but the first (``classes[1:]``; binary: of ``classes[1]``; probit
    BART: ``Phi(f(x))``).  One vectorised pass: single trees evaluate each distinct tree once.

    Returns
    -------
    ``(values, rows, labels)``: ``values`` (C, S, m, Q) float64, ``rows`` (m,) training-row
    indices, ``labels`` the Q class labels (None for a real response); or None for a posterior
    that has none (exact PCFG draws, a BART posterior without its training inputs, a stand-in).
    """
    from .posterior import BARTClassifierPosterior, BARTPosterior, PCFGPosterior, Posterior, SoftTreePosterior

    if isinstance(posterior, BARTPosterior):
        if posterior.train_bins is None:
            return None
        rows = _check_rows(posterior.train_bins.shape[0])
        if hasattr(posterior, "_predictive_check"):  # multiclass BART: P(y = classes[k] | x), k >= 1
            values, labels = posterior._predictive_check(rows)
            return values, rows, labels
        values = posterior._draws_at(np.asarray(posterior.train_bins)[rows])[..., None]
        labels = None
        if isinstance(posterior, BARTClassifierPosterior):
            from scipy.special import ndtr

            values = ndtr(values)
            labels = [np.asarray(posterior.classes)[1] if posterior.classes is not None else 1]
    elif isinstance(posterior, (Posterior, SoftTreePosterior)) and not isinstance(posterior, PCFGPosterior):
        classes = posterior.classes if posterior.task == "classification" else None
        columns = [0] if classes is None else list(range(1, len(classes)))
        if not columns:  # a single class: nothing varies
            return None
        n = len(posterior.train_y)
        rows = _check_rows(n)
        if isinstance(posterior, SoftTreePosterior):
            values = posterior._rows(posterior._tables(), np.asarray(posterior.train_X)[rows], 0, len(rows))
            values = values[..., columns]
        else:
            values = _hard_draws(posterior, rows, columns)
        labels = None if classes is None else [np.asarray(classes)[k] for k in columns]
    else:
        return None
    C, S = posterior.num_chains, posterior.num_draws
    values = np.asarray(values, np.float64).reshape(C, S, len(rows), -1)
    return values, rows, labels


def _plain(label):
    """A class label as a JSON value (numpy scalars to Python ones)."""
    return label.item() if isinstance(label, np.generic) else label


def _split_rhat_screen(values: np.ndarray) -> np.ndarray:
    """(m, Q) the classic split-R-hat ratio (between over within split-chain variance; Gelman et
    al. 2013) of every quantity of ``values`` (C, S, m, Q), vectorised: it picks the class checked
    at each row (the one whose half-chains disagree most)."""
    half = values.shape[1] // 2
    split = np.concatenate([values[:, :half], values[:, values.shape[1] - half:]], axis=0)
    with np.errstate(all="ignore"):
        ratio = split.mean(1).var(0, ddof=1) / split.var(1, ddof=1).mean(0)
    return np.where(np.isnan(ratio), -np.inf, ratio)


def _worst(values: np.ndarray, rows: np.ndarray, labels) -> dict:
    """The predictive mean's entry of :func:`convergence_diagnostics`: at every row the class
    whose half-chains disagree most (:func:`_split_rhat_screen`; the only one for a real
    response or two classes) is diagnosed by ArviZ; the largest R-hat and the smallest bulk ESS
    over the rows are kept with where they are, and the tail ESS at the latter's row."""
    m, Q = values.shape[2:]
    pick = np.argmax(_split_rhat_screen(values), axis=1) if Q > 1 and values.shape[1] >= 4 else np.zeros(m, int)
    found = [_diagnose(values[:, :, i, pick[i]], with_tail=False) for i in range(m)]
    out = {"rhat": float("nan"), "ess_bulk": float("nan"), "ess_tail": float("nan")}
    for key, best in (("rhat", np.nanargmax), ("ess_bulk", np.nanargmin)):
        column = np.array([d[key] for d in found])
        if np.isnan(column).all():
            continue
        i = int(best(column))
        out[key] = float(column[i])
        out[f"{key}_row"] = int(rows[i])
        if labels is not None:
            out[f"{key}_class"] = _plain(labels[pick[i]])
        if key == "ess_bulk":
            out["ess_tail"] = _diagnose(values[:, :, i, pick[i]])["ess_tail"]
    out["num_rows"] = int(m)
    return out


def convergence_diagnostics(posterior) -> dict[str, dict]:
    """R-hat, bulk and tail ESS of the run's log-likelihood, number of leaves and posterior
    predictive mean, by ArviZ (``az.rhat``: rank-normalised split R-hat; ``az.ess``: bulk and tail
    ESS; Vehtari et al. 2021).

    Parameters
    ----------
    posterior : a posterior of draws (``bd.sample``'s, an estimator's ``posterior_``) whose
        ``stats`` holds (C, S) arrays ``log_lik`` (BART: ``train_log_lik``) and ``n_leaves``.

    Returns
    -------
    dict ``{name: {"rhat": float, "ess_bulk": float, "ess_tail": float}}`` for ``name`` in the
    keys of ``posterior.stats`` checked (``log_lik`` or ``train_log_lik``, ``n_leaves``) and
    ``"predictive_mean"``: the predictive mean per draw at up to :data:`PREDICTIVE_ROWS`
    training rows (:func:`predictive_draws`; with several classes, at each row the class whose
    half-chains disagree most), its worst row reported: the largest R-hat and the smallest bulk
    ESS, with where they are (``rhat_row`` and ``ess_bulk_row``, training-row indices; for
    classification ``rhat_class`` and ``ess_bulk_class``, class labels), the tail ESS at the
    ``ess_bulk_row`` and ``num_rows`` (rows checked).  ``rhat`` is NaN with one chain; all are NaN
    for a quantity that never changes or is not finite everywhere (nothing to diagnose).  Exact
    posteriors (method "pcfg": independent draws, and its predictions do not use them) give
    ``{}``.
    """
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
        out[key] = _diagnose(draws)
    predictive = predictive_draws(posterior)
    if predictive is not None:
        out[_PREDICTIVE] = _worst(*predictive)
    return out


# -- what to try ---------------------------------------------------------------------------------


def _run_facts(posterior) -> dict:
    """How the run went, from what the posterior records: ``method`` (its name; "bart" for
    BART), ``num_warmup``, ``num_samples`` (None where unknown), ``num_chains``, ``tempered``,
    ``proposal``, ``num_particles``, whether prune-and-regrow applies (``regrow``) and the
    ``run_until`` report (None: the run had a fixed length)."""
    info = getattr(posterior, "info", None)
    info = info if isinstance(info, Mapping) else {}
    config = getattr(posterior, "config", None)
    bart = getattr(posterior, "leaf_values", None) is not None
    shape = np.shape(next(iter(posterior.stats.values())))
    prior = getattr(posterior, "prior", None)
    method = "bart" if bart else getattr(posterior, "method", None)
    return dict(
        method=method, num_chains=int(shape[0]), num_samples=int(info.get("num_samples", shape[1])),
        num_warmup=None if method == "smc" else info.get("num_warmup"), tempered=len(info.get("betas", ())) > 1,
        proposal=getattr(config, "tree_sampler", None) if bart else info.get("proposal", "cgm"),
        num_particles=getattr(config, "num_particles", None) if bart else info.get("num_particles"),
        regrow=getattr(prior, "structure", "cgm") == "cgm" and getattr(prior, "valid_cuts", "data") == "data",
        run_until=info.get("run_until"),
    )


def _advice(posterior, diagnostics: Mapping, syntax: str = "python") -> str:
    """What to try when the chains of ``posterior`` have not converged, only what the run has not
    tried, as the caller writes it: ``syntax="python"`` in keywords of ``bd.sample`` and the
    estimators, ``"cli"`` as ``bdtree run``'s ``--set KEY=VALUE`` options (the config's keys)."""
    facts = _run_facts(posterior)
    cli = syntax == "cli"
    method, C, S, W = facts["method"], facts["num_chains"], facts["num_samples"], facts["num_warmup"]

    def option(key, value, python=None):
        return f"--set {key}={value}" if cli else (python or f"{key}={value!r}")

    def particles(cls):  # more particles than now (a posterior saved before they were recorded: "...")
        P = facts["num_particles"]
        more = "..." if P is None else 2 * P
        return option("num_particles", more, f"method=bd.{cls}(num_particles={more})") + (
            " (more particles)" if P is None else f" (now {P})")

    ess = [d["ess_bulk"] for d in diagnostics.values() if not np.isnan(d["ess_bulk"])]
    factor = 2 if not ess or min(ess) >= ESS_MIN else int(min(10, max(2, np.ceil(ESS_MIN / max(min(ess), 1.0)))))
    items = []
    if method == "smc":  # every chain is one independent SMC run; its draws are resampled particles
        items.append(particles("SMC"))
        items.append(option("num_chains", max(4, 2 * C)) + f" (now {C}; each chain is an independent SMC run)")
        return "; ".join(items)
    if W is None:
        items.append(option("num_samples", factor * S) + f" (now {S})")
    else:
        W2 = max(2 * W, S)
        items.append(f"{option('num_warmup', W2)}{' ' if cli else ', '}{option('num_samples', factor * S)} "
                     f"(now {W}, {S})")
    if C < 4:
        items.append(option("num_chains", 4) + f" (now {C}{'; R-hat needs 2 or more' if C == 1 else ''})")
    if method in ("cgm", "hmc-df", "hmc-dfi", "pg", "wu"):
        until = facts["run_until"]  # rounds that double thin until the check passes (methods.until)
        most = max(100_000, 10 * S) if until is None else 4 * until["iterations"]
        items.append((f"--set 'run_until={{max_iterations: {most}}}'" if cli else
                      f"run_until=bd.Converged(max_iterations={most:_})")
                     + ("" if until is None else f" (now {until['iterations']:_} iterations, thin {until['thin']})"))
    if method == "bart":
        if facts["proposal"] != "pg":
            items.append(f"tree_sampler='pg' (now {facts['proposal']!r})")
        elif facts["num_particles"] is not None:
            items.append(f"num_particles={2 * facts['num_particles']} (now {facts['num_particles']})")
        return "; ".join(items)
    if method == "pg":
        items.append(particles("PG"))
    if not facts["tempered"]:
        items.append(option("num_temperatures", 4, "tempering=bd.Tempering(num_temperatures=4)"))
    if method == "cgm" and facts["regrow"] and "regrow" not in str(facts["proposal"]):
        items.append(option("proposal", "cgm+regrow", "method=bd.CGM(proposal='cgm+regrow')"))
    return "; ".join(items)


def _problems(diagnostics: Mapping) -> list[str]:
    """One phrase per threshold crossed: ``"R-hat of the log-likelihood (log_lik) is 1.234 > 1.01"``."""
    names = dict(_CHECKED)
    problems = []
    for key, d in diagnostics.items():
        what = f"the {names.get(key, 'posterior predictive mean')} ({key})"
        for stat, bad, text in (("rhat", d["rhat"] > RHAT_MAX, f"R-hat of {{}} is {d['rhat']:.3f} > {RHAT_MAX}"),
                                ("ess_bulk", d["ess_bulk"] < ESS_MIN,
                                 f"bulk ESS of {{}} is {d['ess_bulk']:.0f} < {ESS_MIN}")):
            if not bad:  # NaN (one chain, nothing to diagnose) compares False
                continue
            where = ""
            if key == _PREDICTIVE:
                label = d.get(f"{stat}_class")
                where = f" at training row {d[f'{stat}_row']}" + ("" if label is None else f", P(y={label})")
            problems.append(text.format(what + where))
    return problems


def convergence_message(posterior, diagnostics: Mapping | None = None, *, syntax: str = "python") -> str | None:
    """The text of the :class:`ConvergenceWarning` for ``posterior`` (None when its chains pass):
    what crossed a threshold, then what to try in the caller's ``syntax`` ("python": keywords of
    ``bd.sample`` and the estimators, and how to silence it; "cli": ``--set KEY=VALUE`` options of
    ``bdtree run``).  ``diagnostics``: :func:`convergence_diagnostics`'s result, if already at hand."""
    if syntax not in ("python", "cli"):
        raise ValueError(f"syntax must be 'python' or 'cli'; got {syntax!r}.")
    diagnostics = convergence_diagnostics(posterior) if diagnostics is None else diagnostics
    problems = _problems(diagnostics)
    if not problems:
        return None
    C, S = np.shape(next(iter(posterior.stats.values())))
    text = (f"the chains ({C} x {S} draws) may not have converged: " + "; ".join(problems)
            + ". Try " + _advice(posterior, diagnostics, syntax) + ".")
    if syntax == "python":
        text += " Silence with warnings.filterwarnings('ignore', category=bdtree_jax.ConvergenceWarning)."
    return text


def check_convergence(posterior, *, stacklevel: int = 2):
    """Warn one :class:`ConvergenceWarning` if the run's chains have not converged.

    Every fit calls it: a quantity of :func:`convergence_diagnostics` whose R-hat exceeds
    :data:`RHAT_MAX` (2 chains or more) or whose bulk ESS is below :data:`ESS_MIN` is named in the
    warning with its value, followed by what to try (:func:`convergence_message`).
    ``stacklevel`` counts frames from the caller as :func:`warnings.warn` does: 1 names the line
    that calls ``check_convergence``, 2 (the default) the line that called that function (the
    user's ``bd.sample(...)``).

    Returns
    -------
    posterior, unchanged (a fit ends with ``return check_convergence(posterior)``).
    """
    message = convergence_message(posterior)
    if message is not None:
        warnings.warn(message, ConvergenceWarning, stacklevel=stacklevel + 1)
    return posterior
