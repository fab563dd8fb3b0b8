"""``valid_cuts="ancestors"``: BART's rule availability (a node's cuts are those its ancestors'
rules leave; ``min_leaf_size`` truncates the prior).  Bounds against a direct computation, CGM,
Particle Gibbs and a one-tree BART sweep against exact enumeration, the batched BART sweep
against the tree-by-tree chain, and the samplers that do not support it raise.  (The incremental
CGM state against a full re-score: ``tests/kernels/test_cgm.py``.)"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bdtree_jax.data import make_split_grid
from bdtree_jax.exact import enumerate_posterior, enumerate_trees, tree_frequencies, tv_distance
from bdtree_jax.kernels import bart, cgm, pg
from bdtree_jax.likelihoods import BARTLeafNormal, DirichletMultinomial
from bdtree_jax.priors import TreePrior, ancestor_bounds, make_tree_data, regrow_subtree
from bdtree_jax.problem.bart import build_bart_problem
from bdtree_jax.driver import run_chains
from bdtree_jax.tree import Tree, leaf_index, leaf_nodes

from helpers import chain_frequencies

CHAINS, ITERS, BURN = 16, 30_000, 500


def _reference_bounds(tree, cut_count):
    """Per node, each feature's [lo, hi) after its ancestors' rules (plain Python)."""
    is_split, feature, cut = (np.asarray(a) for a in tree)
    n = len(is_split)
    lo = np.zeros((n, len(cut_count)), int)
    hi = np.zeros((n, len(cut_count)), int)

    def rec(i, l, h):
        lo[i], hi[i] = l, h
        if is_split[i]:
            f, c = feature[i], cut[i]
            hl, lr = h.copy(), l.copy()
            hl[f], lr[f] = min(h[f], c), max(l[f], c + 1)
            rec(2 * i + 1, l, hl)
            rec(2 * i + 2, lr, h)

    rec(0, np.zeros(len(cut_count), int), np.asarray(cut_count, int))
    return lo, hi


def _problem(max_depth=4, min_leaf_size=1, n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 6, size=(n, 3)).astype(float)  # ties: many cuts leave a node's rows on one side
    y = (X[:, 0] + rng.normal(size=n) > 2.5).astype(int)
    prior = TreePrior(max_depth=max_depth, min_leaf_size=min_leaf_size, valid_cuts="ancestors")
    grid = make_split_grid(X)
    lik = DirichletMultinomial(2)
    return X, y, grid, make_tree_data(grid.bin(X), y, prior, lik, grid=grid), prior


def test_bounds_are_the_ancestors_ranges_and_regrow_keeps_them():
    """``ancestor_bounds`` equals a recursive computation, and the bounds ``regrow_subtree``
    returns with the prior draws it grows equal ``ancestor_bounds`` of the drawn trees."""
    X, y, grid, data, prior = _problem()
    config = cgm.CGMConfig.from_prior(prior)
    stump = cgm.init(None, data, config)
    N = stump.tree.is_split.shape[0]

    @jax.jit
    def draws(keys):
        def one(key):
            tree, leaf_id, lo, hi = regrow_subtree(stump.tree, stump.leaf_id, stump.lo, stump.hi, jnp.int32(0),
                                                   jax.random.uniform(key, (N, 3)), data, 1)
            return tree, leaf_id, lo, hi, ancestor_bounds(tree, data.cut_count), leaf_index(tree, data.bins)

        return jax.vmap(one)(keys)

    trees, leaf_ids, los, his, (got_los, got_his), want_ids = jax.tree.map(
        np.asarray, draws(jax.random.split(jax.random.key(0), 30)))
    sizes = []
    for i in range(30):
        tree = Tree(*(a[i] for a in trees))
        sizes.append(int(np.asarray(leaf_nodes(tree)).sum()))
        want_lo, want_hi = _reference_bounds(tree, grid.n_cuts)
        active = np.asarray(leaf_nodes(tree) | tree.is_split)
        for got, want in ((los[i], want_lo), (his[i], want_hi), (got_los[i], want_lo), (got_his[i], want_hi)):
            np.testing.assert_array_equal(got[active], want[active])
        np.testing.assert_array_equal(leaf_ids[i], want_ids[i])
    assert max(sizes) >= 4  # the draws did grow trees


@pytest.mark.parametrize("min_leaf_size,max_depth", [(1, 2), (2, 3)])
def test_enumeration_truncates_and_differs_from_data_cuts(toy_data, min_leaf_size, max_depth):
    """The enumerated support keeps only trees whose leaves hold >= min_leaf_size rows, and the
    posterior is not the CGM98 one (else the sampler tests below could not tell them apart)."""
    X, y, _ = toy_data
    lik = DirichletMultinomial(2)
    kw = dict(max_depth=max_depth, alpha=0.95, beta=1.0, min_leaf_size=min_leaf_size)
    anc = enumerate_posterior(X, lik.point_stats(y), TreePrior(valid_cuts="ancestors", **kw), lik)
    dat = enumerate_posterior(X, lik.point_stats(y), TreePrior(**kw), lik)
    assert abs(sum(anc.values()) - 1.0) < 1e-9
    assert tv_distance(anc, dat) > 0.1
    grid = make_split_grid(X)
    from bdtree_jax.tree import from_string

    for s in anc:
        t = Tree(*(jnp.asarray(a) for a in from_string(s, grid.thresholds, max_depth)))
        assert np.bincount(np.asarray(leaf_index(t, jnp.asarray(grid.bin(X))))).max(initial=0) > 0
        counts = np.bincount(np.asarray(leaf_index(t, jnp.asarray(grid.bin(X)))), minlength=len(t.is_split))
        assert counts[np.asarray(leaf_nodes(t))].min() >= min_leaf_size


@pytest.mark.xla_optimized
@pytest.mark.parametrize(
    "task,min_leaf_size,max_depth,incremental",
    [("classification", 1, 2, True), pytest.param("regression", 2, 2, True, marks=pytest.mark.slow),
     pytest.param("classification", 1, 2, False, marks=pytest.mark.slow)],
)
def test_cgm_matches_enumeration(toy_problem, task, min_leaf_size, max_depth, incremental):
    """16 chains x 30,000 CGM steps against the enumerated posterior: TV <= 0.04 (observed
    0.014 / 0.004 / 0.014; the CGM98 posterior is 0.17-0.28 away), both kernel variants.  Without
    the truncation, or with children inheriting their parent's bounds, it fails."""
    p = toy_problem(task, max_depth, min_leaf_size=min_leaf_size, valid_cuts="ancestors")
    algorithm = cgm.cgm(cgm.CGMConfig.from_prior(TreePrior(max_depth=max_depth, min_leaf_size=min_leaf_size,
                                                           valid_cuts="ancestors"), incremental=incremental))
    traces, _ = run_chains(algorithm, p.data, key=jax.random.key(7), num_chains=CHAINS, num_iterations=ITERS,
                           block_size=ITERS, chain_method="loop" if incremental else "vmap")
    freqs = chain_frequencies(traces, p.grid.thresholds, BURN)
    assert set(freqs) <= set(p.exact), "a tree outside the truncated prior's support"
    tv = tv_distance(freqs, p.exact)
    print(f"CGM {task} m={min_leaf_size} incremental={incremental}: TV {tv:.4f}")
    assert tv <= 0.04


