"""DART (``sparse=True``) on the BART estimators: its parameters' checks, the kernel's
configuration, and the posterior inclusion summaries (:mod:`bdtree_jax.kernels.dart`)."""

from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..kernels.dart import DARTConfig, sparse_config

__all__ = ["SparseMixin", "SPARSE_TRACES"]

#: The DART trace entries kept on the estimator, not in the BART posterior's statistics.
SPARSE_TRACES = ("split_probs", "theta", "s_accepted", "theta_accepted")


class SparseMixin:
    """``sparse``, ``sparse_theta``, ``sparse_a``, ``sparse_b``, ``sparse_rho`` of the BART
    estimators, and what a sparse fit records: ``split_probs_`` (C, S, F) the kept draws of ``s``,
    ``theta_`` (C, S), ``s_acceptance_`` and ``theta_acceptance_`` (the acceptance rates over the
    kept sweeps of the ``s`` step's Dirichlet proposal and of the ``theta`` steps; NaN for a fixed
    ``sparse_theta``)."""

    def _dart_config(self) -> DARTConfig | None:
        """The checked DART configuration, or None for ``sparse=False`` (and for the BART
        estimators without a ``sparse`` parameter: counts, survival)."""
        if not hasattr(self, "sparse"):
            return None
        return sparse_config(type(self).__name__, self.sparse, self.sparse_theta, self.sparse_a, self.sparse_b,
                             self.sparse_rho)

    def _keep_sparse_traces(self, traces: dict, num_warmup: int) -> dict:
        """Pop the DART entries from ``traces`` (kept iterations on the estimator); returns the rest."""
        for attr in ("split_probs_", "theta_", "s_acceptance_", "theta_acceptance_"):
            if attr in vars(self):
                delattr(self, attr)
        if "split_probs" not in traces:
            return traces
        traces = dict(traces)
        kept = {k: np.array(traces.pop(k)[:, num_warmup:]) for k in SPARSE_TRACES}
        self.split_probs_ = kept["split_probs"]
        self.theta_ = kept["theta"]
        self.s_acceptance_ = float(np.mean(kept["s_accepted"]))
        self.theta_acceptance_ = float(np.mean(kept["theta_accepted"]))
        return traces

    @property
    def variable_inclusion_(self) -> np.ndarray:
        """(F,) posterior inclusion probabilities: the share of kept draws in which some tree
        splits on each feature (Linero 2018's variable selection: keep a feature whose
        probability is above 1/2).  Defined for ``sparse=False`` fits too."""
        check_is_fitted(self, "posterior_")
        counts = self.posterior_.variable_counts()  # (C, S, F)
        return (counts > 0).reshape(-1, counts.shape[-1]).mean(0)

    def sparsity_summary(self, prob: float = 0.9):
        """pandas DataFrame, one row per feature (index: the feature names): ``inclusion``
        (:attr:`variable_inclusion_`), ``split_share`` (mean over the draws of the share of split
        rules on the feature) with its equal-tailed ``prob`` interval ``split_share_lo``,
        ``split_share_hi``, and with ``sparse=True`` the split probability ``s`` likewise
        (``split_prob``, ``split_prob_lo``, ``split_prob_hi``)."""
        import pandas as pd

        check_is_fitted(self, "posterior_")
        if isinstance(prob, bool) or not isinstance(prob, (int, float, np.integer, np.floating)) or not 0 < prob < 1:
            raise ValueError(f"{type(self).__name__}.sparsity_summary: prob must be in (0, 1); got {prob!r}.")
        tails = [(1 - prob) / 2, (1 + prob) / 2]
        n_features = self.n_features_in_
        share = self.posterior_.variable_inclusion().reshape(-1, n_features)
        share = share[~np.isnan(share[:, 0])]
        if len(share) == 0:
            share = np.zeros((1, n_features))
        out = dict(inclusion=self.variable_inclusion_, split_share=share.mean(0))
        out["split_share_lo"], out["split_share_hi"] = np.quantile(share, tails, axis=0)
        if "split_probs_" in vars(self):
            s = self.split_probs_.reshape(-1, n_features).astype(np.float64)
            out["split_prob"] = s.mean(0)
            out["split_prob_lo"], out["split_prob_hi"] = np.quantile(s, tails, axis=0)
        names = self.posterior_.feature_names or [f"x{i}" for i in range(n_features)]
        return pd.DataFrame(out, index=pd.Index(names, name="feature"))
