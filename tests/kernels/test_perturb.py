"""The perturb move (Pratola 2016, OpenBT; docs/theory/perturb.md) on the CGM98 prior:
its acceptance ratio against enumeration, chains against the exact posterior, the warm-up
adaptation of its window, and option errors."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bdtree_jax as bd
from bdtree_jax.data import make_split_grid
from bdtree_jax.exact import tv_distance
from bdtree_jax.exact.hard import _cut_log_probs, _gaps, _valid_cuts
from bdtree_jax.kernels import cgm, perturb
from bdtree_jax.kernels.base import SamplingAlgorithm
from bdtree_jax.likelihoods import NormalMeanShift, default_normal_hyperparameters
from bdtree_jax.priors import TreePrior, make_tree_data
from bdtree_jax.driver import run_chains
from bdtree_jax.tree import Tree, from_string, to_string

from helpers import TOY_X, chain_frequencies, exact_tv, run_toy

# 16 chains x 20,000 iterations: the Monte Carlo TV of cgm+perturb on these supports (<= 300
# trees) is ~0.015-0.025, so 0.04 fails only on real bias.
CHAINS, ITERS, BURN = 16, 20_000, 500


def _problem(toy_problem, task="classification", max_depth=2, min_leaf_size=1, split_prior="uniform"):
    """The toy problem; with ``split_prior="range"`` the inputs are squared (same bins, unequal
    gaps: on the raw toy inputs every gap is 1 and "range" equals "uniform")."""
    X = TOY_X**2 if split_prior == "range" else TOY_X
    return toy_problem(task, max_depth, min_leaf_size, split_prior, X=X)


def _shape(text: str) -> str:
    """A tree string's topology: every rule replaced by ``S``."""
    return re.sub(r"x\d+<=[^(]+", "S", text)


def _stay():
    """A base sampler that never moves (perturb alone)."""
    return lambda u, s, d: (s, cgm.CGMInfo(jnp.int32(-1), jnp.bool_(False), jnp.float32(0.0)))


def _perturb_only(tree, prior, beta, **kw):
    """The perturb move alone, chains starting at ``tree`` (its topology never changes)."""
    cfg = cgm.CGMConfig.from_prior(prior)
    tree = Tree(*(jnp.asarray(a) for a in tree))
    base = SamplingAlgorithm(lambda k, d: cgm.init(None, d, cfg, tree, beta=beta), _stay(),
                             lambda s, i: cgm.trace(s, i), lambda k: jnp.zeros(()))
    return perturb.with_perturb(base, perturb.PerturbConfig.from_cgm(cfg, adapt=False, **kw))


# ----------------------------------------------------------------------------------------------
# 0. The acceptance ratio of single proposals against enumeration


def _node_rows(tree: Tree, bins: np.ndarray, node: int) -> np.ndarray:
    """The rows whose root-to-leaf path passes through ``node``."""
    rows = []
    for i, b in enumerate(bins):
        path, j = [0], 0
        while tree.is_split[j]:
            j = 2 * j + 1 + int(b[tree.feature[j]] > tree.cut[j])
            path.append(j)
        if node in path:
            rows.append(i)
    return np.array(rows, int)


