"""The ConvergenceWarning every fit issues when its chains have not converged.

The per-draw log-likelihood, number of leaves and posterior predictive mean at a few training rows
are checked with ArviZ (R-hat > 1.01 with >= 2 chains, bulk ESS < 400; Vehtari et al. 2021): first
on hand-made (chain, draw) arrays whose answer is known, then on real runs of ``bd.sample``, the
tree estimators and BART, where a short run from a cold start must warn once (pointing at the
caller's line) and a long run of a tiny problem must not.  The advice names only what the run has
not tried.
"""

from __future__ import annotations

import inspect
import warnings
from types import SimpleNamespace

import arviz as az
import numpy as np
import pytest

import bdtree_jax as bd
from bdtree_jax.diagnostics import (ESS_MIN, PREDICTIVE_ROWS, RHAT_MAX, ConvergenceWarning, check_convergence,
                                   convergence_diagnostics, convergence_message, predictive_draws)


def _fake(log_lik, n_leaves=None, method="cgm"):
    """A stand-in posterior: ``stats`` of (C, S) arrays, as every posterior of draws holds."""
    log_lik = np.asarray(log_lik, np.float64)
    if n_leaves is None:
        n_leaves = np.random.default_rng(1).integers(1, 6, log_lik.shape)
    return SimpleNamespace(stats={"log_lik": log_lik, "n_leaves": np.asarray(n_leaves)}, method=method)


def _warnings_of(fn, *args, **kwargs):
    """(result, [ConvergenceWarning records]) of ``fn(*args, **kwargs)``, every warning recorded."""
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    return out, [r for r in records if issubclass(r.category, ConvergenceWarning)]


def _is_callers_line(record) -> bool:
    """Whether a warning points at the line of :func:`_warnings_of` that calls the fit (its
    ``stacklevel`` is right: neither inside the library nor a frame further out)."""
    lines, first = inspect.getsourcelines(_warnings_of)
    call = first + next(i for i, line in enumerate(lines) if "out = fn(" in line)
    return record.filename == __file__ and record.lineno == call


def _ar1(rng, rho: float, shape) -> np.ndarray:
    """(C, S) AR(1) chains with lag-one correlation ``rho`` and unit marginal variance."""
    C, S = shape
    out = np.empty(shape)
    out[:, 0] = rng.normal(size=C)
    for s in range(1, S):
        out[:, s] = rho * out[:, s - 1] + np.sqrt(1 - rho**2) * rng.normal(size=C)
    return out


# ----------------------------------------------------------------------------------------------
# hand-made chains


def test_exported_and_a_user_warning():
    assert bd.ConvergenceWarning is ConvergenceWarning
    assert issubclass(ConvergenceWarning, UserWarning)
    assert (RHAT_MAX, ESS_MIN) == (1.01, 400)  # Vehtari et al. 2021


def test_diagnostics_are_arviz_rank_rhat_and_bulk_ess_over_chain_draw():
    rng = np.random.default_rng(0)
    ll = rng.normal(size=(3, 400)) + np.array([[0.0], [0.5], [1.0]])
    leaves = rng.integers(1, 8, (3, 400))
    d = convergence_diagnostics(_fake(ll, leaves))
    assert set(d) == {"log_lik", "n_leaves"}
    # (chain, draw) as ArviZ reads a 2-d array; the transposed layout would give other values
    np.testing.assert_allclose(d["log_lik"]["rhat"], float(az.rhat(ll, method="rank")), rtol=1e-12)
    np.testing.assert_allclose(d["log_lik"]["ess_bulk"], float(az.ess(ll, method="bulk")), rtol=1e-12)
    np.testing.assert_allclose(d["n_leaves"]["ess_bulk"], float(az.ess(leaves.astype(float), method="bulk")),
                               rtol=1e-12)
    assert d["log_lik"]["rhat"] > 1.05  # the chains' means differ by 0.5 and 1 sd


