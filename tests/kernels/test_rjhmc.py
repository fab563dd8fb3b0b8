"""RJHMC-Tree: exactness of the "fast" schedule against the posterior over topologies obtained by
numerical integration, one compilation per run, the h schedule, and the sample()/estimator path."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bdtree_jax as bd
from bdtree_jax.exact import dm_log_lik, soft_topology_posterior, topology_string, tv_distance
from bdtree_jax.kernels.base import SamplingAlgorithm
from bdtree_jax.kernels.rjhmc import RJHMCConfig, rjhmc
from bdtree_jax.driver import run_chains, trace_count
from bdtree_jax.soft import annealed_h, annealing_window

from helpers import topology_frequencies

H, ALPHA, BETA = 0.1, 0.9, 0.5
WARMUP, KEPT, CHAINS = 200, 2000, 4
#: iterations per compiled block of every run_chains call here: one block program (and one init)
#: serves the exactness, compile-count and checkpoint tests (the draws do not depend on it)
BLOCK = 20


@pytest.fixture(scope="module")
def tiny():
    """12 rows, 2 features in [0, 1], an XOR-like label with two flipped: every depth-2 topology
    has posterior mass between 0.13 and 0.41."""
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(12, 2))
    y = ((X[:, 0] > 0.5) ^ (X[:, 1] > 0.6)).astype(int)
    y[:2] = 1 - y[:2]
    return X, y


def _config(kind, **kw):
    return RJHMCConfig(
        task="classification", kind=kind, max_depth=2, alpha=ALPHA, beta=BETA, h_init=H, h_final=H,
        num_warmup=WARMUP, leg_steps=2, n_classes=2, max_tree_depth=6, **kw,
    )


def _data(X, y):
    return {"X": jnp.asarray(X, jnp.float32), "y": jnp.asarray(y, jnp.int32)}


@pytest.mark.parametrize("kind", ["df", pytest.param("dfi", marks=pytest.mark.slow)])
def test_fast_schedule_matches_exact_topology_posterior(tiny, kind):
    # 4 chains x 2000 kept iterations (~90 % of iterations accepted, 40 % are topology moves):
    # Monte Carlo TV on this 4-topology support is ~0.01-0.025 (seen over seeds); a wrong
    # acceptance (e.g. the biased warm-up formula, or dropping Q) moves it above 0.08.
    X, y = tiny
    exact = soft_topology_posterior(X, dm_log_lik(y, 2), max_depth=2, h=H, alpha=ALPHA, beta=BETA, kind=kind,
                                    n_points=2**13)
    assert all(0.1 < p < 0.5 for p in exact.values())
    traces, _ = run_chains(rjhmc(_config(kind)), _data(X, y), key=jax.random.key(0), num_chains=CHAINS,
                           num_iterations=WARMUP + KEPT, block_size=BLOCK)
    empirical = topology_frequencies(traces["is_split"][:, WARMUP:].reshape(-1, 7))
    tv = tv_distance(exact, empirical)
    print(f"{kind}: TV {tv:.4f}")
    assert tv <= 0.05, (exact, empirical)
    # after warm-up a stay move is always accepted (the HMC legs cancel in the acceptance)
    stay = traces["move"][:, WARMUP:] == 2
    assert traces["accepted"][:, WARMUP:][stay].all()


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_tempered_rjhmc_matches_exact_topology_posteriors():
    """RJHMC (HMC-DF) under Metropolis coupling.  A hot chain on its own (beta = 1/3 fixed: legs
    and acceptance use the tempered density) samples the exact tempered topology posterior, and
    the cold chain of a 3-rung ladder (beta 1, 1/2, 1/3; swaps exchange temperatures) the exact
    untempered one, each within TV 0.05.  On these 50 XOR rows the two targets differ by TV ~0.14,
    so a rung that ignored its temperature, or hot draws leaking into the cold chain, fail."""
    from bdtree_jax.diagnostics import swap_rates
    from bdtree_jax.kernels import tempering

    rng = np.random.default_rng(1)
    X = rng.uniform(size=(50, 2))
    y = ((X[:, 0] > 0.5) ^ (X[:, 1] > 0.6)).astype(int)
    lik = dm_log_lik(y, 2)
    exact = soft_topology_posterior(X, lik, max_depth=2, h=H, alpha=ALPHA, beta=BETA, kind="df", n_points=2**13)
    exact_hot = soft_topology_posterior(X, lambda phi, leaf: lik(phi, leaf) / 3, max_depth=2, h=H, alpha=ALPHA,
                                        beta=BETA, kind="df", n_points=2**13)
    assert tv_distance(exact, exact_hot) > 0.1

    def frequencies(traces):
        return topology_frequencies(traces["is_split"][:, WARMUP:].reshape(-1, 7))

    base = rjhmc(_config("df"))
    hot = SamplingAlgorithm(lambda k, d: base.init(k, d)._replace(beta=jnp.float32(1 / 3)), base.step, base.trace)
    traces, _ = run_chains(hot, _data(X, y), key=jax.random.key(4), num_chains=CHAINS, num_iterations=WARMUP + KEPT)
    tv_hot = tv_distance(exact_hot, frequencies(traces))
    print(f"hot chain alone: TV {tv_hot:.4f}")
    assert tv_hot <= 0.05

    algorithm = tempering.tempered(base, tempering.ladder(3, 1.0))
    traces, _ = run_chains(algorithm, _data(X, y), key=jax.random.key(2), num_chains=CHAINS,
                           num_iterations=WARMUP + KEPT)
    tv_cold = tv_distance(exact, frequencies(traces))
    print(f"cold chain of the ladder: TV {tv_cold:.4f}")
    assert tv_cold <= 0.05
    rates = swap_rates(traces["swap_pair"][:, WARMUP:], traces["swap_accepted"][:, WARMUP:], 3)
    upper = rates[np.triu_indices(3, 1)]
    assert np.all((upper > 0.05) & (upper < 0.999)), rates
    # the same through sample(): swap statistics reach the posterior and ArviZ
    post = bd.sample(X, y, method="hmc-df", max_depth=2, num_warmup=20, num_samples=30, num_chains=1,
                     num_temperatures=3, delta_t=1.0, progress=False)
    assert post.info["betas"] == tempering.ladder(3, 1.0)
    assert np.isfinite(post.swap_rates()[np.triu_indices(3, 1)]).all()
    assert "swap_accepted" in post.to_arviz().sample_stats


def test_exact_reference_is_converged(tiny):
    """The quasi-Monte Carlo reference itself: 2^13 and 2^15 points agree to 0.01."""
    X, y = tiny
    a = soft_topology_posterior(X, dm_log_lik(y, 2), max_depth=2, h=H, alpha=ALPHA, beta=BETA, n_points=2**13)
    b = soft_topology_posterior(X, dm_log_lik(y, 2), max_depth=2, h=H, alpha=ALPHA, beta=BETA, n_points=2**15,
                                seed=1)
    assert tv_distance(a, b) < 0.01


def test_one_compilation_for_a_run_visiting_many_topologies(tiny):
    X, y = tiny
    algorithm = rjhmc(_config("df"))
    before = trace_count()
    traces, _ = run_chains(algorithm, _data(X, y), key=jax.random.key(5), num_chains=CHAINS, num_iterations=3 * BLOCK,
                           block_size=BLOCK)
    # 3 blocks, at most one trace of the transition program (none when the exactness test above
    # already built this program: same algorithm, chains and block size)
    first = trace_count() - before
    assert first <= 1
    visited = {topology_string(t) for t in traces["is_split"].reshape(-1, 7)}
    assert len(visited) >= 3
    run_chains(algorithm, _data(X, y), key=jax.random.key(6), num_chains=CHAINS, num_iterations=97, block_size=BLOCK)
    assert trace_count() - before == first  # another run length: same executable


def test_h_schedule_follows_the_paper_for_500_steps():
    # the paper's schedule (docs/theory/rjhmc.md): h_init up to step 75, linear, h_final from step 349 on
    assert annealing_window(500) == (75, 349)
    h = np.asarray(annealed_h(jnp.arange(500), (75, 349), 0.05, 0.001))
    np.testing.assert_allclose(h[:76], 0.05, rtol=1e-6)
    np.testing.assert_allclose(h[349:], 0.001, rtol=1e-5)
    assert np.all(np.diff(h[75:350]) < 0)


def test_bad_configs_raise_before_compiling(tiny):
    X, y = tiny
    cases = [
        (dict(h_init=0.01, h_final=0.02), "h_final"),
        (dict(h_init=0.0, h_final=0.0), "h_init must be"),
        (dict(h_final=float("nan")), "h_final must be"),
        (dict(move_probs=(0.5, 0.5, 0.5)), "move_probs"),
        (dict(warmup_move_probs=(0.5, 0.0, 0.5)), "grow and prune"),
        (dict(schedule="slow"), "schedule"),
        (dict(leg_steps=0), "leg_steps"),
        (dict(min_leaf_size=3), "min_leaf_size"),
        (dict(nu=3.0), "nu"),
    ]
    before = trace_count()
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            bd.sample(X, y, method="hmc-df", num_warmup=5, num_samples=5, num_chains=1, **kwargs)
    assert trace_count() == before
    with pytest.raises(ValueError, match="unknown method"):
        bd.BayesianTreeClassifier(method="hmc").fit(X, y)
    for depth in (True, 0, 11, 2.0):  # a bool is not a depth
        with pytest.raises(ValueError, match="max_depth must be an integer in"):
            RJHMCConfig(task="classification", max_depth=depth)


@pytest.mark.slow
def test_classifier_end_to_end(tmp_path):
    """A separable problem: the HMC-DF posterior puts the root on the informative feature, predicts
    held-out rows, reproduces its draws from the seed, round-trips through save/load and ArviZ."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(80, 3))
    y = np.where(X[:, 1] > 0.4, "b", "a")
    clf = bd.BayesianTreeClassifier(method="hmc-df", max_depth=3, h_init=0.05, h_final=0.02, num_warmup=60,
                                    num_samples=60, num_chains=2, seed=3)
    clf.fit(X[:60], y[:60])
    post = clf.posterior_
    assert isinstance(post, bd.SoftTreePosterior)
    assert np.mean(clf.predict(X[60:]) == y[60:]) >= 0.95
    proba = clf.predict_proba(X[60:])
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-5)
    root_feature = post.draws["feature"][:, :, 0][post.draws["is_split"][:, :, 0]]
    # most of the 120 draws split the root on x1 (0.86 on jax 0.7 with XLA's default flags, where the
    # chains round differently; exactness is the enumeration tests' job, this is the estimator's path)
    assert np.mean(root_feature == 1) > 0.8
    assert post.map_tree().startswith("x1<=")
    assert "if x1 <=" in clf.map_tree_text()
    # same seed, same draws
    again = bd.sample(X[:60], y[:60], method="hmc-df", max_depth=3, h_init=0.05, h_final=0.02, num_warmup=60,
                      num_samples=60, num_chains=2, seed=3)
    for k in post.draws:
        np.testing.assert_array_equal(post.draws[k], again.draws[k])
    path = tmp_path / "post.pkl"
    post.save(path)
    loaded = bd.SoftTreePosterior.load(path)
    np.testing.assert_array_equal(loaded.predict_proba(X[60:]), proba)
    idata = post.to_arviz()
    np.testing.assert_allclose(np.asarray(idata["sample_stats"]["lp"]), post.stats["log_posterior"])
    assert np.asarray(idata["log_likelihood"]["y"]).shape == (2, 60, 60)
    assert np.all(np.asarray(idata["log_likelihood"]["y"]) <= 0)


