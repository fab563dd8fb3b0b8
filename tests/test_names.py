"""Names users already know: counts spelled ``num_*`` (the earlier ``n_*`` keywords, attributes
and config keys still work, each with a ``DeprecationWarning`` naming the new one),
``chain_method`` values that do not clash with NumPyro's, ``__version__`` from the package
metadata (recorded in saved files), and ``summary()`` as ArviZ's per-quantity table."""

import dataclasses
import json
import subprocess
import sys
import warnings
from importlib import metadata

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

import bdtree_jax as bd
from bdtree_jax import driver
from bdtree_jax.cli import load_config
from bdtree_jax.methods import from_flat

RUN = dict(num_warmup=30, num_samples=30, num_chains=2, seed=1, progress=False)


def _no_warning(make):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return make()


@pytest.mark.parametrize("make_old, make_new, old", [
    (lambda: bd.Tempering(n_temperatures=3), lambda: bd.Tempering(num_temperatures=3), "n_temperatures"),
    (lambda: bd.WU(n_local=5), lambda: bd.WU(num_local_steps=5), "n_local"),
    (lambda: bd.SMC(num_particles=10, n_islands=2), lambda: bd.SMC(num_particles=10, num_islands=2), "n_islands"),
    (lambda: bd.PCFG(n_buckets=4), lambda: bd.PCFG(num_buckets=4), "n_buckets"),
    (lambda: bd.BARTRegressor(n_trees=7), lambda: bd.BARTRegressor(num_trees=7), "n_trees"),
    (lambda: bd.BARTClassifier(n_trees=7), lambda: bd.BARTClassifier(num_trees=7), "n_trees"),
], ids=["Tempering", "WU", "SMC", "PCFG", "BARTRegressor", "BARTClassifier"])
def test_old_count_keywords_warn_and_make_the_same_object(make_old, make_new, old):
    with pytest.warns(DeprecationWarning, match=rf"{old}= is deprecated; use num_\w+=") as record:
        made = make_old()
    assert all(w.filename == __file__ for w in record)  # attributed to the caller
    new = _no_warning(make_new)
    assert repr(made) == repr(new)
    new_name = bd._renamed.RENAMED[old]
    with pytest.warns(DeprecationWarning, match=rf"\.{old} is deprecated; use {new_name}"):
        assert getattr(made, old) == getattr(new, new_name)
    with pytest.raises(TypeError, match=f"give {new_name}= or its deprecated spelling {old}=, not both"):
        type(new)(**{old: 3, new_name: 3})


def test_methods_and_estimators_keep_the_new_signatures():
    import inspect

    assert "num_local_steps" in inspect.signature(bd.WU).parameters
    assert "n_trees" not in bd.BARTRegressor().get_params() and bd.BARTRegressor().get_params()["num_trees"] == 200
    assert [f.name for f in dataclasses.fields(bd.Tempering)] == ["num_temperatures", "delta_t"]


def test_bart_estimators_old_name_in_set_params_and_scikit_learn_checks():
    from sklearn.utils.estimator_checks import (check_get_params_invariance, check_no_attributes_set_in_init,
                                                check_parameters_default_constructible, check_set_params)

    for cls in (bd.BARTRegressor, bd.BARTClassifier):
        est = cls()
        for check in (check_parameters_default_constructible, check_no_attributes_set_in_init,
                      check_get_params_invariance, check_set_params):
            check(cls.__name__, est)
        with pytest.warns(DeprecationWarning, match="n_trees= is deprecated; use num_trees="):
            est.set_params(n_trees=11)
        assert est.num_trees == 11 and clone(est).get_params()["num_trees"] == 11


def test_flat_keywords_of_earlier_names_map_onto_the_new_fields():
    method, temper, rest, moved = from_flat("wu", {"n_local": 5, "n_temperatures": 2, "max_depth": 3})
    assert method == bd.WU(num_local_steps=5) and temper == bd.Tempering(2) and rest == {"max_depth": 3}
    assert moved == [("n_local", "method=bd.WU(num_local_steps=5)"),
                     ("n_temperatures", "tempering=bd.Tempering(num_temperatures=2)")]
    with pytest.raises(ValueError, match="give num_local_steps= or its deprecated spelling n_local=, not both"):
        from_flat("wu", {"n_local": 5, "num_local_steps": 5})
    assert from_flat("smc", {"n_islands": 2, "num_particles": 10})[0] == bd.SMC(num_particles=10, num_islands=2)
    # an estimator's flat keyword and method__<option> of set_params
    est = bd.BayesianTreeClassifier(method="wu", n_local=4)
    assert est.get_params()["n_local"] == 4
    with pytest.warns(DeprecationWarning, match="n_local= is deprecated; use num_local_steps="):
        est = bd.BayesianTreeClassifier(method=bd.WU()).set_params(method__n_local=3)
    assert est.method == bd.WU(num_local_steps=3)