def test_particle_gibbs_matches_enumeration(toy_problem):
    """Conditional SMC with the prior proposal: particles whose split leaves a leaf below
    min_leaf_size weigh 0.  16 chains x 4,000 sweeps: TV <= 0.04 (observed 0.004); without that
    weight the chain visits trees outside the support."""
    p = toy_problem("classification", 2, min_leaf_size=2, valid_cuts="ancestors")
    algorithm = pg.particle_gibbs(pg.PGConfig(2, 2, 10, "prior"))
    traces, _ = run_chains(algorithm, p.data, key=jax.random.key(3), num_chains=16, num_iterations=4000,
                           block_size=4000)
    freqs = chain_frequencies(traces, p.grid.thresholds, 100)
    assert set(freqs) <= set(p.exact)
    tv = tv_distance(freqs, p.exact)
    print(f"PG: TV {tv:.4f}")
    assert tv <= 0.04


def _tiny_bart(valid_cuts, n_trees=1, n=6, seed=3, sample_sigma=False, sampler="grow-prune"):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2)).round(3)
    grid = make_split_grid(X)
    prior = TreePrior(max_depth=2, alpha=0.95, beta=1.0, valid_cuts=valid_cuts)
    lik = BARTLeafNormal(np.float32(1.0), np.float32(1.0))
    td = make_tree_data(grid.bin(X), np.zeros(n), prior, lik, grid=grid)
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    data = bart.BARTData(td, jnp.zeros(n, jnp.float32), f32(10.0), f32(1.0), f32(1.0), f32(1.0))
    config = bart.BARTConfig(n_trees, 2, sampler, num_particles=5, sample_sigma=sample_sigma, record_trees=True)
    return X, grid, prior, data, config


