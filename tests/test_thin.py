"""``thin=k``: every warm-up iteration and then every ``k``-th is kept (iterations
``num_warmup + k - 1, num_warmup + 2k - 1, ...``), bit for bit the unthinned run's, and only those
are recorded (the traces have ``num_warmup + num_samples`` iterations, not ``num_warmup +
num_samples * k``)."""

import jax
import numpy as np
import pytest

from helpers import jax_listener

import bdtree_jax as bd
from bdtree_jax import driver
from bdtree_jax.data import make_split_grid
from bdtree_jax.kernels import cgm
from bdtree_jax.likelihoods import DirichletMultinomial
from bdtree_jax.priors import TreePrior, make_tree_data


@pytest.fixture(scope="module")
def iris():
    X, y = bd.datasets.load("iris")
    return X.to_numpy()[::2], np.asarray(y)[::2]


@pytest.fixture(scope="module")
def problem(iris):
    X, y = iris
    _, codes = np.unique(y, return_inverse=True)
    prior = TreePrior(max_depth=4)
    grid = make_split_grid(X)
    return cgm.cgm(cgm.CGMConfig.from_prior(prior)), make_tree_data(grid.bin(X), codes, prior, DirichletMultinomial(3))


def _run(problem, **kw):
    algorithm, data = problem
    args = dict(key=jax.random.key(3), num_chains=2, num_iterations=130, block_size=40)
    args.update(kw)
    return driver.run_chains(algorithm, data, **args)[0]


