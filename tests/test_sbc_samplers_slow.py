"""Calibration of the continuous quantities (issue #38), the slow part (``pytest -m slow``): Geweke's
(2004) successive-conditional test of the other hard-tree samplers and paths -- CGM's incremental
kernel on classification, CGM + prune-and-regrow, CGM + perturb, the WU schedule (MH restructure
and fibre-Gibbs restructure), Particle Gibbs, BART with ``tree_sampler="cgm"`` and ``"pg"`` -- and
SMC's exact evidence identity, each with its planted-error twins in the same compiled program
(see ``tests/test_sbc_samplers.py`` for the quick ones and the tolerances: correct max|z| <= 4.5,
each twin max|z| >= 8; the observed values are tabulated in ``docs/theory/calibration.md``).  Each
test compiles one program (the correct sampler and its twins side by side), which is nearly all
of its time: 25 to 90 s each on the shared 2-core CPU where they were measured (load ~11)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bdtree_jax.kernels import bart, cgm, edit, perturb, pg, regrow, smc, tempering, wu
from bdtree_jax.likelihoods import DirichletMultinomial
from bdtree_jax.priors import TreePrior

from helpers import TOY_X
from sbc import JointPrior, TreeKernel, bart_geweke, planted, single_tree_geweke, smc_evidence_check, tempered_check
from test_sbc_samplers import (
    BART_LABELS, PRIOR, REGRESSION, bart_prior, cgm_kernel, check, plant_bart, plant_regression_leaves,
)

pytestmark = pytest.mark.slow

#: Six rows with uneven gaps (for ``split_prior="range"``).
UNEVEN_X = np.array([[1, 5], [2, 3], [4, 16], [7, 1], [11, 2], [16, 4]], float)


def no_proposal_ratio(monkeypatch, variant):
    """CGM's MH ratio without ``log q(T|T*) - log q(T*|T)``."""
    planted(monkeypatch, cgm, "mh_log_ratio", lambda orig, dl, dp, q: orig(dl, dp, 0.0 * q), variant)


def algorithm_kernel(algorithm, init, tree_of=lambda state: state.tree):
    """A :class:`TreeKernel` around a SamplingAlgorithm: ``init(tree, data)`` builds its state at a
    tree, a step is ``algorithm.step`` on ``algorithm.draw(key)`` (or the key)."""
    def step(key, state, data):
        randomness = algorithm.draw(key) if algorithm.draw is not None else key
        return algorithm.step(randomness, state, data)[0]

    return TreeKernel(init, step, tree_of)


@pytest.mark.xla_optimized
def test_cgm_incremental_geweke_classification(monkeypatch):
    """CGM's incremental kernel (the CPU default) on classification, the leaf class
    probabilities drawn by the posterior's Dirichlet draw.  Twins: (1) no proposal ratio,
    (2) the Dirichlet conditional with half the counts (``DirichletMultinomial.sample_leaf``:
    its marginal is still the prior's, only the test functions pairing the probabilities with
    the labels see it)."""
    joint = JointPrior(np.asarray(TOY_X), PRIOR, DirichletMultinomial(2, 1.0))
    config = cgm.CGMConfig.from_prior(PRIOR, incremental=True)
    no_proposal_ratio(monkeypatch, 1)
    def half_counts(orig, self, key, stats):
        return orig(self, key, 0.5 * stats)

    planted(monkeypatch, DirichletMultinomial, "sample_leaf", half_counts, 2)
    results = single_tree_geweke(cgm_kernel(config), joint, chains=32, iterations=2000, steps=1, variants=3)
    check(results, joint.stat_names(), ["correct", "no proposal ratio", "Dirichlet with half the counts"])


def test_cgm_regrow_geweke(monkeypatch):
    """``proposal="cgm+regrow"``: one CGM step then one prune-and-regrow step per iteration.
    Twins: (1) the regrown subtree not drawn from the prior (``regrow_subtree``'s split uniforms
    x 0.7: nodes split more often) while the ratio assumes it is, (2) sigma^2's shape + 1."""
    joint = JointPrior(np.asarray(TOY_X), PRIOR, REGRESSION)
    config = cgm.CGMConfig.from_prior(PRIOR, incremental=False)
    algorithm = regrow.with_regrow(config)

    def split_more(orig, tree, leaf_id, lo, hi, node, uniforms, data, m):
        return orig(tree, leaf_id, lo, hi, node, uniforms.at[:, 0].multiply(0.7), data, m)

    planted(monkeypatch, regrow, "regrow_subtree", split_more, 1)
    plant_regression_leaves(monkeypatch, 2, 3)
    kernel = algorithm_kernel(algorithm, lambda tree, data: cgm.init(None, data, config, tree=tree))
    results = single_tree_geweke(kernel, joint, chains=32, iterations=2000, variants=4)
    check(results, joint.stat_names(),
          ["correct", "regrow not from the prior", "sigma2 shape + 1", "leaf variance x 1.3"])


