"""Issue #28: the padded heap's depth cap and the run-memory check, both before compiling.

* ``max_depth=30`` is refused with a ``ValueError`` naming ``max_depth`` and the cap, in under
  5 s and without allocating 1 GB, for every single-tree sampler, through :func:`bd.sample` and
  the estimators (measured in a subprocess: its peak RSS before and after each call, with its
  address space limited so that an attempted allocation of the padded heap fails loudly instead
  of swapping the machine);
* a run whose estimated memory exceeds what is available (the available memory mocked to a
  small value) raises a ``ValueError`` naming the arguments that drive the estimate, before
  anything is compiled; ``BDTREE_MEMORY_CHECK=0`` turns the check off;
* the estimate's count of a kept draw is the posterior's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import bdtree_jax as bd
from bdtree_jax import driver
from bdtree_jax.methods import RunOptions, _memory
from bdtree_jax.problem import build_problem
from bdtree_jax.tree import MAX_DEPTH

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.no_compile_cache  # memory is measured: compile afresh

SAMPLERS = ("cgm", "pg", "wu", "smc", "hmc-df")

_CAP_SCRIPT = textwrap.dedent("""
    import json, resource, sys, time
    import bdtree_jax as bd
    X, y = bd.datasets.load("iris")
    # no call may allocate the padded heap: 2 GB more address space than now, then MemoryError
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + 2 * 2**30, resource.RLIM_INFINITY))
    calls = {
        "sample": lambda m: bd.sample(X, y, method=m, max_depth=30, num_warmup=10, num_samples=10, num_chains=1),
        "prior": lambda m: bd.sample(X, y, method=m, prior=bd.TreePrior(max_depth=30), num_warmup=10,
                                     num_samples=10, num_chains=1),
        "classifier": lambda m: bd.BayesianTreeClassifier(m, max_depth=30, num_warmup=10, num_samples=10,
                                                          num_chains=1).fit(X, y),
    }
    out = []
    for method in sys.argv[1:]:
        for entry, call in calls.items():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            t = time.perf_counter()
            try:
                call(method)
                error = None
            except Exception as e:  # the test checks the type
                error = (type(e).__name__, str(e))
            out.append(dict(method=method, entry=entry, seconds=time.perf_counter() - t, error=error,
                            grew=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before))
    print("@@" + json.dumps(out))
