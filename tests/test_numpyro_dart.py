"""DART on NumPyro tree sites: ``bdtree_jax.numpyro.bart(..., sparse=True)`` updated by
``TreeGibbs`` (issue #41, item 5).

Fast (the default job): a ``"normal"`` site's sparse update is, draw for draw, the sweep of
``BARTRegressor(sparse=True)`` (:func:`bdtree_jax.kernels.dart.step_with_draws`, whose exactness
tests/test_dart.py's Geweke test checks) on the same residual and randomness, and the sample
values hold its ``s``; the input errors.  Slow: the samples of an ``MCMC`` run; Geweke's
"getting it right" of the site path itself (prior draws of theta, s, trees and leaves vs
successive-conditional sampling of y and one ``TreeGibbs`` iteration) for the ``"normal"``,
``"probit"`` and general ``"mh"`` updates, with two planted errors that fail it (the trees' rule
prior left unweighted in the site's update; the ``s`` step counting the first tree's splits
only)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax.scipy.stats import norm
from numpyro.infer import MCMC, NUTS

import helpers
from bdtree_jax.kernels import bart as bart_kernel
from bdtree_jax.kernels import dart
from bdtree_jax.numpyro import TreeGibbs, bart
from bdtree_jax.numpyro.gibbs import TreeGibbsState
from bdtree_jax.tree import leaf_nodes, n_leaves, tree_depth

# every combination of the features' levels once: no box of the ancestors' rules is empty, so the
# truncation to non-empty leaves never binds and s's prior is exactly the Dirichlet (kernels/dart.py)
X = np.array(list(itertools.product([0.0, 1.0], [0.0, 1.0], [0.0, 1.0, 2.0])))
M, SCALE = 3, 4.0 * np.sqrt(3.0)  # tau2 = (SCALE / (2 k sqrt(M)))**2 = 1
Y = np.sin(np.arange(len(X), dtype=np.float32))


def _model(obs: str, theta=None):
    def model(X, y):
        f = bart("f", X, num_trees=M, offset=0.0, scale=SCALE, max_depth=3, beta=1.0, sparse=True,
                 sparse_theta=theta)
        if obs == "normal":
            numpyro.sample("y", dist.Normal(f, 1.0), obs=y)
        else:
            numpyro.sample("y", dist.Bernoulli(probs=norm.cdf(f)), obs=y)

    return model


def _kernel(obs: str = "normal", kind: str | None = None, theta=None, y=Y):
    kernel = TreeGibbs(NUTS(_model(obs, theta)), kinds=None if kind is None else {"f": kind})
    state = kernel.init(jax.random.key(0), 0, None, (X, y), {})
    return kernel, state


def _from_prior(key, kernel, state):
    """``state`` with the site's theta, s, trees and leaf values drawn from their prior."""
    spec = kernel._sites[0].spec
    d = dart.prior_draw(key, spec.problem.data, spec.config, spec.dart)
    return state._replace(trees=(d.bart,), sparsity=((d.log_s, d.theta),))


