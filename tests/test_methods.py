"""Method objects, the problem, and the spellings of sample and the estimators: the flat keywords
of earlier versions warn and give the same draws as the objects; the driver decides once how
chains (and tempered rungs) share a device; bad options are named before anything compiles."""

import dataclasses
import sys
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

import bdtree_jax as bd
from bdtree_jax import driver
from bdtree_jax.kernels import tempering
from bdtree_jax.methods import from_flat
from bdtree_jax.methods.flat import TEMPERING_OPTIONS, method_options

RUN = dict(num_warmup=20, num_samples=20, num_chains=2, seed=3)
T0 = "x2<=2.45(L,L)"  # petal length: splits off setosa


@pytest.fixture(scope="module")
def iris():
    X, y = bd.datasets.load("iris")
    return X.iloc[::3], y.iloc[::3]


def _same_trees(a, b):
    for p, q in zip(a.trees, b.trees):
        np.testing.assert_array_equal(p, q)


# ----------------------------------------------------------------------------------------------
# Old and new spellings


def test_flat_keywords_of_sample_warn_and_give_the_new_spellings_draws(iris):
    X, y = iris
    with pytest.warns(DeprecationWarning) as record:
        old = bd.sample(X, y, method="cgm", proposal="regrow", n_temperatures=4, max_depth=3, **RUN)
    messages = {str(w.message) for w in record}
    assert "proposal= is deprecated; use method=bd.CGM(proposal='regrow')" in messages
    assert "n_temperatures= is deprecated; use tempering=bd.Tempering(num_temperatures=4)" in messages
    assert "max_depth= is deprecated; use prior=bd.TreePrior(max_depth=3)" in messages
    assert all(w.filename == __file__ for w in record)  # attributed to the caller
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", bd.ConvergenceWarning)  # short chains; only the spelling is checked
        new = bd.sample(X, y, method=bd.CGM(proposal="regrow"), tempering=bd.Tempering(4),
                        prior=bd.TreePrior(max_depth=3), **RUN)
    _same_trees(old, new)
    np.testing.assert_array_equal(old.stats["swap_pair"], new.stats["swap_pair"])
    assert old.info["betas"] == new.info["betas"] == tempering.ladder(4, 0.2)


def test_flat_keywords_of_the_estimators_warn_and_give_the_method_objects_draws(iris):
    X, y = iris
    with pytest.warns(DeprecationWarning, match=r"num_particles= is deprecated; use method=bd\.PG\(num_particles=10\)"):
        old = bd.BayesianTreeClassifier(method="pg", num_particles=10, max_depth=3, **RUN).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", bd.ConvergenceWarning)  # short chains; only the spelling is checked
        new = bd.BayesianTreeClassifier(method=bd.PG(num_particles=10), max_depth=3, **RUN).fit(X, y)
    _same_trees(old.posterior_, new.posterior_)
    np.testing.assert_array_equal(old.predict_proba(X), new.predict_proba(X))
    assert old.get_params()["num_particles"] == 10 and clone(old).get_params()["num_particles"] == 10


def test_from_flat_maps_keywords_onto_the_objects():
    method, temper, rest, moved = from_flat("smc", {"num_particles": 50, "grow": "layer", "max_depth": 4}, where="x: ")
    assert method == bd.SMC(num_particles=50, grow="layer") and temper is None and rest == {"max_depth": 4}
    assert moved == [("num_particles", "method=bd.SMC(num_particles=50)"), ("grow", "method=bd.SMC(grow='layer')")]
    method, temper, _, moved = from_flat(bd.PG(proposal="posterior"), {"num_particles": 5, "num_temperatures": 3,
                                                                       "delta_t": 0.5})
    assert method == bd.PG(num_particles=5, proposal="posterior") and temper == bd.Tempering(3, 0.5)
    assert ("delta_t", "tempering=bd.Tempering(delta_t=0.5)") in moved
    assert from_flat("hmc-dfi", {"h_init": 0.05})[0] == bd.RJHMC(kind="dfi", h_init=0.05)
    assert from_flat("hmc-dfi", {})[0].name == "hmc-dfi"
    assert from_flat("pcfg", {"max_depth": None})[:2] == (bd.PCFG(unbounded=True), None)
    # another method's option at its default is no error (configs spell defaults out)
    assert from_flat("cgm", {"num_local_steps": 25, "num_temperatures": 1})[0] == bd.CGM()
    with pytest.raises(ValueError, match="x: num_local_steps is an option of method='wu'; method='cgm' does not use it"):
        from_flat("cgm", {"num_local_steps": 5}, where="x: ")
    with pytest.raises(ValueError, match="x: num_particles must be an integer >= 1"):
        from_flat("pg", {"num_particles": 0}, where="x: ")
    with pytest.raises(ValueError, match="unknown method 'magic'"):
        from_flat("magic", {})


# ----------------------------------------------------------------------------------------------
# The driver's one decision


@pytest.mark.parametrize("method", [bd.PG(num_particles=3), pytest.param(bd.CGM(initial_tree=T0), marks=pytest.mark.slow)],
                         ids=["pg", "edit-prior"])
