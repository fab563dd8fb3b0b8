"""Monotone constraints of the BART estimators (``monotonic_cst``, scikit-learn's spelling in
``HistGradientBoosting*``): the checks and the kernel (:mod:`bdtree_jax.kernels.bart_monotone`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..kernels.bart_monotone import MonotoneKernel, bart_monotone, check
from ..kernels.dart import dart

__all__ = ["MonotoneMixin"]

_WHAT = "None, an array-like of -1, 0 or +1 per feature, or a dict {feature name: -1, 0 or +1}"


def _is_code(v) -> bool:
    return isinstance(v, (int, np.integer, float, np.floating)) and not isinstance(v, bool) and v in (-1, 0, 1)


class MonotoneMixin:
    """``monotonic_cst``: checked with the other parameters (:meth:`_check_monotone`), resolved
    against the problem's features before anything compiles (:meth:`_monotone`)."""

    def _check_monotone(self) -> None:
        """ValueError naming ``monotonic_cst`` unless it has one of the accepted forms."""
        cst = getattr(self, "monotonic_cst", None)
        if cst is None:
            return
        name = type(self).__name__
        if isinstance(cst, Mapping):
            bad = {k: v for k, v in cst.items() if not isinstance(k, str) or not _is_code(v)}
        elif isinstance(cst, str) or np.ndim(cst) != 1:
            raise ValueError(f"{name}: monotonic_cst must be {_WHAT}; got {cst!r}.")
        else:
            bad = [v for v in cst if not _is_code(v)]
        if bad:
            raise ValueError(f"{name}: monotonic_cst must be {_WHAT}; got {cst!r} (bad entries: {bad!r}).")

    def _monotone(self, problem, config) -> tuple | None:
        """The constraint as a tuple of -1/0/+1 per feature of ``problem`` (None: no constraint,
        or every entry 0).  ValueError naming ``monotonic_cst`` for a wrong length, unknown
        feature names, a categorical feature constrained, or a model the constraint does not run
        with (missing values, categorical features, a tree sampler other than grow-prune, three
        or more classes, ``variance_trees > 0``)."""
        cst = getattr(self, "monotonic_cst", None)
        if cst is None:
            return None
        name = type(self).__name__
        F, names = problem.n_features, problem.feature_names
        if isinstance(cst, Mapping):
            if names is None:
                raise ValueError(f"{name}: monotonic_cst as a dict needs X as a DataFrame with column names; "
                                 "give an array-like of -1/0/+1 per feature instead.")
            unknown = sorted(set(cst) - set(names))
            if unknown:
                raise ValueError(f"{name}: monotonic_cst names features not in X: {unknown}.")
            codes = tuple(int(cst.get(f, 0)) for f in names)
        else:
            if len(cst) != F:
                raise ValueError(f"{name}: monotonic_cst must have one entry per feature ({F}); got {len(cst)}.")
            codes = tuple(int(v) for v in cst)
        if not any(codes):
            return None
        categorical = problem.grid.categorical
        bad = [names[j] if names is not None else j for j, c in enumerate(codes) if c and categorical[j]]
        if bad:
            raise ValueError(f"{name}: monotonic_cst constrains categorical feature(s) {bad}; a monotone "
                             "constraint needs a numeric feature (give it 0).")
        why = None
        if problem.outcome == "multiclass":
            why = "three or more classes"
        elif config.general_rules:
            why = "categorical features or missing values in X"
        elif config.tree_sampler != "grow-prune":
            why = f"tree_sampler={config.tree_sampler!r} (monotone BART runs 'grow-prune')"
        elif (getattr(self, "variance_trees", 0) or 0) > 0:  # heteroskedastic BART has its own kernel
            why = "variance_trees > 0"
        if why is not None:
            raise ValueError(f"{name}: monotonic_cst is not supported with {why}.")
        return codes

    def _monotone_kernel(self, config, codes: tuple, dart_config=None):
        """The sampling algorithm of a constrained run; with ``dart_config`` (``sparse=True``) DART
        around the monotone sweep (:class:`~bdtree_jax.kernels.bart_monotone.MonotoneKernel`)."""
        if dart_config is None:
            return bart_monotone(config, codes)
        check(config, codes)
        return dart(config, dart_config, MonotoneKernel(codes))
