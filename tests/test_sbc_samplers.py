"""Calibration of the continuous quantities (issue #38), the default-suite part: Geweke's (2004)
successive-conditional test of CGM (the CPU default, incremental kernel) with the library's
posterior draw of sigma^2 and the leaf means, and of BART's grow-prune sweep (leaf values, sigma^2
and the fit sampled inside the kernel), each with its planted-error twins in the same compiled
program; plus checks of the helpers themselves (the exact prior simulator, the rank test).
``tests/test_sbc_samplers_slow.py`` has the other samplers; ``docs/theory/calibration.md`` the
method, tolerances and what the checks cannot see.

Every test: the correct sampler must have every |z| <= Z_TOL = 4.5 and each planted twin some
|z| >= TWIN_MIN = 8 (so a twin fails clearly, not marginally)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from bdtree_jax.kernels import bart, cgm
from bdtree_jax.likelihoods import BARTLeafNormal, NormalMeanShift
from bdtree_jax.priors import TreePrior

from helpers import TOY_X, toy_problem
from sbc import (
    Z_TOL, BARTPrior, JointPrior, TreeKernel, bart_geweke, planted, rank_uniformity, report, sbc_ranks,
    single_tree_geweke, z_bound,
)

#: A planted twin must reach |z| >= TWIN_MIN on some test function.
TWIN_MIN = 8.0
#: The tiny problem: the 6 toy rows, 2 features, depth <= 2 (256 trees), CGM98 alpha 0.95 beta 1.
PRIOR = TreePrior(max_depth=2, alpha=0.95, beta=1.0)
#: Regression: sigma^2 ~ IG(3, 1.5) (finite variance of 1/sigma^2 and log sigma^2), leaf means
#: N(0, 2 sigma^2): the data are informative about the tree, so a wrong tree kernel shows.
REGRESSION = NormalMeanShift(nu=6.0, lam=0.5, a=0.5, mu_bar=0.0)


def check(results, names, labels):
    """Assert variant 0 passes (every |z| <= Z_TOL) and every other variant fails clearly (some
    |z| >= TWIN_MIN); prints every z (``pytest -s`` shows them)."""
    lines = [f"{label}: max|z| = {np.max(np.abs(z)):.1f}; {report(names, z, a, b)}"
             for label, (z, a, b) in zip(labels, results)]
    print("\n" + "\n".join(lines))
    z0 = results[0][0]
    assert np.all(np.abs(z0) <= Z_TOL), lines[0]
    for line, (z, _, _) in zip(lines[1:], results[1:]):
        assert np.max(np.abs(z)) >= TWIN_MIN, "planted error not detected: " + line


def cgm_kernel(config):
    return TreeKernel(lambda tree, data: cgm.init(None, data, config, tree=tree),
                      lambda key, state, data: cgm.step(key, state, data, config)[0])


def plant_regression_leaves(monkeypatch, sigma_variant, leaf_variant):
    """Two planted errors in the posterior draw of the continuous parts: sigma^2's inverse-gamma
    conditional with its shape one too large (``sigma_variant``), the leaf means' conditional
    variance ``sigma^2 / (n + a)`` times 1.3 (``leaf_variant``)."""
    def sigma_shape_plus_one(orig, self, key, stats, is_leaf):
        # nu + 2 with nu lam kept: the shape (n + nu)/2 grows by one, the rate is unchanged
        wrong = dataclasses.replace(self, nu=self.nu + 2.0, lam=self.lam * self.nu / (self.nu + 2.0))
        return orig(wrong, key, stats, is_leaf)

    planted(monkeypatch, NormalMeanShift, "posterior_sigma2", sigma_shape_plus_one, sigma_variant)
    planted(monkeypatch, NormalMeanShift, "sample_leaf",
            lambda orig, self, key, stats, sigma2: orig(self, key, stats, 1.3 * sigma2), leaf_variant)


def test_cgm_geweke_regression(monkeypatch):
    """CGM (the branch-free kernel, grow/prune/change/swap; the incremental one is in the slow
    file) on regression, sigma^2 and the leaf means
    drawn by the posterior's own draw: 32 chains x 2,000 iterations (one CGM step each) per variant
    against 200,000 exact prior draws.  Twins: (1) the MH ratio without the proposal terms
    ``log q(T|T*) - log q(T*|T)`` (``cgm.mh_log_ratio``), (2) sigma^2's shape + 1, (3) the leaf
    variance x 1.3.  Observed max|z|: correct 1.9; twins 127 (leaves), 70 (log sigma2), 40
    (resid^2)."""
    joint = JointPrior(np.asarray(TOY_X), PRIOR, REGRESSION)
    config = cgm.CGMConfig.from_prior(PRIOR, incremental=False)
    planted(monkeypatch, cgm, "mh_log_ratio", lambda orig, dl, dp, q: orig(dl, dp, 0.0 * q), 1)
    plant_regression_leaves(monkeypatch, 2, 3)
    results = single_tree_geweke(cgm_kernel(config), joint, chains=32, iterations=2000, steps=1, variants=4)
    check(results, joint.stat_names(), ["correct", "no proposal ratio", "sigma2 shape + 1", "leaf variance x 1.3"])


def plant_bart(monkeypatch, sampler, general=False):
    """BART's planted errors: (1) sigma^2's inverse-gamma shape + 1 (``bart._draw_sigma2``), (2) the
    leaf values' conditional sd x 1.3 (``BARTLeafNormal.posterior_factors`` for grow-prune,
    ``leaf_posterior`` for the single-tree kernels), (3) the tree update's own error: grow-prune's
    proposals without ``log_q_ratio`` (``cgm.propose``), CGM's MH ratio without the proposal terms
    (``cgm.mh_log_ratio``), PG's particle increments halved (``smc._advance``: the particles then
    target ``p(T) L(T)**0.5``); on the general-rule path (``general``) grow-prune's and CGM's MH
    ratio without the proposal terms (``cgm.mh_log_ratio``)."""
    def sigma_shape_plus_one(orig, key, residual, nu, lam):  # nu + 2 with nu lam kept: the shape grows by one
        return orig(key, residual, nu + 2.0, lam * nu / (nu + 2.0))

    planted(monkeypatch, bart, "_draw_sigma2", sigma_shape_plus_one, 1)
    sd_up = lambda pair: (pair[0], 1.3 * pair[1])  # noqa: E731
    planted(monkeypatch, BARTLeafNormal, "posterior_factors", lambda orig, self, n: sd_up(orig(self, n)), 2)
    planted(monkeypatch, BARTLeafNormal, "leaf_posterior", lambda orig, self, stats: sd_up(orig(self, stats)), 2)
    if general and sampler != "pg":
        planted(monkeypatch, cgm, "mh_log_ratio", lambda orig, dl, dp, q: orig(dl, dp, 0.0 * q), 3)
    elif sampler == "grow-prune":
        def no_q(orig, *args, **kw):
            p = orig(*args, **kw)
            return p._replace(log_q_ratio=0.0 * p.log_q_ratio)

        planted(monkeypatch, cgm, "propose", no_q, 3)
    elif sampler == "cgm":
        planted(monkeypatch, cgm, "mh_log_ratio", lambda orig, dl, dp, q: orig(dl, dp, 0.0 * q), 3)
    else:
        from bdtree_jax.kernels import smc

        def half_increment(orig, *args, **kw):
            particle, last, increment = orig(*args, **kw)
            return particle, last, 0.5 * increment

        planted(monkeypatch, smc, "_advance", half_increment, 3)


BART_LABELS = ["correct", "sigma2 shape + 1", "leaf sd x 1.3", "tree update"]


def bart_prior():
    """2 trees on the toy rows (depth <= 2), tau2 = 0.5, sigma^2 ~ IG(3, 1.5)."""
    return BARTPrior(np.asarray(TOY_X), PRIOR, n_trees=2, tau2=0.5, nu=6.0, lam=0.5)


def test_bart_grow_prune_geweke(monkeypatch):
    """BART's default sweep (grow-prune, the vectorized two-pass sweep; valid_cuts="data") through
    :func:`bart.geweke_step`, started at exact prior draws (not ``bart.prior_draw``): 32 chains x
    2,000 sweeps per variant against 200,000 exact prior draws of trees, leaf values, sigma^2 and
    the fit at the rows.  Observed max|z|: correct 2.4; twins (:func:`plant_bart`) 94 (log
    sigma2), 81, 320 (mean leaves)."""
    bp = bart_prior()
    config = bart.BARTConfig(2, 2, "grow-prune", incremental=False, record_trees=False)
    plant_bart(monkeypatch, "grow-prune")
    results = bart_geweke(config, bp, chains=32, iterations=2000, variants=4)
    check(results, bp.stat_names(), BART_LABELS)


# ----------------------------------------------------------------------------------------------
# the helpers


def test_joint_prior_simulator_is_exact():
    """The simulator the checks compare with: its tree table is the enumerated prior, its draws'
    numbers of leaves, sigma^2 and standardised leaf means match their exact means (enumeration,
    closed forms) within 4.5 standard errors over 200,000 draws, and its numpy descent of the
    rows agrees with the library's ``leaf_index``."""
    joint = JointPrior(np.asarray(TOY_X), PRIOR, REGRESSION)
    exact = toy_problem("regression", 2).posterior(0.0)
    assert set(joint.strings) == set(exact)
    np.testing.assert_allclose(joint.probs, [exact[s] for s in joint.strings], rtol=1e-6)
    draws = joint.draw(np.random.default_rng(3), 200_000)
    e_leaves = sum(p * s.count("L") for s, p in exact.items())
    stats = joint.stats(draws["tree"], draws["sigma2"], draws["f"], draws["y"])
    names = joint.stat_names()
    exact_means = [("leaves", e_leaves), ("1/sigma2", 1.0 / REGRESSION.lam), ("z_0^2", 1.0 / REGRESSION.a),
                   ("z_0", 0.0), ("resid^2", 1.0)]
    for name, want in exact_means:
        col = stats[:, names.index(name)]
        assert abs(col.mean() - want) <= Z_TOL * col.std() / np.sqrt(len(col)), (name, col.mean(), want)
    # the rows' leaves from the numpy descent agree with the library's
    from bdtree_jax.tree import Tree, leaf_index

    lib = jax.vmap(lambda t: leaf_index(t, jnp.asarray(joint.bins)))(
        Tree(jnp.asarray(joint.is_split), jnp.asarray(joint.feature), jnp.asarray(joint.cut)))
    np.testing.assert_array_equal(np.asarray(lib), joint.leaf_of_row)


