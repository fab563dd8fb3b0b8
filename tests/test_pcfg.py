"""BCART-PCFG against brute-force enumeration of every tree (exact.enumerate_pcfg_trees: explicit
recursion over row sets, no boxes and no dynamic program), plus the estimator path."""

import collections

import jax
import numpy as np
import pytest
from scipy.special import logsumexp

import bdtree_jax as bd
from bdtree_jax import exact, pcfg
from bdtree_jax.data import make_split_grid
from bdtree_jax.likelihoods import DirichletMultinomial, NormalMeanShift
from bdtree_jax.tree import from_string, leaf_index, to_string

LOG_PHI = 1.0
NUM_DRAWS = 40_000
LIK = DirichletMultinomial(2, 1.0)


def _tiny():
    """8 rows; feature 2 repeats a split of feature 0 (x0 <= 1.5), so the same two row sets come
    from two features and must count once."""
    X = np.array([[0, 0], [0, 1], [1, 0], [1, 1], [2, 2], [2, 0], [3, 3], [3, 1]], float)
    X = np.c_[X, X[:, 0] > 1.5]
    y = np.array([0, 1, 1, 0, 0, 1, 0, 1])
    return X, y


# (rows, max_depth): 6 rows unbounded has 102 trees, 8 rows at depth <= 2 has 72; with 40,000
# draws the expected Monte Carlo TV is 0.017 and 0.015 (sum_T sqrt(p(1-p)/(2 pi N))).
CASES = [(6, None), (8, 2)]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"rows{c[0]}-depth{c[1]}")
def case(request):
    rows, max_depth = request.param
    X, y = _tiny()
    X, y = X[:rows], y[:rows]
    ps = LIK.point_stats(y)
    codes, cuts = pcfg.code_features(X)
    g = pcfg.build_grammar(codes, ps, LIK, log_phi=LOG_PHI, max_depth=max_depth, boundary_cut=cuts)
    trees = exact.enumerate_pcfg_trees(X, ps, LIK, log_phi=LOG_PHI, max_depth=max_depth)
    weights = np.array([w for _, w, _ in trees])
    probs = {s: float(p) for (s, _, _), p in zip(trees, np.exp(weights - logsumexp(weights)))}
    return dict(X=X, y=y, ps=ps, codes=codes, g=g, trees=trees, weights=weights, probs=probs,
                thresholds=make_split_grid(X).thresholds, max_depth=max_depth)


def _strings(trees, thresholds):
    return [to_string(jax.tree.map(lambda a: a[i], trees), thresholds) for i in range(trees.is_split.shape[0])]


def test_sampled_tree_frequencies_match_enumeration(case):
    trees, log_lik, leaves = pcfg.sample_trees(case["g"], jax.random.key(0), NUM_DRAWS)
    strings = _strings(trees, case["thresholds"])
    assert set(strings) <= set(case["probs"])  # only trees the prior allows, in canonical form
    freq = {k: v / NUM_DRAWS for k, v in collections.Counter(strings).items()}
    assert exact.tv_distance(case["probs"], freq) <= 0.03
    # the per-draw log likelihood and leaf count agree with the enumerated trees
    by_string = {s: (w, len(ls)) for s, w, ls in case["trees"]}
    for s, ll, b in list(zip(strings, log_lik, leaves))[:200]:
        w, nb = by_string[s]
        assert b == nb
        np.testing.assert_allclose(ll - LOG_PHI * b, w, atol=1e-4)


def test_map_tree_is_the_enumerated_argmax(case):
    best = max(case["probs"], key=case["probs"].get)
    assert to_string(pcfg.map_tree(case["g"]), case["thresholds"]) == best
    np.testing.assert_allclose(case["g"].log_qmax[-1, 0] - case["g"].log_q[-1, 0], np.log(case["probs"][best]),
                               atol=1e-4)


