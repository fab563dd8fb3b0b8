"""SMC and Particle Gibbs with a categorical feature and a missing cell against the exact posterior
of :func:`bdtree_jax.exact.categorical.enumerate_mixed_trees` (the 7 rows of
tests/test_categorical_cgm.py, built there as kernel data: codes, level masks, the missing
code), both proposals; the reference particle's comparison over every rule field; the methods'
routing and refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

from bdtree_jax.driver import run_chains
from bdtree_jax.exact import tree_frequencies
from bdtree_jax.exact.categorical import enumerate_mixed_trees
from bdtree_jax.features import SUPPORTS_CATEGORICAL
from bdtree_jax.kernels import pg, smc
from bdtree_jax.kernels.smc import check_data, n_codes
from bdtree_jax.priors import TreePrior
from bdtree_jax.tree import from_string, to_string

from test_categorical_cgm import CATEGORICAL, LEVELS, LIK, X, Y, _exact, _frequencies, _kernel_data, _tv

#: beta = 2 keeps the posterior's Monte Carlo floor low (TV about 0.023 for 60,000 iid draws
#: over its 1,089 / 1,397 trees) so a 0.04 bound has room for the chains' autocorrelation.
PRIOR = dict(alpha=0.95, beta=2.0, max_depth=2)


def _log_z(prior) -> float:
    trees = enumerate_mixed_trees(X, LIK.point_stats(Y), prior, LIK, categorical=CATEGORICAL)
    return float(logsumexp([lp + ll for _, lp, ll in trees]))


def _exact_tempered(prior, beta: float) -> dict:
    """The exact law ``p(T) L(T)**beta`` over the enumerated trees."""
    trees = enumerate_mixed_trees(X, LIK.point_stats(Y), prior, LIK, categorical=CATEGORICAL)
    log_post = np.array([lp + beta * ll for _, lp, ll in trees])
    return {s: float(p) for (s, _, _), p in zip(trees, np.exp(log_post - logsumexp(log_post)))}


@pytest.mark.xla_optimized
@pytest.mark.parametrize("valid_cuts,proposal,beta", [
    pytest.param("data", "prior", 1.0, marks=pytest.mark.slow),
    pytest.param("ancestors", "prior", 1.0, marks=pytest.mark.slow), ("data", "posterior", 0.5)])
def test_pg_matches_exact_posterior(valid_cuts, proposal, beta):
    """Particle Gibbs (10 particles; level sets, missing bits and the children's availability
    from the categorical rule prior): every visited tree is in the exact support and the visit
    frequencies of 2 x 30,000 sweeps are within TV 0.04 of the exact ``p(T) L(T)**beta`` (beta
    0.5: a tempered rung, whose invariance is what tempering's swaps need; measured 0.026-0.028
    at beta 1, the Monte Carlo floor of 60,000 iid draws being about 0.023)."""
    prior = TreePrior(valid_cuts=valid_cuts, **PRIOR)
    grid, data = _kernel_data(X, prior)
    config = pg.PGConfig(2, 1, 10, proposal, n_bins=n_codes(grid))
    algorithm = pg.particle_gibbs(config)
    algorithm = algorithm._replace(init=lambda key, data: pg.init(key, data, config, beta=beta))
    traces, _ = run_chains(algorithm, data, key=jax.random.key(5), num_chains=2, num_iterations=30_000,
                           progress=False)
    sampled, exact = _frequencies(traces, grid.thresholds), _exact_tempered(prior, beta)
    assert set(sampled) <= set(exact)
    assert _tv(sampled, exact) < 0.04
    roots = {s.split("|")[0] for s in sampled if s.startswith("x1in")}
    assert roots == {"x1in{1,2}", "x1in{1}", "x1in{2}"}


@pytest.mark.parametrize("proposal,runs", [("prior", 20_000), ("posterior", 8_000)])
def test_smc_evidence_is_unbiased(proposal, runs):
    """Runs of 4 particles resampling after every stage: the mean of Z_hat / Z is within 4
    standard errors of 1, the standard error below 0.5 % (a rule-prior factor the proposal
    misses -- the level partitions' count, the missing bit's 1/2, a child's availability --
    moves it by far more)."""
    prior = TreePrior(**PRIOR)
    grid, data = _kernel_data(X, prior)
    config = smc.SMCConfig(2, 1, num_particles=4, proposal=proposal, ess_threshold=1.0)
    run = jax.jit(jax.vmap(lambda k: smc.run(k, data, config, n_codes(grid))))
    out = jax.device_get(run(jax.random.split(jax.random.key(7), runs)))
    ratio = np.exp(np.asarray(out.log_evidence, np.float64) - _log_z(prior))
    mean, se = ratio.mean(), ratio.std(ddof=1) / np.sqrt(len(ratio))
    assert se < 0.005
    assert abs(mean - 1.0) < 4 * se, (mean, se)


def test_smc_weighted_particles_match_exact_posterior():
    """One-step-optimal proposal, 48 runs x 1,000 particles: the weighted final particles are
    in the exact support and within TV 0.04 of the exact posterior."""
    prior = TreePrior(**PRIOR)
    grid, data = _kernel_data(X, prior)
    config = smc.SMCConfig(2, 1, num_particles=1000, proposal="posterior", ess_threshold=1.0)
    run = jax.jit(jax.vmap(lambda k: smc.run(k, data, config, n_codes(grid))))
    out = jax.device_get(run(jax.random.split(jax.random.key(11), 48)))
    lw = np.asarray(out.log_weight, np.float64)
    freqs = tree_frequencies(out.trees, grid.thresholds, weights=np.exp(lw - logsumexp(lw, axis=1, keepdims=True)),
                             levels=LEVELS)
    exact = _exact(prior)
    assert set(freqs) <= set(exact)
    assert _tv(freqs, exact) < 0.04


def test_reference_compares_every_rule_field_and_replays():
    """``_same_tree`` tells trees apart by their missing bit or level set alone; a sweep of one
    particle returns the reference (its rule fields and log-likelihood) unchanged."""
    prior = TreePrior(**PRIOR)
    grid, data = _kernel_data(X, prior)
    parse = lambda s: jax.tree.map(jnp.asarray, from_string(s, grid.thresholds, 2, grid.level_count))  # noqa: E731
    a = parse("x1in{1,2}|NA=L(L,x0<=2.5|NA=R(L,L))")
    assert bool(pg._same_tree(a, a))
    for other in ("x1in{1,2}|NA=L(L,x0<=2.5|NA=L(L,L))", "x1in{2}|NA=L(L,x0<=2.5|NA=R(L,L))"):
        assert not bool(pg._same_tree(a, parse(other)))
    config = pg.PGConfig(2, 1, 1, "prior", n_bins=n_codes(grid))
    state = pg.init(None, data, config, tree=a)
    new, info = jax.jit(lambda k, s: pg.step(k, s, data, config))(jax.random.key(0), state)
    assert not bool(info.accepted)
    assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(new.tree), jax.tree.leaves(a)))
    assert np.isclose(float(new.log_lik), float(state.log_lik))


def test_posterior_proposal_refuses_more_than_eight_levels():
    """The one-step-optimal proposal enumerates level partitions up to 8 levels; a 9-level
    column is a ValueError naming it and proposal='prior', raised before compiling."""
    prior = TreePrior(**PRIOR)
    grid, data = _kernel_data(X, prior)
    grid.level_count = np.array([0, 9])
    with pytest.raises(ValueError, match=r"column 'color' has 9.*proposal='prior'"):
        check_data(data, grid, "posterior", "cgm", ["x", "color"], "method='pg'")
    check_data(data, grid, "prior", "cgm", ["x", "color"], "method='pg'")


def _table():
    """The 7 rows as a DataFrame: x0 with its missing cell, x1 a category column."""
    import pandas as pd

    return pd.DataFrame({"x0": X[:, 0], "color": pd.Categorical.from_codes(X[:, 1].astype(int), ["a", "b", "c"])})


@pytest.mark.skipif(not {"smc", "pg"} <= set(SUPPORTS_CATEGORICAL),
                    reason="methods 'smc', 'pg' not yet in features.SUPPORTS_CATEGORICAL")
def test_sample_routes_the_table_to_the_particle_kernels():
    """bd.sample on the DataFrame itself: SMC's and PG's draws are trees with level sets and
    missing bits, in the exact support, whose log prior and likelihood are the enumerator's."""
    import bdtree_jax as bd

    prior = TreePrior(**PRIOR)
    ref = {s: (lp, ll) for s, lp, ll in enumerate_mixed_trees(X, LIK.point_stats(Y), prior, LIK,
                                                             categorical=CATEGORICAL)}
    for method in (bd.SMC(num_particles=50, proposal="posterior"), bd.PG(num_particles=5)):
        post = bd.sample(_table(), Y, method=method, task="regression", prior=prior, likelihood=LIK, num_warmup=20,
                         num_samples=40, num_chains=1)
        assert post.trees.nan_left is not None and post.trees.levels_left is not None
        for i in range(40):
            s = to_string(jax.tree.map(lambda a: np.asarray(a)[0, i], post.trees), post.grid.thresholds, LEVELS)
            assert s in ref, s
            np.testing.assert_allclose([post.stats["log_prior"][0, i], post.stats["log_lik"][0, i]], ref[s], atol=1e-4)


@pytest.mark.skipif(not {"smc", "pg"} <= set(SUPPORTS_CATEGORICAL),
                    reason="methods 'smc', 'pg' not yet in features.SUPPORTS_CATEGORICAL")
def test_sample_refuses_nine_levels_for_the_posterior_proposal():
    import pandas as pd

    import bdtree_jax as bd

    df = pd.DataFrame({"x0": np.arange(18.0), "shade": pd.Categorical(list("abcdefghi") * 2)})
    for method in (bd.SMC(proposal="posterior"), bd.PG(proposal="posterior")):
        with pytest.raises(ValueError, match=r"column 'shade' has 9.*proposal='prior'"):
            bd.sample(df, np.arange(18) % 2, method=method, num_samples=5, num_chains=1)