def test_cgm_perturb_geweke(monkeypatch):
    """The perturb move (``proposal="cgm+perturb"``'s second step; width 1, fixed; 10 %
    change-of-variable): one CGM step then four perturb steps per iteration (the CGM step makes
    the chain irreducible; perturb alone keeps the tree's shape), under ``split_prior="range"``
    on unevenly spaced rows (gaps 1 to 5 in x0, 1 to 12 in x1), where the rule prior depends on
    the cut.  Twins: (1) the cut perturbation without its window ratio ``log |W(c)| - log
    |W(c')|`` (``perturb._log_window_ratio``; it matters only where a window is clipped at the
    node's valid-cut range, hence the weaker signal), (2) the prior ratio left out of the
    acceptance (``perturb._log_prior_ratio``).  On the evenly spaced toy rows under the uniform
    rule prior the same twins reach only |z| = 3.4 and 6.0."""
    prior = TreePrior(max_depth=2, alpha=0.95, beta=1.0, split_prior="range")
    joint = JointPrior(UNEVEN_X, prior, REGRESSION)
    config = cgm.CGMConfig.from_prior(prior, incremental=False)
    pconfig = perturb.PerturbConfig(max_depth=2, width=1.0, adapt=False)
    planted(monkeypatch, perturb, "_log_window_ratio", lambda orig, old, new: 0.0 * orig(old, new), 1)
    planted(monkeypatch, perturb, "_log_prior_ratio", lambda orig, s, p: 0.0 * orig(s, p), 2)

    def step(key, state, data):
        k_cgm, *k_perturb = jax.random.split(key, 5)
        state = cgm.step(k_cgm, state, data, config)[0]
        for k in k_perturb:
            state = perturb.step_with_uniforms(perturb.draw(k), state, jnp.float32(pconfig.width), data, pconfig)[0]
        return state

    kernel = TreeKernel(lambda tree, data: cgm.init(None, data, config, tree=tree), step)
    results = single_tree_geweke(kernel, joint, chains=32, iterations=2000, variants=3)
    check(results, joint.stat_names(), ["correct", "no window ratio", "no prior ratio"])


@pytest.mark.xla_optimized
def test_edit_prior_geweke(monkeypatch):
    """The edit prior's chain on edit paths (initial tree ``x0<=3.5(L,L)``, mean 1.5 edits, at
    most 6; regrow and local moves): the simulator carries the path ``(K, U)``, started at a draw
    of the path prior (``K`` truncated geometric, ``U`` uniform), ``y`` from the prior given its
    tree; compared with the exact edit prior of :func:`bdtree_jax.exact.enumerate_edit_prior`
    (256 trees).  Twin: the regrown tail's length not from its truncated geometric prior
    (``edit._truncated_geometric`` with ``q**2``) while the ratio assumes it is."""
    from bdtree_jax.exact import enumerate_edit_prior
    from bdtree_jax.tree import Tree, from_string

    initial, mean_edits, max_edits = "x0<=3.5(L,L)", 1.5, 6
    law = enumerate_edit_prior(np.asarray(TOY_X), PRIOR, initial, mean_edits=mean_edits, max_edits=max_edits)
    joint = JointPrior(np.asarray(TOY_X), PRIOR, REGRESSION, tree_law=law)
    config = edit.EditConfig(max_depth=2, mean_edits=mean_edits, max_edits=max_edits)
    t0 = Tree(*(jnp.asarray(a) for a in from_string(initial, joint.grid.thresholds, 2)))

    def init(path, data):
        n_edits, edits = path
        current = edit.replay(edit._initial(edit.EditData(data, t0), config), edits, n_edits, data, config.cgm)
        return edit.EditState(current, n_edits, edits, current.log_lik, jnp.float32(1.0))

    def step(key, state, data):
        return edit.step_with_uniforms(edit.draw(key, max_edits), state, edit.EditData(data, t0), config)[0]

    def start(trees, rng):  # (K, U) of every chain from the path prior (rows >= K zero)
        chains = trees.is_split.shape[0]
        p = config.q ** np.arange(max_edits + 1)
        n_edits = rng.choice(max_edits + 1, size=chains, p=p / p.sum())
        used = np.arange(max_edits)[None, :, None] < n_edits[:, None, None]
        edits = rng.uniform(size=(chains, max_edits, 4)) * used
        return jnp.asarray(n_edits, jnp.int32), jnp.asarray(edits, jnp.float32)

    kernel = TreeKernel(init, step, lambda state: state.current.tree, lambda state: (state.n_edits, state.edits), start)
    planted(monkeypatch, edit, "_truncated_geometric", lambda orig, u, q, m: orig(u, q * q, m), 1)
    results = single_tree_geweke(kernel, joint, chains=32, iterations=2000, variants=2)
    check(results, joint.stat_names(), ["correct", "regrown tail length not from its prior"])