def test_sparse_normal_site_is_the_estimators_dart_sweep():
    """From a prior draw, one ``TreeGibbs`` update of a ``Normal(f, 0.7)`` site with
    ``sparse=True`` gives bit for bit the trees, leaves, fit, ``s`` and ``theta`` of
    :func:`bdtree_jax.kernels.dart.step_with_draws` (the estimators' sparse sweep) with the same
    randomness on the site's working residual ``y - (loc - f)`` and ``sigma2 = 0.49``."""
    def model(X, y):
        f = bart("f", X, num_trees=M, offset=0.25, scale=SCALE, max_depth=3, beta=1.0, sparse=True)
        numpyro.sample("y", dist.Normal(f, 0.7), obs=y)

    kernel = TreeGibbs(NUTS(model))
    state = kernel.init(jax.random.key(0), 0, None, (X, Y), {})
    assert kernel.site_kinds == {"f": "normal"}
    site = kernel._sites[0]
    spec = site.spec

    @jax.jit
    def both(key):
        k_prior, k_sweep = jax.random.split(key)
        start = _from_prior(k_prior, kernel, state)
        values = kernel._values(start.trees, {})
        tree_state, _, (log_s, theta) = kernel._update_sparse(site, k_sweep, start.trees[0], start.sparsity[0],
                                                              values, (X, Y), {})
        # the working residual y - (loc - f) as the site reads it (y - 0.25 up to float32 round-off)
        loc = kernel._trace(values, (X, Y), {})["y"]["fn"].loc
        residual = (Y - loc + start.trees[0].fit).astype(jnp.float32)
        # the site's keys: (trees, s) = split(k_sweep), and its normal update's sweep key split(trees)[0]
        k_trees, k_s = jax.random.split(k_sweep)
        draws = dart.DARTDraws(bart_kernel.draw(jax.random.split(k_trees)[0], spec.config), k_s)
        ref, _ = dart.step_with_draws(draws, dart.DARTState(start.trees[0]._replace(sigma2=jnp.float32(0.49)),
                                                   *start.sparsity[0]),
                           spec.problem.data._replace(y=residual), spec.config, spec.dart)
        return (tree_state, log_s, theta), (ref.bart, ref.log_s, ref.theta), start

    ours, ref, start = both(jax.random.key(7))
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(ours[1]), np.asarray(start.sparsity[0][0]))  # s moved
    z = kernel._z((ours[0],), None, ((ours[1], ours[2]),))  # the sample values: s itself and theta
    np.testing.assert_array_equal(np.asarray(z["f_split_probs"]), np.asarray(jnp.exp(ours[1])))
    assert z["f_sparse_theta"] == ours[2]


@pytest.mark.slow
def test_sparse_site_samples_hold_split_probabilities():
    """(End to end; docs/numpyro.md's example runs one in the docs job too.)  ``mcmc.get_samples()``
    holds ``f_split_probs`` (S, F) on the simplex and ``f_sparse_theta`` (S,) > 0; the packed
    trees stay out of the samples."""
    mcmc = MCMC(TreeGibbs(NUTS(_model("normal"))), num_warmup=3, num_samples=4, progress_bar=False)
    mcmc.run(jax.random.key(1), X, Y)
    s = mcmc.get_samples()
    assert s["f_split_probs"].shape == (4, X.shape[1]) and s["f_sparse_theta"].shape == (4,)
    np.testing.assert_allclose(np.asarray(s["f_split_probs"]).sum(-1), 1.0, rtol=1e-5)
    assert np.all(np.asarray(s["f_sparse_theta"]) > 0) and "f_trees" not in s


@pytest.mark.parametrize("kwargs,match", [
    ({"sparse": "yes"}, r"bart\('f'\): sparse must be True or False"),
    ({"sparse": True, "sparse_theta": -1.0}, r"bart\('f'\): sparse_theta must be"),
    ({"sparse": True, "sparse_a": 0.0}, r"bart\('f'\): sparse_a must be"),
])
def test_sparse_site_input_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        with numpyro.handlers.seed(rng_seed=0):
            bart("f", X, num_trees=2, **kwargs)


def test_sparse_site_names_taken():
    """A model site named like the split probabilities' sample is refused at ``init``."""
    def model(X, y):
        f = bart("f", X, num_trees=2, sparse=True)
        numpyro.deterministic("f_split_probs", f)
        numpyro.sample("y", dist.Normal(f, 1.0), obs=y)

    with pytest.raises(ValueError, match="f_split_probs"):
        TreeGibbs(NUTS(model)).init(jax.random.key(0), 0, None, (X, Y), {})


# ----------------------------------------------------------------------------------------------
# Geweke's "getting it right" of the site path

# 256 chains: the chain means of lambda (and of s) are heavy-tailed (a chain whose theta wanders up,
# where its hyperprior is flat, stays there for hundreds of iterations), so 32 chains' spread
# misjudged the standard error: one seed of the "mh" hyperprior case gave z(lambda) = +4.4 at
# 32 x 2,000, while six seeds' means averaged 0.334 (prior 0.333) and 512 x 2,000 gave -1.2
G_CHAINS, G_ITERS, G_PRIOR = 256, 2000, 100_000
G_NAMES = ("s0", "s0^2", "s2", "features used", "lambda", "mean leaves", "mean depth", "sum mu")