def test_independent_well_mixed_chains_do_not_warn():
    rng = np.random.default_rng(0)
    fake = _fake(rng.normal(size=(4, 500)))
    out, caught = _warnings_of(check_convergence, fake)
    assert out is fake
    assert caught == []
    d = convergence_diagnostics(fake)
    assert d["log_lik"]["rhat"] < 1.01 and d["log_lik"]["ess_bulk"] > 1000


def test_chains_in_different_places_warn_rhat_with_its_value():
    rng = np.random.default_rng(0)
    ll = rng.normal(size=(4, 500)) + 3.0 * np.arange(4)[:, None]  # every chain in its own mode
    _, caught = _warnings_of(check_convergence, _fake(ll))
    assert len(caught) == 1  # one warning per fit, naming every problem
    text = str(caught[0].message)
    rhat = convergence_diagnostics(_fake(ll))["log_lik"]["rhat"]
    assert f"R-hat of the log-likelihood (log_lik) is {rhat:.3f} > 1.01" in text
    assert "number of leaves" not in text  # n_leaves mixes (independent draws)
    for remedy in ("num_samples=", "tempering=bd.Tempering(num_temperatures=4)",
                   "method=bd.CGM(proposal='cgm+regrow')"):
        assert remedy in text
    assert "num_chains" not in text  # 4 chains: more would not bring them together


def test_sticky_single_chain_warns_ess_and_no_rhat():
    rng = np.random.default_rng(0)
    leaves = np.round(3 + 2 * _ar1(rng, 0.995, (1, 2000)))
    fake = _fake(rng.normal(size=(1, 2000)), leaves)
    d = convergence_diagnostics(fake)
    assert np.isnan(d["n_leaves"]["rhat"]) and np.isnan(d["log_lik"]["rhat"])  # one chain: no R-hat
    assert d["n_leaves"]["ess_bulk"] < ESS_MIN < d["log_lik"]["ess_bulk"]
    _, caught = _warnings_of(check_convergence, fake)
    assert len(caught) == 1
    text = str(caught[0].message)
    assert f"bulk ESS of the number of leaves (n_leaves) is {d['n_leaves']['ess_bulk']:.0f} < 400" in text
    assert "R-hat of" not in text and "log_lik" not in text
    assert "num_chains=4 (now 1" in text


def test_nothing_to_diagnose_gives_nan_and_no_warning():
    # a quantity that never changes (every chain stuck at the root), or with -inf draws
    flat = _fake(np.full((2, 300), -5.0), np.ones((2, 300), int))
    d = convergence_diagnostics(flat)
    assert all(np.isnan(v) for q in d.values() for v in q.values())
    assert _warnings_of(check_convergence, flat)[1] == []
    # but chains stuck at *different* trees do warn (R-hat is infinite)
    stuck = _fake(np.repeat([[-5.0], [-9.0]], 300, axis=1), np.repeat([[1], [4]], 300, axis=1))
    _, caught = _warnings_of(check_convergence, stuck)
    assert len(caught) == 1 and "R-hat of the number of leaves" in str(caught[0].message)


def test_exact_pcfg_draws_are_not_checked_and_smc_advice_names_particles():
    rng = np.random.default_rng(0)
    ll = rng.normal(size=(2, 50)) + np.array([[0.0], [5.0]])
    assert convergence_diagnostics(_fake(ll, method="pcfg")) == {}
    assert _warnings_of(check_convergence, _fake(ll, method="pcfg"))[1] == []
    _, caught = _warnings_of(check_convergence, _fake(ll, method="smc"))
    assert "num_particles" in str(caught[0].message)


def test_not_a_posterior_is_a_value_error():
    with pytest.raises(ValueError, match="posterior must be"):
        convergence_diagnostics(np.zeros((2, 10)))
    with pytest.raises(ValueError, match=r"\(chains, draws\)"):
        convergence_diagnostics(SimpleNamespace(stats={"log_lik": np.zeros(10)}))