@pytest.mark.xla_optimized
def test_tempered_cgm(monkeypatch):
    """Tempered CGM (4 rungs, ``ladder(4, 2.0)``: inverse temperatures 1, 1/3, 1/5, 1/7; the CPU
    ``lax.map`` path).  Tempering's joint depends on ``y`` through every rung, so ``y`` cannot
    be refreshed from the cold rung alone (no successive-conditional form); instead 6,000
    replicates start at stationarity -- ``(T_1, y)`` an exact joint prior draw, each hotter
    rung's tree an exact draw of its tempered posterior by enumeration -- and run 30 iterations
    with ``y`` fixed (:func:`sbc.tempered_check`); the cold tree, its sigma^2 and leaf means
    (posterior draw) and ``y`` must follow the joint prior.  Twin: the swaps read a zero
    log-likelihood (every swap accepted; ``cgm.step_with_uniforms`` hands the swap a state whose
    ``log_lik`` is 0 and the next step the true one)."""
    from bdtree_jax.tree import leaf_nodes

    joint = JointPrior(np.asarray(TOY_X), PRIOR, REGRESSION)
    config = cgm.CGMConfig.from_prior(PRIOR, incremental=False)
    betas = tempering.ladder(4, 2.0)
    algorithm = tempering.tempered(cgm.cgm(config), betas)

    def swap_sees_no_likelihood(orig, uniforms, state, data, config):
        state = state._replace(log_lik=data.likelihood.log_lik(state.stats, leaf_nodes(state.tree)))
        new, info = orig(uniforms, state, data, config)
        return new._replace(log_lik=0.0 * new.log_lik), info

    planted(monkeypatch, cgm, "step_with_uniforms", swap_sees_no_likelihood, 1)
    results = tempered_check(algorithm, betas, config, joint, replicates=6000, iterations=30, seed=1, variants=2)
    check(results, joint.stat_names(), ["correct", "every swap accepted"])


@pytest.mark.parametrize("restructure", ["pi", "gibbs"])
def test_wu_geweke(monkeypatch, restructure):
    """The WU schedule with one CGM step on each side of the restructure (``n_local=1``), the
    restructure the MH move (Variant Pi) or the exact fibre-Gibbs draw.  Twins: MH -- ``W(S)``
    left out of ``log Phi`` (``wu._log_phi``); Gibbs -- every restructure driven by the same
    key (``wu.draw_restructure`` given a constant key: a reused key)."""
    joint = JointPrior(np.asarray(TOY_X), PRIOR, REGRESSION)
    config = cgm.CGMConfig.from_prior(PRIOR, incremental=False)
    # max_groups=4 = 2**max_depth: "gibbs" compiles the fibre DP's tables for 4 groups, not 10
    algorithm = wu.wu(wu.WUConfig(config, n_local=1, restructure=restructure, max_groups=4))
    if restructure == "pi":
        planted(monkeypatch, wu, "_log_phi", lambda orig, s, c: orig(s, c) - s.log_W, 1)
        labels = ["correct", "W(S) left out"]
    else:
        planted(monkeypatch, wu, "draw_restructure", lambda orig, key, *a: orig(jax.random.key(7), *a), 1)
        labels = ["correct", "reused restructure key"]
    kernel = algorithm_kernel(algorithm, lambda tree, data: cgm.init(None, data, config, tree=tree))
    results = single_tree_geweke(kernel, joint, chains=32, iterations=2000, variants=2)
    check(results, joint.stat_names(), labels)


