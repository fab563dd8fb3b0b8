"""The result of a run: every draw's tree plus diagnostics, predictions and ArviZ export."""

from __future__ import annotations

import collections
import functools
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..data import SplitGrid
from ..priors import TreePrior
from ..tree import Tree, distinct_trees, leaf_index, over_draws, plot_tree, to_string, tree_text
from . import streaming
from ._io import Saveable
from .streaming import draw_blocks, pad_rows, row_blocks
from ._leaf_draws import (
    _at_rows,
    _draw_pointwise,
    _leaf_draws,
    _leaf_means,
    _noisy_at_rows,
    _POINTWISE_CELL,
    _row_cell,
    _train_cell,
)

__all__ = ["Posterior", "PCFGPosterior", "SMCPosterior", "posterior_from_traces"]

_SCALARS = ("log_lik", "log_prior", "n_leaves", "depth", "accepted", "move")


@dataclass(eq=False, kw_only=True)
class _DrawSummaries(Saveable):
    """What every posterior of draws holds (the fields below, given by keyword) and offers once a
    subclass adds ``num_chains``, ``num_draws`` and the streamed evaluation of its draws:
    ``_inputs(X)``, ``_tables(sample, seed)`` and ``_rows(tables, inputs, start, stop, predictive)``
    (described in the prediction section below)."""

    stats: dict
    """(C, S) arrays per diagnostic: ``log_lik``, ``log_prior``, ``log_posterior`` (their sum,
    unnormalised), ``n_leaves``, ``depth``, ``accepted``, ``move`` and the method's own."""
    warmup_stats: dict
    """The same for the warm-up (burn-in) iterations, (C, W)."""
    task: str
    """"classification" or "regression"."""
    classes: np.ndarray | None
    """(K,) class labels (classification) or None."""
    feature_names: list
    """The features' names, (F,) str."""
    train_y: np.ndarray
    """(n,) the encoded training response (class codes or real values)."""
    method: str = "cgm"
    """Name of the method that drew the posterior."""
    info: dict = field(default_factory=dict)
    """Free-form run metadata (seed, timings, ...)."""

    # A subclass provides ``_inputs(X)`` (the validated rows, (n, ...)), ``_n_params`` (P),
    # ``_tables(sample, seed)`` (what its draws need at any row, computed once) and
    # ``_rows(tables, inputs, start, stop, predictive)`` ((D, stop - start, P) float32 for the rows
    # ``start:stop``, evaluated in chunks of draws x rows).  Prediction streams over chunks of rows.

    @property
    def _n_params(self) -> int:
        """P: class probabilities (K) or one regression value per row."""
        return len(self.classes) if self.task == "classification" else 1

    def _mean_prediction(self, X) -> np.ndarray:
        """(n, P) float64 average over all draws of the draws' leaf parameter, a chunk of rows at
        a time (all draws x a chunk of rows fit :data:`~bdtree_jax.posterior.streaming.PREDICT_BUDGET_BYTES`)."""
        inputs = self._inputs(X)
        n, P = len(inputs), self._n_params
        tables = self._tables(sample=False)
        out = np.empty((n, P))
        rows = streaming.rows_per_chunk(n, self.num_chains * self.num_draws, 12 * P)
        for s, e in row_blocks(n, rows):
            out[s:e] = self._rows(tables, inputs, s, e).mean(0, dtype=np.float64)
        return out

    def predict_draws(self, X) -> np.ndarray:
        """(draws, n, P) float32 per-draw leaf parameter at each row of X (chains concatenated)."""
        inputs = self._inputs(X)
        return self._rows(self._tables(sample=False), inputs, 0, len(inputs))

    def sample_function(self, X, *, predictive: bool = False, seed: int = 0) -> np.ndarray:
        """(draws, n, P) float32 posterior draws of the function at X (with ``predictive=True``, of
        a new response: noise added; regression only)."""
        if predictive and self.task != "regression":
            raise ValueError("predictive draws are for regression; use predict_proba for classes.")
        inputs = self._inputs(X)
        return self._rows(self._tables(sample=True, seed=seed), inputs, 0, len(inputs), predictive=predictive)

    def predict_proba(self, X) -> np.ndarray:
        """(n, K) posterior-averaged class probabilities (classification), float64."""
        self._require("classification", "predict_proba")
        return self._mean_prediction(X)

    def predict(self, X) -> np.ndarray:
        """Posterior-averaged prediction: (n,) class labels (classification) or means (regression)."""
        mean = self._mean_prediction(X)
        if self.task == "classification":
            return self.classes[np.argmax(mean, axis=1)]
        return mean[:, 0]

    def predict_interval(self, X, prob: float = 0.9, *, predictive: bool = False, seed: int = 0):
        """Equal-tailed posterior interval at each row of X (see ``sample_function``).

        Returns ``(lower, upper)``: (n,) for regression — a credible interval of the regression
        function, or with ``predictive=True`` a prediction interval for a new response — and
        (n, K) for class probabilities.  Computed a chunk of rows at a time (every draw at a
        chunk of rows fits :data:`~bdtree_jax.posterior.streaming.PREDICT_BUDGET_BYTES`).
        """
        if not 0 < prob < 1:
            raise ValueError(f"prob must be in (0, 1); got {prob}.")
        if predictive and self.task != "regression":
            raise ValueError("predictive intervals are for regression; use predict_proba for classes.")
        inputs = self._inputs(X)
        n, P = len(inputs), self._n_params
        tables = self._tables(sample=True, seed=seed)
        lo, hi = np.empty((n, P)), np.empty((n, P))
        # float32 draws, their float64 copy and the quantile's sorted copy
        rows = streaming.rows_per_chunk(n, self.num_chains * self.num_draws, 20 * P)
        for s, e in row_blocks(n, rows):
            draws = self._rows(tables, inputs, s, e, predictive=predictive).astype(np.float64)
            lo[s:e], hi[s:e] = np.quantile(draws, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
        if self.task == "regression":
            return lo[:, 0], hi[:, 0]
        return lo, hi

    def _require(self, task: str, what: str) -> None:
        if self.task != task:
            raise ValueError(f"{what} is only available for {task} posteriors (this one is {self.task}).")

    def acceptance_rate(self) -> float:
        return float(np.mean(self.stats["accepted"]))

    def swap_rates(self, *, include_warmup: bool = True) -> np.ndarray:
        """Tempered runs: (R, R) acceptance rate of the swaps proposed between rungs ``i < j``
        (rung 0 is the cold chain; NaN where never proposed)."""
        if "swap_pair" not in self.stats:
            raise ValueError("swap_rates needs a tempered run (num_temperatures > 1).")
        from .swaps import swap_rates

        pair, acc = self.stats["swap_pair"], self.stats["swap_accepted"]
        if include_warmup and "swap_pair" in self.warmup_stats:
            pair = np.concatenate([self.warmup_stats["swap_pair"], pair], axis=1)
            acc = np.concatenate([self.warmup_stats["swap_accepted"], acc], axis=1)
        return swap_rates(pair, acc, len(self.info.get("betas", ())) or int(np.sqrt(pair.max() + 1)) + 1)

    def summary(self, **kwargs):
        """A table of every quantity traced per draw (``log_lik``, ``log_prior``,
        ``log_posterior``, ``n_leaves``, ``depth``, ``accepted``, and the method's own: ``sigma``,
        ``nuts_accept``, ``swap_accepted`` ...), one row each, with ArviZ's columns (mean, sd,
        a credible interval, ``ess_bulk``, ``ess_tail``, ``r_hat`` ...): ``az.summary``
        (:func:`~bdtree_jax._arviz.summary_table`; ``kwargs`` go to it).  Returns a pandas
        DataFrame; the mean of ``accepted`` is :meth:`acceptance_rate`."""
        from .._arviz import summary_table

        return summary_table(self.stats, self.num_chains, self.num_draws, **kwargs)


@dataclass(eq=False)
class Posterior(_DrawSummaries):
    """Draws of a tree sampler (arrays are numpy, leading axes ``(chain, draw)``); the fields
    shared by every posterior (``stats``, ``warmup_stats``, ``task``, ``classes``,
    ``feature_names``, ``train_y``, ``method``, ``info``) are described on the base class, the
    hard tree's own below."""

    trees: Tree
    """Tree of (C, S, N) arrays."""
    grid: SplitGrid
    """The training data's split grid (thresholds of every cut)."""
    likelihood: Any
    """The leaf model (:class:`~bdtree_jax.likelihoods.DirichletMultinomial` or
    :class:`~bdtree_jax.likelihoods.NormalMeanShift`)."""
    prior: TreePrior
    """The tree prior."""
    train_bins: np.ndarray
    """(n, F) int32 training bins the leaf parameters are conditioned on."""
    train_stats: np.ndarray
    """(n, S) float32 training sufficient statistics per row (regression: of the standardised
    response, :class:`~bdtree_jax.likelihoods.NormalMeanShift`)."""

    def __post_init__(self):
        # a regression kernel's log-likelihood is that of the standardised response z = (y -
        # mu_bar) / scale; y's is n log(scale) lower, the same for every tree: added here in float64
        shift = _log_lik_shift(self.likelihood, self.train_stats)
        if shift:
            self.stats, self.warmup_stats = _shifted(self.stats, shift), _shifted(self.warmup_stats, shift)
            if getattr(self, "run_log_evidence", None) is not None:
                self.run_log_evidence = np.asarray(self.run_log_evidence, np.float64) + shift

    # -- shape -------------------------------------------------------------------------------
    @property
    def num_chains(self) -> int:
        return self.trees.is_split.shape[0]

    @property
    def num_draws(self) -> int:
        return self.trees.is_split.shape[1]

    def _flat_trees(self) -> Tree:
        return jax.tree.map(lambda a: np.asarray(a).reshape((-1,) + a.shape[2:]), self.trees)

    def tree(self, chain: int, draw: int) -> Tree:
        """One draw's tree (numpy arrays)."""
        return jax.tree.map(lambda a: np.asarray(a[chain, draw]), self.trees)

    # -- trees as text, drawings and the tree space ----------------------------------------------
    @functools.cached_property
    def _string_table(self) -> tuple:
        """The distinct trees' first draws (U,), each draw's distinct tree (D,), and the distinct
        trees' strings: canonical (U,) and with the features' names (U,)."""
        flat = self._flat_trees()
        first, inverse, _ = distinct_trees(flat)
        levels = getattr(self.grid, "levels", None)
        one = [jax.tree.map(lambda a: np.asarray(a)[i], flat) for i in first]
        return (first, inverse, [to_string(t, self.grid.thresholds, levels) for t in one],
                [to_string(t, self.grid.thresholds, levels, self._names) for t in one])

    @property
    def _names(self) -> list:
        return list(self.feature_names) if self.feature_names else [f"x{f}" for f in range(self.grid.n_features)]

    def tree_strings(self, names: bool = False) -> list[str]:
        """One string per draw, chains concatenated: :func:`~bdtree_jax.tree.to_string`'s
        canonical grammar (``x2<=2.45(L,L)``, what :func:`~bdtree_jax.tree.from_string` parses and
        the exact enumerators write), or with ``names=True`` the same grammar with the features'
        names and level labels (``petal_length<=2.45(L,L)``; as ``most_visited_tree``)."""
        _, inverse, canonical, named = self._string_table
        strings = named if names else canonical
        return [strings[k] for k in inverse]

    def tree_frequencies(self, names: bool = False) -> dict[str, float]:
        """Visit frequency of every distinct tree, most frequent first, keyed by
        :meth:`tree_strings` (``names=True``: with the features' names)."""
        counts = collections.Counter(self.tree_strings(names))
        total = sum(counts.values())
        return {k: v / total for k, v in counts.most_common()}

    def map_tree(self) -> Tree:
        """The visited tree with the highest (unnormalised) log posterior."""
        lp = np.asarray(self.stats["log_posterior"])
        c, d = np.unravel_index(np.argmax(lp), lp.shape)
        return self.tree(int(c), int(d))

    def most_visited_tree(self, names: bool = True) -> tuple[str, float]:
        """The most frequent tree's string, written with the features' names as :meth:`tree_text`
        and :meth:`plot_tree` write them (``names=False``: the canonical ``x{f}`` grammar of
        :meth:`tree_frequencies`), and its frequency."""
        return next(iter(self.tree_frequencies(names).items()))

    def top_trees(self, k: int = 5, prob: float = 0.95):
        """The tree-space summary: the ``k`` most visited trees with their posterior
        probabilities (visit frequencies) and ``prob`` Monte Carlo intervals, a pandas DataFrame
        (:func:`~bdtree_jax.posterior.tree_space.top_trees`); :meth:`plot_top_trees` draws it."""
        from .tree_space import top_trees

        return top_trees(self, k, prob)

    def plot_top_trees(self, k: int = 10, prob: float = 0.95, ax=None):
        """Bar chart of :meth:`top_trees` (probabilities with their Monte Carlo intervals);
        returns the matplotlib Axes."""
        from ..plots import plot_top_trees

        return plot_top_trees(self.top_trees(k, prob), ax=ax)

    def _resolve_tree(self, tree) -> Tree:
        """``tree``: a Tree, ``"map"`` (None), ``"most_visited"`` or a rank (1: the most visited)."""
        from .tree_space import tree_at_rank

        if tree is None or (isinstance(tree, str) and tree == "map"):
            return self.map_tree()
        if isinstance(tree, str) and tree == "most_visited":
            return tree_at_rank(self, 1)
        if isinstance(tree, str):
            raise ValueError(f"tree must be a Tree, 'map', 'most_visited' or a rank; got {tree!r}.")
        if isinstance(tree, (int, np.integer)):
            return tree_at_rank(self, tree)
        return tree

    def leaf_summary(self, tree=None, prob: float = 0.9, *, num_draws: int = 1000, seed: int = 0):
        """Per leaf of ``tree`` (a Tree, ``"map"`` (default), ``"most_visited"`` or a rank of
        :meth:`top_trees`): training rows and the leaf parameters' posterior means and ``prob``
        intervals given the tree, a pandas DataFrame
        (:func:`~bdtree_jax.posterior.tree_space.leaf_summary`)."""
        from .tree_space import leaf_summary

        return leaf_summary(self, self._resolve_tree(tree), prob, num_draws, seed)

    def tree_text(self, tree: Tree | None = None) -> str:
        """Indented text of ``tree`` (default: the MAP tree) with feature names and leaf values."""
        tree = self.map_tree() if tree is None else tree
        return tree_text(tree, self.grid.thresholds, self.feature_names, self._leaf_labels(tree),
                         levels=getattr(self.grid, "levels", None))

    def plot_tree(self, tree=None, ax=None, *, prob: float = 0.9, seed: int = 0):
        """Draw ``tree`` with matplotlib (:func:`~bdtree_jax.plots.draw_tree`): a Tree, ``"map"``
        (the default: the visited tree of highest posterior), ``"most_visited"``, or a rank of
        :meth:`top_trees` (1, 2, ...).  Splits show the feature's name and threshold in the data's
        units (or the level set that goes left) and where a missing value goes; leaves the class
        and its probability, or the leaf mean, each with a ``prob`` credible interval given the
        tree (:meth:`leaf_summary`), and their training rows.  Returns the Axes."""
        from .tree_space import leaf_labels

        tree = self._resolve_tree(tree)
        return plot_tree(tree, self.grid.thresholds, self._names, leaf_labels(self, tree, prob, seed=seed), ax=ax,
                         levels=getattr(self.grid, "levels", None))

    def _leaf_labels(self, tree: Tree) -> list[str]:
        n = tree.is_split.shape[-1]
        stats = np.asarray(
            jax.ops.segment_sum(
                jnp.asarray(self.train_stats), leaf_index(jax.tree.map(jnp.asarray, tree), jnp.asarray(self.train_bins)), n
            )
        )
        means = np.asarray(self.likelihood.leaf_mean(jnp.asarray(stats)))
        labels = []
        for i in range(n):
            if self.task == "classification":
                k = int(np.argmax(means[i]))
                labels.append(f"{self.classes[k]} (p={means[i, k]:.2f}, n={int(stats[i].sum())})")
            else:
                labels.append(f"{means[i, 0]:.4g} (n={int(stats[i, 0])})")
        return labels

    # -- prediction ----------------------------------------------------------------------------
    def _bins(self, X) -> np.ndarray:
        """Codes (n, F) of new rows, encoded as at fit (categorical levels, missing cells); warns
        :class:`~bdtree_jax.data.MissingValueRoutingWarning` for missing cells in features that
        had none in training."""
        codes = self.grid.codes(X, feature_names=self.feature_names or None)
        self.grid.warn_unseen_missing(codes, self.feature_names or None, stacklevel=5)
        return codes

    _inputs = _bins

    def _train_blocks(self, draw_chunk: int):
        """The training bins (B, r, F) and statistics (B, r, S) in chunks of ``r`` rows sized for
        ``draw_chunk`` draws at a time (the last chunk padded with zero-statistics rows)."""
        n, S = self.train_stats.shape
        rows = streaming.rows_per_chunk(n, draw_chunk, _train_cell(S))
        blocks = row_blocks(n, rows)
        bins = np.stack([pad_rows(self.train_bins, s, e, rows) for s, e in blocks])
        stats = np.stack([pad_rows(self.train_stats, s, e, rows) for s, e in blocks])
        return jnp.asarray(bins), jnp.asarray(stats)

    def _tables(self, sample: bool, seed: int = 0, idx: np.ndarray | None = None, chunk: int = 256) -> dict:
        """What the draws ``idx`` (default: all, chains concatenated) need at any row: their trees
        (Tree of (D, N)), every node's leaf parameter ``params`` (D, N, P) -- the posterior mean
        given the training rows, or with ``sample`` a draw from its conditional posterior (key
        ``split(key(seed), draws)[d]``) and then ``sigma2`` (D,) and ``keys`` (D,) too.  The
        training rows are visited in chunks of draws x rows within the budget."""
        flat = self._flat_trees()
        total = flat.is_split.shape[0]
        idx = np.arange(total) if idx is None else np.asarray(idx)
        draw_chunk, _ = streaming.plan(len(idx), self.train_stats.shape[0], _train_cell(self.train_stats.shape[1]),
                                       max_draws=chunk)
        bins, stats = self._train_blocks(draw_chunk)
        keys = jax.random.split(jax.random.key(seed), total) if sample else None
        params, sigma2 = [], []
        for sel, pad in draw_blocks(idx, draw_chunk):
            trees = jax.tree.map(lambda a: jnp.asarray(np.asarray(a)[pad]), flat)
            if sample:
                p, s2 = _leaf_draws(keys[pad], trees, bins, stats, self.likelihood)
                sigma2.append(np.asarray(s2)[: len(sel)])
            else:
                p = _leaf_means(trees, bins, stats, self.likelihood)
            params.append(np.asarray(p)[: len(sel)])
        out = dict(trees=jax.tree.map(lambda a: np.asarray(a)[idx], flat), params=np.concatenate(params))
        if sample:
            out.update(sigma2=np.concatenate(sigma2), keys=keys[idx])
        return out

    def _rows(self, tables: dict, bins: np.ndarray, start: int, stop: int, predictive: bool = False,
              chunk: int = 256) -> np.ndarray:
        """(D, stop - start, P) float32: every draw of ``tables`` at the rows ``bins[start:stop]``
        (plus noise with ``predictive``), in chunks of draws x rows within the budget."""
        params = tables["params"]
        D, P = params.shape[0], params.shape[-1]
        m = stop - start
        draw_chunk, rows = streaming.plan(D, m, _row_cell(P), max_draws=chunk)
        out = np.empty((D, m, P), np.float32)
        for sel, pad in draw_blocks(np.arange(D), draw_chunk):
            trees = jax.tree.map(lambda a: jnp.asarray(a[pad]), tables["trees"])
            p = jnp.asarray(params[pad])
            if predictive:
                keys, s2 = tables["keys"][pad], jnp.asarray(tables["sigma2"][pad])
            for s, e in row_blocks(m, rows):
                chunk_bins = jnp.asarray(pad_rows(bins, start + s, start + e, rows))
                if predictive:
                    res = _noisy_at_rows(keys, p, s2, trees, chunk_bins, start + s, n_total=len(bins),
                                         scale=jnp.float32(getattr(self.likelihood, "scale", 1.0)))
                else:
                    res = _at_rows(p, trees, chunk_bins)
                out[sel[0] : sel[-1] + 1, s:e] = np.asarray(res)[: len(sel), : e - s]
        return out

    def predict_draws(self, X, *, max_draws: int | None = None, chunk: int = 256) -> np.ndarray:
        """Per-draw posterior-mean leaf parameter at each row of X.

        Returns
        -------
        (draws, n, P) float32: class probabilities (P = K) or leaf means (P = 1); draws are all
        chains' draws concatenated (thinned evenly to at most ``max_draws``).  Computed in chunks
        of at most ``chunk`` draws x as many rows as
        :data:`~bdtree_jax.posterior.streaming.PREDICT_BUDGET_BYTES` allows.
        """
        bins = self._bins(X)
        total = self.num_chains * self.num_draws
        idx = np.arange(total)
        if max_draws is not None and total > max_draws:
            idx = np.linspace(0, total - 1, max_draws).round().astype(int)
        return self._rows(self._tables(False, idx=idx, chunk=chunk), bins, 0, len(bins), chunk=chunk)

    def _mean_prediction(self, X, chunk: int = 256) -> np.ndarray:
        """(n, P) float64 average of :meth:`predict_draws` over all draws, evaluating every
        *distinct* tree once and weighting it by its visits (long MH runs revisit few trees many
        times), in chunks of at most ``chunk`` distinct trees x as many rows as the budget allows,
        so memory is bounded whatever the number of draws and rows."""
        bins = self._bins(X)
        first, _, counts = distinct_trees(self._flat_trees())
        weights = counts / counts.sum()
        tables = self._tables(False, idx=first, chunk=chunk)
        n, P = len(bins), tables["params"].shape[-1]
        draw_chunk, rows = streaming.plan(len(first), n, _row_cell(P), max_draws=chunk)
        out = np.zeros((n, P))
        for sel, pad in draw_blocks(np.arange(len(first)), draw_chunk):
            trees = jax.tree.map(lambda a: jnp.asarray(a[pad]), tables["trees"])
            params = jnp.asarray(tables["params"][pad])
            for s, e in row_blocks(n, rows):
                vals = np.asarray(_at_rows(params, trees, jnp.asarray(pad_rows(bins, s, e, rows))))
                out[s:e] += np.tensordot(weights[sel], vals[: len(sel), : e - s].astype(np.float64), axes=1)
        return out

    def sample_function(self, X, *, predictive: bool = False, seed: int = 0, chunk: int = 256) -> np.ndarray:
        """Posterior draws of the function at X, leaf parameters included.

        For every kept draw of the tree, the leaf parameters are drawn from their conditional
        posterior given the tree and the training data (Dirichlet for class probabilities; for
        regression sigma^2 from its inverse-gamma and the leaf means given sigma^2), so the draws
        carry both tree and leaf uncertainty.  ``predictive=True`` (regression) adds the noise,
        giving draws of a new response.

        Returns
        -------
        (draws, n, P) float32 (P = K class probabilities, or 1).
        """
        if predictive and self.task != "regression":
            raise ValueError("predictive draws are for regression; use predict_proba for classes.")
        bins = self._bins(X)
        tables = self._tables(True, seed=seed, chunk=chunk)
        return self._rows(tables, bins, 0, len(bins), predictive=predictive, chunk=chunk)

    @property
    def nbytes_per_draw(self) -> int:
        """Bytes this posterior holds per kept draw: the tree arrays (``is_split``, ``feature``,
        ``cut``: ``N`` slots each, in their stored dtypes) and the per-draw ``stats``, summed over
        chains and draws and divided by their number (the training data and warm-up statistics,
        held once, are not counted)."""
        return streaming.nbytes_per_draw(list(self.trees) + list(self.stats.values()), self.num_chains,
                                         self.num_draws)

    # -- ArviZ -----------------------------------------------------------------------------------
    def to_arviz(self, *, pointwise: bool = True, seed: int = 0, max_draws_pointwise: int | None = None):
        """An ArviZ ``InferenceData`` (ArviZ 0.2x) or ``DataTree`` (ArviZ 1.x).

        Groups: ``posterior`` (``n_leaves``, ``depth``, and ``sigma`` for regression: a draw of the
        noise sd from its conditional posterior), ``sample_stats`` (``lp``, ``log_marginal_likelihood``,
        ``log_prior``, ``accepted``, ``move``), and with ``pointwise=True`` ``log_likelihood``
        (``y``: log p(y_i | leaf parameters) with the leaf parameters of every draw drawn from their
        conditional posterior, for LOO/WAIC), ``posterior_predictive`` (``y``: a replicated
        response per draw) and ``observed_data`` (``y``: the training response, class codes
        ``0..K-1`` for classification).  The pointwise variables have dimension ``obs``.

        Parameters
        ----------
        pointwise : bool
            Add the ``log_likelihood``, ``posterior_predictive`` and ``observed_data`` groups
            (and ``sigma``), which cost one pass over the training rows per draw.
        seed : int
            Seed of the leaf-parameter, ``sigma`` and replicated-response draws.
        max_draws_pointwise : int, optional
            With ``pointwise=True``, keep at most this many draws (at least one per chain) by
            taking every k-th draw of each chain; every group is thinned the same way so that
            the groups stay aligned on ``(chain, draw)``.
        """
        from .._arviz import make_inference_data

        C, S = self.num_chains, self.num_draws
        keep = np.arange(S)
        if pointwise and max_draws_pointwise is not None:
            if int(max_draws_pointwise) < C:
                raise ValueError(
                    f"max_draws_pointwise must be >= num_chains ({C}); got {max_draws_pointwise!r}."
                )
            per_chain = int(max_draws_pointwise) // C
            keep = keep[:: -(-S // per_chain)]
        S = len(keep)

        def kept(name):
            return np.asarray(self.stats[name])[:, keep]

        posterior = {"n_leaves": kept("n_leaves"), "depth": kept("depth")}
        sample_stats = {
            "lp": kept("log_posterior"),
            "log_marginal_likelihood": kept("log_lik"),
            "log_prior": kept("log_prior"),
            "accepted": kept("accepted"),
            "move": kept("move"),
            # kernel extras (tempering swaps, regrow, PG's chosen particle and stages, ...)
            **{k: kept(k) for k in self.stats if k not in _SCALARS and k != "log_posterior"},
        }
        groups = {"posterior": posterior, "sample_stats": sample_stats}
        dims = {}
        if pointwise:
            total = C * S
            keys = jax.random.split(jax.random.key(seed), total)
            flat = jax.tree.map(lambda a: np.asarray(a)[:, keep].reshape(total, -1), self.trees)
            train_bins, train_stats = jnp.asarray(self.train_bins), jnp.asarray(self.train_stats)
            codes = jnp.asarray(self.train_y)
            loglik, rep, sigma = over_draws(
                lambda draws, trees: _draw_pointwise(
                    keys[draws], trees, train_bins, train_stats, self.likelihood, codes
                ),
                flat, np.arange(total), streaming.draws_per_chunk(total, self.train_bins.shape[0], _POINTWISE_CELL),
            )
            n = self.train_bins.shape[0]
            groups["log_likelihood"] = {"y": loglik.reshape(C, S, n)}
            groups["posterior_predictive"] = {"y": rep.reshape(C, S, n)}
            observed = self.train_y if self.task == "regression" else np.asarray(self.train_y, np.float32)
            groups["observed_data"] = {"y": np.asarray(observed)}
            if self.task == "regression":
                posterior["sigma"] = sigma.reshape(C, S)
            dims = {"y": ["obs"]}
        return make_inference_data(groups, dims=dims)


@dataclass(eq=False)
class PCFGPosterior(Posterior):
    """Exact BCART-PCFG draws (independent; ``stats["accepted"]`` is all True and there is no
    warm-up) plus the box grammar they were drawn from, which answers exactly what draws only
    estimate: ``predict`` / ``predict_proba`` are the exact posterior predictive over all trees,
    ``map_tree`` the exact MAP tree.  With ``num_samples=0`` there are no draws (the grammar alone;
    what needs draws — ``predict_draws``, ``to_arviz``, intervals — is then unavailable).

    Extra attributes
    ----------------
    grammar : :class:`~bdtree_jax.pcfg.BoxGrammar`.
    """

    grammar: Any = None

    def _mean_prediction(self, X, chunk: int = 256) -> np.ndarray:
        """(n, P) exact posterior predictive over all trees (:meth:`predictive`): what ``predict``
        and ``predict_proba`` report here (the draws' average is ``predict_draws(X).mean(0)``)."""
        return self.predictive(X)

    @property
    def boundary_thresholds(self) -> list:
        """Per feature, the raw thresholds of its code boundaries, (B_f - 1,) each (with
        bucketing: the only splits the prior allows)."""
        g = self.grammar
        categorical = g.categorical if g.categorical is not None else np.zeros(g.n_features, bool)
        return [self.grid.thresholds[f, np.unique(g.cand_cut[g.cand_feature == f])] if not categorical[f]
                else np.zeros(0) for f in range(g.n_features)]

    def _codes(self, X) -> np.ndarray:
        """The grammar's codes (n, F) of new rows (:func:`~bdtree_jax.pcfg.query_codes`)."""
        from ..pcfg import query_codes

        return query_codes(self.grammar, self._bins(X))

    def map_tree(self) -> Tree:
        """The exact maximum a posteriori tree (from ``Q_max``; not just the best draw)."""
        from ..pcfg import map_tree

        return map_tree(self.grammar)

    def log_prob(self, tree: Tree) -> float:
        """Exact ``log Pr[tree | X, Y]`` (``-inf`` for trees the prior excludes)."""
        from ..pcfg import log_prob

        return log_prob(self.grammar, tree, self.train_bins, self.train_stats)

    @property
    def log_evidence(self) -> float:
        """``log p(Y | X)`` under the PCFG prior: the posterior's normaliser over the prior's (of
        y in its own units)."""
        return self.grammar.log_evidence + _log_lik_shift(self.likelihood, self.train_stats)

    def predictive(self, X) -> np.ndarray:
        """Exact posterior predictive over *all* trees, (n, P): class probabilities, or the mean
        of the regression function.  A dynamic program over the boxes, no sampling error."""
        from ..pcfg import predictive

        return predictive(self.grammar, self._codes(X))

    def sample_paths(self, X, num: int = 1000, *, seed: int = 0, best: bool = False) -> np.ndarray:
        """The paper's Algorithm 1: for each row of X, ``num`` independent posterior trees' answers
        drawn along the row's path only, (num, n, P) leaf posterior means.  ``best=True``:
        Algorithm 2, the MAP tree's answer, (1, n, P)."""
        from ..pcfg import sample_paths

        boxes = sample_paths(self.grammar, jax.random.key(seed), self._codes(X), 1 if best else num,
                             mode="max" if best else "sample")
        return np.asarray(self.likelihood.leaf_mean(jnp.asarray(self.grammar.stats[boxes])))


@dataclass(eq=False)
class SMCPosterior(Posterior):
    """Draws of top-down SMC (:mod:`~bdtree_jax.kernels.smc`): each "chain" is an independent
    SMC run, and its ``num_samples`` draws are resampled (multinomially, with replacement) from
    the run's final weighted particles, so every :class:`Posterior` method works unchanged.

    Extra attributes
    ----------------
    particles : Tree of (C, P, N) arrays, the final particles of every run.
    particle_log_weights : (C, P) unnormalised final log weights.
    run_log_evidence : (C,) each run's estimate of ``log p(Y | X)``.
    """

    particles: Any = None
    particle_log_weights: Any = None
    run_log_evidence: Any = None

    @property
    def log_evidence(self) -> float:
        """``log p(Y | X)`` estimated by the mean of the runs' (unbiased) evidence estimates."""
        z = np.asarray(self.run_log_evidence, np.float64)
        return float(np.logaddexp.reduce(z) - np.log(len(z)))

    def particle_weights(self) -> np.ndarray:
        """(C, P) normalised final weights of each run's particles."""
        lw = np.asarray(self.particle_log_weights, np.float64)
        return np.exp(lw - np.logaddexp.reduce(lw, axis=1, keepdims=True))


def _log_lik_shift(likelihood, train_stats) -> float:
    """``-n log(scale)``: y's log-likelihood minus the standardised response's (0.0 for a leaf
    model without a ``scale`` or with scale 1)."""
    scale = float(getattr(likelihood, "scale", 1.0))
    return 0.0 if scale == 1.0 else -float(np.shape(train_stats)[0]) * float(np.log(scale))


def _shifted(stats: dict, shift: float) -> dict:
    """``stats`` with ``log_lik`` and ``log_posterior`` moved by ``shift`` (float64)."""
    return {k: (np.asarray(v, np.float64) + shift if k in ("log_lik", "log_posterior") else v)
            for k, v in stats.items()}


def posterior_from_traces(traces: dict, num_warmup: int, **model) -> Posterior:
    """Split the driver's traces into warm-up and kept draws and build a :class:`Posterior`."""
    # the kept trees in the dtypes the kernel recorded them in (narrow integers), copied so the
    # warm-up part of the trace is not kept alive
    trees = jax.tree.map(lambda a: np.array(np.asarray(a)[:, num_warmup:]), traces["tree"])
    names = [k for k in traces if k != "tree"]  # _SCALARS and kernel extras (e.g. swap statistics)
    stats = {k: np.asarray(traces[k][:, num_warmup:]) for k in names}
    stats["log_posterior"] = stats["log_lik"] + stats["log_prior"]
    warm = {k: np.asarray(traces[k][:, :num_warmup]) for k in names}
    warm["log_posterior"] = warm["log_lik"] + warm["log_prior"]
    return Posterior(trees=trees, stats=stats, warmup_stats=warm, **model)