# ----------------------------------------------------------------------------------------------
# real runs: one small problem, one compiled kernel (block_size fixed) for every run length

RNG = np.random.default_rng(0)
X_SMALL = RNG.normal(size=(40, 2))
Y_SMALL = RNG.integers(0, 2, 40)
RUN = dict(prior=bd.TreePrior(max_depth=1), num_chains=2, progress=False, block_size=20)


def test_short_cold_run_warns_once_at_the_callers_line():
    post, caught = _warnings_of(bd.sample, X_SMALL, Y_SMALL, num_warmup=0, num_samples=20, **RUN)
    assert len(caught) == 1
    assert _is_callers_line(caught[0])  # stacklevel: the user's bd.sample(...) line
    d = convergence_diagnostics(post)
    assert d["log_lik"]["ess_bulk"] < ESS_MIN  # 40 draws cannot hold 400 effective ones
    assert "log-likelihood (log_lik)" in str(caught[0].message)


def test_long_run_of_a_tiny_problem_does_not_warn():
    # two leaves at most: CGM mixes fast; 2 x 3000 draws give R-hat ~1.00 and bulk ESS over 1000
    # (measured: log_lik 1055, the predictive mean's worst row 1088; 2 x 2000 gave 710 there)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        post = bd.sample(X_SMALL, Y_SMALL, num_warmup=100, num_samples=3000, **RUN)
    d = convergence_diagnostics(post)
    assert set(d) == {"log_lik", "n_leaves", "predictive_mean"}
    assert all(q["rhat"] < RHAT_MAX and q["ess_bulk"] > 2 * ESS_MIN for q in d.values()), d


def test_estimator_fit_warns_at_the_callers_line():
    est = bd.BayesianTreeClassifier(max_depth=1, num_warmup=0, num_samples=20, num_chains=2, block_size=20)
    _, caught = _warnings_of(est.fit, X_SMALL, Y_SMALL)
    assert len(caught) == 1 and _is_callers_line(caught[0])


@pytest.mark.slow  # compiling the BART kernel takes ~30 s on 2 cores
def test_bart_fit_warns_on_train_log_lik_at_the_callers_line():
    X = RNG.normal(size=(30, 2))
    y = X[:, 0] + 0.1 * RNG.normal(size=30)
    est = bd.BARTRegressor(num_trees=3, max_depth=2, num_warmup=0, num_samples=10, num_chains=2, progress=False)
    _, caught = _warnings_of(est.fit, X, y)
    assert len(caught) == 1 and _is_callers_line(caught[0])
    assert "(train_log_lik)" in str(caught[0].message) and "tree_sampler" in str(caught[0].message)


# ----------------------------------------------------------------------------------------------
# the posterior predictive mean at training rows


def _two_trees(post):
    """Two distinct stumps-with-one-split (2 leaves) among the draws of ``post``, as (N,) tree
    arrays of the flat draws, and the Tree of all flat draws."""
    import jax

    flat = post._flat_trees()
    strings = post.tree_strings()
    leaves = np.asarray(post.stats["n_leaves"]).ravel()
    picked = {}
    for i, (t, k) in enumerate(zip(strings, leaves)):
        if k == 2 and t not in picked:
            picked[t] = i
    assert len(picked) >= 2, picked
    a, b = list(picked.values())[:2]
    return jax.tree.map(lambda x: np.asarray(x)[[a, b]], flat)


def _planted(post, which: np.ndarray):
    """``post`` with its draws replaced: draw (c, s) is tree ``which[c, s]`` (0 or 1) of
    :func:`_two_trees`; the log-likelihood is i.i.d. noise (it mixes) and every tree has 2 leaves
    (nothing to diagnose), so only the predictive mean can tell how the trees mix."""
    import dataclasses

    import jax

    two = _two_trees(post)
    trees = jax.tree.map(lambda x: x[which], two)  # (C, S, N)
    C, S = which.shape
    stats = dict(post.stats)
    stats.update(log_lik=np.random.default_rng(3).normal(size=(C, S)), n_leaves=np.full((C, S), 2, np.int32),
                 log_prior=np.zeros((C, S)), accepted=np.ones((C, S), bool), move=np.zeros((C, S), np.int32),
                 depth=np.ones((C, S), np.int32))
    stats = {k: v for k, v in stats.items() if np.shape(v)[:2] == (C, S)}
    stats["log_posterior"] = stats["log_lik"]
    return dataclasses.replace(post, trees=trees, stats=stats)


