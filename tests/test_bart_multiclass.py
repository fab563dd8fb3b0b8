"""Multinomial logistic BART (kernels/bart_multiclass.py, problem/bart_multiclass.py): Geweke's
"getting it right" for the data augmentation and the K counts sweeps (3 classes, 2 trees per
class), with a planted-error twin that fails (the latent ``phi`` drawn with the wrong rate)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bdtree_jax.kernels import bart_multiclass as bm
from bdtree_jax.likelihoods import BARTLeafPoissonGamma
from bdtree_jax.problem.bart_multiclass import build_bart_multiclass_problem

# 10 rows, 2 features, K = 3 classes of M = 2 trees each, depth <= 3 (beta 1: a few leaves),
# lambda ~ Gamma(2, 2), offsets log(0.5, 0.3, 0.2)
GEWEKE_NAMES = ("mean leaves", "P(y=0|x_0)", "P(y=0|x_0)^2", "P(y=2|x_5)", "share of class 0",
                "share of class 1", "sum log lam", "(sum log lam)^2")
G_N, G_K = 10, 3


def _geweke_problem(sampler):
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(G_N, 2)).round(3)
    y = np.arange(G_N) % G_K
    p = build_bart_multiclass_problem(X, y, n_trees=2, max_depth=3, alpha=0.95, beta=1.0, valid_cuts="data",
                                      max_cuts=None)
    td = p.data.tree_data._replace(likelihood=BARTLeafPoissonGamma(jnp.float32(2.0), jnp.float32(2.0)))
    data = p.data._replace(tree_data=td, offsets=jnp.log(jnp.asarray([0.5, 0.3, 0.2], jnp.float32)))
    return data, bm.multiclass_config(2, max_depth=3, tree_sampler=sampler, num_particles=5, incremental=False)


def _geweke_stats(state, data):
    probs = bm.class_probs(data.offsets, state.fit)
    s = bm.leaf_log_lambda_sum(state)
    p0 = probs[0, 0]
    return jnp.stack([bm.n_leaves_mean(state), p0, p0 * p0, probs[2, 5], jnp.mean(data.y == 0),
                      jnp.mean(data.y == 1), s, s * s])


def geweke_z(sampler, chains, iters, n_prior, seed=0, batches=10):
    """z-scores of successive-conditional means minus forward prior-draw means (batch-means
    standard errors, ``batches`` per chain)."""
    data, config = _geweke_problem(sampler)

    def chain(key):
        k0, k1, k2 = jax.random.split(key, 3)
        state = bm.prior_draw(k0, data, config)
        d0 = data._replace(y=bm.simulate_y(k1, state, data))

        def body(carry, k):
            state, d, _ = bm.geweke_step(k, *carry, config)
            return (state, d), _geweke_stats(state, d)

        return jax.lax.scan(body, (state, d0), jax.random.split(k2, iters))[1]

    def forward(key):
        k0, k1 = jax.random.split(key)
        state = bm.prior_draw(k0, data, config)
        return _geweke_stats(state, data._replace(y=bm.simulate_y(k1, state, data)))

    k_chains, k_prior = jax.random.split(jax.random.key(seed))
    sc = np.asarray(jax.jit(jax.vmap(chain))(jax.random.split(k_chains, chains)), np.float64)
    mc = np.asarray(jax.jit(jax.vmap(forward))(jax.random.split(k_prior, n_prior)), np.float64)
    b = sc.reshape(chains * batches, iters // batches, -1).mean(1)
    se = np.sqrt(b.var(0, ddof=1) / len(b) + mc.var(0, ddof=1) / len(mc))
    return (sc.mean((0, 1)) - mc.mean(0)) / se


def _report(z):
    return ", ".join(f"{n}: z={v:+.2f}" for n, v in zip(GEWEKE_NAMES, z))


def _log_phi_wrong_rate(key, state, data):
    """Planted error: ``phi ~ Gamma(1, rate)`` with the rate missing the class offsets."""
    e = jax.random.exponential(key, data.y.shape, jnp.float32)
    return jnp.log(e) - jax.nn.logsumexp(state.fit, axis=0)


def test_geweke_getting_it_right_short():
    """The default job's Geweke check ("grow-prune"): 8 chains x 500 sweeps vs 20,000 forward
    draws, every |z| < 4 (observed max |z| 1.86)."""
    z = geweke_z("grow-prune", 8, 500, 20_000)
    print(_report(z))
    assert np.all(np.abs(z) < 4.0), _report(z)


@pytest.mark.slow
def test_geweke_planted_error_fails():
    """The short check with ``phi`` drawn at the wrong rate (offsets left out) fails it (by far:
    z(sum log lam) = +68.4; at 16 chains x 1,000 sweeps +132)."""
    saved, bm.draw_log_phi = bm.draw_log_phi, _log_phi_wrong_rate
    try:
        z = geweke_z("grow-prune", 8, 500, 20_000, seed=1)
    finally:
        bm.draw_log_phi = saved
    print("planted", _report(z))
    assert np.max(np.abs(z)) >= 4.0, _report(z)


@pytest.mark.xla_optimized
@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["cgm", "pg"])
def test_geweke_getting_it_right(sampler):
    """32 chains x 2,500 sweeps from prior draws vs 200,000 forward draws, every |z| < 4 (observed
    max |z|: cgm 1.64, pg 0.82).  CGM's moves include grow and prune; the grow-prune sampler's
    batched-classes twin is below."""
    z = geweke_z(sampler, 32, 2500, 200_000)
    print(sampler, _report(z))
    assert np.all(np.abs(z) < 4.0), _report(z)


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_geweke_classes_batched():
    """The same with the classes' sweeps batched by ``jax.vmap`` (``CLASS_LOOP = "vmap"``): 16 chains
    x 2,000 sweeps vs 100,000 forward draws, every |z| < 4 (observed max |z| 2.39)."""
    saved, bm.CLASS_LOOP = bm.CLASS_LOOP, "vmap"
    try:
        z = geweke_z("grow-prune", 16, 2000, 100_000, seed=2)
    finally:
        bm.CLASS_LOOP = saved
    print("vmap", _report(z))
    assert np.all(np.abs(z) < 4.0), _report(z)
