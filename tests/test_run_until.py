"""``run_until=bd.Converged(...)``: rounds that double ``thin`` and go on from where the chains
stopped, bit for bit one run with the final ``thin``; a checkpoint resumes the round it reached."""

import jax
import numpy as np
import pytest

import bdtree_jax as bd
from bdtree_jax import driver
from bdtree_jax.methods.until import keep_every_second, round_thins

KW = dict(prior=bd.TreePrior(max_depth=3), num_warmup=30, num_samples=20, num_chains=2, seed=1)


@pytest.fixture(scope="module")
def iris():
    X, y = bd.datasets.load("iris")
    return X.to_numpy()[::2], np.asarray(y)[::2]


def _assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def _assert_same_posterior(a, b):
    _assert_same(a.trees, b.trees)
    for k in b.stats:
        np.testing.assert_array_equal(a.stats[k], b.stats[k])
        np.testing.assert_array_equal(a.warmup_stats[k], b.warmup_stats[k])


def test_round_thins_double_within_the_budget():
    assert round_thins(1, 100, 800) == [1, 2, 4, 8]
    assert round_thins(3, 100, 1000) == [3, 6]
    assert round_thins(5, 100, 10) == [5]  # the first round always runs


def test_keeping_every_second_draw_is_the_doubled_thin():
    """Warm-up kept whole; of the draws at ``thin`` (iterations W + k thin - 1) those at ``2 thin``."""
    W, S, thin = 3, 7, 2
    iterations = np.arange(W + S * thin)
    recorded = np.concatenate([iterations[:W], iterations[W + thin - 1::thin]])[None]
    halved = keep_every_second({"t": recorded}, W)["t"][0]
    expected = np.concatenate([iterations[:W], iterations[W + 2 * thin - 1::2 * thin]])
    np.testing.assert_array_equal(halved, expected[: len(halved)])
    assert len(halved) == W + S // 2


def test_unconverged_run_is_the_run_with_the_final_thin(iris):
    """A budget of 4 rounds that the targets never meet: the result is the run with thin = 8."""
    X, y = iris
    post = bd.sample(X, y, **KW, run_until=bd.Converged(ess=1e9, max_iterations=160))
    report = post.info["run_until"]
    assert report["rounds"] == 4 and report["thin"] == 8 and not report["converged"]
    assert report["iterations"] == 160 and "log_lik" in report["missed"]
    _assert_same_posterior(post, bd.sample(X, y, **KW, thin=8))
    assert post.stats["log_lik"].shape == (2, 20)


def test_converged_run_stops_after_its_first_round(iris, monkeypatch):
    from bdtree_jax import diagnostics

    X, y = iris
    passing = {"log_lik": {"rhat": 1.001, "ess_bulk": 5000.0}, "predictive_mean": {"rhat": 1.0, "ess_bulk": 900.0}}
    monkeypatch.setattr(diagnostics, "convergence_diagnostics", lambda posterior: passing)
    post = bd.sample(X, y, **KW, run_until=bd.Converged())
    assert post.info["run_until"] == dict(converged=True, rounds=1, thin=1, iterations=20, missed=[])
    _assert_same_posterior(post, bd.sample(X, y, **KW))


def test_estimator_takes_run_until(iris):
    X, y = iris
    until = bd.Converged(ess=1e9, max_iterations=40)
    clf = bd.BayesianTreeClassifier(max_depth=3, num_warmup=30, num_samples=20, num_chains=2, seed=1, run_until=until)
    with pytest.warns(bd.ConvergenceWarning):
        clf.fit(X, y)
    assert clf.get_params()["run_until"] is until and clf.posterior_.info["run_until"]["thin"] == 2
    _assert_same(clf.posterior_.trees, bd.sample(X, y, **KW, thin=2).trees)


def test_interrupted_run_until_resumes_its_round(iris, tmp_path, monkeypatch, caplog):
    """Interrupted in its third round, the run resumes there from the checkpoint (no round is run
    again) and ends as the uninterrupted run.  A round going on over its previous round's file
    logs nothing (that file is the run's own, not "another run's")."""
    caplog.set_level("INFO", logger="bdtree_jax.driver")
    X, y = iris
    kw = dict(KW, block_size=8, run_until=bd.Converged(ess=1e9, max_iterations=80))
    full = bd.sample(X, y, **kw)
    original, calls = driver._write_checkpoint, {"n": 0}
    path = tmp_path / "run.ckpt"

    def interrupt(path_, ident, start, *args, **kwargs):
        original(path_, ident, start, *args, **kwargs)
        calls["n"] += 1
        if start > KW["num_warmup"] + 40 + 8:  # inside the third round (thin 4: iterations 70..110)
            raise KeyboardInterrupt

    monkeypatch.setattr(driver, "_write_checkpoint", interrupt)
    with pytest.raises(KeyboardInterrupt):
        bd.sample(X, y, **kw, checkpoint=path)
    assert not [r for r in caplog.records if "another run" in r.getMessage()]
    written = calls["n"]
    monkeypatch.setattr(driver, "_write_checkpoint", original)
    calls["n"] = 0

    def count(*args, **kwargs):
        original(*args, **kwargs)
        calls["n"] += 1

    monkeypatch.setattr(driver, "_write_checkpoint", count)
    caplog.clear()
    resumed = bd.sample(X, y, **kw, checkpoint=path)
    messages = [r.getMessage() for r in caplog.records]
    assert any("resuming from checkpoint" in m for m in messages), messages
    assert not any("another run" in m for m in messages), messages
    _assert_same_posterior(resumed, full)
    assert resumed.info["run_until"]["rounds"] == 3
    assert written + calls["n"] < 2 * written  # the resumed run did not start over


@pytest.mark.parametrize("until, match", [
    (dict(rhat=1.0), "rhat"), (dict(ess=0), "ess"), (dict(max_iterations=0), "max_iterations"),
    (dict(max_seconds=-1.0), "max_seconds"), (dict(rhat=float("nan")), "rhat"), (dict(max_iterations=True), "max_")])
def test_bad_converged_is_refused(until, match):
    with pytest.raises(ValueError, match=match):
        bd.Converged(**until)


def test_run_until_must_be_converged_and_an_mcmc_method(iris):
    X, y = iris
    with pytest.raises(ValueError, match="run_until"):
        bd.sample(X, y, run_until=400)
    with pytest.raises(ValueError, match="run_until applies to the MCMC methods"):
        bd.sample(X, y, method="smc", num_samples=4, run_until=bd.Converged())
