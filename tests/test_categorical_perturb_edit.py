"""The perturb proposal ("cgm+perturb") and the edit prior (``initial_tree``) with a categorical
feature and missing cells, against the exact posterior of
:func:`bdtree_jax.exact.categorical.enumerate_mixed_trees` (its own recursion over rows; for the
edit prior its own forward pass over the edit process), on the 7 rows of
``tests/test_categorical_cgm.py`` (every tree of depth <= 2: 1,089 under ``valid_cuts="data"``).

What would fail: the perturb chain runs with a *fixed* width (no adaptation) and
``p_change_var=0.5``, so half of its moves are changes of variable whose ratio carries
``p_rule(old) / p_rule(new)``: between the ordered feature (4 or 5 cuts) and the categorical one
(3 or 1 partitions) that factor is far from 1, and dropping it moves the root's feature
frequencies by several times the tolerance.  The categorical perturbation moves one level
(width 0.1), a symmetric move whose left set may become empty (rejected); a move that proposed
the smallest level, or a bit not redrawn from 1/2, leaves the support or the prior (the
enumerated support is checked).  The edit prior's exact law (mass 0.47 at the initial tree,
0.13 at the stump, the rest spread over the 1,089 trees) is far from the CGM98 prior's, so a
chain with the wrong prior fails by a TV of 0.61; its path moves' ratios are the numeric ones,
and a wrong edit law shows in the frequencies of the trees one or two edits away (edits whose
rules always send missing values left: TV 0.144 at the test's length)."""

import collections
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

from bdtree_jax.driver import run_chains
from bdtree_jax.exact.categorical import enumerate_mixed_trees
from bdtree_jax.kernels import cgm, edit, perturb
from bdtree_jax.likelihoods import NormalMeanShift
from bdtree_jax.priors import TreePrior, make_tree_data
from bdtree_jax.tree import MISSING_CODE, to_string

X = np.array([[1.0, 0], [2, 1], [np.nan, 2], [4, 0], [5, 1], [3, 2], [6, 0]])
Y = np.array([0.1, 1.2, -0.3, 0.9, 1.4, 0.2, 1.1])
CATEGORICAL = np.array([False, True])
LIK = NormalMeanShift(nu=3.0, lam=1.0, a=1.0 / 3, mu_bar=0.0)
LEVELS = [None, np.array(["a", "b", "c"])]
T0, MEAN_EDITS, MAX_EDITS = "x1in{2}|NA=L(L,L)", 1.5, 5


def _kernel_data(prior):
    """Codes, grid and TreeData of ``X`` (column 1 categorical), as tests/test_categorical_cgm.py."""
    values = np.unique(X[~np.isnan(X[:, 0]), 0])
    cuts = (values[:-1] + values[1:]) / 2
    thresholds = np.full((2, len(cuts)), np.inf)
    thresholds[0] = cuts
    codes = np.zeros(X.shape, np.int32)
    codes[:, 0] = np.where(np.isnan(X[:, 0]), MISSING_CODE, np.searchsorted(cuts, np.nan_to_num(X[:, 0]), side="left"))
    codes[:, 1] = X[:, 1].astype(int)
    grid = SimpleNamespace(thresholds=thresholds, n_cuts=np.array([len(cuts), 0]), widths=np.ones_like(thresholds),
                           level_count=np.array([0, 3]), missing_code=MISSING_CODE)
    return grid, make_tree_data(codes, Y, prior, LIK, grid=grid)


def _frequencies(traces, thresholds, burn=0) -> dict:
    flat = jax.tree.map(lambda a: np.asarray(a)[:, burn:].reshape((-1,) + a.shape[2:]), traces["tree"])
    count = collections.Counter(to_string(jax.tree.map(lambda a: a[i], flat), thresholds, LEVELS)
                                for i in range(flat.is_split.shape[0]))
    total = sum(count.values())
    return {s: c / total for s, c in count.items()}


def _exact(prior, **edit) -> dict:
    trees = enumerate_mixed_trees(X, LIK.point_stats(Y), prior, LIK, categorical=CATEGORICAL, **edit)
    log_post = np.array([lp + ll for _, lp, ll in trees])
    return {s: float(p) for (s, _, _), p in zip(trees, np.exp(log_post - logsumexp(log_post)))}


def _tv(p: dict, q: dict) -> float:
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


PRIOR = TreePrior(alpha=0.95, beta=1.0, max_depth=2)


