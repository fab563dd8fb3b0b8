"""Tree sites of NumPyro models at the edges (issue #38): Predictive with the fitted calibration
at the training rows, at new rows and at one row; routing that agrees exactly with the fit's bins
for features whose values collapse in float32; clear errors for gradient-based inference on a
tree site and for missing values; the packed trees kept out of ArviZ's posterior group.

The references are computed here, independently of the sites' routing: the sampled trees are
decoded to bin codes on the site's grid (:func:`bdtree_jax.data.make_split_grid`, what the site
builds from its inputs) and the rows binned on that grid in float64 (a row goes left iff its
bin <= the cut).  One short TreeGibbs run per model (compilation dominates), shared by the module.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS, SVI, Predictive, Trace_ELBO, init_to_median
from numpyro.infer.autoguide import AutoNormal

from bdtree_jax.data import make_split_grid
from bdtree_jax.numpyro import TreeGibbs, bart, cart, posterior_samples
from bdtree_jax.numpyro.sites import decode_trees, encode_trees, ensemble_values, leaf_indicators
from bdtree_jax.problem.bart import MAX_CUTS
from bdtree_jax.tree import Tree

OFFSET_Y = 10.0  # the response sits far from 0, so a lost calibration shows at once


def _samples(mcmc):
    """The draws with their packed trees, wherever the kernel keeps them."""
    return {**mcmc.get_samples(), **mcmc.get_extra_fields().get("packed_trees", {})}


def _reference(trees, grid, X, offset):
    """(draws, n) ``offset + sum_m leaf_m[leaf(x)]`` of packed ``trees`` (draws, M, N, >=3), the
    rows ``X`` binned on ``grid`` in float64 and routed by bin codes."""
    trees = np.asarray(trees)
    tree = decode_trees(trees, grid.thresholds)
    bins = grid.bin(np.asarray(X, np.float64))
    depth = int(np.log2(trees.shape[-2] + 1)) - 1
    out = np.full(trees.shape[:1] + (len(X),), offset, np.float64)
    rows = np.arange(len(X))
    for d in range(trees.shape[0]):
        for m in range(trees.shape[1]):
            node = np.zeros(len(X), np.int64)
            for _ in range(depth):
                split = tree.is_split[d, m][node]
                f, c = tree.feature[d, m][node], tree.cut[d, m][node]
                left = bins[rows, f] <= c
                node = np.where(split, 2 * node + 2 - left, node)
            out[d] += trees[d, m, node, 2]
    return out


def _bart_model(X, y=None):
    f = bart("f", X, num_trees=4, max_depth=3, y=y)
    numpyro.sample("y", dist.Normal(f, 0.3), obs=y)  # no continuous site: TreeGibbs runs no NUTS (compiles fast)


@pytest.fixture(scope="module")
def bart_fit():
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(40, 2))
    y = OFFSET_Y + np.where(X[:, 0] > 0.5, 1.0, -1.0) + 0.2 * rng.normal(size=40)
    mcmc = MCMC(TreeGibbs(NUTS(_bart_model)), num_warmup=40, num_samples=15, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), X, y)
    return X, y, mcmc


def test_predictive_keeps_the_fitted_calibration(bart_fit):
    """``bart(..., y=y)`` then ``Predictive(..., y=None)``: at the training rows the fitted ``f``
    (float32 sums in another order: 1e-4), at new rows the drawn trees' function with the fit's
    offset (the midrange of y), checked against the float64 bin-code reference."""
    X, y, mcmc = bart_fit
    samples = _samples(mcmc)
    pred = Predictive(_bart_model, samples)(jax.random.PRNGKey(1), X)
    np.testing.assert_allclose(pred["f"], samples["f"], atol=1e-4)
    X_new = np.array([[0.1, 0.2], [0.45, 0.9], [0.55, 0.1], [0.99, 0.5]])
    pred = Predictive(_bart_model, samples)(jax.random.PRNGKey(2), X_new)
    offset = 0.5 * (y.min() + y.max())
    grid = make_split_grid(X, MAX_CUTS)
    np.testing.assert_allclose(pred["f"], _reference(samples["f_trees"], grid, X_new, offset), atol=1e-4)
    # one new row (a grid cannot be built from it; routing needs none)
    pred = Predictive(_bart_model, samples)(jax.random.PRNGKey(3), X_new[2:3])
    assert pred["f"].shape == (15, 1)
    np.testing.assert_allclose(pred["f"], _reference(samples["f_trees"], grid, X_new[2:3], offset), atol=1e-4)


def test_posterior_samples_and_arviz_posterior_without_trees(bart_fit):
    """The packed trees are out of the samples (so out of ArviZ's posterior group) and in the
    extra field ``packed_trees``; ``posterior_samples`` puts them back.  ArviZ's log-likelihood
    (computed from the samples without trees) equals NumPyro's from the full samples."""
    az = pytest.importorskip("arviz")
    X, y, mcmc = bart_fit
    assert "f_trees" not in mcmc.get_samples()
    full = posterior_samples(mcmc)
    assert full["f_trees"].shape == (15, 4, 15, 7)
    assert posterior_samples(mcmc, group_by_chain=True)["f_trees"].shape == (1, 15, 4, 15, 7)
    idata = az.from_numpyro(mcmc, log_likelihood=True)
    names = set(idata["posterior"].data_vars)
    assert {"f", "f_n_leaves", "f_depth"} <= names
    assert not any(name.endswith("_trees") for name in names), names
    groups = idata.groups() if callable(idata.groups) else [g.strip("/") for g in idata.groups if g != "/"]  # 0.2x / 1.x
    assert not any("trees" in name for g in groups for name in idata[g].data_vars), groups
    expected = numpyro.infer.log_likelihood(_bart_model, full, X, y)["y"]
    np.testing.assert_allclose(np.asarray(idata["log_likelihood"]["y"]).reshape(15, -1), expected, rtol=1e-5)


def test_placeholder_trees_give_nan_not_prior_values():
    """Without a random key and without its trees, a site's values are NaN (a placeholder), so a
    likelihood that was not given the site's deterministic values cannot look valid."""
    X = np.random.default_rng(0).uniform(size=(6, 2))
    tr = numpyro.handlers.trace(lambda: bart("f", X, num_trees=2, max_depth=2)).get_trace()
    assert np.isnan(np.asarray(tr["f"]["value"])).all()


# -- exact routing for features whose values collapse in float32 ---------------------------------

N_TS = 48
X_TS = np.column_stack([1.6e9 + 60.0 * np.arange(N_TS), np.linspace(0.0, 1.0, N_TS)])  # float32 spacing 128 at 1.6e9
Y_TS = np.sin(np.arange(N_TS) * 2 * np.pi / 7.0) * 2.0  # steps every few rows: splits all along the timestamps


def _cart_model(X, y=None):
    g = cart("g", X, max_depth=4, alpha=0.99, beta=0.5)
    numpyro.sample("y", dist.Normal(g, 0.3), obs=y)


def _structure_model(X, y=None):
    phi = cart("g", X, leaf_values=False, max_depth=3, alpha=0.99, beta=0.5)
    numpyro.deterministic("slot", jnp.argmax(phi, 1))
    mu = numpyro.sample("mu", dist.Normal(0.0, 2.0).expand([phi.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Normal(phi @ mu, 0.3), obs=y)


def test_timestamp_features_route_by_the_bins_at_every_cut():
    """Every cut of the timestamp feature as a root split, encoded by the site: its rows go left
    exactly when their float64 bin is <= the cut, and ``decode_trees`` returns the cut."""
    tr = numpyro.handlers.trace(numpyro.handlers.seed(lambda: cart("g", X_TS, max_depth=1), 0)).get_trace()
    spec = tr["g_trees"]["fn"].spec
    grid = make_split_grid(X_TS)
    bins = grid.bin(X_TS)
    cuts = np.arange(grid.n_cuts[0])
    C = len(cuts)
    tree = Tree(np.tile([True, False, False], (C, 1)), np.zeros((C, 3), np.int32),
                np.column_stack([cuts, np.zeros((C, 2), np.int64)]).astype(np.int32))
    values = encode_trees(jax.tree.map(jnp.asarray, tree), jnp.tile(jnp.array([0.0, -1.0, 1.0]), (C, 1)),
                          spec.thresholds)
    slots = np.asarray(jax.jit(jax.vmap(lambda v: leaf_indicators(v, X_TS)))(values)).argmax(-1)  # (C, n)
    np.testing.assert_array_equal(slots, np.where(bins[None, :, 0] <= cuts[:, None], 1, 2))
    g = np.asarray(jax.jit(jax.vmap(lambda v: ensemble_values(v[None], X_TS)))(values))
    np.testing.assert_array_equal(g, np.where(bins[None, :, 0] <= cuts[:, None], -1.0, 1.0))
    np.testing.assert_array_equal(decode_trees(np.asarray(values), grid.thresholds).cut[:, 0], cuts)


@pytest.mark.slow
def test_timestamp_features_route_as_the_fit_bins_them():
    """Timestamps 1.6e9 + 60 i: float32 holds them 128 apart, so thresholds and rows collapse.
    Every draw's values at the training rows (routed by the packed thresholds) equal the
    kernel's fit (bin codes) and the float64 bin-code reference; ``decode_trees`` gives the
    kernel's own tree for the last draw."""
    assert len(np.unique(X_TS[:, 0].astype(np.float32))) < N_TS  # the premise
    kernel = TreeGibbs(NUTS(_cart_model))
    mcmc = MCMC(kernel, num_warmup=60, num_samples=40, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), X_TS, Y_TS)
    samples = _samples(mcmc)
    grid = make_split_grid(X_TS)
    trees = np.asarray(samples["g_trees"])[:, None]
    assert (decode_trees(trees, grid.thresholds).feature[..., 0] == 0).mean() > 0.5  # splits on the timestamps
    ref = _reference(trees, grid, X_TS, 0.0)
    np.testing.assert_allclose(samples["g"], ref, atol=1e-5)
    pred = Predictive(_cart_model, samples)(jax.random.PRNGKey(1), X_TS)
    np.testing.assert_allclose(pred["g"], samples["g"], atol=1e-5)
    last = mcmc.last_state.trees[0].trees.tree
    decoded = decode_trees(trees[-1, 0], grid.thresholds)
    split = np.asarray(last.is_split[0])
    np.testing.assert_array_equal(decoded.is_split, split)
    np.testing.assert_array_equal(np.where(split, decoded.cut, 0), np.where(split, np.asarray(last.cut[0]), 0))


@pytest.mark.slow
def test_timestamp_features_structure_site_routes_as_its_proposals_count():
    """``cart(..., leaf_values=False)``: the leaf indicators the likelihood uses route the rows as
    the kernel's bin codes do (its proposals count rows by bin), draw after draw."""
    kernel = TreeGibbs(NUTS(_structure_model))
    mcmc = MCMC(kernel, num_warmup=60, num_samples=40, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(2), X_TS, Y_TS)
    last = mcmc.last_state.trees[0].trees
    assert int(np.asarray(last.tree.is_split[0]).sum()) >= 2
    slot = np.asarray(mcmc.get_samples()["slot"])
    np.testing.assert_array_equal(slot[-1], np.asarray(last.leaf_id[0]))
    # every draw: the slots from the bin codes of its decoded tree (leaf values: the slot numbers)
    trees = np.array(_samples(mcmc)["g_trees"])[:, None]
    trees[..., 2] = np.arange(trees.shape[-2])
    np.testing.assert_array_equal(slot, _reference(trees, make_split_grid(X_TS), X_TS, 0.0))


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["nuts", pytest.param("nuts-init-to-median", marks=pytest.mark.slow), "svi"])
def test_gradient_inference_on_a_tree_site_names_tree_gibbs(bart_fit, how):
    X, y, _ = bart_fit
    with pytest.raises(ValueError, match=r"MCMC\(TreeGibbs\(NUTS\(model\)\), ...\)"):
        if how == "svi":
            svi = SVI(_bart_model, AutoNormal(_bart_model), numpyro.optim.Adam(0.01), Trace_ELBO())
            svi.run(jax.random.PRNGKey(0), 2, X, y, progress_bar=False)
        else:
            init = {"init_strategy": init_to_median} if how == "nuts-init-to-median" else {}
            MCMC(NUTS(_bart_model, **init), num_warmup=2, num_samples=2, progress_bar=False).run(
                jax.random.PRNGKey(0), X, y)


def test_missing_values_message_says_what_to_do():
    X = np.random.default_rng(0).uniform(size=(6, 2))
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"bart\('f'\): X contains 1 missing values? \(NaN\), first in column 1") as e:
        numpyro.handlers.seed(lambda: bart("f", X), 0)()
    assert "missing=" not in str(e.value) and "impute" in str(e.value)
    with pytest.raises(ValueError, match=r"cart\('g'\): X contains"):
        numpyro.handlers.seed(lambda: cart("g", X), 0)()


def test_one_row_prior_draw_is_a_clear_error():
    with pytest.raises(ValueError, match=r"bart\('f'\): X has 1 row.*at least 2"):
        numpyro.handlers.seed(lambda: bart("f", np.zeros((1, 2))), 0)()
