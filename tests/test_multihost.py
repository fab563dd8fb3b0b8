"""Past one machine on JAX's own multi-host runtime: 2 processes on this machine (CPU backend,
gloo collectives, 2 CPU devices each) joined by ``jax.distributed.initialize`` run one mesh
spanning both, and their draws equal the 1-process run's.

* BART with the rows sharded 4 ways over both processes' devices (each process holds 2 of
  the 4 row shards; the per-node sums are all-reduced across the processes);
* CGM with 2 chains and ``data_shards=2``: one chain group per process.

Every process gets the full traces.  The workers are this file run as a script
(``python test_multihost.py worker <process_id> <port> <out>``); each has a timeout and its
output is shown when it fails.  In the slow job (``pytest -m slow``): ~45 s on 2 cores."""

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

N_ROWS = 400
BART = dict(num_trees=10, max_depth=3, num_warmup=0, num_samples=12, num_chains=1, seed=5)
CGM = dict(task="regression", num_warmup=30, num_samples=30, num_chains=2, seed=2)
TIMEOUT = 150  # seconds per worker (they take ~15 s on 2 idle cores)


def _data():
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(N_ROWS, 5))
    y = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    return X, y + rng.standard_normal(N_ROWS)


def _fits(bd, bart_shards: int, cgm_shards: int) -> dict:
    X, y = _data()
    bart = bd.BARTRegressor(**BART, data_shards=bart_shards).fit(X, y).posterior_
    cgm = bd.sample(X, y, method=bd.CGM(), prior=bd.TreePrior(max_depth=4), **CGM, data_shards=cgm_shards)
    return dict(bart_is_split=bart.trees.is_split, bart_feature=bart.trees.feature, bart_cut=bart.trees.cut,
                bart_leaf_values=bart.leaf_values, bart_sigma=bart.stats["sigma"], cgm_is_split=cgm.trees.is_split,
                cgm_feature=cgm.trees.feature, cgm_cut=cgm.trees.cut, cgm_log_lik=cgm.stats["log_lik"])


def worker(process_id: int, port: int, out: str) -> None:
    """One of the 2 processes: 2 CPU devices, gloo collectives, then the sharded fits."""
    import jax

    jax.config.update("jax_num_cpu_devices", 2)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # before anything starts JAX's backend (importing bdtree_jax does)
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process_id,
                               initialization_timeout=60)
    import bdtree_jax as bd
    assert jax.process_count() == 2 and len(jax.devices()) == 4 and len(jax.local_devices()) == 2
    results = _fits(bd, bart_shards=4, cgm_shards=2)
    np.savez(out, **results)
    jax.distributed.shutdown()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_two_processes_give_the_one_process_draws(tmp_path):
    import jax

    import bdtree_jax as bd

    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "BDTREE_CPU_DEVICES")}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(
        os.path.abspath(bd.__file__))), env.get("PYTHONPATH")])))
    outs = [tmp_path / f"process{i}.npz" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", str(i), str(port), str(outs[i])],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    try:
        # the reference while the workers run: this process's 4 CPU devices, rows not sharded
        assert len(jax.devices()) == 4
        expected = _fits(bd, bart_shards=1, cgm_shards=1)
        logs = [p.communicate(timeout=TIMEOUT)[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"a worker timed out after {TIMEOUT} s:\n{_show([p.communicate()[0] for p in procs])}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode for p in procs):
        pytest.fail(f"workers exited with {[p.returncode for p in procs]}:\n{_show(logs)}")

    for out in outs:  # every process gets the full traces
        got = dict(np.load(out))
        assert set(got) == set(expected)
        for name in ("bart_is_split", "bart_feature", "bart_cut", "cgm_is_split", "cgm_feature", "cgm_cut"):
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
        np.testing.assert_allclose(got["bart_leaf_values"], expected["bart_leaf_values"], rtol=0, atol=1e-6)
        np.testing.assert_allclose(got["bart_sigma"], expected["bart_sigma"], rtol=1e-5)
        np.testing.assert_allclose(got["cgm_log_lik"], expected["cgm_log_lik"], rtol=1e-5)
    assert expected["bart_is_split"].shape == (1, 12, 10, 15) and expected["cgm_is_split"].shape[:2] == (2, 30)


def _show(logs) -> str:
    return "\n".join(f"--- process {i} ---\n{log[-4000:]}" for i, log in enumerate(logs))


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "worker":
    worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
