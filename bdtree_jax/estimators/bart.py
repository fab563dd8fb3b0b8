"""scikit-learn estimators of BART (the face layer): :class:`BARTRegressor` (a real response)
and :class:`BARTClassifier` (probit, two classes).

``fit`` checks the parameters, builds the problem once (:mod:`bdtree_jax.problem.bart`: ``X`` and
``y`` validated, ``X`` binned, the prior calibrated), runs the backfitting kernel
(:mod:`bdtree_jax.kernels.bart`) through :func:`bdtree_jax.driver.run_chains` and keeps the draws
as ``posterior_`` (:mod:`bdtree_jax.posterior.bart`).
"""

from __future__ import annotations

import time

import jax
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from .._renamed import accepts_renamed, renamed
from ..data import SPLIT_PRIORS, VALID_CUTS, check_max_cuts
from ..diagnostics import check_convergence
from ..driver import check_rows, plan_chains, run_chains
from ..kernels import cgm
from ..kernels.bart import LEAF_DTYPES, MAX_DEPTH, TREE_SAMPLERS, BARTConfig, bart
from ..methods._memory import check_bart
from ..methods.base import check_checkpoint, check_seed
from ..posterior.bart import bart_posterior_from_traces
from ..problem.bart import MAX_CUTS, BARTProblem, build_bart_probit_problem, build_bart_problem
from ..kernels.dart import dart
from . import bart_multiclass as _multiclass
from . import bart_variance as _variance
from ._checks import _FeatureChecks
from ._monotone import MonotoneMixin
from ._sparse import SparseMixin
from .._validate import check_one_of, is_int

__all__ = ["BARTClassifier", "BARTRegressor"]


