"""The ConvergenceWarning every fit issues when its chains have not converged.

The per-draw log-likelihood and number of leaves are checked with ArviZ (R-hat > 1.05 with >= 2
chains, bulk ESS < 100): first on hand-made (chain, draw) arrays whose answer is known, then on
real runs of ``bd.sample``, the tree estimators and BART, where a short run from a cold start must
warn once (pointing at the caller's line) and a long run of a tiny problem must not.
"""

from __future__ import annotations

import inspect
import warnings
from types import SimpleNamespace

import arviz as az
import numpy as np
import pytest

import bdtree_jax as bd
from bdtree_jax.diagnostics import ESS_MIN, RHAT_MAX, ConvergenceWarning, check_convergence, convergence_diagnostics


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
    assert (RHAT_MAX, ESS_MIN) == (1.05, 100)


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
    assert f"R-hat of the log-likelihood (log_lik) is {rhat:.3f} > 1.05" in text
    assert "number of leaves" not in text  # n_leaves mixes (independent draws)
    for remedy in ("num_samples", "num_chains", "num_temperatures", "proposal"):
        assert remedy in text


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
    assert f"bulk ESS of the number of leaves (n_leaves) is {d['n_leaves']['ess_bulk']:.0f} < 100" in text
    assert "R-hat" not in text and "log_lik" not in text


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
    assert d["log_lik"]["ess_bulk"] < ESS_MIN  # 40 draws cannot hold 100 effective ones
    assert "log-likelihood (log_lik)" in str(caught[0].message)


def test_long_run_of_a_tiny_problem_does_not_warn():
    # two leaves at most: CGM mixes fast; 2 x 1000 draws give R-hat ~1.00 and ESS in the hundreds
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        post = bd.sample(X_SMALL, Y_SMALL, num_warmup=100, num_samples=1000, **RUN)
    d = convergence_diagnostics(post)
    assert all(q["rhat"] < 1.02 and q["ess_bulk"] > 2 * ESS_MIN for q in d.values()), d


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
