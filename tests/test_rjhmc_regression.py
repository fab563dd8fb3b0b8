"""RJHMC-Tree regression: both leaf proposals of a grow / prune sample the exact posterior over
topologies (leaf means integrated analytically, sigma by quadrature, thresholds by quasi-Monte
Carlo), and on a planted tree with sharp thresholds every chain reaches the planted tree's fit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import invgamma, norm

from bdtree_jax.driver import run_chains
from bdtree_jax.exact import gaussian_leaf_log_lik, soft_topology_posterior, tv_distance
from bdtree_jax.kernels.rjhmc import RJHMCConfig, rjhmc

from helpers import topology_frequencies

H, ALPHA, BETA = 0.1, 0.9, 0.5
WARMUP, KEPT, CHAINS = 200, 2000, 4


@pytest.fixture(scope="module", params=["df", "dfi"])
def tiny_regression(request):
    """12 rows, 2 features; the exact topology posterior (sigma ~ InverseGamma(1.5, 1.5) integrated
    on 24 quantile nodes, leaf means N(0, 1) analytically) puts 0.1-0.5 on each depth-2 topology,
    for axis-aligned rules (HMC-DF) or oblique ones (HMC-DFI)."""
    kind = request.param
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(12, 2))
    y = 1.5 * (X[:, 0] > 0.5) + 1.0 * (X[:, 1] > 0.5) * (X[:, 0] <= 0.5) + 0.4 * rng.normal(size=12)
    K = 24
    sigmas = invgamma(a=1.5, scale=1.5).ppf((np.arange(K) + 0.5) / K)
    liks = [gaussian_leaf_log_lik(y, 0.0, 1.0, s) for s in sigmas]

    def log_lik(phi, is_leaf):
        return logsumexp(np.stack([f(phi, is_leaf) for f in liks]), axis=0) - np.log(K)

    exact = soft_topology_posterior(X, log_lik, max_depth=2, h=H, alpha=ALPHA, beta=BETA, kind=kind,
                                    n_points=2**11 if kind == "df" else 2**13)
    return kind, X, y, exact


def _config(**kw):
    base = dict(task="regression", kind="df", max_depth=2, alpha=ALPHA, beta=BETA, h_init=H, h_final=H,
                num_warmup=WARMUP, leg_steps=2, max_tree_depth=6)
    return RJHMCConfig(**{**base, **kw})


def _data(X, y):
    return {"X": jnp.asarray(X, jnp.float32), "y": jnp.asarray(y, jnp.float32)}


@pytest.mark.slow
@pytest.mark.parametrize("proposal", ["conditional", "prior"])
def test_regression_matches_exact_topology_posterior(tiny_regression, proposal):
    # ~60 s each; "conditional": the leaf means and the new rule from the data (the defaults) and
    # change moves, "prior": the paper's jump.  With the proposal densities of the redrawn leaf means, or of the
    # proposed rule, left out of the ratio the "conditional" chains fail this (checked).
    kind, X, y, exact = tiny_regression
    if kind == "dfi" and proposal == "prior":
        pytest.skip("the paper's jump is checked on HMC-DF; HMC-DFI's rule proposal is the one to check")
    assert all(0.1 < p < 0.5 for p in exact.values())
    # "conditional" also runs change moves (a nog node's rule redrawn from the scored cuts)
    moves = dict(move_probs=(0.2, 0.2, 0.2, 0.4), warmup_move_probs=(0.4, 0.2, 0.2, 0.2)) if proposal == "conditional" else {}
    config = _config(kind=kind, leaf_proposal=proposal, split_proposal=proposal, **moves)
    traces, _ = run_chains(rjhmc(config), _data(X, y), key=jax.random.key(0),
                           num_chains=CHAINS, num_iterations=WARMUP + KEPT)
    empirical = topology_frequencies(traces["is_split"][:, WARMUP:].reshape(-1, 7))
    tv = tv_distance(exact, empirical)
    print(f"{kind} {proposal}: TV {tv:.4f}")
    assert tv <= 0.05, (exact, empirical)


def planted_problem(n=300, noise=0.2, seed=0):
    """(X (n, 2) in [0, 1], y (n,), planted mean (n,)): a depth-2 tree with sharp thresholds and
    leaf means 1, 8, 5, 2 (the scale of the cgm data)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2)).astype(np.float32)
    left = X[:, 0] <= 0.4
    mean = np.where(left, np.where(X[:, 1] <= 0.55, 1.0, 8.0), np.where(X[:, 1] <= 0.3, 5.0, 2.0))
    return X, (mean + noise * rng.normal(size=n)).astype(np.float32), mean


