"""Monotone BART (:mod:`bdtree_jax.kernels.bart_monotone`): the estimators' checks of
``monotonic_cst``; one tree with fixed sigma against the exact posterior over trees and leaf values
(enumeration of the trees, a float64 Monte Carlo integral over each tree's constrained leaf
values); planted-error twins; Geweke's test of the sum-of-trees sweep; every posterior draw's
prediction monotone."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy.stats import multivariate_normal

import bdtree_jax as bd
from bdtree_jax.data import make_split_grid
from bdtree_jax.driver import run_chains
from bdtree_jax.exact import enumerate_trees, tree_frequencies, tv_distance
from bdtree_jax.kernels import bart
from bdtree_jax.kernels import bart_monotone as bm
from bdtree_jax.likelihoods import BARTLeafNormal, NormalMeanShift
from bdtree_jax.posterior.bart import sum_of_trees
from bdtree_jax.priors import TreePrior, make_tree_data
from bdtree_jax.tree import Tree, from_string, n_leaves, tree_depth

MONO = (1, 0)  # nondecreasing in x0, x1 free
TAU2 = 1.0


def _tiny(n_trees=1, max_depth=2, n=6, seed=3, beta=1.0, sample_sigma=False):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2)).round(3)
    grid = make_split_grid(X)
    prior = TreePrior(max_depth=max_depth, alpha=0.95, beta=beta, valid_cuts="ancestors")
    td = make_tree_data(grid.bin(X), np.zeros(n), prior, BARTLeafNormal(np.float32(1.0), np.float32(TAU2)),
                        grid=grid)
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    data = bart.BARTData(td, jnp.zeros(n, jnp.float32), f32(10.0), f32(1.0), f32(1.0), f32(1.0))
    config = bart.BARTConfig(n_trees, max_depth, sample_sigma=sample_sigma, incremental=False)
    return X, grid, prior, data, config


# ----------------------------------------------------------------------------------------------
# the exact posterior of one monotone tree, independent of the kernel's code


def _cells(tree, node=0, lo=(0, 0), hi=(10**6, 10**6)):
    """{leaf slot: (lo, hi)} bin-space cells of a numpy heap tree (``bin <= cut`` goes left)."""
    if not tree.is_split[node]:
        return {node: (lo, hi)}
    f, c = int(tree.feature[node]), int(tree.cut[node])
    lo_r, hi_l = list(lo), list(hi)
    hi_l[f], lo_r[f] = c, c + 1
    return {**_cells(tree, 2 * node + 1, lo, tuple(hi_l)), **_cells(tree, 2 * node + 2, tuple(lo_r), hi)}


def _orders(cells, mono):
    """[(a, b)]: leaf a's value must be <= leaf b's (a below b in a +1 feature, overlapping in the other)."""
    out = []
    for a, (lo_a, hi_a) in cells.items():
        for b, (lo_b, hi_b) in cells.items():
            for j, c in enumerate(mono):
                others = all(max(lo_a[f], lo_b[f]) <= min(hi_a[f], hi_b[f]) for f in range(len(mono)) if f != j)
                if c and others and (hi_a[j] < lo_b[j] if c > 0 else hi_b[j] < lo_a[j]):
                    out.append((a, b))
    return out


def exact_posterior(X, grid, prior, y, mono, sigma2=1.0, draws=150_000, seed=0):
    """Exact ``p(T | y)`` ({tree string: p}) and posterior mean and second moment of ``f(x_i)`` at
    the rows, under ``p(T, mu) ∝ p_CGM(T) N(mu; 0, tau2 I) 1{mu in C(T)}``: per tree
    ``p_CGM(T) prod_l m_l P(mu in C(T))`` with ``m_l`` each leaf's conjugate marginal (scipy's
    MVN) and ``mu_l`` independent from their conjugate posteriors; ``P`` and the truncated
    moments by a float64 Monte Carlo with ``draws`` common normals (relative error ~ 1e-3)."""
    z = np.random.default_rng(seed).standard_normal((draws, 2**prior.max_depth))
    trees = enumerate_trees(X, np.zeros((len(y), 3)), prior, NormalMeanShift(nu=3.0, lam=1.0, a=1.0, mu_bar=0.0))
    bins = grid.bin(X)
    log_post, m1, m2 = [], [], []
    for s, log_prior, _ in trees:
        cells = _cells(from_string(s, grid.thresholds, prior.max_depth))
        slots = sorted(cells)
        leaf = np.zeros(len(y), int)
        for node, (lo, hi) in cells.items():
            leaf[np.all((bins >= lo) & (bins <= hi), axis=1)] = node
        log_m, mean, sd = 0.0, [], []
        for node in slots:
            r = y[leaf == node].astype(float)
            log_m += multivariate_normal(np.zeros(len(r)), sigma2 * np.eye(len(r)) + TAU2).logpdf(r) if len(r) else 0
            prec = len(r) / sigma2 + 1.0 / TAU2
            mean.append(r.sum() / sigma2 / prec)
            sd.append(prec**-0.5)
        mu = np.array(mean) + np.array(sd) * z[:, : len(slots)]
        ok = np.ones(draws, bool)
        for a, b in _orders(cells, mono):
            ok &= mu[:, slots.index(a)] <= mu[:, slots.index(b)]
        kept = mu[ok]
        log_post.append(log_prior + log_m + np.log(ok.mean()))
        at_rows = np.array([slots.index(v) for v in leaf])
        m1.append(kept.mean(0)[at_rows])
        m2.append((kept**2).mean(0)[at_rows])
    p = np.exp(np.array(log_post) - np.max(log_post))
    p /= p.sum()
    return {s: float(q) for (s, _, _), q in zip(trees, p)}, p @ np.array(m1), p @ np.array(m2)


Y = np.array([0.3, -1.1, 0.8, 1.9, -0.4, 1.2], np.float32)
TV_TOL, MOMENT_TOL = 0.05, 0.04
#: the slow job's longer runs (30,000 sweeps per chain): tighter tolerances, for the planted errors
LONG_TV_TOL, LONG_MOMENT_TOL = 0.025, 0.01


def _chain(data, config, grid, X, num_iterations, mono=MONO, seed=0):
    """16 chains of one monotone tree; (tree frequencies, mean and second moment of f at the rows,
    every draw's f on a grid along x0 at three x1) after 500 warm-up sweeps."""
    traces, _ = run_chains(bm.bart_monotone(config, mono), data, key=jax.random.key(seed), num_chains=16,
                           num_iterations=num_iterations, block_size=num_iterations // 2)
    kept = Tree(*(a[:, 500:, 0] for a in traces["tree"]))
    draws = Tree(*(a[:, 500:].reshape((-1,) + a.shape[2:]) for a in traces["tree"]))
    values = jnp.asarray(traces["leaf_values"][:, 500:].reshape(-1, *traces["leaf_values"].shape[2:]))
    line = np.stack([np.tile(np.linspace(-0.2, 1.2, 15), 3), np.repeat([0.1, 0.5, 0.9], 15)], 1)
    f = np.asarray(sum_of_trees(draws, values, jnp.asarray(grid.bin(np.concatenate([X, line])))), np.float64)
    f, along = f[:, : len(X)], f[:, len(X):].reshape(-1, 3, 15)
    return tree_frequencies(kept, grid.thresholds), f.mean(0), (f**2).mean(0), along


def _errors(freq, m1, m2, exact):
    p, e1, e2 = exact
    return tv_distance(freq, p), float(max(np.max(np.abs(m1 - e1)), np.max(np.abs(m2 - e2))))


def test_single_monotone_tree_matches_exact_posterior():
    """M = 1, sigma2 = 1, nondecreasing in x0 (x1 free), depth <= 2 on 6 rows (271 trees, <= 4
    leaves): the sampled trees must follow the exact ``p(T | y)`` (TV <= 0.04) and the posterior
    mean and second moment of f(x_i) match (within 0.04); every draw's function is nondecreasing
    along x0.  The unconstrained posterior is far from it (the data decrease in x0 at rows 1 and
    4): its TV to the monotone one is checked to exceed the tolerance, so the test has power."""
    X, grid, prior, data, config = _tiny()
    data = data._replace(y=jnp.asarray(Y))
    exact = exact_posterior(X, grid, prior, Y, MONO)
    free = exact_posterior(X, grid, prior, Y, (0, 0), draws=1000)
    freq, m1, m2, along = _chain(data, config, grid, X, 6_000)
    tv, err = _errors(freq, m1, m2, exact)
    print(f"monotone tree vs exact: TV {tv:.4f}, max moment error {err:.4f}; "
          f"unconstrained vs monotone exact: TV {tv_distance(free[0], exact[0]):.3f}")
    assert tv <= TV_TOL and err <= MOMENT_TOL, (tv, err)
    assert tv_distance(free[0], exact[0]) > 3 * TV_TOL
    assert np.all(np.diff(along, axis=-1) >= 0)


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_single_monotone_tree_long_run_tight():
    """The exact test with 16 chains x 30,000 sweeps: TV <= 0.025 and moments within 0.01
    (observed 0.013 and 0.002), the tolerances the planted errors below must miss."""
    X, grid, prior, data, config = _tiny()
    data = data._replace(y=jnp.asarray(Y))
    exact = exact_posterior(X, grid, prior, Y, MONO, draws=400_000)
    tv, err = _errors(*_chain(data, config, grid, X, 30_000)[:3], exact)
    print(f"long run: TV {tv:.4f}, max moment error {err:.4f}")
    assert tv <= LONG_TV_TOL and err <= LONG_MOMENT_TOL, (tv, err)


def _no_truncation(mean, sd, lo, hi, u):
    return _REAL_TN(mean, sd, -jnp.inf, jnp.inf, u)


_REAL_TN = bm.truncated_normal


@pytest.mark.xla_optimized
@pytest.mark.slow
@pytest.mark.parametrize("planted", ["truncation dropped", "constraint left out of the acceptance",
                                     "proposal's truncated mass left out of the acceptance"])
def test_single_monotone_tree_planted_errors_fail(planted, monkeypatch):
    """The exact test above must fail with a planted error (monkeypatched; a fresh configuration
    so no compiled program is shared): the leaf update's truncation dropped (untruncated
    conjugate draws), the joint proposal accepted without the constraint's indicator, or without
    the masses of the truncated normals it draws the new values from (its density): 30,000
    sweeps per chain must miss the long run's tolerances.  Observed (TV / moment error): 0.033 /
    0.071, 0.41 / 0.19 (at 8,000 sweeps), 0.044 / 0.027 (30,000)."""
    X, grid, prior, data, config = _tiny()
    data = data._replace(y=jnp.asarray(Y))
    config = dataclasses.replace(config, num_particles=7)  # unused by grow-prune: a distinct program
    if planted == "truncation dropped":
        monkeypatch.setattr(bm, "truncated_normal", _no_truncation)
    elif planted == "constraint left out of the acceptance":
        monkeypatch.setattr(bm, "satisfies", lambda rel, values: jnp.bool_(True))
    else:
        monkeypatch.setattr(bm, "log_mass", lambda mean, sd, lo, hi: jnp.zeros_like(mean * lo))
    try:
        exact = exact_posterior(X, grid, prior, Y, MONO, draws=400_000)
        freq, m1, m2, _ = _chain(data, config, grid, X, 30_000)
    finally:
        bm.bart_monotone.cache_clear()
    tv, err = _errors(freq, m1, m2, exact)
    print(f"planted error {planted}: TV {tv:.4f}, max moment error {err:.4f}")
    assert tv > LONG_TV_TOL or err > LONG_MOMENT_TOL, (tv, err)


# ----------------------------------------------------------------------------------------------
# Geweke's test of the sum-of-trees sweep (sigma2 drawn)

GEWEKE_NAMES = ("mean leaves", "mean depth", "log sigma2", "f(x_0)^2", "sum mu", "(sum mu)^2", "f(hi) - f(lo)")
G_CHAINS, G_ITERS, G_BATCHES, G_PRIOR = 16, 2000, 10, 10_000


def _geweke_stats(state, lo, hi):
    t = state.trees.tree
    s = jnp.sum(state.leaf_values)
    return jnp.stack([
        jnp.mean(jax.vmap(n_leaves)(t).astype(jnp.float32)), jnp.mean(jax.vmap(tree_depth)(t).astype(jnp.float32)),
        jnp.log(state.sigma2), state.fit[0] ** 2, s, s * s, state.fit[hi] - state.fit[lo],
    ])


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_monotone_geweke_getting_it_right():
    """Geweke (2004): a monotone sweep alternated with ``y ~ p(y | trees, leaves, sigma)`` must
    leave the constrained prior invariant (:func:`~bdtree_jax.kernels.bart_monotone.prior_draw`,
    rejection from the joint prior): 16 chains x 2,000 sweeps of 3 trees on 12 rows vs 10,000
    forward draws; every |z| < 4.  ``f(hi) - f(lo)``: the rows of largest and smallest x0 (their
    x1 differ, so it may be negative).  Observed: |z| <= 1.48 (mean leaves -1.48)."""
    X, _, _, data, config = _tiny(n_trees=3, max_depth=3, n=12, seed=0, sample_sigma=True)
    lo, hi = int(np.argmin(X[:, 0])), int(np.argmax(X[:, 0]))

    def chain(key):
        k0, k1 = jax.random.split(key)
        state = bm.prior_draw(k0, data, config, MONO)

        def body(carry, k):
            state, d, _ = bm.geweke_step(k, *carry, config, MONO)
            return (state, d), _geweke_stats(state, lo, hi)

        return jax.lax.scan(body, (state, data), jax.random.split(k1, G_ITERS))[1]

    k_chains, k_prior = jax.random.split(jax.random.key(0))
    sc = np.asarray(jax.jit(jax.vmap(chain))(jax.random.split(k_chains, G_CHAINS)), np.float64)
    prior = jax.jit(jax.vmap(lambda k: _geweke_stats(bm.prior_draw(k, data, config, MONO), lo, hi)))
    mc = np.asarray(prior(jax.random.split(k_prior, G_PRIOR)), np.float64)
    batches = sc.reshape(G_CHAINS * G_BATCHES, G_ITERS // G_BATCHES, -1).mean(1)
    se = np.sqrt(batches.var(0, ddof=1) / len(batches) + mc.var(0, ddof=1) / len(mc))
    z = (sc.mean((0, 1)) - mc.mean(0)) / se
    report = ", ".join(f"{n}: z={v:+.2f}" for n, v in zip(GEWEKE_NAMES, z))
    print(report)
    assert np.all(np.abs(z) < 4.0), report


# ----------------------------------------------------------------------------------------------
# the estimators


def _frame(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"dose": rng.uniform(size=n), "age": rng.uniform(size=n), "site": rng.uniform(size=n)})
    y = np.sqrt(X["dose"].to_numpy()) + 0.3 * np.sin(6 * X["age"].to_numpy()) + 0.1 * rng.normal(size=n)
    return X, y


@pytest.mark.slow  # ~6 s of compiling; the docs page's example runs the same path in CI
@pytest.mark.filterwarnings("ignore::bdtree_jax.ConvergenceWarning")
def test_regressor_predictions_monotone_for_every_draw():
    """Every posterior draw's prediction is nondecreasing in ``dose`` along lines that vary it
    alone (inside and outside the training range), with the constraint given by name."""
    X, y = _frame()
    model = bd.BARTRegressor(4, num_warmup=20, num_samples=20, num_chains=1, max_depth=2,
                             monotonic_cst={"dose": 1}).fit(X, y)
    line = np.linspace(-0.5, 1.5, 25)
    grid = pd.DataFrame({"dose": np.tile(line, 4), "age": np.repeat(X["age"][:4], 25).to_numpy(),
                         "site": np.repeat(X["site"][:4], 25).to_numpy()})
    draws = np.asarray(model.posterior_.predict_draws(grid)).reshape(-1, 4, 25)
    assert np.all(np.diff(draws, axis=-1) >= -1e-6 * np.abs(draws).max())


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::bdtree_jax.ConvergenceWarning")
def test_classifier_probabilities_monotone_for_every_draw():
    """Probit BART nonincreasing in x0: every draw's P(y = 1 | x) along x0."""
    X, y = _frame()
    model = bd.BARTClassifier(8, num_warmup=20, num_samples=20, num_chains=1, max_depth=3,
                              monotonic_cst=[-1, 0, 0]).fit(X.to_numpy(), (y < 0.7).astype(int))
    line = np.linspace(-0.5, 1.5, 25)
    grid = np.stack([np.tile(line, 4), np.repeat(X["age"][:4], 25), np.repeat(X["site"][:4], 25)], 1)
    f = np.asarray(model.posterior_.predict_draws(grid)).reshape(-1, 4, 25)
    assert np.all(np.diff(f, axis=-1) <= 1e-6)


@pytest.mark.parametrize("cst,X_kind,extra,match", [
    ([1, 0], "array", {}, "one entry per feature"),
    ([2, 0, 0], "array", {}, "monotonic_cst must be"),
    ("increasing", "array", {}, "monotonic_cst must be"),
    ({"dose": 1}, "array", {}, "needs X as a DataFrame"),
    ({"dosage": 1}, "frame", {}, "not in X"),
    ({"dose": 0.5}, "frame", {}, "monotonic_cst must be"),
    ([1, 0, 0], "array", {"tree_sampler": "pg"}, "tree_sampler='pg'"),
    ({"site": 1}, "categorical", {}, "categorical feature"),
    ({"dose": 1}, "categorical", {}, "categorical features or missing values"),
])
def test_bad_monotonic_cst_raises_before_compiling(cst, X_kind, extra, match):
    X, y = _frame()
    if X_kind == "array":
        X = X.to_numpy()
    elif X_kind == "categorical":
        X = X.assign(site=pd.Categorical(np.where(X["site"] > 0.5, "a", "b")))
    with pytest.raises(ValueError, match=match):
        bd.BARTRegressor(4, num_warmup=1, num_samples=1, monotonic_cst=cst, **extra).fit(X, y)