class _BARTEstimator(MonotoneMixin, SparseMixin, _FeatureChecks, BaseEstimator):
    """What the BART estimators share: parameter checks, the problem's options, the run and the
    variable importances."""

    def _store(self, params: dict) -> None:
        """``__init__``'s arguments kept unchanged as attributes (scikit-learn's convention)."""
        for name, value in params.items():
            if name != "self":
                setattr(self, name, value)

    def set_params(self, **params):
        """scikit-learn's ``set_params``; ``n_trees`` (deprecated) sets ``num_trees``."""
        return super().set_params(**renamed(params, {"n_trees": "num_trees"}, where=f"{type(self).__name__}: "))

    def _extra_reals(self) -> tuple:
        """``(attribute, ok, what)`` checks of the subclass's real parameters."""
        return ()

    def _check_params(self) -> None:
        name = type(self).__name__
        ints = (("num_trees", 1), ("num_warmup", 0), ("num_samples", 1), ("num_chains", 1), ("max_depth", 1),
                ("num_particles", 1), ("data_shards", 1), ("thin", 1))
        for attr, low in ints:
            v = getattr(self, attr)
            if not is_int(v) or v < low:
                raise ValueError(f"{name}: {attr} must be an integer >= {low}; got {v!r}.")
        try:
            check_seed(self.seed)
            check_checkpoint(self.checkpoint)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        if self.max_depth > MAX_DEPTH:
            raise ValueError(f"{name}: max_depth must be an integer in [1, {MAX_DEPTH}]; got {self.max_depth!r}.")
        check_one_of(f"{name}: leaf_dtype", self.leaf_dtype, LEAF_DTYPES)
        check_one_of(f"{name}: tree_sampler", self.tree_sampler, TREE_SAMPLERS)
        check_one_of(f"{name}: split_prior", self.split_prior, SPLIT_PRIORS)
        check_max_cuts(self.max_cuts, where=f"{name}: ")
        check_one_of(f"{name}: valid_cuts", self.valid_cuts, VALID_CUTS)

        def real(attr, ok, what):
            v = getattr(self, attr)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v) \
                    or not ok(float(v)):
                raise ValueError(f"{name}: {attr} must be {what}; got {v!r}.")

        real("alpha", lambda v: 0 < v < 1, "in (0, 1)")
        real("beta", lambda v: v >= 0, ">= 0")
        real("k", lambda v: v > 0, "> 0")
        for check in self._extra_reals():
            real(*check)
        self._dart_config()
        self._check_monotone()

    def _problem_options(self) -> dict:
        """The options both problem builders take, from the (checked) parameters."""
        return dict(n_trees=int(self.num_trees), max_depth=int(self.max_depth), alpha=float(self.alpha),
                    beta=float(self.beta), k=float(self.k), split_prior=self.split_prior, max_cuts=self.max_cuts,
                    valid_cuts=self.valid_cuts, categorical_features=self.categorical_features, missing=self.missing,
                    estimator=type(self).__name__)

    def _sampler_name(self) -> str:
        return "bart"

    def _run(self, problem: BARTProblem, fingerprint: tuple, *, stacklevel: int = 3):
        """Sample ``problem`` and set ``posterior_``; ``fingerprint`` (its name first) identifies
        the run's checkpoint together with the kernel's configuration; ``stacklevel`` the frames
        from here to the user's ``fit`` call, for the convergence warning."""
        try:
            plan = plan_chains(int(self.num_chains), data_shards=int(self.data_shards))
            if plan.data_shards > 1:
                check_rows(problem.data, plan.data_shards)
        except ValueError as e:
            raise ValueError(f"{type(self).__name__}: {e}") from None
        dart_config = self._dart_config()
        dtypes = cgm.CGMConfig.from_prior(problem.prior, n_features=problem.n_features,
                                          n_cuts=int(problem.grid.n_cuts.max())).trace_dtypes
        config = BARTConfig(int(self.num_trees), int(self.max_depth), self.tree_sampler,
                            num_particles=int(self.num_particles), trace_dtypes=dtypes,
                            incremental=plan.chain_method == "loop", leaf_dtype=self.leaf_dtype,
                            general_rules=_general(problem), **self._outcome_options(problem))
        num_warmup, num_samples, thin = int(self.num_warmup), int(self.num_samples), int(self.thin)
        num_iterations = num_warmup + num_samples * thin
        check_bart(config, problem, int(self.num_chains), num_warmup, num_samples, min(100, num_iterations),
                   where=f"{type(self).__name__}: ")
        t0 = time.perf_counter()
        if dart_config is not None:
            fingerprint = tuple(fingerprint) + (dart_config,)
        monotone = self._monotone(problem, config)
        if monotone is not None:
            kernel, fingerprint = self._monotone_kernel(config, monotone, dart_config), tuple(fingerprint) + (monotone,)
        else:
            kernel = self._kernel(config) if dart_config is None else self._sparse_kernel(config, dart_config)
        traces, _ = run_chains(
            kernel, self._run_data(problem),
            key=jax.random.key(int(self.seed)), num_chains=int(self.num_chains),
            num_iterations=num_iterations, block_size=min(100, num_iterations),
            progress=self.progress, checkpoint=self.checkpoint,
            fingerprint=(fingerprint[0], config) + tuple(fingerprint[1:]), description=fingerprint[0], plan=plan,
            num_warmup=num_warmup, thin=thin,
        )
        seconds = time.perf_counter() - t0
        info = dict(seed=int(self.seed), num_warmup=num_warmup, num_samples=num_samples, seconds=seconds,
                    seconds_per_sweep=seconds / num_iterations)
        if thin != 1 or plan.data_shards != 1:
            info.update(thin=thin, data_shards=plan.data_shards)
        traces = self._keep_sparse_traces(traces, num_warmup)
        self.posterior_ = check_convergence(self._posterior(traces, problem, config, num_warmup, info),
                                            stacklevel=stacklevel)
        self._record_features(problem.n_features, problem.feature_names)
        return self

    def _outcome_options(self, problem: BARTProblem) -> dict:
        """The :class:`~bdtree_jax.kernels.bart.BARTConfig` fields set by the outcome."""
        return dict(outcome=problem.outcome)

    def _kernel(self, config: BARTConfig):
        """The sampling algorithm of the run (:func:`~bdtree_jax.kernels.bart.bart`)."""
        return bart(config)

    def _sparse_kernel(self, config: BARTConfig, dart_config):
        """The sampling algorithm of a ``sparse=True`` run (:func:`~bdtree_jax.kernels.dart.dart`)."""
        return dart(config, dart_config)

    def _run_data(self, problem: BARTProblem):
        """What the sampling algorithm reads (``problem.data``; survival BART adds the censoring)."""
        return problem.data

    def _posterior(self, traces: dict, problem: BARTProblem, config: BARTConfig, num_warmup: int, info: dict):
        """The posterior object of the run's traces."""
        return bart_posterior_from_traces(traces, problem, config, num_warmup, info)

    @property
    def feature_importances_(self) -> np.ndarray:
        """(F,) posterior mean variable-inclusion proportions (fraction of split rules on each
        feature; :meth:`~bdtree_jax.posterior.BARTPosterior.variable_inclusion`).  Per feature
        name and with spread: ``posterior_.variable_inclusion_summary()``."""
        check_is_fitted(self, "posterior_")
        return self.posterior_.variable_inclusion(mean=True)


