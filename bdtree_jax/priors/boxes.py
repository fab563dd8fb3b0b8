"""Box constraints (Angelopoulos & Cussens 2005): regions declared to have a constant class
distribution, so no tree may split inside them.

A box gives, per feature, an interval ``(low, high)`` of an ordered feature or a collection of
levels of a categorical feature (the level labels as in the data); a feature it does not name is
unbounded (every value, every level).  A box holds no missing value of a feature it names, so a
rule's missing-value bit never cuts a box.  A rule cuts a box iff the box has points on both
sides of it: an ordered cut strictly inside the interval, a level set ``S`` with ``B & S`` and
``B - S`` both non-empty (``B`` the box's levels).
"""

from __future__ import annotations

from collections.abc import Collection

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array
from ..tree import Tree, max_depth_of

__all__ = ["box_sides", "box_level_masks", "violates_boxes", "violates_boxes_general"]


def _parse(boxes, n_features: int, feature_names, levels, where: str) -> list[dict]:
    """``[{f: ("interval", low, high) or ("levels", sorted level indices)}]`` of valid boxes.
    ``levels``: per feature, the level labels of a categorical feature or None."""
    names = list(feature_names) if feature_names is not None else [f"x{f}" for f in range(n_features)]
    levels = (None,) * n_features if levels is None else tuple(levels)
    if isinstance(boxes, dict):
        boxes = [boxes]
    if not isinstance(boxes, (list, tuple)):
        raise ValueError(f"{where}box_constraints must be a list of dicts {{feature: (low, high)}}; got {type(boxes).__name__}.")
    out = []
    for k, box in enumerate(boxes):
        if not isinstance(box, dict) or not box:
            raise ValueError(f"{where}box_constraints[{k}] must be a non-empty dict {{feature: (low, high)}}; got {box!r}.")
        parsed = {}
        for feat, bounds in box.items():
            if isinstance(feat, (int, np.integer)) and not isinstance(feat, bool):
                if not 0 <= feat < n_features:
                    raise ValueError(f"{where}box_constraints[{k}]: feature index {feat} is out of range (X has {n_features} features).")
                f = int(feat)
            elif isinstance(feat, str) and feat in names:
                f = names.index(feat)
            else:
                raise ValueError(f"{where}box_constraints[{k}]: unknown feature {feat!r}; features are {names}.")
            if levels[f] is not None:
                parsed[f] = ("levels", _level_indices(bounds, levels[f], names[f], f"{where}box_constraints[{k}][{feat!r}]"))
                continue
            if isinstance(bounds, (set, frozenset)):
                raise ValueError(f"{where}box_constraints[{k}][{feat!r}]: column {names[f]!r} is ordered; give a pair "
                                 f"(low, high) of numbers, not a set of levels; got {bounds!r}.")
            try:
                a, b = bounds
                a = -np.inf if a is None else float(a)
                b = np.inf if b is None else float(b)
            except (TypeError, ValueError):
                raise ValueError(f"{where}box_constraints[{k}][{feat!r}] must be a pair (low, high) of numbers; got {bounds!r}.") from None
            if np.isnan(a) or np.isnan(b) or not a < b:
                raise ValueError(f"{where}box_constraints[{k}][{feat!r}] needs low < high; got ({a}, {b}).")
            parsed[f] = ("interval", a, b)
        out.append(parsed)
    return out


def _level_indices(given, labels, column: str, what: str) -> list[int]:
    """The indices into ``labels`` (L,) of the levels ``given`` (a non-empty collection) of the
    categorical column named ``column``."""
    labels = list(labels)
    if isinstance(given, (str, bytes)) or not isinstance(given, Collection) or isinstance(given, dict) or len(given) == 0:
        raise ValueError(f"{what}: the categorical column {column!r} takes a non-empty set (or list) of its levels, e.g. "
                         f"{{{labels[0]!r}}}; got {given!r}.  Levels are {labels}.")
    out = set()
    for v in given:
        if v is None or (isinstance(v, float) and np.isnan(v)):
            raise ValueError(f"{what}: a box holds no missing values; leave None / NaN out of the level set.")
        hits = [i for i, lab in enumerate(labels)
                if isinstance(lab, (str, bytes)) == isinstance(v, (str, bytes)) and bool(lab == v)]
        if not hits:
            raise ValueError(f"{what}: unknown level {v!r} of column {column!r}; its levels are {labels}.")
        out.add(hits[0])
    return sorted(out)


