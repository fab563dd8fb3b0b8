"""The single-tree problem: what one fit of a Bayesian tree samples, built once from ``(X, y)``.

:func:`build_problem` validates ``X`` and ``y`` once, bins ``X`` once on its split grid, resolves
the leaf model (the likelihood and its hyperparameters) and returns a frozen
:class:`TreeProblem`: the arrays the hard-tree kernels read (:class:`~bdtree_jax.data.TreeData`)
together with what every method and posterior needs (the validated inputs, the grid, the prior,
the encoded response).  Every method (:mod:`bdtree_jax.methods`) runs from one problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..data import SplitGrid, TreeData, check_classification_y, check_regression_y, check_X, make_split_grid
from ..likelihoods import DirichletMultinomial, NormalMeanShift, default_normal_hyperparameters
from ..priors import TreePrior, box_sides, make_tree_data
from ..priors.boxes import box_level_masks
from .._validate import check_one_of

__all__ = ["TASKS", "LIKELIHOOD_OPTIONS", "TreeProblem", "build_problem"]

TASKS = ("classification", "regression")
#: The leaf model's hyperparameters each task takes (``likelihood=`` as a mapping).
LIKELIHOOD_OPTIONS = {"classification": ("concentration",), "regression": ("nu", "lam", "a", "mu_bar")}


@dataclass(frozen=True, eq=False)
class TreeProblem:
    """One fit's model and data, built once by :func:`build_problem`.

    Attributes
    ----------
    task : "classification" or "regression".
    prior : TreePrior of the tree.
    likelihood : DirichletMultinomial (classification) or NormalMeanShift (regression), with its
        hyperparameters resolved (data-based defaults filled in; regression: ``scale = sd(y)``
        and ``lam`` in units of ``sd(y)**2``, the model computing on the standardised response).
    likelihood_options : dict of the leaf model's hyperparameters as the caller gave them (keys
        of :data:`LIKELIHOOD_OPTIONS`; absent: the default).
    X : (n, F) float64 the validated inputs, encoded: categorical features' level indices, NaN
        for a missing cell (the grid keeps the levels).
    feature_names : the F column names of a DataFrame ``X``, else None.
    classes : (K,) the class labels (classification; None for regression).
    train_y : (n,) the encoded response: int32 class codes in ``0..K-1``, or float32 values.
    grid : SplitGrid of the inputs (F features).
    train_bins : (n, F) int codes of the inputs (:meth:`~bdtree_jax.data.SplitGrid.bin`).
    train_stats : (n, S) float32 per-row sufficient statistics of the response (regression: of
        the standardised response ``(y - mu_bar) / scale``).
    data : TreeData, the arrays the hard-tree kernels read (bins, statistics, prior tables,
        box sides).
    box_constraints : the box constraints the prior is conditioned on (list of dicts), or None.
    """

    task: str
    prior: TreePrior
    likelihood: DirichletMultinomial | NormalMeanShift
    likelihood_options: dict
    X: np.ndarray
    feature_names: list | None
    classes: np.ndarray | None
    train_y: np.ndarray
    grid: SplitGrid
    train_bins: np.ndarray
    train_stats: np.ndarray
    data: TreeData
    box_constraints: list | None = None

    @property
    def n_features(self) -> int:
        return self.X.shape[1]

    @property
    def names(self) -> list:
        """The F feature names: the DataFrame's columns, else ``x0, x1, ...``."""
        return self.feature_names if self.feature_names is not None else [f"x{f}" for f in range(self.n_features)]

    def posterior_fields(self) -> dict:
        """What a :class:`~bdtree_jax.posterior.Posterior` keeps of the problem (its keyword
        arguments ``grid``, ``likelihood``, ``prior``, ``task``, ``classes``, ``feature_names``,
        ``train_bins``, ``train_stats``, ``train_y``)."""
        return dict(grid=self.grid, likelihood=self.likelihood, prior=self.prior, task=self.task,
                    classes=self.classes, feature_names=self.names, train_bins=self.train_bins,
                    train_stats=self.train_stats, train_y=self.train_y)


