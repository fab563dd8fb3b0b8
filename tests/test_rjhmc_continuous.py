"""RJHMC-Tree regression on its continuous parameters: Geweke's (2004) successive-conditional test.

From a draw of the prior, ``(T, x) ~ p``, alternate ``y ~ p(y | T, x)`` and one RJHMC iteration
given that ``y``.  A kernel that leaves every posterior invariant leaves the prior of ``(T, x)``
invariant along this chain, so after ``S`` steps each of ``R`` independent replicate chains holds an
exact prior draw.  The test compares, at the last step, quantities that the jumps move against
their prior laws:

* leaf means of the leaves (iid N(0, 1) under the prior, whatever the topology), KS test;
* the difference of the two leaf means below a node whose children are leaves, over sqrt(2)
  (N(0, 1); the reused-key bug made it positive after a grow at node 1), KS test;
* thresholds of the splits (iid U(0, 1)), KS test;
* sigma (InverseGamma(1.5, 1.5)), KS test;
* the prediction ``phi(x_i) @ leaf_mean`` at two training rows, two-sample KS against fresh prior
  draws;
* the number of leaves, chi-square against fresh prior draws.

Every test is run at family-wise level 1e-3 (Bonferroni over the quantities): a correct kernel fails
with probability < 1e-3 (the keys are fixed, so the outcome is deterministic).  The planted-error
twins (kept in the suite) must fail it: the leaf-mean proposal's key reused from the node choice
(the derivation before the fix), the tau transform's Jacobian dropped from the rule jump's ratio,
and a wrong rule proposal density in the ratio (the prior's density for the mixture's).

Tiny problem: 5 rows, 2 inputs, ``max_depth=2`` (four topologies), soft splits ``h = 0.1``, one NUTS
transition per leg (tree depth <= 3, frozen step size: a fixed kernel), every jump type proposed:
grow / prune / change / stay = 0.3 / 0.3 / 0.25 / 0.15.  Replicates are vectorised.  All of it
is under ``@pytest.mark.slow`` (one compilation of the vmapped step is ~1 min on a 2-core CPU).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from numpyro.distributions.transforms import biject_to
from numpyro.handlers import seed, trace
from scipy import stats

import bdtree_jax.kernels.rjhmc as rj
from bdtree_jax.kernels import rjhmc_jump, rjhmc_split
from bdtree_jax.kernels.rjhmc import RJHMCConfig
from bdtree_jax.soft import leaf_mask, leaf_membership, right_prob_df, right_prob_dfi
from bdtree_jax.tree import Tree, nog_nodes

H = 0.1
LEVEL = 1e-3  # family-wise false-alarm probability of a correct kernel
X = np.random.default_rng(3).uniform(size=(5, 2)).astype(np.float32)
ROWS = (0, 3)  # rows whose prediction is compared
STEP_SIZE = 0.05  # frozen NUTS step: small, so that a leg keeps most of what a jump proposed


def _config(kind):
    return RJHMCConfig(task="regression", kind=kind, max_depth=2, alpha=0.9, beta=0.5, h_init=H, h_final=H,
                       num_warmup=0, leg_steps=1, max_tree_depth=2, move_probs=(0.3, 0.3, 0.25, 0.15))


_SITES = ("tree_tau", "tree_weights", "leaf_mean", "sigma")


def _prior(key, config):
    """One prior draw: dict of the model's site values (constrained), topology and feature included."""
    tr = trace(seed(config.model, key)).get_trace(jnp.asarray(X), None, h=H)
    return {n: s["value"] for n, s in tr.items() if s["type"] == "sample" and n != "y"}


def _phi(config, draw):
    if config.kind == "df":
        psi = right_prob_df(jnp.asarray(X), draw["tree_feature"], draw["tree_tau"], H)
    else:
        psi = right_prob_dfi(jnp.asarray(X), draw["tree_weights"], draw["tree_tau"], H)
    return leaf_membership(draw["tree_topology"], psi)


def _state(config, draw, template):
    """An RJHMCState at a prior draw (the continuous sites raveled unconstrained as the kernel's
    layout does: a dict, so sorted by name), with the template's frozen NUTS adaptation."""
    tr = trace(seed(config.model, jax.random.key(0))).get_trace(jnp.asarray(X), None, h=H)
    z = ravel_pytree({n: biject_to(tr[n]["fn"].support).inv(draw[n]) for n in _SITES if n in draw})[0]
    feature = draw["tree_feature"].astype(jnp.int32) if "tree_feature" in draw else template.feature
    return template._replace(iteration=jnp.int32(0), is_split=draw["tree_topology"], feature=feature, z=z,
                             nuts_t=jnp.int32(0))


