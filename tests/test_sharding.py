"""Rows sharded over devices (``data_shards``): a chain's training rows split over the devices of
its group, the mesh ``("chain", "data")``.  The sharded run draws the same trees as the unsharded
one (BART for 200 sweeps on Friedman #1, n = 2,000; CGM), floats to float32 round-off; bad
options are refused before anything compiles.

The tests run on the 4 CPU devices conftest asks for (``BDTREE_CPU_DEVICES=4``).  The four
sharded-equals-unsharded runs are in the slow job (``pytest -m slow``; ~1 min each on 2 cores);
the default run keeps the rows' layout on the data axis and the refused options.

Every test here compiles with XLA's default optimisation (``xla_optimized``, the build users get).
A row-sharded CGM program loaded from JAX's persistent compilation cache aborted the process on
this CPU (jax 0.10.2; 3 of 5 runs of this file's slow tests with a filled cache, 2 of 2 after a
first run had filled a fresh one; 0 of 4 compiled afresh), and once in CI, so :func:`run_chains`
compiles row-sharded CPU runs outside that cache (``driver.outside_compilation_cache``; tested
below) and these tests use the suite's cache like the others."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import bdtree_jax as bd
from bdtree_jax import driver
from bdtree_jax.kernels.bart import BARTConfig, bart
from bdtree_jax.problem.bart import build_bart_problem

pytestmark = pytest.mark.xla_optimized

#: Leaf values (BART's model scale: y rescaled to [-0.5, 0.5], leaf prior sd 0.018 with 200
#: trees) agree to this absolute tolerance; sigma to this relative one.  Sums over rows are added
#: in another order when sharded (per-shard partial sums, then an all-reduce): float32 round-off.
LEAF_ATOL = 1e-6
SIGMA_RTOL = 1e-5


def make_friedman(n, n_features=10, seed=0):
    """Friedman #1 (benchmarks/bart_speed.py's generator): ``X ~ U[0,1]^(n, F)``,
    ``y = f(X) + N(0, 1)``."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, n_features))
    f = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    return X, f + rng.standard_normal(n)


@pytest.fixture(scope="module")
def friedman():
    return make_friedman(2000)


def _same_trees(a, b):
    for name in ("is_split", "feature", "cut"):
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        assert x.shape == y.shape and x.dtype == y.dtype
        differ = np.flatnonzero(~(x == y).reshape(x.shape[0] * x.shape[1], -1).all(axis=1))
        assert differ.size == 0, f"{name} differs first at draw {differ[0]} (chain x draw, flattened)"


def test_four_devices():
    assert len(jax.devices()) == 4, "conftest asks for 4 CPU devices (BDTREE_CPU_DEVICES=4)"


# --- BART ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_bart_rows_sharded_four_ways_give_the_unsharded_trees(friedman):
    """200 grow-prune sweeps of 200 trees, every sweep kept: the same trees in every draw, leaf
    values and sigma to float32 round-off."""
    X, y = friedman
    kw = dict(num_trees=200, tree_sampler="grow-prune", num_warmup=0, num_samples=200, num_chains=1, seed=3)
    plain = bd.BARTRegressor(**kw).fit(X, y).posterior_
    sharded = bd.BARTRegressor(**kw, data_shards=4).fit(X, y).posterior_
    assert sharded.info["data_shards"] == 4 and "data_shards" not in plain.info
    assert plain.trees.is_split.shape == (1, 200, 200, 63)
    _same_trees(plain.trees, sharded.trees)
    np.testing.assert_allclose(sharded.leaf_values, plain.leaf_values, rtol=0, atol=LEAF_ATOL)
    np.testing.assert_allclose(sharded.stats["sigma"], plain.stats["sigma"], rtol=SIGMA_RTOL)
    assert np.mean(plain.stats["accepted"]) > 0.05  # the trees move: the comparison has teeth