def test_functions_take_their_earlier_keywords():
    with pytest.warns(DeprecationWarning, match="make_xor: n_features= is deprecated; use num_features="):
        old = bd.datasets.make_xor(20, n_features=5, n_relevant=2)
    pd.testing.assert_frame_equal(old[0], bd.datasets.make_xor(20, num_features=5, num_relevant=2)[0])
    with pytest.warns(DeprecationWarning, match="n_per_vertex= is deprecated; use num_per_vertex="):
        old = bd.datasets.make_hypercube(2, n_per_vertex=3)
    pd.testing.assert_frame_equal(old[0], bd.datasets.make_hypercube(2, num_per_vertex=3)[0])
    pair, accepted = np.array([1, 1, 2]), np.array([True, False, True])
    with pytest.warns(DeprecationWarning, match="n_temperatures= is deprecated"):
        old = bd.diagnostics.swap_rates(pair, accepted, n_temperatures=2)
    np.testing.assert_array_equal(old, bd.diagnostics.swap_rates(pair, accepted, num_temperatures=2))
    from bdtree_jax.numpyro import bart
    import numpyro

    X = np.arange(12.0).reshape(6, 2)
    with pytest.warns(DeprecationWarning, match="bart: n_trees= is deprecated; use num_trees="):
        trace = numpyro.handlers.trace(numpyro.handlers.seed(lambda: bart("f", X, n_trees=3), 0)).get_trace()
    assert trace["f_trees"]["value"].shape[0] == 3


def test_config_keys_of_earlier_names_warn(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("dataset: iris\nmethod: {name: wu, n_local: 4}\nn_temperatures: 2\n")
    with pytest.warns(DeprecationWarning) as record:
        config = load_config(path, overrides=["n_buckets=3"])
    messages = {str(w.message) for w in record}
    assert f"{path}: method: n_local is deprecated; use num_local_steps" in messages
    assert f"{path}: n_temperatures is deprecated; use num_temperatures" in messages
    assert "--set: n_buckets is deprecated; use num_buckets" in messages
    assert config["method"] == {"name": "wu", "num_local_steps": 4} and config["num_temperatures"] == 2


def test_cli_shows_the_deprecation_of_a_config_key(tmp_path):
    """Python hides DeprecationWarnings outside ``__main__``; the ``bdtree`` command shows those of
    a config's keys on stderr (here before the config's error, exit code 2)."""
    path = tmp_path / "old.yaml"
    path.write_text("dataset: nope\nmethod: wu\nn_local: 4\n")
    out = subprocess.run([sys.executable, "-c", "import sys; from bdtree_jax.cli import main; "
                          f"sys.exit(main(['run', {str(path)!r}]))"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "DeprecationWarning: " + f"{path}: n_local is deprecated; use num_local_steps" in out.stderr
    assert "unknown dataset 'nope'" in out.stderr


def test_chain_method_values():
    with pytest.warns(DeprecationWarning, match="chain_method='sequential' is deprecated; use chain_method='loop'"):
        assert bd.RunOptions(chain_method="sequential").chain_method == "loop"
    with pytest.warns(DeprecationWarning, match="chain_method='vectorized' is deprecated; use chain_method='vmap'"):
        plan = driver.plan_chains(2, chain_method="vectorized")
    assert plan.chain_method == "vmap" and driver.CHAIN_METHODS == ("loop", "vmap")
    with pytest.raises(ValueError, match=r"chain_method must be one of \('loop', 'vmap'\) or None; got 'parallel'"):
        bd.RunOptions(chain_method="parallel")


def test_version_is_the_package_metadata_and_saved_files_record_it(tmp_path):
    assert bd.__version__ == metadata.version("bdtree_jax")
    X, y = bd.datasets.load("iris")
    post = bd.sample(X[::5], y[::5], prior=bd.TreePrior(max_depth=2), **{**RUN, "num_chains": 1})
    post.save(tmp_path / "p.npz")
    header = json.loads(np.load(tmp_path / "p.npz")["header"].tobytes())
    assert header["library_version"] == bd.__version__


def test_summary_is_arviz_table_of_the_traced_quantities():
    import arviz as az

    X, y = bd.datasets.load("iris")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bd.ConvergenceWarning)
        post = bd.sample(X[::3], y[::3], prior=bd.TreePrior(max_depth=3), tempering=bd.Tempering(2), **RUN)
    table = post.summary(round_to="none" if bd._arviz.arviz_major_version() < 1 else None)
    assert isinstance(table, pd.DataFrame)
    assert {"log_lik", "log_prior", "log_posterior", "n_leaves", "depth", "accepted", "swap_accepted"} == set(table.index)
    assert {"mean", "sd", "ess_bulk", "ess_tail", "r_hat"} <= set(table.columns)
    assert table.loc["accepted", "mean"] == pytest.approx(post.acceptance_rate())
    assert table.loc["n_leaves", "mean"] == pytest.approx(post.stats["n_leaves"].mean())
    assert table.loc["log_lik", "r_hat"] == pytest.approx(float(az.rhat(post.stats["log_lik"].astype(float))))
    with pytest.raises(ValueError, match="summary needs draws"):
        bd.sample(X[::3], y[::3], method="pcfg", prior=bd.TreePrior(max_depth=2), num_samples=0, num_chains=1,
                  progress=False).summary()


def test_bart_summary_is_a_table():
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(60, 2))
    est = bd.BARTRegressor(num_trees=5, max_depth=3, num_warmup=20, num_samples=20, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bd.ConvergenceWarning)
        post = est.fit(X, X[:, 0] + 0.1 * rng.normal(size=60)).posterior_
    table = post.summary()
    assert {"sigma", "n_leaves", "depth"} <= set(table.index) and "r_hat" in table.columns
    assert table.loc["sigma", "mean"] == pytest.approx(post.stats["sigma"].mean(), abs=0.01)
