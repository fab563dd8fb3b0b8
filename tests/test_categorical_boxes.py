"""Box constraints with a categorical feature and missing cells: the general CGM chain
(:mod:`bdtree_jax.kernels.cgm`, box check in ``score``) against the exact enumerator
(:func:`bdtree_jax.exact.categorical.enumerate_mixed_trees`, its own box rule), and the user-facing
box specs with level names (:mod:`bdtree_jax.priors.boxes`).

The box ``{x0: (1.5, 5.5), x1: {b, c}}`` on 7 rows (x0 ordered with a missing cell, x1 with
levels a, b, c and a missing cell): at a node holding it, ``x0 <= 2.5 / 3.5 / 4.5`` and the level
sets ``{b}``, ``{c}`` cut it; ``x1 in {b, c}`` sends it left, so the right child may split on x0
anywhere."""

import collections
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy.special import logsumexp

from bdtree_jax.driver import run_chains
from bdtree_jax.exact.categorical import enumerate_mixed_trees
from bdtree_jax.kernels import cgm, regrow
from bdtree_jax.kernels._moves import score
from bdtree_jax.kernels.tempering import ladder, tempered
from bdtree_jax.likelihoods import NormalMeanShift
from bdtree_jax.priors import TreePrior, make_tree_data
from bdtree_jax.priors.boxes import box_level_masks, box_sides, violates_boxes_general
from bdtree_jax.priors.categorical import check_general_rules
from bdtree_jax.problem import build_problem
from bdtree_jax.tree import MISSING_CODE, from_string, to_string

X = np.array([[1.0, 0], [2, 1], [np.nan, 2], [4, 0], [5, 1], [3, 2], [6, np.nan]])
Y = np.array([0.1, 1.2, -0.3, 0.9, 1.4, 0.2, 1.1])
CATEGORICAL = np.array([False, True])
LIK = NormalMeanShift(nu=3.0, lam=1.0, a=1.0 / 3, mu_bar=0.0)
LEVELS = (None, np.array(["a", "b", "c"], object))
BOX = {"x0": (1.5, 5.5), "x1": {"b", "c"}}  # as a user gives it (level labels)
EXACT_BOX = {0: (1.5, 5.5), 1: {1, 2}}  # as the enumerator takes it (level codes)


def _kernel_data(prior, boxes=(BOX,)):
    """Grid and TreeData of ``X`` as the input layer builds them, with ``boxes`` encoded by
    :func:`box_sides` / :func:`box_level_masks` (None: no boxes)."""
    values = np.unique(X[~np.isnan(X[:, 0]), 0])
    cuts = (values[:-1] + values[1:]) / 2
    thresholds = np.full((2, len(cuts)), np.inf)
    thresholds[0] = cuts
    codes = np.zeros(X.shape, np.int32)
    codes[:, 0] = np.where(np.isnan(X[:, 0]), MISSING_CODE, np.searchsorted(cuts, np.nan_to_num(X[:, 0]), side="left"))
    codes[:, 1] = np.where(np.isnan(X[:, 1]), MISSING_CODE, np.nan_to_num(X[:, 1])).astype(np.int32)
    grid = SimpleNamespace(thresholds=thresholds, n_cuts=np.array([len(cuts), 0]), widths=np.ones_like(thresholds),
                           level_count=np.array([0, 3]), missing_code=MISSING_CODE, levels=LEVELS)
    side = levels = None
    if boxes is not None:
        side = box_sides(list(boxes), thresholds, ["x0", "x1"], levels=LEVELS)
        levels = box_level_masks(list(boxes), LEVELS, ["x0", "x1"])
    return grid, make_tree_data(codes, Y, prior, LIK, grid=grid, box_side=side, box_levels=levels)


def _enumerate(prior, boxes):
    return enumerate_mixed_trees(X, LIK.point_stats(Y), prior, LIK, categorical=CATEGORICAL, boxes=boxes)


