"""What the inspection tools evaluate: every fitted estimator's posterior draws of its prediction
at rows of ``X`` (one adapter per estimator), and the streamed evaluation of those draws over a
stack of modified copies of ``X`` (partial dependence's grid, permutation importance's shuffles).

A stack of ``B`` copies of ``X`` (``n`` rows each) is never built whole: its ``B * n`` rows are
made and evaluated a chunk at a time, every draw at a chunk of rows within
:data:`~bdtree_jax.posterior.streaming.PREDICT_BUDGET_BYTES`, each chunk the same number of rows
(the last one padded), so the posterior compiles one program for the whole stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
from scipy.special import ndtr
from sklearn.utils.validation import check_is_fitted

from ..posterior import streaming
from ..posterior.streaming import row_blocks

__all__ = ["Response", "response_of", "stacked_draws", "take_rows"]


@dataclass(frozen=True)
class Response:
    """The posterior draws of an estimator's prediction.

    draws : callable ``X (m rows) -> (D, m, K) float64``, the prediction of each of the ``D`` kept
        draws (chains concatenated) at each row, one column per output.
    outputs : (K,) the outputs' labels (class labels, or ``[name]`` for a real prediction).
    name : what the prediction is ("predict", "predict_proba", "expected count", ...).
    classifier : whether the outputs are class probabilities.
    num_draws : D.
    """

    draws: Callable[[object], np.ndarray]
    outputs: np.ndarray
    name: str
    classifier: bool
    num_draws: int


def _drawsummaries(post, response_name: str, outputs, classifier: bool) -> Response:
    """A single-tree posterior (hard or soft): the draws' posterior-mean leaf parameter (what
    ``predict`` / ``predict_proba`` average), the leaf tables computed once."""
    tables = {}

    def draws(X):
        if not tables:
            tables["t"] = post._tables(sample=False)
        inputs = post._inputs(X)
        return post._rows(tables["t"], inputs, 0, len(inputs)).astype(np.float64)

    return Response(draws, np.asarray(outputs), response_name, classifier, post.num_chains * post.num_draws)


def response_of(est, where: str = "") -> Response:
    """The :class:`Response` of a fitted estimator of this library (``ValueError`` for anything
    else): single-tree estimators' leaf parameters (class probabilities or the regression function),
    BART's regression function, class probabilities (binary probit or multiclass), Poisson BART's
    expected count at exposure 1 and survival BART's median survival time ``exp(f(x))``."""
    from ..estimators import (BARTClassifier, BARTPoissonRegressor, BARTRegressor, BARTSurvival,
                              BayesianTreeClassifier, BayesianTreeRegressor)

    if not isinstance(est, (BayesianTreeClassifier, BayesianTreeRegressor, BARTRegressor, BARTClassifier,
                            BARTPoissonRegressor, BARTSurvival)):
        raise ValueError(f"{where}est must be a fitted estimator of bdtree_jax (BayesianTree*, BART*); "
                         f"got {type(est).__name__}.")
    check_is_fitted(est, "posterior_")
    post = est.posterior_
    D = post.num_chains * post.num_draws
    if isinstance(est, BayesianTreeClassifier):
        return _drawsummaries(post, "predict_proba", est.classes_, True)
    if isinstance(est, BayesianTreeRegressor):
        return _drawsummaries(post, "predict", ["predict"], False)
    if isinstance(est, BARTClassifier):
        if len(est.classes_) > 2:
            return Response(lambda X: post.predict_proba_draws(X), np.asarray(est.classes_), "predict_proba", True, D)

        def binary(X):
            p1 = ndtr(post.predict_draws(X))
            return np.stack([1.0 - p1, p1], axis=-1)

        return Response(binary, np.asarray(est.classes_), "predict_proba", True, D)
    if isinstance(est, BARTPoissonRegressor):
        return Response(lambda X: post.predict_rate_draws(X)[..., None], np.asarray(["expected count"]),
                        "expected count (exposure 1)", False, D)
    if isinstance(est, BARTSurvival):
        return Response(lambda X: np.exp(post.predict_draws(X))[..., None], np.asarray(["median survival time"]),
                        "median survival time", False, D)
    return Response(lambda X: post.predict_draws(X)[..., None], np.asarray(["predict"]), "predict", False, D)


def take_rows(X, idx: np.ndarray):
    """Rows ``idx`` of ``X`` (a DataFrame keeps its dtypes, a fresh index)."""
    if isinstance(X, pd.DataFrame):
        return X.iloc[idx].reset_index(drop=True)
    return np.asarray(X)[idx]


def set_column(X, j: int, values):
    """``X`` (a copy made by :func:`take_rows`) with column ``j`` replaced by ``values``; a pandas
    categorical column stays categorical with the same categories."""
    if isinstance(X, pd.DataFrame):
        col = X.columns[j]
        if isinstance(X[col].dtype, pd.CategoricalDtype):
            values = pd.Categorical(values, categories=X[col].cat.categories, ordered=X[col].cat.ordered)
        X[col] = values
        return X
    if X.dtype != object and np.asarray(values).dtype == object:
        X = X.astype(object)
    X[:, j] = values
    return X


def _chunk_rows(total: int, n_draws: int, cell_bytes: int) -> int:
    """Rows per chunk of a stack of ``total`` rows: a power of two (stacks of different sizes share
    their programs), the smallest that holds the whole stack when the budget allows, else the
    largest within the budget."""
    fit = max(streaming.PREDICT_BUDGET_BYTES // max(n_draws * cell_bytes, 1), 1)
    whole = 1 << max(total - 1, 0).bit_length()
    return whole if whole <= fit else 1 << (fit.bit_length() - 1)


def stacked_draws(response: Response, make_rows: Callable[[np.ndarray], object], total: int):
    """Evaluate ``response`` at the ``total`` rows of a stack, a chunk at a time.

    make_rows : callable ``(m,) int indices into the stack -> those m rows`` (a DataFrame or
        array ``X`` accepts).
    Yields ``(start, stop, draws)`` with draws ``(D, stop - start, K)`` float64 of the stack's rows
    ``start:stop``; every chunk is evaluated at the same number of rows, a power of two (the last
    one padded with the stack's first rows, then dropped), so the posterior compiles one program
    shape for the stack, and stacks of similar sizes share it.
    """
    rows = _chunk_rows(total, response.num_draws, 8 * len(response.outputs) * 4)
    for s, e in row_blocks(total, rows):
        idx = np.arange(s, s + rows) % total
        yield s, e, response.draws(make_rows(idx))[:, : e - s]