@pytest.mark.slow
def test_every_regression_chain_reaches_the_planted_tree():
    # Four chains (seeds) from the root stump at h = 0.002.  The planted tree's log-likelihood at
    # the true noise (77) is the reference; the chains end at 66-70 (a posterior draw's fit,
    # ~66 s).  With leaf_proposal="prior" (the paper's jump: a grown leaf's mean is a prior
    # draw, so after warm-up no grow that splits data is accepted) every chain stays with
    # regions merged and sigma 0.9-1.3 absorbing the signal, at -400 to -500.
    X, y, mean = planted_problem()
    planted = norm(mean, 0.2).logpdf(y).sum()
    config = RJHMCConfig(task="regression", kind="df", max_depth=3, alpha=0.45, beta=2.5, h_init=0.002,
                         h_final=0.002, num_warmup=150, max_tree_depth=5)
    traces, _ = run_chains(rjhmc(config), _data(X, y), key=jax.random.key(1), num_chains=4, num_iterations=250)
    final = np.asarray(traces["log_lik"][:, -50:]).mean(axis=1)
    assert np.all(final > planted - 25), (final, planted)


def test_bad_leaf_options_raise_before_compiling():
    import bdtree_jax as bd

    with pytest.raises(ValueError, match="leaf_proposal"):
        bd.RJHMC(leaf_proposal="posterior")
    with pytest.raises(ValueError, match="split_proposal"):
        bd.RJHMC(split_proposal="greedy")
    with pytest.raises(ValueError, match="move_probs.*change"):
        bd.RJHMC(split_proposal="prior", move_probs=(0.2, 0.2, 0.2, 0.4))
    with pytest.raises(ValueError, match="move_probs"):
        bd.RJHMC(move_probs=(0.2, 0.2, 0.2, 0.2, 0.2))
    with pytest.raises(ValueError, match="max_tree_depth"):
        bd.RJHMC(max_tree_depth=0)


def test_defaults_are_the_cgm_configs_sampler_settings():
    """Issue 40: regression at h 0.001 (DFI annealed from 0.01) with change moves, as the cgm
    configs; classification at h 0.025 with (grow, prune, stay); NUTS depth 5 for both; a given
    h_init or h_final pulls the other default along; bad h names the argument."""
    import bdtree_jax as bd

    df, dfi = bd.RJHMC(), bd.RJHMC(kind="dfi")
    assert df.max_tree_depth == dfi.max_tree_depth == 5
    for method, h in ((df, (0.001, 0.001)), (dfi, (0.01, 0.001))):
        reg = method.config("regression", max_depth=3, num_warmup=10)
        assert (reg.h_init, reg.h_final, reg.max_tree_depth) == (*h, 5)
        assert (reg.warmup_move_probs, reg.move_probs) == ((0.4, 0.2, 0.2, 0.2), (0.2, 0.2, 0.2, 0.4))
        clf = method.config("classification", max_depth=3, num_warmup=10)
        assert (clf.h_init, clf.h_final, clf.max_tree_depth) == (0.025, 0.025, 5)
        assert (clf.warmup_move_probs, clf.move_probs) == ((0.5, 0.25, 0.25), (0.2, 0.2, 0.6))
    paper = bd.RJHMC(split_proposal="prior").config("regression", max_depth=3, num_warmup=10)
    assert paper.move_probs == (0.2, 0.2, 0.6)  # no change moves without the scored cuts
    assert bd.RJHMC(move_probs=(0.3, 0.3, 0.4)).config("regression", max_depth=3, num_warmup=10).move_probs == (
        0.3, 0.3, 0.4)
    assert bd.RJHMC(h_init=0.0005).h("regression") == (0.0005, 0.0005)
    assert bd.RJHMC(h_init=0.05).h("regression") == (0.05, 0.001)
    assert bd.RJHMC(h_final=0.02).h("regression") == (0.02, 0.02)
    assert bd.RJHMC(kind="dfi", h_final=0.005).h("regression") == (0.01, 0.005)
    assert bd.RJHMC(h_init=0.01).h("classification") == (0.01, 0.01)
    assert bd.RJHMC(h_final=0.1).h("classification") == (0.1, 0.1)
    with pytest.raises(ValueError, match="h_final must be a finite number"):
        bd.RJHMC(h_final="sharp")
    with pytest.raises(ValueError, match="h_final"):
        bd.RJHMC(h_init=0.01, h_final=0.02)