def _draw_of_state(config, state, params):
    draw = {"tree_topology": state.is_split, **params}
    if config.kind == "df":
        draw["tree_feature"] = state.feature
    return draw


def _summaries(config, draw):
    """Per replicate: leaf means (N,) with NaN off the leaves, thresholds (M,) NaN off the splits,
    sigma, predictions at ROWS, number of leaves, and the test functions ``g`` (G,) whose time
    averages are compared with their prior means (:data:`G_NAMES`)."""
    is_split = draw["tree_topology"]
    leaves = leaf_mask(is_split)
    mu = draw["leaf_mean"]
    tau = draw["tree_tau"]
    M = tau.shape[0]
    nogs = nog_nodes(Tree(is_split, None, None))[:M]
    slots = jnp.arange(M)
    diff = jnp.where(nogs, (mu[2 * slots + 1] - mu[2 * slots + 2]) / np.sqrt(2.0), 0.0)  # (M,)
    splits = is_split[:M]
    n_splits = splits.sum()
    pred = _phi(config, draw)[jnp.asarray(ROWS)] @ mu
    n_leaves = leaves.sum()
    g = jnp.concatenate([
        diff,  # the two leaf means below each nog (0 elsewhere): mean 0
        jnp.stack([
            jnp.sum(jnp.where(leaves, mu, 0.0)) / n_leaves,  # mean leaf mean: 0
            jnp.sum(jnp.where(leaves, mu**2, 0.0)) / n_leaves,  # its square: 1
            jnp.sum(jnp.where(splits, tau * (1 - tau), 0.0)) / n_splits,  # thresholds: 1/6
            jnp.sum(jnp.where(splits, tau, 0.0)) / n_splits,  # 1/2
            jnp.log(draw["sigma"]),
            n_leaves.astype(jnp.float32),
        ]),
        pred, pred**2,
    ])
    return dict(leaf=jnp.where(leaves, mu, jnp.nan), tau=jnp.where(splits, tau, jnp.nan), sigma=draw["sigma"],
                pred=pred, n_leaves=n_leaves, g=g)


G_NAMES = ("nog diff [0]", "nog diff [1]", "nog diff [2]", "mean leaf", "mean leaf^2", "tau(1-tau)", "tau",
           "log sigma", "n_leaves") + tuple(f"pred[{r}]" for r in ROWS) + tuple(f"pred[{r}]^2" for r in ROWS)


@functools.lru_cache(maxsize=None)
def _prior_summaries(kind, n=40000):
    config = _config(kind)
    draws = jax.jit(jax.vmap(lambda k: _summaries(config, _prior(k, config))))(
        jax.random.split(jax.random.key(11), n))
    return jax.tree.map(np.asarray, draws)


def geweke(kind, R=1000, S=25, seed_=0):
    """``R`` replicate chains of ``S`` successive-conditional steps: the summaries at the last step,
    the (R, G) time averages of the test functions over steps 1..S, and the (4,) counts of accepted
    grow / prune / stay / change moves."""
    config = _config(kind)
    rj.rjhmc.cache_clear()  # a fresh trace: the planted twins patch module functions
    algorithm = rj.rjhmc(config)
    k_run = jax.random.key(seed_)

    def simulate_y(key, draw):
        return _phi(config, draw) @ draw["leaf_mean"] + draw["sigma"] * jax.random.normal(key, (X.shape[0],))

    def chain(key):
        k_p, k_t, k_s = jax.random.split(key, 3)
        draw = _prior(k_p, config)
        template = algorithm.init(k_t, {"X": jnp.asarray(X), "y": simulate_y(k_t, draw)})
        adapt = template.adapt._replace(step_size=jnp.float32(STEP_SIZE),
                                        inverse_mass_matrix=jnp.ones_like(template.adapt.inverse_mass_matrix),
                                        mass_matrix_sqrt=jnp.ones_like(template.adapt.mass_matrix_sqrt),
                                        mass_matrix_sqrt_inv=jnp.ones_like(template.adapt.mass_matrix_sqrt_inv))
        state = _state(config, draw, template._replace(adapt=adapt))

        def body(carry, k):
            state, draw, counts, g_sum = carry
            k_y, k_step = jax.random.split(k)
            y = simulate_y(k_y, draw)
            state, info = algorithm.step(k_step, state, {"X": jnp.asarray(X), "y": y})
            counts = counts + jnp.where(info["accepted"], jax.nn.one_hot(info["move"], 4, dtype=jnp.int32), 0)
            draw = _draw_of_state(config, state, info["params"])
            return (state, draw, counts, g_sum + _summaries(config, draw)["g"]), None

        g0 = jnp.zeros(len(G_NAMES), jnp.float32)
        (state, draw, counts, g_sum), _ = jax.lax.scan(body, (state, draw, jnp.zeros(4, jnp.int32), g0),
                                                       jax.random.split(k_s, S))
        return _summaries(config, draw), g_sum / S, counts

    out, g_mean, counts = jax.jit(jax.vmap(chain))(jax.random.split(k_run, R))
    rj.rjhmc.cache_clear()
    return jax.tree.map(np.asarray, out), np.asarray(g_mean), np.asarray(counts).sum(0)


