"""CGM with a categorical feature and missing cells against the exact posterior of
:func:`bdtree_jax.exact.categorical.enumerate_mixed_trees`, which implements the rule prior of
docs/categorical-missing.md on its own (plain recursion over rows, no kernel code).  The kernel's
data are built here directly (codes, level masks, the missing code), so the test pins the kernel
side whatever the table reader does."""

import collections
from types import SimpleNamespace

import jax
import numpy as np
import pytest
from scipy.special import logsumexp

from bdtree_jax.driver import run_chains
from bdtree_jax.exact.categorical import enumerate_mixed_trees
from bdtree_jax.kernels import cgm, regrow
from bdtree_jax.kernels.tempering import ladder, tempered
from bdtree_jax.likelihoods import NormalMeanShift
from bdtree_jax.priors import TreePrior, make_tree_data
from bdtree_jax.tree import MISSING_CODE, to_string

# 7 rows: x0 ordered with one missing cell, x1 categorical with levels 0, 1, 2
X = np.array([[1.0, 0], [2, 1], [np.nan, 2], [4, 0], [5, 1], [3, 2], [6, 0]])
Y = np.array([0.1, 1.2, -0.3, 0.9, 1.4, 0.2, 1.1])
CATEGORICAL = np.array([False, True])
LIK = NormalMeanShift(nu=3.0, lam=1.0, a=1.0 / 3, mu_bar=0.0)
LEVELS = [None, np.array(["a", "b", "c"])]


def _kernel_data(X, prior, missing_bits=True):
    """Codes, grid and TreeData of ``X`` (column 1 categorical) as the input layer builds them."""
    values = np.unique(X[~np.isnan(X[:, 0]), 0])
    cuts = (values[:-1] + values[1:]) / 2
    thresholds = np.full((2, len(cuts)), np.inf)
    thresholds[0] = cuts
    codes = np.zeros(X.shape, np.int32)
    codes[:, 0] = np.where(np.isnan(X[:, 0]), MISSING_CODE,
                           np.searchsorted(cuts, np.nan_to_num(X[:, 0]), side="left"))
    codes[:, 1] = X[:, 1].astype(int)
    grid = SimpleNamespace(thresholds=thresholds, n_cuts=np.array([len(cuts), 0]), widths=np.ones_like(thresholds),
                           level_count=np.array([0, 3]), missing_code=MISSING_CODE if missing_bits else None)
    return grid, make_tree_data(codes, Y, prior, LIK, grid=grid)


def _frequencies(traces, thresholds) -> dict:
    flat = jax.tree.map(lambda a: np.asarray(a).reshape((-1,) + a.shape[2:]), traces["tree"])
    count = collections.Counter(to_string(jax.tree.map(lambda a: a[i], flat), thresholds, LEVELS)
                                for i in range(flat.is_split.shape[0]))
    total = sum(count.values())
    return {s: c / total for s, c in count.items()}


def _exact(prior) -> dict:
    trees = enumerate_mixed_trees(X, LIK.point_stats(Y), prior, LIK, categorical=CATEGORICAL)
    log_post = np.array([lp + ll for _, lp, ll in trees])
    return {s: float(p) for (s, _, _), p in zip(trees, np.exp(log_post - logsumexp(log_post)))}


def _tv(p: dict, q: dict) -> float:
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


@pytest.mark.xla_optimized
@pytest.mark.parametrize("valid_cuts", ["data", pytest.param("ancestors", marks=pytest.mark.slow)])
def test_cgm_matches_exact_posterior_with_categorical_and_missing(valid_cuts):
    """Every sampled tree is in the exact support, and the visit frequencies are within TV 0.04
    of the exact posterior (1,089 trees of depth <= 2 under "data": level partitions, the
    missing cell routed by the bits, each bit a prior draw where no row is missing)."""
    prior = TreePrior(alpha=0.95, beta=1.0, max_depth=2, valid_cuts=valid_cuts)
    grid, data = _kernel_data(X, prior)
    config = cgm.CGMConfig.from_prior(prior, general_rules=True)
    traces, _ = run_chains(cgm.cgm(config), data, key=jax.random.key(0), num_chains=4, num_iterations=60_000,
                           progress=False)
    sampled, exact = _frequencies(traces, grid.thresholds), _exact(prior)
    assert set(sampled) <= set(exact)
    assert _tv(sampled, exact) < 0.04


def test_cgm_rule_draws_cover_every_level_partition():
    """A categorical rule's left set is one of the 2**(k-1) - 1 partitions (never the smallest
    level), and a chain visits all three of the root's with the exact posterior's frequencies
    relative to each other (level sets drawn uniformly: a biased draw shows here)."""
    prior = TreePrior(alpha=0.95, beta=1.0, max_depth=1)
    grid, data = _kernel_data(X, prior)
    traces, _ = run_chains(cgm.cgm(cgm.CGMConfig.from_prior(prior, general_rules=True)), data,
                           key=jax.random.key(1), num_chains=2, num_iterations=20_000, progress=False)
    sampled, exact = _frequencies(traces, grid.thresholds), _exact(prior)
    roots = [s for s in exact if s.startswith("x1in")]
    assert sorted({s.split("|")[0] for s in roots}) == ["x1in{1,2}", "x1in{1}", "x1in{2}"]
    for s in roots:
        assert abs(sampled.get(s, 0.0) - exact[s]) < 0.02, s


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_tempered_cgm_matches_exact_posterior():
    """Tempered CGM (4 rungs, swaps exchanging the rungs' inverse temperatures): the cold chain
    within TV 0.04 of the exact posterior."""
    prior = TreePrior(alpha=0.95, beta=1.0, max_depth=2)
    grid, data = _kernel_data(X, prior)
    algorithm = tempered(cgm.cgm(cgm.CGMConfig.from_prior(prior, general_rules=True)), ladder(4))
    traces, _ = run_chains(algorithm, data, key=jax.random.key(2), num_chains=2, num_iterations=60_000,
                           progress=False)
    sampled, exact = _frequencies(traces, grid.thresholds), _exact(prior)
    assert set(sampled) <= set(exact)
    assert _tv(sampled, exact) < 0.04