def _exact(prior) -> dict:
    trees = _enumerate(prior, [EXACT_BOX])
    log_post = np.array([lp + ll for _, lp, ll in trees])
    return {s: float(p) for (s, _, _), p in zip(trees, np.exp(log_post - logsumexp(log_post)))}


def _frequencies(traces, thresholds) -> dict:
    flat = jax.tree.map(lambda a: np.asarray(a).reshape((-1,) + a.shape[2:]), traces["tree"])
    count = collections.Counter(to_string(jax.tree.map(lambda a: a[i], flat), thresholds, LEVELS)
                                for i in range(flat.is_split.shape[0]))
    total = sum(count.values())
    return {s: c / total for s, c in count.items()}


def _tv(p: dict, q: dict) -> float:
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def _tree(text: str, thresholds, max_depth: int = 2):
    """A tree string as a kernel tree with both rule fields (a stump's included)."""
    t = from_string(text, thresholds, max_depth, level_count=np.array([0, 3]))
    n = t.is_split.shape[0]
    return t._replace(nan_left=np.zeros(n, bool) if t.nan_left is None else t.nan_left,
                      levels_left=np.zeros((n, 1), np.uint32) if t.levels_left is None else t.levels_left)


@pytest.mark.parametrize("text, cuts", [
    ("x1in{1}|NA=L(L,L)", True), ("x1in{2}|NA=R(L,L)", True), ("x1in{1,2}|NA=L(L,L)", False),
    ("x0<=3.5|NA=L(L,L)", True), ("x0<=2.5|NA=R(L,L)", True), ("x0<=1.5|NA=R(L,L)", False),
    ("x0<=5.5|NA=L(L,L)", False),
    # x1 in {b, c} sends the box left: the left child may not cut it, the right child may split anywhere
    ("x1in{1,2}|NA=L(x0<=3.5|NA=L(L,L),L)", True), ("x1in{1,2}|NA=L(L,x0<=3.5|NA=L(L,L))", False),
    ("x1in{1,2}|NA=R(x1in{2}|NA=L(L,L),L)", True),
    # x0 <= 1.5 sends the box right: splits on x1 at the left child are free
    ("x0<=1.5|NA=L(x1in{2}|NA=L(L,L),L)", False), ("x0<=1.5|NA=L(L,x1in{1}|NA=L(L,L))", True),
])
def test_rule_cutting_the_box_has_zero_prior(text, cuts):
    """The kernel's prior is 0 exactly for a tree with a rule cutting the box at a node holding
    it, whatever the missing bits; without the box the same trees have positive prior."""
    prior = TreePrior(alpha=0.95, beta=1.0, max_depth=2)
    config = cgm.CGMConfig.from_prior(prior, general_rules=True)
    grid, data = _kernel_data(prior)
    _, free = _kernel_data(prior, boxes=None)
    tree = jax.tree.map(jnp.asarray, _tree(text, grid.thresholds))
    assert np.isfinite(float(score(tree, free, config, 1.0).log_prior))
    assert np.isfinite(float(score(tree, data, config, 1.0).log_prior)) != cuts
    assert bool(violates_boxes_general(tree, data.box_side, data.box_levels)) == cuts


def test_kernel_and_enumerator_agree_on_every_tree():
    """Every tree of depth <= 2 without boxes: the kernel gives it prior 0 under the box iff the
    enumerator (its own box rule) leaves it out, and the same log prior otherwise."""
    prior = TreePrior(alpha=0.95, beta=1.0, max_depth=2)
    config = cgm.CGMConfig.from_prior(prior, general_rules=True)
    grid, data = _kernel_data(prior)
    every = _enumerate(prior, None)
    kept = {s: lp for s, lp, _ in _enumerate(prior, [EXACT_BOX])}
    assert 0 < len(kept) < len(every)
    trees = jax.tree.map(lambda *a: jnp.asarray(np.stack(a)), *[_tree(s, grid.thresholds) for s, _, _ in every])
    log_prior = np.asarray(jax.jit(jax.vmap(lambda t: score(t, data, config, 1.0).log_prior))(trees))
    for (s, _, _), lp in zip(every, log_prior):
        assert np.isfinite(lp) == (s in kept), s
        if s in kept:
            assert abs(lp - kept[s]) < 1e-4, s