@pytest.fixture(scope="module")
def short_post():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return bd.sample(X_SMALL, Y_SMALL, num_warmup=0, num_samples=200, **RUN)


def test_predictive_draws_are_the_draws_predictions_at_evenly_spaced_training_rows(short_post):
    values, rows, labels = predictive_draws(short_post)
    C, S = short_post.num_chains, short_post.num_draws
    np.testing.assert_array_equal(rows, np.unique(np.linspace(0, 39, PREDICTIVE_ROWS).round().astype(int)))
    assert values.shape == (C, S, len(rows), 1) and labels == [1]  # binary: P(y = classes[1])
    expected = short_post.predict_draws(X_SMALL[rows])[..., 1:].reshape(C, S, len(rows), 1)
    np.testing.assert_allclose(values, expected, rtol=1e-6, atol=1e-7)


def test_chains_stuck_on_different_trees_warn_on_the_predictive_mean_only(short_post):
    stuck = _planted(short_post, np.repeat([[0], [1]], 1000, axis=1))  # chain 0: tree A, chain 1: tree B
    d = convergence_diagnostics(stuck)
    assert d["log_lik"]["rhat"] < RHAT_MAX and d["log_lik"]["ess_bulk"] > ESS_MIN
    assert np.isnan(d["n_leaves"]["rhat"])  # 2 leaves everywhere: nothing to diagnose
    p = d["predictive_mean"]
    assert p["rhat"] > RHAT_MAX and p["rhat_row"] in set(range(40)) and p["rhat_class"] == 1
    assert p["num_rows"] == PREDICTIVE_ROWS
    _, caught = _warnings_of(check_convergence, stuck)
    assert len(caught) == 1
    text = str(caught[0].message)
    assert f"R-hat of the posterior predictive mean (predictive_mean) at training row {p['rhat_row']}, P(y=1)" in text
    assert "log_lik" not in text and "n_leaves" not in text


def test_chains_mixing_over_the_same_trees_do_not_warn(short_post):
    mixed = _planted(short_post, np.random.default_rng(4).integers(0, 2, (2, 1000)))
    out, caught = _warnings_of(check_convergence, mixed)
    assert caught == []
    p = convergence_diagnostics(mixed)["predictive_mean"]
    assert p["rhat"] < RHAT_MAX and p["ess_bulk"] > ESS_MIN and p["ess_tail"] > ESS_MIN


# ----------------------------------------------------------------------------------------------
# the advice names only what the run has not tried, in the caller's words


def _stuck_run(method="cgm", num_chains=4, **info):
    """A stand-in run whose chains are sticky and sit in different places (it warns), with the ``info`` a
    posterior records (``num_warmup`` 100, ``num_samples`` 500 unless given)."""
    rng = np.random.default_rng(0)
    ll = _ar1(rng, 0.99, (num_chains, 500)) + 3.0 * np.arange(num_chains)[:, None]  # sticky, apart
    fake = _fake(ll, method=method)
    fake.info = dict(dict(num_warmup=100, num_samples=500), **info)
    return fake


def _set_keys(text: str) -> list:
    import re

    return re.findall(r"--set (\w+)=", text)