def _assert_same(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def _thinned(traces, num_warmup, thin):
    """The unthinned traces' warm-up and every ``thin``-th iteration after it."""
    return jax.tree.map(lambda a: np.concatenate([a[:, :num_warmup], a[:, num_warmup + thin - 1::thin]], axis=1),
                        traces)


# bit-identity of two programs that batch the iterations differently: the cheap build rounded one
# log-likelihood of 80 differently on jax 0.7 (2e-6; tests/conftest.py)
@pytest.mark.xla_optimized
@pytest.mark.parametrize("thin, block_size", [pytest.param(3, 40, marks=pytest.mark.slow), (4, 17), (2, 130)])
def test_run_chains_records_every_thin_th_iteration(problem, thin, block_size):
    """Blocks that end inside a group of ``thin`` iterations (17, 40), one block for the run
    (130), CGM's two steps per loop pass: the recorded iterations equal the unthinned run's."""
    full = _run(problem, num_iterations=10 + 30 * thin)
    got = _run(problem, num_iterations=10 + 30 * thin, num_warmup=10, thin=thin, block_size=block_size)
    assert got["log_lik"].shape == (2, 10 + 30)  # the traces hold the kept iterations only
    _assert_same(got, _thinned(full, 10, thin))
    assert full["accepted"][:, 10:].mean() > 0.05


class _Compiles:
    """Names of the programs XLA compiles while registered (``jax.monitoring``)."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self):
        self.names = []

    def __call__(self, event, duration, **kwargs):
        if event == self.EVENT:
            self.names.append(kwargs.get("fun_name"))


@pytest.fixture
def compiles():
    with jax_listener(_Compiles()) as listener:
        yield listener


@pytest.mark.no_compile_cache  # a program read from the disk cache is not compiled (no event)
def test_one_block_program_serves_every_thin(problem, compiles):
    """``thin`` (like ``num_warmup``) is an argument of the block program, not a constant: runs
    with thin 1, 3 and 7 trace and compile one block program (a block size no other test uses, so
    the first run compiles it here), and each still records its own iterations."""
    before = driver.trace_count()
    runs = {thin: _run(problem, num_iterations=20 + 6 * thin, num_warmup=20, thin=thin, block_size=23)
            for thin in (3, 7, 1)}
    assert driver.trace_count() - before == 1
    assert compiles.names.count("jit(block)") == 1, compiles.names
    for thin in (3, 7):
        assert runs[thin]["log_lik"].shape == (2, 20 + 6)
        _assert_same(runs[thin], _thinned(_run(problem, num_iterations=20 + 6 * thin, block_size=23), 20, thin))
    assert driver.trace_count() - before == 1  # the unthinned runs of other lengths too


def test_thinned_checkpoint_resumes_to_the_uninterrupted_run(problem, tmp_path, monkeypatch):
    kw = dict(num_iterations=10 + 30 * 3, num_warmup=10, thin=3, block_size=25)
    full = _run(problem, **kw)
    original, calls = driver._write_checkpoint, {"n": 0}

    def interrupt_after_two(*args, **kwargs):
        original(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt

    path = tmp_path / "run.ckpt"
    monkeypatch.setattr(driver, "_write_checkpoint", interrupt_after_two)
    with pytest.raises(KeyboardInterrupt):
        _run(problem, checkpoint=path, **kw)
    monkeypatch.setattr(driver, "_write_checkpoint", original)
    _assert_same(_run(problem, checkpoint=path, **kw), full)
    # an unthinned run of the same length is another run: it does not resume from the file
    _assert_same(_run(problem, checkpoint=path, num_iterations=100), _run(problem, num_iterations=100))


def test_sample_thin_keeps_num_samples_draws(iris):
    X, y = iris
    # the full run has the shapes and options of test_estimators.py's grid-search refit (75 iris rows,
    # max_depth 3, 100 + 200 iterations, 2 chains): its compiled program
    kw = dict(prior=bd.TreePrior(max_depth=3), num_warmup=100, num_chains=2, seed=1)
    full = bd.sample(X, y, **kw, num_samples=200)
    thinned = bd.sample(X, y, **kw, num_samples=66, thin=3)
    assert thinned.trees.is_split.shape[:2] == (2, 66) and thinned.info["thin"] == 3
    _assert_same(thinned.trees, jax.tree.map(lambda a: a[:, 2::3], full.trees))
    for k in full.stats:
        np.testing.assert_array_equal(thinned.stats[k], full.stats[k][:, 2::3])
        np.testing.assert_array_equal(thinned.warmup_stats[k], full.warmup_stats[k])
    clf = bd.BayesianTreeClassifier(max_depth=3, num_warmup=100, num_samples=66, num_chains=2, seed=1, thin=3)
    _assert_same(clf.fit(X, y).posterior_.trees, thinned.trees)
    assert clf.get_params()["thin"] == 3


def test_bart_thin(iris):
    X, y = iris
    y = X[:, 0] + X[:, 1]
    kw = dict(num_trees=5, num_warmup=4, num_chains=1, seed=0)
    full = bd.BARTRegressor(**kw, num_samples=12).fit(X, y).posterior_
    thinned = bd.BARTRegressor(**kw, num_samples=6, thin=2).fit(X, y).posterior_
    assert thinned.leaf_values.shape[:2] == (1, 6)
    _assert_same(thinned.trees, jax.tree.map(lambda a: a[:, 1::2], full.trees))
    np.testing.assert_array_equal(thinned.leaf_values, full.leaf_values[:, 1::2])
    np.testing.assert_array_equal(thinned.stats["sigma"], full.stats["sigma"][:, 1::2])


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_bad_thin_is_refused(iris, value):
    X, y = iris
    with pytest.raises(ValueError, match="sample: thin must be an integer >= 1"):
        bd.sample(X, y, num_warmup=1, num_samples=1, thin=value)
    with pytest.raises(ValueError, match="BARTRegressor: thin must be an integer >= 1"):
        bd.BARTRegressor(num_trees=2, thin=value).fit(X, X[:, 0])
    with pytest.raises(ValueError, match="thin must be an integer >= 1"):
        driver.run_chains(*_problem_args(), key=jax.random.key(0), num_chains=1, num_iterations=5, thin=value)


def _problem_args():
    X = np.arange(12.0).reshape(6, 2)
    prior = TreePrior(max_depth=2)
    data = make_tree_data(make_split_grid(X).bin(X), np.arange(6) % 2, prior, DirichletMultinomial(2))
    return cgm.cgm(cgm.CGMConfig.from_prior(prior)), data


@pytest.mark.parametrize("method", ["smc", "pcfg"])
def test_independent_draws_refuse_thin(iris, method):
    X, y = iris
    with pytest.raises(ValueError, match=f"sample: thin applies to the MCMC methods .*method='{method}'"):
        bd.sample(X, y, method=method, num_samples=5, thin=2)


def test_cli_config_takes_thin(tmp_path):
    from bdtree_jax.cli import _flat_options, _sample_arguments, load_config

    path = tmp_path / "run.yaml"
    path.write_text("dataset: iris\nmethod: cgm\nthin: 5\nnum_samples: 10\n")
    config = load_config(path)
    arguments = _sample_arguments("cgm", _flat_options(config, where=""), where="")
    assert arguments["thin"] == 5 and arguments["num_samples"] == 10  # sample(..., thin=5)