@pytest.mark.slow
def test_regressor_end_to_end():
    """HMC-DFI regression on a step function: test MSE near the noise variance, sigma recovered,
    90 % predictive intervals cover about 90 % of new responses."""
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(300, 2))
    f = np.where(X[:, 0] < 0.5, 0.0, 2.0)
    y = f + 0.3 * rng.standard_normal(300)
    reg = bd.BayesianTreeRegressor(method="hmc-dfi", max_depth=2, h_init=0.05, h_final=0.01, num_warmup=100,
                                   num_samples=100, num_chains=2, seed=0, mu_bar=1.0)
    reg.fit(X[:200], y[:200])
    pred = reg.predict(X[200:])
    assert np.mean((pred - f[200:]) ** 2) < 0.02
    # Target: the noise's own sd in these 200 rows (0.325), not the generating 0.3; the soft
    # boundary (h_final 0.01) adds a little misfit near x0 = 0.5, so sigma sits slightly above it.
    sigma = reg.posterior_.draws["sigma"]
    assert abs(np.mean(sigma) - np.std(y[:200] - f[:200])) < 0.05
    lo, hi = reg.predict_interval(X[200:], prob=0.9, predictive=True)
    assert 0.8 <= np.mean((y[200:] >= lo) & (y[200:] <= hi)) <= 0.98