@pytest.mark.xla_optimized
@pytest.mark.parametrize("proposal", [pytest.param("cgm", marks=pytest.mark.slow), "cgm+regrow", pytest.param("tempered", marks=pytest.mark.slow)])
def test_cgm_matches_exact_posterior_with_boxes(proposal):
    """The general CGM chain (proposal "cgm", "cgm+regrow", or tempered CGM) under the box:
    every sampled tree respects it (is in the enumerator's support: 63 of the 1,013 trees) and
    the visit frequencies are within TV 0.04 of the exact posterior (measured 0.013, 0.010,
    0.010; without the box check in ``score`` 73% of the draws cut the box)."""
    prior = TreePrior(alpha=0.95, beta=1.0, max_depth=2)
    grid, data = _kernel_data(prior)
    config = cgm.CGMConfig.from_prior(prior, general_rules=True)
    algorithm = {"cgm": lambda: cgm.cgm(config),
                 "cgm+regrow": lambda: regrow.with_regrow(config),
                 "tempered": lambda: tempered(cgm.cgm(config), ladder(3))}[proposal]()
    traces, _ = run_chains(algorithm, data, key=jax.random.key(5), num_chains=4, num_iterations=20_000,
                           progress=False)
    sampled, exact = _frequencies(traces, grid.thresholds), _exact(prior)
    assert set(sampled) <= set(exact)
    assert _tv(sampled, exact) < 0.04



@pytest.mark.slow
@pytest.mark.parametrize("chain", ["perturb", "edit"])
def test_perturb_and_edit_prior_respect_boxes(chain):
    """The perturb proposal ("cgm+perturb", fixed width, half changes of variable) and the edit
    prior (``initial_tree`` respecting the box: edits that would cut it leave the tree as it is,
    as in the enumerator's edit process) re-score through ``_moves.score``: within TV 0.04
    of the exact posteriors under the box (measured 0.011 and 0.013)."""
    from bdtree_jax.kernels import edit, perturb

    prior = TreePrior(alpha=0.95, beta=1.0, max_depth=2)
    grid, data = _kernel_data(prior)
    config = cgm.CGMConfig.from_prior(prior, general_rules=True)
    if chain == "perturb":
        algorithm = perturb.with_perturb(config, perturb.PerturbConfig.from_cgm(config, p_change_var=0.5, adapt=False))
        traces, _ = run_chains(algorithm, data, key=jax.random.key(7), num_chains=4, num_iterations=20_000,
                               progress=False)
        sampled, exact = _frequencies(traces, grid.thresholds), _exact(prior)
        assert set(sampled) <= set(exact)
        assert _tv(sampled, exact) < 0.04
        return
    t0 = "x1in{1,2}|NA=L(L,L)"
    tree = edit.initial_tree(t0, X=X, bins=data.bins, thresholds=grid.thresholds, level_count=grid.level_count,
                             nan_bits=True, max_depth=2)
    edit_config = edit.EditConfig(2, 1, mean_edits=1.5, max_edits=5, regrow_prob=0.5, general_rules=True)
    traces, _ = run_chains(edit.edit_prior(edit_config),
                           edit.EditData(data, jax.tree.map(jnp.asarray, tree)), key=jax.random.key(8), num_chains=4,
                           num_iterations=15_000, progress=False)
    flat = jax.tree.map(lambda a: a[:, 200:], traces["tree"])
    sampled = _frequencies(dict(tree=flat), grid.thresholds)
    trees = enumerate_mixed_trees(X, LIK.point_stats(Y), prior, LIK, categorical=CATEGORICAL, boxes=[EXACT_BOX],
                                  initial_tree=t0, mean_edits=1.5, max_edits=5)
    log_post = np.array([lp + ll for _, lp, ll in trees])
    exact = {s: float(p) for (s, _, _), p in zip(trees, np.exp(log_post - logsumexp(log_post)))}
    assert set(sampled) <= set(exact)
    assert _tv(sampled, exact) < 0.04