def _stats(state: TreeGibbsState):
    bstate, (log_s, theta) = state.trees[0], state.sparsity[0]
    t = bstate.trees.tree
    s = jnp.exp(log_s)
    used = jnp.any((t.feature[..., None] == jnp.arange(s.shape[0])) & t.is_split[..., None], axis=(0, 1))
    return jnp.stack([s[0], s[0] ** 2, s[2], jnp.sum(used).astype(jnp.float32), theta / (theta + s.shape[0]),
                      jnp.mean(jax.vmap(n_leaves)(t).astype(jnp.float32)),
                      jnp.mean(jax.vmap(tree_depth)(t).astype(jnp.float32)),
                      jnp.sum(jnp.where(leaf_nodes(t), bstate.leaf_values, 0.0))])


def site_geweke(obs: str, kind: str | None, theta=None, seed: int = 0):
    """z-scores (:func:`helpers.geweke_z`, standard errors from the independent chains' means)
    of the site path: ``y ~ p(y | f)`` then one ``TreeGibbs`` iteration (``kind`` forced)."""
    kernel, state = _kernel(obs, kind, theta, y=(Y > 0).astype(np.float32))

    def geweke_step(key, st, y, config):
        k_y, k_sweep = jax.random.split(key)
        f = st.trees[0].fit  # offset 0
        y = f + jax.random.normal(k_y, f.shape) if obs == "normal" else \
            (jax.random.uniform(k_y, f.shape) < norm.cdf(f)).astype(jnp.float32)
        return kernel.sample(st._replace(rng_key=k_sweep), (X, y), {}), y, None

    model = SimpleNamespace(prior_draw=lambda key, data, config: _from_prior(key, kernel, state),
                            geweke_step=geweke_step)
    y0 = jnp.zeros(len(X), jnp.float32)
    with np.errstate(divide="ignore", invalid="ignore"):  # a fixed theta: lambda has no spread
        z, sc, mc = helpers.geweke_z(model, y0, None, _stats, G_CHAINS, G_ITERS, G_PRIOR, seed=seed, batches=1,
                                     means=True)
    z = np.where(np.isfinite(z), z, 0.0)
    return z, ", ".join(f"{n}: z={v:+.2f} ({a:.3f} vs {b:.3f})" for n, v, a, b in zip(G_NAMES, z, sc, mc))


@pytest.mark.xla_optimized
@pytest.mark.slow
@pytest.mark.parametrize("obs,kind,theta", [("probit", None, 0.5), ("normal", None, None), ("normal", "mh", None)])
def test_geweke_sparse_site(obs, kind, theta):
    """256 chains x 2,000 iterations of the site path from prior draws vs 100,000 prior draws of
    (theta, s, trees, leaves) on 12 full-factorial rows (features with 1, 1 and 2 cuts, so nodes
    often lack a feature): every |z| < 4.  Observed (XLA's default flags): |z| <= 2.09 with theta =
    0.5, <= 2.62 with its hyperprior (the "mh" update's mean depth; lambda +1.07 "normal", +0.21 "mh")."""
    z, report = site_geweke(obs, kind, theta)
    print(obs, kind, theta, report)
    assert np.all(np.abs(z) < 4.0), report


@pytest.mark.xla_optimized
@pytest.mark.slow
@pytest.mark.parametrize("planted", ["unweighted site update", "one tree's counts"])
def test_geweke_sparse_site_planted_errors(planted, monkeypatch):
    """The same test (theta = 0.5, "normal") fails with the site's tree update ignoring ``s``
    (the rule prior unweighted: observed z(features used) = +105.4, z(s0^2) = -24.9) or with the
    ``s`` step counting the first tree's splits only (z(features used) = +26.1, z(s2) = -15.9)."""
    if planted == "unweighted site update":
        update = TreeGibbs._update
        monkeypatch.setattr(TreeGibbs, "_update", lambda self, *a, log_s=None, **k: update(self, *a, **k))
    else:
        counts = dart.split_counts
        monkeypatch.setattr(dart, "split_counts", lambda trees, n: counts(jax.tree.map(lambda a: a[:1], trees), n))
    z, report = site_geweke("normal", None, 0.5)
    print(planted, report)
    assert np.max(np.abs(z)) > 6.0, report
