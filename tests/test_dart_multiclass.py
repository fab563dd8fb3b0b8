"""DART around multinomial logistic BART (``BARTClassifier(sparse=True)`` with K >= 3 classes):
:func:`bdtree_jax.kernels.dart.dart` with ``base`` :class:`bdtree_jax.kernels.bart_multiclass.ClassKernel`,
one ``s`` shared by the K forests (a feature's splits in every class count towards it).

Geweke's "getting it right" of the sparse multiclass sweep (latents ``phi``, then each class's
counts sweep with the rule prior weighted by ``s``, then the ``s`` and ``theta`` steps over all
K x M trees) on 12 full-factorial rows of features with 1, 1 and 2 cuts (nodes often lack a
feature; no box of the ancestors' rules is empty, so ``s``'s prior is the Dirichlet), 3 classes of
2 trees, with two planted errors in the same program that fail it: the sweep reading the
unweighted rule prior, and the ``s`` step counting the first class's splits only.  And the
estimator end to end."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bdtree_jax as bd
import helpers
from bdtree_jax.kernels import bart_multiclass as bm
from bdtree_jax.kernels import dart
from bdtree_jax.likelihoods import BARTLeafPoissonGamma
from bdtree_jax.problem.bart_multiclass import build_bart_multiclass_problem
from bdtree_jax.tree import n_leaves
from test_dart_outcomes import X, plant_sweep_errors

K = 3
G_CHAINS, G_ITERS, G_PRIOR = 128, 1000, 100_000
G_NAMES = ("s0", "s0^2", "s2", "features used", "lambda", "mean leaves", "P(y=0|x_0)", "P(y=2|x_5)",
           "sum log lam")


def _problem(sampler="grow-prune"):
    p = build_bart_multiclass_problem(X, np.arange(len(X)) % K, n_trees=2, max_depth=3, alpha=0.95, beta=1.0,
                                      valid_cuts="ancestors", max_cuts=None)
    td = p.data.tree_data._replace(likelihood=BARTLeafPoissonGamma(jnp.float32(2.0), jnp.float32(2.0)))
    data = p.data._replace(tree_data=td, offsets=jnp.log(jnp.asarray([0.5, 0.3, 0.2], jnp.float32)))
    return data, bm.multiclass_config(2, max_depth=3, tree_sampler=sampler, incremental=False)


def _stats(state: dart.DARTState, data) -> jax.Array:
    t = state.bart.trees.tree  # (K, M, N)
    s = jnp.exp(state.log_s)
    used = jnp.any((t.feature[..., None] == jnp.arange(s.shape[0])) & t.is_split[..., None], axis=(0, 1, 2))
    probs = bm.class_probs(data.offsets, state.bart.fit)
    leaves = jax.vmap(jax.vmap(n_leaves))(t).astype(jnp.float32)
    return jnp.stack([s[0], s[0] ** 2, s[2], jnp.sum(used).astype(jnp.float32), state.theta / (state.theta + s.shape[0]),
                      jnp.mean(leaves), probs[0, 0], probs[2, 5], bm.leaf_log_lambda_sum(state.bart)])


def sparse_multiclass_geweke(dart_config, sampler="grow-prune", variants=1, seed=0):
    """:func:`helpers.geweke_variants` of the sparse multiclass sweep: labels from the model, then
    one sweep, from DART's joint prior around the multiclass model's."""
    data, config = _problem(sampler)
    base = bm.ClassKernel(K)

    def step(key, state, d):
        k_y, k_sweep = jax.random.split(key)
        d = d._replace(y=bm.simulate_y(k_y, state.bart, d))
        state, info = dart.step(k_sweep, state, d, config, dart_config, base)
        return state, d, info

    return helpers.geweke_variants(lambda key: dart.prior_draw(key, data, config, dart_config, base), step,
                                   lambda state: _stats(state, data), data, G_CHAINS, G_ITERS, G_PRIOR, variants, seed,
                                   G_NAMES)


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_geweke_sparse_multiclass_sweep_and_planted_errors(monkeypatch):
    """128 chains x 1,000 sparse multiclass sweeps (grow-prune, theta's hyperprior) from the joint
    prior vs 100,000 forward draws: every |z| < 4; in the same program, on their own 128 chains
    each, the sweep reading the unweighted rule prior and the ``s`` step counting the first class's
    splits only: some |z| > 6."""
    errors = plant_sweep_errors(monkeypatch)
    helpers.check_geweke_variants(sparse_multiclass_geweke(dart.DARTConfig(), variants=3),
                                  errors)


@pytest.mark.filterwarnings("ignore::bdtree_jax.ConvergenceWarning")
def test_classifier_sparse_multiclass_end_to_end():
    """``BARTClassifier(sparse=True)`` on three classes whose labels depend on x0 only (2 noise
    features): ``split_probs_`` (chains, draws, features) on the simplex, most mass on x0; the
    same seed gives the same draws; probabilities (n, 3)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(120, 3))
    y = np.digitize(X[:, 0], [1 / 3, 2 / 3])
    kw = dict(num_trees=10, num_warmup=100, num_samples=100, num_chains=2, seed=0, sparse=True)
    clf = bd.BARTClassifier(**kw).fit(X, y)
    assert clf.split_probs_.shape == (2, 100, 3)
    np.testing.assert_allclose(clf.split_probs_.sum(-1), 1.0, rtol=1e-5)
    assert clf.split_probs_[..., 0].mean() > 0.8, clf.split_probs_.mean((0, 1))
    assert clf.predict_proba(X).shape == (120, 3) and (clf.predict(X) == y).mean() > 0.9
    # inclusion over every class's trees: x0 in every draw
    assert clf.variable_inclusion_.shape == (3,) and clf.variable_inclusion_[0] == 1.0
    assert list(clf.sparsity_summary(prob=0.9).index) == ["x0", "x1", "x2"]
    again = bd.BARTClassifier(**kw).fit(X, y)
    np.testing.assert_array_equal(again.split_probs_, clf.split_probs_)
