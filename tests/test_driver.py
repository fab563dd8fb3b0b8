"""The driver's one decision of how chains share devices (plan_chains) and its runner for the
non-MCMC methods (run_independent): same results as a plain per-chain loop, resume, progress."""

import jax
import numpy as np
import pytest

import bdtree_jax as bd
from bdtree_jax import driver
from bdtree_jax.data import make_split_grid
from bdtree_jax.kernels import cgm, smc
from bdtree_jax.likelihoods import DirichletMultinomial
from bdtree_jax.priors import TreePrior, make_tree_data


@pytest.fixture(scope="module")
def iris_data():
    X, y = bd.datasets.load("iris")
    X, y = X.iloc[::3].to_numpy(), y.iloc[::3]
    _, codes = np.unique(y, return_inverse=True)
    grid = make_split_grid(X)
    prior = TreePrior(max_depth=3)
    return prior, grid, make_tree_data(grid.bin(X), codes, prior, DirichletMultinomial(3))


@pytest.fixture(scope="module")
def smc_run(iris_data):
    prior, grid, data = iris_data
    config = smc.SMCConfig(prior.max_depth, prior.min_leaf_size, 16, "prior", 0.5, "multinomial", "next", 1)
    return smc.compiled_run(config, int(grid.n_cuts.max()) + 1), data


def _host_draws(key, data):
    """A host-side run (numpy around a JAX draw), like PCFG's sampler."""
    u = np.asarray(jax.random.uniform(key, (5,)))
    return {"u": u * data["scale"], "n": np.int64(u.argmax())}


def _assert_same(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb) and jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def _loop(run_one, data, key, num_chains):
    results = [jax.device_get(run_one(jax.random.fold_in(key, c), data)) for c in range(num_chains)]
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *results)


# --- plan_chains -------------------------------------------------------------------------------


def test_plan_chains_defaults_and_devices():
    plan = driver.plan_chains(4)
    assert isinstance(plan, driver.ChainPlan)
    assert plan.chain_method == "loop"  # the tests run on CPU devices
    assert plan.devices == tuple(jax.devices()[:4]) and 4 % len(plan.devices) == 0
    assert len(driver.plan_chains(3).devices) in (1, 3)  # the most devices dividing 3
    one = driver.plan_chains(4, devices=jax.devices()[:1], chain_method="vmap")
    assert one == driver.ChainPlan(tuple(jax.devices()[:1]), "vmap")


def test_plan_chains_rejects_bad_arguments():
    with pytest.raises(ValueError, match="chain_method must be one of .*'parallel'"):
        driver.plan_chains(2, chain_method="parallel")
    with pytest.raises(ValueError, match="num_chains must be >= 1"):
        driver.plan_chains(0)


def test_run_chains_with_a_plan_equals_its_arguments(iris_data):
    prior, _, data = iris_data
    algorithm = cgm.cgm(cgm.CGMConfig.from_prior(prior))
    args = dict(key=jax.random.key(1), num_chains=2, num_iterations=50, block_size=25)
    plan = driver.plan_chains(2, chain_method="vmap")
    with_plan = driver.run_chains(algorithm, data, plan=plan, **args)[0]
    _assert_same(with_plan, driver.run_chains(algorithm, data, chain_method="vmap", **args)[0])
    with pytest.raises(ValueError, match="either plan or devices/chain_method"):
        driver.run_chains(algorithm, data, plan=plan, chain_method="vmap", **args)
    with pytest.raises(ValueError, match="do not divide num_chains=3"):
        driver.run_chains(algorithm, data, plan=plan, **{**args, "num_chains": 3})


# --- run_independent ---------------------------------------------------------------------------


def test_run_independent_jitted_equals_the_per_chain_loop(smc_run):
    run, data = smc_run
    key = jax.random.key(5)
    assert len(jax.devices()) >= 2  # conftest asks for 4 CPU devices: the waves use shard_map
    expected = _loop(run, data, key, 4)
    for devices in (None, jax.devices()[:1]):
        got = driver.run_independent(run, data, key=key, num_chains=4, jittable=True, devices=devices)
        _assert_same(got, expected)
        assert np.asarray(got.log_weight).shape == (4, 16)


def test_run_independent_host_side_equals_the_loop():
    data = {"scale": 2.0}
    key = jax.random.key(8)
    got = driver.run_independent(_host_draws, data, key=key, num_chains=3)
    _assert_same(got, _loop(_host_draws, data, key, 3))
    assert got["u"].shape == (3, 5) and got["n"].dtype == np.int64


def _interrupt_after_one_chain(monkeypatch):
    original = driver._write_checkpoint

    def write_then_stop(*args, **kw):
        original(*args, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(driver, "_write_checkpoint", write_then_stop)
    return original


@pytest.mark.parametrize("jittable", [False, True])
def test_run_independent_resume_equals_uninterrupted(smc_run, tmp_path, monkeypatch, jittable):
    run, data = smc_run
    key, path = jax.random.key(2), tmp_path / "chains.ckpt"
    full = driver.run_independent(run, data, key=key, num_chains=4, jittable=jittable)
    original = _interrupt_after_one_chain(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        driver.run_independent(run, data, key=key, num_chains=4, jittable=jittable, checkpoint=path)
    monkeypatch.setattr(driver, "_write_checkpoint", original)
    calls = []

    def counted(k, d):
        calls.append(1)
        return run(k, d)

    resumed = driver.run_independent(counted, data, key=key, num_chains=4, jittable=jittable, checkpoint=path)
    _assert_same(full, resumed)
    if not jittable:
        assert len(calls) == 3  # chain 0 came from the checkpoint
    # another run (other key) does not pick the checkpoint up
    other = driver.run_independent(run, data, key=jax.random.key(3), num_chains=4, checkpoint=path)
    _assert_same(other, driver.run_independent(run, data, key=jax.random.key(3), num_chains=4))


def test_run_independent_checkpoint_identifies_dataclass_data(tmp_path):
    from dataclasses import dataclass

    @dataclass(frozen=True, eq=False)
    class Grammar:
        scale: np.ndarray

    def run_one(key, g):
        return {"u": np.asarray(jax.random.uniform(key, (3,))) * g.scale}

    path = tmp_path / "g.ckpt"
    key = jax.random.key(0)
    a = driver.run_independent(run_one, Grammar(np.ones(3)), key=key, num_chains=2, checkpoint=path)
    b = driver.run_independent(run_one, Grammar(np.full(3, 2.0)), key=key, num_chains=2, checkpoint=path)
    np.testing.assert_array_equal(b["u"], 2 * a["u"])


def test_run_independent_progress_off_when_not_a_terminal(capsys):
    data = {"scale": 1.0}
    driver.run_independent(_host_draws, data, key=jax.random.key(0), num_chains=2, description="pcfg-draws")
    assert "pcfg-draws" not in capsys.readouterr().err  # pytest's stderr is not a terminal
    driver.run_independent(_host_draws, data, key=jax.random.key(0), num_chains=2, description="pcfg-draws",
                           progress=True)
    assert "pcfg-draws" in capsys.readouterr().err


@pytest.mark.parametrize("num_chains", [0, -1, 2.0, True, "2"])
def test_run_independent_rejects_bad_num_chains(num_chains):
    with pytest.raises(ValueError, match="num_chains must be an integer >= 1"):
        driver.run_independent(_host_draws, {"scale": 1.0}, key=jax.random.key(0), num_chains=num_chains)


def test_run_independent_rejects_a_non_function():
    with pytest.raises(TypeError, match="run_one must be a function"):
        driver.run_independent("smc", {}, key=jax.random.key(0), num_chains=2)