def _penguins():
    return pd.DataFrame({"island": ["Biscoe", "Dream", "Torgersen", "Biscoe", None, "Dream", "Torgersen", "Biscoe"],
                         "mass": [3.1, 4.2, np.nan, 5.0, 3.8, 4.4, 3.3, 4.9]}), np.array([0, 1, 0, 1, 1, 0, 0, 1])


def test_build_problem_encodes_level_names():
    """Level labels become the box's level mask (all levels where the box does not name the
    column); ordered columns keep their sides."""
    X_df, y = _penguins()
    problem = build_problem(X_df, y, box_constraints=[{"island": {"Biscoe", "Dream"}, "mass": (3.5, 4.5)},
                                                      {1: (None, 4.0)}])
    levels = list(problem.grid.levels[0])
    want = sum(1 << levels.index(v) for v in ("Biscoe", "Dream"))
    box_levels = np.asarray(problem.data.box_levels)
    assert box_levels.shape == (2, 2, 1)
    assert box_levels[0, 0, 0] == want and box_levels[1, 0, 0] == 0b111 and not box_levels[:, 1].any()
    side = np.asarray(problem.data.box_side)
    t = problem.grid.thresholds[1, : problem.grid.n_cuts[1]]
    assert np.array_equal(side[0, 1, : len(t)], np.where(t <= 3.5, 1, np.where(t >= 4.5, 0, 2)))
    check_general_rules(problem.data, "cgm", "method='cgm'", boxes=True)  # the general CGM chain takes them
    with pytest.raises(ValueError, match="box constraints are not supported"):
        check_general_rules(problem.data, "cgm", "method='wu'")


@pytest.mark.parametrize("box, message", [
    ({"island": {"Biscoe", "Atlantis"}}, "unknown level 'Atlantis' of column 'island'"),
    ({"island": "Biscoe"}, "non-empty set"),
    ({"island": set()}, "non-empty set"),
    ({"island": {"Biscoe", None}}, "no missing values"),
    ({"mass": {3.0, 4.0}}, "ordered"),
    ({"mass": (5.0, 4.0)}, "low < high"),
    ({"beak": (1, 2)}, "unknown feature 'beak'"),
])
def test_bad_box_specs_are_named(box, message):
    X_df, y = _penguins()
    with pytest.raises(ValueError, match=message):
        build_problem(X_df, y, box_constraints=[box])


@pytest.mark.slow
def test_sample_respects_level_box():
    """bd.sample with method=CGM(box_constraints=...) on a table with a string column and missing
    cells: the draws never cut the box."""
    import bdtree_jax as bd

    X_df, y = _penguins()
    box = {"island": ["Biscoe", "Dream"]}
    post = bd.sample(X_df, y, method=bd.CGM(box_constraints=[box]), prior=bd.TreePrior(max_depth=2),
                     num_warmup=100, num_samples=300, num_chains=1, progress=False)
    problem = build_problem(X_df, y, box_constraints=[box])
    trees = jax.tree.map(lambda a: jnp.asarray(np.asarray(a).reshape((-1,) + np.asarray(a).shape[2:])), post.trees)
    bad = jax.vmap(lambda t: violates_boxes_general(t, problem.data.box_side, problem.data.box_levels))(trees)
    assert not np.asarray(bad).any()
    assert np.asarray(trees.is_split).any()
