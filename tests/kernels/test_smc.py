"""Top-down SMC against exact enumeration: evidence unbiasedness, the weighted particles'
posterior, the no-resampling identity, resampling schemes, the sample() API and its errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

import bdtree_jax as bd
from bdtree_jax.exact import tree_frequencies, tv_distance
from bdtree_jax.kernels import smc
from bdtree_jax.tree import Tree  # noqa: F401

from helpers import particle_frequencies, smc_runs


def _problem(toy_problem, task, max_depth, min_leaf_size=1):
    p = toy_problem(task, max_depth, min_leaf_size)
    return p.data, p.grid, p.exact, p.log_z


def _runs(data, grid, config, n_runs, seed=0):
    return smc_runs(data, config, int(grid.n_cuts.max()) + 1, n_runs, seed)


@pytest.mark.parametrize(
    "task,proposal,ess_threshold,grow,n_islands",
    [("classification", "prior", 0.0, "next", 1), ("classification", "prior", 1.0, "next", 1),
     ("classification", "posterior", 0.0, "next", 1), ("classification", "posterior", 1.0, "next", 1),
     ("regression", "posterior", 1.0, "next", 1), ("classification", "prior", 1.0, "layer", 1),
     ("regression", "posterior", 1.0, "layer", 2), ("classification", "prior", 1.0, "next", 2)],
)
def test_evidence_estimate_is_unbiased(toy_problem, task, proposal, ess_threshold, grow, n_islands):
    """E[Z_hat] = Z for a fixed resampling schedule (never / after every stage), node-wise and
    layer-wise, with one or two islands: 20,000 runs of 4 particles; the mean of Z_hat / Z must
    be within 4 standard errors of 1 (and the standard error below 1 %, so the check has power:
    a missing prior or proposal factor moves the mean by far more)."""
    data, grid, _, log_z = _problem(toy_problem, task, max_depth=2)
    config = smc.SMCConfig(2, 1, num_particles=4, proposal=proposal, ess_threshold=ess_threshold, grow=grow,
                           n_islands=n_islands)
    out = _runs(data, grid, config, 20_000)
    ratio = np.exp(np.asarray(out.log_evidence, np.float64) - log_z)
    mean, se = ratio.mean(), ratio.std(ddof=1) / np.sqrt(len(ratio))
    assert se < 0.01
    assert abs(mean - 1.0) < 4 * se, (mean, se)
    if ess_threshold == 1.0:
        assert np.all(np.asarray(out.n_resampled) == np.asarray(out.n_stages) - 1)
        if grow == "layer":  # one stage per depth level that can split
            assert np.asarray(out.n_stages).max() == 2
    else:
        assert np.all(np.asarray(out.n_resampled) == 0)


@pytest.mark.parametrize(
    "task,max_depth,min_leaf_size,proposal,ess_threshold,grow,n_islands",
    [("classification", 2, 1, "prior", 0.9, "next", 1), ("classification", 3, 2, "posterior", 1.0, "next", 1),
     ("regression", 2, 1, "posterior", 1.0, "next", 1), ("classification", 2, 1, "prior", 0.9, "layer", 4)],
)
def test_weighted_particles_match_exact_posterior(toy_problem, task, max_depth, min_leaf_size, proposal, ess_threshold,
                                                  grow, n_islands):
    """64 runs x 1000 particles, resampling adaptively (prior proposal: ESS <= 0.9; the
    posterior proposal's weights stay near-even, so it resamples after every stage): the weighted final
    particles are within TV 0.04 of the enumerated posterior.  (Monte Carlo error alone: TV 0.023
    on the 256-tree supports, 0.007 on the 17-tree one, and it halves with 8x the particles.)"""
    data, grid, exact, _ = _problem(toy_problem, task, max_depth, min_leaf_size)
    config = smc.SMCConfig(max_depth, min_leaf_size, num_particles=1000, proposal=proposal, ess_threshold=ess_threshold,
                           grow=grow, n_islands=n_islands)
    out = _runs(data, grid, config, 64, seed=3)
    assert np.asarray(out.n_resampled).sum() > 0
    freqs = particle_frequencies(out, grid.thresholds)
    assert set(freqs) <= set(exact), "a particle left the prior's support"
    assert tv_distance(freqs, exact) <= 0.04


def test_no_resampling_identity(toy_problem):
    """Prior proposal, never resampling: each final log weight + log P is its tree's log
    likelihood (the identity of docs/theory/smc-pg.md), and every particle has finished."""
    data, grid, _, _ = _problem(toy_problem, "classification", max_depth=3)
    config = smc.SMCConfig(3, 1, num_particles=64, proposal="prior", ess_threshold=0.0)
    out = _runs(data, grid, config, 4)
    np.testing.assert_allclose(np.asarray(out.log_weight) + np.log(64), np.asarray(out.log_lik), atol=1e-4)
    # the run stops right after the last decision: as many stages as the deepest particle's
    # splittable nodes (no empty stage at the end)
    n_decided = [max(_n_decisions(t, data) for t in zip(*(np.asarray(a)[r] for a in out.trees))) for r in range(4)]
    np.testing.assert_array_equal(np.asarray(out.n_stages), n_decided)
    # the particles differ (the identity is not trivially true of one repeated tree)
    assert len({tuple(r) for r in np.asarray(out.trees.is_split).reshape(-1, 15)}) > 3


@pytest.mark.parametrize("split_prior,min_leaf_size,max_depth", [("uniform", 1, 2), ("range", 2, 3)])
def test_prior_normalised_and_simulated(toy_problem, split_prior, min_leaf_size, max_depth):
    """The enumerated prior sums to 1, and the prior proposal without
    resampling draws trees from the prior (the particles, unweighted, are iid prior draws):
    64 runs x 1000 particles within TV 0.035 of the enumerated prior (the Monte Carlo floor of
    64,000 iid draws: 0.023 on the 256-tree support, 0.008 on the 17-tree one)."""
    p = toy_problem("classification", max_depth, min_leaf_size, split_prior=split_prior)
    log_prior = np.array([lp for lp, _ in p.trees.values()])
    assert abs(logsumexp(log_prior)) < 1e-6
    prior = {s: float(np.exp(lp)) for s, (lp, _) in p.trees.items()}
    config = smc.SMCConfig(max_depth, min_leaf_size, num_particles=1000, proposal="prior", ess_threshold=0.0)
    out = _runs(p.data, p.grid, config, 64, seed=11)
    freqs = tree_frequencies(out.trees, p.grid.thresholds)
    assert set(freqs) <= set(prior)
    assert tv_distance(freqs, prior) <= 0.035


def _n_decisions(tree, data) -> int:
    """Nodes a particle had to decide to build ``tree``: its splittable active nodes."""
    from bdtree_jax.kernels import cgm
    from bdtree_jax.priors import splittable
    from bdtree_jax.tree import active_nodes

    st = cgm.init(None, data, cgm.CGMConfig(3), tree=Tree(*(jnp.asarray(a) for a in tree)))
    return int(jnp.sum(active_nodes(st.tree) & (st.tree.is_split | splittable(st.lo, st.hi, data.split_prob))))


def test_ess_threshold_is_data_of_one_program(toy_problem):
    """Configurations that differ only in ess_threshold share one executable, and the threshold
    passed as data gives the draws of the threshold compiled in (bit for bit) for adaptive (0.9)
    and always (1, its own branch) resampling; never (0) resamples nothing."""
    data, grid, _, _ = _problem(toy_problem, "classification", max_depth=2)
    n_bins = int(grid.n_cuts.max()) + 1
    configs = [smc.SMCConfig(2, 1, num_particles=16, ess_threshold=t) for t in (0.0, 0.9, 1.0)]
    assert len({id(smc.threshold_run(c, n_bins)) for c in configs}) == 1
    key = jax.random.key(4)
    for config in configs:
        shared = smc.compiled_run(config, n_bins)(key, data)
        assert (int(shared.n_resampled) > 0) == (config.ess_threshold > 0), config
        if config.ess_threshold > 0:
            static = jax.jit(lambda k, d, c=config: smc.run(k, d, c, n_bins))(key, data)  # threshold compiled in
            for a, b in zip(jax.tree.leaves(shared), jax.tree.leaves(static)):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert int(shared.n_resampled) == int(shared.n_stages) - 1  # threshold 1: before every stage but the first


def test_resampling_schemes():
    """Both schemes draw index i with expected count P * W_i; systematic keeps every count within
    one of P * W_i."""
    P = 50
    log_w = jnp.log(jax.random.dirichlet(jax.random.key(0), jnp.ones(P)))
    expected = np.exp(np.asarray(log_w, np.float64) - logsumexp(np.asarray(log_w, np.float64))) * P
    for method in smc.RESAMPLING:
        draw = jax.jit(jax.vmap(lambda k: smc.resample_indices(jax.random.uniform(k, (P,)), log_w, method)))
        idx = np.asarray(draw(jax.random.split(jax.random.key(1), 20_000)))
        counts = np.stack([np.bincount(r, minlength=P) for r in idx])
        se = counts.std(0, ddof=1) / np.sqrt(len(counts)) + 1e-3
        assert np.all(np.abs(counts.mean(0) - expected) < 5 * se + 1e-3), method
        if method == "systematic":
            assert np.all(counts >= np.floor(expected) - 1e-9) and np.all(counts <= np.ceil(expected) + 1e-9)


def test_sample_smc_api_and_reproducibility():
    X, y = bd.datasets.load("iris")
    kw = dict(method="smc", max_depth=3, num_particles=64, num_samples=50, seed=7, proposal="posterior")
    one = bd.sample(X, y, num_chains=1, **kw)
    two = bd.sample(X, y, num_chains=2, **kw)
    # run c depends on (seed, c) only
    np.testing.assert_array_equal(one.trees.feature[0], two.trees.feature[0])
    np.testing.assert_allclose(one.run_log_evidence[0], two.run_log_evidence[0])
    assert isinstance(two, bd.posterior.SMCPosterior)
    assert two.particles.is_split.shape[:2] == (2, 64)
    np.testing.assert_allclose(two.particle_weights().sum(1), 1.0, rtol=1e-6)
    assert np.isfinite(two.log_evidence)
    # every draw is one of its run's particles, with that particle's log likelihood
    for c in range(2):
        parts = {tuple(r) for r in np.asarray(two.particles.feature[c] * two.particles.is_split[c])}
        assert {tuple(r) for r in np.asarray(two.trees.feature[c] * two.trees.is_split[c])} <= parts
    assert (bd.posterior.Posterior.predict(two, X) == y).mean() > 0.9


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(method="smc", num_particles=0), "num_particles must be an integer >= 1"),
        (dict(method="smc", proposal="cgm"), "proposal must be one of"),
        (dict(method="smc", ess_threshold=1.5), "ess_threshold must be a number in"),
        (dict(method="smc", resampling="stratified"), "resampling must be one of"),
        (dict(method="smc", grow="depth"), "grow must be one of"),
        (dict(method="smc", num_particles=10, num_islands=3), "num_islands must be an integer >= 1 dividing"),
        (dict(method="cgm", grow="layer"), "grow is an option of method='smc'"),
        (dict(method="smc", num_temperatures=3), "num_temperatures is an option of method='cgm'"),
        (dict(method="smc", box_constraints=[{0: (None, 1.0)}]), "box_constraints is an option of method='cgm'"),
        (dict(method="smc", move_probs=(0.5, 0.5, 0, 0)), "move_probs is an option of method='cgm'"),
        (dict(method="cgm", num_particles=10), "num_particles is an option of method='smc'"),
        (dict(method="cgm", proposal="prior"), "proposal must be one of"),
    ],
)
def test_smc_option_errors(kwargs, match):
    X, y = bd.datasets.load("iris")
    with pytest.raises(ValueError, match=match):
        bd.sample(X, y, num_samples=5, num_chains=1, **kwargs)
