"""Box constraints (Angelopoulos & Cussens 2005): regions declared to have a constant class
distribution, so no tree may split inside them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array
from ..tree import Tree, max_depth_of

__all__ = ["box_sides", "violates_boxes"]


def box_sides(boxes, thresholds: np.ndarray, feature_names=None, *, where: str = "") -> np.ndarray:
    """Encode box constraints against the split grid.

    Parameters
    ----------
    boxes : list of dicts ``{feature: (low, high)}``; a feature is a column name (from
        ``feature_names``) or an integer index; features not named are unbounded.  ``low`` /
        ``high`` may be ``-inf`` / ``inf`` (or None).
    thresholds : (F, C) candidate thresholds (:class:`~bdtree_jax.data.SplitGrid`).
    feature_names : list of str, optional.

    Returns
    -------
    (K, F, C) int8: 0 if box ``k`` lies left of threshold ``c`` of feature ``f``
    (``high <= t``), 1 if right (``low >= t``), 2 if the threshold cuts through it.
    """
    thresholds = np.asarray(thresholds, float)
    F = thresholds.shape[0]
    names = list(feature_names) if feature_names is not None else [f"x{f}" for f in range(F)]
    if isinstance(boxes, dict):
        boxes = [boxes]
    if not isinstance(boxes, (list, tuple)):
        raise ValueError(f"{where}box_constraints must be a list of dicts {{feature: (low, high)}}; got {type(boxes).__name__}.")
    low = np.full((len(boxes), F), -np.inf)
    high = np.full((len(boxes), F), np.inf)
    for k, box in enumerate(boxes):
        if not isinstance(box, dict) or not box:
            raise ValueError(f"{where}box_constraints[{k}] must be a non-empty dict {{feature: (low, high)}}; got {box!r}.")
        for feat, bounds in box.items():
            if isinstance(feat, (int, np.integer)) and not isinstance(feat, bool):
                if not 0 <= feat < F:
                    raise ValueError(f"{where}box_constraints[{k}]: feature index {feat} is out of range (X has {F} features).")
                f = int(feat)
            elif isinstance(feat, str) and feat in names:
                f = names.index(feat)
            else:
                raise ValueError(f"{where}box_constraints[{k}]: unknown feature {feat!r}; features are {names}.")
            try:
                a, b = bounds
                a = -np.inf if a is None else float(a)
                b = np.inf if b is None else float(b)
            except (TypeError, ValueError):
                raise ValueError(f"{where}box_constraints[{k}][{feat!r}] must be a pair (low, high) of numbers; got {bounds!r}.") from None
            if np.isnan(a) or np.isnan(b) or not a < b:
                raise ValueError(f"{where}box_constraints[{k}][{feat!r}] needs low < high; got ({a}, {b}).")
            low[k, f], high[k, f] = a, b
    t = thresholds[None]
    side = np.where(high[:, :, None] <= t, 0, np.where(low[:, :, None] >= t, 1, 2))
    return side.astype(np.int8)


def violates_boxes(tree: Tree, box_side: Array) -> Array:
    """() bool: some box is cut by a rule of a node whose region holds it.

    Each box starts at the root and follows the side it lies on at every split (a box never
    cut stays inside one node per level and ends inside one leaf)."""
    depth = max_depth_of(tree)
    tree = jax.tree.map(lambda a: jnp.asarray(a), tree)

    def one(side):  # side: (F, C)
        node, bad = jnp.int32(0), jnp.bool_(False)
        for _ in range(depth):
            split = tree.is_split[node]
            s = side[tree.feature[node], tree.cut[node]]
            bad = bad | (split & (s == 2))
            node = jnp.where(split, 2 * node + 1 + jnp.minimum(s, 1).astype(jnp.int32), node)
        return bad

    return jnp.any(jax.vmap(one)(box_side))
