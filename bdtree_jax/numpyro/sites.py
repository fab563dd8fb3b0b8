"""Hard-split tree sites for NumPyro models: :func:`bart` (a sum of trees) and :func:`cart` (one
tree), each returning its function's values at the rows, for use anywhere in the model.

A site's trees are one sample site ``{name}_trees`` whose value packs the padded heaps of
:mod:`bdtree_jax.tree` into a float32 array, ``(M, N, 3)`` for ``bart`` (M trees of
``N = 2**(max_depth+1) - 1`` slots) and ``(N, 3)`` or ``(N, 2)`` for ``cart``, with per slot:

* ``[..., 0]`` the split feature, ``-1`` where the slot does not split;
* ``[..., 1]`` the threshold (a row goes left iff ``x[feature] <= threshold``; 0 where no split);
* ``[..., 2]`` the leaf value (0 off the leaves; absent for ``cart(..., leaf_values=False)``).

Thresholds, not bin codes, so the model evaluates the same trees at any rows: ``Predictive`` on
new inputs works as for any site.  The site's distribution (:class:`HardTreePrior`) draws from
the tree prior (``Predictive`` prior checks) but its ``log_prob`` is 0: the tree prior and the
leaf values' prior enter through :class:`~bdtree_jax.numpyro.TreeGibbs`, the only kernel that
updates these sites (every other kernel conditions on them, where a constant does not matter).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro.distributions import Distribution, constraints

from ..kernels import bart as bart_kernel
from ..problem.bart import MAX_CUTS, BARTProblem, build_tree_site_problem
from ..tree import Tree, leaf_nodes, n_nodes, tree_summaries

__all__ = ["TreeSiteSpec", "HardTreePrior", "bart", "cart", "encode_trees", "decode_features", "decode_trees",
           "ensemble_values",
           "leaf_indicators"]


@dataclass(frozen=True, eq=False)
class TreeSiteSpec:
    """What a tree site is, built on the host from its inputs each time the model runs.

    Attributes
    ----------
    kind : "bart" or "cart".
    name : the site's name (the returned values' deterministic site; the trees are ``{name}_trees``).
    problem : :class:`~bdtree_jax.problem.bart.BARTProblem` of the inputs (binned once; its
        ``data.tree_data.likelihood.tau2`` is the leaf values' prior variance).
    config : :class:`~bdtree_jax.kernels.bart.BARTConfig` of the trees (``n_trees``, depth).
    thresholds : (F, C) float32 the grid's thresholds (``+inf`` padding).
    inputs : (n, F) float32 the rows the site is evaluated at.
    offset : the constant added to the sum of trees.
    leaf_values : whether the site carries leaf values (``cart(..., leaf_values=False)`` does not).
    """

    kind: str
    name: str
    problem: BARTProblem
    config: bart_kernel.BARTConfig
    thresholds: jax.Array
    inputs: jax.Array
    offset: float
    leaf_values: bool = True

    @property
    def trees_site(self) -> str:
        return f"{self.name}_trees"

    @property
    def tau2(self) -> float:
        return self.problem.tau2

    @property
    def event_shape(self) -> tuple:
        N = n_nodes(self.config.max_depth)
        width = 3 if self.leaf_values else 2
        return (self.config.n_trees, N, width) if self.kind == "bart" else (N, width)


def encode_trees(tree: Tree, values, thresholds, with_values: bool = True):
    """Padded trees in bin codes -> the site's packed value: ``tree`` arrays (..., N), ``values``
    (..., N) leaf values, ``thresholds`` (F, C) -> (..., N, 3) float32 (``(..., N, 2)`` without
    values)."""
    split = tree.is_split
    feature = tree.feature.astype(jnp.int32)
    cut = tree.cut.astype(jnp.int32)
    thr = thresholds[jnp.where(split, feature, 0), jnp.where(split, cut, 0)]
    parts = [jnp.where(split, feature, -1).astype(jnp.float32), jnp.where(split, thr, 0.0).astype(jnp.float32)]
    if with_values:
        parts.append(jnp.where(leaf_nodes(tree), values, 0.0).astype(jnp.float32))
    return jnp.stack(parts, -1)


def decode_features(value):
    """(..., N) int32 split features of a packed value (-1 where no split)."""
    return value[..., 0].astype(jnp.int32)


def decode_trees(value, thresholds) -> Tree:
    """Packed values (..., N, >=2) -> :class:`~bdtree_jax.tree.Tree` of numpy arrays (..., N) in
    the bin codes of ``thresholds`` (F, C), the site's grid (``spec.problem.grid.thresholds``):
    each threshold is matched to the nearest candidate of its feature.  For the library's tools on
    sampled trees (:func:`~bdtree_jax.tree.to_string`, :func:`~bdtree_jax.exact.tree_frequencies`)."""
    value = np.asarray(value)
    thresholds = np.asarray(thresholds, np.float64)
    feature = value[..., 0].astype(np.int64)
    split = feature >= 0
    f = np.where(split, feature, 0)
    cut = np.abs(thresholds[f] - value[..., 1:2].astype(np.float64)).argmin(-1)
    return Tree(split, f.astype(np.int32), np.where(split, cut, 0).astype(np.int32))


def _route(value, X):
    """(n,) int32 the leaf slot of every row of ``X`` (n, F) in one packed tree ``value`` (N, >=2)."""
    N = value.shape[0]
    depth = int(np.log2(N + 1)) - 1
    feature = decode_features(value)
    threshold = value[:, 1]
    rows = jnp.arange(X.shape[0])
    node = jnp.zeros(X.shape[0], jnp.int32)
    for _ in range(depth):
        f = feature[node]
        left = X[rows, jnp.maximum(f, 0)] <= threshold[node]
        node = jnp.where(f >= 0, 2 * node + 2 - left.astype(jnp.int32), node)
    return node


def ensemble_values(value, X):
    """(n,) the sum over the trees of a packed ``value`` (M, N, 3) at the rows of ``X`` (n, F)."""
    def one(total, tree):
        return total + tree[:, 2][_route(tree, X)], None

    return jax.lax.scan(one, jnp.zeros(X.shape[0], jnp.float32), value)[0]


def leaf_indicators(value, X):
    """(n, N) float32 one-hot leaf of every row of ``X`` in one packed tree ``value`` (N, 2 or 3)."""
    return jax.nn.one_hot(_route(value, X), value.shape[0], dtype=jnp.float32)


class HardTreePrior(Distribution):
    """The prior of a tree site's packed trees (module docstring): ``sample`` draws trees from the
    tree prior (grown top-down, :func:`bdtree_jax.kernels.bart.prior_draw`) and their leaf values
    from ``N(0, tau2)``; ``log_prob`` is 0 (the prior enters through
    :class:`~bdtree_jax.numpyro.TreeGibbs`)."""

    arg_constraints = {}
    support = constraints.real
    pytree_data_fields = ()
    pytree_aux_fields = ("spec",)

    def __init__(self, spec: TreeSiteSpec, *, validate_args=None):
        self.spec = spec
        super().__init__(batch_shape=(), event_shape=spec.event_shape, validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        spec = self.spec
        config = spec.config

        def one(k):
            state = bart_kernel.prior_draw(k, spec.problem.data, config)
            value = encode_trees(state.trees.tree, state.leaf_values, spec.thresholds, spec.leaf_values)
            return value if spec.kind == "bart" else value[0]

        n = int(np.prod(sample_shape))
        draws = jax.jit(jax.vmap(one))(jax.random.split(key, max(n, 1)))  # one program, not op by op
        return draws.reshape(tuple(sample_shape) + self.event_shape) if n else draws[0]

    def stump(self):
        """The packed value of stumps with leaf value 0 (where :class:`~bdtree_jax.numpyro.TreeGibbs`
        starts): feature -1 everywhere, zeros otherwise."""
        return jnp.zeros(self.event_shape, jnp.float32).at[..., 0].set(-1.0)

    def log_prob(self, value):
        return jnp.zeros(jnp.shape(value)[: jnp.ndim(value) - len(self.event_shape)], jnp.float32)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _concrete_inputs(X, where: str) -> np.ndarray:
    if isinstance(X, jax.core.Tracer):
        raise ValueError(f"{where}: X must be a concrete array (the site bins it on the host); it is traced. Pass it "
                         "as a model argument of MCMC / Predictive without jit_model_args=True.")
    return np.asarray(X)


def _spec(kind: str, name: str, X, *, n_trees: int, tau2: float, offset: float, leaf_values: bool,
          tree_sampler: str, **prior) -> TreeSiteSpec:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind}: name must be a non-empty string; got {name!r}.")
    X = _concrete_inputs(X, f"{kind}({name!r})")
    problem = build_tree_site_problem(X, n_trees=n_trees, tau2=tau2, estimator=f"{kind}({name!r})", **prior)
    config = bart_kernel.BARTConfig(n_trees, max_depth=problem.prior.max_depth, tree_sampler=tree_sampler,
                                    min_leaf_size=problem.prior.min_leaf_size, sample_sigma=False)
    thresholds = jnp.asarray(np.where(np.isfinite(problem.grid.thresholds), problem.grid.thresholds, np.inf),
                             jnp.float32)
    inputs = jnp.asarray(np.asarray(X, np.float64), jnp.float32)
    return TreeSiteSpec(kind, name, problem, config, thresholds, inputs, float(offset), leaf_values)


def _number(v, what: str, where: str, positive: bool = False) -> float:
    ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and np.isfinite(v)
    if not ok or (positive and v <= 0):
        raise ValueError(f"{where}: {what} must be a finite{' positive' if positive else ''} number; got {v!r}.")
    return float(v)


def _record_summaries(name: str, features) -> None:
    leaves, depth = tree_summaries(features >= 0)
    numpyro.deterministic(f"{name}_n_leaves", leaves)
    numpyro.deterministic(f"{name}_depth", depth)


def bart(name: str, X, *, n_trees: int = 200, y=None, offset: float | None = None, scale: float | None = None,
         k: float = 2.0, max_depth: int = 5, alpha: float = 0.95, beta: float = 2.0, split_prior: str = "uniform",
         min_leaf_size: int = 1, max_cuts: int | None = MAX_CUTS, valid_cuts: str = "ancestors"):
    """A sum-of-trees function ``f(X) = offset + sum_m g(X; T_m, mu_m)`` declared in a NumPyro
    model; returns its values at the rows, ``f`` (n,).

    The BART prior of :class:`~bdtree_jax.estimators.BARTRegressor`: trees with split
    probability ``alpha (1 + d)**-beta`` up to ``max_depth``, a rule's feature and cut uniform
    among those its ancestors' rules leave (``valid_cuts="ancestors"``; ``"data"``: CGM98's cuts
    that split the node's rows), cuts on ``max_cuts`` quantiles of each feature, leaf values
    ``N(0, tau2)`` with ``tau = scale / (2 k sqrt(n_trees))``: the function's prior sd is
    ``scale / (2 k)`` around ``offset``.  Given ``y`` (the response the function is meant to
    describe), ``offset`` and ``scale`` default to its midrange and range (BART's calibration);
    otherwise to 0 and 1 (a function on the log scale of a rate or of a standard deviation, say).

    Sites: ``{name}_trees`` (n_trees, N, 3) the packed trees (module docstring); deterministic
    ``name`` (n,) the values, ``{name}_n_leaves`` and ``{name}_depth`` (n_trees,) per tree.
    Update them with :class:`~bdtree_jax.numpyro.TreeGibbs`.  ``X`` (n, F): numeric inputs
    without missing values, a concrete array.
    """
    where = f"bart({name!r})"
    if not _is_int(n_trees) or n_trees < 1:
        raise ValueError(f"{where}: n_trees must be an integer >= 1; got {n_trees!r}.")
    k = _number(k, "k", where, positive=True)
    if y is not None:
        y = np.asarray(y, float).ravel()
        if y.size == 0 or not np.isfinite(y).all() or not y.max() > y.min():
            raise ValueError(f"{where}: y must be a finite, non-constant response to calibrate the prior.")
        offset = 0.5 * (y.min() + y.max()) if offset is None else offset
        scale = y.max() - y.min() if scale is None else scale
    offset = _number(0.0 if offset is None else offset, "offset", where)
    scale = _number(1.0 if scale is None else scale, "scale", where, positive=True)
    tau2 = (scale / (2.0 * k * np.sqrt(n_trees))) ** 2
    spec = _spec("bart", name, X, n_trees=n_trees, tau2=tau2, offset=offset, leaf_values=True,
                 tree_sampler="grow-prune", max_depth=max_depth, alpha=alpha, beta=beta, split_prior=split_prior,
                 min_leaf_size=min_leaf_size, max_cuts=max_cuts, valid_cuts=valid_cuts)
    value = numpyro.sample(spec.trees_site, HardTreePrior(spec))
    _record_summaries(name, decode_features(value))
    return numpyro.deterministic(name, spec.offset + ensemble_values(value, spec.inputs))


def cart(name: str, X, *, leaf_values: bool = True, leaf_scale: float = 1.0, offset: float = 0.0,
         max_depth: int = 4, alpha: float = 0.95, beta: float = 1.0, split_prior: str = "uniform",
         min_leaf_size: int = 1, max_cuts: int | None = None):
    """One hard-split tree with the CGM98 prior declared in a NumPyro model.

    Split probability ``alpha (1 + d)**-beta`` up to ``max_depth``; a rule's feature uniform
    among those with a cut that splits the node's rows, its cut uniform among those
    (``valid_cuts="data"``), on every midpoint of the training values (``max_cuts=None``).

    * ``leaf_values=True``: leaf values ``N(0, leaf_scale**2)`` belong to the site; returns the
      tree's values at the rows, ``offset + mu[leaf(x)]`` (n,), also the deterministic site
      ``name``.  :class:`~bdtree_jax.numpyro.TreeGibbs` updates structure and leaf values.
    * ``leaf_values=False``: returns the (n, N) leaf indicators ``phi`` (as
      :func:`~bdtree_jax.numpyro.soft_tree`), for leaf parameters of the model's own with one
      entry per heap slot, e.g. ``mu = numpyro.sample("mu", dist.Normal(0, 1).expand([N]))``
      and ``phi @ mu``: give every slot the same prior, independent of the others (the
      entries off the leaves are padding drawn from it).  ``TreeGibbs`` then updates the
      structure by Metropolis–Hastings and the inner kernel the leaf parameters.

    Sites: ``{name}_trees`` (N, 3) or (N, 2) (module docstring); deterministic
    ``{name}_n_leaves`` and ``{name}_depth`` ().
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
    if not leaf_values:
        return leaf_indicators(value, spec.inputs)
    return numpyro.deterministic(name, spec.offset + value[:, 2][_route(value, spec.inputs)])