@pytest.mark.parametrize(
    "start,split_prior,min_leaf_size,beta,width",
    [
        ("x0<=3.5(x1<=4.5(L,L),L)", "uniform", 1, 1.0, 0.1),
        ("x0<=3.5(x1<=4.5(L,L),L)", "uniform", 1, 0.5, 0.9),
        ("x1<=2.5(L,x0<=4.5(L,L))", "range", 1, 1.0, 0.6),
        ("x0<=2.5(L,x1<=2.5(L,L))", "uniform", 2, 1.0, 2.0),
    ],
)
def test_log_ratio_matches_enumeration(toy_problem, start, split_prior, min_leaf_size, beta, width):
    """Every proposal's log acceptance ratio equals ``beta dlog L + dlog p + log q(T|T')/q(T'|T)``
    with ``p``, ``L`` from :func:`enumerate_trees` (independent of the kernels) and the proposal
    ratio computed here from the node's rows: ``|W(c)|/|W(c')|`` for a cut perturbation,
    ``p_cut(c|v)/p_cut(c'|v')`` for a change of variable; ``-inf`` off the prior's support."""
    pb = _problem(toy_problem, "classification", 2, min_leaf_size, split_prior)
    grid, data, trees = pb.grid, pb.data, pb.trees
    if split_prior == "range":
        start = to_string(from_string(start, make_split_grid(TOY_X).thresholds, 2), grid.thresholds)
    assert start in trees
    tree = Tree(*(jnp.asarray(a) for a in from_string(start, grid.thresholds, 2)))
    cfg = perturb.PerturbConfig(2, min_leaf_size, p_change_var=0.5, width=width)
    state = cgm.init(None, data, cfg.cgm, tree, beta=beta)
    u = jax.random.uniform(jax.random.key(0), (400, 5))
    propose = jax.jit(jax.vmap(lambda x: perturb.propose(x, state, jnp.float32(width), data, cfg)))
    proposed, log_ratio, kind, _ = propose(u)
    bins = np.asarray(data.bins)
    t0 = Tree(*(np.asarray(a) for a in tree))
    internal = np.flatnonzero(t0.is_split)
    gaps = _gaps(pb.X)
    lp0, ll0 = trees[start]
    seen = {-1: 0, 0: 0, 1: 0, "outside": 0}
    for i in range(len(u)):
        new = Tree(*(np.asarray(a[i]) for a in proposed.tree))
        text = to_string(new, grid.thresholds)
        node = int(internal[int(np.floor(u[i, 0] * len(internal)))])
        rows = _node_rows(t0, bins, node)
        v, c = int(t0.feature[node]), int(t0.cut[node])
        v2, c2 = int(new.feature[node]), int(new.cut[node])
        n_features = sum(bool(_valid_cuts(bins[rows, f], min_leaf_size)) for f in range(bins.shape[1]))
        if u[i, 1] < 0.5 and n_features == 1:  # no other feature: a null move
            assert int(kind[i]) == -1 and log_ratio[i] == -np.inf
            seen[-1] += 1
            continue
        assert int(kind[i]) == int(u[i, 1] < 0.5)
        if int(kind[i]) == 0:
            assert v2 == v
            cuts = _valid_cuts(bins[rows, v], min_leaf_size)
            lo, hi = cuts[0], cuts[-1] + 1
            h = max(1, round(width * (hi - lo) / 2))
            size = lambda x: min(hi - 1, x + h) - max(lo, x - h) + 1  # noqa: E731
            assert abs(c2 - c) <= h and lo <= c2 < hi
            log_q = np.log(size(c)) - np.log(size(c2))
        else:
            assert v2 != v
            cuts_old = _valid_cuts(bins[rows, v], min_leaf_size)
            cuts_new = _valid_cuts(bins[rows, v2], min_leaf_size)
            assert c2 in cuts_new
            p_old = dict(zip(cuts_old, _cut_log_probs(gaps[v], cuts_old, split_prior)))[c]
            p_new = dict(zip(cuts_new, _cut_log_probs(gaps[v2], cuts_new, split_prior)))[c2]
            log_q = p_old - p_new
        if text not in trees:
            seen["outside"] += 1
            assert log_ratio[i] == -np.inf, text
            continue
        seen[int(kind[i])] += 1
        lp1, ll1 = trees[text]
        expected = beta * (ll1 - ll0) + lp1 - lp0 + log_q
        np.testing.assert_allclose(float(log_ratio[i]), expected, rtol=1e-4, atol=1e-4, err_msg=text)
    assert seen[0] > 50 and seen[1] > 20, seen


# ----------------------------------------------------------------------------------------------
# 1. cgm+perturb chains against the exact posterior


@pytest.mark.xla_optimized
@pytest.mark.parametrize(
    "task,max_depth,min_leaf_size,split_prior,adapt,n_temperatures",
    [
        ("classification", 2, 1, "uniform", False, 1),
        ("classification", 2, 1, "range", False, 1),
        pytest.param("classification", 3, 2, "uniform", True, 1, marks=pytest.mark.slow),
        ("regression", 2, 1, "uniform", True, 1),
        pytest.param("regression", 2, 1, "range", True, 3, marks=pytest.mark.slow),
    ],
)
def test_cgm_perturb_matches_enumerated_posterior(toy_problem, task, max_depth, min_leaf_size, split_prior, adapt,
                                                   n_temperatures):
    """cgm+perturb (fixed window, or adapted during the first BURN iterations and fixed after;
    draws after warm-up) samples the exact posterior, also tempered (the cold chain)."""
    pb = _problem(toy_problem, task, max_depth, min_leaf_size, split_prior)
    cfg = cgm.CGMConfig.from_prior(pb.prior)
    pconfig = perturb.PerturbConfig.from_cgm(cfg, width=0.1 if adapt else 0.5, adapt=adapt, num_warmup=BURN,
                                             p_change_var=0.3)
    algorithm = perturb.with_perturb(cfg, pconfig)
    traces = run_toy(algorithm, pb, CHAINS, ITERS, n_temperatures)
    tv = exact_tv(traces, pb, BURN)
    assert tv <= 0.04, tv
    acc = traces["perturb_accepted"][:, BURN:].mean()
    assert 0.05 < acc < 0.95, acc
    width = traces["perturb_width"]
    if n_temperatures == 1:
        assert np.all(width[:, BURN - 1:] == width[:, BURN - 1:BURN])  # frozen after warm-up
    else:  # each rung's state keeps its own frozen width; the cold chain's changes with swaps
        assert all(len(np.unique(w)) <= n_temperatures for w in width[:, BURN:])
    if adapt:
        assert np.all(np.abs(width[:, BURN - 1] - 0.1) > 1e-3)  # it did adapt
    else:
        np.testing.assert_allclose(width, 0.5, rtol=1e-6)