@pytest.mark.slow
def test_draws_do_not_depend_on_the_number_of_chains(tiny):
    X, y = tiny
    algorithm = rjhmc(_config("dfi"))
    one, _ = run_chains(algorithm, _data(X, y), key=jax.random.key(2), num_chains=1, num_iterations=30)
    two, _ = run_chains(algorithm, _data(X, y), key=jax.random.key(2), num_chains=2, num_iterations=30)
    np.testing.assert_array_equal(one["is_split"][0], two["is_split"][0])
    np.testing.assert_array_equal(one["accepted"][0], two["accepted"][0])
    np.testing.assert_allclose(one["params"]["tree_tau"][0], two["params"]["tree_tau"][0], rtol=1e-5, atol=1e-6)
    assert not np.array_equal(two["is_split"][0], two["is_split"][1])


def test_checkpoint_resume_gives_the_identical_chain(tiny, tmp_path, monkeypatch):
    """The RJHMC state carries NUTS's typed PRNG keys; an interrupted run resumes bit-identically."""
    from bdtree_jax import driver as sampling

    X, y = tiny
    algorithm = rjhmc(_config("df"))
    run = dict(key=jax.random.key(5), num_chains=CHAINS, num_iterations=3 * BLOCK, block_size=BLOCK)
    full, _ = run_chains(algorithm, _data(X, y), **run)
    original, calls = sampling._write_checkpoint, {"n": 0}

    def interrupt_after_one(*args, **kw):
        original(*args, **kw)
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt

    path = tmp_path / "rjhmc.ckpt"
    monkeypatch.setattr(sampling, "_write_checkpoint", interrupt_after_one)
    with pytest.raises(KeyboardInterrupt):
        run_chains(algorithm, _data(X, y), checkpoint=path, **run)
    monkeypatch.setattr(sampling, "_write_checkpoint", original)
    resumed, _ = run_chains(algorithm, _data(X, y), checkpoint=path, **run)
    for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(resumed)):
        np.testing.assert_array_equal(a, b)


