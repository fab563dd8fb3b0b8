"""BART's general-rule tree step with local updates (bdtree_jax.kernels.bart_moves) is
the chain of cgm.step_with_uniforms: from the same draws it takes the same decisions and gives the same
trees, leaves and leaf stats.  (That its draws follow the exact posterior is
tests/test_categorical_cgm.py::test_one_bart_tree_matches_exact_posterior, which runs BART's
sweep with sequential chains, hence this step.)"""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bdtree_jax.kernels import bart_moves, cgm
from bdtree_jax.likelihoods import BARTLeafNormal, NormalMeanShift
from bdtree_jax.priors import TreePrior, make_tree_data
from bdtree_jax.tree import MISSING_CODE, leaf_nodes

GROW_PRUNE = (0.5, 0.5, 0.0, 0.0)


def _data(n=300, seed=0):
    """n rows: x0 ordered with missing cells, x1 categorical (5 levels), x2 ordered; y depends on all."""
    rng = np.random.default_rng(seed)
    x0 = rng.normal(size=n)
    x0[rng.random(n) < 0.15] = np.nan
    x1 = rng.integers(0, 5, n)
    x2 = rng.integers(0, 8, n).astype(float)
    y = np.where(np.isin(x1, [1, 3]), 1.0, -0.5) + np.nan_to_num(x0) + 0.3 * x2 + 0.3 * rng.normal(size=n)
    codes = np.zeros((n, 3), np.int32)
    thresholds = np.full((3, 16), np.inf)
    n_cuts = np.zeros(3, int)
    for j, x in ((0, x0), (2, x2)):
        values = np.unique(x[~np.isnan(x)])
        cuts = ((values[:-1] + values[1:]) / 2)[:: max(1, (len(values) - 1) // 15)][:16]
        thresholds[j, : len(cuts)] = cuts
        n_cuts[j] = len(cuts)
        codes[:, j] = np.where(np.isnan(x), MISSING_CODE, np.searchsorted(cuts, np.nan_to_num(x), side="left"))
    codes[:, 1] = x1
    grid = SimpleNamespace(thresholds=thresholds, n_cuts=n_cuts, widths=np.ones_like(thresholds),
                           level_count=np.array([0, 5, 0]), missing_code=MISSING_CODE)
    prior = TreePrior(alpha=0.95, beta=1.0, max_depth=4, valid_cuts="ancestors")
    lik = NormalMeanShift(nu=3.0, lam=1.0, a=1.0 / 3, mu_bar=0.0)
    data = make_tree_data(codes, y, prior, lik, grid=grid)
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    point_stats = np.stack([np.ones(n), y, y * y], axis=1).astype(np.float32)
    return data._replace(point_stats=jnp.asarray(point_stats), likelihood=BARTLeafNormal(f32(0.3), f32(0.5)))


@pytest.mark.parametrize("move_probs", [GROW_PRUNE, cgm.CGMConfig(4).move_probs])
def test_local_step_matches_the_cgm_step(move_probs):
    data = _data()
    config = cgm.CGMConfig(4, 1, move_probs, general_rules=True)
    state = cgm.init(None, data, config)

    @jax.jit
    def both(key, old, new):
        draws = cgm.draw(key, general_rules=True)
        a, info_a = cgm.step_with_uniforms(draws, old, data, config)
        b, info_b = bart_moves.step(draws, new, data, config)
        return a, b, info_a.accepted, info_b.accepted

    old = new = state
    accepted = 0
    for i in range(300):
        old, new, acc_old, acc_new = both(jax.random.key(i), old, new)
        assert bool(acc_old) == bool(acc_new), i
        accepted += int(acc_old)
        for a, b in zip(jax.tree.leaves(old.tree), jax.tree.leaves(new.tree)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_array_equal(np.asarray(old.leaf_id), np.asarray(new.leaf_id))
        leaves = np.asarray(leaf_nodes(old.tree))
        np.testing.assert_array_equal(np.asarray(old.stats)[leaves], np.asarray(new.stats)[leaves])
        np.testing.assert_allclose(np.asarray(old.stats), np.asarray(new.stats), rtol=1e-5, atol=1e-3)
        for f in ("log_lik", "log_prior", "lo", "hi", "levels"):
            np.testing.assert_array_equal(np.asarray(getattr(old, f)), np.asarray(getattr(new, f)), err_msg=f)
    assert accepted > 20  # the chain moved
    assert int(leaf_nodes(old.tree).sum()) > 1 or accepted > 0
