"""Prediction streamed over chunks of draws x rows (posterior.streaming) and compact traces.

A tiny ``PREDICT_BUDGET_BYTES`` forces several chunks of draws and of rows; the results are
compared with the same posterior at the default budget (one chunk) and with a direct, unchunked
computation."""

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bdtree_jax as bd
from bdtree_jax.posterior import BARTPosterior, streaming
from bdtree_jax.posterior.bart import sum_of_trees
from bdtree_jax.tree import Tree, leaf_index

TINY = 3000  # bytes: a few draws x a few rows per chunk


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(121, 3))  # 121 rows: the last chunk of training rows is padded
    y_reg = 2 * X[:, 0] + rng.normal(size=121)
    y_cls = (y_reg > 0).astype(int) + (X[:, 1] > 1)
    return X, y_reg, y_cls, rng.normal(size=(97, 3))


def _sample(X, y, task):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bd.sample(X, y, task=task, num_warmup=20, num_samples=60, num_chains=2, max_depth=3, progress=False,
                         seed=1)


@pytest.fixture(scope="module")
def cls_post(data):
    X, _, y, _ = data
    return _sample(X, y, "classification")


@pytest.fixture(scope="module")
def reg_post(data):
    X, y, _, _ = data
    return _sample(X, y, "regression")


def _reference_draws(post, X):
    """The posterior-mean leaf parameter of every draw at X, all draws and rows at once."""
    bins = jnp.asarray(post._bins(X))
    tb, ts = jnp.asarray(post.train_bins), jnp.asarray(post.train_stats)
    flat = Tree(*(jnp.asarray(a) for a in post._flat_trees()))

    def one(tree):
        stats = jax.ops.segment_sum(ts, leaf_index(tree, tb), num_segments=tree.is_split.shape[-1])
        return post.likelihood.leaf_mean(stats)[leaf_index(tree, bins)]

    return np.asarray(jax.jit(jax.vmap(one))(flat))


def test_normal_rows_are_rows_of_jax_normal():
    key = jax.random.key(7)
    for tail in [(), (3,)]:
        full = np.asarray(jax.random.normal(key, (50,) + tail))
        for start, n in [(0, 50), (13, 20), (49, 1)]:
            got = np.asarray(jax.jit(streaming.normal_rows, static_argnums=(2, 3, 4))(key, start, n, 50, tail))
            np.testing.assert_array_equal(got, full[start : start + n])


def test_plan_fits_the_budget():
    for D, n, cell, budget in [(1000, 20_000, 40, 64 * 2**20), (7, 5, 16, 100), (300, 97, 84, TINY), (5, 3, 10, 1)]:
        draws, rows = streaming.plan(D, n, cell, budget=budget)
        assert 1 <= draws <= min(D, streaming.MAX_DRAW_CHUNK) and 1 <= rows <= n
        assert draws * rows * cell <= budget or draws == rows == 1
    # 64 MiB: 256 draws x 6,553 rows fit; 4 chunks of rows, evened out to 5,000 each
    assert streaming.plan(1000, 20_000, 40) == (256, 5000)
    assert streaming.draws_per_chunk(1000, 200_000, 96, budget=64 * 2**20) == 3


@pytest.mark.parametrize("task", [pytest.param("classification", marks=pytest.mark.slow), "regression"])
def test_hard_posterior_streamed_matches_unchunked(task, cls_post, reg_post, data, monkeypatch):
    post = cls_post if task == "classification" else reg_post
    Xt = data[3]
    ref = _reference_draws(post, Xt)
    full = post.predict_draws(Xt)
    mean, sf = post._mean_prediction(Xt), post.sample_function(Xt, seed=3)
    lo, hi = post.predict_interval(Xt, seed=3)
    monkeypatch.setattr(streaming, "PREDICT_BUDGET_BYTES", TINY)
    D, n, P = ref.shape
    draws, rows = streaming.plan(D, n, 24 + 20 * P)
    assert draws < D and rows < n  # several chunks of both
    np.testing.assert_array_equal(full, ref)
    np.testing.assert_array_equal(post.predict_draws(Xt), ref)  # bit for bit
    np.testing.assert_allclose(post._mean_prediction(Xt), mean, rtol=1e-13, atol=1e-15)  # float64 sum order
    np.testing.assert_allclose(mean, ref.mean(0, dtype=np.float64), rtol=1e-12)
    # leaf parameters drawn per draw: float32 transcendental functions may round differently
    # with the batch's size (XLA's vectorised log/exp), so to float32 tolerance
    np.testing.assert_allclose(post.sample_function(Xt, seed=3), sf, rtol=1e-5, atol=1e-6)
    lo2, hi2 = post.predict_interval(Xt, seed=3)
    np.testing.assert_allclose(lo2, lo, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hi2, hi, rtol=1e-5, atol=1e-6)


def test_hard_predictive_noise_does_not_depend_on_chunks(reg_post, data, monkeypatch):
    Xt = data[3]
    a = reg_post.sample_function(Xt, predictive=True, seed=5)
    f = reg_post.sample_function(Xt, seed=5)
    monkeypatch.setattr(streaming, "PREDICT_BUDGET_BYTES", TINY)
    b = reg_post.sample_function(Xt, predictive=True, seed=5)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # the noise is there: N(0, sigma^2) around the function draws, sigma ~ 1 here
    assert 0.5 < float(np.std(a - f)) < 2.0