@pytest.mark.slow
def test_one_tree_bart_sweep_matches_enumeration():
    """M = 1, sigma2 fixed: the batched grow-prune sweep's trees follow p(T) p(y | T) under the
    ancestors prior (scipy's MVN marginal per leaf, independent of the sampler's algebra).
    16 chains x 25,000 sweeps: TV <= 0.04 (observed 0.018; the CGM98 posterior is 0.166 away).
    A split gain with the node's term scaled by 0.8 fails it."""
    from scipy.stats import multivariate_normal

    from bdtree_jax.likelihoods import NormalMeanShift
    from bdtree_jax.tree import from_string

    X, grid, prior, data, config = _tiny_bart("ancestors")
    y = np.array([0.3, -1.1, 0.8, 1.9, -0.4, 1.2], np.float32)
    data = data._replace(y=jnp.asarray(y))
    bins = jnp.asarray(grid.bin(X))

    def exact(prior):
        trees = enumerate_trees(X, np.zeros((len(y), 3)), prior, NormalMeanShift(nu=3.0, lam=1.0, a=1.0, mu_bar=0.0))
        log_post = []
        for s, log_prior, _ in trees:
            leaf = np.asarray(leaf_index(Tree(*(jnp.asarray(a) for a in from_string(s, grid.thresholds, 2))), bins))
            log_post.append(log_prior + sum(
                multivariate_normal(np.zeros((leaf == v).sum()), np.eye((leaf == v).sum()) + 1.0).logpdf(y[leaf == v])
                for v in np.unique(leaf)))
        w = np.exp(np.array(log_post) - max(log_post))
        return {s: float(q) for (s, _, _), q in zip(trees, w / w.sum())}

    want = exact(prior)
    traces, _ = run_chains(bart.bart(config), data, key=jax.random.key(0), num_chains=16, num_iterations=25_000,
                           block_size=5000)
    freqs = tree_frequencies(Tree(*(a[:, 500:, 0] for a in traces["tree"])), grid.thresholds)
    assert set(freqs) <= set(want)
    tv = tv_distance(freqs, want)
    tv_cgm98 = tv_distance(freqs, exact(TreePrior(max_depth=2, alpha=0.95, beta=1.0)))
    print(f"BART one tree: TV {tv:.4f}, CGM98 posterior {tv_cgm98:.4f}")
    assert tv <= 0.04, tv
    assert tv_cgm98 > 2 * tv