def box_sides(boxes, thresholds: np.ndarray, feature_names=None, *, levels=None, where: str = "") -> np.ndarray:
    """Encode box constraints against the split grid.

    Parameters
    ----------
    boxes : list of dicts ``{feature: bounds}``; a feature is a column name (from
        ``feature_names``) or an integer index; features not named are unbounded.  An ordered
        feature's bounds are ``(low, high)``, either may be ``-inf`` / ``inf`` (or None); a
        categorical feature's (``levels``) a non-empty collection of its level labels.
    thresholds : (F, C) candidate thresholds (:class:`~bdtree_jax.data.SplitGrid`).
    feature_names : list of str, optional.
    levels : per feature, the (L,) level labels of a categorical feature or None
        (``SplitGrid.levels``); None: every feature is ordered.

    Returns
    -------
    (K, F, C) int8: 0 if box ``k`` lies left of threshold ``c`` of feature ``f``
    (``high <= t``), 1 if right (``low >= t``), 2 if the threshold cuts through it (a
    categorical feature's entries: 2; its rules are read from :func:`box_level_masks`).
    """
    thresholds = np.asarray(thresholds, float)
    F = thresholds.shape[0]
    parsed = _parse(boxes, F, feature_names, levels, where)
    low = np.full((len(parsed), F), -np.inf)
    high = np.full((len(parsed), F), np.inf)
    for k, box in enumerate(parsed):
        for f, spec in box.items():
            if spec[0] == "interval":
                low[k, f], high[k, f] = spec[1], spec[2]
    t = thresholds[None]
    side = np.where(high[:, :, None] <= t, 0, np.where(low[:, :, None] >= t, 1, 2))
    if levels is not None:
        side[:, [lv is not None for lv in levels], :] = 2
    return side.astype(np.int8)


def box_level_masks(boxes, levels, feature_names=None, *, where: str = "") -> np.ndarray | None:
    """(K, F, W) uint32 levels of every box on each categorical feature (bit ``l % 32`` of word
    ``l // 32``; every level where the box does not name the feature; 0 for ordered features),
    ``W = ceil(max L / 32)``; None without a categorical feature.  ``levels``: per feature, the
    (L,) level labels or None (``SplitGrid.levels``)."""
    levels = tuple(levels)
    counts = [0 if lv is None else len(lv) for lv in levels]
    if max(counts, default=0) == 0:
        return None
    parsed = _parse(boxes, len(levels), feature_names, levels, where)
    words = -(-max(counts) // 32)
    on = np.zeros((len(parsed), len(levels), 32 * words), bool)
    for k, box in enumerate(parsed):
        for f, count in enumerate(counts):
            if count:
                on[k, f, box[f][1] if f in box else np.arange(count)] = True
    shaped = on.reshape(on.shape[:2] + (words, 32)).astype(np.uint64)
    return (shaped << np.arange(32, dtype=np.uint64)).sum(-1).astype(np.uint32)


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


def violates_boxes_general(tree: Tree, box_side: Array, box_levels: Array | None) -> Array:
    """() bool: as :func:`violates_boxes`, for trees whose rules may be level sets: at a rule on
    a categorical feature (``box_levels[k, f]`` not 0) box ``k`` with levels ``B`` lies left if
    ``B`` is inside the rule's ``levels_left``, right if it meets it nowhere, else it is cut.
    The missing-value bit plays no part (a box holds no missing value).  ``box_side`` (K, F, C)
    int8 (:func:`box_sides`), ``box_levels`` (K, F, W) uint32 (:func:`box_level_masks`) or None."""
    if box_levels is None:
        return violates_boxes(tree, box_side)
    depth = max_depth_of(tree)

    def one(side, lv):  # side: (F, C), lv: (F, W)
        node, bad = jnp.int32(0), jnp.bool_(False)
        for _ in range(depth):
            split = tree.is_split[node]
            f = tree.feature[node]
            b, s_left = lv[f], tree.levels_left[node]
            level_side = jnp.where(jnp.all((b & ~s_left) == 0), 0, jnp.where(jnp.any((b & s_left) != 0), 2, 1))
            s = jnp.where(jnp.any(b != 0), level_side, side[f, tree.cut[node]].astype(jnp.int32))
            bad = bad | (split & (s == 2))
            node = jnp.where(split, 2 * node + 1 + jnp.minimum(s, 1).astype(jnp.int32), node)
        return bad

    return jnp.any(jax.vmap(one)(box_side, box_levels))
