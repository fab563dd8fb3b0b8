"""scikit-learn style estimators over the samplers.

``BayesianTreeClassifier`` and ``BayesianTreeRegressor`` follow scikit-learn's conventions:
``__init__`` only stores keyword parameters (``get_params`` / ``set_params`` / ``clone`` work, so
they fit in ``Pipeline`` and ``GridSearchCV``); ``fit`` validates the input, runs the sampler and
sets ``posterior_`` (a :class:`~bdtree_jax.posterior.Posterior`), ``n_features_in_`` and, for
DataFrames, ``feature_names_in_``; predictions average over the posterior draws.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ..data import check_X
from ..sampling import METHODS, sample
from ._checks import _FeatureChecks

__all__ = ["BayesianTreeClassifier", "BayesianTreeRegressor"]


class _BayesianTree(_FeatureChecks, BaseEstimator):
    _task = ""

    def _sampler_kwargs(self) -> dict:
        params = self.get_params()
        if params["method"] not in METHODS:
            raise ValueError(f"{type(self).__name__}: unknown method {params['method']!r}; available: {METHODS}.")
        return params

    def _fit(self, X, y):
        name = type(self).__name__
        Xv, names = check_X(X, estimator=name)
        kwargs = self._sampler_kwargs()
        self.posterior_ = sample(X, y, task=self._task, **kwargs)
        self._record_features(Xv.shape[1], names)
        return self

    def map_tree_text(self) -> str:
        """Text of the MAP tree with feature names and leaf summaries."""
        check_is_fitted(self, "posterior_")
        return self.posterior_.tree_text()


class BayesianTreeClassifier(ClassifierMixin, _BayesianTree):
    """Bayesian CART classifier: posterior over trees, Dirichlet–multinomial leaves.

    Parameters
    ----------
    method : {"cgm", "hmc-df", "hmc-dfi", "pcfg", "smc", "pg", "wu"}
        Sampler.  "cgm": Chipman, George & McCulloch (1998) grow/prune/change/swap MH on hard
        trees.  "hmc-df" / "hmc-dfi": RJHMC-Tree (Cochrane et al. 2023) on soft trees, one split
        feature per node / simplex weights over features (``posterior_`` is then a
        :class:`~bdtree_jax.posterior.SoftTreePosterior`).  "pcfg": BCART-PCFG (Sullivan et al. 2023),
        independent exact posterior draws by dynamic programming over boxes (``posterior_`` is a
        :class:`~bdtree_jax.posterior.PCFGPosterior`).  "smc": top-down particle filtering
        (Lakshminarayanan et al. 2013) on the same prior as "cgm" (``posterior_`` is an
        :class:`~bdtree_jax.posterior.SMCPosterior`, with the evidence estimate ``log_evidence``).
        "pg": Particle Gibbs (Lakshminarayanan et al. 2015), an MCMC chain whose every iteration
        is a conditional SMC sweep with the current tree as the reference particle (same prior).
        "wu": Wu, Tjelmeland & West (2007), CGM steps around a restructure move that redraws
        the tree over its fixed leaf partition (same prior).
    max_depth : int, default 6
        Depth at which the tree prior is truncated (a node there is a leaf).
    alpha, beta : float, default 0.95, 1.0
        Split probability ``alpha * (1 + depth) ** -beta``.
    min_leaf_size : int, default 1
        A split is valid only if both children keep at least this many training rows.
    split_prior : {"uniform", "range"}, default "uniform"
        How the tree prior picks a rule's cut among the chosen feature's valid cuts ("cgm",
        "smc", "pg"): uniformly (CGM98), or proportionally to the width of the cut's gap between
        consecutive distinct training values ("range", Lakshminarayanan et al. 2013).
    valid_cuts : {"data", "ancestors"}, default "data"
        Where a node's valid cuts come from: the cuts that split its training rows (CGM98), or
        the range its ancestors' rules leave (BART's rule availability; ``min_leaf_size`` then
        truncates the prior).  "ancestors": methods "cgm" and "pg" (see :func:`~bdtree_jax.sample`).
    structure : {"cgm", "pinball"}, default "cgm"
        The tree-structure prior: CGM98's split probability ``alpha (1 + depth)**-beta``, or the
        pinball prior (Wu, Tjelmeland & West 2007; the spec's [derived] parametrisation, see
        :mod:`bdtree_jax.priors`): an explicit law of the number of leaves and a separate balance
        law of each split (``alpha`` and ``beta`` are then not used).  "pinball" needs method
        "cgm" with proposal None, "cgm" or "cgm+perturb", or method "wu".
    pinball_rate, pinball_balance, pinball_max_leaves : float, float, int or None, default 3.0, 1.0, None
        "pinball": leaves ``K - 1 ~ Poisson(pinball_rate)`` truncated at ``pinball_max_leaves``
        (None: ``2**max_depth``, the most the depth allows); at a node holding ``k`` leaves the
        left child's ``k_L - 1 ~ BetaBinomial(k - 2, pinball_balance, pinball_balance)`` (large:
        balanced splits; < 1: unbalanced; 1: uniform).
    concentration : float, default 1.0
        Symmetric Dirichlet concentration of the leaf class probabilities.
    move_probs : tuple or None
        CGM (grow, prune, change, swap), default (0.25, 0.25, 0.40, 0.10); RJHMC (grow, prune,
        stay) after warm-up, default (0.2, 0.2, 0.6).
    num_warmup, num_samples : int, default 1000, 1000
        Iterations per chain discarded and kept.
    num_chains : int, default 4
    seed : int, default 0
    progress : bool or None, default False
        Show a progress bar (None: when stderr is a terminal).
    checkpoint : str or None
        Checkpoint file; an interrupted fit resumes from it.
    h_init, h_final : float, default 0.025
        RJHMC split sharpness (``P(right) = sigmoid((x - tau) / h)`` on min-max scaled inputs),
        annealed from ``h_init`` to ``h_final`` during warm-up.
    schedule : {"fast", "paper"}
        RJHMC: "fast" adapts NUTS once during warm-up and then runs ``leg_steps`` transitions per
        leg (exact acceptance); "paper" re-adapts for 500 steps per leg like the reference code.
    leg_steps : int, default 4
    warmup_move_probs : tuple or None
        RJHMC (grow, prune, stay) during warm-up, default (0.5, 0.25, 0.25).
    log_phi : float, default 2.0
        "pcfg": the prior ``Pr[T] ∝ φ^-b(T)`` over trees with ``b`` leaves (alpha and beta are not
        used; ``max_depth`` bounds the depth, ``None`` for unbounded).
    n_buckets : None, int or one int per feature
        "pcfg": cut features with more distinct values into this many equal-width buckets.
    proposal : str or None, default None
        "cgm" method: "cgm" (the default: grow / prune / change / swap), "regrow" (prune a
        uniformly chosen node's subtree and regrow it from the prior; Angelopoulos & Cussens 2005),
        "cgm+regrow" (one of each) or "cgm+perturb" (one CGM and one perturb proposal: an internal
        node's cut moved within an adaptive window, or its feature changed; Pratola 2016).  "smc"
        and "pg" methods: "prior" (the default) or "posterior" (one-step optimal).
    n_temperatures : int, default 1
        Tempering (Metropolis-coupled MCMC; "cgm", "pg", "hmc-df", "hmc-dfi") with this many rungs; 1 is off.
    delta_t : float, default 0.2
        Inverse temperatures ``1 / (1 + delta_t * i)`` (MrBayes' default ladder).
    box_constraints : list of dicts or None
        Regions ``{feature: (low, high)}`` declared to have a constant response distribution: the
        prior gives zero mass to trees that split inside a box.
    initial_tree : Tree, tree string, fitted scikit-learn decision tree, or None
        The EDITTREE prior: trees reached from this one by a geometric number of random edits.
    mean_edits, max_edits : float, int, default 2.0, 20
        Mean of the geometric number of edits and its truncation.
    num_particles : int or None
        "smc": particles per run (default 100); "pg": particles per sweep, the reference
        included (default 10).
    ess_threshold, resampling : float, str, default 0.1, "multinomial"
        "smc": resampling when the effective sample size falls to
        ``ess_threshold * num_particles``, and the resampling scheme ("multinomial" or
        "systematic").  Each "smc" chain is an independent run whose ``num_samples`` draws are
        resampled from its final particles (``num_warmup`` is not used).  "pg" resamples
        multinomially before every stage.
    n_local : int, default 25
        "wu": CGM steps before and after the restructure move of every iteration.
    restructure, max_groups : str, int, default "auto", 10
        "wu": the restructure's variant: "auto" (the exact fibre-Gibbs draw when the tree has at
        most ``max_groups`` leaves, else the MH move with Variant Π), "pi" or "gibbs".

    Attributes
    ----------
    posterior_ : Posterior
    classes_ : (K,) ndarray
    n_features_in_ : int
    feature_names_in_ : (F,) ndarray of str, only when X was a DataFrame.

    Examples
    --------
    >>> import bdtree_jax as bd
    >>> X, y = bd.datasets.load("iris")
    >>> clf = bd.BayesianTreeClassifier(max_depth=3, num_warmup=200, num_samples=200, num_chains=2)
    >>> clf.fit(X, y).score(X, y) > 0.9
    True
    """

    _task = "classification"

    def __init__(
        self,
        method: str = "cgm",
        *,
        max_depth: int = 6,
        alpha: float = 0.95,
        beta: float = 1.0,
        min_leaf_size: int = 1,
        split_prior: str = "uniform",
        valid_cuts: str = "data",
        structure: str = "cgm",
        pinball_rate: float = 3.0,
        pinball_balance: float = 1.0,
        pinball_max_leaves: int | None = None,
        concentration: float = 1.0,
        move_probs: tuple | None = None,
        num_warmup: int = 1000,
        num_samples: int = 1000,
        num_chains: int = 4,
        seed: int = 0,
        progress: bool | None = False,
        checkpoint: str | None = None,
        h_init: float = 0.025,
        h_final: float = 0.025,
        schedule: str = "fast",
        leg_steps: int = 4,
        warmup_move_probs: tuple | None = None,
        log_phi: float = 2.0,
        n_buckets=None,
        proposal: str | None = None,
        n_temperatures: int = 1,
        delta_t: float = 0.2,
        box_constraints=None,
        initial_tree=None,
        mean_edits: float = 2.0,
        max_edits: int = 20,
        num_particles: int | None = None,
        ess_threshold: float = 0.1,
        resampling: str = "multinomial",
        n_local: int = 25,
        restructure: str = "auto",
        max_groups: int = 10,
    ):
        self.method = method
        self.max_depth = max_depth
        self.alpha = alpha
        self.beta = beta
        self.min_leaf_size = min_leaf_size
        self.split_prior = split_prior
        self.valid_cuts = valid_cuts
        self.structure = structure
        self.pinball_rate = pinball_rate
        self.pinball_balance = pinball_balance
        self.pinball_max_leaves = pinball_max_leaves
        self.concentration = concentration
        self.move_probs = move_probs
        self.num_warmup = num_warmup
        self.num_samples = num_samples
        self.num_chains = num_chains
        self.seed = seed
        self.progress = progress
        self.checkpoint = checkpoint
        self.h_init = h_init
        self.h_final = h_final
        self.schedule = schedule
        self.leg_steps = leg_steps
        self.warmup_move_probs = warmup_move_probs
        self.log_phi = log_phi
        self.n_buckets = n_buckets
        self.proposal = proposal
        self.n_temperatures = n_temperatures
        self.delta_t = delta_t
        self.box_constraints = box_constraints
        self.initial_tree = initial_tree
        self.mean_edits = mean_edits
        self.max_edits = max_edits
        self.num_particles = num_particles
        self.ess_threshold = ess_threshold
        self.resampling = resampling
        self.n_local = n_local
        self.restructure = restructure
        self.max_groups = max_groups

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

    def __init__(
        self,
        method: str = "cgm",
        *,
        max_depth: int = 6,
        alpha: float = 0.95,
        beta: float = 1.0,
        min_leaf_size: int = 1,
        split_prior: str = "uniform",
        valid_cuts: str = "data",
        structure: str = "cgm",
        pinball_rate: float = 3.0,
        pinball_balance: float = 1.0,
        pinball_max_leaves: int | None = None,
        nu: float | None = None,
        lam: float | None = None,
        a: float | None = None,
        mu_bar: float | None = None,
        move_probs: tuple | None = None,
        num_warmup: int = 1000,
        num_samples: int = 1000,
        num_chains: int = 4,
        seed: int = 0,
        progress: bool | None = False,
        checkpoint: str | None = None,
        h_init: float = 0.025,
        h_final: float = 0.025,
        schedule: str = "fast",
        leg_steps: int = 4,
        warmup_move_probs: tuple | None = None,
        log_phi: float = 2.0,
        n_buckets=None,
        proposal: str | None = None,
        n_temperatures: int = 1,
        delta_t: float = 0.2,
        box_constraints=None,
        initial_tree=None,
        mean_edits: float = 2.0,
        max_edits: int = 20,
        num_particles: int | None = None,
        ess_threshold: float = 0.1,
        resampling: str = "multinomial",
        n_local: int = 25,
        restructure: str = "auto",
        max_groups: int = 10,
    ):
        self.method = method
        self.max_depth = max_depth
        self.alpha = alpha
        self.beta = beta
        self.min_leaf_size = min_leaf_size
        self.split_prior = split_prior
        self.valid_cuts = valid_cuts
        self.structure = structure
        self.pinball_rate = pinball_rate
        self.pinball_balance = pinball_balance
        self.pinball_max_leaves = pinball_max_leaves
        self.nu = nu
        self.lam = lam
        self.a = a
        self.mu_bar = mu_bar
        self.move_probs = move_probs
        self.num_warmup = num_warmup
        self.num_samples = num_samples
        self.num_chains = num_chains
        self.seed = seed
        self.progress = progress
        self.checkpoint = checkpoint
        self.h_init = h_init
        self.h_final = h_final
        self.schedule = schedule
        self.leg_steps = leg_steps
        self.warmup_move_probs = warmup_move_probs
        self.log_phi = log_phi
        self.n_buckets = n_buckets
        self.proposal = proposal
        self.n_temperatures = n_temperatures
        self.delta_t = delta_t
        self.box_constraints = box_constraints
        self.initial_tree = initial_tree
        self.mean_edits = mean_edits
        self.max_edits = max_edits
        self.num_particles = num_particles
        self.ess_threshold = ess_threshold
        self.resampling = resampling
        self.n_local = n_local
        self.restructure = restructure
        self.max_groups = max_groups

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
