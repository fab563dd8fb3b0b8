"""``split_prior="range"`` (Lakshminarayanan et al. 2013: a cut's probability is the width of its
gap between consecutive distinct training values over the node's valid range) against the exact
enumeration, and its plumbing and errors.

The data are unevenly spaced on purpose: x0's gaps are (1, 0.5, 3.5, 0.2, 3.8), x1's
(4, 0.3, 0.2, 2.5, 3), so the range rule differs sharply from the uniform one.  On these data the
exact posteriors under the two split priors are TV 0.45 (classification, depth 2), 0.47
(classification, depth 3, min_leaf_size 2) and 0.46 (regression, depth 2) apart, an order of
magnitude above the 0.04 tolerance of the sampler checks below, so a sampler that ignored
``split_prior`` (or used it in the proposal but not in the prior, or the reverse) fails them.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

import bdtree_jax as bd
from bdtree_jax.data import make_split_grid
from bdtree_jax.exact import enumerate_edit_posterior, enumerate_trees, tv_distance
from bdtree_jax.kernels import cgm, edit, regrow, smc
from bdtree_jax.kernels._moves import draw_rule
from bdtree_jax.likelihoods import DirichletMultinomial
from bdtree_jax.priors import TreePrior, log_cut_probs, log_rule_prob, make_tree_data, mask_bounds
from bdtree_jax.driver import run_chains
from bdtree_jax.tree import Tree, from_string

from helpers import TOY_Y_CLASS, chain_frequencies, particle_frequencies, smc_runs, stack_trees, toy_problem

X = np.array([[0.0, 4.3], [1.0, 0.0], [1.5, 10.0], [5.0, 4.0], [5.2, 4.5], [9.0, 7.0]])
Y_CLASS = TOY_Y_CLASS
GAPS = [np.diff(np.unique(X[:, f])) for f in range(2)]

# Same budget as the CGM / regrow enumeration tests: 16 chains x 30,000 iterations, whose Monte
# Carlo TV on a ~260-tree support is ~0.015, so TV <= 0.04 fails only on real bias.
CHAINS, ITERS, BURN = 16, 30_000, 500


def _problem(task, max_depth, min_leaf_size, split_prior="range"):
    """The toy problem on the unevenly spaced inputs ``X`` (the toy labels)."""
    return toy_problem(task, max_depth, min_leaf_size, split_prior, X=X)


# ----------------------------------------------------------------------------------------------
# a. the enumerated prior


@pytest.mark.parametrize("min_leaf_size,max_depth", [(1, 2), (2, 3), (1, 3)])
def test_enumerated_range_prior_is_normalised(min_leaf_size, max_depth):
    prior = TreePrior(max_depth=max_depth, alpha=0.8, beta=0.7, min_leaf_size=min_leaf_size, split_prior="range")
    lik = DirichletMultinomial(2, 1.0)
    trees = enumerate_trees(X, lik.point_stats(Y_CLASS), prior, lik)
    assert abs(logsumexp([lp for _, lp, _ in trees])) < 1e-6
    # the same trees as the uniform prior (only the weights change), with different weights
    uniform = enumerate_trees(X, lik.point_stats(Y_CLASS), TreePrior(max_depth, 0.8, 0.7, min_leaf_size), lik)
    assert [s for s, _, _ in trees] == [s for s, _, _ in uniform]
    assert np.max(np.abs(np.array([lp for _, lp, _ in trees]) - [lp for _, lp, _ in uniform])) > 0.5


def test_enumerated_range_prior_hand_computed():
    lik = DirichletMultinomial(2, 1.0)
    ps = lik.point_stats(Y_CLASS)

    def log_prior(prior):
        return {s: lp for s, lp, _ in enumerate_trees(X, ps, prior, lik)}

    # depth 1: root split x0 <= 3.25 is the gap (1.5, 5) of width 3.5 in x0's range 9
    one = log_prior(TreePrior(max_depth=1, split_prior="range"))
    assert one["x0<=3.25(L,L)"] == pytest.approx(math.log(0.95 * 0.5 * 3.5 / 9), abs=1e-12)
    assert one["x1<=4.15(L,L)"] == pytest.approx(math.log(0.95 * 0.5 * 0.3 / 10), abs=1e-12)
    assert log_prior(TreePrior(max_depth=1))["x0<=3.25(L,L)"] == pytest.approx(math.log(0.95 * 0.5 / 5), abs=1e-12)
    # min_leaf_size 2: x0's valid cuts at the root are 1..3 (gaps 0.5, 3.5, 0.2)
    two = log_prior(TreePrior(max_depth=1, min_leaf_size=2, split_prior="range"))
    assert two["x0<=3.25(L,L)"] == pytest.approx(math.log(0.95 * 0.5 * 3.5 / 4.2), abs=1e-12)
    # depth 2: the left child holds x0 in {0, 1, 1.5} and x1 in {4.3, 0, 10}: its x1 range is
    # (0, 10) and x1 <= 4.15 is the global gap (4, 4.3) of width 0.3; the right child (x0 in
    # {5, 5.2, 9}) could split and does not
    deep = log_prior(TreePrior(max_depth=2, split_prior="range"))
    p1 = 0.95 / 2
    expected = math.log(0.95 * 0.5 * 3.5 / 9) + math.log(p1 * 0.5 * 0.3 / 10) + math.log(1 - p1)
    assert deep["x0<=3.25(x1<=4.15(L,L),L)"] == pytest.approx(expected, abs=1e-12)
    # a child's x0 range is its own: left child x0 in {0, 1, 1.5}, x0 <= 1.25 has width 0.5 of 1.5
    expected = math.log(0.95 * 0.5 * 3.5 / 9) + math.log(p1 * 0.5 * 0.5 / 1.5) + math.log(1 - p1)
    assert deep["x0<=3.25(x0<=1.25(L,L),L)"] == pytest.approx(expected, abs=1e-12)


# ----------------------------------------------------------------------------------------------
# b. the JAX rule prior and its draws


@pytest.mark.parametrize("min_leaf_size", [1, 2])
def test_rule_probabilities_and_draws(min_leaf_size):
    """``log_rule_prob`` over a node's rules sums to 1 and equals (1 / valid features) x (gap
    width / summed widths of the valid cuts); 10^5 ``_draw_rule`` draws reproduce it (every cell
    within 5 binomial standard errors); ``log_cut_probs`` (SMC's one-step-optimal proposal) agrees."""
    data = _problem("classification", 3, min_leaf_size).data
    cum = data.cut_cumwidth
    B = cum.shape[1]
    root = np.ones(len(X), bool)
    right_of_x0 = X[:, 0] > 0.5  # 5 rows: x0 in {1, 1.5, 5, 5.2, 9}, x1 in {0, 10, 4, 4.5, 7}
    n = 100_000
    u = jax.random.uniform(jax.random.key(0), (n, 2))
    draw = jax.jit(jax.vmap(lambda uu, lo, hi: draw_rule(uu[0], uu[1], lo, hi, cum), in_axes=(0, None, None)))
    table = jax.jit(jax.vmap(jax.vmap(lambda f, c, lo, hi: log_rule_prob(lo, hi, f, c, cum), (None, 0, None, None)),
                             (0, None, None, None)))
    for mask in (root, right_of_x0):
        lo, hi = mask_bounds(jnp.asarray(mask), data, min_leaf_size)
        lo_np, hi_np = np.asarray(lo), np.asarray(hi)
        p = np.exp(np.asarray(table(jnp.arange(2), jnp.arange(B), lo, hi), np.float64))  # (F, B)
        assert p.sum() == pytest.approx(1.0, abs=1e-6)
        valid_features = [f for f in range(2) if hi_np[f] > lo_np[f]]
        expected = np.zeros_like(p)
        for f in valid_features:
            w = GAPS[f][lo_np[f] : hi_np[f]]
            expected[f, lo_np[f] : hi_np[f]] = w / w.sum() / len(valid_features)
        np.testing.assert_allclose(p, expected, atol=1e-6)
        assert np.abs(expected[expected > 0] - expected[expected > 0].mean()).max() > 0.05  # not uniform
        f, c = (np.asarray(a) for a in draw(u, lo, hi))
        freq = np.zeros_like(p)
        np.add.at(freq, (f, c), 1.0 / n)
        assert np.all(np.abs(freq - expected) <= 5 * np.sqrt(expected * (1 - expected) / n) + 1e-12)
        # SMC's per-cut table: the same conditional cut probabilities on the valid cells
        cut_p = np.exp(np.asarray(log_cut_probs(cum, lo, hi), np.float64))[:, : B - 1]
        ok = expected[:, : B - 1] > 0
        np.testing.assert_allclose(cut_p[ok] / len(valid_features), expected[:, : B - 1][ok], rtol=1e-5)


def test_uniform_table_is_arange_and_range_table_is_the_gap_widths():
    uniform = _problem("classification", 2, 1, "uniform").data
    np.testing.assert_array_equal(np.asarray(uniform.cut_cumwidth), np.tile(np.arange(7, dtype=np.float32), (2, 1)))
    cum = np.asarray(_problem("classification", 2, 1).data.cut_cumwidth, np.float64)
    for f in range(2):
        np.testing.assert_allclose(np.diff(cum[f]), np.r_[GAPS[f] / GAPS[f].sum(), 0.0], atol=1e-7)
    # padded cuts (a feature with fewer cuts than the widest one) weigh 0
    Xp = np.c_[X, [0, 0, 1, 1, 2, 2]]
    gp = make_split_grid(Xp)
    data = make_tree_data(gp.bin(Xp), Y_CLASS, TreePrior(max_depth=2, split_prior="range"), DirichletMultinomial(2),
                          grid=gp)
    np.testing.assert_allclose(np.diff(np.asarray(data.cut_cumwidth[2])), [0.5, 0.5, 0, 0, 0, 0], atol=1e-7)


def test_range_table_keeps_tiny_gaps_and_uniform_draws_are_the_plain_rule():
    from bdtree_jax.data import cut_cumwidth
    from bdtree_jax.priors import draw_cut

    # a gap far below float32 resolution of the feature's range still gets positive weight
    cum = cut_cumwidth("range", 1, 5, np.array([[1e-9, 1.0, 1e-12, 1e6]]))
    assert cum.dtype == np.float32 and np.all(np.diff(cum[0, :5]) > 0) and np.all(np.diff(cum[0, 4:]) == 0)
    assert cum[0, 4] == pytest.approx(1.0, abs=1e-6)
    # the uniform table's inverse CDF is exactly the former lo + floor(u * (hi - lo)), clipped
    rng = np.random.default_rng(0)
    n, B = 20_000, 1002
    lo = rng.integers(0, B - 2, n).astype(np.int32)
    hi = np.minimum(lo + rng.integers(1, 300, n), B - 2).astype(np.int32)
    u = jax.random.uniform(jax.random.key(1), (n,))
    u = u.at[:50].set(np.float32(1 - 2**-24))  # the largest float32 below 1
    table = jnp.asarray(cut_cumwidth("uniform", 3, B - 2))
    f = jnp.asarray(rng.integers(0, 3, n), jnp.int32)
    got = np.asarray(jax.jit(draw_cut)(table, f, jnp.asarray(lo), jnp.asarray(hi), u))
    plain = np.asarray(jnp.minimum(lo + jnp.floor(u * (hi - lo)).astype(jnp.int32), hi - 1))
    np.testing.assert_array_equal(got, plain)


def test_jax_log_prior_matches_enumeration():
    """The kernels' log tree prior (``log_tree_prior`` via ``cgm.init``) on every enumerated tree."""
    for min_leaf_size, max_depth in [(1, 2), (2, 3)]:
        p = _problem("classification", max_depth, min_leaf_size)
        stacked = stack_trees(p.trees, p.grid.thresholds, max_depth)
        config = cgm.CGMConfig.from_prior(p.prior)
        states = jax.jit(jax.vmap(lambda t: cgm.init(None, p.data, config, t)))(stacked)
        np.testing.assert_allclose(np.asarray(states.log_prior), [lp for lp, _ in p.trees.values()], rtol=1e-5,
                                   atol=1e-5)


# ----------------------------------------------------------------------------------------------
# c, d. samplers against the exact posterior


@pytest.mark.xla_optimized
@pytest.mark.parametrize(
    "kind,task,min_leaf_size,max_depth",
    [
        ("cgm", "classification", 1, 2),
        pytest.param("cgm", "classification", 2, 3, marks=pytest.mark.slow),
        ("regrow", "classification", 1, 2),
        pytest.param("regrow", "regression", 2, 3, marks=pytest.mark.slow),
    ],
)
def test_chain_matches_enumerated_range_posterior(kind, task, min_leaf_size, max_depth):
    """CGM (the rule draw, its proposal density and the prior) and prune-and-regrow (the
    regrown subtree's rules) sample the exact ``split_prior="range"`` posterior (TV <= 0.04;
    uniform vs range exact posteriors are TV >= 0.45 apart on these data)."""
    p = _problem(task, max_depth, min_leaf_size)
    exact = p.exact
    uniform = _problem(task, max_depth, min_leaf_size, "uniform").exact
    assert tv_distance(exact, uniform) > 0.4  # the test has power
    if kind == "cgm":
        algorithm = cgm.cgm(cgm.CGMConfig.from_prior(p.prior))
    else:
        algorithm = regrow.regrow(regrow.RegrowConfig(p.prior.max_depth, p.prior.min_leaf_size))
    traces, _ = run_chains(algorithm, p.data, key=jax.random.key(5), num_chains=CHAINS, num_iterations=ITERS,
                           block_size=ITERS)
    freqs = chain_frequencies(traces, p.grid.thresholds, BURN)
    assert set(freqs) <= set(exact), "sampler visited a tree outside the prior's support"
    assert tv_distance(freqs, exact) <= 0.04


@pytest.mark.parametrize(
    "max_depth,min_leaf_size,proposal,ess_threshold",
    [(2, 1, "prior", 0.9), pytest.param(3, 2, "posterior", 1.0, marks=pytest.mark.slow)],
)
def test_smc_weighted_particles_match_enumerated_range_posterior(max_depth, min_leaf_size, proposal, ess_threshold):
    """64 runs x 1000 particles (as tests/kernels/test_smc.py): the prior proposal draws rules
    with ``_draw_rule``, the one-step-optimal one weighs every rule by ``log_cut_probs``; the
    weighted final particles are within TV 0.04 of the exact range posterior."""
    p = _problem("classification", max_depth, min_leaf_size)
    exact = p.exact
    config = smc.SMCConfig(max_depth, min_leaf_size, num_particles=1000, proposal=proposal, ess_threshold=ess_threshold)
    out = smc_runs(p.data, config, int(p.grid.n_cuts.max()) + 1, 64, seed=3)
    freqs = particle_frequencies(out, p.grid.thresholds)
    assert set(freqs) <= set(exact), "a particle left the prior's support"
    assert tv_distance(freqs, exact) <= 0.04


@pytest.mark.slow
def test_edit_prior_follows_split_prior():
    """The EDITTREE prior's grow / change edits draw rules from the same rule prior: the chain
    matches the exact edit-prior posterior with range cut probabilities (TV <= 0.04; it is TV 0.20
    from the uniform one, whose mass stays near the initial tree)."""
    t0, mean_edits, max_edits = "x0<=3.25(L,L)", 1.5, 5
    p = _problem("classification", 2, 1)
    lik, y, grid = p.likelihood, p.y, p.grid
    exact = enumerate_edit_posterior(X, lik.point_stats(y), p.prior, lik, t0, mean_edits=mean_edits,
                                     max_edits=max_edits)
    uniform = enumerate_edit_posterior(X, lik.point_stats(y), TreePrior(max_depth=2), lik, t0, mean_edits=mean_edits,
                                       max_edits=max_edits)
    assert tv_distance(exact, uniform) > 0.15
    data = edit.EditData(p.data, Tree(*(jnp.asarray(a) for a in from_string(t0, grid.thresholds, 2))))
    config = edit.EditConfig(2, 1, mean_edits=mean_edits, max_edits=max_edits, regrow_prob=0.5)
    traces, _ = run_chains(edit.edit_prior(config), data, key=jax.random.key(3), num_chains=16, num_iterations=20_000,
                           block_size=20_000)
    freqs = chain_frequencies(traces, grid.thresholds, BURN)
    assert set(freqs) <= {k for k, v in exact.items() if v > 0}
    assert tv_distance(freqs, exact) <= 0.04


# ----------------------------------------------------------------------------------------------
# e. plumbing and errors


def test_sample_and_estimator_pass_split_prior():
    # 2 chains of 2,000 iterations (one CGM block): the program of test_edit.py's plain CGM run
    kw = dict(max_depth=2, num_warmup=200, num_samples=1800, num_chains=2, seed=0, progress=False)
    rng = bd.sample(X, Y_CLASS, split_prior="range", **kw)
    uni = bd.sample(X, Y_CLASS, **kw)
    assert rng.prior.split_prior == "range" and uni.prior.split_prior == "uniform"
    assert not np.array_equal(rng.trees.cut, uni.trees.cut)  # same seed, another rule prior
    # the recorded log prior is the range prior's (x0 <= 3.25 at the root: gap 3.5 of 9)
    exact = {s: lp for s, lp, _ in enumerate_trees(X, DirichletMultinomial(2).point_stats(Y_CLASS), rng.prior,
                                                    DirichletMultinomial(2))}
    strings = rng.tree_strings()
    lp = np.asarray(rng.stats["log_prior"]).ravel()
    for s, v in list(zip(strings, lp))[:50]:
        assert v == pytest.approx(exact[s], abs=1e-4)
    clf = bd.BayesianTreeClassifier(split_prior="range", **kw)
    assert clf.get_params()["split_prior"] == "range"
    assert clf.fit(X, Y_CLASS).posterior_.prior.split_prior == "range"
    assert bd.BayesianTreeRegressor(split_prior="range").get_params()["split_prior"] == "range"


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(split_prior="Range"), r"split_prior must be one of \('uniform', 'range'\)"),
        (dict(split_prior=None), r"split_prior must be one of \('uniform', 'range'\)"),
        (dict(split_prior="range", method="hmc-df"), "split_prior is an option of the CGM98 tree prior"),
        (dict(split_prior="range", method="hmc-dfi"), "split_prior is an option of the CGM98 tree prior"),
        (dict(split_prior="range", method="pcfg"), "split_prior is an option of the CGM98 tree prior"),
    ],
)
def test_sample_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bd.sample(X, Y_CLASS, max_depth=2, num_warmup=1, num_samples=1, num_chains=1, **kwargs)


