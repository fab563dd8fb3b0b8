"""Multiclass BART's posterior (:class:`~bdtree_jax.BARTClassifier` with K >= 3 classes): the draws
of :mod:`bdtree_jax.kernels.bart_multiclass`, class probabilities at new rows (streamed as
:class:`~bdtree_jax.posterior.BARTPosterior` streams a sum of trees), credible intervals per class
and ArviZ export with the categorical pointwise log-likelihood."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from scipy.special import log_softmax, softmax

from ..problem.bart_multiclass import BARTMulticlassProblem
from . import streaming
from .bart import BARTPosterior, bart_posterior_from_traces
from .streaming import row_blocks

__all__ = ["BARTMulticlassPosterior", "bart_multiclass_posterior_from_traces"]


@dataclass(eq=False)
class BARTMulticlassPosterior(BARTPosterior):
    """Draws of a multiclass log-linear BART run.

    As :class:`~bdtree_jax.posterior.BARTPosterior`, with the K classes' forests stacked on the tree
    axis: ``trees`` and ``leaf_values`` (C, S, K * M, N), class ``k``'s trees ``k*M : (k+1)*M``.
    ``classes`` (K,) the labels (``y_train`` their codes), ``offsets`` (K,) the classes' log offsets;
    class ``k``'s ``log lambda_k(x) = offsets[k] + sum of its trees`` and
    ``P(y = classes[k] | x) = softmax_k(log lambda(x))``.  ``stats``: ``train_accuracy``,
    ``train_log_lik`` (categorical), ``train_rmse`` (root Brier score / K), ``fit_mean``, ``fit_sd``
    (of ``log lambda``) and the tree summaries over all K x M trees.  :meth:`variable_inclusion`
    counts the split rules of every class's trees.
    """

    classes: np.ndarray | None = None
    offsets: np.ndarray | None = None

    @property
    def n_classes(self) -> int:
        return int(len(self.offsets))

    @property
    def sigma(self) -> np.ndarray:
        raise AttributeError("multiclass BART has no noise sd.")

    def _per_class(self) -> BARTPosterior:
        """A view of the draws as a plain sum-of-trees posterior of C chains x S * K draws of M trees
        each (class axis after the draw axis), so that its streamed sums give every class's fit."""
        C, S, KM, N = self.leaf_values.shape
        K = self.n_classes
        # trailing axes kept: a categorical rule's level words (C, S, K * M, N, W)
        view = lambda a: np.asarray(a).reshape((C, S * K, KM // K, N) + np.shape(a)[4:])  # noqa: E731
        cached = self.__dict__.get("_class_view")
        if cached is None:
            cached = BARTPosterior(jax.tree.map(view, self.trees), view(self.leaf_values), {}, {}, self.grid, 0.0, 1.0,
                                   self.config)
            self.__dict__["_class_view"] = cached
        return cached

    def _log_lambda_at(self, bins: np.ndarray, start: int = 0, stop: int | None = None) -> np.ndarray:
        """(C * S, K, stop - start) float64 ``log lambda_k`` at the rows ``bins[start:stop]``."""
        stop = len(bins) if stop is None else stop
        f = self._per_class()._draws_at(bins, start=start, stop=stop)
        return f.reshape(-1, self.n_classes, stop - start) + np.asarray(self.offsets, np.float64)[:, None]

    def _proba_blocks(self, bins: np.ndarray):
        """``(start, stop, probs (C * S, K, stop - start))`` over chunks of rows within the budget."""
        n, D = len(bins), self.num_chains * self.num_draws * self.n_classes
        for s, e in row_blocks(n, streaming.rows_per_chunk(n, D, 4 * 8)):
            yield s, e, softmax(self._log_lambda_at(bins, s, e), axis=1)

    def predict_proba_draws(self, X) -> np.ndarray:
        """(C * S, n, K) class probabilities per draw (columns in the order of ``classes``)."""
        return np.moveaxis(softmax(self._log_lambda_at(self._bins(X)), axis=1), 1, 2)

    def predict_draws(self, X, *, chunk: int = 64) -> np.ndarray:
        """(C * S, n, K) ``log lambda_k(x)`` per draw (the classes' log-linear predictors)."""
        return np.moveaxis(self._log_lambda_at(self._bins(X)), 1, 2)

    def predict_proba(self, X) -> np.ndarray:
        """(n, K) posterior mean class probabilities (streamed: never all draws x all rows)."""
        bins = self._bins(X)
        out = np.empty((len(bins), self.n_classes))
        for s, e, p in self._proba_blocks(bins):
            out[s:e] = p.mean(0).T
        return out

    def predict(self, X) -> np.ndarray:
        """(n,) the class of highest posterior mean probability."""
        labels = self.classes if self.classes is not None else np.arange(self.n_classes)
        return np.asarray(labels)[np.argmax(self.predict_proba(X), axis=1)]

    def predict_interval(self, X, prob: float = 0.9, *, predictive: bool = False, seed: int = 0):
        """``(lower, upper)`` each (n, K): equal-tailed credible intervals of every class's
        probability at each row."""
        if predictive:
            raise ValueError("predictive intervals are for a real response; a class label has none "
                             "(use predict_proba).")
        if not 0 < prob < 1:
            raise ValueError(f"prob must be in (0, 1); got {prob!r}.")
        bins = self._bins(X)
        lo, hi = np.empty((len(bins), self.n_classes)), np.empty((len(bins), self.n_classes))
        for s, e, p in self._proba_blocks(bins):
            q = np.quantile(p, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
            lo[s:e], hi[s:e] = q[0].T, q[1].T
        return lo, hi

    def train_draws(self) -> np.ndarray:
        """(C, S, K, n) ``log lambda_k`` at the training rows per draw (computed once, cached)."""
        if self.train_bins is None:
            raise ValueError("this posterior does not hold its training inputs (train_bins is None).")
        cached = self.__dict__.get("_train_draws")
        if cached is None:
            n = self.train_bins.shape[0]
            cached = self._log_lambda_at(self.train_bins).reshape(self.num_chains, self.num_draws, self.n_classes, n)
            self.__dict__["_train_draws"] = cached
        return cached

    def _predictive_check(self, rows: np.ndarray):
        """``(values (C, S, m, K - 1), labels)``: the probabilities of ``classes[1:]`` at the training
        rows ``rows`` per draw (what :func:`~bdtree_jax.diagnostics.predictive_draws` checks)."""
        p = softmax(self._log_lambda_at(np.asarray(self.train_bins)[rows]), axis=1)[:, 1:]
        values = np.moveaxis(p, 1, 2).reshape(self.num_chains, self.num_draws, len(rows), self.n_classes - 1)
        return values, list(np.asarray(self.classes)[1:])

    def pointwise_log_likelihood(self) -> np.ndarray:
        """(C, S, n) ``log P(y_i | draw)`` (categorical log pmf) of every training row."""
        log_p = log_softmax(self.train_draws(), axis=2)
        codes = np.asarray(self.y_train, np.int64)
        return np.take_along_axis(log_p, codes[None, None, None, :], axis=2)[:, :, 0, :]

    def posterior_predictive(self, seed: int = 0) -> np.ndarray:
        """(C, S, n) int64 replicated class codes per draw:
        ``jax.random.categorical(key(seed), log lambda, axis=2)`` of the (C, S, K, n) log rates."""
        logits = np.asarray(self.train_draws(), np.float32)
        return np.asarray(jax.random.categorical(jax.random.key(seed), logits, axis=2), np.int64)

    def _arviz_groups(self) -> tuple[dict, dict]:
        latent = ("fit_mean", "fit_sd")
        return ({k: self.stats[k] for k in latent}, {k: v for k, v in self.stats.items() if k not in latent})


def bart_multiclass_posterior_from_traces(traces: dict, problem: BARTMulticlassProblem, config: Any,
                                          num_warmup: int, info: dict) -> BARTMulticlassPosterior:
    """The posterior of a multiclass BART run (:func:`~bdtree_jax.posterior.bart.bart_posterior_from_traces`)."""
    return bart_posterior_from_traces(traces, problem, config, num_warmup, info, cls=BARTMulticlassPosterior,
                                      classes=problem.classes, offsets=np.asarray(problem.offsets, np.float64))