def build_problem(X, y, *, task: str = "classification", prior: TreePrior | None = None, likelihood=None,
                  box_constraints=None, categorical_features="from_dtype", missing: str = "mia",
                  where: str = "") -> TreeProblem:
    """Validate ``(X, y)`` and the model options once and build the :class:`TreeProblem`.

    Parameters
    ----------
    X : array-like or DataFrame of shape (n_samples, n_features): numeric, categorical
        (``category``, string, ``bool`` columns) and missing cells (NaN, None) allowed
        (docs/categorical-missing.md).
    y : array-like of shape (n_samples,): class labels (classification) or a real response.
    task : "classification" (Dirichlet–multinomial leaves) or "regression" (CGM98's conjugate
        normal mean-shift leaves).
    prior : TreePrior or None (the default ``TreePrior()``).
    likelihood : None (the task's leaf model with its defaults), a mapping of its
        hyperparameters (classification: ``concentration``, default 1; regression: ``nu``,
        ``lam``, ``a``, ``mu_bar``, each None or absent for the data-based default of
        :func:`~bdtree_jax.likelihoods.default_normal_hyperparameters`), or a
        :class:`~bdtree_jax.likelihoods.DirichletMultinomial` (its ``n_classes`` must be the
        number of classes of ``y``) / :class:`~bdtree_jax.likelihoods.NormalMeanShift` instance.
    box_constraints : list of dicts ``{feature: (low, high)}`` (column name or index; None or
        ``±inf`` for an open side; a categorical column: a set of its levels, e.g.
        ``{"island": {"Biscoe", "Dream"}}``), or None: regions with a constant response
        distribution, holding no missing value of the columns they name; the prior gives zero
        mass to trees with a rule cutting through a box (:mod:`bdtree_jax.priors.boxes`).
    categorical_features : "from_dtype" (default: a DataFrame's ``category``, object/string and
        ``bool`` columns), None (none), or column indices, names or a boolean mask.
    missing : "mia" (default: missing cells allowed, routed by each rule's missing-value bit) or
        "error".
    where : prefix of error messages (e.g. ``"sample: "``).

    Returns
    -------
    TreeProblem

    Raises
    ------
    ValueError
        Bad inputs or options, named, before anything is compiled.
    """
    check_one_of(f"{where}task", task, TASKS)
    prior = TreePrior() if prior is None else prior
    if not isinstance(prior, TreePrior):
        raise ValueError(f"{where}prior must be a TreePrior or None; got {prior!r}.")
    check_structure_options(prior, where)
    X, names, levels = check_X(X, estimator=where.rstrip(": "), categorical_features=categorical_features,
                               missing=missing, return_levels=True)
    if X.shape[0] < 2 * prior.min_leaf_size:
        raise ValueError(
            f"{where}X has n_samples={X.shape[0]}; at least 2 * min_leaf_size = {2 * prior.min_leaf_size} are "
            "needed for any split."
        )
    likelihood, options, train_y, classes = _leaf_model(task, y, X.shape[0], likelihood, where)
    grid = make_split_grid(X, levels=levels)
    bins = grid.bin(X)
    box_side = box_levels = None
    if box_constraints is not None:
        box_names = names if names is not None else [f"x{f}" for f in range(X.shape[1])]
        box_side = box_sides(box_constraints, grid.thresholds, box_names, levels=grid.levels, where=where)
        box_levels = box_level_masks(box_constraints, grid.levels, box_names, where=where)
    data = make_tree_data(bins, train_y, prior, likelihood, box_side=box_side, grid=grid, box_levels=box_levels)
    return TreeProblem(
        task=task, prior=prior, likelihood=likelihood, likelihood_options=options, X=X, feature_names=names,
        classes=classes, train_y=train_y, grid=grid, train_bins=bins, train_stats=np.asarray(data.point_stats),
        data=data, box_constraints=box_constraints,
    )