def test_bart_state_rows_live_on_the_data_axis(friedman):
    """The run is sharded, not replicated: the rows' leaves (M trees x n rows), the fit and the
    binned inputs each hold n / 4 rows per device."""
    X, y = friedman
    problem = build_bart_problem(X[:400], y[:400], n_trees=10, max_depth=3)
    config = BARTConfig(10, 3, "grow-prune")
    _, states = driver.run_chains(bart(config), problem.data, key=jax.random.key(0), num_chains=1,
                                  num_iterations=3, data_shards=4)
    leaf_id, fit = states.trees.leaf_id, states.fit
    assert leaf_id.shape == (1, 10, 400) and leaf_id.sharding.spec == P("chain", None, "data")
    assert {s.data.shape for s in leaf_id.addressable_shards} == {(1, 10, 100)}
    assert fit.sharding.spec == P("chain", "data") and {s.data.shape for s in fit.addressable_shards} == {(1, 100)}
    assert states.sigma2.sharding.spec == P("chain")  # scalars: replicated over the data axis
    specs = driver.row_specs(problem.data, 400)
    assert specs.tree_data.bins == P("data", None) and specs.y == P("data")
    assert specs.tree_data.split_prob == P(None)  # (N,) a table: replicated


@pytest.mark.slow
def test_bart_probit_latents_do_not_depend_on_the_sharding(friedman):
    """Probit BART draws one latent per row every sweep (jax's partitionable threefry: the same
    numbers whatever the sharding); 2 chains in 2 device groups of 2 row shards."""
    X, y = friedman
    X, labels = X[:1000], (y[:1000] > np.median(y)).astype(int)
    kw = dict(num_trees=20, num_warmup=0, num_samples=40, num_chains=2, seed=1)
    plain = bd.BARTClassifier(**kw).fit(X, labels).posterior_
    sharded = bd.BARTClassifier(**kw, data_shards=2).fit(X, labels).posterior_
    _same_trees(plain.trees, sharded.trees)
    np.testing.assert_allclose(sharded.leaf_values, plain.leaf_values, rtol=0, atol=LEAF_ATOL)
    np.testing.assert_allclose(sharded.stats["fit_mean"], plain.stats["fit_mean"], rtol=0, atol=1e-5)


# --- single-tree samplers ------------------------------------------------------------------------


@pytest.mark.slow
def test_cgm_rows_sharded_four_ways_give_the_unsharded_trees(friedman):
    """CGM (regression, 4 chains in one device group of 4): same trees every draw, the
    log-likelihood to float32 round-off."""
    X, y = friedman
    kw = dict(task="regression", method="cgm", num_warmup=200, num_samples=200, num_chains=4, seed=3)
    plain = bd.sample(X, y, **kw)
    sharded = bd.sample(X, y, **kw, data_shards=4)
    _same_trees(plain.trees, sharded.trees)
    np.testing.assert_allclose(sharded.stats["log_lik"], plain.stats["log_lik"], rtol=1e-5)
    assert len(np.unique(plain.trees.is_split.reshape(-1, plain.trees.is_split.shape[-1]), axis=0)) > 10


@pytest.mark.slow
def test_cgm_classifier_two_chain_groups_of_two_shards(friedman):
    """The estimator with 2 chain groups x 2 row shards (shard_map over the chains, rows split
    within each group) equals the unsharded fit."""
    X, y = friedman
    labels = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    kw = dict(method="cgm", max_depth=5, num_warmup=200, num_samples=200, num_chains=4, seed=2)
    plain = bd.BayesianTreeClassifier(**kw).fit(X, labels)
    sharded = bd.BayesianTreeClassifier(**kw, data_shards=2).fit(X, labels)
    _same_trees(plain.posterior_.trees, sharded.posterior_.trees)
    np.testing.assert_allclose(sharded.predict_proba(X[:50]), plain.predict_proba(X[:50]), rtol=0, atol=1e-5)


# --- options --------------------------------------------------------------------------------------


def test_plan_groups_devices_by_data_shards():
    plan = driver.plan_chains(4, data_shards=2)
    assert plan.data_shards == 2 and plan.groups == 2 and plan.devices == tuple(jax.devices())
    assert plan.mesh().shape == {"chain": 2, "data": 2}
    assert driver.plan_chains(3, data_shards=2).groups == 1  # the most groups dividing 3 chains
    assert driver.plan_chains(2, data_shards=4).devices == tuple(jax.devices())
    assert driver.plan_chains(4) == driver.ChainPlan(tuple(jax.devices()), "loop")  # data_shards=1


@pytest.mark.parametrize("value, match", [
    (3, r"data_shards=3 must divide the number of devices \(4\)"),
    (0, "data_shards must be an integer >= 1"),
    (2.0, "data_shards must be an integer >= 1"),
    (True, "data_shards must be an integer >= 1"),
])
def test_bad_data_shards_are_refused_before_compiling(friedman, value, match):
    X, y = friedman
    before = driver.trace_count()
    with pytest.raises(ValueError, match="sample: " + match):
        bd.sample(X[:100], y[:100], task="regression", num_warmup=5, num_samples=5, data_shards=value)
    with pytest.raises(ValueError, match="BARTRegressor: " + match):
        bd.BARTRegressor(num_trees=5, num_warmup=1, num_samples=1, data_shards=value).fit(X[:100], y[:100])
    assert driver.trace_count() == before


