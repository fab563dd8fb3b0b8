"""CPU time per sweep of every model BART's grow-prune scan serves, two checkouts side by side.

For a refactor of the sweep (kernels/bart_grow_prune.py ``grow_prune_scan``) on a shared machine:
wall-clock rates swing with the load, so each case is timed by ``time.process_time`` with XLA's
CPU backend on one thread (``XLA_FLAGS``), which counts this process's work only.  Cases: plain BART
(``BARTRegressor``'s sweep, n = 1000, 200 trees), monotone BART (5 of 10 features nondecreasing,
50 trees), log-linear (Poisson) BART, a variance forest (20 variance trees) and 3-class BART
(n = 5000, 50 trees), all on Friedman #1.  Each checkout runs in a fresh subprocess
(``PYTHONPATH``), the order alternating by round (before, after, after, before, ...); each case
compiles a scan of ``--sweeps`` sweeps, warms up 3 runs and reports the median of 3 timed runs.

    python benchmarks/grow_prune_ab.py --before DIR [--after DIR] [--rounds 4]

Prints a markdown table: the median over rounds of CPU ms per sweep and the ratio after/before.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _child(sweeps: int) -> None:
    import functools

    import jax
    import numpy as np

    from bdtree_jax.kernels import bart, bart_monotone, bart_poisson, bart_variance
    from bdtree_jax.kernels import bart_multiclass as bm
    from bdtree_jax.problem.bart import build_bart_problem
    from bdtree_jax.problem.bart_multiclass import build_bart_multiclass_problem
    from bdtree_jax.problem.bart_poisson import build_bart_poisson_problem
    from bdtree_jax.problem.bart_variance import build_bart_variance_problem

    rng = np.random.default_rng(0)
    res = {}

    def friedman(n):
        X = rng.uniform(size=(n, 10))
        return X, 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]

    def case(name, init, step, data, config):
        run = jax.jit(lambda s, ks: jax.lax.scan(lambda s, k: (step(k, s, data, config)[0], None), s, ks)[0])
        state = init(None, data, config)
        for i in range(3):
            state = jax.block_until_ready(run(state, jax.random.split(jax.random.key(100 + i), sweeps)))
        ts = []
        for r in range(3):
            keys = jax.random.split(jax.random.key(1000 + r), sweeps)
            t0 = time.process_time()
            jax.block_until_ready(run(state, keys))
            ts.append((time.process_time() - t0) / sweeps)
        res[name] = float(np.median(ts))

    X, f = friedman(1000)
    p = build_bart_problem(X, f + rng.normal(size=1000), n_trees=200)
    case("plain, n=1000, 200 trees", bart.init, bart.step, p.data, bart.BARTConfig(200))
    case("monotone, n=1000, 50 trees", bart.init,
         functools.partial(bart_monotone.step, monotone=(1,) * 5 + (0,) * 5), p.data, bart.BARTConfig(50))
    X, f = friedman(5000)
    pp = build_bart_poisson_problem(X, rng.poisson(np.exp(f / 10.0)), n_trees=50)
    case("Poisson, n=5000, 50 trees", bart_poisson.init, bart_poisson.step, pp.data, bart_poisson.poisson_config(50))
    y = f + (0.5 + 4.0 * X[:, 5] ** 2) * rng.normal(size=5000)
    pv = build_bart_variance_problem(X, y, variance_trees=20, n_trees=50)
    case("variance, n=5000, 50 + 20 trees", bart_variance.init, bart_variance.step, pv.variance_data(),
         bart_variance.VarianceConfig.of(bart.BARTConfig(50, sample_sigma=False), 20))
    pm = build_bart_multiclass_problem(X, (f > 12).astype(int) + (f > 18).astype(int), n_trees=50)
    case("3 classes, n=5000, 50 trees", bm.init, bm.step, pm.data, bm.multiclass_config(50))
    print(json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--sweeps", type=int, default=20)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(args.sweeps)
    order = [("before", args.before), ("after", args.after)]
    res = {"before": [], "after": []}
    load0 = os.getloadavg()[0]
    for r in range(args.rounds):
        for tag, path in order if r % 2 == 0 else order[::-1]:
            env = dict(os.environ, PYTHONPATH=str(path), JAX_PLATFORMS="cpu",
                       XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
            out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--before", ".", "--child",
                                  "--sweeps", str(args.sweeps)], env=env, cwd=tempfile.gettempdir(),
                                 capture_output=True, text=True)
            if out.returncode:
                raise RuntimeError(f"{path} failed:\n{out.stderr[-3000:]}")
            res[tag].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{os.cpu_count()} CPUs, 1-min load {load0:.1f} before, {os.getloadavg()[0]:.1f} after; "
          f"median of {args.rounds} alternating rounds\n")
    print("| case | before CPU ms / sweep | after CPU ms / sweep | after / before |\n|---|---:|---:|---:|")
    for name in res["before"][0]:
        b = statistics.median(x[name] for x in res["before"])
        a = statistics.median(x[name] for x in res["after"])
        print(f"| {name} | {1e3 * b:.2f} | {1e3 * a:.2f} | {a / b:.3f} |")


if __name__ == "__main__":
    main()
