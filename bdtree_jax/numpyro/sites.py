"""Hard-split tree sites for NumPyro models: :func:`bart` (a sum of trees) and :func:`cart` (one
tree), each returning its function's values at the rows, for use anywhere in the model.

A site's trees are one sample site ``{name}_trees`` whose value packs the padded heaps of
:mod:`bdtree_jax.tree` into a float32 array, ``(M, N, 7)`` for ``bart`` (M trees of
``N = 2**(max_depth+1) - 1`` slots) and ``(N, 7)`` for ``cart``, with per slot (:data:`LAYOUT`):

* ``[..., 0]`` the split feature, ``-1`` where the slot does not split;
* ``[..., 1]`` the threshold rounded to float32, for reading (0 where no split);
* ``[..., 2]`` the leaf value (0 off the leaves, and everywhere for ``cart(..., leaf_values=False)``);
* ``[..., 3:6]`` the threshold exactly: its float64 value as an order-preserving integer key in
  three 21-bit chunks (:func:`threshold_keys`); a row goes left iff ``x[feature] <= threshold``
  in float64, which is what routing compares (so rows are routed exactly as the fit's bins
  sort them, also for features whose distinct values collapse in float32, e.g. timestamps);
* ``[..., 6]`` the site's ``offset`` (the constant added to the trees' values) in every slot, 0
  for ``cart(..., leaf_values=False)``.

Thresholds and offset, not bin codes and a calibration from the call's arguments, so the model
evaluates the same function at any rows: ``Predictive(model, samples)(key, X_new)`` works as for
any site, with ``y=None``, at any number of rows (:func:`bart`).  The site's distribution
(:class:`HardTreePrior`) draws from the tree prior (``Predictive`` prior checks) but its
``log_prob`` is 0 and its support's transform refuses to enter a log density: the tree prior and
the leaf values' prior enter through :class:`~bdtree_jax.numpyro.TreeGibbs`, the only kernel that
updates these sites; NUTS, HMC or SVI run on such a model raise an error that says so.

``TreeGibbs`` keeps the packed trees out of ``mcmc.get_samples()`` (so out of the posterior of
``arviz.from_numpyro(mcmc)``, where 200 trees of depth 5 would be 37,800 variables per draw) and
in the extra field ``"packed_trees"``; :func:`posterior_samples` puts them back for
``Predictive``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro.distributions import Distribution, constraints
from numpyro.distributions.transforms import Transform, biject_to

from .._renamed import accepts_renamed
from ..data import check_X
from ..kernels import bart as bart_kernel
from ..kernels import dart as dart_kernel
from ..priors import TreePrior
from ..problem.bart import MAX_CUTS, BARTProblem, build_tree_site_problem
from ..tree import Tree, leaf_nodes, n_nodes, tree_summaries
from .._validate import is_int

__all__ = ["LAYOUT", "TreeSiteSpec", "SiteGrid", "HardTreePrior", "bart", "cart", "encode_trees", "decode_features",
           "decode_trees", "ensemble_values", "leaf_indicators", "posterior_samples", "threshold_keys",
           "threshold_values"]

#: Columns of a packed slot (module docstring).
LAYOUT = {"feature": 0, "threshold": 1, "leaf_value": 2, "key": slice(3, 6), "offset": 6}
WIDTH = 7
_FEATURE, _THRESHOLD, _LEAF, _KEY, _OFFSET = 0, 1, 2, slice(3, 6), 6
_CHUNK = 21
_MASK = (1 << _CHUNK) - 1
_FLIP = np.int64(0x7FFFFFFFFFFFFFFF)


def threshold_keys(values) -> np.ndarray:
    """(..., 3) int32 order-preserving keys of float64 ``values`` (...), no NaN: ``a <= b`` iff
    ``keys(a) <= keys(b)`` lexicographically.  The IEEE-754 bits as a signed integer (the lower
    63 bits flipped for negative numbers, -0 read as +0), in three 21-bit chunks (the first
    signed), each exact in float32."""
    a = np.asarray(values, np.float64) + 0.0  # -0.0 -> +0.0
    bits = a.view(np.int64)
    k = np.where(bits < 0, bits ^ _FLIP, bits)
    return np.stack([k >> (2 * _CHUNK), (k >> _CHUNK) & _MASK, k & _MASK], -1).astype(np.int32)


def threshold_values(keys) -> np.ndarray:
    """The float64 values (...) of keys (..., 3) (:func:`threshold_keys`'s inverse)."""
    c = np.asarray(keys).astype(np.int64)
    k = (c[..., 0] << (2 * _CHUNK)) | (c[..., 1] << _CHUNK) | c[..., 2]
    return np.where(k < 0, k ^ _FLIP, k).astype(np.int64).view(np.float64)


class SiteGrid(NamedTuple):
    """A site's cut points as the packed values hold them: ``thresholds`` (F, C) float32 (``+inf``
    padding), ``keys`` (F, C, 3) float32 their exact keys (:func:`threshold_keys`), ``offset`` ()
    float32 the site's offset (0 for a site without leaf values)."""

    thresholds: jax.Array
    keys: jax.Array
    offset: jax.Array


@dataclass(frozen=True, eq=False)
class TreeSiteSpec:
    """What a tree site is, built on the host from its inputs each time the model runs.

    Attributes
    ----------
    kind : "bart" or "cart".
    name : the site's name (the returned values' deterministic site; the trees are ``{name}_trees``).
    config : :class:`~bdtree_jax.kernels.bart.BARTConfig` of the trees (``n_trees``, depth).
    input_keys : (n, F, 3) int32 the exact keys of the rows the site is evaluated at
        (:func:`threshold_keys`).
    offset : the constant added to the sum of trees (of a prior draw; given trees carry theirs).
    tau2 : the leaf values' prior variance.
    leaf_values : whether the site carries leaf values (``cart(..., leaf_values=False)`` does not).
    problem : :class:`~bdtree_jax.problem.bart.BARTProblem` of the inputs (binned once), for
        prior draws and :class:`~bdtree_jax.numpyro.TreeGibbs`; a ``ValueError`` with fewer
        than 2 rows (routing rows through given trees needs none).
    thresholds : :class:`SiteGrid` of the problem's grid.
    dart : :class:`~bdtree_jax.kernels.dart.DARTConfig` of a ``bart(..., sparse=True)`` site (the
        rule prior's feature choice weighted by split probabilities ``s`` with their Dirichlet
        prior), None otherwise.
    """

    kind: str
    name: str
    config: bart_kernel.BARTConfig
    input_keys: jax.Array
    offset: float
    tau2: float
    leaf_values: bool = True
    _problem: BARTProblem | None = field(default=None, repr=False)
    dart: dart_kernel.DARTConfig | None = None

    @property
    def trees_site(self) -> str:
        return f"{self.name}_trees"

    @property
    def n_rows(self) -> int:
        return int(self.input_keys.shape[0])

    @property
    def problem(self) -> BARTProblem:
        if self._problem is None:
            raise ValueError(
                f"{self.kind}({self.name!r}): X has {self.n_rows} row(s); drawing the site's trees from the prior or "
                "updating them (TreeGibbs) needs at least 2. Evaluating given trees at any number of rows works: "
                "Predictive(model, posterior_samples(mcmc))(key, X_new).")
        return self._problem

    @cached_property
    def thresholds(self) -> SiteGrid:
        thr = np.asarray(self.problem.grid.thresholds, np.float64)
        thr = np.where(np.isfinite(thr), thr, np.inf)
        offset = self.offset if self.leaf_values else 0.0
        return SiteGrid(jnp.asarray(thr, jnp.float32), jnp.asarray(threshold_keys(thr), jnp.float32),
                        jnp.float32(offset))

    @property
    def event_shape(self) -> tuple:
        N = n_nodes(self.config.max_depth)
        return (self.config.n_trees, N, WIDTH) if self.kind == "bart" else (N, WIDTH)


def encode_trees(tree: Tree, values, grid: SiteGrid, with_values: bool = True):
    """Padded trees in bin codes -> the site's packed value: ``tree`` arrays (..., N), ``values``
    (..., N) leaf values, ``grid`` the site's :class:`SiteGrid` (``spec.thresholds``) ->
    (..., N, 7) float32 (module docstring; leaf values and offset 0 without ``with_values``)."""
    if not isinstance(grid, SiteGrid):
        raise TypeError("encode_trees: grid must be the site's SiteGrid (spec.thresholds).")
    split = tree.is_split
    feature = tree.feature.astype(jnp.int32)
    cut = tree.cut.astype(jnp.int32)
    f, c = jnp.where(split, feature, 0), jnp.where(split, cut, 0)
    zeros = jnp.zeros(split.shape, jnp.float32)
    leaf = jnp.where(leaf_nodes(tree), values, 0.0).astype(jnp.float32) if with_values else zeros
    offset = zeros + (grid.offset if with_values else 0.0)
    keys = jnp.where(split[..., None], grid.keys[f, c], 0.0).astype(jnp.float32)
    head = jnp.stack([jnp.where(split, feature, -1).astype(jnp.float32),
                      jnp.where(split, grid.thresholds[f, c], 0.0).astype(jnp.float32), leaf], -1)
    return jnp.concatenate([head, keys, offset[..., None]], -1)


def decode_features(value):
    """(..., N) int32 split features of a packed value (-1 where no split)."""
    return value[..., _FEATURE].astype(jnp.int32)


def decode_trees(value, thresholds) -> Tree:
    """Packed values (..., N, 7) -> :class:`~bdtree_jax.tree.Tree` of numpy arrays (..., N) in
    the bin codes of ``thresholds`` (F, C), the site's grid (``spec.problem.grid.thresholds``):
    each exact threshold (float64, from the key columns) is matched to the nearest candidate of
    its feature, so a tree on that grid decodes exactly.  For the library's tools on sampled trees
    (:func:`~bdtree_jax.tree.to_string`, :func:`~bdtree_jax.exact.tree_frequencies`)."""
    value = np.asarray(value)
    thresholds = np.asarray(thresholds, np.float64)
    feature = value[..., _FEATURE].astype(np.int64)
    split = feature >= 0
    f = np.where(split, feature, 0)
    exact = threshold_values(np.rint(value[..., _KEY]).astype(np.int64))
    with np.errstate(invalid="ignore"):
        gap = np.abs(thresholds[f] - exact[..., None])
    cut = np.where(np.isnan(gap), np.inf, gap).argmin(-1)
    return Tree(split, f.astype(np.int32), np.where(split, cut, 0).astype(np.int32))


def _route(value, input_keys):
    """(n,) int32 the leaf slot of every row in one packed tree ``value`` (N, 7); ``input_keys``
    (n, F, 3) int32 the rows' exact keys.  ``x <= threshold`` compared exactly (lexicographic on
    the keys)."""
    N = value.shape[0]
    depth = int(np.log2(N + 1)) - 1
    feature = decode_features(value)
    key = value[:, _KEY].astype(jnp.int32)
    n = input_keys.shape[0]
    rows = jnp.arange(n)
    node = jnp.zeros(n, jnp.int32)
    for _ in range(depth):
        f = feature[node]
        x, t = input_keys[rows, jnp.maximum(f, 0)], key[node]
        left = (x[:, 0] < t[:, 0]) | ((x[:, 0] == t[:, 0]) & ((x[:, 1] < t[:, 1])
                                                              | ((x[:, 1] == t[:, 1]) & (x[:, 2] <= t[:, 2]))))
        node = jnp.where(f >= 0, 2 * node + 2 - left.astype(jnp.int32), node)
    return node


def _input_keys(X) -> jax.Array:
    if isinstance(X, jax.core.Tracer):
        raise ValueError("X must be a concrete array (its exact keys are computed on the host); it is traced.")
    X = np.asarray(X, np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n, F); got shape {X.shape}.")
    return jnp.asarray(threshold_keys(X))


def _ensemble(value, input_keys):
    def one(total, tree):
        return total + tree[:, _LEAF][_route(tree, input_keys)], None

    total = jax.lax.scan(one, jnp.zeros(input_keys.shape[0], jnp.float32), value)[0]
    return value[0, 0, _OFFSET] + total


def ensemble_values(value, X):
    """(n,) the site's function at the rows of ``X`` (n, F), a concrete array: the offset plus the
    sum over the trees of a packed ``value`` (M, N, 7), rows routed exactly."""
    return _ensemble(value, _input_keys(X))


def leaf_indicators(value, X):
    """(n, N) float32 one-hot leaf of every row of ``X`` (n, F), a concrete array, in one packed
    tree ``value`` (N, 7)."""
    return jax.nn.one_hot(_route(value, _input_keys(X)), value.shape[0], dtype=jnp.float32)


_NOT_GRADIENT = (
    "A tree site (bdtree_jax.numpyro.bart / cart) is a discrete structure that NUTS, HMC and SVI cannot update (its log density also leaves out the tree prior). Run the model with "
    "MCMC(TreeGibbs(NUTS(model)), ...) (bdtree_jax.numpyro.TreeGibbs), which updates the trees by their exact "
    "kernels and every other site by NUTS.")


class _TreeSupport(constraints.Constraint):
    """The support of a packed tree site: any float32 array of its shape; its ``biject_to``
    transform (:class:`_NoGradientTransform`) refuses to enter a log density."""

    event_dim = 0

    def __call__(self, x):
        return jnp.ones(jnp.shape(x), bool)

    def feasible_like(self, prototype):
        return jnp.zeros_like(prototype)

    def tree_flatten(self):
        return (), ((), dict())

    def __repr__(self):
        return "tree_support"


tree_support = _TreeSupport()


class _NoGradientTransform(Transform):
    """``biject_to(tree_support)``: the identity for NumPyro's initialisation strategies (which
    map a prior draw to unconstrained space and back, as ArviZ's model trace does), but its
    ``log_abs_det_jacobian``, which every potential energy of NUTS/HMC and every ELBO of SVI
    needs, raises :data:`_NOT_GRADIENT`: those algorithms stop before their first step."""

    domain = tree_support
    codomain = tree_support

    def __call__(self, x):
        return x

    def _inverse(self, y):
        return y

    def log_abs_det_jacobian(self, x, y, intermediates=None):
        raise ValueError(_NOT_GRADIENT)

    def tree_flatten(self):
        return (), ((), dict())

    def __eq__(self, other):
        return isinstance(other, _NoGradientTransform)


@biject_to.register(_TreeSupport)
def _no_gradient_transform(constraint):
    return _NoGradientTransform()


@partial(jax.jit, static_argnums=(3, 4, 5, 6))
def _prior_draws(keys, data, grid: SiteGrid, config, kind: str, leaf_values: bool, dart_config=None):
    """(K, ...) packed prior draws, one per key of ``keys`` (K, ...): one program, compiled once per
    configuration and shape (the model is traced several times by NumPyro's and ArviZ's tools).
    With ``dart_config`` (a sparse site) ``theta`` and ``s`` are drawn first, the trees given ``s``
    (:func:`bdtree_jax.kernels.dart.prior_draw`)."""
    def one(k):
        if dart_config is None:
            state = bart_kernel.prior_draw(k, data, config)
        else:
            state = dart_kernel.prior_draw(k, data, config, dart_config).bart
        value = encode_trees(state.trees.tree, state.leaf_values, grid, leaf_values)
        return value if kind == "bart" else value[0]

    return jax.vmap(one)(keys)


class HardTreePrior(Distribution):
    """The prior of a tree site's packed trees (module docstring): ``sample`` draws trees from the
    tree prior (grown top-down, :func:`bdtree_jax.kernels.bart.prior_draw`) and their leaf values
    from ``N(0, tau2)``; ``log_prob`` is 0 (the prior enters through
    :class:`~bdtree_jax.numpyro.TreeGibbs`); the support has no ``biject_to`` transform.

    Without a random key (``numpyro.infer.log_likelihood`` on samples that lack the trees, as
    ``arviz.from_numpyro`` runs it) ``sample`` returns a placeholder: stumps with NaN leaf values
    and offset, so the site's values are NaN unless its deterministic sites (``name``,
    ``{name}_leaf``) are given, as they are in ``mcmc.get_samples()``."""

    arg_constraints = {}
    support = tree_support
    pytree_data_fields = ()
    pytree_aux_fields = ("spec",)

    def __init__(self, spec: TreeSiteSpec, *, validate_args=None):
        self.spec = spec
        super().__init__(batch_shape=(), event_shape=spec.event_shape, validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        spec = self.spec
        if key is None:
            value = self.stump()
            if spec.leaf_values:
                value = value.at[..., _LEAF].set(jnp.nan).at[..., _OFFSET].set(jnp.nan)
            return jnp.broadcast_to(value, tuple(sample_shape) + self.event_shape)
        n = int(np.prod(sample_shape))
        draws = _prior_draws(jax.random.split(key, max(n, 1)), spec.problem.data, spec.thresholds, spec.config,
                             spec.kind, spec.leaf_values, spec.dart)
        return draws.reshape(tuple(sample_shape) + self.event_shape) if n else draws[0]

    def stump(self):
        """The packed value of stumps with leaf value 0 (where :class:`~bdtree_jax.numpyro.TreeGibbs`
        starts): feature -1, the site's offset, zeros otherwise."""
        value = jnp.zeros(self.event_shape, jnp.float32).at[..., _FEATURE].set(-1.0)
        return value.at[..., _OFFSET].set(self.spec.offset) if self.spec.leaf_values else value

    def log_prob(self, value):
        return jnp.zeros(jnp.shape(value)[: jnp.ndim(value) - len(self.event_shape)], jnp.float32)


def posterior_samples(mcmc, group_by_chain: bool = False) -> dict:
    """``mcmc.get_samples(group_by_chain)`` with the packed trees of every tree site put back
    (:class:`~bdtree_jax.numpyro.TreeGibbs` keeps them in the extra field ``"packed_trees"``), for
    ``Predictive(model, posterior_samples(mcmc))(key, X_new)``: a dict of arrays, (draws, ...)
    or (chains, draws, ...)."""
    samples = dict(mcmc.get_samples(group_by_chain=group_by_chain))
    trees = mcmc.get_extra_fields(group_by_chain=group_by_chain).get("packed_trees")
    if trees is None:
        raise ValueError("posterior_samples: the run has no extra field 'packed_trees'; it was not run with "
                         "bdtree_jax.numpyro.TreeGibbs.")
    return {**samples, **trees}


def _concrete_inputs(X, where: str) -> np.ndarray:
    if isinstance(X, jax.core.Tracer):
        raise ValueError(f"{where}: X must be a concrete array (the site bins it on the host); it is traced. Pass it "
                         "as a model argument of MCMC / Predictive without jit_model_args=True.")
    X = np.asarray(X)
    if X.ndim == 2 and X.dtype.kind in "fc" and np.isnan(X).any():
        nan = np.isnan(X)
        raise ValueError(f"{where}: X contains {int(nan.sum())} missing values (NaN), first in column "
                         f"{int(np.flatnonzero(nan.any(0))[0])}; tree sites take no missing values: impute them, or "
                         "drop those rows, before passing X to the model.")
    return X


def _spec(kind: str, name: str, X, *, n_trees: int, tau2: float, offset: float, leaf_values: bool,
          tree_sampler: str, dart: dart_kernel.DARTConfig | None = None, **prior) -> TreeSiteSpec:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind}: name must be a non-empty string; got {name!r}.")
    where = f"{kind}({name!r})"
    X = _concrete_inputs(X, where)
    X, _ = check_X(X, estimator=where, min_rows=1)
    problem = None
    if len(X) >= 2:
        problem = build_tree_site_problem(X, n_trees=n_trees, tau2=tau2, estimator=where, **prior)
        tree_prior = problem.prior
    else:  # routing rows through given trees needs no grid; validate the prior's arguments alone
        tree_prior = TreePrior(**{k: v for k, v in prior.items() if k != "max_cuts"})
    config = bart_kernel.BARTConfig(n_trees, max_depth=tree_prior.max_depth, tree_sampler=tree_sampler,
                                    min_leaf_size=tree_prior.min_leaf_size, sample_sigma=False)
    if dart is not None and problem is not None:
        try:
            dart_kernel.check_supported(problem.data, config)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    return TreeSiteSpec(kind, name, config, jnp.asarray(threshold_keys(X)), float(offset), float(tau2), leaf_values,
                        problem, dart)


def _number(v, what: str, where: str, positive: bool = False) -> float:
    ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and np.isfinite(v)
    if not ok or (positive and v <= 0):
        raise ValueError(f"{where}: {what} must be a finite{' positive' if positive else ''} number; got {v!r}.")
    return float(v)


def _record_summaries(name: str, features) -> None:
    leaves, depth = tree_summaries(features >= 0)
    numpyro.deterministic(f"{name}_n_leaves", leaves)
    numpyro.deterministic(f"{name}_depth", depth)


@accepts_renamed("n_trees")
def bart(name: str, X, *, num_trees: int = 200, y=None, offset: float | None = None, scale: float | None = None,
         k: float = 2.0, max_depth: int = 5, alpha: float = 0.95, beta: float = 2.0, split_prior: str = "uniform",
         min_leaf_size: int = 1, max_cuts: int | None = MAX_CUTS, valid_cuts: str = "ancestors", sparse: bool = False,
         sparse_theta: float | None = None, sparse_a: float = 0.5, sparse_b: float = 1.0,
         sparse_rho: float | None = None):
    """A sum-of-trees function ``f(X) = offset + sum_m g(X; T_m, mu_m)`` declared in a NumPyro
    model; returns its values at the rows, ``f`` (n,).

    The BART prior of :class:`~bdtree_jax.estimators.BARTRegressor`: trees with split
    probability ``alpha (1 + d)**-beta`` up to ``max_depth``, a rule's feature and cut uniform
    among those its ancestors' rules leave (``valid_cuts="ancestors"``; ``"data"``: CGM98's cuts
    that split the node's rows), cuts on ``max_cuts`` quantiles of each feature, leaf values
    ``N(0, tau2)`` with ``tau = scale / (2 k sqrt(num_trees))``: the function's prior sd is
    ``scale / (2 k)`` around ``offset``.  Given ``y`` (the response the function is meant to
    describe), ``offset`` and ``scale`` default to its midrange and range (BART's calibration);
    otherwise to 0 and 1 (a function on the log scale of a rate or of a standard deviation, say).

    The calibration belongs to the trees: the packed trees carry the offset they were drawn or
    fitted with, and the site's values at any rows are that offset plus the trees' sum, whatever
    ``y`` the later call gets.  So ``Predictive(model, posterior_samples(mcmc))(key, X_new)``
    (``y=None``) gives the fitted function at any rows, one row included; ``y``, ``offset`` and
    ``scale`` matter for prior draws and for ``TreeGibbs``.

    Sites: ``{name}_trees`` (num_trees, N, 7) the packed trees (module docstring); deterministic
    ``name`` (n,) the values, ``{name}_n_leaves`` and ``{name}_depth`` (num_trees,) per tree.
    Update them with :class:`~bdtree_jax.numpyro.TreeGibbs`.  ``X`` (n, F): numeric inputs
    without missing values, a concrete array (rows are routed by exact float64 comparisons with
    the thresholds, as the fit's bins sort them).

    ``sparse=True``: DART (Linero 2018, :mod:`bdtree_jax.kernels.dart`), as
    ``BARTRegressor(sparse=True)``: a rule's feature is drawn with probability proportional to
    split probabilities ``s`` (F,) among those available, ``s ~ Dirichlet(theta/F, ...)``, with
    ``theta / (theta + sparse_rho) ~ Beta(sparse_a, sparse_b)`` (``sparse_rho=None``: F) or
    ``sparse_theta`` fixed.  ``TreeGibbs`` updates ``s`` and ``theta`` after the trees every
    iteration; the samples hold ``{name}_split_probs`` (F,) and ``{name}_sparse_theta`` ().
    """
    where = f"bart({name!r})"
    dart = dart_kernel.sparse_config(where, sparse, sparse_theta, sparse_a, sparse_b, sparse_rho)
    if not is_int(num_trees) or num_trees < 1:
        raise ValueError(f"{where}: num_trees must be an integer >= 1; got {num_trees!r}.")
    k = _number(k, "k", where, positive=True)
    if y is not None:
        y = np.asarray(y, float).ravel()
        if y.size == 0 or not np.isfinite(y).all() or not y.max() > y.min():
            raise ValueError(f"{where}: y must be a finite, non-constant response to calibrate the prior.")
        offset = 0.5 * (y.min() + y.max()) if offset is None else offset
        scale = y.max() - y.min() if scale is None else scale
    offset = _number(0.0 if offset is None else offset, "offset", where)
    scale = _number(1.0 if scale is None else scale, "scale", where, positive=True)
    tau2 = (scale / (2.0 * k * np.sqrt(num_trees))) ** 2
    spec = _spec("bart", name, X, n_trees=num_trees, tau2=tau2, offset=offset, leaf_values=True,
                 tree_sampler="grow-prune", max_depth=max_depth, alpha=alpha, beta=beta, split_prior=split_prior,
                 min_leaf_size=min_leaf_size, max_cuts=max_cuts, valid_cuts=valid_cuts, dart=dart)
    value = numpyro.sample(spec.trees_site, HardTreePrior(spec))
    _record_summaries(name, decode_features(value))
    return numpyro.deterministic(name, _ensemble(value, spec.input_keys))


def cart(name: str, X, *, leaf_values: bool = True, leaf_scale: float = 1.0, offset: float = 0.0,
         max_depth: int = 4, alpha: float = 0.95, beta: float = 1.0, split_prior: str = "uniform",
         min_leaf_size: int = 1, max_cuts: int | None = None):
    """One hard-split tree with the CGM98 prior declared in a NumPyro model.

    Split probability ``alpha (1 + d)**-beta`` up to ``max_depth``; a rule's feature uniform
    among those with a cut that splits the node's rows, its cut uniform among those
    (``valid_cuts="data"``), on every midpoint of the training values (``max_cuts=None``).

    * ``leaf_values=True``: leaf values ``N(0, leaf_scale**2)`` belong to the site; returns the
      tree's values at the rows, ``offset + mu[leaf(x)]`` (n,), also the deterministic site
      ``name`` (the offset carried in the packed tree, as for :func:`bart`).  :class:`~bdtree_jax.numpyro.TreeGibbs` updates structure and leaf values.
    * ``leaf_values=False``: returns the (n, N) leaf indicators ``phi`` (as
      :func:`~bdtree_jax.numpyro.soft_tree`), for leaf parameters of the model's own with one
      entry per heap slot, e.g. ``mu = numpyro.sample("mu", dist.Normal(0, 1).expand([N]))``
      and ``phi @ mu``: give every slot the same prior, independent of the others (the
      entries off the leaves are padding drawn from it).  ``TreeGibbs`` then updates the
      structure by Metropolis–Hastings and the inner kernel the leaf parameters.  The rows'
      leaf slots are the deterministic site ``{name}_leaf`` (n,) int32 (``phi`` is their one-hot).

    Sites: ``{name}_trees`` (N, 7) (module docstring); deterministic ``{name}_n_leaves`` and
    ``{name}_depth`` ().
    """
    where = f"cart({name!r})"
    if not isinstance(leaf_values, bool):
        raise ValueError(f"{where}: leaf_values must be True or False; got {leaf_values!r}.")
    leaf_scale = _number(leaf_scale, "leaf_scale", where, positive=True)
    offset = _number(offset, "offset", where)
    spec = _spec("cart", name, X, n_trees=1, tau2=leaf_scale**2, offset=offset, leaf_values=leaf_values,
                 tree_sampler="cgm", max_depth=max_depth, alpha=alpha, beta=beta, split_prior=split_prior,
                 min_leaf_size=min_leaf_size, max_cuts=max_cuts, valid_cuts="data")
    value = numpyro.sample(spec.trees_site, HardTreePrior(spec))
    _record_summaries(name, decode_features(value))
    slots = _route(value, spec.input_keys)
    if not leaf_values:
        slots = numpyro.deterministic(f"{name}_leaf", slots)
        return jax.nn.one_hot(slots, value.shape[0], dtype=jnp.float32)
    return numpyro.deterministic(name, value[0, _OFFSET] + value[:, _LEAF][slots])
