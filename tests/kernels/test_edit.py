"""The EDITTREE prior sampler (:mod:`bdtree_jax.kernels.edit`) against the exact edit-prior
posterior (:func:`bdtree_jax.exact.enumerate_edit_posterior`), and its input checks in
:func:`bdtree_jax.sample`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bdtree_jax as bd
from bdtree_jax.exact import enumerate_edit_posterior, tv_distance
from bdtree_jax.kernels import edit, tempering
from bdtree_jax.driver import run_chains
from bdtree_jax.tree import Tree, from_string

from helpers import chain_frequencies

T0, MEAN_EDITS, MAX_EDITS = "x0<=3.5(L,L)", 1.5, 5
CHAINS, ITERS, BURN = 16, 20_000, 500


@pytest.mark.xla_optimized
@pytest.mark.parametrize("regrow_prob,n_temperatures", [(0.0, 1), (1.0, 1), pytest.param(0.5, 1, marks=pytest.mark.slow),
                                                           pytest.param(0.5, 3, marks=pytest.mark.slow)])
def test_edit_prior_chain_matches_exact_posterior(toy_problem, regrow_prob, n_temperatures):
    """Local append/delete moves, backtracking regrow moves, their mix and the tempered mix all
    sample the exact edit-prior posterior over trees (TV <= 0.04; Monte Carlo TV ~0.01-0.02)."""
    p = toy_problem("classification", 2)
    data = edit.EditData(p.data, Tree(*(jnp.asarray(a) for a in from_string(T0, p.grid.thresholds, 2))))
    config = edit.EditConfig(2, 1, mean_edits=MEAN_EDITS, max_edits=MAX_EDITS, regrow_prob=regrow_prob)
    algorithm = edit.edit_prior(config)
    if n_temperatures > 1:
        algorithm = tempering.tempered(algorithm, tempering.ladder(n_temperatures, 0.5))
    traces, _ = run_chains(algorithm, data, key=jax.random.key(3), num_chains=CHAINS, num_iterations=ITERS,
                           block_size=ITERS)
    exact = enumerate_edit_posterior(p.X, p.likelihood.point_stats(p.y), p.prior, p.likelihood, T0,
                                     mean_edits=MEAN_EDITS, max_edits=MAX_EDITS)
    freqs = chain_frequencies(traces, p.grid.thresholds, BURN)
    assert set(freqs) <= {k for k, v in exact.items() if v > 0}
    assert tv_distance(freqs, exact) <= 0.04
    # the edit count is a real random variable here: both ends of its range are visited
    k = np.asarray(traces["n_edits"])
    assert k.min() == 0 and k.max() >= 3


def test_sample_with_initial_tree_stays_near_it(toy_data):
    """With few edits the posterior concentrates near the initial tree: its mass is larger than
    under the plain CGM98 prior (same data), and the draws' edit counts are recorded."""
    X, y, _ = toy_data
    kw = dict(method="cgm", max_depth=2, num_warmup=200, num_samples=3000, num_chains=2, seed=0, progress=False)
    near = bd.sample(X, y, initial_tree=T0, mean_edits=0.3, max_edits=4, **kw)
    plain = bd.sample(X, y, **kw)
    assert near.info["edit"]["mean_edits"] == 0.3
    share = lambda post: np.mean([s == T0 for s in post.tree_strings()])  # noqa: E731
    assert share(near) > share(plain) + 0.2


def test_initial_tree_errors(toy_data):
    X, y, _ = toy_data
    kw = dict(method="cgm", max_depth=2, num_warmup=1, num_samples=1, num_chains=1, progress=False)
    with pytest.raises(ValueError, match="initial_tree is deeper than max_depth"):
        from sklearn.tree import DecisionTreeClassifier

        bd.sample(X, y, initial_tree=DecisionTreeClassifier(random_state=0).fit(X, [0, 1, 2, 3, 4, 5]), **kw)
    with pytest.raises(ValueError, match="outside the prior's support"):
        bd.sample(X, y, initial_tree="x0<=1.5(L,L)", **dict(kw, min_leaf_size=2))
    with pytest.raises(ValueError, match="splits inside one of the box_constraints"):
        bd.sample(X, y, initial_tree=T0, box_constraints=[{"x0": (3.0, 4.0)}], **kw)
    with pytest.raises(ValueError, match="mean_edits"):
        bd.sample(X, y, initial_tree=T0, mean_edits=-1.0, **kw)
    with pytest.raises(ValueError, match="initial_tree must be"):
        bd.sample(X, y, initial_tree=42, **kw)
