"""Multinomial logistic BART's problem (K >= 3 classes): what one multiclass fit of
:class:`~bdtree_jax.BARTClassifier` samples, built once from ``(X, y)``.

Model (Murray 2021, log-linear BART; :mod:`bdtree_jax.kernels.bart_multiclass`)::

    P(y = k | x) = lambda_k(x) / sum_j lambda_j(x),   log lambda_k(x) = offset_k + sum of class k's M trees

``offset_k = log(share of class k in y)``: with every tree 0 the probabilities are the class
shares, so the prior of ``P(y = k | x)`` is centred near the base rates.  Every leaf's multiplicative
effect ``lambda ~ Gamma(a0, b0)`` as in log-linear BART for counts
(:mod:`bdtree_jax.problem.bart_poisson`): ``log lambda`` of prior mean 0 and sd
``tau = LOGIT_SCALE * 3 / (k sqrt(M))`` (``trigamma(a0) = tau**2``, ``b0 = exp(digamma(a0))``), so
each class's ``log lambda_k`` has prior sd ``LOGIT_SCALE * 3 / k`` about its offset.

``k`` means what it means for probit BART's two classes (:func:`~bdtree_jax.problem.bart.
build_bart_problem`): there, at the default ``k = 2``, the latent has sd 1.5 and 95 % prior band
``+-3``, the probabilities ``Phi(-3) .. Phi(3)`` (0.00135 .. 0.99865).  Here the log-odds of two
classes, ``log lambda_a - log lambda_b``, has sd ``sqrt(2) * tau * sqrt(M)``; :data:`LOGIT_SCALE`
``= logit(Phi(3)) / (3 sqrt(2))`` (1.557) gives it the 95 % band ``+-logit(Phi(3)) = +-6.61`` at
``k = 2``: the same probabilities, and like probit's band it scales as ``1 / k``.  Without the
factor (``3 / (k sqrt(M))``, the counts model's scale, before 2026-11-29) the same ``k`` held the
multiclass probabilities 1.56 x tighter than probit BART's, and multiclass BART was 10-26 % behind
one-vs-rest probit BART in test log-loss on wine at every ``k`` (``benchmarks/results/
bart_multiclass.md``); with it, at the default ``k``, multiclass BART is the better of the two on
wine and iris (by 8 % and 4 %, every split), and 8 % behind at ``k = 0.5`` on wine (same file).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.special import ndtr

from .._types import Array
from ..data import TreeData, check_classification_y
from ..likelihoods import BARTLeafPoissonGamma, poisson_gamma_hyperparameters
from ..priors.tree_data import to_device
from .bart import MAX_CUTS, BARTProblem, _binned, _f32, _feature_bins, _inputs, _tree_prior

__all__ = ["LOGIT_SCALE", "BARTMulticlassData", "BARTMulticlassProblem", "build_bart_multiclass_problem"]

#: ``logit(Phi(3)) / (3 sqrt(2))`` = 1.557: the leaf prior's sd is ``LOGIT_SCALE * 3 / (k sqrt(M))``
#: so that two classes' log-odds reach the probabilities probit BART's latent reaches at the same
#: ``k`` (module docstring).
LOGIT_SCALE: float = float((np.log(ndtr(3.0)) - np.log(ndtr(-3.0))) / (3.0 * np.sqrt(2.0)))


class BARTMulticlassData(NamedTuple):
    """What a multiclass sweep reads (a pytree of arrays).

    tree_data : TreeData of the inputs; its ``likelihood`` a :class:`BARTLeafPoissonGamma` (``a0``,
        ``b0``; its ``point_stats`` are replaced in every tree update).
    y : (n,) int32 class codes in ``0..K-1``.
    offsets : (K,) float32 ``offset_k``.
    sigma2_init : () 1 (unused).
    feature_bins : as :class:`~bdtree_jax.problem.bart.BARTData`.
    """

    tree_data: TreeData
    y: Array
    offsets: Array
    sigma2_init: Array = np.float32(1.0)
    feature_bins: Array | None = None


@dataclass(frozen=True, eq=False)
class BARTMulticlassProblem(BARTProblem):
    """:class:`~bdtree_jax.problem.bart.BARTProblem` of ``outcome="multiclass"``: ``classes`` (K,)
    the labels (sorted; ``y_train`` their codes), ``offsets`` (K,) float64, ``a0``, ``b0`` the leaves'
    gamma prior, ``tau2`` the prior variance of ``log lambda``; ``y_offset = 0``, ``y_scale = 1``."""

    a0: float = 1.0
    b0: float = 1.0
    offsets: np.ndarray | None = None

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    def hyperparameters(self) -> dict:
        """The calibrated prior: ``tau2``, ``a0``, ``b0``, ``offsets``."""
        return dict(tau2=self.tau2, a0=self.a0, b0=self.b0, offsets=np.asarray(self.offsets))


def build_bart_multiclass_problem(X, y, *, n_trees: int, max_depth: int = 5, alpha: float = 0.95,
                                  beta: float = 2.0, k: float = 2.0, split_prior: str = "uniform",
                                  min_leaf_size: int = 1, max_cuts: int | None = MAX_CUTS,
                                  valid_cuts: str = "ancestors", categorical_features="from_dtype",
                                  missing: str = "mia", estimator: str = "build_bart_multiclass_problem"
                                  ) -> BARTMulticlassProblem:
    """Multiclass log-linear BART: ``X`` (n, F) and ``y`` (n,) of K >= 3 class labels ->
    :class:`BARTMulticlassProblem` (module docstring; ``n_trees`` trees per class); the other
    options as :func:`~bdtree_jax.problem.bart.build_bart_problem`."""
    X, names, grid = _inputs(X, estimator, categorical_features, missing, max_cuts)
    classes, codes = check_classification_y(y, X.shape[0], estimator=estimator)
    if len(classes) < 3:
        raise ValueError(f"{estimator}: y has {len(classes)} classes; multiclass BART takes 3 or more "
                         "(two classes: probit BART).")
    prior = _tree_prior(len(X), max_depth=max_depth, alpha=alpha, beta=beta, min_leaf_size=min_leaf_size,
                        split_prior=split_prior, valid_cuts=valid_cuts)
    tau = LOGIT_SCALE * 3.0 / (k * np.sqrt(n_trees))
    a0, b0 = poisson_gamma_hyperparameters(tau)
    likelihood = BARTLeafPoissonGamma(np.float32(a0), np.float32(b0))
    offsets = np.log(np.bincount(codes, minlength=len(classes)) / len(codes))
    bins, tree_data = _binned(X, grid, np.zeros(len(codes)), prior, likelihood)
    data = BARTMulticlassData(tree_data, to_device(codes, np.int32), _f32(offsets), _f32(1.0),
                              _feature_bins(tree_data))
    return BARTMulticlassProblem(data, grid, prior, bins, codes, names, 0.0, 1.0, float(tau**2), outcome="multiclass",
                                 classes=classes, a0=a0, b0=b0, offsets=offsets)