def test_cgm_perturb_negative_control(toy_problem, monkeypatch):
    """The same check detects a perturb move without the prior ratio (TV ~0.1)."""
    monkeypatch.setattr(perturb, "_log_prior_ratio", lambda s, p: jnp.where(jnp.isfinite(p.log_prior), 0.0, -jnp.inf))
    pb = _problem(toy_problem, "classification", 2)
    cfg = cgm.CGMConfig.from_prior(pb.prior)
    # the uncached builder: fresh closures, so the patched kernel is traced (and not reused elsewhere)
    algorithm = perturb.with_perturb.__wrapped__(cfg, perturb.PerturbConfig.from_cgm(cfg, width=0.5, adapt=False,
                                                                                     p_change_var=0.3))
    traces, _ = run_chains(algorithm, pb.data, key=jax.random.key(11), num_chains=CHAINS, num_iterations=ITERS,
                           block_size=ITERS)
    tv = tv_distance(chain_frequencies(traces, pb.grid.thresholds, BURN), pb.exact)
    assert tv > 0.06, tv


# ----------------------------------------------------------------------------------------------
# 2. Perturb alone on a fixed topology: invariance of the posterior restricted to that shape


INVARIANCE_CASES = [
    # (topology, split_prior, beta, width, p_change_var); beta = 0: the prior restricted to the shape
    ("S(L,L)", "uniform", 1.0, 0.1, 0.1),
    ("S(S(L,L),L)", "uniform", 1.0, 0.1, 0.1),
    ("S(S(L,L),L)", "range", 0.0, 0.4, 0.2),
    ("S(L,S(L,L))", "range", 1.0, 1.0, 0.5),
]


def _restricted_run(toy_problem, topology, split_prior, beta, width, p_change_var, iters=ITERS):
    pb = _problem(toy_problem, "classification", 2, 1, split_prior)
    restricted = {k: v for k, v in pb.posterior(beta).items() if _shape(k) == topology}
    z = sum(restricted.values())
    restricted = {k: v / z for k, v in restricted.items()}
    start = max(restricted, key=restricted.get)
    algorithm = _perturb_only(from_string(start, pb.grid.thresholds, 2), pb.prior, beta, width=width,
                              p_change_var=p_change_var)
    traces, _ = run_chains(algorithm, pb.data, key=jax.random.key(5), num_chains=CHAINS,
                           num_iterations=iters, block_size=iters)
    return chain_frequencies(traces, pb.grid.thresholds, 200), restricted


@pytest.mark.parametrize("topology,split_prior,beta,width,p_change_var", INVARIANCE_CASES)
def test_perturb_alone_leaves_restricted_posterior_invariant(toy_problem, topology, split_prior, beta, width,
                                                             p_change_var):
    """Perturb never changes the shape; alone it samples the posterior (beta = 1) or the prior
    (beta = 0) restricted to the starting tree's shape, computed by enumeration."""
    freqs, restricted = _restricted_run(toy_problem, topology, split_prior, beta, width, p_change_var)
    assert len(restricted) >= 10
    assert set(freqs) == set(restricted)  # stays on the shape and reaches all of it
    tv = tv_distance(freqs, restricted)
    assert tv <= 0.04, tv


