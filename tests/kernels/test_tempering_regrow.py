"""Prune-and-regrow, tempering and box constraints against exact enumeration (issue #5)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bdtree_jax.data import make_split_grid
from bdtree_jax.exact import tree_frequencies, tv_distance
from bdtree_jax.kernels import cgm, regrow, tempering
from bdtree_jax.diagnostics import swap_rates
from bdtree_jax.priors import TreePrior, box_sides, violates_boxes
from bdtree_jax.driver import run_chains
from bdtree_jax.tree import from_string

from helpers import chain_frequencies

# Same budget as the CGM enumeration test: 16 chains x 30,000 iterations; on the 256-tree
# support the Monte Carlo TV of regrow is ~0.015 there, so 0.04 fails only on real bias.
CHAINS, ITERS, BURN = 16, 30_000, 500
# boxes that leave a fair part of the toy problem's trees allowed (checked below)
BOXES = [{"x0": (4.2, None), "x1": (None, 2.8)}, {0: (None, 1.8), 1: (5.5, 7.0)}]


def _algorithm(kind, prior, n_temperatures=1):
    if kind == "regrow":
        algorithm = regrow.regrow(regrow.RegrowConfig(prior.max_depth, prior.min_leaf_size))
    elif kind == "cgm+regrow":
        algorithm = regrow.with_regrow(cgm.CGMConfig.from_prior(prior))
    else:
        algorithm = cgm.cgm(cgm.CGMConfig.from_prior(prior))
    if n_temperatures > 1:
        algorithm = tempering.tempered(algorithm, tempering.ladder(n_temperatures, 0.5))
    return algorithm


@pytest.mark.xla_optimized
@pytest.mark.parametrize(
    "kind,n_temperatures,task,min_leaf_size,max_depth",
    [
        pytest.param("regrow", 1, "classification", 1, 2, marks=pytest.mark.slow),
        ("regrow", 1, "regression", 1, 2),
        ("regrow", 1, "classification", 2, 3),
        ("cgm", 4, "classification", 1, 2),
        pytest.param("regrow", 3, "regression", 2, 3, marks=pytest.mark.slow),
    ],
)
def test_matches_enumerated_posterior(toy_problem, kind, n_temperatures, task, min_leaf_size, max_depth):
    """The regrow chain and the tempered cold chain sample the exact posterior (TV <= 0.04)."""
    p = toy_problem(task, max_depth, min_leaf_size)
    iters = ITERS if n_temperatures == 1 else ITERS // 2  # tempered chains mix faster
    traces, _ = run_chains(
        _algorithm(kind, p.prior, n_temperatures), p.data, key=jax.random.key(7), num_chains=CHAINS,
        num_iterations=iters, block_size=iters,
    )
    freqs = chain_frequencies(traces, p.grid.thresholds, BURN)
    assert set(freqs) <= set(p.exact), "sampler visited a tree outside the prior's support"
    assert tv_distance(freqs, p.exact) <= 0.04
    if n_temperatures > 1:
        rates = swap_rates(traces["swap_pair"], traces["swap_accepted"], n_temperatures)
        upper = rates[np.triu_indices(n_temperatures, 1)]
        assert np.all((upper > 0.05) & (upper < 1.0))


def test_swap_acceptance_matches_exact_rate(toy_problem):
    """At stationarity the rungs are independent draws from their tempered posteriors, so the
    acceptance rate of swaps between rungs i and j is E[min(1, (L_j / L_i)^(b_i - b_j))] under
    that product law -- computed exactly by enumeration and compared with the recorded rates."""
    p = toy_problem("classification", 2, 1)
    log_lik = np.array([ll for _, ll in p.trees.values()])
    betas = tempering.ladder(3, 0.5)
    post = []
    for b in betas:
        log_post = np.array([lp + b * ll for lp, ll in p.trees.values()])
        post.append(np.exp(log_post - log_post.max()) / np.exp(log_post - log_post.max()).sum())
    traces, _ = run_chains(
        _algorithm("cgm", p.prior, 3), p.data, key=jax.random.key(3), num_chains=8, num_iterations=20_000,
        block_size=20_000,
    )
    rates = swap_rates(traces["swap_pair"][:, BURN:], traces["swap_accepted"][:, BURN:], 3)
    for i, j in ((0, 1), (0, 2), (1, 2)):
        ratio = np.minimum(1.0, np.exp((betas[i] - betas[j]) * (log_lik[None, :] - log_lik[:, None])))
        expected = post[i] @ ratio @ post[j]  # rows: rung i's tree, columns: rung j's tree
        assert abs(rates[i, j] - expected) < 0.02, (i, j, rates[i, j], expected)


@pytest.mark.xla_optimized
@pytest.mark.parametrize("kind,n_temperatures", [("cgm", 1), ("regrow", 1), pytest.param("cgm+regrow", 3, marks=pytest.mark.slow)])
def test_box_constraints_renormalise_the_posterior(toy_problem, kind, n_temperatures):
    """No tree that cuts a box is visited, and the others get the exact posterior conditioned on
    the constraint (enumeration leaves violating trees out and renormalises)."""
    p = toy_problem("classification", 2, 1, boxes=BOXES)
    exact, unconstrained = p.exact, toy_problem("classification", 2, 1).exact
    assert 10 < len(exact) < len(unconstrained) and sum(unconstrained[k] for k in exact) < 0.9
    traces, _ = run_chains(
        _algorithm(kind, p.prior, n_temperatures), p.data, key=jax.random.key(5), num_chains=CHAINS,
        num_iterations=ITERS // 2, block_size=ITERS // 2,
    )
    freqs = chain_frequencies(traces, p.grid.thresholds, BURN)
    assert set(freqs) <= set(exact), "a tree cutting a box was visited"
    assert tv_distance(freqs, exact) <= 0.04


def test_violates_boxes_follows_the_box_down_the_tree(toy_data):
    X, _, _ = toy_data
    grid = make_split_grid(X)
    side = jnp.asarray(box_sides(BOXES, grid.thresholds))
    cases = {
        "L": False,
        "x0<=4.5(L,L)": True,  # cuts box 0 (x0 in (4.2, inf)) at the root
        "x0<=3.5(L,L)": False,  # box 0 lies right of 3.5, box 1 left
        "x0<=1.5(L,L)": True,  # cuts box 1 (x0 in (-inf, 1.8))
        "x0<=3.5(L,x1<=2.5(L,L))": True,  # box 0 reaches the right child and 2.5 cuts (-inf, 2.8)
        "x0<=3.5(x1<=2.5(L,L),L)": False,  # the same rule where box 0 is not
        "x1<=5.5(L,L)": False,  # box 1 has x1 in (5.5, 7): 5.5 is its edge, not inside
        "x1<=4.5(L,x1<=5.5(L,L))": False,
    }
    for text, expected in cases.items():
        tree = from_string(text, grid.thresholds, 2)
        assert bool(violates_boxes(tree, side)) is expected, text


def test_box_constraint_errors():
    thresholds = np.array([[1.5, 2.5], [0.5, np.inf]])
    with pytest.raises(ValueError, match=r"unknown feature 'petal'"):
        box_sides([{"petal": (0, 1)}], thresholds, ["a", "b"])
    with pytest.raises(ValueError, match="needs low < high"):
        box_sides([{"a": (2, 1)}], thresholds, ["a", "b"])
    with pytest.raises(ValueError, match="out of range"):
        box_sides([{5: (0, 1)}], thresholds)
    with pytest.raises(ValueError, match="pair"):
        box_sides([{0: "wide"}], thresholds)
    assert box_sides([{"b": (None, 1.0)}], thresholds, ["a", "b"]).tolist() == [[[2, 2], [2, 0]]]


def test_regrow_from_root_draws_from_the_prior(toy_problem):
    """Regrowing the root with no data term is an independent draw from the prior: the
    frequencies of many draws match the enumerated prior."""
    p = toy_problem(prior=TreePrior(max_depth=2, alpha=0.95, beta=0.5, min_leaf_size=2))
    data = p.data
    from bdtree_jax.priors import regrow_subtree

    stump = cgm.init(None, data, cgm.CGMConfig.from_prior(p.prior))
    n_slots = stump.tree.is_split.shape[0]
    keys = jax.random.split(jax.random.key(0), 40_000)
    draws = jax.jit(jax.vmap(lambda k: regrow_subtree(
        stump.tree, stump.leaf_id, stump.lo, stump.hi, jnp.int32(0), jax.random.uniform(k, (n_slots, 3)), data, 2)[0]
    ))(keys)
    freqs = tree_frequencies(draws, p.grid.thresholds)
    exact = {s: float(np.exp(lp)) for s, (lp, _) in p.trees.items()}
    assert abs(sum(exact.values()) - 1) < 1e-9
    assert set(freqs) <= set(exact) and tv_distance(freqs, exact) <= 0.02


def test_sampler_option_errors(toy_data):
    """Options a method does not use, and bad ladders, are named before anything compiles."""
    import bdtree_jax as bd

    X, y, _ = toy_data
    kw = dict(num_warmup=1, num_samples=1, num_chains=1, progress=False)
    with pytest.raises(ValueError, match="num_temperatures is an option of method='cgm'"):
        bd.sample(X, y, method="pcfg", num_temperatures=2, **kw)
    with pytest.raises(ValueError, match="proposal is an option of method='cgm'"):
        bd.sample(X, y, method="hmc-df", proposal="regrow", **kw)
    with pytest.raises(ValueError, match="box_constraints is an option"):
        bd.sample(X, y, method="hmc-dfi", box_constraints=[{0: (1, 2)}], **kw)
    for method in ("cgm", "hmc-df"):
        with pytest.raises(ValueError, match="num_temperatures must be an integer >= 1"):
            bd.sample(X, y, method=method, num_temperatures=0, **kw)
        with pytest.raises(ValueError, match="delta_t must be a finite number > 0"):
            bd.sample(X, y, method=method, num_temperatures=2, delta_t=float("nan"), **kw)
    with pytest.raises(ValueError, match="proposal must be one of"):
        bd.sample(X, y, proposal="gibbs", **kw)
