"""The restructure move and the WU schedule (issue #10; docs/theory/wu-restructure.md).

* Exact checks on a fixed leaf partition ("fibre", from :func:`~bdtree_jax.exact.enumerate_trees`
  filtered by partition): the replayed proposal gives every fibre tree its enumerated prior,
  ``q(. | P)`` sums to 1 over the fibre (minus the mass of trees deeper than the heap), drawn
  proposals follow ``q``, the proposed state's caches are those of a full re-score, and the MH
  chain's stationary law (from its transition matrix) is the prior on the fibre -- not so when
  ``W(S)`` is dropped from ``Φ``.
* §5.1: restructure alone, likelihood irrelevant (ratio 1), visit frequencies over the fibre vs the
  prior restricted to it; the negative control (``drop_w``) fails.
* §5.2: the WU schedule (``n_local = 2``) against the enumerated posterior, also with
  ``split_prior="range"``, ``min_leaf_size=2`` and tempering.
* The exact fibre-Gibbs variant: ``Z(P, 0)`` is the enumerated prior mass of the
  fibre, independent draws follow the prior on the fibre and are always accepted, the negative
  controls (leaf factors or rule weights dropped) fail; its exact law equals the stationary law of
  the Variant Π chain; the WU schedule with ``restructure="gibbs"`` / ``"auto"`` (mixing Gibbs and
  the Π fallback) matches the enumerated posterior.
* The ``sample(method="wu")`` API, estimators, CLI key and errors.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

import bdtree_jax as bd
from bdtree_jax.data import make_split_grid
from bdtree_jax.exact import tree_frequencies, tv_distance
from bdtree_jax.kernels import cgm, fibre_gibbs, tempering, wu
from bdtree_jax.kernels._moves import score
from bdtree_jax.driver import run_chains
from bdtree_jax.tree import Tree, from_string, to_string

from helpers import TOY_X, chain_frequencies, fibre, stack_trees, stationary_tv

# K = 4 leaves {0,2} {1} {3} {4,5} of the toy rows: a 36-tree fibre at depth 3, 4 trees at depth 2
# (where most restructures need depth 3: the capacity rule); K = 3 with min_leaf_size = 2.
K4 = "x0<=3.5(x1<=4.5(L,L),x0<=4.5(L,L))"
K3_M2 = "x0<=2.5(L,x1<=2.5(L,L))"


def _uneven(X):
    """The toy inputs with the same order but unequal gaps (so the "range" prior differs from
    "uniform": the toy data are equally spaced)."""
    x0 = np.array([1.0, 2.0, 4.0, 7.0, 8.0, 12.0])
    x1 = np.array([0.0, 1.0, 3.0, 6.0, 7.0, 11.0])
    return np.stack([x0[np.argsort(np.argsort(X[:, 0]))], x1[np.argsort(np.argsort(X[:, 1]))]], axis=1)


def _problem(toy_problem, task="classification", max_depth=3, min_leaf_size=1, split_prior="uniform"):
    X = _uneven(TOY_X) if split_prior == "range" else TOY_X
    return toy_problem(task, max_depth, min_leaf_size, split_prior, X=X)


def _on_fibre(toy_problem, max_depth, min_leaf_size, split_prior, start):
    """The toy problem (:func:`_problem`), the CGM state at the tree ``start`` (a string over the
    toy grid; its bins are those of :func:`_uneven` too) and that tree's fibre: every tree with its
    leaf partition as strings, and the prior restricted to them (log, and normalised)."""
    p = _problem(toy_problem, max_depth=max_depth, min_leaf_size=min_leaf_size, split_prior=split_prior)
    start_tree = Tree(*(jnp.asarray(a) for a in from_string(start, make_split_grid(TOY_X).thresholds, max_depth)))
    names, log_prior = fibre(p, start_tree)
    prob = np.exp(log_prior - log_prior.max())
    state = cgm.init(None, p.data, cgm.CGMConfig(max_depth, min_leaf_size), tree=start_tree)
    return p, state, names, log_prior, prob / prob.sum()


def _p_terms(heaps, ref, split_prob):
    """Σ_int log p_s + Σ_leaf log(1 - p_s 1[valid cut]) of each tree, from its full re-score ``ref``."""
    p = np.asarray(split_prob, float)
    is_split = np.asarray(heaps.is_split)
    active = np.asarray(jax.vmap(bd.tree.active_nodes)(heaps))
    can = (ref.hi > ref.lo).any(-1) & (p > 0)
    terms = np.where(is_split, np.log(np.where(is_split, p, 1.0)), np.log1p(-np.where(can, p, 0.0)))
    return np.sum(np.where(active, terms, 0.0), axis=1)


FIBRES = [  # (max_depth, min_leaf_size, split_prior, start, fibre size)
    (3, 1, "uniform", K4, 36),
    (2, 1, "uniform", K4, 4),
    (3, 2, "uniform", K3_M2, 3),
    (3, 1, "range", K4, 36),
]


@pytest.mark.parametrize("max_depth,min_leaf_size,split_prior,start,size",
                         [pytest.param(*FIBRES[0], marks=pytest.mark.slow), *FIBRES[1:3],
                          pytest.param(*FIBRES[3], marks=pytest.mark.slow)])
def test_proposal_and_ratio_are_exact_on_the_fibre(toy_problem, max_depth, min_leaf_size, split_prior, start, size):
    """Deterministic checks of the construction on a whole fibre (module docstring)."""
    p, state, names, log_prior, pi = _on_fibre(toy_problem, max_depth, min_leaf_size, split_prior, start)
    grid, data = p.grid, p.data
    assert len(names) == size
    config = cgm.CGMConfig(max_depth, min_leaf_size)
    heaps = stack_trees(names, grid.thresholds, max_depth)
    groups = wu.group_codes(state, data)
    is_group = groups.is_group
    assert int(is_group.sum()) == int(start.count("L"))
    u0 = jnp.zeros(heaps.is_split.shape[1])
    replay_only = jnp.array([False])
    ref = jax.device_get(jax.jit(jax.vmap(lambda t: score(t, data, config, 1.0)))(heaps))  # full re-scores

    # the fibre-Gibbs draw's exact law, pi(T) / Z(P, 0) with Z from its DP (float32)
    gc = wu.RestructureConfig(max_depth, min_leaf_size, kind="auto", max_groups=8)
    fib = jax.device_get(jax.jit(lambda s: fibre_gibbs._fibre_dp(s, data, gc))(state))
    gibbs_law = np.exp(log_prior - float(fib.log_z[0, 2 ** int(fib.K) - 1]))

    for weights in ("prior", "uniform"):
        rc = wu.RestructureConfig(max_depth, min_leaf_size, weights)
        replay = jax.jit(jax.vmap(lambda t, rc=rc: wu._sweep(u0, None, t, replay_only, state, groups, data, rc)))
        replay = jax.device_get(jax.tree.map(lambda a: a[:, 0], replay(heaps)))
        assert replay.valid.all() and not replay.overflow.any()
        # the sweep's prior is the enumerated prior of every fibre tree
        np.testing.assert_allclose(replay.log_prior, log_prior, atol=2e-5)
        q = np.exp(replay.log_q)
        if max_depth == 3:  # every fibre tree fits the heap: q is a distribution on the fibre
            np.testing.assert_allclose(q.sum(), 1.0, atol=1e-5)
        else:  # K = 4 at depth 2: three quarters of the proposals need depth 3 (rejected)
            assert 0.1 < q.sum() < 0.9
        phi = np.asarray(wu._log_phi(replay, rc), float)
        assert stationary_tv(q, phi, pi) < 1e-4
        assert stationary_tv(q, phi, gibbs_law) < 1e-4  # Variant Π and the fibre Gibbs draw: one stationary law
        if weights == "prior":
            # Variant Π: log Φ = Σ_int (log p_s + log W(S)) + Σ_leaf log(1 - p_s 1[valid cut])
            np.testing.assert_allclose(phi, replay.log_W + _p_terms(heaps, ref, data.split_prob), atol=1e-4)
            prior_q, prior_phi = q, phi
            # negative control: Φ without W(S)
            bad = np.asarray(wu._log_phi(replay, wu.RestructureConfig(max_depth, min_leaf_size, drop_w=True)), float)
            if (max_depth, min_leaf_size) == (3, 1):
                assert stationary_tv(q, bad, pi) > 0.15  # observed 0.198: the exact check has power
    # drawn proposals follow q, and the proposed state's caches are a full re-score's
    rc = wu.RestructureConfig(max_depth, min_leaf_size)
    n = 4000
    us = jax.random.uniform(jax.random.key(1), (n, heaps.is_split.shape[1] + 1))
    proposed, log_phi_new, log_phi_old, ok, K, _ = jax.device_get(
        jax.jit(jax.vmap(lambda u: wu.propose(u, state, data, rc)))(us))
    assert np.all(K == is_group.sum())
    freqs = tree_frequencies(Tree(*(a[ok] for a in proposed.tree)), grid.thresholds)
    assert set(freqs) <= set(names)
    assert tv_distance(freqs, dict(zip(names, prior_q / prior_q.sum()))) < 0.04
    np.testing.assert_allclose(ok.mean(), prior_q.sum(), atol=0.03)
    index = {name: i for i, name in enumerate(names)}
    np.testing.assert_allclose(log_phi_old, prior_phi[index[to_string(state.tree, grid.thresholds)]], atol=1e-4)
    for i in np.flatnonzero(ok)[:200]:
        k = index[to_string(Tree(*(a[i] for a in proposed.tree)), grid.thresholds)]
        np.testing.assert_allclose(log_phi_new[i], prior_phi[k], atol=1e-4)
        for name in ("leaf_id", "lo", "hi"):
            np.testing.assert_array_equal(getattr(proposed, name)[i], getattr(ref, name)[k])
        for name in ("stats", "log_prior", "log_lik"):
            np.testing.assert_allclose(getattr(proposed, name)[i], getattr(ref, name)[k], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(proposed.log_lik[ok], float(state.log_lik), rtol=1e-5, atol=1e-5)  # ratio 1


@functools.lru_cache(maxsize=None)
def _restructure_chains(rc: wu.RestructureConfig, n_steps: int):
    """jit(vmap over chains(scan of restructure steps)) from a given state (compiled once per config)."""

    def run(key, state, data):
        us = jax.vmap(lambda k: wu.draw_restructure(k, rc.max_depth))(jax.random.split(key, n_steps))

        def body(s, u):
            s, info = wu.restructure_step(u, s, data, rc)
            return s, (s.tree, info.accepted, info.overflow)

        return jax.lax.scan(body, state, us)[1]

    return jax.jit(jax.vmap(run, in_axes=(0, None, None)))


@pytest.mark.parametrize(
    "max_depth,min_leaf_size,split_prior,start,weights,drop_w",
    [
        (3, 1, "uniform", K4, "prior", False),
        (3, 1, "uniform", K4, "uniform", False),
        (2, 1, "uniform", K4, "prior", False),
        (3, 2, "uniform", K3_M2, "prior", False),
        (3, 1, "range", K4, "prior", False),
        (3, 1, "uniform", K4, "prior", True),  # negative control: must fail
    ],
)
def test_restructure_alone_samples_the_prior_on_the_fibre(toy_problem, max_depth, min_leaf_size, split_prior, start,
                                                           weights, drop_w):
    """8 chains x 10,000 restructures from a K = 3-4 tree; visits stay in the fibre and
    match the prior restricted to it (TV <= 0.03; observed 0.010-0.019 on the 36-tree fibres,
    where 80,000 iid draws give 0.008-0.009) -- the W-dropping control converges to TV 0.198
    (exact, from the transition matrix; observed 0.199) and fails."""
    p, state, names, _, pi = _on_fibre(toy_problem, max_depth, min_leaf_size, split_prior, start)
    grid, data = p.grid, p.data
    rc = wu.RestructureConfig(max_depth, min_leaf_size, weights, drop_w)
    trees, accepted, overflow = jax.device_get(
        _restructure_chains(rc, 10_000)(jax.random.split(jax.random.key(5), 8), state, data))
    freqs = tree_frequencies(trees, grid.thresholds)
    assert set(freqs) <= set(names), "left the fibre"
    tv = tv_distance(freqs, dict(zip(names, pi)))
    if drop_w:
        assert tv > 0.1, tv
    else:
        assert tv <= 0.03, tv
    assert len(freqs) == len(names) and accepted.mean() > 0.1
    assert overflow.any() == (max_depth == 2)  # the capacity rule is exercised at depth 2 only


@pytest.mark.parametrize(
    "max_depth,min_leaf_size,split_prior,start,size,control",
    [fibre + ("",) for fibre in FIBRES] + [
        (3, 1, "uniform", K4, 36, "drop_leaf"),  # negative controls: must fail
        (3, 1, "uniform", K4, 36, "drop_rule"),
        (3, 1, "range", K4, 36, "drop_rule"),
    ],
)
def test_gibbs_draws_are_the_prior_on_the_fibre(toy_problem, max_depth, min_leaf_size, split_prior, start, size,
                                                control):
    """The fibre-Gibbs variant: ``Z(P, 0)`` (float32) is the enumerated prior mass of the fibre;
    20,000 independent draws from the fixed start tree are all accepted (ratio 0, traced as Gibbs),
    stay in the fibre and match the prior restricted to it (TV <= 0.03; observed 0.003-0.014, the
    Monte Carlo floor of 20,000 iid draws on the 36-tree fibre is 0.017 on average, 0.022 at its
    99th percentile); the drawn states' caches are those of a full re-score.  Negative controls
    (leaf factors dropped: observed TV 0.091; rule weights dropped: 0.127, 0.271 with the range
    prior) fail."""
    p, state, names, log_prior, pi = _on_fibre(toy_problem, max_depth, min_leaf_size, split_prior, start)
    grid, data = p.grid, p.data
    assert len(names) == size
    config = cgm.CGMConfig(max_depth, min_leaf_size)
    rc = wu.RestructureConfig(max_depth, min_leaf_size, kind="gibbs", max_groups=8, gibbs_control=control)
    fib = jax.device_get(jax.jit(lambda s: fibre_gibbs._fibre_dp(s, data, rc))(state))
    K = int(start.count("L"))
    assert int(fib.K) == K
    log_z = float(fib.log_z[0, 2**K - 1])
    if not control:
        np.testing.assert_allclose(log_z, logsumexp(log_prior), atol=1e-5)
    else:
        assert abs(log_z - logsumexp(log_prior)) > 0.1
    n = 20_000
    us = jax.vmap(lambda k: wu.draw_restructure(k, max_depth, "gibbs"))(jax.random.split(jax.random.key(2), n))
    new, info = jax.device_get(jax.jit(jax.vmap(lambda u: wu.restructure_step(u, state, data, rc)))(us))
    assert info.accepted.all() and (info.log_accept_ratio == 0).all() and (info.kind == 1).all()
    assert (info.n_groups == K).all() and not info.overflow.any()
    freqs = tree_frequencies(new.tree, grid.thresholds)
    assert set(freqs) <= set(names), "left the fibre"
    tv = tv_distance(freqs, dict(zip(names, pi)))
    if control:
        assert tv > 0.05, tv
        return
    assert tv <= 0.03, tv
    assert len(freqs) == len(names)
    heaps = stack_trees(names, grid.thresholds, max_depth)
    ref = jax.device_get(jax.jit(jax.vmap(lambda t: score(t, data, config, 1.0)))(heaps))  # full re-scores
    index = {name: i for i, name in enumerate(names)}
    for i in range(200):
        k = index[to_string(Tree(*(a[i] for a in new.tree)), grid.thresholds)]
        for name in ("leaf_id", "lo", "hi"):
            np.testing.assert_array_equal(getattr(new, name)[i], getattr(ref, name)[k])
        for name in ("stats", "log_prior", "log_lik"):
            np.testing.assert_allclose(getattr(new, name)[i], getattr(ref, name)[k], rtol=1e-5, atol=1e-5)


CHAINS, ITERS, BURN = 16, 6000, 200


@pytest.mark.xla_optimized
@pytest.mark.parametrize(
    "task,max_depth,min_leaf_size,split_prior,n_temperatures,drop_w,restructure,max_groups",
    [
        ("classification", 2, 1, "uniform", 1, False, "pi", 10),
        pytest.param("classification", 2, 1, "range", 1, False, "pi", 10, marks=pytest.mark.slow),
        pytest.param("regression", 3, 2, "uniform", 1, False, "pi", 10, marks=pytest.mark.slow),
        pytest.param("classification", 2, 1, "uniform", 3, False, "pi", 10, marks=pytest.mark.slow),
        ("classification", 2, 1, "uniform", 1, True, "pi", 10),  # negative control: must fail
        # the fibre-Gibbs variant, and "auto" switching between it (K <= 2) and Π (K = 3, 4)
        ("classification", 2, 1, "uniform", 1, False, "gibbs", 4),
        pytest.param("regression", 3, 2, "uniform", 1, False, "gibbs", 8, marks=pytest.mark.slow),
        pytest.param("classification", 2, 1, "range", 3, False, "gibbs", 4, marks=pytest.mark.slow),
        pytest.param("classification", 2, 1, "uniform", 1, False, "auto", 2, marks=pytest.mark.slow),
    ],
)
def test_wu_schedule_matches_enumerated_posterior(toy_problem, task, max_depth, min_leaf_size, split_prior,
                                                  n_temperatures, drop_w, restructure, max_groups):
    """16 chains x 6,000 WU iterations (2 CGM steps, 1 restructure, 2 CGM steps), plain
    or as the kernel of a 3-rung tempered chain, within TV 0.04 of the exact posterior (observed
    0.017 on the 256-tree supports, 0.006 on the 17-tree one); with ``W(S)`` dropped from ``Φ``
    the chain is biased (observed 0.081).  The same with the fibre-Gibbs restructure
    (every restructure of a K >= 2 tree accepted; observed TV 0.018, 0.005 and 0.017 tempered with
    the range prior; restructure acceptance 0.96-0.98) and with "auto" at
    ``max_groups = 2`` (Gibbs for K = 2, the Π fallback for K = 3-4: 36 % Gibbs; TV 0.018)."""
    p = _problem(toy_problem, task, max_depth, min_leaf_size, split_prior)
    exact = p.exact
    algorithm = wu.wu(wu.WUConfig(cgm.CGMConfig.from_prior(p.prior), n_local=2, drop_w=drop_w, restructure=restructure,
                                  max_groups=max_groups))
    if n_temperatures > 1:
        algorithm = tempering.tempered(algorithm, tempering.ladder(n_temperatures, 0.5))
    traces, _ = run_chains(algorithm, p.data, key=jax.random.key(9), num_chains=CHAINS, num_iterations=ITERS,
                           block_size=ITERS)
    freqs = chain_frequencies(traces, p.grid.thresholds, BURN)
    assert set(freqs) <= set(exact), "sampler visited a tree outside the prior's support"
    tv = tv_distance(freqs, exact)
    if drop_w:
        assert tv > 0.06, tv
        return
    assert tv <= 0.04, tv
    rate = traces["restructure_accepted"].mean()
    assert 0.05 < rate <= (1.0 if restructure == "gibbs" else 0.999), rate  # Gibbs: accepted whenever K >= 2
    kind = traces["restructure_kind"]
    if restructure == "pi":
        assert (kind == 0).all()
    elif restructure == "gibbs":
        assert (kind == 1).all()
    else:  # both variants ran, Gibbs exactly when the restructured tree had <= max_groups leaves
        assert 0 < (kind == 1).mean() < 1
    assert 0.05 < traces["local_accept_rate"].mean() < 1.0
    assert set(np.unique(traces["local_accept_rate"] * 4)) <= {0.0, 1.0, 2.0, 3.0, 4.0}


def test_sample_wu_api_reproducible_and_estimators(toy_data):
    """Two compiled programs: iris via sample() and the classifier (same configuration), and a
    tempered regressor with the range prior and min_leaf_size = 2 on the toy data."""
    X, y = bd.datasets.load("iris")
    kw = dict(method="wu", max_depth=3, num_warmup=10, num_samples=20, num_chains=2, seed=3, num_local_steps=3)
    one = bd.sample(X, y, **kw)
    again = bd.sample(X, y, **kw)
    for a, b in zip(one.trees, again.trees):
        np.testing.assert_array_equal(a, b)
    other = bd.sample(X, y, **dict(kw, seed=4))
    assert not np.array_equal(one.trees.cut, other.trees.cut)
    assert one.stats["restructure_accepted"].dtype == bool and one.stats["restructure_accepted"].any()
    rate = one.stats["local_accept_rate"]
    assert rate.dtype == np.float32 and np.all((rate >= 0) & (rate <= 1)) and 0 < rate.mean() < 1
    assert set(np.unique(rate * 6)) <= set(range(7))  # 2 x n_local local proposals per iteration
    assert "n_local=3" in one.info["config"] and "restructure='auto'" in one.info["config"]
    assert (one.stats["restructure_kind"] == 1).all()  # max_depth 3: at most 8 <= max_groups leaves, always Gibbs
    assert (one.predict(X) == y).mean() > 0.9
    clf = bd.BayesianTreeClassifier(**{k: v for k, v in kw.items() if k != "seed"}, seed=3).fit(X, y)
    assert clf.get_params()["num_local_steps"] == 3
    wu_params = bd.BayesianTreeClassifier(method=bd.WU(num_local_steps=3)).get_params()
    assert wu_params["method__restructure"] == "auto" and wu_params["method__max_groups"] == 10
    np.testing.assert_array_equal(clf.posterior_.trees.cut, one.trees.cut)
    Xr, _, y_reg = toy_data
    reg = bd.BayesianTreeRegressor(method="wu", num_local_steps=2, max_depth=2, num_warmup=5, num_samples=20, num_chains=1,
                                   num_temperatures=2, split_prior="range", min_leaf_size=2).fit(Xr, y_reg)
    stats = reg.posterior_.stats
    assert {"swap_accepted", "restructure_accepted", "restructure_kind", "local_accept_rate"} <= set(stats)
    assert np.all(reg.posterior_.stats["n_leaves"] <= 3)  # 6 rows, >= 2 per leaf


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(method="cgm", num_local_steps=5), "num_local_steps is an option of method='wu'"),
        (dict(method="pg", num_local_steps=5), "num_local_steps is an option of method='wu'"),
        (dict(method="wu", num_local_steps=0), "num_local_steps must be an integer >= 1"),
        (dict(method="wu", num_local_steps=2.5), "num_local_steps must be an integer >= 1"),
        (dict(method="wu", proposal="regrow"), "proposal is an option of method='cgm'"),
        (dict(method="wu", box_constraints=[{0: (None, 1.0)}]), "box_constraints is an option of method='cgm'"),
        (dict(method="wu", initial_tree="L"), "initial_tree is an option of method='cgm'"),
        (dict(method="cgm", restructure="gibbs"), "restructure is an option of method='wu'"),
        (dict(method="pg", max_groups=8), "max_groups is an option of method='wu'"),
        (dict(method="wu", restructure="exact"), r"sample: restructure must be one of \('auto', 'pi', 'gibbs'\)"),
        (dict(method="wu", max_groups=1), r"sample: max_groups must be an integer in \[2, 12\]"),
        (dict(method="wu", max_groups=13), r"max_groups must be an integer in \[2, 12\]"),
        (dict(method="wu", max_groups=4.0), r"max_groups must be an integer in \[2, 12\]"),
        (dict(method="wu", max_depth=4, restructure="gibbs"), r"'gibbs' needs max_groups >= 2\*\*max_depth = 16"),
    ],
)
def test_wu_option_errors(kwargs, match):
    X, y = bd.datasets.load("iris")
    with pytest.raises(ValueError, match=match):
        bd.sample(X, y, num_samples=5, num_chains=1, **kwargs)


def test_configs_and_cli_key(tmp_path):
    with pytest.raises(ValueError, match="n_local must be an integer >= 1"):
        wu.WUConfig(cgm.CGMConfig(2), n_local=0)
    with pytest.raises(ValueError, match="weights must be one of"):
        wu.RestructureConfig(2, weights="posterior")
    with pytest.raises(ValueError, match="restructure must be one of"):
        wu.RestructureConfig(2, kind="fibre")
    with pytest.raises(ValueError, match="restructure must be one of"):
        wu.WUConfig(cgm.CGMConfig(2), restructure=None)
    for bad in (1, 0, 13, True, 2.5):
        with pytest.raises(ValueError, match=r"max_groups must be an integer in \[2, 12\]"):
            wu.WUConfig(cgm.CGMConfig(2), max_groups=bad)
    with pytest.raises(ValueError, match="needs max_groups >= 2\\*\\*max_depth = 8"):
        wu.RestructureConfig(3, kind="gibbs", max_groups=7)
    with pytest.raises(ValueError, match="gibbs_control must be one of"):
        wu.RestructureConfig(2, kind="gibbs", gibbs_control="drop_w")
    assert wu.RestructureConfig(3, kind="gibbs", max_groups=8).gibbs_only
    assert wu.RestructureConfig(3, kind="auto", max_groups=8).gibbs_only
    assert not wu.RestructureConfig(4, kind="auto", max_groups=12).gibbs_only
    assert not wu.RestructureConfig(2, kind="pi", max_groups=12).gibbs_only
    from bdtree_jax.cli import load_config

    path = tmp_path / "wu.yaml"
    path.write_text("dataset: iris\nmethod: wu\nnum_local_steps: 10\nrestructure: gibbs\nmax_groups: 8\n")
    config = load_config(path)
    assert config["method"] == "wu" and config["num_local_steps"] == 10
    assert config["restructure"] == "gibbs" and config["max_groups"] == 8