def test_tempered_rungs_are_vectorized_with_the_chains(iris, method, monkeypatch):
    """chain_method="vmap" builds tempered PG and the edit prior with vmap-ped rungs (and "loop"
    with looped ones): the kernel follows the driver's decision, and the chains are
    the same either way."""
    X, y = iris
    flags, original = [], tempering.tempered

    def recording(algorithm, betas, vectorized=False):
        flags.append(vectorized)
        return original(algorithm, betas, vectorized)

    monkeypatch.setattr(tempering, "tempered", recording)
    kw = dict(method=method, prior=bd.TreePrior(max_depth=2), tempering=bd.Tempering(2), **RUN)
    seq = bd.sample(X, y, chain_method="loop", **kw)
    vec = bd.sample(X, y, chain_method="vmap", **kw)
    assert flags == [False, True]
    _same_trees(seq, vec)


@pytest.mark.parametrize("method", [bd.SMC(num_particles=20), bd.PCFG(num_buckets=4)], ids=["smc", "pcfg"])
def test_independent_runs_resume_from_a_checkpoint(iris, method, tmp_path, monkeypatch):
    """SMC runs and PCFG draws go through the driver's runner: an interrupted run resumes from its
    checkpoint and equals an uninterrupted one (chain c uses fold_in(key(seed), c) either way)."""
    X, y = iris
    kw = dict(method=method, prior=bd.TreePrior(max_depth=2), num_samples=10, num_chains=3, seed=2)
    full = bd.sample(X, y, **kw)
    path, original = tmp_path / "run.ckpt", driver._write_checkpoint

    def interrupt_after_one(*args, **kwargs):
        original(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(driver, "_write_checkpoint", interrupt_after_one)
    with pytest.raises(KeyboardInterrupt):
        bd.sample(X, y, checkpoint=path, **kw)
    monkeypatch.setattr(driver, "_write_checkpoint", original)
    _same_trees(full, bd.sample(X, y, checkpoint=path, **kw))
    one = bd.sample(X, y, **dict(kw, num_chains=1))  # chain 0 does not depend on the number of chains
    for a, b in zip(full.trees, one.trees):
        np.testing.assert_array_equal(a[:1], b)


# ----------------------------------------------------------------------------------------------
# Options and problems checked before anything compiles


@pytest.mark.parametrize("make, match", [
    (lambda: bd.CGM(proposal="gibbs"), "proposal must be one of"),
    (lambda: bd.CGM(move_probs=(0.5, 0.5)), "move_probs must be 4"),
    (lambda: bd.CGM(initial_tree=T0, mean_edits=0.0), "mean_edits must be"),
    (lambda: bd.CGM(initial_tree=T0, move_probs=(0.3, 0.3, 0.3, 0.1)), "move_probs does not apply with initial_tree"),
    (lambda: bd.RJHMC(kind="soft"), "kind must be one of"),
    (lambda: bd.RJHMC(h_init=0.01, h_final=0.02), "h_final"),
    (lambda: bd.RJHMC(schedule="slow"), "schedule"),
    (lambda: bd.PCFG(num_buckets=1), "num_buckets must be"),
    (lambda: bd.PCFG(log_phi=float("inf")), "log_phi must be"),
    (lambda: bd.SMC(num_particles=10, num_islands=3), "num_islands must be"),
    (lambda: bd.SMC(ess_threshold=2.0), "ess_threshold must be"),
    (lambda: bd.PG(proposal="cgm"), "proposal must be one of"),
    (lambda: bd.WU(num_local_steps=0), "num_local_steps must be"),
    (lambda: bd.WU(max_groups=20), "max_groups must be"),
    (lambda: bd.Tempering(0), "num_temperatures must be"),
    (lambda: bd.Tempering(2, delta_t=-1.0), "delta_t must be"),
    (lambda: bd.RunOptions(num_chains=0), "num_chains must be"),
    (lambda: bd.RunOptions(block_size=2.5), "block_size must be"),
    (lambda: bd.RunOptions(chain_method="parallel"), "chain_method must be"),
])
def test_bad_options_raise_when_the_object_is_made(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_method_objects_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        bd.CGM().proposal = "regrow"
    assert dataclasses.replace(bd.PG(), num_particles=4) == bd.PG(num_particles=4)


def test_problems_methods_cannot_run_raise_before_compiling(iris):
    X, y = iris
    before = driver.trace_count()
    plain = bd.build_problem(X, y, prior=bd.TreePrior(max_depth=2))
    with pytest.raises(ValueError, match="problem was built with box_constraints=None"):
        bd.CGM(box_constraints=[{0: (None, 5.0)}]).run(plain)
    pinball = bd.build_problem(X, y, prior=bd.TreePrior(max_depth=2, structure="pinball"))
    with pytest.raises(ValueError, match="structure='pinball' is supported by method='cgm'"):
        bd.PG().run(pinball)
    with pytest.raises(ValueError, match="tempering applies to MCMC methods"):
        bd.SMC().run(plain, tempering=bd.Tempering(2))
    with pytest.raises(ValueError, match="sample: num_samples must be an integer >= 1"):
        bd.sample(X, y, num_samples=0)
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['samples'\]"):
        bd.sample(X, y, samples=10)
    with pytest.raises(ValueError, match="give prior= or its flat keywords, not both"):
        bd.sample(X, y, prior=bd.TreePrior(), max_depth=3)
    assert driver.trace_count() == before


def test_build_problem_and_its_likelihood_spellings(iris):
    X, y = iris
    problem = bd.build_problem(X, y)
    assert problem.X.shape == problem.train_bins.shape == (50, 4) and problem.train_stats.shape == (50, 3)
    assert problem.feature_names == list(X.columns) and problem.prior == bd.TreePrior()
    assert list(problem.classes) == sorted(set(y)) and problem.train_y.dtype == np.int32
    assert bd.build_problem(X.to_numpy(), y).names == ["x0", "x1", "x2", "x3"]
    a = bd.build_problem(X, y, likelihood={"concentration": 0.5})
    b = bd.build_problem(X, y, likelihood=bd.DirichletMultinomial(3, 0.5))
    assert a.likelihood.concentration == b.likelihood.concentration == 0.5
    with pytest.raises(ValueError, match=r"likelihood options \['nu'\] do not apply to task='classification'"):
        bd.build_problem(X, y, likelihood={"nu": 3.0})
    with pytest.raises(ValueError, match="likelihood has n_classes=2; y has 3 classes"):
        bd.build_problem(X, y, likelihood=bd.DirichletMultinomial(2))
    with pytest.raises(ValueError, match="task must be one of"):
        bd.build_problem(X, y, task="ranking")
    Xr, yr = bd.datasets.make_cgm(60, seed=0)
    reg = bd.build_problem(Xr, yr, task="regression", likelihood={"nu": 5.0, "lam": None})
    assert reg.likelihood.nu == 5.0 and reg.likelihood_options == {"nu": 5.0} and reg.classes is None


@pytest.mark.parametrize("method", ["hmc-df", bd.CGM(initial_tree=T0)], ids=["rjhmc", "edit-prior"])
def test_a_fit_validates_X_once(iris, method, monkeypatch):
    """X is validated once per fit (RJHMC and the edit prior used to validate it again)."""
    X, y = iris
    original, calls = bd.data.check_X, []

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    for module in [m for name, m in sys.modules.items() if name.startswith("bdtree_jax")]:
        if getattr(module, "check_X", None) is original:
            monkeypatch.setattr(module, "check_X", counting)

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):  # the run itself is not this test's business
        raise Stop

    monkeypatch.setattr(bd.methods.base, "run_chains", stop)
    with pytest.raises(Stop):
        bd.BayesianTreeClassifier(method=method, max_depth=2, **RUN).fit(X, y)
    assert len(calls) == 1


# ----------------------------------------------------------------------------------------------
# Estimators: one source of truth for the options, GridSearchCV over a method's options


def test_estimators_take_every_prior_run_and_flat_option():
    prior = {f.name for f in dataclasses.fields(bd.TreePrior)}
    run = {f.name for f in dataclasses.fields(bd.RunOptions)} - {"devices"}
    for est, leaf in ((bd.BayesianTreeClassifier(), {"concentration"}),
                      (bd.BayesianTreeRegressor(), {"nu", "lam", "a", "mu_bar"})):
        assert prior | run | leaf | {"method", "tempering"} <= set(est.get_params())
        flat = {k: None for k in list(method_options()) + list(TEMPERING_OPTIONS)}
        assert set(type(est)(**flat).get_params()) >= set(flat)


def test_estimator_unknown_keyword_is_named_at_fit(iris):
    X, y = iris
    with pytest.raises(TypeError, match=r"BayesianTreeClassifier\(\) got unexpected keyword arguments \['samples'\]"):
        bd.BayesianTreeClassifier(samples=3).fit(X, y)
    with pytest.raises(ValueError, match="give tempering= or num_temperatures=/delta_t=, not both"):
        bd.BayesianTreeClassifier(tempering=bd.Tempering(2), num_temperatures=3).fit(X, y)


@pytest.mark.slow
def test_grid_search_tunes_a_method_objects_option(iris):
    X, y = iris
    clf = bd.BayesianTreeClassifier(method=bd.PG(num_particles=2), max_depth=2, num_warmup=10, num_samples=10,
                                    num_chains=1)
    assert clf.get_params()["method__num_particles"] == 2
    search = GridSearchCV(clf, {"method__num_particles": [2, 3]}, cv=2, refit=False).fit(X, y)
    assert list(search.cv_results_["param_method__num_particles"]) == [2, 3]
    assert np.all(search.cv_results_["mean_test_score"] > 0.5)
    assert clf.method == bd.PG(num_particles=2)  # the frozen object is replaced in clones, never mutated
    smc = bd.BayesianTreeClassifier(method="smc").set_params(method__num_particles=7)
    assert smc.method == bd.SMC(num_particles=7)
    with pytest.raises(ValueError, match="set_params: .*unexpected keyword argument 'particles'"):
        smc.set_params(method__particles=7)