@pytest.mark.slow
def test_perturb_matches_exact_posterior():
    """CGM then a perturb proposal per iteration (fixed width 0.1, half the perturbations changes
    of variable): within TV 0.04 of the exact posterior (0.026 measured; 0.030 at 4 x 20k; dropping the
    change of variable's ``p_rule`` ratio gives 0.108 at 4 x 20k)."""
    grid, data = _kernel_data(PRIOR)
    config = cgm.CGMConfig.from_prior(PRIOR, general_rules=True)
    algorithm = perturb.with_perturb(config, perturb.PerturbConfig.from_cgm(config, p_change_var=0.5, adapt=False))
    traces, _ = run_chains(algorithm, data, key=jax.random.key(5), num_chains=4, num_iterations=30_000,
                           progress=False)
    sampled, exact = _frequencies(traces, grid.thresholds), _exact(PRIOR)
    assert set(sampled) <= set(exact)
    assert _tv(sampled, exact) < 0.04
    assert 0.1 < float(np.mean(traces["perturb_accepted"])) < 0.9


def test_edit_prior_matches_exact_posterior():
    """The edit prior around a tree with a level set and a missing-value bit: the path chain
    (local and regrow moves, half and half) within TV 0.04 of the exact edit-prior posterior
    (0.018 measured; 0.019 at 4 x 10k); the exact law puts 0.47 of its prior mass on ``T0``, so the
    plain CGM98 posterior is far from it."""
    grid, data = _kernel_data(PRIOR)
    tree = edit.initial_tree(T0, X=X, bins=data.bins, thresholds=grid.thresholds, level_count=grid.level_count,
                             nan_bits=True, max_depth=2)
    config = edit.EditConfig(2, 1, mean_edits=MEAN_EDITS, max_edits=MAX_EDITS, regrow_prob=0.5, general_rules=True)
    traces, _ = run_chains(edit.edit_prior(config), edit.EditData(data, jax.tree.map(jnp.asarray, tree)),
                           key=jax.random.key(6), num_chains=4, num_iterations=15_000, progress=False)
    sampled = _frequencies(traces, grid.thresholds, burn=200)
    exact = _exact(PRIOR, initial_tree=T0, mean_edits=MEAN_EDITS, max_edits=MAX_EDITS)
    assert set(sampled) <= set(exact)
    assert _tv(sampled, exact) < 0.04
    assert _tv(exact, _exact(PRIOR)) > 0.2  # the test tells the edit prior from the CGM98 prior
    k = np.asarray(traces["n_edits"])
    assert k.min() == 0 and k.max() == MAX_EDITS


def _raw_rows():
    import pandas as pd

    frame = pd.DataFrame({"x0": X[:, 0], "x1": np.array(["a", "b", "c"])[X[:, 1].astype(int)]})
    frame.loc[4, "x1"] = None  # a missing level too
    return frame, Y


def test_sample_cgm_perturb_on_raw_rows():
    """``bd.sample(method="cgm", proposal="cgm+perturb")`` on rows with strings and NaN: level
    sets and bits drawn, the perturb proposals recorded."""
    import bdtree_jax as bd

    frame, y = _raw_rows()
    post = bd.sample(frame, y, method=bd.CGM(proposal="cgm+perturb"), task="regression",
                     prior=bd.TreePrior(max_depth=2), num_warmup=200, num_samples=500, num_chains=2, progress=False)
    assert post.trees.levels_left is not None and post.trees.nan_left is not None
    strings = post.tree_strings()
    assert any("in{" in s for s in strings) and all(s == "L" or "|NA=" in s for s in strings)
    assert post.info["proposal"] == "cgm+perturb"


def test_sample_initial_tree_on_raw_rows():
    """``initial_tree=`` as a tree string on rows with strings and NaN: the draws stay near it
    (much more mass at it than under the CGM98 prior), and bad strings are ValueErrors before
    compiling."""
    import bdtree_jax as bd

    frame, y = _raw_rows()
    kw = dict(method="cgm", task="regression", prior=bd.TreePrior(max_depth=2), num_warmup=200, num_samples=1500,
              num_chains=2, progress=False)
    near = bd.sample(frame, y, initial_tree=T0, mean_edits=0.3, max_edits=4, **kw)
    share = np.mean([s == T0 for s in near.tree_strings()])
    assert share > 0.4, share  # CGM98 posterior mass at T0 on the 7 coded rows: 0.095
    assert near.trees.levels_left is not None
    short = dict(kw, num_warmup=1, num_samples=1, num_chains=1)
    for bad, match in [("x1in{2}(L,L)", r"'\|NA=L' or '\|NA=R'"), ("x0in{1}|NA=L(L,L)", "threshold"),
                       ("x1<=1.5|NA=L(L,L)", "level set"), ("x1in{0}|NA=L(L,L)", "outside the prior's support"),
                       ("x1in{5}|NA=L(L,L)", "has 3 levels")]:
        with pytest.raises(ValueError, match=match):
            bd.sample(frame, y, initial_tree=bad, **short)
    with pytest.raises(ValueError, match="tree string or a MixedTree"):
        from sklearn.tree import DecisionTreeRegressor

        bd.sample(frame, y, initial_tree=DecisionTreeRegressor(max_depth=1), **short)
    with pytest.raises(ValueError, match="cgm\\+perturb"):
        bd.sample(frame, y, method=bd.CGM(proposal="cgm+perturb", initial_tree=T0), **short)