def check_structure_options(prior: TreePrior, where: str = "") -> None:
    """The options of the structure prior ``prior.structure`` does not use are left at their
    defaults (a set ``pinball_rate`` under ``structure="cgm"`` is a mistake, not a no-op)."""
    defaults = TreePrior()
    if prior.structure == "cgm":
        for name in ("pinball_rate", "pinball_balance", "pinball_max_leaves"):
            if getattr(prior, name) != getattr(defaults, name):
                raise ValueError(f"{where}{name} is an option of structure='pinball'; structure='cgm' does not use it.")
        return
    for name in ("alpha", "beta"):
        if getattr(prior, name) != getattr(defaults, name):
            raise ValueError(f"{where}{name} is a parameter of structure='cgm' (the split probability "
                             "alpha (1 + depth)**-beta); structure='pinball' does not use it.")


def _leaf_model(task: str, y, n: int, likelihood, where: str):
    """The task's likelihood for ``likelihood`` (None, a mapping of hyperparameters or an
    instance), the hyperparameters as given, and the encoded response and classes."""
    estimator = where.rstrip(": ")
    if task == "classification":
        classes, codes = check_classification_y(y, n, estimator=estimator)
        if isinstance(likelihood, DirichletMultinomial):
            if likelihood.n_classes != len(classes):
                raise ValueError(f"{where}likelihood has n_classes={likelihood.n_classes}; y has {len(classes)} "
                                 "classes.")
            likelihood = {"concentration": likelihood.concentration}
        options = _likelihood_options(task, likelihood, where)
        concentration = options.get("concentration", 1.0)
        if not concentration > 0:
            raise ValueError(f"{where}concentration must be > 0; got {concentration!r}.")
        return DirichletMultinomial(len(classes), float(concentration)), options, codes, classes
    yv = check_regression_y(y, n, estimator=estimator)
    if isinstance(likelihood, NormalMeanShift):  # its lam is in units of (y / scale)**2
        likelihood = {k: getattr(likelihood, k) for k in LIKELIHOOD_OPTIONS[task]} | {
            "lam": float(likelihood.lam) * float(likelihood.scale) ** 2}
    options = _likelihood_options(task, likelihood, where)
    hp = default_normal_hyperparameters(yv, **options)
    for k in ("nu", "lam", "a"):
        if not hp[k] > 0:
            raise ValueError(f"{where}{k} must be > 0; got {hp[k]!r}.")
    # the model computes on z = (y - mu_bar) / sd(y): lam in z's units, the prior unchanged
    scale = response_scale(yv)
    lam = hp["lam"] / scale**2
    f32 = np.finfo(np.float32)
    if not float(f32.tiny) <= lam <= float(f32.max):
        raise ValueError(f"{where}lam={hp['lam']!r} is {lam:.3g} times y's variance var(y) = {scale**2:.3g}, "
                         "beyond float32's range; lam is on y's own scale (the default is about var(y) / 5).")
    return NormalMeanShift(**(hp | {"lam": lam}), scale=scale), options, yv.astype(np.float32), None


def response_scale(y: np.ndarray) -> float:
    """The standard deviation of a real response ``y`` (n,) float64 (the regression model's
    ``NormalMeanShift.scale``); 1.0 for a constant response."""
    sd = float(np.std(y))  # float64: y is within float32's range (check_regression_y)
    return sd if sd > 0 else 1.0


def _likelihood_options(task: str, likelihood, where: str) -> dict:
    """``likelihood`` (None or a mapping) as a dict of the task's hyperparameters, None dropped."""
    allowed = LIKELIHOOD_OPTIONS[task]
    if likelihood is None:
        return {}
    if not isinstance(likelihood, Mapping):
        kind = "DirichletMultinomial" if task == "classification" else "NormalMeanShift"
        raise ValueError(f"{where}likelihood must be None, a mapping of {allowed} or a {kind} for task={task!r}; "
                         f"got {likelihood!r}.")
    unknown = sorted(set(likelihood) - set(allowed))
    if unknown:
        raise ValueError(f"{where}likelihood options {unknown} do not apply to task={task!r}; it takes {allowed}.")
    options = {k: v for k, v in likelihood.items() if v is not None}
    for k, v in options.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v):
            raise ValueError(f"{where}{k} must be None or a finite number; got {v!r}.")
    return options