def test_rows_not_divisible_by_data_shards_are_refused(friedman):
    X, y = friedman
    before = driver.trace_count()
    with pytest.raises(ValueError, match=r"sample: data_shards=4 must divide the number of training rows \(n=102\)"):
        bd.sample(X[:102], y[:102], task="regression", num_warmup=5, num_samples=5, data_shards=4)
    with pytest.raises(ValueError, match=r"BARTRegressor: data_shards=4 must divide .* \(n=3\)"):
        bd.BARTRegressor(num_trees=5, num_warmup=1, num_samples=1, data_shards=4).fit(X[:3], y[:3])  # more shards than rows
    with pytest.raises(ValueError, match=r"BayesianTreeClassifier: data_shards=2 must divide .* \(n=101\)"):
        bd.BayesianTreeClassifier(num_warmup=5, num_samples=5, data_shards=2).fit(X[:101], y[:101] > 10)
    assert driver.trace_count() == before


@pytest.mark.parametrize("method", ["smc", "pcfg"])
def test_methods_without_chains_refuse_data_shards(friedman, method):
    X, y = friedman
    with pytest.raises(ValueError, match=f"sample: data_shards applies to the MCMC methods .*method='{method}'"):
        bd.sample(X[:40], y[:40] > 10, method=method, num_samples=5, data_shards=2)


def test_run_chains_refuses_data_without_rows():
    algorithm = bart(BARTConfig(2, 2))
    with pytest.raises(ValueError, match="data_shards=2: the data has no row axis"):
        driver.run_chains(algorithm, {"w": np.zeros(3)}, key=jax.random.key(0), num_chains=1, num_iterations=1,
                          data_shards=2)


_CACHE_PROBE = """
import json, logging, os, sys
import jax, numpy as np
import bdtree_jax as bd
from bdtree_jax import driver

jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
hits = []  # the block programs JAX read from its persistent cache


class BlockHits(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith("Persistent compilation cache hit for 'jit_block"):
            hits.append(record.getMessage())


logging.getLogger("jax._src.compiler").addHandler(BlockHits(logging.DEBUG))
logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)
rng = np.random.default_rng(0)
X = rng.uniform(size=(64, 2))
y = (X[:, 0] > 0.5).astype(int)
library_switch = driver.outside_compilation_cache
result = {}
# No run executes a block program loaded from the cache: that is what can abort the process (the
# switch's reason), so the planted error writes the program and only the runs with the switch follow.
for name, switch in [("with the switch", True), ("without it", False), ("with it again", True)]:
    if not switch:  # the planted error: run_chains without its switch
        driver.outside_compilation_cache = lambda active=True: library_switch(False)
    else:
        driver.outside_compilation_cache = library_switch
    driver.clear_compiled()
    os.makedirs(sys.argv[1], exist_ok=True)
    before, files = len(hits), set(os.listdir(sys.argv[1]))
    bd.sample(X, y, method="cgm", num_warmup=0, num_samples=20, num_chains=2, seed=0, data_shards=2)
    result[name] = dict(hits=len(hits) - before, new_block_files=sum(
        f.startswith("jit_block") for f in set(os.listdir(sys.argv[1])) - files))
print(json.dumps(result))
"""


@pytest.mark.slow
def test_row_sharded_cpu_runs_neither_read_nor_write_the_compilation_cache(tmp_path):
    """In a fresh process with JAX's persistent cache on: a row-sharded CGM run with the driver's
    switch writes no block program to the empty cache; the same run whose driver skips
    ``outside_compilation_cache`` (the planted error) writes its block program; the run with the
    switch once more reads nothing although the cache now holds that program."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, JAX_PLATFORMS="cpu", BDTREE_CPU_DEVICES="4")
    out = subprocess.run([sys.executable, "-c", _CACHE_PROBE, str(tmp_path / "cache")], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["with the switch"] == {"hits": 0, "new_block_files": 0}, result
    assert result["without it"]["new_block_files"] >= 1, result
    assert result["with it again"] == {"hits": 0, "new_block_files": 0}, result
