"""Split inclusion per posterior draw: the share of a draw's split rules on each feature, for every
posterior of this library (:func:`split_shares`).  BART's come from
:meth:`~bdtree_jax.posterior.BARTPosterior.variable_inclusion`; a single tree's from its rules (an
oblique soft tree's rule counts each feature by its share of the rule's absolute weights).  Read
by :func:`bdtree_jax.inspection.split_inclusion` and the single-tree estimators'
``feature_importances_``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["split_shares"]


def _shares(weights: np.ndarray) -> np.ndarray:
    """(D, F) per-draw shares of the rule weights (D, F); rows without any weight dropped."""
    total = weights.sum(-1, keepdims=True)
    keep = total[:, 0] > 0
    return weights[keep] / total[keep]


def _tree_rule_weights(post) -> np.ndarray:
    """(D, F) per draw, the number of split rules on each feature of a single-tree posterior (an
    oblique rule: its absolute weights, normalised to 1 per rule)."""
    if hasattr(post, "trees"):
        is_split, feature = np.asarray(post.trees.is_split), np.asarray(post.trees.feature)
        F = post.grid.n_features
        one_hot = feature[..., None] == np.arange(F)
    else:  # a soft tree (RJHMC): axis-aligned features, or every rule's weight vector
        is_split, d = np.asarray(post.draws["is_split"]), post.draws
        F = len(post.x_min)
        if "tree_weights" in d:
            w = np.abs(np.asarray(d["tree_weights"], np.float64))
            one_hot = w / np.maximum(w.sum(-1, keepdims=True), np.finfo(np.float64).tiny)
        else:
            one_hot = np.asarray(d["feature"])[..., None] == np.arange(F)
        width = min(one_hot.shape[-2], is_split.shape[-1])
        is_split, one_hot = is_split[..., :width], one_hot[..., :width, :]
    weights = (one_hot * is_split[..., None]).sum(-2, dtype=np.float64)
    return weights.reshape(-1, F)


def split_shares(post) -> np.ndarray:
    """(D', F) per posterior draw of ``post`` (any posterior of this library) with at least one
    split, the share of its split rules on each feature (rows sum to 1)."""
    if hasattr(post, "variable_inclusion"):  # BART (every outcome): its own count of the rules
        props = post.variable_inclusion().reshape(-1, post.grid.n_features)
        return props[~np.isnan(props[:, 0])]
    return _shares(_tree_rule_weights(post))