@pytest.mark.xla_optimized
def test_pg_geweke(monkeypatch):
    """Particle Gibbs (5 particles, prior proposal) on regression.  Twins: (1) the particles'
    increments halved (``smc._advance``: the sweep then targets ``p(T) L(T)**0.5``), (2)
    sigma^2's shape + 1, (3) the leaf variance x 1.3."""
    joint = JointPrior(np.asarray(TOY_X), PRIOR, REGRESSION)
    config = pg.PGConfig(max_depth=2, num_particles=5)

    def half_increment(orig, *args, **kw):
        particle, last, increment = orig(*args, **kw)
        return particle, last, 0.5 * increment

    planted(monkeypatch, smc, "_advance", half_increment, 1)
    plant_regression_leaves(monkeypatch, 2, 3)
    kernel = TreeKernel(lambda tree, data: pg.init(None, data, config, tree=tree),
                        lambda key, state, data: pg.step(key, state, data, config)[0])
    results = single_tree_geweke(kernel, joint, chains=32, iterations=1500, variants=4)
    check(results, joint.stat_names(), ["correct", "increments halved", "sigma2 shape + 1", "leaf variance x 1.3"])


@pytest.mark.xla_optimized
@pytest.mark.parametrize("sampler", ["cgm", "pg"])
def test_bart_kernel_sweep_geweke(monkeypatch, sampler):
    """BART with ``tree_sampler="cgm"`` or ``"pg"`` (4 particles): the single-tree kernels inside
    the backfitting scan, the leaf values and sigma^2 drawn by the sweep.  Twins as for
    grow-prune (:func:`test_sbc_samplers.plant_bart`)."""
    bp = bart_prior()
    config = bart.BARTConfig(2, 2, sampler, num_particles=4, incremental=False, record_trees=False)
    plant_bart(monkeypatch, sampler)
    results = bart_geweke(config, bp, chains=32, iterations=2000, variants=4)
    check(results, bp.stat_names(), BART_LABELS)


@pytest.mark.xla_optimized
@pytest.mark.parametrize("sampler", ["grow-prune", "pg"])
def test_bart_general_rules_geweke(monkeypatch, sampler):
    """BART's general-rule sweep (:func:`bdtree_jax.kernels.bart._kernel_sweep`): 7 rows, ``x0`` ordered
    with a missing cell, ``x1`` categorical with 3 levels (the data of
    ``tests/test_categorical_cgm.py``), depth <= 2 (1,089 trees with level sets and missing-value
    bits, enumerated by :func:`~bdtree_jax.exact.categorical.enumerate_mixed_trees`), 2 trees.
    Test functions add the root's level set and missing-value bit.  Twins as
    :func:`test_sbc_samplers.plant_bart` (general)."""
    from bdtree_jax.likelihoods import BARTLeafNormal
    from sbc import BARTPrior, MixedTreeTable
    from test_categorical_cgm import CATEGORICAL, X, _kernel_data

    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    grid, td = _kernel_data(X, PRIOR)
    td = td._replace(likelihood=BARTLeafNormal(f32(1.0), f32(0.5)))
    table = MixedTreeTable(X, PRIOR, CATEGORICAL, grid.thresholds, grid.level_count)
    bp = BARTPrior(X, PRIOR, n_trees=2, tau2=0.5, nu=6.0, lam=0.5, table=table)
    data = bart.BARTData(td, jnp.zeros(len(X), jnp.float32), f32(6.0), f32(0.5), f32(1.0), f32(1.0))
    config = bart.BARTConfig(2, 2, sampler, num_particles=4, incremental=False, record_trees=False, general_rules=True)
    plant_bart(monkeypatch, sampler, general=True)
    results = bart_geweke(config, bp, chains=32, iterations=2000, variants=4, data=data)
    check(results, bp.stat_names(), BART_LABELS)


def test_smc_evidence_identity(monkeypatch):
    """SMC (10 particles, prior proposal, resampling at every stage): 4,000 runs on responses from
    the prior predictive; ``E[Z^/p(y)] = 1`` and ``E[(Z^/p(y)) g(one particle by weight, then
    sigma^2 and leaf means by the posterior draw)] = E_prior[g]`` (exact for any number of
    particles; ``p(y)`` by enumeration in numpy).  Twins: (1) resampling from the squared
    weights (``smc.resample_indices``), (2) the increments halved (``smc._advance``)."""
    joint = JointPrior(np.asarray(TOY_X), PRIOR, REGRESSION)
    config = smc.SMCConfig(max_depth=2, num_particles=10, ess_threshold=1.0)
    planted(monkeypatch, smc, "resample_indices", lambda orig, u, log_w, method: orig(u, 2.0 * log_w, method), 1)

    def half_increment(orig, *args, **kw):
        particle, last, increment = orig(*args, **kw)
        return particle, last, 0.5 * increment

    planted(monkeypatch, smc, "_advance", half_increment, 2)
    results = smc_evidence_check(config, joint, replicates=4000, variants=3)
    check(results, ("Z^/p(y)",) + joint.stat_names(),
          ["correct", "resampling from squared weights", "increments halved"])