def _drop_ratio(monkeypatch, drop):
    """Negative controls: the perturb kernel without its window ratio ``|W(c)|/|W(c')|``
    (``drop="window"``) or without its prior ratio, keeping only the support (``"prior"``)."""
    if drop == "window":
        monkeypatch.setattr(perturb, "_log_window_ratio", lambda a, b: jnp.float32(0.0))
    else:
        monkeypatch.setattr(perturb, "_log_prior_ratio",
                            lambda s, p: jnp.where(jnp.isfinite(p.log_prior), 0.0, -jnp.inf))


@pytest.mark.parametrize("drop", ["window", "prior"])
@pytest.mark.parametrize("case", [1, 2])
def test_negative_controls_fail_chain(toy_problem, monkeypatch, drop, case):
    """The invariance test detects a kernel without the window ratio |W(c)|/|W(c')| or without the
    prior ratio (keeping only the support)."""
    _drop_ratio(monkeypatch, drop)
    freqs, restricted = _restricted_run(toy_problem, *INVARIANCE_CASES[case])
    tv = tv_distance(freqs, restricted)
    assert tv > 0.06, tv


def _transition_matrix(pb, support: list, width: float, p_change_var: float, beta: float):
    """The perturb kernel's exact transition matrix over ``support`` (tree strings of one shape):
    every (node, kind, outcome) with its proposal probability computed here from the node's rows
    (numpy), the kernel's proposal at uniforms inside that outcome's interval, and its acceptance
    ``min(1, exp(log_ratio))``; rejections and null moves stay."""
    grid, data, prior = pb.grid, pb.data, pb.prior
    m, depth = prior.min_leaf_size, prior.max_depth
    cfg = perturb.PerturbConfig(depth, m, p_change_var=p_change_var, width=width)
    bins, cum = np.asarray(data.bins), np.asarray(data.cut_cumwidth, float)
    index = {t: i for i, t in enumerate(support)}
    P = np.zeros((len(support), len(support)))
    kinds = [(0, 1.0 - p_change_var, (1.0 + p_change_var) / 2), (1, p_change_var, p_change_var / 2)]
    jobs = []  # (from, probability, expected tree string, uniforms)
    for a, text in enumerate(support):
        t0 = Tree(*(np.asarray(x) for x in from_string(text, grid.thresholds, depth)))
        internal = np.flatnonzero(t0.is_split)
        for j, node in enumerate(internal):
            rows = _node_rows(t0, bins, node)
            v, c = int(t0.feature[node]), int(t0.cut[node])
            valid = [f for f in range(bins.shape[1]) if _valid_cuts(bins[rows, f], m)]
            u_node = (j + 0.5) / len(internal)
            for kind, p_kind, u_kind in kinds:
                if p_kind == 0:
                    continue
                p = p_kind / len(internal)
                if kind == 0:
                    cuts = _valid_cuts(bins[rows, v], m)
                    lo, hi = cuts[0], cuts[-1] + 1
                    h = max(1, round(width * (hi - lo) / 2))
                    first, last = max(lo, c - h), min(hi - 1, c + h)
                    for c2 in range(first, last + 1):
                        new = Tree(t0.is_split, t0.feature, t0.cut.copy())
                        new.cut[node] = c2
                        u = (c2 - first + 0.5) / (last - first + 1)
                        jobs.append((a, p / (last - first + 1), to_string(new, grid.thresholds),
                                     [u_node, u_kind, 0.5, u, 0.0]))
                    continue
                others = [f for f in valid if f != v]
                if not others:
                    P[a, a] += p  # null move
                    continue
                for k, v2 in enumerate(others):
                    cuts = _valid_cuts(bins[rows, v2], m)
                    lo, hi = cuts[0], cuts[-1] + 1
                    total = cum[v2, hi] - cum[v2, lo]
                    for c2 in cuts:
                        w = cum[v2, c2 + 1] - cum[v2, c2]
                        u = (cum[v2, c2] - cum[v2, lo] + w / 2) / total
                        new = Tree(t0.is_split, t0.feature.copy(), t0.cut.copy())
                        new.feature[node], new.cut[node] = v2, c2
                        jobs.append((a, p / len(others) * w / total, to_string(new, grid.thresholds),
                                     [u_node, u_kind, (k + 0.5) / len(others), u, 0.0]))
    # the kernel's proposals and ratios, all in one vmapped call (traced here, so a monkeypatched
    # kernel is picked up)
    trees = [Tree(*(np.asarray(x) for x in from_string(t, grid.thresholds, depth))) for t in support]
    starts = Tree(*(jnp.asarray(np.stack([trees[job[0]][k] for job in jobs])) for k in range(3)))

    def one(u, tree):
        return perturb.propose(u, cgm.init(None, data, cfg.cgm, tree, beta=beta), jnp.float32(width), data, cfg)

    proposed, log_ratio, _, _ = jax.jit(jax.vmap(one))(jnp.asarray([job[3] for job in jobs], jnp.float32), starts)
    log_ratio = np.asarray(log_ratio, float)
    for i, (a, prob, expected, _) in enumerate(jobs):
        got = to_string(Tree(*(np.asarray(x[i]) for x in proposed.tree)), grid.thresholds)
        assert got == expected
        accept = float(np.exp(min(log_ratio[i], 0.0)))
        assert (expected in index) or accept == 0.0, expected
        if accept > 0:
            P[a, index[expected]] += prob * accept
        P[a, a] += prob * (1 - accept)
    return P