@pytest.mark.xla_optimized
@pytest.mark.slow
@pytest.mark.parametrize("with_cgm", [False, True])
def test_regrow_matches_exact_posterior(with_cgm):
    """Prune-and-regrow (subtrees redrawn from the prior with level partitions and missing bits),
    alone and mixed with CGM: within TV 0.04 of the exact posterior."""
    prior = TreePrior(alpha=0.95, beta=1.0, max_depth=2)
    grid, data = _kernel_data(X, prior)
    config = cgm.CGMConfig.from_prior(prior, general_rules=True)
    algorithm = regrow.with_regrow(config) if with_cgm else regrow.regrow(regrow.RegrowConfig(2))
    # regrow alone moves in smaller steps through the 1,089 trees: more draws for the same noise
    # (0.041 at 4 x 40k, 0.023 at 4 x 160k)
    traces, _ = run_chains(algorithm, data, key=jax.random.key(3), num_chains=4,
                           num_iterations=40_000 if with_cgm else 120_000, progress=False)
    sampled, exact = _frequencies(traces, grid.thresholds), _exact(prior)
    assert set(sampled) <= set(exact)
    assert _tv(sampled, exact) < 0.04


@pytest.mark.xla_optimized
@pytest.mark.parametrize("tree_sampler", ["grow-prune", pytest.param("cgm", marks=pytest.mark.slow)])
def test_one_bart_tree_matches_exact_posterior(tree_sampler):
    """BART with one tree and sigma2 fixed on the categorical + missing data: the residual is y,
    so the trees follow p(T) p(y | T) with the leaf values integrated out.  The exact posterior
    takes each tree's log prior from the enumerator and its marginal likelihood from scipy's
    normal density of each leaf's rows (leaves from the enumerator's own string routing)."""
    from scipy.stats import multivariate_normal

    from bdtree_jax.exact.categorical import string_leaf_partition
    from bdtree_jax.kernels import bart
    from bdtree_jax.likelihoods import BARTLeafNormal

    sigma2, tau2 = 1.0, 0.5
    prior = TreePrior(alpha=0.95, beta=1.0, max_depth=2, valid_cuts="ancestors")
    grid, data = _kernel_data(X, prior)
    f32 = lambda v: jax.numpy.asarray(v, jax.numpy.float32)  # noqa: E731
    td = data._replace(likelihood=BARTLeafNormal(f32(sigma2), f32(tau2)))
    bart_data = bart.BARTData(td, f32(Y), f32(3.0), f32(1.0), f32(sigma2), f32(1.0))
    config = bart.BARTConfig(1, 2, tree_sampler, sample_sigma=False, record_trees=True, general_rules=True)
    traces, _ = run_chains(bart.bart(config), bart_data, key=jax.random.key(4), num_chains=4, num_iterations=60_000,
                           progress=False)
    traces = dict(traces, tree=jax.tree.map(lambda a: a[:, :, 0], traces["tree"]))
    sampled = _frequencies(traces, grid.thresholds)

    trees = enumerate_mixed_trees(X, LIK.point_stats(Y), prior, LIK, categorical=CATEGORICAL)
    log_post = []
    for s, log_prior, _ in trees:
        log_lik = sum(multivariate_normal(np.zeros(len(g)), sigma2 * np.eye(len(g)) + tau2).logpdf(Y[sorted(g)])
                      for g in string_leaf_partition(s, X))
        log_post.append(log_prior + log_lik)
    log_post = np.array(log_post)
    exact = {s: float(p) for (s, _, _), p in zip(trees, np.exp(log_post - logsumexp(log_post)))}
    assert set(sampled) <= set(exact)
    assert _tv(sampled, exact) < 0.04


@pytest.mark.filterwarnings("ignore::bdtree_jax.data.MissingValueRoutingWarning")  # routing tested here; the warning in test_missing_routing.py
def test_bart_estimators_fit_tables_with_categorical_columns_and_missing_cells():
    """The BART estimators take a raw table (airquality: NaN cells; Month as a category) and
    predict on it, with unseen levels and missing cells at prediction routed as missing."""
    import pandas as pd

    import bdtree_jax as bd

    X, y = bd.datasets.load("airquality")
    X = X.assign(Month=X.Month.astype(str))
    model = bd.BARTRegressor(num_trees=10, num_warmup=30, num_samples=30, num_chains=1, progress=False).fit(X, y)
    assert model.posterior_.trees.levels_left is not None and model.posterior_.trees.nan_left is not None
    rmse = np.sqrt(np.mean((model.predict(X) - np.asarray(y)) ** 2))
    assert rmse < 0.7 * np.std(y)
    new = X.head(3).assign(Month=["13", "5", None], Wind=[np.nan, 7.0, 8.0])
    assert np.all(np.isfinite(model.predict(new)))
    clf = bd.BARTClassifier(num_trees=10, num_warmup=30, num_samples=30, num_chains=1, progress=False)
    clf.fit(X, np.asarray(y) > np.median(y))
    assert clf.predict_proba(pd.concat([X.head(2), new])).shape == (5, 2)