@pytest.mark.parametrize("valid_cuts", [pytest.param("data", marks=pytest.mark.slow), "ancestors"])
def test_batched_sweep_is_the_tree_by_tree_chain(valid_cuts):
    """The grow-prune sweep proposes for every tree before its sequential pass; tree m's
    proposal reads only tree m, so it must be the chain of proposing and accepting tree by tree
    with the single-tree kernel (the kernel sweep, same draws): the same trees after every sweep,
    leaf values and fit equal up to float32 round-off."""
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(60, 3))
    y = np.sin(4 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=60)
    data = build_bart_problem(X, y, n_trees=8, max_depth=4, valid_cuts=valid_cuts).data
    config = bart.BARTConfig(8, 4, "grow-prune")

    @jax.jit
    def both(key, state):
        d = bart.draw(key, config)
        fast = bart._grow_prune_sweep(state, data, data.y, state.fit, state.sigma2, d.uniforms, d.normals, config)
        slow = bart._kernel_sweep(state, data, data.y, state.fit, state.sigma2, d.uniforms, d.normals, d.tree_keys,
                                  config)
        return fast, slow

    state = bart.init(None, data, config)
    grown = 0
    for i in range(40):
        fast, slow = both(jax.random.key(i), state)
        for a, b in zip(jax.tree.leaves(fast[3].tree), jax.tree.leaves(slow[3].tree)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_array_equal(np.asarray(fast[3].leaf_id), np.asarray(slow[3].leaf_id))
        np.testing.assert_array_equal(np.asarray(fast[2]), np.asarray(slow[2]))
        np.testing.assert_allclose(np.asarray(fast[1]), np.asarray(slow[1]), atol=1e-5)
        np.testing.assert_allclose(np.asarray(fast[0]), np.asarray(slow[0]), atol=1e-4)
        np.testing.assert_array_equal(np.asarray(fast[3].lo), np.asarray(slow[3].lo))
        np.testing.assert_allclose(np.asarray(fast[3].stats[..., 0]), np.asarray(slow[3].stats[..., 0]))
        np.testing.assert_array_equal(np.asarray(fast[4]), np.asarray(bart._can_split(fast[3], data)))
        total, values, _, trees, can_split = fast
        state = state._replace(trees=trees, leaf_values=values, fit=total, can_split=can_split)
        grown = max(grown, int(jax.vmap(leaf_nodes)(trees.tree).sum(1).max()))
    assert grown >= 3


@pytest.mark.parametrize("who,build", [
    ("SMC", lambda data: __import__("bdtree_jax.kernels.smc", fromlist=["smc"]).init(
        data, __import__("bdtree_jax.kernels.smc", fromlist=["smc"]).SMCConfig(3, 1, 8, "prior", 1.0))),
    ("WU", lambda data: __import__("bdtree_jax.kernels.wu", fromlist=["wu"]).wu(
        __import__("bdtree_jax.kernels.wu", fromlist=["wu"]).WUConfig(cgm.CGMConfig(3), 2)).init(None, data)),
])
def test_unsupported_samplers_raise(who, build):
    _, _, _, data, _ = _problem(max_depth=3)
    with pytest.raises(ValueError, match="valid_cuts"):
        build(data)


def test_bad_valid_cuts_raises():
    with pytest.raises(ValueError, match="valid_cuts must be one of"):
        TreePrior(valid_cuts="rows")
    with pytest.raises(ValueError, match="min_leaf_size=7 exceeds the 6 training rows"):
        build_bart_problem(np.arange(12.0).reshape(6, 2), np.arange(6.0), n_trees=2, min_leaf_size=7,
                           valid_cuts="ancestors")


@pytest.mark.slow
def test_sample_and_estimators_take_valid_cuts():
    """``bd.sample`` and the estimators pass ``valid_cuts`` to the prior: with min_leaf_size 4 no
    draw has a leaf below 4 rows, and the draws differ from valid_cuts='data'."""
    import bdtree_jax as bd

    X, y = bd.datasets.load("iris")
    kw = dict(max_depth=4, min_leaf_size=4, num_warmup=50, num_samples=100, num_chains=2, seed=1)
    post = bd.sample(X, y, valid_cuts="ancestors", **kw)
    trees = Tree(*(np.asarray(a).reshape(-1, a.shape[-1]) for a in post.trees))
    bins = jnp.asarray(post.grid.bin(X.to_numpy()))
    leaf_rows = jax.vmap(lambda t: jnp.bincount(leaf_index(t, bins), length=t.is_split.shape[0]))(
        Tree(*(jnp.asarray(a) for a in trees)))
    leaves = np.asarray(jax.vmap(leaf_nodes)(Tree(*(jnp.asarray(a) for a in trees))))
    assert np.asarray(leaf_rows)[leaves].min() >= 4
    other = bd.sample(X, y, valid_cuts="data", **kw)
    assert not np.array_equal(np.asarray(post.trees.cut), np.asarray(other.trees.cut))
    clf = bd.BayesianTreeClassifier(valid_cuts="ancestors", **kw).fit(X, y)
    assert clf.get_params()["valid_cuts"] == "ancestors" and clf.score(X, y) > 0.9
    reg = bd.BARTRegressor(num_trees=5, num_warmup=20, num_samples=20, num_chains=1, valid_cuts="data")
    assert reg.fit(X.to_numpy()[:, :3], X.to_numpy()[:, 3]).score(X.to_numpy()[:, :3], X.to_numpy()[:, 3]) > 0.5


@pytest.mark.parametrize("kwargs,match", [
    (dict(valid_cuts="rows"), "valid_cuts must be one of"),
    (dict(valid_cuts="ancestors", method="smc"), "supported by method='cgm'"),
    (dict(valid_cuts="ancestors", method="wu"), "supported by method='cgm'"),
    (dict(valid_cuts="ancestors", method="pcfg"), "supported by method='cgm'"),
    (dict(valid_cuts="ancestors", proposal="regrow"), "supported by method='cgm'"),
    (dict(valid_cuts="ancestors", method="pg", proposal="posterior"), "supported by method='cgm'"),
    (dict(valid_cuts="ancestors", structure="pinball"), "does not support structure"),
    (dict(valid_cuts="ancestors", box_constraints=[{0: (1.0, 2.0)}]), "does not support box_constraints"),
])
def test_sample_refuses_unsupported_valid_cuts(kwargs, match):
    import bdtree_jax as bd

    X, y = bd.datasets.load("iris")
    with pytest.raises(ValueError, match=match):
        bd.sample(X, y, num_warmup=1, num_samples=1, **kwargs)


def test_bart_estimators_refuse_a_bad_valid_cuts():
    import bdtree_jax as bd

    X = np.random.default_rng(0).uniform(size=(20, 2))
    with pytest.raises(ValueError, match="BARTRegressor: valid_cuts must be one of"):
        bd.BARTRegressor(valid_cuts="rows").fit(X, X[:, 0])
    with pytest.raises(ValueError, match="BARTClassifier: valid_cuts must be one of"):
        bd.BARTClassifier(valid_cuts=None).fit(X, X[:, 0] > 0.5)
