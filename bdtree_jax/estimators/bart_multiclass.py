"""Multiclass BART for :class:`~bdtree_jax.BARTClassifier` with K >= 3 classes: Murray's (2021)
multinomial logistic log-linear BART (:mod:`bdtree_jax.kernels.bart_multiclass`).  The classifier
keeps its probit path for two classes and calls :func:`fit_multiclass` for three or more."""

from __future__ import annotations

import numpy as np

from ..kernels.bart import BARTConfig
from ..kernels.bart_multiclass import ClassKernel, bart_multiclass
from ..kernels.dart import dart
from ..methods._memory import check_bart
from ..posterior.bart_multiclass import bart_multiclass_posterior_from_traces
from ..problem.bart_multiclass import build_bart_multiclass_problem

__all__ = ["fit_multiclass", "is_multiclass", "multiclass_kernel", "multiclass_options", "multiclass_posterior",
           "sparse_multiclass_kernel"]


def is_multiclass(y) -> bool:
    """Whether ``y`` holds three or more class labels (scikit-learn's ``type_of_target`` says
    "multiclass"); anything else goes to the probit path and its checks."""
    import warnings

    from sklearn.utils.multiclass import type_of_target

    try:
        with warnings.catch_warnings():  # NaN or odd labels: the probit path's checks say what is wrong
            warnings.simplefilter("ignore")
            return type_of_target(np.asarray(y) if not hasattr(y, "dtype") else y) == "multiclass"
    except (ValueError, TypeError):
        return False


def multiclass_options() -> dict:
    """The :class:`~bdtree_jax.kernels.bart.BARTConfig` fields of a multiclass run (counts sweeps)."""
    return dict(outcome="continuous", sample_sigma=False)


def multiclass_kernel(config: BARTConfig, n_classes: int):
    """The sampling algorithm of a multiclass run."""
    return bart_multiclass(config, int(n_classes))


def sparse_multiclass_kernel(config: BARTConfig, dart_config, n_classes: int):
    """The sampling algorithm of a ``sparse=True`` multiclass run: DART around the K classes'
    sweeps, one ``s`` shared by the K forests (:class:`~bdtree_jax.kernels.bart_multiclass.ClassKernel`)."""
    return dart(config, dart_config, ClassKernel(int(n_classes)))


def multiclass_posterior(traces, problem, config, num_warmup, info):
    """The posterior of a multiclass run (:class:`~bdtree_jax.posterior.BARTMulticlassPosterior`)."""
    return bart_multiclass_posterior_from_traces(traces, problem, config, num_warmup, info)


def fit_multiclass(estimator, X, y):
    """Fit ``estimator`` (a :class:`~bdtree_jax.BARTClassifier`, parameters checked) on K >= 3
    classes: ``num_trees`` trees per class; ``offset`` must be None and ``data_shards`` 1."""
    name = type(estimator).__name__
    if estimator.offset is not None:
        raise ValueError(f"{name}: offset is the probit offset of two classes; with 3 or more classes it must be "
                         f"None (the class offsets are the log class shares); got {estimator.offset!r}.")
    if estimator.data_shards != 1:
        raise ValueError(f"{name}: data_shards must be 1 with 3 or more classes (row sharding is not supported for "
                         f"multiclass BART yet); got {estimator.data_shards!r}.")
    problem = build_bart_multiclass_problem(X, y, **estimator._problem_options())
    # the memory check of the run counts num_trees trees a draw; the draws hold K x num_trees
    num_warmup, num_samples, thin = int(estimator.num_warmup), int(estimator.num_samples), int(estimator.thin)
    check_bart(BARTConfig(int(estimator.num_trees) * problem.n_classes, int(estimator.max_depth),
                          leaf_dtype=estimator.leaf_dtype, sample_sigma=False), problem, int(estimator.num_chains),
               num_warmup, num_samples, min(100, num_warmup + num_samples * thin), where=f"{name}: ")
    estimator.classes_ = problem.classes
    return estimator._run(problem, ("bart-multiclass", problem.prior, estimator.k,
                                    tuple(float(v) for v in problem.offsets), estimator.max_cuts), stacklevel=4)