def test_advice_omits_tempering_and_regrow_when_the_run_used_them():
    tried = convergence_message(_stuck_run(betas=(1.0, 0.8), proposal="cgm+regrow"))
    assert "Tempering" not in tried and "proposal" not in tried
    # longer: warm-up at least as long as the draws, draws x ESS_MIN / ESS (at most x 10, at least x 2)
    assert "num_warmup=500, num_samples=5000 (now 100, 500)" in tried and "num_chains" not in tried
    untried = convergence_message(_stuck_run(betas=(1.0,), proposal="cgm"))
    assert "tempering=bd.Tempering(num_temperatures=4)" in untried
    assert "method=bd.CGM(proposal='cgm+regrow')" in untried
    pinball = _stuck_run(proposal="cgm")
    pinball.prior = SimpleNamespace(structure="pinball", valid_cuts="data")  # regrow needs the CGM98 prior
    assert "regrow" not in convergence_message(pinball)


def test_advice_names_run_until_and_a_larger_budget_once_it_was_used():
    fixed = convergence_message(_stuck_run())
    assert "run_until=bd.Converged(max_iterations=100_000)" in fixed
    report = dict(converged=False, rounds=3, thin=4, iterations=2000, missed=["log_lik"])
    longer = convergence_message(_stuck_run(run_until=report))
    assert "run_until=bd.Converged(max_iterations=8_000) (now 2_000 iterations, thin 4)" in longer
    assert "--set 'run_until={max_iterations: 100000}'" in convergence_message(_stuck_run(), syntax="cli")
    assert "run_until" not in convergence_message(_stuck_run("smc", num_particles=100))


def test_advice_in_cli_words_names_config_keys_only():
    from bdtree_jax.cli import ALLOWED_KEYS

    for run in (_stuck_run(num_chains=2), _stuck_run("pg", num_chains=1, num_particles=10),
                _stuck_run("smc", num_particles=100), _stuck_run("hmc-df", betas=(1.0, 0.5))):
        text = convergence_message(run, syntax="cli")
        keys = _set_keys(text)
        assert keys and set(keys) <= ALLOWED_KEYS, text
        assert "bd." not in text and "filterwarnings" not in text and "=bd" not in text
    pg = convergence_message(_stuck_run("pg", num_chains=1, num_particles=10), syntax="cli")
    assert "--set num_particles=20 (now 10)" in pg and "--set num_chains=4 (now 1" in pg
    assert convergence_message(_stuck_run("pg", num_particles=10)).count("method=bd.PG(num_particles=20) (now 10)") == 1
    smc = convergence_message(_stuck_run("smc", num_particles=100))
    assert "method=bd.SMC(num_particles=200)" in smc and "num_warmup" not in smc and "Tempering" not in smc
    assert "num_temperatures" not in convergence_message(_stuck_run("hmc-df", betas=(1.0, 0.5)), syntax="cli")


def test_bart_advice_names_its_estimator_keywords():
    bart = _fake(np.random.default_rng(0).normal(size=(2, 500)) + np.array([[0.0], [5.0]]), method=None)
    bart.stats = {"train_log_lik": bart.stats["log_lik"], "n_leaves": bart.stats["n_leaves"]}
    bart.leaf_values, bart.info = np.zeros(1), dict(num_warmup=100, num_samples=500)
    bart.config = SimpleNamespace(tree_sampler="grow-prune", num_particles=10)
    assert "tree_sampler='pg' (now 'grow-prune')" in convergence_message(bart)
    bart.config = SimpleNamespace(tree_sampler="pg", num_particles=10)
    text = convergence_message(bart)
    assert "num_particles=20 (now 10)" in text and "tree_sampler" not in text and "Tempering" not in text


def test_a_run_records_what_it_tried():
    _, caught = _warnings_of(bd.sample, X_SMALL, Y_SMALL, method=bd.CGM(proposal="cgm+regrow"),
                             tempering=bd.Tempering(num_temperatures=2), num_warmup=0, num_samples=20, **RUN)
    text = str(caught[0].message)
    assert "num_warmup=20, num_samples=" in text and "num_chains=4 (now 2)" in text
    assert "Tempering" not in text and "proposal" not in text
    assert bd.PG(num_particles=7)._info(None, (1.0,), None)["num_particles"] == 7
