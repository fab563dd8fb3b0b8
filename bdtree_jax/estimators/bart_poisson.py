"""scikit-learn estimator of log-linear BART for counts: :class:`BARTPoissonRegressor`
(:mod:`bdtree_jax.kernels.bart_poisson`, Murray 2021)."""

from __future__ import annotations

import numpy as np
from sklearn.base import RegressorMixin

from .._renamed import accepts_renamed
from ..kernels.bart import BARTConfig
from ..kernels import bart_poisson as bart_poisson_kernel
from ..kernels.bart_poisson import bart_poisson
from ..kernels.dart import dart
from ..posterior.bart_poisson import bart_poisson_posterior_from_traces
from ..problem.bart import MAX_CUTS, BARTProblem
from ..problem.bart_poisson import build_bart_poisson_problem
from .bart import _BARTEstimator

__all__ = ["BARTPoissonRegressor"]


@accepts_renamed("n_trees")
class BARTPoissonRegressor(RegressorMixin, _BARTEstimator):
    """Log-linear BART for counts (Murray 2021): ``y ~ Poisson(exposure exp(offset + sum of
    num_trees trees))``, every leaf a multiplicative effect ``lambda ~ Gamma(a0, b0)``, sampled by
    Bayesian backfitting with the leaves integrated out (:mod:`bdtree_jax.kernels.bart_poisson`,
    ``docs/methods/bart-counts.md``).

    Parameters
    ----------
    num_trees, tree_sampler, num_warmup, num_samples, num_chains, seed, max_depth, alpha, beta,
    num_particles, split_prior, max_cuts, valid_cuts, checkpoint, progress, thin, leaf_dtype,
    categorical_features, missing, sparse, sparse_theta, sparse_a, sparse_b, sparse_rho
        As :class:`~bdtree_jax.BARTRegressor` (every ``tree_sampler`` updates a tree with the
        single-tree kernels; "grow-prune" proposes grow or prune; ``sparse=True``: DART's prior on
        the split variables, :func:`bdtree_jax.kernels.dart.dart` around this sweep).
    k : float, default 2.0
        ``log lambda`` has prior mean 0 and sd ``3 / (k sqrt(num_trees))`` (the sum of the trees
        has prior sd ``3 / k``): ``trigamma(a0) = (3 / (k sqrt(num_trees)))**2``, ``b0 = exp(digamma(a0))``.
    data_shards : int, default 1
        Only 1 (row sharding is not supported for counts yet).

    Attributes
    ----------
    posterior_ : BARTPoissonPosterior
    feature_importances_, variable_inclusion_, split_probs_, theta_, s_acceptance_, theta_acceptance_,
    n_features_in_, feature_names_in_
        As :class:`~bdtree_jax.BARTRegressor`.
    """

    def __init__(
        self,
        num_trees: int = 200,
        tree_sampler: str = "grow-prune",
        *,
        num_warmup: int = 250,
        num_samples: int = 500,
        num_chains: int = 2,
        seed: int = 0,
        max_depth: int = 5,
        alpha: float = 0.95,
        beta: float = 2.0,
        k: float = 2.0,
        num_particles: int = 10,
        split_prior: str = "uniform",
        max_cuts: int | None = MAX_CUTS,
        valid_cuts: str = "ancestors",
        checkpoint: str | None = None,
        progress: bool | None = None,
        data_shards: int = 1,
        thin: int = 1,
        leaf_dtype: str = "float32",
        categorical_features="from_dtype",
        missing: str = "mia",
        sparse: bool = False,
        sparse_theta: float | None = None,
        sparse_a: float = 0.5,
        sparse_b: float = 1.0,
        sparse_rho: float | None = None,
    ):
        self._store(locals())

    def _check_params(self) -> None:
        super()._check_params()
        if self.data_shards != 1:
            raise ValueError(f"{type(self).__name__}: data_shards must be 1 (row sharding is not supported for "
                             f"counts yet); got {self.data_shards!r}.")

    def _outcome_options(self, problem: BARTProblem) -> dict:
        return dict(outcome="continuous", sample_sigma=False)

    def _kernel(self, config: BARTConfig):
        return bart_poisson(config)

    def _sparse_kernel(self, config: BARTConfig, dart_config):
        return dart(config, dart_config, bart_poisson_kernel)

    def _posterior(self, traces, problem, config, num_warmup, info):
        return bart_poisson_posterior_from_traces(traces, problem, config, num_warmup, info)

    def fit(self, X, y, exposure=None):
        """Sample the posterior given training counts ``y`` (n,) (non-negative integers) and their
        ``exposure`` (n,) > 0 (None: 1 for every row); returns self."""
        self._check_params()
        problem = build_bart_poisson_problem(X, y, exposure, **self._problem_options())
        return self._run(problem, ("bart-poisson", problem.prior, self.k, problem.y_offset, self.max_cuts))

    def predict(self, X, exposure=None) -> np.ndarray:
        """(n,) posterior mean of the expected count ``exposure exp(f(x))`` (exposure default 1)."""
        X = self._check_predict_X(X)
        return self.posterior_.predict(X, exposure)

    def predict_interval(self, X, prob: float = 0.9, exposure=None, predictive: bool = False):
        """``(lower, upper)`` equal-tailed credible interval of the expected count, or with
        ``predictive=True`` a prediction interval for a new count (Poisson noise included)."""
        X = self._check_predict_X(X)
        return self.posterior_.predict_interval(X, prob=prob, exposure=exposure, predictive=predictive,
                                                seed=int(self.seed))

    def score(self, X, y, sample_weight=None, exposure=None) -> float:
        """R^2 of the counts ``y`` against :meth:`predict` ``(X, exposure)`` (scikit-learn's regressor
        score; a search that does not route ``exposure`` to it scores with exposure 1)."""
        from sklearn.metrics import r2_score

        return float(r2_score(y, self.predict(X, exposure), sample_weight=sample_weight))

    def predict_draws(self, X, exposure=None) -> np.ndarray:
        """(num_chains * num_samples, n) the expected count per posterior draw."""
        X = self._check_predict_X(X)
        return self.posterior_.predict_rate_draws(X, exposure)