def _general(problem: BARTProblem) -> bool:
    """Whether the problem's data have categorical features or missing-value bits."""
    td = problem.data.tree_data
    return td.level_masks is not None or td.missing_code is not None


@accepts_renamed("n_trees")
class BARTRegressor(RegressorMixin, _BARTEstimator):
    """Bayesian additive regression trees (Chipman, George & McCulloch 2010).

    ``y = sum of num_trees trees + N(0, sigma2)`` sampled by Bayesian backfitting with one update per
    tree and sweep by ``tree_sampler`` (:mod:`bdtree_jax.kernels.bart`).

    Parameters
    ----------
    num_trees : int, default 200
    tree_sampler : {"grow-prune", "cgm", "pg"}, default "grow-prune"
        One Metropolis–Hastings grow/prune proposal per tree, one CGM98 grow/prune/change/swap
        proposal, or one Particle Gibbs sweep (``num_particles``; Lakshminarayanan et al. 2015).
    num_warmup, num_samples, num_chains : int, default 250, 500, 2
        Sweeps discarded and kept per chain, independent chains.  Memory of the kept trees:
        about ``num_trees * (2**(max_depth+1) - 1) * 8`` bytes per draw (101 KB at the defaults).
    seed : int, default 0
    max_depth : int, default 5
        Truncation of the tree prior (a node at this depth is a leaf; 5 is bartz's default, whose
        ``maxdepth=6`` counts levels; with ``beta = 2`` a node at depth 5 splits with prior
        probability 0.026).
    alpha, beta : float, default 0.95, 2.0
        Split probability ``alpha (1 + depth)**-beta``.
    k : float, default 2.0
        Leaf prior sd ``0.5 / (k sqrt(num_trees))`` on ``y`` rescaled to [-0.5, 0.5].
    nu, q : float, default 3.0, 0.9
        ``sigma2 ~ nu lam / chi2_nu`` with ``P(sigma < sigma_hat) = q``, ``sigma_hat`` the residual
        sd of a linear regression of ``y`` on ``X``.
    num_particles : int, default 10
        Particles of ``tree_sampler="pg"``.
    split_prior : {"uniform", "range"}, default "uniform"
        The tree prior's choice of a cut (:mod:`bdtree_jax.priors`).
    max_cuts : int or None, default 255
        Candidate cuts per feature: a feature with more distinct values keeps this many cuts at
        quantiles of its distinct values (bartz's default grid; R BART's ``usequants``), None
        keeps every midpoint (:func:`~bdtree_jax.data.make_split_grid`).  The grid is part of the
        prior (the rules a tree can have), and fewer cuts make the per-feature tables smaller.
    valid_cuts : {"ancestors", "data"}, default "ancestors"
        Where a node's available cuts come from (:mod:`bdtree_jax.priors`): the range its
        ancestors' rules leave on each feature ("ancestors", the BART prior as BayesTree, the BART
        package and bartz implement it; a tree with an empty leaf has prior 0), or the cuts that
        split the node's training rows ("data", CGM98's, the single-tree samplers' default).
        "ancestors" lets a sweep propose without reading the rows (faster).
    checkpoint : str or None
        Checkpoint file; an interrupted fit resumes from it.
    progress : bool or None
        Progress bar (None: when stderr is a terminal).
    data_shards : int, default 1
        Split every chain's training rows over this many devices (a divisor of the number of
        devices and of the rows; chains spread over ``devices // data_shards`` device groups):
        one chain's data can exceed one device.  Same trees as unsharded, floats to float32
        round-off (:class:`~bdtree_jax.methods.RunOptions`, docs/chains-devices.md).
    thin : int, default 1
        Keep every ``thin``-th sweep after warm-up: ``num_samples`` draws from
        ``num_warmup + num_samples * thin`` sweeps; the others are never recorded.
    leaf_dtype : "float32", "bfloat16" or "float16", default "float32"
        Float type the kept leaf values are stored in (the sampler works in float32; a 2-byte
        type takes a quarter off a kept draw of 200 trees, docs/memory.md).
    categorical_features : "from_dtype", None, or column indices, names or a boolean mask
        Which columns of ``X`` are categorical (as :class:`~bdtree_jax.BayesianTreeClassifier`).
    missing : {"mia", "error"}, default "mia"
        Missing cells in ``X``: routed (MIA, docs/categorical-missing.md), or refused.  With
        categorical features or missing cells every tree is updated by the general-rule kernels
        (``tree_sampler`` "grow-prune" or "cgm": the general-rule CGM chain; "pg": Particle Gibbs
        over general rules, level sets and missing-value bits drawn from the prior).
    sparse : bool, default False
        DART (Linero 2018, docs/methods/bart.md): a Dirichlet prior ``s ~ Dirichlet(theta/p)`` on
        the split variables' probabilities, updated every sweep (:mod:`bdtree_jax.kernels.dart`);
        ``variable_inclusion_`` and ``sparsity_summary()`` then report each feature's posterior
        inclusion (a categorical column is one feature).  Every ``tree_sampler``.
    sparse_theta : float or None, default None
        DART's concentration ``theta``: None puts Linero's prior on it,
        ``theta / (theta + sparse_rho) ~ Beta(sparse_a, sparse_b)``; a number fixes it.
    sparse_a, sparse_b : float, default 0.5, 1.0
    sparse_rho : float or None, default None (the number of features)
    variance_trees : int, default 0
        Heteroskedastic BART (HBART, Pratola et al. 2020; stochtree's variance forest;
        docs/methods/bart-variance.md): a second forest of this many trees on ``log sigma2(x)``,
        ``sigma2(x) = sigma_hat**2 / prod_j lambda_j(x)`` with leaf factors
        ``lambda ~ Gamma(J / 1.5**2 + 1/2, J / 1.5**2)`` (:mod:`bdtree_jax.kernels.bart_variance`);
        ``nu`` and ``q`` are then unused.  0: the homoskedastic model (``sigma`` one number).
        With ``sparse=True`` DART's ``s`` weighs the mean forest's split variables (its
        inclusion summaries are the mean forest's); the variance forest keeps the uniform rule
        prior.  Not with ``data_shards > 1`` yet.
    monotonic_cst : None, array-like of -1/0/+1 per feature, or dict {feature name: -1/0/+1}
        Monotone constraints (mBART, docs/methods/bart-monotone.md): every draw's prediction is
        nondecreasing (+1) or nonincreasing (-1) in those features.  Numeric features without
        missing cells; ``tree_sampler="grow-prune"``; with ``sparse=True`` too.

    Attributes
    ----------
    posterior_ : BARTPosterior (BARTVariancePosterior with ``variance_trees >= 1``)
    feature_importances_ : (F,) posterior mean variable-inclusion proportions.
    variable_inclusion_ : (F,) posterior inclusion probabilities (share of draws splitting on each feature).
    split_probs_ : (C, S, F) the kept draws of DART's ``s``; ``theta_`` (C, S); ``s_acceptance_``,
        ``theta_acceptance_`` (sparse=True only).
    n_features_in_ : int
    feature_names_in_ : (F,) ndarray of str, only when X was a DataFrame.
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
        nu: float = 3.0,
        q: float = 0.9,
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
        variance_trees: int = 0,
        monotonic_cst=None,
    ):
        self._store(locals())

    def _extra_reals(self) -> tuple:
        return (("nu", lambda v: v > 0, "> 0"), ("q", lambda v: 0 < v < 1, "in (0, 1)"))

    def _check_params(self) -> None:
        super()._check_params()
        v = getattr(self, "variance_trees", 0)  # an estimator pickled before the parameter existed: 0
        if not is_int(v) or v < 0:
            raise ValueError(f"{type(self).__name__}: variance_trees must be an integer >= 0; got {v!r}.")

    def _heteroskedastic(self) -> bool:
        return getattr(self, "variance_trees", 0) > 0

    def fit(self, X, y):
        """Sample the posterior given training data; returns self."""
        self._check_params()
        if self._heteroskedastic():
            return _variance.fit_variance(self, X, y)
        problem = build_bart_problem(X, y, nu=float(self.nu), q=float(self.q), **self._problem_options())
        return self._run(problem, ("bart", problem.prior, self.k, self.nu, self.q, self.max_cuts))

    def _outcome_options(self, problem: BARTProblem) -> dict:
        return _variance.variance_options() if self._heteroskedastic() else super()._outcome_options(problem)

    def _kernel(self, config: BARTConfig):
        return _variance.variance_kernel(config, self.variance_trees) if self._heteroskedastic() else bart(config)

    def _sparse_kernel(self, config: BARTConfig, dart_config):
        if not self._heteroskedastic():
            return super()._sparse_kernel(config, dart_config)
        return _variance.sparse_variance_kernel(config, self.variance_trees, dart_config)

    def _run_data(self, problem: BARTProblem):
        return problem.variance_data() if self._heteroskedastic() else problem.data

    def _posterior(self, traces, problem, config, num_warmup, info):
        if self._heteroskedastic():
            return _variance.variance_posterior(traces, problem, config, num_warmup, info)
        return super()._posterior(traces, problem, config, num_warmup, info)

    def predict_sigma(self, X) -> np.ndarray:
        """(n,) posterior mean of the noise sd ``sigma(x)`` at the rows of ``X`` (``y``'s units);
        ``variance_trees >= 1`` only."""
        posterior, X = self._sigma_posterior(X)
        return posterior.predict_sigma(X)

    def predict_sigma_interval(self, X, prob: float = 0.9):
        """``(lower, upper)`` (n,) equal-tailed credible interval of ``sigma(x)``; ``variance_trees >= 1``."""
        posterior, X = self._sigma_posterior(X)
        return posterior.predict_sigma_interval(X, prob=prob)

    def _sigma_posterior(self, X):
        check_is_fitted(self, "posterior_")
        if not hasattr(self.posterior_, "predict_sigma"):
            raise ValueError(f"{type(self).__name__}: predict_sigma needs a fit with variance_trees >= 1 (this "
                             f"model's noise sd is one number: posterior_.sigma).")
        return self.posterior_, self._check_predict_X(X)

    def predict(self, X) -> np.ndarray:
        """(n,) posterior mean of the regression function."""
        X = self._check_predict_X(X)
        return self.posterior_.predict(X)

    def predict_interval(self, X, prob: float = 0.9, predictive: bool = False):
        """``(lower, upper)`` equal-tailed credible interval of the regression function, or with
        ``predictive=True`` a prediction interval for a new response (noise included)."""
        X = self._check_predict_X(X)
        return self.posterior_.predict_interval(X, prob=prob, predictive=predictive, seed=int(self.seed))


@accepts_renamed("n_trees")
class BARTClassifier(ClassifierMixin, _BARTEstimator):
    """BART classification: binary probit BART (Chipman, George & McCulloch 2010, §4.2; bartz's
    ``outcome_type="binary"``) for two classes, multinomial logistic BART (Murray 2021's log-linear
    BART, ``num_trees`` trees per class; :mod:`bdtree_jax.kernels.bart_multiclass`,
    docs/methods/bart.md) for K >= 3.

    ``P(y = classes_[1] | x) = Phi(offset + sum of num_trees trees)``, sampled with Albert–Chib
    latents: every sweep draws ``z_i ~ N(f(x_i), 1)`` truncated to the side of 0 given by ``y_i``,
    then backfits the trees on ``z - offset`` as :class:`BARTRegressor` does with ``sigma = 1``
    (:mod:`bdtree_jax.kernels.bart`).

    Parameters
    ----------
    num_trees, tree_sampler, num_warmup, num_samples, num_chains, seed, max_depth, alpha, beta,
    num_particles, split_prior, max_cuts, valid_cuts, checkpoint, progress, data_shards, thin, leaf_dtype,
    categorical_features, missing, sparse, sparse_theta, sparse_a, sparse_b, sparse_rho, monotonic_cst
        As :class:`BARTRegressor` (``monotonic_cst``: two classes only).
    k : float, default 2.0
        Leaf prior sd ``3 / (k sqrt(num_trees))`` on the probit scale (Chipman et al. 2010's
        binary default: the sum of trees has prior sd ``3 / k``); with K >= 3 classes the prior sd
        of a leaf's ``log lambda`` (each class's ``log lambda_k`` has prior sd ``3 / k``).
    offset : float or None, default None
        Latent mean at which the trees start; None: ``Phi^-1(mean(y == classes_[1]))`` (bartz's
        and BayesTree's default), so the prior of ``P(y = 1 | x)`` is centred at the base rate.
        Two classes only (K >= 3: the class offsets are the log class shares).

    Attributes
    ----------
    classes_ : (K,) ndarray of the labels (sorted); with two, ``classes_[1]`` is the "positive" class.
    posterior_ : BARTClassifierPosterior (two classes) or BARTMulticlassPosterior (K >= 3)
    feature_importances_, variable_inclusion_, split_probs_, theta_, s_acceptance_, theta_acceptance_,
    n_features_in_, feature_names_in_
        As :class:`BARTRegressor`.
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
        offset: float | None = None,
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
        monotonic_cst=None,
    ):
        self._store(locals())

    def _extra_reals(self) -> tuple:
        return () if self.offset is None else (("offset", lambda v: True, "None or a finite number"),)

    def fit(self, X, y):
        """Sample the posterior given training data; returns self.  Two classes: probit BART; three
        or more: multinomial logistic log-linear BART (:mod:`~bdtree_jax.estimators.bart_multiclass`)."""
        self._check_params()
        if _multiclass.is_multiclass(y):
            return _multiclass.fit_multiclass(self, X, y)
        offset = None if self.offset is None else float(self.offset)
        problem = build_bart_probit_problem(X, y, offset=offset, **self._problem_options())
        self.classes_ = problem.classes
        return self._run(problem, ("bart-probit", problem.prior, self.k, problem.y_offset, self.max_cuts))

    def _outcome_options(self, problem: BARTProblem) -> dict:
        if problem.outcome == "multiclass":
            return _multiclass.multiclass_options()
        return super()._outcome_options(problem)

    def _kernel(self, config: BARTConfig):
        return bart(config) if config.binary else _multiclass.multiclass_kernel(config, len(self.classes_))

    def _sparse_kernel(self, config: BARTConfig, dart_config):
        if config.binary:
            return super()._sparse_kernel(config, dart_config)
        return _multiclass.sparse_multiclass_kernel(config, dart_config, len(self.classes_))

    def _posterior(self, traces, problem, config, num_warmup, info):
        if problem.outcome == "multiclass":
            return _multiclass.multiclass_posterior(traces, problem, config, num_warmup, info)
        return super()._posterior(traces, problem, config, num_warmup, info)

    def predict_proba(self, X) -> np.ndarray:
        """(n, K) posterior mean class probabilities, columns in the order of ``classes_``."""
        X = self._check_predict_X(X)
        return self.posterior_.predict_proba(X)

    def predict(self, X) -> np.ndarray:
        """(n,) the class of highest posterior mean probability."""
        X = self._check_predict_X(X)
        return self.posterior_.predict(X)

    def predict_interval(self, X, prob: float = 0.9):
        """``(lower, upper)`` equal-tailed credible interval of ``P(y = classes_[1] | x)``, each (n,);
        with K >= 3 classes of every class's probability, each (n, K)."""
        X = self._check_predict_X(X)
        return self.posterior_.predict_interval(X, prob=prob)
