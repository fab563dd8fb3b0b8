"""BART's posterior: the kept draws of a sum-of-trees run, prediction at new inputs, variable
inclusion and ArviZ export (:class:`BARTPosterior` for a real response, :class:`BARTClassifierPosterior`
for probit classification).

Draws are the per-iteration trees and leaf values the kernel recorded
(:mod:`bdtree_jax.kernels.bart`), leading axes ``(chain, draw)``; a prediction sums the trees'
leaf values at each row (:func:`sum_of_trees`), a chunk of draws x a chunk of rows at a time within
:data:`~bdtree_jax.posterior.streaming.PREDICT_BUDGET_BYTES` (means and intervals never hold more
than every draw at one chunk of rows).  Leaf values may be stored in any float dtype (float16 and
bfloat16 halve them); predictions compute in float32.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._files import leaf_mask
from .._types import Array
from ..data import SplitGrid
from ..problem.bart import BARTProblem
from ..tree import Tree, leaf_index
from . import streaming
from ._io import Saveable
from .streaming import draw_blocks, normal_rows, pad_rows, row_blocks

__all__ = ["BARTClassifierPosterior", "BARTPosterior", "bart_posterior_from_traces", "sum_of_trees"]


@jax.jit
def sum_of_trees(trees: Tree, leaf_values: Array, bins: Array) -> Array:
    """Sum over trees of each tree's leaf value at every row, per draw.

    trees : Tree of (D, M, N) arrays; leaf_values : (D, M, N) of any float dtype (summed in
    float32); bins : (n, F) bin codes.
    Returns (D, n) float32 on the model's scale (a scan over the trees: memory ``D n``).
    """
    trees = trees._replace(feature=trees.feature.astype(jnp.int32), cut=trees.cut.astype(jnp.int32))
    leaf_values = leaf_values.astype(jnp.float32)

    def one_draw(tree_stack, values):
        def add(total, xs):
            tree, v = xs
            return total + v[leaf_index(tree, bins)], None

        total, _ = jax.lax.scan(add, jnp.zeros(bins.shape[0], jnp.float32), (tree_stack, values))
        return total

    return jax.vmap(one_draw)(trees, leaf_values)


#: Bytes per (draw, row) of a sum of trees: the float32 running sum, the leaf descent's int32
#: arrays, the gathered leaf value and the host's float64 result.
_CELL = 32


@functools.partial(jax.jit, static_argnames=("n_rows", "n_total"))
def _noise(keys, start, n_rows: int, n_total: int):
    """(D, n_rows) rows ``start : start + n_rows`` of ``normal(keys[d], (n_total,))`` per draw."""
    return jax.vmap(lambda k: normal_rows(k, start, n_rows, n_total))(keys)


@dataclass(eq=False)
class BARTPosterior(Saveable):
    """Draws of a BART run (kept iterations only).

    Attributes
    ----------
    trees : Tree of (C, S, M, N) arrays; leaf_values : (C, S, M, N) float (model scale;
        float32, or float16 / bfloat16 to halve them: predictions compute in float32).
    stats : dict of (C, S) per-iteration scalars: ``sigma``, ``train_rmse``, ``train_log_lik``
        (original units), ``n_leaves``, ``depth`` (means over trees), ``at_max_depth``,
        ``accepted`` (fractions of trees).  ``warmup_stats``: the same for the warm-up iterations.
    grid : the training split grid; y_offset, y_scale : ``y = y_offset + y_scale * model scale``.
    train_bins : (n, F) bin codes of the training inputs, y_train : (n,) the training response
        (for the pointwise log-likelihood; None when the posterior was built without them).
    feature_names : F names (the DataFrame's columns, else ``x0, x1, ...``).
    config : the run's :class:`~bdtree_jax.kernels.bart.BARTConfig`.
    model : the prior and its calibration: ``prior``, ``y_offset``, ``y_scale``, ``tau2`` and
        ``nu``, ``lam``, ``sigma_hat`` (real response) or ``offset`` (probit).
    info : run metadata (``seed``, ``num_warmup``, ``num_samples``, ``seconds``, ``seconds_per_sweep``).
    """

    trees: Tree
    leaf_values: np.ndarray
    stats: dict
    warmup_stats: dict
    grid: SplitGrid
    y_offset: float
    y_scale: float
    config: Any
    model: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    train_bins: np.ndarray | None = None
    y_train: np.ndarray | None = None
    feature_names: list | None = None

    # -- saving: the leaf values only at the leaves (format version 2, docs/files.md) --------------

    def _file_fields(self) -> dict:
        """The fields :meth:`save` writes: ``leaf_values`` as ``{"at_leaves": (L,) values}``, the
        values at the trees' leaves in heap order (the other slots hold 0, as the kernel records
        them), when that loses nothing; the trees themselves go compact in the file format."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values, is_split = np.asarray(self.leaf_values), np.asarray(self.trees.is_split)
        if values.shape == is_split.shape:
            leaf = leaf_mask(is_split)
            off = np.ascontiguousarray(values[~leaf])
            if not (off.size and off.view(np.uint8).any()):
                fields["leaf_values"] = {"at_leaves": values[leaf]}
        return fields

    @classmethod
    def _file_restore(cls, fields: dict) -> dict:
        """The inverse of :meth:`_file_fields` (a file of format version 1 holds ``leaf_values``
        whole and passes through), with the shapes checked: trees and leaf values ``(C, S, M, N)``,
        stats ``(C, S)``."""
        values, trees = fields.get("leaf_values"), fields.get("trees")
        is_split = getattr(trees, "is_split", None)
        if not isinstance(is_split, np.ndarray) or is_split.ndim != 4:
            raise ValueError("its trees are not a (chains, draws, trees, nodes) stack")
        if isinstance(values, dict):
            at = values.get("at_leaves")
            leaf = leaf_mask(is_split)
            if not isinstance(at, np.ndarray) or at.shape != (int(leaf.sum()),):
                raise ValueError(f"{getattr(at, 'shape', None)} leaf values for {int(leaf.sum())} leaves")
            values = np.zeros(is_split.shape, at.dtype)
            values[leaf] = at
            fields = dict(fields, leaf_values=values)
        if not isinstance(values, np.ndarray) or values.shape != is_split.shape:
            raise ValueError(f"leaf values of shape {getattr(values, 'shape', None)} for trees {is_split.shape}")
        for k, v in (fields.get("stats") or {}).items():
            if np.shape(v) != is_split.shape[:2]:
                raise ValueError(f"stats[{k!r}] has shape {np.shape(v)}, not (chains, draws) {is_split.shape[:2]}")
        return fields

    @property
    def num_chains(self) -> int:
        return int(self.leaf_values.shape[0])

    @property
    def num_draws(self) -> int:
        return int(self.leaf_values.shape[1])

    @property
    def sigma(self) -> np.ndarray:
        """(C, S) noise sd in the units of ``y``."""
        return self.stats["sigma"]

    def _bins(self, X) -> np.ndarray:
        """Codes (n, F) of new rows, encoded as at fit; warns
        :class:`~bdtree_jax.data.MissingValueRoutingWarning` for missing cells in features that
        had none in training."""
        codes = self.grid.codes(X, feature_names=self.feature_names, estimator=type(self).__name__)
        self.grid.warn_unseen_missing(codes, self.feature_names, stacklevel=5)
        return codes

    def _draws_at(self, bins: np.ndarray, chunk: int = 64, start: int = 0, stop: int | None = None) -> np.ndarray:
        """(C * S, stop - start) float64 ``y_offset + y_scale * sum of trees`` at the rows
        ``bins[start:stop]`` (bin codes), in chunks of at most ``chunk`` draws x as many rows as
        :data:`~bdtree_jax.posterior.streaming.PREDICT_BUDGET_BYTES` allows (fixed shapes, the
        last chunks padded: one compilation per chunk shape)."""
        stop = len(bins) if stop is None else stop
        D = self.num_chains * self.num_draws
        M, N = self.leaf_values.shape[-2:]
        flat = jax.tree.map(lambda a: np.asarray(a).reshape((D,) + a.shape[2:]), self.trees)
        values = np.asarray(self.leaf_values).reshape(D, M, N)
        m = stop - start
        draws, rows = streaming.plan(D, m, _CELL, max_draws=chunk)
        out = np.empty((D, m))
        for sel, pad in draw_blocks(np.arange(D), draws):
            trees, vals = jax.tree.map(lambda a: jnp.asarray(a[pad]), flat), jnp.asarray(values[pad])
            for s, e in row_blocks(m, rows):
                f = sum_of_trees(trees, vals, jnp.asarray(pad_rows(bins, start + s, start + e, rows)))
                out[sel[0] : sel[-1] + 1, s:e] = self.y_offset + self.y_scale * np.asarray(f)[: len(sel), : e - s].astype(
                    np.float64)
        return out

    def _mean_at(self, bins: np.ndarray, transform=None) -> np.ndarray:
        """(n,) float64 mean over draws of ``transform(function)`` (identity by default) at the rows
        ``bins``, a chunk of rows at a time (every draw x one chunk within the budget)."""
        n, D = len(bins), self.num_chains * self.num_draws
        out = np.empty(n)
        for s, e in row_blocks(n, streaming.rows_per_chunk(n, D, 3 * 8)):
            f = self._draws_at(bins, start=s, stop=e)
            out[s:e] = (f if transform is None else transform(f)).mean(0)
        return out

    def _interval_at(self, bins: np.ndarray, prob: float, *, transform=None, predictive: bool = False,
                     seed: int = 0):
        """``(lower, upper)`` (n,) equal-tailed interval over the draws of ``transform(function)``
        (or of the function plus ``N(0, sigma_draw**2)`` noise, ``predictive``), a chunk of rows at
        a time.  The noise of draw ``d`` at row ``i`` is element ``i`` of
        ``jax.random.normal(split(key(seed), draws)[d], (n,))`` whatever the chunking."""
        if not 0 < prob < 1:
            raise ValueError(f"prob must be in (0, 1); got {prob!r}.")
        n, D = len(bins), self.num_chains * self.num_draws
        keys = jax.random.split(jax.random.key(seed), D) if predictive else None
        lo, hi = np.empty(n), np.empty(n)
        for s, e in row_blocks(n, streaming.rows_per_chunk(n, D, 4 * 8)):
            f = self._draws_at(bins, start=s, stop=e)
            if predictive:
                noise = np.concatenate([np.asarray(_noise(keys[pad], s, e - s, n))[: len(sel)]
                                        for sel, pad in draw_blocks(np.arange(D), streaming.MAX_DRAW_CHUNK)])
                f = f + self._noise_sd(bins, s, e) * noise
            elif transform is not None:
                f = transform(f)
            lo[s:e], hi[s:e] = np.quantile(f, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
        return lo, hi

    def _noise_sd(self, bins: np.ndarray, start: int, stop: int) -> np.ndarray:
        """The noise sd of a new response per draw, (C * S, 1) (``sigma``; a heteroskedastic model:
        (C * S, stop - start) at the rows ``bins[start:stop]``), for predictive intervals."""
        del bins, start, stop
        return np.asarray(self.sigma, np.float64).reshape(-1, 1)

    @property
    def nbytes_per_draw(self) -> int:
        """Bytes this posterior holds per kept draw: the trees (``is_split``, ``feature``, ``cut``,
        each ``M x N`` in its stored dtype), the leaf values (``M x N`` in their stored float
        dtype) and the per-draw ``stats``, totalled over chains and draws and divided by their
        number (training data and warm-up statistics, held once, are not counted)."""
        return streaming.nbytes_per_draw([*self.trees, self.leaf_values, *self.stats.values()], self.num_chains,
                                         self.num_draws)

    def predict_draws(self, X, *, chunk: int = 64) -> np.ndarray:
        """(C * S, n) float64 the regression function at the rows of X, one row per draw (original
        units)."""
        return self._draws_at(self._bins(X), chunk)

    def train_draws(self) -> np.ndarray:
        """(C, S, n) the function (regression function, or the classifier's latent ``f``) at the
        training rows, per draw (computed once, then cached)."""
        if self.train_bins is None:
            raise ValueError("this posterior does not hold its training inputs (train_bins is None).")
        cached = self.__dict__.get("_train_draws")
        if cached is None:
            n = self.train_bins.shape[0]
            cached = self._draws_at(self.train_bins).reshape(self.num_chains, self.num_draws, n)
            self.__dict__["_train_draws"] = cached
        return cached

    def predict(self, X) -> np.ndarray:
        """(n,) posterior mean of the regression function (streamed: never all draws x all rows)."""
        return self._mean_at(self._bins(X))

    def predict_interval(self, X, prob: float = 0.9, *, predictive: bool = False, seed: int = 0):
        """``(lower, upper)`` (n,) equal-tailed interval of the regression function at each row, or
        with ``predictive=True`` of a new response (each draw plus ``N(0, sigma_draw**2)`` noise,
        drawn with JAX's counter-based generator from ``seed``)."""
        return self._interval_at(self._bins(X), prob, predictive=predictive, seed=seed)

    def summary(self, **kwargs):
        """A table of every quantity traced per sweep (``sigma``, ``train_rmse``, ``n_leaves``
        and ``depth`` (means over trees), ``at_max_depth``, ``accepted`` ...; the classifier's
        ``train_accuracy``, ``fit_mean`` ...), one row each, with ArviZ's columns (mean, sd, a
        credible interval, ``ess_bulk``, ``ess_tail``, ``r_hat`` ...): ``az.summary``
        (:func:`~bdtree_jax._arviz.summary_table`; ``kwargs`` go to it).  Returns a pandas
        DataFrame."""
        from .._arviz import summary_table

        return summary_table(self.stats, self.num_chains, self.num_draws, **kwargs)

    # -- variable inclusion ----------------------------------------------------------------------
    def variable_counts(self) -> np.ndarray:
        """(C, S, F) int: per draw, the number of split rules (internal nodes over all trees) on each
        feature (BART's and bartz's ``varcount``)."""
        F = self.grid.n_features
        is_split = np.asarray(self.trees.is_split)
        C, S = is_split.shape[:2]
        c, s, _, _ = np.nonzero(is_split)
        feature = np.asarray(self.trees.feature)[is_split].astype(np.int64)
        counts = np.bincount((c * S + s) * F + feature, minlength=C * S * F)
        return counts.reshape(C, S, F)

    def variable_inclusion(self, mean: bool = False) -> np.ndarray:
        """Variable-inclusion proportions: per draw, the fraction of all split rules (over every
        tree) that use each feature -- (C, S, F), each row summing to 1 (NaN for a draw without any
        split).  ``mean=True``: their average over the draws that have splits, (F,)."""
        counts = self.variable_counts().astype(np.float64)
        total = counts.sum(-1, keepdims=True)
        props = np.divide(counts, total, out=np.full_like(counts, np.nan), where=total > 0)
        if not mean:
            return props
        valid = total[..., 0] > 0
        if not valid.any():
            return np.full(counts.shape[-1], np.nan)
        return props[valid].mean(0)

    def variable_inclusion_summary(self):
        """pandas DataFrame, one row per feature (index: ``feature_names``): ``proportion`` (mean
        inclusion proportion over draws), ``sd``, ``q05``, ``q95`` (over draws) and
        ``splits_per_draw`` (mean number of split rules on the feature)."""
        import pandas as pd

        props = self.variable_inclusion().reshape(-1, self.grid.n_features)
        props = props[~np.isnan(props[:, 0])]
        counts = self.variable_counts().reshape(-1, self.grid.n_features)
        names = self.feature_names or [f"x{i}" for i in range(self.grid.n_features)]
        if len(props) == 0:
            props = np.full((1, self.grid.n_features), np.nan)
        q05, q95 = np.quantile(props, [0.05, 0.95], axis=0)
        return pd.DataFrame(dict(proportion=props.mean(0), sd=props.std(0), q05=q05, q95=q95,
                                 splits_per_draw=counts.mean(0)), index=pd.Index(names, name="feature"))

    # -- ArviZ -----------------------------------------------------------------------------------
    def pointwise_log_likelihood(self) -> np.ndarray:
        """(C, S, n) ``log p(y_i | draw)`` of every training row: ``N(y_i; f(x_i), sigma**2)`` in the
        units of ``y``."""
        from scipy.stats import norm

        f = self.train_draws()
        return norm.logpdf(np.asarray(self.y_train, np.float64), f, np.asarray(self.sigma, np.float64)[..., None])

    def posterior_predictive(self, seed: int = 0) -> np.ndarray | None:
        """(C, S, n) float64 a replicated training response per draw, ``f(x_i) + sigma * eps`` with
        ``eps = jax.random.normal(key(seed), (C, S, n))`` (what ``az.plot_ppc`` compares with the
        observed ``y``); the classifier, Poisson and multiclass posteriors draw their own outcome
        (class codes, counts).  None where a model has no such replicate (survival's censored
        rows)."""
        f = self.train_draws()
        eps = np.asarray(jax.random.normal(jax.random.key(seed), f.shape), np.float64)
        return f + np.asarray(self.sigma, np.float64)[..., None] * eps

    def _arviz_groups(self) -> tuple[dict, dict]:
        return {"sigma": self.stats["sigma"]}, {k: v for k, v in self.stats.items() if k != "sigma"}

    def to_arviz(self, *, pointwise: bool = True, seed: int = 0):
        """ArviZ data (``InferenceData`` with ArviZ 0.2x, ``DataTree`` with 1.x): ``posterior``
        (``sigma``; the classifier: ``fit_mean``, ``fit_sd``), ``sample_stats`` (the other
        per-iteration scalars) and, with ``pointwise=True`` (and the training data held),
        ``log_likelihood`` (``y``: :meth:`pointwise_log_likelihood`, (C, S, n), dimension ``obs``;
        what ``az.loo`` and ``az.waic`` read), ``posterior_predictive`` (``y``:
        :meth:`posterior_predictive` drawn from ``seed``, (C, S, n); what ``az.plot_ppc`` reads)
        and ``observed_data`` (``y``, (n,))."""
        from .._arviz import make_inference_data

        posterior, sample_stats = self._arviz_groups()
        groups = {"posterior": posterior, "sample_stats": sample_stats}
        dims = {}
        if pointwise and self.train_bins is not None and self.y_train is not None:
            groups["log_likelihood"] = {"y": self.pointwise_log_likelihood()}
            replicate = self.posterior_predictive(seed)
            if replicate is not None:
                groups["posterior_predictive"] = {"y": replicate}
            groups["observed_data"] = {"y": np.asarray(self.y_train)}
            dims = {"y": ["obs"]}
        return make_inference_data(groups, dims=dims)


@dataclass(eq=False)
class BARTClassifierPosterior(BARTPosterior):
    """Draws of a probit BART run (:class:`~bdtree_jax.estimators.BARTClassifier`).

    As :class:`BARTPosterior`, with ``y_offset`` the probit offset and ``y_scale = 1``: the
    function of :meth:`predict_draws` is the latent ``f(x) = offset + sum of trees`` with
    ``P(y = classes[1] | x) = Phi(f(x))``.  ``stats``: ``train_accuracy``, ``train_log_lik``
    (Bernoulli), ``fit_mean``, ``fit_sd`` (latent ``f`` over the training rows) and the tree
    summaries.  ``y_train`` holds the 0/1 codes; ``classes`` the two labels.
    """

    classes: np.ndarray | None = None

    @property
    def sigma(self) -> np.ndarray:
        raise AttributeError("probit BART has no noise sd: the latent's sd is fixed at 1.")

    def predict_proba_draws(self, X) -> np.ndarray:
        """(C * S, n) ``P(y = classes[1] | x) = Phi(f(x))`` per draw."""
        from scipy.special import ndtr as np_ndtr

        return np_ndtr(self.predict_draws(X))

    def predict_proba(self, X) -> np.ndarray:
        """(n, 2) posterior mean class probabilities (columns in the order of ``classes``)."""
        from scipy.special import ndtr as np_ndtr

        p1 = self._mean_at(self._bins(X), np_ndtr)
        return np.stack([1.0 - p1, p1], axis=1)

    def predict(self, X) -> np.ndarray:
        """(n,) the class of highest posterior mean probability (``classes[1]`` on ties > 0.5)."""
        labels = self.classes if self.classes is not None else np.arange(2)
        return np.asarray(labels)[(self.predict_proba(X)[:, 1] > 0.5).astype(int)]

    def predict_interval(self, X, prob: float = 0.9, *, predictive: bool = False, seed: int = 0):
        """``(lower, upper)`` (n,) equal-tailed credible interval of ``P(y = classes[1] | x)``."""
        from scipy.special import ndtr as np_ndtr

        if predictive:
            raise ValueError("predictive intervals are for a real response; a class label has none "
                             "(use predict_proba).")
        return self._interval_at(self._bins(X), prob, transform=np_ndtr)

    def pointwise_log_likelihood(self) -> np.ndarray:
        """(C, S, n) ``log p(y_i | draw) = log Phi(+-f(x_i))`` (``+`` for ``classes[1]``)."""
        from scipy.special import log_ndtr as np_log_ndtr

        sign = 2.0 * np.asarray(self.y_train, np.float64) - 1.0
        return np_log_ndtr(sign * self.train_draws())

    def posterior_predictive(self, seed: int = 0) -> np.ndarray:
        """(C, S, n) int64 replicated class codes per draw: ``1`` where
        ``jax.random.uniform(key(seed), (C, S, n)) < Phi(f(x_i))``, else ``0`` (integers: ArviZ
        draws discrete replicates as such)."""
        from scipy.special import ndtr as np_ndtr

        f = self.train_draws()
        u = np.asarray(jax.random.uniform(jax.random.key(seed), f.shape), np.float64)
        return (u < np_ndtr(f)).astype(np.int64)

    def _arviz_groups(self) -> tuple[dict, dict]:
        latent = ("fit_mean", "fit_sd")
        return ({k: self.stats[k] for k in latent}, {k: v for k, v in self.stats.items() if k not in latent})


def _kept(a, num_warmup: int) -> np.ndarray:
    """``a[:, num_warmup:]``: a copy after a warm-up, else ``a`` itself (nothing to release; the
    copy of a run's trees, ~100 kB a draw, cost a third of a sweep at n = 1,000 on a 2-core CPU VM,
    where fresh memory is slow to touch)."""
    a = np.asarray(a)
    return np.array(a[:, num_warmup:]) if num_warmup else a


def bart_posterior_from_traces(traces: dict, problem: BARTProblem, config: Any, num_warmup: int,
                               info: dict, cls: type | None = None, **extra) -> BARTPosterior:
    """The posterior of a BART run from its per-iteration ``traces`` (numpy arrays
    ``(C, W + S, ...)`` of :func:`~bdtree_jax.kernels.bart.trace`, ``tree`` and ``leaf_values``
    included): the first ``num_warmup`` iterations go to ``warmup_stats``, the rest are the draws.
    A :class:`BARTClassifierPosterior` for a binary ``problem``, else a :class:`BARTPosterior`, or
    ``cls`` (a subclass) with the further fields ``extra``."""
    scalars = [k for k in traces if k not in ("tree", "leaf_values")]
    names = problem.feature_names
    binary = problem.outcome == "binary"
    return (cls or (BARTClassifierPosterior if binary else BARTPosterior))(
        # the kept iterations in the dtypes the kernel recorded (narrow integers; leaf values in
        # BARTConfig's leaf dtype): copies after a warm-up (a view would keep its trees alive)
        trees=jax.tree.map(lambda a: _kept(a, num_warmup), traces["tree"]),
        leaf_values=_kept(traces["leaf_values"], num_warmup),
        stats={k: traces[k][:, num_warmup:] for k in scalars},
        warmup_stats={k: traces[k][:, :num_warmup] for k in scalars},
        grid=problem.grid, y_offset=problem.y_offset, y_scale=problem.y_scale, config=config,
        model=dict(prior=problem.prior, y_offset=problem.y_offset, y_scale=problem.y_scale,
                   **problem.hyperparameters()),
        info=info, train_bins=problem.train_bins, y_train=np.asarray(problem.y_train),
        feature_names=list(names) if names is not None else [f"x{i}" for i in range(problem.n_features)],
        **(dict(classes=problem.classes) if binary else {}), **extra,
    )