def test_prior_data_and_config_errors(tmp_path):
    with pytest.raises(ValueError, match=r"split_prior must be one of \('uniform', 'range'\); got 'width'"):
        TreePrior(split_prior="width")
    grid = make_split_grid(X)
    with pytest.raises(ValueError, match="needs the split grid"):
        make_tree_data(grid.bin(X), Y_CLASS, TreePrior(split_prior="range"), DirichletMultinomial(2))
    with pytest.raises(ValueError, match="split_prior must be one of"):
        bd.BayesianTreeClassifier(split_prior="bogus", max_depth=2, num_warmup=1, num_samples=1,
                                  num_chains=1).fit(X, Y_CLASS)
    from bdtree_jax.cli import load_config

    path = tmp_path / "c.yaml"
    path.write_text("dataset: iris\nsplit_prior: range\n")
    assert load_config(path)["split_prior"] == "range"


def test_max_cuts_grid_keeps_quantile_cuts_of_the_distinct_values():
    """``make_split_grid(X, max_cuts)``: a feature with more midpoints keeps ``max_cuts`` of them,
    at quantiles of its distinct values (bins of nearly equal distinct-value counts), widths that
    tile the feature's range; a feature with few values and ``max_cuts=None`` keep every midpoint."""
    rng = np.random.default_rng(3)
    Xg = np.column_stack([rng.normal(size=1000), rng.integers(0, 4, 1000), np.repeat(np.arange(10.0), 100)])
    full, coarse = make_split_grid(Xg), make_split_grid(Xg, 31)
    np.testing.assert_array_equal(full.n_cuts, [999, 3, 9])
    np.testing.assert_array_equal(coarse.n_cuts, [31, 3, 9])
    # few distinct values: the same midpoints and gap widths as without a cap
    for f in (1, 2):
        np.testing.assert_array_equal(coarse.thresholds[f, :3], full.thresholds[f, :3])
        np.testing.assert_array_equal(coarse.widths[f, :coarse.n_cuts[f]], full.widths[f, :full.n_cuts[f]])
    # the kept cuts are real midpoints, ascending, splitting the distinct values into 32 groups of 31-32
    kept = coarse.thresholds[0, :31]
    assert np.all(np.diff(kept) > 0) and np.isin(kept, full.thresholds[0, :999]).all()
    groups = np.bincount(coarse.bin(Xg)[:, 0], minlength=32)  # the 1000 values are distinct
    assert groups.sum() == 1000 and groups.min() >= 31 and groups.max() <= 32, groups
    # the range prior still weighs a cut by the stretch of the axis it stands for
    np.testing.assert_allclose(coarse.widths[0, :31].sum(), np.ptp(Xg[:, 0]))
    assert np.all(coarse.widths[0, :31] > 0) and np.all(coarse.widths[0, 31:] == 0)
    # a cap at or above the number of midpoints changes nothing
    np.testing.assert_array_equal(make_split_grid(Xg, 999).thresholds, full.thresholds)
    with pytest.raises(ValueError, match="max_cuts must be a positive integer or None"):
        make_split_grid(Xg, 0)
