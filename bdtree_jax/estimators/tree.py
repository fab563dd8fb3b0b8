"""scikit-learn style estimators over the single-tree methods.

``BayesianTreeClassifier`` and ``BayesianTreeRegressor`` follow scikit-learn's conventions:
``__init__`` only stores keyword parameters (``get_params`` / ``set_params`` / ``clone`` work, so
they fit in ``Pipeline`` and ``GridSearchCV``, which can tune a method object's options as
``method__<option>``); ``fit`` builds the problem once, runs the method and sets ``posterior_`` (a
:class:`~bdtree_jax.posterior.Posterior`), ``n_features_in_`` and, for DataFrames,
``feature_names_in_``; predictions average over the posterior draws.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from .._renamed import RENAMED, renamed
from ..api import PRIOR_OPTIONS
from ..diagnostics import check_convergence
from ..methods import Method, RunOptions, from_flat, method_from_name
from ..methods.flat import TEMPERING_OPTIONS, method_options, warn_deprecated
from ..posterior.inclusion import split_shares
from ..priors import TreePrior
from ..problem import build_problem
from ._checks import _FeatureChecks

__all__ = ["BayesianTreeClassifier", "BayesianTreeRegressor"]

#: The run's options the estimators take (``devices`` is left to :func:`~bdtree_jax.sample`).
_RUN_OPTIONS = tuple(f.name for f in dataclasses.fields(RunOptions) if f.name != "devices")
#: The deprecated flat keywords: every method option and the tempering options (and their earlier names).
_DEPRECATED = tuple(method_options()) + TEMPERING_OPTIONS
_DEPRECATED += tuple(old for old, new in RENAMED.items() if new in _DEPRECATED)


def _store(estimator, params: dict) -> None:
    """``__init__``'s parameters as attributes (scikit-learn's convention: no checks here), the
    deprecated flat keywords in ``_deprecated``."""
    estimator._deprecated = dict(params.pop("deprecated"))
    for name, value in params.items():
        if name not in ("self", "__class__"):
            setattr(estimator, name, value)


def _check_finite_log_lik(posterior, problem, where: str) -> None:
    """A ``ValueError`` when the run's log-likelihood is not finite at some kept draw (float32
    overflow, or data the model gives zero density): never a silent fit."""
    log_lik = np.asarray(posterior.stats.get("log_lik", ()), np.float64)
    bad = ~np.isfinite(log_lik)
    if not bad.any():
        return
    hint = ""
    if problem.task == "regression":
        hint = f" y has standard deviation {float(np.std(np.asarray(problem.train_y, np.float64))):.3g}"
        if str(posterior.method).startswith("hmc-"):
            hint += (f"; {posterior.method}'s leaf priors (leaf means N(mu_bar, 1), sigma ~ InverseGamma(1.5, 1.5)) "
                     "are stated in y's own units: rescale y to about unit variance")
        hint += "."
    raise ValueError(f"{where}the log-likelihood is not finite at {int(bad.sum())} of {bad.size} draws (e.g. "
                     f"{log_lik[bad][0]}): the model's float32 computations overflowed or it gives the data zero "
                     f"density.{hint}")


class _BayesianTree(_FeatureChecks, BaseEstimator):
    _task = ""
    _leaf_options: tuple = ()

    def get_params(self, deep=True):
        """The parameters, the deprecated flat keywords given included; with ``deep``, a method
        object's options as ``method__<option>``."""
        params = super().get_params(deep=False)
        params.update(getattr(self, "_deprecated", {}))
        if deep and isinstance(self.method, Method):
            params.update((f"method__{k}", v) for k, v in self.method.options().items())
        return params

    def set_params(self, **params):
        """Set parameters; ``method__<option>`` replaces that option of the method (a frozen
        object: ``dataclasses.replace``; a name becomes its default object first)."""
        where = f"{type(self).__name__}.set_params: "
        nested = {k.partition("__")[2]: params.pop(k) for k in list(params) if k.startswith("method__")}
        nested = renamed(nested, where=where)
        # a keyword that is not a parameter goes with the deprecated ones (checked by fit)
        flat = {k: params.pop(k) for k in list(params) if "__" not in k and k not in self._get_param_names()}
        super().set_params(**params)
        self._deprecated = {**getattr(self, "_deprecated", {}), **flat}
        if nested:
            try:
                self.method = dataclasses.replace(method_from_name(self.method, where), **nested)
            except TypeError as e:
                raise ValueError(where + str(e)) from None
        return self

    def _fit(self, X, y):
        where = f"{type(self).__name__}: "
        unknown = sorted(set(self._deprecated) - set(_DEPRECATED))
        if unknown:
            raise TypeError(f"{type(self).__name__}() got unexpected keyword arguments {unknown}.")
        flat = {**{k: getattr(self, k) for k in PRIOR_OPTIONS}, **self._deprecated}
        method, flat_tempering, prior_options, moved = from_flat(self.method, flat, where=where)
        warn_deprecated(moved, stacklevel=4)
        if flat_tempering is not None and self.tempering is not None:
            raise ValueError(f"{where}give tempering= or num_temperatures=/delta_t=, not both.")
        try:
            prior = TreePrior(**prior_options)
            options = RunOptions(**{k: getattr(self, k) for k in _RUN_OPTIONS})
        except ValueError as e:
            raise ValueError(where + str(e)) from None
        problem = build_problem(X, y, task=self._task, prior=prior, where=where, **method.problem_options(),
                                likelihood={k: getattr(self, k) for k in self._leaf_options},
                                categorical_features=self.categorical_features, missing=self.missing)
        tempering = self.tempering if flat_tempering is None else flat_tempering
        posterior = method.run(problem, options, tempering, where=where)
        _check_finite_log_lik(posterior, problem, where)
        self.posterior_ = check_convergence(posterior, stacklevel=3)
        self._record_features(problem.n_features, problem.feature_names)
        return self

    def _sampler_name(self) -> str:
        return self.method.name if isinstance(self.method, Method) else str(self.method)

    @property
    def feature_importances_(self) -> np.ndarray:
        """(F,) posterior mean split inclusion: per draw, the share of the tree's split rules on each
        feature, averaged over the draws with a split (NaN if none has one).  With credible
        intervals: :func:`bdtree_jax.inspection.split_inclusion`."""
        check_is_fitted(self, "posterior_")
        shares = split_shares(self.posterior_)
        return shares.mean(0) if len(shares) else np.full(shares.shape[1], np.nan)

    def map_tree_text(self) -> str:
        """Text of the MAP tree with feature names and leaf summaries."""
        check_is_fitted(self, "posterior_")
        return self.posterior_.tree_text()


