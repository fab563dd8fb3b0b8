"""The kernels' :class:`~bdtree_jax.data.TreeData`, built from binned data, a tree prior and a
likelihood: the prior's numbers (split probabilities or pinball tables, cut weights) and the row
layouts its valid cuts need (sorted bins, bin histograms, row bitsets)."""

from __future__ import annotations

import jax
import numpy as np

from ..data import MAX_BITSET_BINS, MAX_HISTOGRAM_BINS, SplitGrid, TreeData, cut_cumwidth
from .tree_prior import pinball_tables, split_probability

__all__ = ["make_tree_data", "to_device"]


def to_device(x, dtype=None) -> jax.Array:
    """Host data ``x`` as a device array of ``dtype`` (default: its own), by a transfer alone:
    ``jnp.asarray`` compiles a small program per shape and dtype, and a problem is built (and
    its options checked) before anything compiles."""
    return jax.device_put(np.asarray(x, dtype))


def make_tree_data(bins: np.ndarray, y, prior, likelihood, box_side: np.ndarray | None = None,
                   grid: SplitGrid | None = None, row_orders: bool = True,
                   box_levels: np.ndarray | None = None) -> TreeData:
    """Assemble :class:`~bdtree_jax.data.TreeData`.

    Parameters
    ----------
    bins : (n, F) bin codes (:meth:`~bdtree_jax.data.SplitGrid.bin`).
    y : (n,) class codes ``0..K-1`` or real responses (passed to ``likelihood.point_stats``).
    prior : TreePrior
    likelihood : DirichletMultinomial or NormalMeanShift
    box_side : (K, F, C) int8 box constraints (:func:`bdtree_jax.priors.box_sides`), or None.
    grid : the :class:`~bdtree_jax.data.SplitGrid` of ``bins``; needed for
        ``prior.split_prior == "range"`` (the cut widths).
    row_orders : build ``sorted_bins`` and ``sorted_index`` (two (F, n) int32 arrays and a sort of
        every feature); False leaves them None, for samplers that never read them (BART with
        ``valid_cuts="ancestors"`` or ``min_leaf_size = 1``), which saves their memory at large n.
    box_levels : (K, F, W) uint32 box levels of the categorical features
        (:func:`bdtree_jax.priors.boxes.box_level_masks`), or None; kept only with ``box_side``.
    """
    point_stats = likelihood.point_stats(np.asarray(y))

    bins = np.asarray(bins, np.int32)
    split_prior = prior.split_prior
    if split_prior == "range" and (grid is None or grid.widths is None):
        raise ValueError("make_tree_data: split_prior='range' needs the split grid (grid=) for the cut widths.")
    n_slots = grid.thresholds.shape[1] if grid is not None else max(1, int(bins.max(initial=0)))
    cumwidth = cut_cumwidth(split_prior, bins.shape[1], n_slots, None if grid is None else grid.widths)
    sorted_bins = order = None
    if row_orders:
        order = np.argsort(bins, axis=0, kind="stable").T.astype(np.int32)
        sorted_bins = to_device(np.take_along_axis(bins.T, order, axis=1))
        order = to_device(order)
    level_masks, missing_code = _general_fields(grid)
    general = level_masks is not None or missing_code is not None
    return TreeData(
        to_device(bins),
        to_device(point_stats, np.float32),
        sorted_bins,
        order,
        _split_prob(prior),
        likelihood.prepare(bins.shape[0]),
        to_device(cumwidth),
        None if box_side is None or len(box_side) == 0 else to_device(box_side, np.int8),
        _bin_onehot(bins) if prior.min_leaf_size > 1 and getattr(prior, "valid_cuts", "data") == "data" and not general
        else None,
        _cut_count(bins, grid) if getattr(prior, "valid_cuts", "data") == "ancestors" else None,
        _bin_bits(bins) if prior.min_leaf_size == 1 and getattr(prior, "valid_cuts", "data") == "data" and not general
        else None,
        level_masks,
        missing_code,
        None if box_levels is None or box_side is None or len(box_side) == 0 else to_device(box_levels, np.uint32),
    )


def _general_fields(grid: SplitGrid | None):
    """TreeData's ``level_masks`` (F, W) uint32 and ``missing_code`` () int32 from the grid's
    categorical level counts and missing code (None each when absent)."""
    count = None if grid is None else getattr(grid, "level_count", None)
    masks = None
    if count is not None and np.any(np.asarray(count) > 0):
        count = np.asarray(count, np.int64)
        words = -(-int(count.max()) // 32)
        bits = np.arange(32 * words)[None, :] < count[:, None]  # (F, 32 W)
        masks = (bits.reshape(len(count), words, 32).astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(-1)
        masks = to_device(masks, np.uint32)
    code = None if grid is None else getattr(grid, "missing_code", None)
    return masks, (None if code is None else to_device(code, np.int32))


def _cut_count(bins: np.ndarray, grid: SplitGrid | None):
    """(F,) int32 candidate cuts per feature: the grid's, or (without a grid) the largest bin code,
    which counts the cuts below the feature's largest value."""
    count = grid.n_cuts if grid is not None else np.asarray(bins).max(axis=0, initial=0)
    return to_device(count, np.int32)


def _split_prob(prior):
    """The prior's numbers for :attr:`~bdtree_jax.data.TreeData.split_prob` (CGM98 split probabilities or the
    pinball tables), as device arrays."""
    if getattr(prior, "structure", "cgm") == "pinball":
        return jax.tree.map(to_device, pinball_tables(prior))
    return to_device(split_probability(prior))


def _bin_onehot(bins: np.ndarray):
    """(n, F, B) int32 indicator of every row's bin, or None when a feature has more than
    :data:`~bdtree_jax.data.MAX_HISTOGRAM_BINS` bins."""
    n_bins = int(bins.max(initial=0)) + 1
    if n_bins > MAX_HISTOGRAM_BINS:
        return None
    return to_device(bins[:, :, None] == np.arange(n_bins), np.int32)


def _bin_bits(bins: np.ndarray):
    """(W, F, B) uint32 row bitsets of every feature's bins
    (:attr:`~bdtree_jax.data.TreeData.bin_bits`), or None when a feature has more than
    :data:`~bdtree_jax.data.MAX_BITSET_BINS` bins."""
    n, n_features = bins.shape
    n_bins = int(bins.max(initial=0)) + 1
    if n_bins > MAX_BITSET_BINS or n == 0:
        return None
    words = -(-n // 32)
    row = np.arange(n)
    out = np.zeros((words, n_features, n_bins), np.uint32)
    bit = np.left_shift(np.uint32(1), (row // words).astype(np.uint32))
    np.bitwise_or.at(out, ((row % words)[:, None], np.arange(n_features)[None, :], bins), bit[:, None])
    return to_device(out)