def test_log_prob_matches_enumeration(case):
    g, bins = case["g"], make_split_grid(case["X"]).bin(case["X"])
    depth = g.heap_depth
    for s, p in case["probs"].items():
        tree = from_string(s, case["thresholds"], depth)
        np.testing.assert_allclose(pcfg.log_prob(g, tree, bins, case["ps"]), np.log(p), atol=1e-4)
    # a split with an empty side breaks the Tree Constraints
    stump = from_string("x0<=0.5(L,L)", case["thresholds"], depth)
    empty = stump._replace(is_split=stump.is_split.copy())
    empty.is_split[1] = True  # node 1 holds rows with x0 <= 0.5; split it again on x0 <= 0.5
    empty.feature[1], empty.cut[1] = 0, 0
    assert pcfg.log_prob(g, empty, bins, case["ps"]) == -np.inf


def test_log_evidence_matches_enumeration(case):
    b = np.array([len(ls) for _, _, ls in case["trees"]])
    expected = logsumexp(case["weights"]) - logsumexp(-LOG_PHI * b)
    np.testing.assert_allclose(case["g"].log_evidence, expected, atol=1e-4)


def test_predictive_equals_the_enumerated_average_and_paths_estimate_it(case):
    g, X = case["g"], case["X"]
    queries = np.array([[0.2, 0.4, 0.0], [2.7, 1.5, 1.0], [1.2, 2.6, 0.0], [3.5, 0.0, 1.0]])
    bins, q_bins = make_split_grid(X).bin(X), make_split_grid(X).bin(queries)
    expected = np.zeros((len(queries), 2))
    for s, p in case["probs"].items():
        tree = jax.tree.map(np.asarray, from_string(s, case["thresholds"], g.heap_depth))
        leaf_train = np.asarray(leaf_index(tree, bins))
        for i, leaf in enumerate(np.asarray(leaf_index(tree, q_bins))):
            counts = case["ps"][leaf_train == leaf].sum(0)
            expected[i] += p * (counts + 1.0) / (counts.sum() + 2.0)
    q_codes = np.stack([np.searchsorted(case["thresholds"][f, :], queries[:, f]) for f in range(3)], 1)
    got = pcfg.predictive(g, q_codes)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    boxes = pcfg.sample_paths(g, jax.random.key(1), q_codes, 20_000)
    paths = np.asarray(LIK.leaf_mean(g.stats[boxes])).mean(0)
    np.testing.assert_allclose(paths, expected, atol=0.01)  # sd of a path mean <= 0.5/sqrt(20000)


def test_grid_lookups_and_scans_find_the_same_boxes():
    X, y = bd.datasets.load("iris")
    X, y = X.to_numpy()[::2], np.unique(y.to_numpy()[::2], return_inverse=True)[1]
    lik = DirichletMultinomial(3, 1.0)
    codes, cuts = pcfg.code_features(X, 5)
    kw = dict(log_phi=2.0, max_depth=3, boundary_cut=cuts)
    grid = pcfg.build_grammar(codes, lik.point_stats(y), lik, **kw)
    scans = pcfg.build_grammar(codes, lik.point_stats(y), lik, grid_bytes=0, **kw)
    assert grid.n_boxes == scans.n_boxes > 100
    np.testing.assert_allclose(grid.log_q[-1, 0], scans.log_q[-1, 0], rtol=1e-6)
    np.testing.assert_allclose(grid.log_qmax[-1, 0], scans.log_qmax[-1, 0], rtol=1e-6)


def test_too_many_boxes_is_a_clear_error():
    X, y = bd.datasets.make_xor(100, num_features=20)
    codes, cuts = pcfg.code_features(X.to_numpy())
    with pytest.raises(ValueError, match="max_boxes=5,000.*num_buckets=.*max_depth="):
        pcfg.build_grammar(codes, LIK.point_stats(y.to_numpy()), LIK, max_boxes=5_000)
    with pytest.raises(ValueError, match="GiB.*over the max_bytes=.*num_buckets=.*max_depth="):
        pcfg.build_grammar(codes, LIK.point_stats(y.to_numpy()), LIK, max_bytes=2e6)


