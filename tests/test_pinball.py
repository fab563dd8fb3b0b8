"""The pinball tree prior (``structure="pinball"``; this library's parametrisation,
docs/theory/pinball.md): ``K - 1 ~ Poisson(λ)`` truncated at ``K_max``, each split's left leaf count
``k_L - 1 ~ BetaBinomial(k - 2, γ, γ)``, CGM98's rule prior; truncated at ``max_depth``.

Two data sets:

* ``CUBE``: the 8 corners of {0, 1}^3, ``max_depth = 3``, ``K_max = 4``.  A node holding ``k >= 2``
  leaf counts lies at depth ``<= K - k <= 2``, so at most two features are constant on its rows and
  the third still splits them: every run of the generative process is valid (no dead end, no
  depth overflow).  The enumerated weights therefore sum to exactly 1, the size law is ``p_size``
  itself and the root's balance law given ``K`` is ``p_shape(. | K)`` -- analytic targets.  52 trees.
* ``X``: the 6-row toy data (``max_depth = 2``, ``K_max = 4``, 256 trees), where dead ends exist
  (a node holding 2 counts may get a single row): the prior's size law is ``p_size(K) Z_K``
  renormalised, checked against the enumeration.

Budgets: prior-only chains 8 x 20,000 CGM steps (52 trees; Monte Carlo TV measured 0.011-0.015
over three seeds, tolerance 0.03); posterior chains 16 x 30,000 (256 trees; TV 0.012, tolerance
0.04, as the other enumeration tests).  The negative controls run the *same compiled program* with
other numbers in ``TreeData`` (no recompilation, asserted): γ = 5 instead of 0.5 (prior TV 0.078,
root balance off by 0.21), λ = 2 instead of 3 (prior TV 0.170, size law off by 0.14), λ = 1 with
data (posterior TV 0.35).

WU's restructure under the pinball prior (``Φ`` and the fibre DP with shape factors): exact checks
on a 36-tree fibre (the Variant Π chain's stationary law from its transition matrix, TV 9e-8; with
``W`` dropped 0.23; ``log Z(P, 0)`` equal to the enumeration), and (slow) Gibbs draws and the WU
schedule against the enumeration.  Slow (``-m slow``): CGM + perturb prior-only and posterior, WU
Gibbs draws, WU schedule with Variant Π and with Gibbs (observed TV 0.010-0.019).
"""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import betabinom, poisson

import bdtree_jax as bd
from bdtree_jax.data import make_split_grid
from bdtree_jax.exact import enumerate_posterior, enumerate_trees, tree_frequencies, tv_distance
from bdtree_jax.kernels import cgm, edit, fibre_gibbs, perturb, pg, regrow, smc, wu
from bdtree_jax.kernels.base import SamplingAlgorithm
from bdtree_jax.likelihoods import DirichletMultinomial
from bdtree_jax.priors import PinballTables, TreePrior, log_tree_prior, make_tree_data, node_bounds, node_stats, pinball_shape
from bdtree_jax.driver import run_chains, trace_count
from bdtree_jax.tree import Tree, from_string

from helpers import TOY_X, TOY_Y_CLASS, TOY_Y_REG, chain_frequencies, fibre, stack_trees, stationary_tv, toy_problem

CUBE = np.array(list(itertools.product([0.0, 1.0], repeat=3)))
Y_CUBE = np.array([0, 1, 1, 0, 1, 0, 0, 1])
X, Y_CLASS, Y_REG = TOY_X, TOY_Y_CLASS, TOY_Y_REG
LIK = DirichletMultinomial(2, 1.0)

RATE, BALANCE = 3.0, 0.5  # P(K) = (0.077, 0.231, 0.347, 0.347) on 1..4; root balance at K = 4: (3/8, 1/4, 3/8)
PRIOR_TOL, POST_TOL = 0.03, 0.04


def _pinball(max_depth=3, rate=RATE, balance=BALANCE, max_leaves=4, **kw):
    return TreePrior(max_depth=max_depth, structure="pinball", pinball_rate=rate, pinball_balance=balance,
                     pinball_max_leaves=max_leaves, **kw)


def _p_size(rate, k_max):
    p = poisson.pmf(np.arange(k_max), rate)
    return p / p.sum()  # index K - 1


