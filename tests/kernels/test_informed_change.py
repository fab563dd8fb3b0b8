"""The likelihood-informed change move (``proposal="cgm+informed"``): alone on one tree shape
against the exact posterior restricted to that shape, composed with CGM against the exact
posterior (also tempered), a planted error (the proposal's ratio dropped) that fails, and the
option's errors."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bdtree_jax as bd
from bdtree_jax.driver import run_chains
from bdtree_jax.exact import tv_distance
from bdtree_jax.kernels import cgm, informed_change
from bdtree_jax.kernels.base import SamplingAlgorithm
from bdtree_jax.tree import Tree, from_string

from helpers import chain_frequencies, exact_tv, run_toy

# 16 chains x 20,000 iterations as the perturb test: Monte Carlo TV ~0.015-0.025 on these
# supports, so 0.04 fails only on real bias.
CHAINS, ITERS, BURN = 16, 20_000, 500


def _shape(text: str) -> str:
    """A tree string's topology: every rule replaced by ``S``."""
    return re.sub(r"x\d+<=[^(]+", "S", text)


def _restricted(exact: dict, shape: str) -> dict:
    """The exact posterior restricted to the trees of one shape, renormalised."""
    kept = {s: p for s, p in exact.items() if _shape(s) == shape}
    total = sum(kept.values())
    return {s: p / total for s, p in kept.items()}


def _informed_only(tree, config, step=informed_change.step_with_uniforms):
    """The informed change alone, chains starting at ``tree`` (its shape never changes)."""
    tree = Tree(*(jnp.asarray(a) for a in tree))

    def kernel(u, state, data):
        state, accepted = step(u, state, data, config)
        return state, cgm.CGMInfo(jnp.int32(2), accepted, jnp.float32(0.0))

    return SamplingAlgorithm(lambda k, d: cgm.init(None, d, config, tree), kernel,
                             lambda s, i: cgm.trace(s, i), informed_change.draw)


@pytest.mark.parametrize("shape, task, min_leaf_size", [
    ("S(S(L,L),L)", "classification", 1),
    ("S(L,S(L,L))", "regression", 1),  # (min_leaf_size 2 leaves 5 trees of this shape, not all linked by one change)
])
def test_informed_change_alone_samples_the_posterior_of_its_shape(toy_problem, shape, task, min_leaf_size):
    """Chains start at the least probable tree of the shape and must reach the shape's posterior."""
    pb = toy_problem(task, 2, min_leaf_size)
    config = cgm.CGMConfig.from_prior(pb.prior)
    start = min(_restricted(pb.exact, shape).items(), key=lambda item: item[1])[0]
    tree = from_string(start, pb.grid.thresholds, pb.prior.max_depth)
    traces, _ = run_chains(_informed_only(tree, config), pb.data, key=jax.random.key(5), num_chains=CHAINS,
                           num_iterations=ITERS // 2, block_size=ITERS // 2)
    freqs = chain_frequencies(traces, pb.grid.thresholds, BURN)
    target = _restricted(pb.exact, _shape(start))
    assert set(freqs) <= set(target), "the move changed the tree's shape or left the prior's support"
    assert len(target) > 10 and tv_distance(freqs, target) <= 0.04, tv_distance(freqs, target)
    assert 0.3 < traces["accepted"][:, BURN:].mean() <= 1.0  # informed: most proposals are taken


def test_dropping_the_proposal_ratio_fails(toy_problem):
    """Planted error: the MH ratio without ``log w(r) - log w(r*)`` (the proposal taken as
    symmetric) over-weights the trees the proposal favours: TV well above the tolerance."""
    pb = toy_problem("classification", 2, 1)
    config = cgm.CGMConfig.from_prior(pb.prior)
    start = "x0<=3.5(x1<=4.5(L,L),L)"

    def no_q_ratio(u, state, data, cfg):
        original = informed_change.mh_log_ratio
        informed_change.mh_log_ratio = lambda dl, dp, q: original(dl, dp, 0.0)
        try:
            return informed_change.step_with_uniforms(u, state, data, cfg)
        finally:
            informed_change.mh_log_ratio = original

    tree = from_string(start, pb.grid.thresholds, pb.prior.max_depth)
    traces, _ = run_chains(_informed_only(tree, config, no_q_ratio), pb.data, key=jax.random.key(5),
                           num_chains=CHAINS, num_iterations=ITERS // 2, block_size=ITERS // 2)
    tv = tv_distance(chain_frequencies(traces, pb.grid.thresholds, BURN), _restricted(pb.exact, _shape(start)))
    assert tv > 0.08, tv


@pytest.mark.xla_optimized
@pytest.mark.parametrize("task, max_depth, min_leaf_size, n_temperatures", [
    ("classification", 2, 1, 1),
    pytest.param("regression", 2, 1, 3, marks=pytest.mark.slow),
    pytest.param("classification", 3, 2, 1, marks=pytest.mark.slow),
])
@pytest.mark.xla_optimized
def test_cgm_informed_matches_enumerated_posterior(toy_problem, task, max_depth, min_leaf_size, n_temperatures):
    pb = toy_problem(task, max_depth, min_leaf_size)
    algorithm = informed_change.with_informed_change(cgm.CGMConfig.from_prior(pb.prior))
    traces = run_toy(algorithm, pb, CHAINS, ITERS, n_temperatures)
    tv = exact_tv(traces, pb, BURN)
    assert tv <= 0.04, tv
    assert 0.2 < traces["informed_accepted"][:, BURN:].mean() < 1.0


def test_cgm_informed_through_sample_and_its_errors():
    X, y = bd.datasets.load("iris")
    post = bd.sample(X, y, method=bd.CGM(proposal="cgm+informed"), prior=bd.TreePrior(max_depth=3), num_warmup=50,
                     num_samples=50, num_chains=2)
    assert post.stats["log_lik"].shape == (2, 50) and np.all(np.isfinite(post.stats["log_lik"]))
    with pytest.raises(ValueError, match="does not apply with initial_tree"):
        bd.CGM(proposal="cgm+informed", initial_tree="x0<=1.0(L,L)")
    Xm = X.copy()
    Xm.iloc[0, 0] = np.nan
    with pytest.raises(ValueError, match="cgm\\+informed"):
        bd.sample(Xm, y, method=bd.CGM(proposal="cgm+informed"), num_samples=5)
    with pytest.raises(ValueError, match="valid_cuts"):
        bd.sample(X, y, method=bd.CGM(proposal="cgm+informed"), prior=bd.TreePrior(valid_cuts="ancestors"),
                  num_samples=5)