# -- the jump's sub-keys, a change on a stump, the rule density without candidate cuts --------------


def _one_split_state(config, data, key):
    """A state with the root split (max_depth 2), tempered to ``beta = 0`` (the prior: the leaf
    means' conditional is N(0, 1), so a grow's proposed leaf means are its standard-normal draws)
    and a tiny frozen NUTS step (the second leg barely moves them)."""
    state = jax.jit(rjhmc(config).init)(key, data)
    adapt = state.adapt._replace(step_size=jnp.float32(1e-4))
    return state._replace(is_split=state.is_split.at[0].set(True), beta=jnp.float32(0.0), adapt=adapt)


def _grown_leaf_draws(n=600):
    """One iteration from the one-split state with every move a grow (at node 1 or 2), ``n`` keys:
    for the accepted grows, the node and the (left, right) child leaf means, which are the leaf
    proposal's 2nd and 3rd standard-normal draws (up to the 1e-4 step leg)."""
    import bdtree_jax.kernels.rjhmc as rj

    X = np.random.default_rng(0).uniform(size=(6, 2))
    data = _data(X, np.zeros(6))
    data["y"] = data["y"].astype(jnp.float32)
    config = RJHMCConfig(task="regression", kind="df", max_depth=2, num_warmup=0, leg_steps=1, max_tree_depth=2,
                         move_probs=(0.5, 0.5, 0.0))
    rj.rjhmc.cache_clear()
    algorithm = rj.rjhmc(config)
    state = _one_split_state(config, data, jax.random.key(0))
    step = jax.jit(jax.vmap(lambda k: algorithm.step(k, state, data)))
    new, info = step(jax.random.split(jax.random.key(1), n))
    rj.rjhmc.cache_clear()
    grown = np.asarray(info["accepted"]) & (np.asarray(info["move"]) == 0)
    split = np.asarray(new.is_split)[grown]
    node = np.where(split[:, 1], 1, 2)
    mu = np.asarray(info["params"]["leaf_mean"])[grown]
    left, right = mu[np.arange(len(node)), 2 * node + 1], mu[np.arange(len(node)), 2 * node + 2]
    return node, left, right


def _leaf_draws_look_standard(node, left, right):
    """Each child's draw N(0, 1) and the two independent, whatever the node: means within 4.5
    standard errors of 0, P(left > right) within 4.5 standard errors of 1/2 at each node (~150
    accepted grows per node of 600 proposals; the reused key gives P = 1 at node 1)."""
    ok = True
    for at in (1, 2):
        l, r = left[node == at], right[node == at]
        m = len(l)
        ok &= m > 60
        ok &= abs(l.mean()) < 4.5 / np.sqrt(m) and abs(r.mean()) < 4.5 / np.sqrt(m)
        ok &= abs((l > r).mean() - 0.5) < 4.5 * 0.5 / np.sqrt(m)
    return bool(ok)


@pytest.mark.slow  # with its planted twin; the default job keeps test_step_keys_are_one_split_and_keep_the_first_six
def test_leaf_proposal_draws_are_standard_normal_and_independent_of_the_node():
    # The grown node's children's leaf means are the leaf proposal's normal draws: before the fix
    # they came from fold_in(k_prop, 1), the key the node choice had used (split(k_prop)[1]), and
    # every grow at node 1 had left > right (P = 1.0 instead of 0.5).
    node, left, right = _grown_leaf_draws()
    assert _leaf_draws_look_standard(node, left, right), [
        ((left > right)[node == a].mean(), left[node == a].mean(), right[node == a].mean()) for a in (1, 2)]


