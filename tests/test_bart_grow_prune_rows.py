"""BART's two-pass grow-prune sweep for leaf models whose rows are not ``[1, r, r**2]``
(kernels/bart_grow_prune.py ``rows_sweep``): log-linear BART's gamma leaves (rows ``[1, y, r]``)
and a variance forest's mean trees (weighted normal leaves, rows ``[1, w, w r, w r**2]``) against
backfitting tree by tree with the single-tree CGM kernel restricted to grow and prune
(``bart._kernel_sweep``), from the same state with the same draws.  The exact checks of the chains
themselves (enumeration, Geweke, with planted-error twins) are in test_bart_poisson.py and
test_bart_variance.py, whose "grow-prune" cases run this sweep."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bdtree_jax.kernels import bart, bart_grow_prune, bart_poisson, bart_variance
from bdtree_jax.problem.bart import build_bart_problem
from bdtree_jax.problem.bart_poisson import build_bart_poisson_problem


def _problem(model):
    """(BARTData, rows hook, leaf draw function, config) of a small problem: 120 rows, 6 trees."""
    rng = np.random.default_rng(5)
    X = rng.uniform(size=(120, 3))
    f = np.sin(3 * X[:, 0]) + X[:, 1]
    config = bart.BARTConfig(6, sample_sigma=False)
    if model == "poisson":
        p = build_bart_poisson_problem(X, rng.poisson(np.exp(f)), rng.uniform(0.5, 2.0, 120), n_trees=6)
        return p.data, functools.partial(bart_poisson._rows, p.data), bart_poisson.draw, config
    p = build_bart_problem(X, f + rng.normal(size=120) * (0.2 + X[:, 2]), n_trees=6)
    data = bart_variance.VarianceData(p.data, None)
    log_w = jnp.asarray(rng.normal(size=120), jnp.float32)
    rows = functools.partial(bart_variance._mean_rows, data, log_w)
    return bart_variance._forest_data(data, False), rows, bart.draw, config


@pytest.mark.parametrize("model", ["poisson", "weighted-normal"])
def test_rows_sweep_is_tree_by_tree_cgm(model):
    """12 sweeps: the same proposals accepted, the same trees, rows' leaves, row counts, bounds and
    log-priors exactly; leaf values and the trees' sum to float32 rounding."""
    data, rows, draw, config = _problem(model)

    @jax.jit
    def both(draws, s):
        fast = bart_grow_prune.rows_sweep(s, data, s.fit, draws.uniforms, draws.normals, config, rows)
        slow = bart._kernel_sweep(s, data, None, s.fit, None, draws.uniforms, draws.normals, draws.tree_keys, config,
                                  rows=rows)
        return fast, slow

    state = bart.init(None, data, config)
    accepted = 0
    for i in range(12):
        (total_a, values_a, changed_a, trees_a, can_a), (total_b, values_b, changed_b, trees_b) = both(
            draw(jax.random.key(10 + i), config), state)
        np.testing.assert_array_equal(changed_a, changed_b)
        for name in ("is_split", "feature", "cut"):
            np.testing.assert_array_equal(getattr(trees_a.tree, name), getattr(trees_b.tree, name))
        for name in ("leaf_id", "lo", "hi", "log_prior"):
            np.testing.assert_array_equal(getattr(trees_a, name), getattr(trees_b, name))
        np.testing.assert_array_equal(trees_a.stats[..., 0], trees_b.stats[..., 0])
        np.testing.assert_array_equal(can_a, bart._can_split(trees_b, data))
        np.testing.assert_allclose(values_a, values_b, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(total_a, total_b, rtol=1e-4, atol=1e-5)
        accepted += int(np.sum(changed_a))
        state = state._replace(trees=trees_a, leaf_values=values_a, fit=total_a, can_split=can_a)
    assert accepted > 10, accepted