def test_rank_uniformity_and_its_power():
    """The SBC rank helpers on a conjugate normal model with exact posterior draws: ranks of
    ``theta ~ N(0, 1)`` among 99 draws of ``theta | y ~ N(y/2, 1/2)`` (``y ~ N(theta, 1)``) are
    uniform (chi-square over 20 bins, p >= 1e-3), and a posterior with the sd x 1.3 is not
    (p < 1e-6).  Also the Bonferroni bound behind Z_TOL."""
    rng = np.random.default_rng(0)
    R, L = 4000, 99
    theta = rng.standard_normal(R)
    y = theta + rng.standard_normal(R)
    good = y[:, None] / 2 + np.sqrt(0.5) * rng.standard_normal((R, L))
    bad = y[:, None] / 2 + 1.3 * np.sqrt(0.5) * rng.standard_normal((R, L))
    _, p_good = rank_uniformity(sbc_ranks(theta[:, None], good[..., None], rng), L, 20)
    _, p_bad = rank_uniformity(sbc_ranks(theta[:, None], bad[..., None], rng), L, 20)
    assert p_good[0] >= 1e-3 and p_bad[0] < 1e-6, (p_good, p_bad)
    assert 4.4 < z_bound(140) <= Z_TOL < z_bound(200) < 4.6