EXACT_CASES = [
    # (topology, min_leaf_size, split_prior, beta, width, p_change_var)
    ("S(S(L,L),S(L,L))", 1, "uniform", 0.0, 0.3, 0.1),
    ("S(S(L,L),S(L,L))", 1, "range", 1.0, 0.6, 0.3),
    ("S(S(L,L),L)", 2, "uniform", 1.0, 0.1, 0.5),
    ("S(L,S(L,L))", 1, "range", 0.5, 2.0, 0.2),
]


def _exact_case(toy_problem, topology, min_leaf_size, split_prior, beta, width, p_change_var):
    pb = _problem(toy_problem, "classification", 2, min_leaf_size, split_prior)
    posterior = pb.posterior(beta)
    support = sorted(k for k in posterior if _shape(k) == topology)
    pi = np.array([posterior[k] for k in support])
    return _transition_matrix(pb, support, width, p_change_var, beta), pi / pi.sum()


@pytest.mark.parametrize("case", EXACT_CASES)
def test_exact_transition_matrix_is_reversible(toy_problem, case):
    """The perturb kernel's exact transition matrix on all trees of one shape satisfies detailed
    balance w.r.t. the (tempered) posterior restricted to that shape -- no Monte Carlo error, and
    independent of how well the move mixes (moving the root's rule re-partitions the children,
    so on deeper shapes the fixed-shape chain switches the root's feature rarely)."""
    P, pi = _exact_case(toy_problem, *case)
    assert len(pi) >= 5
    np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-6)
    flow = pi[:, None] * P
    np.testing.assert_allclose(flow, flow.T, atol=1e-7)
    np.testing.assert_allclose(pi @ P, pi, atol=1e-7)
    assert np.all(np.diag(P) < 1)  # it moves from every tree


@pytest.mark.parametrize("drop", ["window", "prior"])
@pytest.mark.parametrize("case", [0, 1])
def test_negative_controls_fail_exact(toy_problem, monkeypatch, drop, case):
    """Without the window ratio or the prior ratio the exact kernel is not stationary (the
    correct kernel's ``|pi P - pi|`` is <= 1e-8 here; these give ~1e-3, ~15 % of a tree's mass)."""
    _drop_ratio(monkeypatch, drop)
    P, pi = _exact_case(toy_problem, *EXACT_CASES[case])
    assert np.abs(pi @ P - pi).max() > 1e-4


# ----------------------------------------------------------------------------------------------
# 3. The warm-up adaptation