def _p_shape(balance, k):
    return betabinom.pmf(np.arange(k - 1), k - 2, balance, balance)  # index k_L - 1


def _leaf_counts(is_split):
    """(M, N) leaves below every slot of (M, N) heaps (numpy, bottom-up)."""
    is_split = np.asarray(is_split, bool)
    n = is_split.shape[-1]
    active = np.zeros_like(is_split)
    active[:, 0] = True
    for i in range((n - 1) // 2):
        active[:, 2 * i + 1] = active[:, 2 * i + 2] = active[:, i] & is_split[:, i]
    counts = (active & ~is_split).astype(int)
    for i in range((n - 1) // 2 - 1, -1, -1):
        counts[:, i] += counts[:, 2 * i + 1] + counts[:, 2 * i + 2]
    return counts


@functools.lru_cache(maxsize=None)
def _prior_only(config):
    """CGM at inverse temperature 0: the chain targets the prior alone (one algorithm per config,
    so runs share its compiled program)."""
    return SamplingAlgorithm(lambda key, data: cgm.init(key, data, config, beta=0.0), cgm.build_kernel(config),
                             lambda s, i: cgm.trace(s, i, config.trace_dtypes), cgm.draw)


# ----------------------------------------------------------------------------------------------
# a. the enumerated prior and the JAX prior


def test_enumerated_cube_prior_has_the_analytic_laws():
    """No dead ends on the cube: the unnormalised weights sum to 1, the size law is p_size and
    the root's balance law given K is p_shape(. | K), exactly."""
    prior = _pinball()
    trees = enumerate_trees(CUBE, LIK.point_stats(Y_CUBE), prior, LIK)
    assert len(trees) == 52  # 1 + 3 + 12 + (12 + 24): K = 1, 2, 3, 4
    lp = np.array([w for _, w, _ in trees])
    assert abs(logsumexp(lp)) < 1e-9
    grid = make_split_grid(CUBE)
    counts = _leaf_counts(stack_trees([s for s, _, _ in trees], grid.thresholds, 3).is_split)
    K, k_left = counts[:, 0], counts[:, 1]
    p = np.exp(lp)
    np.testing.assert_allclose([p[K == k].sum() for k in range(1, 5)], _p_size(RATE, 4), atol=1e-12)
    for k in (2, 3, 4):
        law = np.array([p[(K == k) & (k_left == j)].sum() for j in range(1, k)]) / p[K == k].sum()
        np.testing.assert_allclose(law, _p_shape(BALANCE, k), atol=1e-12)
    np.testing.assert_allclose(_p_shape(BALANCE, 4), [3 / 8, 1 / 4, 3 / 8])


def test_enumerated_prior_with_dead_ends_is_normalised_and_truncated():
    """On the 6-row data some generative runs dead-end: the weights sum to < 1, renormalised they
    sum to 1; K = 1, 2 are never blocked (the root always splits), so their ratio is p_size's;
    every tree respects K_max and max_depth."""
    for max_depth, k_max in [(2, 4), (3, 5)]:
        prior = _pinball(max_depth=max_depth, max_leaves=k_max, rate=2.0, balance=2.0)
        trees = enumerate_trees(X, LIK.point_stats(Y_CLASS), prior, LIK)
        lp = np.array([w for _, w, _ in trees])
        total = logsumexp(lp)
        assert -0.5 < total < -1e-3  # mass lost to dead ends
        post = enumerate_posterior(X, LIK.point_stats(Y_CLASS), prior, LIK, beta=0.0)
        assert sum(post.values()) == pytest.approx(1.0, abs=1e-12)
        grid = make_split_grid(X)
        counts = _leaf_counts(stack_trees([s for s, _, _ in trees], grid.thresholds, max_depth).is_split)
        K = counts[:, 0]
        assert K.max() == k_max
        size = np.array([np.exp(lp)[K == k].sum() for k in range(1, k_max + 1)])
        ps = _p_size(2.0, k_max)
        assert size[0] == pytest.approx(ps[0], abs=1e-12) and size[1] == pytest.approx(ps[1], abs=1e-12)
        assert np.all(size[2:] < ps[2:] - 1e-3)  # Z_K < 1 from K = 3 on


@pytest.mark.parametrize(
    "X_,y,max_depth,k_max,min_leaf_size,boxes",
    [
        (CUBE, Y_CUBE, 3, 4, 1, None),
        (X, Y_CLASS, 2, None, 1, None),
        (X, Y_CLASS, 3, 5, 2, None),
        (X, Y_CLASS, 2, None, 1, [{"x0": (1.5, 3.5)}]),
    ],
)
def test_jax_log_prior_matches_enumeration(X_, y, max_depth, k_max, min_leaf_size, boxes):
    """``log_tree_prior`` with the pinball tables (via ``cgm.init``, i.e. what CGM scores) equals the
    independent enumeration on every tree; trees with K > K_max or an invalid rule get -inf."""
    prior = _pinball(max_depth=max_depth, max_leaves=k_max, rate=1.7, balance=0.6, min_leaf_size=min_leaf_size)
    trees = enumerate_trees(X_, LIK.point_stats(y), prior, LIK, boxes=boxes)
    grid = make_split_grid(X_)
    box_side = None
    if boxes is not None:
        from bdtree_jax.priors import box_sides

        box_side = box_sides(boxes, grid.thresholds)
    data = make_tree_data(grid.bin(X_), y, prior, LIK, box_side=box_side, grid=grid)
    assert isinstance(data.split_prob, PinballTables)
    config = cgm.CGMConfig.from_prior(prior)
    score = jax.jit(jax.vmap(lambda t: cgm.init(None, data, config, t).log_prior))
    got = np.asarray(score(stack_trees([s for s, _, _ in trees], grid.thresholds, max_depth)))
    np.testing.assert_allclose(got, [w for _, w, _ in trees], rtol=1e-5, atol=1e-5)
    if X_ is CUBE:
        # a tree beyond K_max (K_max + 1 = 5 leaves) has prior 0; the same tree is fine with K_max = 5
        big = enumerate_trees(X_, LIK.point_stats(y), _pinball(max_leaves=5), LIK)
        extra = sorted(set(s for s, _, _ in big) - {s for s, _, _ in trees})
        assert len(extra) > 0
        assert np.all(np.isneginf(np.asarray(score(stack_trees(extra, grid.thresholds, max_depth)))))


def test_tables_travel_in_tree_data_and_cgm_default_is_unchanged():
    grid = make_split_grid(X)
    cgm_data = make_tree_data(grid.bin(X), Y_CLASS, TreePrior(max_depth=2), LIK, grid=grid)
    assert not isinstance(cgm_data.split_prob, PinballTables)
    a = make_tree_data(grid.bin(X), Y_CLASS, _pinball(max_depth=2, max_leaves=3), LIK, grid=grid).split_prob
    b = make_tree_data(grid.bin(X), Y_CLASS, _pinball(max_depth=2, max_leaves=None, rate=7.0, balance=3.0), LIK,
                       grid=grid).split_prob
    # the shapes depend on max_depth only (L = 4 leaves): other numbers reuse compiled programs
    assert [np.shape(x) for x in a] == [np.shape(x) for x in b] == [(7,), (5,), (5,), (5,)]
    np.testing.assert_array_equal(np.asarray(a.may_split), [1, 1, 1, 0, 0, 0, 0])
    assert np.isneginf(np.asarray(a.log_size)[[0, 4]]).all() and np.isfinite(np.asarray(b.log_size)[1:]).all()
    np.testing.assert_allclose(np.exp(np.asarray(b.log_size, float)[1:]), _p_size(7.0, 4), rtol=1e-6)
    k = np.repeat(np.arange(5), 5)
    k_left = np.tile(np.arange(5), 5)
    shape = np.exp(np.asarray(pinball_shape(b, k, k_left), float)).reshape(5, 5)
    for kk in range(5):  # BetaBinomial(k - 2, γ, γ) on 1..k-1, 0 elsewhere
        np.testing.assert_allclose(shape[kk, 1:kk], _p_shape(3.0, kk) if kk >= 2 else [], rtol=1e-6)
        assert shape[kk, 0] == 0 and np.all(shape[kk, kk:] == 0)
    # separable in float32 without cancellation: a large heap's shape law stays exact
    from bdtree_jax.priors import pinball_log_shape, pinball_tables

    big = pinball_tables(_pinball(max_depth=10, max_leaves=None, balance=0.3))
    ref = pinball_log_shape(0.3, 1024)
    for kk in (2, 37, 500, 1024):
        got = np.asarray(pinball_shape(big, kk, np.arange(1, kk)), float)
        np.testing.assert_allclose(got, ref[kk, 1:kk], atol=2e-4)
    # the default structure's log prior is the CGM98 one (same function, same call)
    t = Tree(*(jnp.asarray(v) for v in from_string("x0<=3.5(L,L)", grid.thresholds, 2)))
    leaf_id, _ = node_stats(t, cgm_data)
    lo, hi = node_bounds(t, leaf_id, cgm_data, 1)
    lp = float(log_tree_prior(t, lo, hi, cgm_data.split_prob, cgm_data.cut_cumwidth))
    assert lp == pytest.approx(np.log(0.95 / 2 / 5) + 2 * np.log(1 - 0.95 / 2), abs=1e-6)


# ----------------------------------------------------------------------------------------------
# b. prior-only sampling reproduces the pinball prior (and d. its negative controls)


def _prior_run(prior, seed):
    grid = make_split_grid(CUBE)
    data = make_tree_data(grid.bin(CUBE), Y_CUBE, prior, LIK, grid=grid)
    config = cgm.CGMConfig.from_prior(_pinball())
    traces, _ = run_chains(_prior_only(config), data, key=jax.random.key(seed), num_chains=8, num_iterations=20_000,
                           block_size=20_000)
    trees = Tree(*(a[:, 200:] for a in traces["tree"]))
    counts = _leaf_counts(trees.is_split.reshape(-1, trees.is_split.shape[-1]))
    return tree_frequencies(trees, grid.thresholds), counts[:, 0], counts[:, 1]


def _laws(K, k_left):
    size = np.bincount(K, minlength=5)[1:5] / K.size
    balance = np.bincount(k_left[K == 4], minlength=4)[1:4] / (K == 4).sum()
    return size, balance


def test_cgm_prior_only_reproduces_pinball_prior_and_controls_fail():
    """CGM at beta = 0 on the cube: tree frequencies within TV 0.03 of the enumerated prior, the
    size law within 0.015 of p_size and the root's balance law at K = 4 within 0.03 of
    BetaBinomial(2, γ, γ).  Negative controls, the same compiled program fed a wrong γ (5) or λ
    (2): TV and the law they change fail their tolerances."""
    prior = _pinball()
    exact = enumerate_posterior(CUBE, LIK.point_stats(Y_CUBE), prior, LIK, beta=0.0)
    freqs, K, k_left = _prior_run(prior, 0)
    n_traces = trace_count()
    assert set(freqs) <= set(exact)
    size, balance = _laws(K, k_left)
    tv = tv_distance(freqs, exact)
    print(f"prior-only TV {tv:.4f}; size {np.round(size, 4)}; balance at K=4 {np.round(balance, 4)}")
    assert tv <= PRIOR_TOL
    assert np.abs(size - _p_size(RATE, 4)).max() <= 0.015
    assert np.abs(balance - _p_shape(BALANCE, 4)).max() <= 0.03

    # negative controls: wrong balance, wrong rate (numbers in TreeData: no recompilation)
    freqs, K, k_left = _prior_run(_pinball(balance=5.0), 0)
    size, balance = _laws(K, k_left)
    tv_bal = tv_distance(freqs, exact)
    err_bal = np.abs(balance - _p_shape(BALANCE, 4)).max()
    freqs, K, k_left = _prior_run(_pinball(rate=2.0), 0)
    size, _ = _laws(K, k_left)
    tv_rate = tv_distance(freqs, exact)
    err_size = np.abs(size - _p_size(RATE, 4)).max()
    print(f"controls: wrong γ TV {tv_bal:.4f} balance error {err_bal:.4f}; wrong λ TV {tv_rate:.4f} "
          f"size error {err_size:.4f}")
    assert trace_count() == n_traces
    assert tv_bal > PRIOR_TOL and err_bal > 0.03
    assert tv_rate > PRIOR_TOL and err_size > 0.015


@pytest.mark.slow
def test_perturb_prior_only_reproduces_pinball_prior():
    """CGM + perturb (change of variable: the cube's features have one cut each) at beta = 0."""
    prior = _pinball()
    exact = enumerate_posterior(CUBE, LIK.point_stats(Y_CUBE), prior, LIK, beta=0.0)
    grid = make_split_grid(CUBE)
    data = make_tree_data(grid.bin(CUBE), Y_CUBE, prior, LIK, grid=grid)
    config = cgm.CGMConfig.from_prior(prior)
    pconfig = perturb.PerturbConfig.from_cgm(config, p_change_var=0.5)
    base = perturb.with_perturb(config, pconfig)
    algorithm = base._replace(init=lambda key, d: perturb.init(cgm.init(key, d, config, beta=0.0), pconfig))
    traces, _ = run_chains(algorithm, data, key=jax.random.key(1), num_chains=8, num_iterations=20_000,
                           block_size=20_000)
    trees = Tree(*(a[:, 200:] for a in traces["tree"]))
    freqs = tree_frequencies(trees, grid.thresholds)
    counts = _leaf_counts(trees.is_split.reshape(-1, trees.is_split.shape[-1]))
    size, balance = _laws(counts[:, 0], counts[:, 1])
    tv = tv_distance(freqs, exact)
    print(f"perturb prior-only TV {tv:.4f}; size {np.round(size, 4)}; balance {np.round(balance, 4)}")
    assert np.asarray(traces["perturb_accepted"]).mean() > 0.05
    assert tv <= PRIOR_TOL
    assert np.abs(size - _p_size(RATE, 4)).max() <= 0.015
    assert np.abs(balance - _p_shape(BALANCE, 4)).max() <= 0.03


# ----------------------------------------------------------------------------------------------
# c. the posterior with data (and d. negative controls)


def _posterior_run(algorithm, data, grid, iterations=30_000):
    traces, _ = run_chains(algorithm, data, key=jax.random.key(5), num_chains=16, num_iterations=iterations,
                           block_size=10_000)  # one program for both run lengths
    return chain_frequencies(traces, grid.thresholds, 500)


def test_cgm_matches_enumerated_pinball_posterior_and_control_fails():
    """CGM under the pinball prior vs the enumerated posterior (toy data, depth 2, 256 trees):
    TV <= 0.04.  The exact posteriors under the CGM98 prior, γ = 5 and λ = 1 are 0.17, 0.07 and
    0.36 away; the same compiled chain fed λ = 1 fails the tolerance (the wrong-γ control is the
    prior-only test's, where γ's effect is larger)."""
    prior = _pinball(max_depth=2, max_leaves=None)
    p = toy_problem("classification", prior=prior)
    grid, data, exact = p.grid, p.data, p.exact
    assert tv_distance(exact, toy_problem("classification", 2).exact) > 0.15
    algorithm = cgm.cgm(cgm.CGMConfig.from_prior(prior))
    freqs = _posterior_run(algorithm, data, grid)
    n_traces = trace_count()
    assert set(freqs) <= set(exact), "sampler visited a tree outside the prior's support"
    tv = tv_distance(freqs, exact)
    wrong = toy_problem("classification", prior=_pinball(max_depth=2, max_leaves=None, rate=1.0)).data
    tv_wrong = tv_distance(_posterior_run(algorithm, wrong, grid, 10_000), exact)
    print(f"posterior TV {tv:.4f}; control (λ = 1) TV {tv_wrong:.4f}")
    assert trace_count() == n_traces
    assert tv <= POST_TOL
    assert tv_wrong > POST_TOL


@pytest.mark.slow
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_perturb_matches_enumerated_pinball_posterior(task):
    """proposal="cgm+perturb" under the pinball prior (its ratio uses the full prior ratio)."""
    prior = _pinball(max_depth=2, max_leaves=None)
    p = toy_problem(task, prior=prior)
    grid, data, exact = p.grid, p.data, p.exact
    config = cgm.CGMConfig.from_prior(prior)
    freqs = _posterior_run(perturb.with_perturb(config, perturb.PerturbConfig.from_cgm(config)), data, grid)
    assert set(freqs) <= set(exact)
    tv = tv_distance(freqs, exact)
    print(f"perturb posterior ({task}) TV {tv:.4f}")
    assert tv <= POST_TOL


# ----------------------------------------------------------------------------------------------
# WU's restructure under the pinball prior (Φ with shape factors, the fibre DP)

# K = 4 leaves {0,2} {1} {3} {4,5} of the toy rows: a 36-tree fibre at depth 3 (tests/kernels/test_wu.py)
K4 = "x0<=3.5(x1<=4.5(L,L),x0<=4.5(L,L))"




def _wu_fibre(prior):
    p = toy_problem("classification", prior=prior)
    start = Tree(*(jnp.asarray(a) for a in from_string(K4, p.grid.thresholds, prior.max_depth)))
    names, log_prior = fibre(p, start)
    state = cgm.init(None, p.data, cgm.CGMConfig.from_prior(prior), tree=start)
    return p.grid, p.data, state, names, log_prior


@pytest.mark.slow
def test_wu_restructure_is_exact_on_the_fibre_under_pinball():
    """On the 36-tree fibre of a K = 4 tree (depth 3, γ = 0.4): the replayed sweep's log prior is
    the enumerated pinball weight of every fibre tree; q sums to 1 over the fibre; the Variant Π
    chain's exact stationary law (transition matrix from q and Φ) is π on the fibre (TV < 1e-4;
    with W dropped from Φ: TV > 0.05); the fibre DP's ``Z(P, 0)`` is the fibre's enumerated mass over
    ``p_size(K)`` (its draw is proportional to the same summands, so its law is π on the fibre)."""
    prior = _pinball(max_depth=3, max_leaves=None, balance=0.4)
    grid, data, state, names, log_prior = _wu_fibre(prior)
    assert len(names) == 36
    pi = np.exp(log_prior - logsumexp(log_prior))
    assert np.ptp(log_prior) > 1.0
    heaps = stack_trees(names, grid.thresholds, 3)
    groups = wu.group_codes(state, data)
    rc = wu.RestructureConfig(3, 1)
    u0 = jnp.zeros(heaps.is_split.shape[1])
    replay = jax.jit(jax.vmap(lambda t: wu._sweep(u0, None, t, jnp.array([False]), state, groups, data, rc)))
    replay = jax.device_get(jax.tree.map(lambda a: a[:, 0], replay(heaps)))
    assert replay.valid.all() and not replay.overflow.any()
    np.testing.assert_allclose(replay.log_prior, log_prior, atol=2e-5)
    q = np.exp(replay.log_q)
    np.testing.assert_allclose(q.sum(), 1.0, atol=1e-5)
    phi = np.asarray(wu._log_phi(replay, rc), float)
    tv_mh = stationary_tv(q, phi, pi)
    tv_bad = stationary_tv(q, np.asarray(wu._log_phi(replay, wu.RestructureConfig(3, 1, drop_w=True)), float), pi)
    K = 4
    gc = wu.RestructureConfig(3, 1, kind="auto", max_groups=4)
    log_z = float(jax.jit(lambda s: fibre_gibbs._fibre_dp(s, data, gc).log_z[0, 2**K - 1])(state))
    expected = logsumexp(log_prior) - np.log(_p_size(RATE, 8)[K - 1])
    print(f"WU pinball: Π stationary TV {tv_mh:.2e} (drop_w {tv_bad:.3f}); log Z {log_z:.5f} vs {expected:.5f}")
    assert tv_mh < 1e-4 and tv_bad > 0.05
    np.testing.assert_allclose(log_z, expected, atol=1e-5)


@pytest.mark.slow
def test_wu_gibbs_draws_are_pinball_prior_on_the_fibre():
    """20,000 fibre-Gibbs draws from the K = 4 tree are all accepted and within TV 0.03 of π on
    the fibre (observed 0.014); with the rule weights dropped (control) TV 0.116."""
    prior = _pinball(max_depth=3, max_leaves=None, balance=0.4)
    grid, data, state, names, log_prior = _wu_fibre(prior)
    pi = dict(zip(names, np.exp(log_prior - logsumexp(log_prior))))
    tv = {}
    for control in ("", "drop_rule"):
        gc = wu.RestructureConfig(3, 1, kind="gibbs", max_groups=8, gibbs_control=control)
        us = jax.vmap(lambda k: wu.draw_restructure(k, 3, "gibbs"))(jax.random.split(jax.random.key(2), 20_000))
        new, info = jax.device_get(jax.jit(jax.vmap(lambda u, gc=gc: wu.restructure_step(u, state, data, gc)))(us))
        freqs = tree_frequencies(new.tree, grid.thresholds)
        assert set(freqs) <= set(names) and info.accepted.all()
        tv[control] = tv_distance(freqs, pi)
    print(f"WU Gibbs draws on the fibre: TV {tv}")
    assert tv[""] <= 0.03 and tv["drop_rule"] > 0.05


@pytest.mark.slow
@pytest.mark.parametrize("restructure,max_groups", [("pi", 10), ("gibbs", 4)])
def test_wu_schedule_matches_enumerated_pinball_posterior(restructure, max_groups):
    """The WU schedule (2 CGM steps, 1 restructure, 2 CGM steps) under the pinball prior vs the
    enumerated posterior (toy data, depth 2): TV <= 0.04."""
    prior = _pinball(max_depth=2, max_leaves=None)
    p = toy_problem("classification", prior=prior)
    grid, data, exact = p.grid, p.data, p.exact
    algorithm = wu.wu(wu.WUConfig(cgm.CGMConfig.from_prior(prior), n_local=2, restructure=restructure,
                                  max_groups=max_groups))
    traces, _ = run_chains(algorithm, data, key=jax.random.key(9), num_chains=16, num_iterations=6000,
                           block_size=6000)
    freqs = chain_frequencies(traces, grid.thresholds, 200)
    assert set(freqs) <= set(exact)
    tv = tv_distance(freqs, exact)
    rate = traces["restructure_accepted"].mean()
    print(f"WU ({restructure}) posterior TV {tv:.4f}, restructure acceptance {rate:.3f}")
    assert traces["restructure_accepted"].mean() > 0.05
    assert tv <= POST_TOL


# ----------------------------------------------------------------------------------------------
# e. plumbing and errors


def test_sample_and_estimators_pass_structure(tmp_path):
    kw = dict(max_depth=2, num_warmup=50, num_samples=300, num_chains=1, seed=0, progress=False)
    post = bd.sample(X, Y_CLASS, structure="pinball", pinball_rate=1.5, pinball_balance=0.7, **kw)
    prior = post.prior
    assert (prior.structure, prior.pinball_rate, prior.pinball_balance, prior.max_leaves) == ("pinball", 1.5, 0.7, 4)
    # the recorded log prior is the pinball prior's (unnormalised, as the enumeration's weights)
    exact = {s: w for s, w, _ in enumerate_trees(X, LIK.point_stats(Y_CLASS), prior, LIK)}
    for s, v in list(zip(post.tree_strings(), np.asarray(post.stats["log_prior"]).ravel()))[:50]:
        assert v == pytest.approx(exact[s], abs=1e-4)
    clf = bd.BayesianTreeClassifier(structure="pinball", pinball_max_leaves=3, **kw)
    assert clf.get_params()["structure"] == "pinball" and clf.get_params()["pinball_max_leaves"] == 3
    assert clf.fit(X, Y_CLASS).posterior_.stats["n_leaves"].max() <= 3
    reg = bd.BayesianTreeRegressor(structure="pinball", pinball_balance=2.0)
    assert reg.get_params()["pinball_balance"] == 2.0
    from bdtree_jax.cli import load_config

    path = tmp_path / "c.yaml"
    path.write_text("dataset: iris\nstructure: pinball\npinball_rate: 4.0\npinball_balance: 0.5\n"
                    "pinball_max_leaves: 8\n")
    config = load_config(path)
    assert (config["structure"], config["pinball_rate"], config["pinball_max_leaves"]) == ("pinball", 4.0, 8)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(structure="Pinball"), r"structure must be one of \('cgm', 'pinball'\)"),
        (dict(structure="pinball", pinball_rate=0.0), "pinball_rate must be a finite number > 0"),
        (dict(structure="pinball", pinball_rate=float("nan")), "pinball_rate must be a finite number > 0"),
        (dict(structure="pinball", pinball_balance=-1), "pinball_balance must be a finite number > 0"),
        (dict(structure="pinball", pinball_max_leaves=5),
         r"pinball_max_leaves=5 does not fit .* at most 2\*\*max_depth = 4"),
        (dict(structure="pinball", pinball_max_leaves=0), "pinball_max_leaves must be None or an integer >= 1"),
        (dict(structure="pinball", pinball_max_leaves=2.5), "pinball_max_leaves must be None or an integer >= 1"),
        (dict(pinball_rate=2.0), "pinball_rate is an option of structure='pinball'"),
        (dict(pinball_max_leaves=3), "pinball_max_leaves is an option of structure='pinball'"),
        (dict(structure="pinball", alpha=0.5), "alpha is a parameter of structure='cgm'"),
        (dict(structure="pinball", beta=2.0), "beta is a parameter of structure='cgm'"),
        (dict(structure="pinball", proposal="regrow"), "structure='pinball' needs proposal in"),
        (dict(structure="pinball", proposal="cgm+regrow"), "structure='pinball' needs proposal in"),
        (dict(structure="pinball", initial_tree="x0<=3.5(L,L)"),
         "structure='pinball' does not apply with initial_tree"),
        (dict(structure="pinball", method="smc"), "structure='pinball' is supported by method='cgm'"),
        (dict(structure="pinball", method="pg"), "structure='pinball' is supported by method='cgm'"),
        (dict(structure="pinball", method="pcfg"), "structure='pinball' is supported by method='cgm'"),
        (dict(structure="pinball", method="hmc-df"), "structure='pinball' is supported by method='cgm'"),
    ],
)
def test_sample_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bd.sample(X, Y_CLASS, max_depth=2, num_warmup=1, num_samples=1, num_chains=1, progress=False, **kwargs)