@pytest.mark.slow
def test_leaf_proposal_check_fails_with_the_reused_key(monkeypatch):
    # planted error: the old derivation of the change / rule / leaf keys (fold_in of the key that
    # propose_topology splits)
    import bdtree_jax.kernels.rjhmc as rj

    def old_keys(key):
        k = jax.random.split(key, 6)
        return rj._StepKeys(*k, jax.random.fold_in(k[2], 3), jax.random.fold_in(k[2], 2), jax.random.fold_in(k[2], 1))

    monkeypatch.setattr(rj, "_step_keys", old_keys)
    assert not _leaf_draws_look_standard(*_grown_leaf_draws())


def test_step_keys_are_one_split_and_keep_the_first_six():
    from bdtree_jax.kernels.rjhmc import _step_keys

    key = jax.random.key(3)
    keys = jax.random.key_data(jnp.stack(list(_step_keys(key))))
    assert len({tuple(np.asarray(k).ravel()) for k in keys}) == 9
    np.testing.assert_array_equal(keys[:6], jax.random.key_data(jax.random.split(key, 6)))


@pytest.mark.slow
def test_a_change_on_a_tree_without_splits_is_a_stay():
    # RJHMC's chains never leave the one-split tree (the root is not pruned), but a state given
    # from outside may have no split.  Such a tree has no rule to change: before the fix the move
    # was recorded as a change (3) and ran a jump that redrew the root's inactive rule and the leaf
    # means; now it is a stay (2) and the topology is unchanged.  (The state is outside the
    # prior's support, so no move from it is accepted.)
    X = np.random.default_rng(0).uniform(size=(6, 2))
    data = {"X": jnp.asarray(X, jnp.float32), "y": jnp.asarray(X[:, 0], jnp.float32)}
    config = RJHMCConfig(task="regression", kind="df", max_depth=2, num_warmup=0, leg_steps=1, max_tree_depth=2,
                         move_probs=(0.0, 0.0, 1.0, 0.0))
    algorithm = rjhmc(config)
    state = algorithm.init(jax.random.key(0), data)
    state = state._replace(is_split=jnp.zeros_like(state.is_split))
    new, info = jax.jit(jax.vmap(lambda k: algorithm.step(k, state, data)))(jax.random.split(jax.random.key(1), 50))
    assert (np.asarray(info["move"]) == 2).all(), np.asarray(info["move"])
    assert not np.asarray(new.is_split).any()


@pytest.mark.parametrize("oblique, distinct", [(False, True), (False, False), (True, False)])
def test_rule_density_is_the_density_drawn_from(oblique, distinct):
    # The rule proposal's density integrates to 1 over rules, with or without candidate cuts.  With
    # no feature holding two distinct values propose_rule draws from the prior alone; the density
    # used to be 0.25 x the prior there (the mixture weight of the prior), integral 0.25.
    # Checked by importance sampling from the prior: E_prior[q / p] = 1 (4000 draws; tolerance 0.1,
    # the ratio's Monte Carlo error is < 0.03 here).
    from bdtree_jax.kernels import rjhmc_split as rs

    rng = np.random.default_rng(0)
    F = 2
    X = rng.uniform(size=(5, F)) if distinct else np.full((5, F), 0.3)
    # jitted, not dispatched op by op (each op of an eager call is a program of its own)
    cand = jax.jit(rs.split_candidates)(jnp.asarray(X, jnp.float32), jnp.asarray(rng.normal(size=5), jnp.float32),
                                        jnp.ones(5), 1.0, 0.0, 1.0)
    assert bool(cand.has_data) == distinct

    def ratio(key):
        first, tau = rs.prior_rule(key, F, oblique)
        return jnp.exp(rs.rule_log_density(cand, first, tau, F, oblique)
                       - rs.prior_log_density(first, tau, F, oblique))

    r = np.asarray(jax.jit(jax.vmap(ratio))(jax.random.split(jax.random.key(0), 4000)))
    if not distinct:
        np.testing.assert_allclose(r, 1.0, rtol=1e-5)
    else:  # the weight-1 average of q / p over the prior
        assert abs(r.mean() - 1.0) < 0.1, r.mean()
    # and the draws: without candidate cuts they are the prior's (same key, same rule)
    if not distinct:
        density = jax.jit(lambda k: rs.rule_log_density(cand, *rs.propose_rule(k, cand, F, oblique), F, oblique))
        assert np.isfinite(float(density(jax.random.key(7))))