def _adapt_problem():
    """80 rows, a weak step in x0: the cut perturbations' acceptance falls from ~0.8 at the
    smallest window to ~0.25 at the widest."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(80, 2))
    y = (np.where(X[:, 0] > 0.5, 1.0, 0.0) + rng.normal(size=80)).astype(np.float32)
    prior = TreePrior(max_depth=2)
    grid = make_split_grid(X)
    data = make_tree_data(grid.bin(X), y, prior, NormalMeanShift(**default_normal_hyperparameters(y)), grid=grid)
    return prior, data


@pytest.mark.slow
def test_adaptation_moves_width_towards_target_and_freezes():
    prior, data = _adapt_problem()
    cfg = cgm.CGMConfig.from_prior(prior)
    W, S = 2000, 2000
    results = {}
    for width in (0.001, 2.0):
        for adapt in (False, True):
            pconfig = perturb.PerturbConfig.from_cgm(cfg, p_change_var=0.0, width=width, adapt=adapt, num_warmup=W)
            traces, states = run_chains(perturb.with_perturb(cfg, pconfig), data, key=jax.random.key(3), num_chains=4,
                                        num_iterations=W + S, block_size=W + S)
            results[width, adapt] = traces["perturb_accepted"][:, W:].mean(), traces["perturb_width"]
            assert np.all(np.asarray(states.iteration) == W)  # saturates at num_warmup
    # fixed windows: far from the target at both ends
    assert results[0.001, False][0] > 0.65 and results[2.0, False][0] < 0.33
    for width in (0.001, 2.0):
        np.testing.assert_allclose(results[width, False][1], width, rtol=1e-6)
        acc, w = results[width, True]
        assert abs(acc - 0.44) < 0.06, (width, acc)
        assert np.all(w[:, W - 1:] == w[:, W - 1:W])  # frozen after warm-up
        assert np.all(np.abs(np.log(w[:, W - 1] / width)) > 0.5)  # it adapted
        assert np.all((w[:, -1] > 0.1) & (w[:, -1] < 1.0)), w[:, -1]  # both starts end in the same range


def test_sample_cgm_perturb_end_to_end():
    """``bd.sample(proposal="cgm+perturb")``: the width adapts over ``num_warmup`` and is fixed in
    the kept draws; the stats carry ``perturb_accepted`` / ``perturb_width``; tempering works."""
    X = np.array([[1, 5], [2, 3], [3, 6], [4, 1], [5, 2], [6, 4], [7, 7], [8, 0]], float)
    y = np.array([0, 0, 1, 1, 0, 1, 1, 0])
    common = dict(proposal="cgm+perturb", max_depth=2, num_warmup=50, num_samples=30, num_chains=2, seed=0,
                  progress=False)
    post = bd.sample(X, y, **common)
    w_warm, w = post.warmup_stats["perturb_width"], post.stats["perturb_width"]
    assert w_warm.shape == (2, 50) and w.shape == (2, 30)
    assert np.all(w == w_warm[:, -1:]) and np.any(w_warm != np.float32(0.1))
    assert post.stats["perturb_accepted"].dtype == bool and post.stats["perturb_accepted"].any()
    assert "PerturbConfig" in post.info["config"] and "num_warmup=50" in post.info["config"]
    tempered = bd.sample(X, y, num_temperatures=2, **common)
    assert "swap_accepted" in tempered.stats
    assert all(len(np.unique(c)) <= 2 for c in tempered.stats["perturb_width"])


# ----------------------------------------------------------------------------------------------
# 4. Option errors


def test_option_errors(toy_data):
    X, y, _ = toy_data
    for kw, match in [
        (dict(p_change_var=1.5), "p_change_var"),
        (dict(width=0.0), "width"),
        (dict(width=3.0), "width"),
        (dict(num_warmup=-1), "num_warmup"),
        (dict(num_warmup=1.5), "num_warmup"),
        (dict(adapt="yes"), "adapt"),
        (dict(target_accept=1.0), "target_accept"),
        (dict(min_leaf_size=0), "min_leaf_size"),
    ]:
        with pytest.raises(ValueError, match=match):
            perturb.PerturbConfig(2, **kw)
    with pytest.raises(ValueError, match="max_depth"):
        perturb.PerturbConfig(0)
    cfg = cgm.CGMConfig(2)
    with pytest.raises(TypeError, match="PerturbConfig"):
        perturb.with_perturb(cgm.cgm(cfg))
    with pytest.raises(TypeError, match="SamplingAlgorithm or a CGMConfig"):
        perturb.with_perturb("cgm", perturb.PerturbConfig(2))
    assert perturb.with_perturb(cfg) is perturb.with_perturb(cfg)  # cached: shared compiled programs
    common = dict(num_warmup=2, num_samples=2, num_chains=1, max_depth=2, progress=False)
    with pytest.raises(ValueError, match="proposal must be one of"):
        bd.sample(X, y, proposal="perturb", **common)
    with pytest.raises(ValueError, match="does not apply with initial_tree"):
        bd.sample(X, y, proposal="cgm+perturb", initial_tree="L", **common)
    for method in ("wu", "hmc-df"):
        with pytest.raises(ValueError, match="option of method='cgm'"):
            bd.sample(X, y, method=method, proposal="cgm+perturb", **common)
    with pytest.raises(ValueError, match="proposal"):
        bd.sample(X, y, method="pg", proposal="cgm+perturb", **common)
    with pytest.raises(ValueError, match="proposal must be one of"):
        bd.BayesianTreeClassifier(proposal="cgm+perturbs", num_warmup=2, num_samples=2, num_chains=1,
                                  max_depth=2).fit(X, y)