def p_values(kind, got, g_mean):
    """p-value of each comparison with the prior: KS tests of the last step's leaf means,
    thresholds, sigma (exact laws) and predictions (two-sample, against prior draws), chi-square of
    its number of leaves (against prior draws), and a z-test of each test function's time average
    over the replicates against its prior mean (the replicates are independent; the prior mean's
    Monte Carlo error enters the standard error)."""
    prior = _prior_summaries(kind)
    pooled = lambda a: a[np.isfinite(a)]  # noqa: E731
    ps = {
        "KS leaf": stats.kstest(pooled(got["leaf"]), "norm").pvalue,
        "KS tau": stats.kstest(pooled(got["tau"]), "uniform").pvalue,
        "KS sigma": stats.kstest(got["sigma"], stats.invgamma(1.5, scale=1.5).cdf).pvalue,
    }
    for i, row in enumerate(ROWS):
        ps[f"KS pred[{row}]"] = stats.ks_2samp(got["pred"][:, i], prior["pred"][:, i]).pvalue
    values = np.union1d(got["n_leaves"], prior["n_leaves"])
    table = np.array([[np.sum(got["n_leaves"] == v) for v in values],
                      [np.sum(prior["n_leaves"] == v) for v in values]])
    ps["chi2 n_leaves"] = stats.chi2_contingency(table).pvalue
    R, P = g_mean.shape[0], prior["g"].shape[0]
    for j, name in enumerate(G_NAMES):
        se = np.sqrt(g_mean[:, j].var(ddof=1) / R + prior["g"][:, j].var(ddof=1) / P)
        z = (g_mean[:, j].mean() - prior["g"][:, j].mean()) / se
        ps[f"z {name}"] = 2 * stats.norm.sf(abs(z))
    return ps


def passes(kind, got, g_mean):
    ps = p_values(kind, got, g_mean)
    return min(ps.values()) > LEVEL / len(ps), ps


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["df", "dfi"])
def test_geweke_rjhmc_regression(kind):
    got, g_mean, counts = geweke(kind)
    # every jump is proposed and accepted: grow, prune, stay, change (>= 5 % of the R * S moves each)
    assert np.all(counts >= 0.05 * 1000 * 25), counts
    ok, ps = passes(kind, got, g_mean)
    assert ok, ps


@pytest.mark.slow
@pytest.mark.parametrize("planted", ["reused_key", "no_jacobian", "wrong_rule_density"])
def test_geweke_fails_with_a_planted_error(planted, monkeypatch):
    if planted == "reused_key":  # the derivation before the fix: fold_in of the key the node choice split
        def old_keys(key):
            k = jax.random.split(key, 6)
            return rj._StepKeys(*k, jax.random.fold_in(k[2], 3), jax.random.fold_in(k[2], 2),
                                jax.random.fold_in(k[2], 1))

        monkeypatch.setattr(rj, "_step_keys", old_keys)
    elif planted == "no_jacobian":
        monkeypatch.setattr(rjhmc_jump, "_log_jacobian", lambda transforms, params: 0.0)
    else:  # the ratio uses the prior's density for the proposed / reverse rule
        monkeypatch.setattr(rjhmc_split, "rule_log_density",
                            lambda cand, first, tau, F, oblique: rjhmc_split.prior_log_density(first, tau, F, oblique))
    got, g_mean, _ = geweke("df")
    ok, ps = passes("df", got, g_mean)
    assert not ok, ps