class BayesianTreeClassifier(ClassifierMixin, _BayesianTree):
    """Bayesian CART classifier: posterior over trees, Dirichlet–multinomial leaves.

    Parameters
    ----------
    method : str or Method, default "cgm"
        The sampler: a method object (:class:`~bdtree_jax.methods.CGM`,
        :class:`~bdtree_jax.methods.RJHMC`, :class:`~bdtree_jax.methods.PCFG`,
        :class:`~bdtree_jax.methods.SMC`, :class:`~bdtree_jax.methods.PG`,
        :class:`~bdtree_jax.methods.WU`, whose options are described there), or a name of
        :data:`~bdtree_jax.methods.METHODS` for its defaults: "cgm" (Chipman, George &
        McCulloch 1998), "hmc-df" / "hmc-dfi" (RJHMC-Tree on soft trees; ``posterior_`` is a
        :class:`~bdtree_jax.posterior.SoftTreePosterior`), "pcfg" (exact draws; a
        :class:`~bdtree_jax.posterior.PCFGPosterior`), "smc" (an
        :class:`~bdtree_jax.posterior.SMCPosterior`), "pg" (Particle Gibbs), "wu" (Wu,
        Tjelmeland & West 2007).  ``GridSearchCV`` tunes a method object's options as
        ``method__<option>``.
    max_depth, alpha, beta, min_leaf_size, split_prior, valid_cuts, structure, pinball_rate, pinball_balance, pinball_max_leaves
        The tree prior, :class:`~bdtree_jax.priors.TreePrior`'s options (defaults 6, 0.95, 1.0,
        1, "uniform", "data", "cgm", 3.0, 1.0, None): a node at depth ``d`` splits with
        probability ``alpha * (1 + d) ** -beta`` up to ``max_depth``, both children keeping at
        least ``min_leaf_size`` training rows (or the pinball structure prior).
    concentration : float > 0, default 1.0
        Symmetric Dirichlet concentration of the leaf class probabilities.
    tempering : Tempering or None
        Metropolis-coupled MCMC (:class:`~bdtree_jax.methods.Tempering`; MCMC methods only).
    num_warmup, num_samples, num_chains, seed, checkpoint, block_size, chain_method, data_shards, thin, run_until
        The run's options (:class:`~bdtree_jax.methods.RunOptions`; defaults 1000, 1000, 4, 0,
        None, None, None, 1, 1, None): ``data_shards`` splits every chain's training rows over that
        many devices (MCMC methods; it divides the devices and the rows), ``thin`` keeps every
        ``thin``-th draw after warm-up (``num_samples`` kept), ``run_until``
        (:class:`~bdtree_jax.Converged`) keeps sampling until the chains pass the convergence check.
    progress : bool or None, default False
        Show a progress bar (None: when stderr is a terminal).
    categorical_features : "from_dtype", None, or column indices, names or a boolean mask
        Which columns of ``X`` are categorical (default: a DataFrame's ``category``,
        object/string and ``bool`` columns; None: none).  At most 64 levels each; a level unseen
        at ``fit`` is routed as a missing value at prediction (docs/categorical-missing.md).
    missing : {"mia", "error"}, default "mia"
        Missing cells (NaN, None) in ``X``: routed by a missing-value bit of every rule, or
        refused.  Categorical features and missing cells need ``method="cgm"`` for now.
    **deprecated
        The flat method keywords of earlier versions (``proposal=``, ``num_particles=``,
        ``num_temperatures=`` ...: :func:`~bdtree_jax.methods.from_flat`); ``fit`` maps them onto the
        method and warns ``DeprecationWarning`` with the new spelling.

    Attributes
    ----------
    posterior_ : Posterior
    classes_ : (K,) ndarray
    n_features_in_ : int
    feature_names_in_ : (F,) ndarray of str, only when X was a DataFrame.
    feature_importances_ : (F,) posterior mean split inclusion (:func:`bdtree_jax.inspection.split_inclusion`).

    Examples
    --------
    >>> import bdtree_jax as bd
    >>> X, y = bd.datasets.load("iris")
    >>> clf = bd.BayesianTreeClassifier(max_depth=3, num_warmup=200, num_samples=200, num_chains=2)
    >>> clf.fit(X, y).score(X, y) > 0.9
    True
    """

    _task = "classification"
    _leaf_options = ("concentration",)

    def __init__(self, method="cgm", *, max_depth: int = 6, alpha: float = 0.95, beta: float = 1.0,
                 min_leaf_size: int = 1, split_prior: str = "uniform", valid_cuts: str = "data",
                 structure: str = "cgm", pinball_rate: float = 3.0, pinball_balance: float = 1.0,
                 pinball_max_leaves: int | None = None, concentration: float = 1.0, tempering=None,
                 num_warmup: int = 1000, num_samples: int = 1000, num_chains: int = 4, seed: int = 0,
                 progress: bool | None = False, checkpoint: str | None = None, block_size: int | None = None,
                 chain_method: str | None = None, data_shards: int = 1, thin: int = 1, run_until=None,
                 categorical_features="from_dtype", missing: str = "mia", **deprecated):
        _store(self, locals())

    def fit(self, X, y):
        """Sample the posterior over trees given training data; returns self."""
        self._fit(X, y)
        self.classes_ = self.posterior_.classes
        return self

    def predict_proba(self, X) -> np.ndarray:
        """(n, K) posterior-averaged class probabilities."""
        X = self._check_predict_X(X)
        return self.posterior_.predict_proba(X)

    def predict(self, X) -> np.ndarray:
        """(n,) class with the highest posterior-averaged probability."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]


class BayesianTreeRegressor(RegressorMixin, _BayesianTree):
    """Bayesian CART regressor: posterior over trees, CGM98 conjugate normal mean-shift leaves.

    Parameters are those of :class:`BayesianTreeClassifier` (without ``concentration``) plus
    the leaf model ``y ~ N(mu_leaf, sigma^2)``, ``mu_leaf ~ N(mu_bar, sigma^2 / a)``,
    ``sigma^2 ~ IG(nu/2, nu*lam/2)``:

    nu, lam, a, mu_bar : float or None
        ``None`` (default) picks the data-based defaults: ``mu_bar = mean(y)``, ``nu = 3``,
        ``lam`` with ``P(sigma^2 <= var(y)) = 0.9``, ``a = 1/3``
        (:func:`~bdtree_jax.likelihoods.default_normal_hyperparameters`).

    Examples
    --------
    >>> import bdtree_jax as bd
    >>> X, y = bd.datasets.make_cgm(300, seed=0)
    >>> reg = bd.BayesianTreeRegressor(max_depth=4, num_warmup=300, num_samples=300, num_chains=2)
    >>> reg.fit(X, y).score(X, y) > 0.9
    True
    """

    _task = "regression"
    _leaf_options = ("nu", "lam", "a", "mu_bar")

    def __init__(self, method="cgm", *, max_depth: int = 6, alpha: float = 0.95, beta: float = 1.0,
                 min_leaf_size: int = 1, split_prior: str = "uniform", valid_cuts: str = "data",
                 structure: str = "cgm", pinball_rate: float = 3.0, pinball_balance: float = 1.0,
                 pinball_max_leaves: int | None = None, nu: float | None = None, lam: float | None = None,
                 a: float | None = None, mu_bar: float | None = None, tempering=None, num_warmup: int = 1000,
                 num_samples: int = 1000, num_chains: int = 4, seed: int = 0, progress: bool | None = False,
                 checkpoint: str | None = None, block_size: int | None = None, chain_method: str | None = None,
                 data_shards: int = 1, thin: int = 1, run_until=None, categorical_features="from_dtype", missing: str = "mia",
                 **deprecated):
        _store(self, locals())

    def fit(self, X, y):
        """Sample the posterior over trees given training data; returns self."""
        return self._fit(X, y)

    def predict(self, X) -> np.ndarray:
        """(n,) posterior mean of the regression function."""
        X = self._check_predict_X(X)
        return self.posterior_.predict(X)

    def predict_interval(self, X, prob: float = 0.9, *, predictive: bool = False):
        """``(lower, upper)`` equal-tailed credible interval of the regression function, or with
        ``predictive=True`` a prediction interval for a new response (noise included)."""
        X = self._check_predict_X(X)
        return self.posterior_.predict_interval(X, prob=prob, predictive=predictive, seed=self.seed)