def test_regression_leaf_marginal_is_the_one_leaf_case_of_cgm():
    rng = np.random.default_rng(0)
    lik = NormalMeanShift(nu=3.0, lam=0.5, a=1 / 3, mu_bar=0.2)
    stats = lik.point_stats(rng.normal(size=9)).sum(0)
    one_leaf = lik.log_lik(stats[None], np.array([True]))
    np.testing.assert_allclose(lik.leaf_log_lik(stats), one_leaf, rtol=1e-6)


@pytest.fixture(scope="module")
def iris_fit():
    X, y = bd.datasets.load("iris")
    clf = bd.BayesianTreeClassifier(method="pcfg", num_buckets=10, max_depth=4, num_samples=300, num_chains=2)
    return X, y, clf.fit(X, y)


@pytest.mark.slow
@pytest.mark.xla_optimized
def test_classifier_finds_the_papers_iris_tree(iris_fit):
    X, y, clf = iris_fit
    post = clf.posterior_
    map_tree = post.map_tree()
    assert 2 * int(map_tree.is_split.sum()) + 1 == 7  # the paper's 7-node iris tree
    assert post.log_prob(map_tree) >= post.stats["log_posterior"].max() + post.grammar.log_phi - post.grammar.log_q[-1, 0] - 1e-4
    exact_acc = (post.classes[post.predictive(X).argmax(1)] == y).mean()
    assert exact_acc >= 0.95 and clf.score(X, y) >= 0.95
    np.testing.assert_allclose(post.predict_draws(X).mean(0), post.predictive(X), atol=0.05)  # 600 draws
    assert "posterior" in post.to_arviz().groups()


def test_draws_reproducible_and_independent_of_chain_count(iris_fit):
    X, y, clf = iris_fit
    one = bd.sample(X, y, method="pcfg", num_buckets=10, max_depth=4, num_samples=300, num_chains=1)
    two = clf.posterior_
    for a, b in zip(one.trees, two.trees):
        np.testing.assert_array_equal(a[0], b[0])


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(num_buckets=1), "num_buckets"),
        (dict(min_leaf_size=2), "min_leaf_size"),
        (dict(log_phi=float("nan")), "log_phi"),
        (dict(move_probs=(0.5, 0.5, 0, 0)), "move_probs"),
        (dict(max_depth=0), "max_depth"),
    ],
)
def test_bad_pcfg_arguments_raise_before_any_work(kw, match):
    X, y = _tiny()
    with pytest.raises(ValueError, match=match):
        bd.sample(X, y, method="pcfg", **kw)


def test_save_load_keeps_the_grammar(iris_fit, tmp_path):
    from bdtree_jax.posterior import PCFGPosterior

    X, y, clf = iris_fit
    post = clf.posterior_
    post.save(tmp_path / "pcfg.pkl")
    loaded = PCFGPosterior.load(tmp_path / "pcfg.pkl")
    np.testing.assert_array_equal(loaded.predictive(X[:20]), post.predictive(X[:20]))
    assert loaded.tree_text() == post.tree_text()


@pytest.mark.slow
def test_cli_reports_exact_scores(tmp_path):
    import json

    from bdtree_jax.cli import main

    config = "iris_pcfg"  # a bundled config (bdtree_jax/configs)
    assert main(["run", config, "--output", str(tmp_path), "--set", "num_samples=100", "--set", "max_depth=4"]) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["map_tree_nodes"] == 7 and metrics["test_accuracy_exact_predictive"] > 0.9
    assert abs(metrics["test_accuracy_pooled"] - metrics["test_accuracy_exact_predictive"]) <= 0.05


def test_without_draws_the_grammar_answers_exactly():
    X, y = _tiny()
    post = bd.sample(X, y, method="pcfg", max_depth=None, log_phi=LOG_PHI, num_samples=0)
    assert post.num_draws == 0
    probs = exact.enumerate_pcfg_posterior(X, LIK.point_stats(y), LIK, log_phi=LOG_PHI)
    assert to_string(post.map_tree(), make_split_grid(X).thresholds) == max(probs, key=probs.get)
    np.testing.assert_allclose(post.predict_proba(X).sum(1), 1.0, rtol=1e-5)