@pytest.fixture(scope="module")
def bart_post(data):
    X, y, _, _ = data
    return bd.BARTRegressor(num_trees=8, num_warmup=20, num_samples=40, num_chains=2, seed=0).fit(X, y).posterior_


def test_bart_streamed_matches_unchunked(bart_post, data, monkeypatch):
    Xt = data[3]
    p = bart_post
    D = p.num_chains * p.num_draws
    flat = Tree(*(jnp.asarray(np.asarray(a).reshape(D, *a.shape[2:])) for a in p.trees))
    values = jnp.asarray(np.asarray(p.leaf_values).reshape(D, *p.leaf_values.shape[2:]))
    ref = p.y_offset + p.y_scale * np.asarray(sum_of_trees(flat, values, jnp.asarray(p._bins(Xt)))).astype(np.float64)
    mean, (lo, hi) = p.predict(Xt), p.predict_interval(Xt)
    plo, phi = p.predict_interval(Xt, predictive=True, seed=2)
    monkeypatch.setattr(streaming, "PREDICT_BUDGET_BYTES", TINY)
    draws, rows = streaming.plan(D, len(Xt), 32)
    assert draws < D and rows < len(Xt)
    np.testing.assert_array_equal(p.predict_draws(Xt), ref)  # bit for bit
    np.testing.assert_array_equal(mean, ref.mean(0))
    np.testing.assert_allclose(p.predict(Xt), mean, rtol=1e-13, atol=1e-14 * np.abs(ref).max())  # float64 sum order
    q = np.quantile(ref, [(1 - 0.9) / 2, (1 + 0.9) / 2], axis=0)  # as predict_interval(prob=0.9) computes them
    for got, want in zip(p.predict_interval(Xt), q):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(lo, q[0])
    np.testing.assert_array_equal(hi, q[1])
    # predictive noise from counters: the same whatever the chunks, and wider than the credible one
    plo2, phi2 = p.predict_interval(Xt, predictive=True, seed=2)
    np.testing.assert_array_equal(plo2, plo)
    np.testing.assert_array_equal(phi2, phi)
    assert np.all(phi - plo > hi - lo)


def test_bart_classifier_streamed(data, monkeypatch):
    X, y, _, Xt = data
    p = bd.BARTClassifier(num_trees=5, num_warmup=10, num_samples=30, num_chains=1, seed=0).fit(X, y > 0).posterior_
    from scipy.special import ndtr

    probs = ndtr(p.predict_draws(Xt))
    monkeypatch.setattr(streaming, "PREDICT_BUDGET_BYTES", TINY)
    np.testing.assert_allclose(p.predict_proba(Xt)[:, 1], probs.mean(0), rtol=1e-13)
    lo, hi = p.predict_interval(Xt)
    q = np.quantile(probs, [(1 - 0.9) / 2, (1 + 0.9) / 2], axis=0)
    np.testing.assert_array_equal(lo, q[0])
    np.testing.assert_array_equal(hi, q[1])


def test_bart_low_precision_leaves(bart_post, data):
    import ml_dtypes

    Xt = data[3]
    for dtype in (np.float16, ml_dtypes.bfloat16):
        low = dataclasses.replace(bart_post, leaf_values=np.asarray(bart_post.leaf_values).astype(dtype))
        widened = dataclasses.replace(bart_post, leaf_values=np.asarray(low.leaf_values).astype(np.float32))
        np.testing.assert_array_equal(low.predict_draws(Xt), widened.predict_draws(Xt))
        np.testing.assert_allclose(low.predict(Xt), bart_post.predict(Xt), atol=0.05 * np.std(bart_post.predict(Xt)))
        assert low.nbytes_per_draw == bart_post.nbytes_per_draw - 2 * bart_post.leaf_values[0, 0].size


def test_nbytes_per_draw_exact(cls_post):
    C, S, M, N = 1, 2, 3, 7
    trees = Tree(np.zeros((C, S, M, N), bool), np.zeros((C, S, M, N), np.int8), np.zeros((C, S, M, N), np.int16))
    stats = {"sigma": np.ones((C, S), np.float32), "n_leaves": np.ones((C, S), np.float32)}
    bart = BARTPosterior(trees=trees, leaf_values=np.zeros((C, S, M, N), np.float32), stats=stats, warmup_stats={},
                         grid=None, y_offset=0.0, y_scale=1.0, config=None)
    # 21 (is_split) + 21 (int8 features) + 42 (int16 cuts) + 84 (float32 leaves) + 2 x 4 (stats)
    assert bart.nbytes_per_draw == 176
    half = dataclasses.replace(bart, leaf_values=np.zeros((C, S, M, N), np.float16))
    assert half.nbytes_per_draw == 176 - 42
    one = Tree(np.zeros((C, S, N), bool), np.zeros((C, S, N), np.int8), np.zeros((C, S, N), np.int16))
    post = dataclasses.replace(cls_post, trees=one, stats={"log_lik": np.zeros((C, S), np.float32)})
    assert post.nbytes_per_draw == 7 + 7 + 14 + 4


def test_kept_trees_stay_narrow(cls_post):
    # 3 features and 119 cuts: the kernel records int8 features and int8 cuts; the posterior keeps them
    assert cls_post.trees.is_split.dtype == bool
    assert cls_post.trees.feature.dtype == np.int8 and cls_post.trees.cut.dtype == np.int8
    assert cls_post.nbytes_per_draw < 3 * 15 + 4 * len(cls_post.stats) * 2