def test_prior_and_estimator_errors():
    with pytest.raises(ValueError, match=r"structure must be one of \('cgm', 'pinball'\); got 'pin'"):
        TreePrior(structure="pin")
    with pytest.raises(ValueError, match="pinball_rate must be a finite number > 0; got inf"):
        TreePrior(structure="pinball", pinball_rate=float("inf"))
    with pytest.raises(ValueError, match="pinball_balance must be a finite number > 0; got True"):
        TreePrior(structure="pinball", pinball_balance=True)
    with pytest.raises(ValueError, match="max_depth=3 holds at most 2\\*\\*max_depth = 8 leaves"):
        TreePrior(max_depth=3, structure="pinball", pinball_max_leaves=9)
    assert TreePrior(max_depth=3, structure="pinball").max_leaves == 8
    with pytest.raises(ValueError, match="structure='pinball' is supported by method='cgm'"):
        bd.BayesianTreeRegressor("smc", structure="pinball", max_depth=2, num_samples=1, num_chains=1).fit(X, Y_REG)


def test_kernels_that_draw_from_the_cgm_prior_refuse_pinball_tables():
    """Called directly (below the sampling API), every kernel that draws subtrees or rules from the
    CGM98 generative process raises a ValueError naming ``structure`` (at trace time, before any
    work)."""
    prior = _pinball(max_depth=2, max_leaves=None)
    data = toy_problem("classification", prior=prior).data
    config = cgm.CGMConfig.from_prior(prior)
    state = cgm.init(None, data, config)
    key = jax.random.key(0)
    calls = {
        "regrow": lambda: regrow.step_with_uniforms(None, state, data, regrow.RegrowConfig(2, 1)),
        "regrow_subtree": lambda: regrow.regrow_subtree(state.tree, state.leaf_id, state.lo, state.hi, 0, None,
                                                        data, 1),
        "smc": lambda: smc.init(data, smc.SMCConfig(2, 1, 4)),
        "pg": lambda: pg.step(key, state, data, pg.PGConfig(2, 1, 4)),
        "edit": lambda: edit.step_with_uniforms(None, None, edit.EditData(data, state.tree),
                                                edit.EditConfig(2, 1, mean_edits=1.0, max_edits=2)),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match="does not support structure='pinball'"):
            call()