""")


@pytest.fixture(scope="module")
def cap_results():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", _CAP_SCRIPT, *SAMPLERS],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][2:])


@pytest.mark.parametrize("method", SAMPLERS)
def test_max_depth_30_is_refused_in_time_without_allocating(cap_results, method):
    rows = [r for r in cap_results if r["method"] == method]
    assert len(rows) == 3
    for r in rows:
        assert r["error"] is not None and r["error"][0] == "ValueError", r
        message = r["error"][1]
        assert "max_depth=30" in message and f"cap of {MAX_DEPTH}" in message and "padded heap" in message, message
        assert r["seconds"] < 5.0, r
        assert r["grew"] < 2**30, r


def test_max_depth_cap_is_the_single_tree_and_bart_cap():
    from bdtree_jax.kernels.bart import MAX_DEPTH as BART_MAX_DEPTH

    assert MAX_DEPTH == BART_MAX_DEPTH == 14
    bd.TreePrior(max_depth=MAX_DEPTH)  # the cap itself is allowed
    with pytest.raises(ValueError, match=r"max_depth=15 is over the cap of 14"):
        bd.TreePrior(max_depth=MAX_DEPTH + 1)


@pytest.fixture
def tiny_memory(monkeypatch):
    """The host has 64 MiB available and there is no accelerator memory to compare with."""
    monkeypatch.setattr(_memory, "host_available_bytes", lambda: 64 * 2**20)
    monkeypatch.setattr(_memory, "device_available_bytes", lambda devices: None)
    monkeypatch.delenv(_memory.ENV_VAR, raising=False)


def _iris():
    return bd.datasets.load("iris")


def test_huge_run_raises_memory_error_naming_the_arguments_before_compiling(tiny_memory):
    X, y = _iris()
    traced = driver.trace_count()
    with pytest.raises(ValueError) as info:
        bd.sample(X, y, method="cgm", prior=bd.TreePrior(max_depth=12), num_warmup=1000, num_samples=100_000,
                  num_chains=8)
    message = str(info.value)
    assert message.startswith("sample: this run needs about")
    for name in ("num_samples=100000", "num_chains=8", "max_depth=12", "64 MiB", _memory.ENV_VAR + "=0"):
        assert name in message, message
    assert "Lower num_samples" in message
    assert driver.trace_count() == traced  # nothing compiled


def test_huge_run_through_the_estimator_and_particles(tiny_memory):
    X, y = _iris()
    with pytest.raises(ValueError, match=r"BayesianTreeClassifier: this run needs about .*num_samples=50000"):
        bd.BayesianTreeClassifier(max_depth=12, num_samples=50_000, num_chains=4).fit(X, y)
    with pytest.raises(ValueError, match=r"num_particles=5000"):
        bd.sample(X, y, method=bd.SMC(num_particles=5000), prior=bd.TreePrior(max_depth=12), num_samples=10,
                  num_chains=2)


def test_override_turns_the_check_off(tiny_memory, monkeypatch):
    X, y = _iris()
    method = bd.CGM()
    problem = build_problem(X, y, prior=bd.TreePrior(max_depth=12))
    options = RunOptions(num_samples=100_000, num_chains=8)
    with pytest.raises(ValueError, match="this run needs"):
        _memory.check_run(method, problem, options)
    monkeypatch.setenv(_memory.ENV_VAR, "0")
    _memory.check_run(method, problem, options)  # no error


def test_estimate_counts_a_kept_draw_as_the_posterior_does():
    """A normal run passes the check (the machine's real available memory) and the estimate's
    bytes per draw are the posterior's (plus at most 16 bytes of per-draw statistics)."""
    X, y = _iris()
    problem = build_problem(X, y, prior=bd.TreePrior(max_depth=3))
    # the run of test_estimators.py's fitted classifier (same data and options): the same programs
    options = RunOptions(num_warmup=100, num_samples=200, num_chains=2)
    post = bd.CGM().run(problem, options)
    parts = {p.what.split(" (")[0]: p for p in _memory.estimate_run(bd.CGM(), problem, options)}
    per_draw = parts["the posterior's copy of the kept draws"].nbytes / (2 * 200)
    assert post.nbytes_per_draw <= per_draw <= post.nbytes_per_draw + 16
    assert parts["recorded trace"].nbytes == per_draw * 2 * (100 + 200)


def test_bart_run_is_checked_too(tiny_memory):
    X, y = bd.datasets.make_cgm(200, seed=0)
    traced = driver.trace_count()
    with pytest.raises(ValueError, match=r"BARTRegressor: this run needs about .*num_trees=2000.*BDTREE_MEMORY_CHECK=0"):
        bd.BARTRegressor(num_trees=2000, max_depth=10, num_samples=5000).fit(X, y)
    assert driver.trace_count() == traced


def test_accelerator_memory_is_compared_with_the_device_parts(monkeypatch):
    """With an accelerator (mocked: 32 MiB left on the device, the host roomy) the parts that live
    on the device are compared with the device's memory, and the message says so."""
    X, y = _iris()
    problem = build_problem(X, y, prior=bd.TreePrior(max_depth=12))
    monkeypatch.setattr(_memory, "host_available_bytes", lambda: 2**40)
    monkeypatch.setattr(_memory, "device_available_bytes", lambda devices: 32 * 2**20)
    monkeypatch.delenv(_memory.ENV_VAR, raising=False)
    with pytest.raises(ValueError, match=r"of accelerator memory available.*chain states"):
        _memory.check_run(bd.CGM(), problem, RunOptions(num_samples=100, num_chains=64))
    monkeypatch.setattr(_memory, "device_available_bytes", lambda devices: 2**40)
    _memory.check_run(bd.CGM(), problem, RunOptions(num_samples=100, num_chains=64))


def test_estimate_counts_the_data_arrays():
    """Issue #38: the estimate counts the problem's data arrays (6c1851c left them out): for 20,000
    rows of 8 features with 60 levels each and ``min_leaf_size=2`` (so ``bin_onehot`` ``(n, F, 60)``
    int32 is kept: 38 MB) the estimate's parts add up to at least the bytes of every array the
    problem holds, and its data parts to at most 1.25 times them (the stated factor: they are the
    arrays' own ``nbytes``, one device copy per CPU device that runs chains, here one)."""
    import jax
    import numpy as np

    from bdtree_jax.problem.bart import build_bart_problem

    rng = np.random.default_rng(0)
    n, F = 20_000, 8
    X = rng.integers(0, 60, size=(n, F)).astype(float)
    y = np.where(X[:, 0] > 30, "a", "b")
    problem = build_problem(X, y, prior=bd.TreePrior(max_depth=3, min_leaf_size=2))
    assert problem.data.bin_onehot is not None and problem.data.bin_onehot.shape == (n, F, 60)
    real = sum(np.asarray(a).nbytes for a in jax.tree.leaves(problem.data))  # every array the samplers read
    real += problem.train_bins.nbytes + problem.train_stats.nbytes
    assert real > n * F * 60 * 4
    parts = _memory.estimate_run(bd.CGM(), problem, RunOptions(num_warmup=10, num_samples=10, num_chains=1))
    assert sum(p.nbytes for p in parts) >= real
    data = sum(p.nbytes for p in parts if p.what.startswith(("data arrays", "training codes")))
    assert real <= data <= 1.25 * real
    assert parts[0].what.startswith("data arrays")  # the largest part here
    # BART: its TreeData and residual arrays
    bart = build_bart_problem(X, rng.normal(size=n), n_trees=10)
    real = sum(np.asarray(a).nbytes for a in jax.tree.leaves(bart.data)) + bart.train_bins.nbytes
    config = bd.kernels.bart.BARTConfig(n_trees=10)
    parts = _memory.estimate_bart(config, bart, 1, 10, 10, 10)
    data = sum(p.nbytes for p in parts if p.what.startswith(("data arrays", "training codes")))
    assert real <= data <= 1.25 * real
