"""A ``bart`` site in a NumPyro model under ``TreeGibbs`` against ``bd.BARTRegressor`` (issue #27):
iterations per second on Friedman #1 (``n = 1000`` rows, 10 features, sigma 1, 200 trees, one chain),
in one process, side by side.

Rows:

* ``BARTRegressor``: the estimator (grow-prune sweep, sigma from its inverse-gamma conditional);
* ``TreeGibbs, fixed sigma``: ``y ~ Normal(bart(X, y=y), 1.0)``, no continuous site (the inner NUTS
  is not run);
* ``TreeGibbs + NUTS sigma``: ``y ~ Normal(bart(X, y=y), sigma)``, ``sigma ~ HalfNormal(5)`` updated
  by NUTS each iteration.

Timing excludes compilation.  ``TreeGibbs``: the kernel's ``sample`` in a jitted ``lax.scan`` of
``--block`` iterations that also stacks every iteration's sample values, as ``MCMC``'s loop
collects them (compiled by a first call), then ``T / block`` calls timed, ``rate = T / t`` (every
``MCMC.run`` compiles its loop again, 10-50 s here, so timing whole runs would mostly time the
compiler).  ``BARTRegressor``: fits of ``T`` and ``2T`` iterations (``num_warmup=0``) after one
that compiles its block of sweeps, ``rate = T / (t(2T) - t(T))``.  The test RMSE of the posterior mean of ``f`` (1000 + 1000 iterations,
500 test rows) is reported for each.  The 1-minute load average is recorded (the machine is shared).

Usage::

    python benchmarks/numpyro_bart_speed.py            # T = 200, writes benchmarks/results/numpyro_bart_speed.{md,json}
    python benchmarks/numpyro_bart_speed.py --T 100 --n-trees 50 --out /tmp/quick
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS

os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
import bdtree_jax as bd
from bdtree_jax.numpyro import TreeGibbs, bart


def friedman(n, seed, sigma=1.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 10))
    f = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    return X, f, f + sigma * rng.normal(size=n)


def models(n_trees):
    def fixed_sigma(X, y=None, y_train=None):
        f = bart("f", X, num_trees=n_trees, y=y_train)
        numpyro.sample("y", dist.Normal(f, 1.0), obs=y)

    def nuts_sigma(X, y=None, y_train=None):
        f = bart("f", X, num_trees=n_trees, y=y_train)
        sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
        numpyro.sample("y", dist.Normal(f, sigma), obs=y)

    return {"TreeGibbs, fixed sigma": fixed_sigma, "TreeGibbs + NUTS sigma": nuts_sigma}


def time_mcmc(model, X, y, T, block, seed=0):
    kernel = TreeGibbs(NUTS(model))
    kwargs = dict(y_train=y)
    state = kernel.init(jax.random.PRNGKey(seed), 0, None, (X, y), kwargs)

    @jax.jit
    def run_block(state):
        def step(s, _):
            s = kernel.sample(s, (X, y), kwargs)
            return s, s.z

        return jax.lax.scan(step, state, None, length=block)

    state, _ = jax.block_until_ready(run_block(state))  # compile
    t0 = time.perf_counter()
    for _ in range(max(T // block, 1)):
        state, z = run_block(state)
    jax.block_until_ready(z)
    elapsed = time.perf_counter() - t0
    return max(T // block, 1) * block / elapsed, {T: elapsed}


def time_estimator(n_trees, X, y, T):
    def fit(length):
        est = bd.BARTRegressor(n_trees, num_warmup=0, num_samples=length, num_chains=1, seed=0)
        t0 = time.perf_counter()
        est.fit(X, y)
        return time.perf_counter() - t0

    fit(T)  # compile
    out = {T: fit(T), 2 * T: fit(2 * T)}
    return T / (out[2 * T] - out[T]), out


def rmse_mcmc(model, X, y, X_test, f_test, iters):
    mcmc = MCMC(TreeGibbs(NUTS(model)), num_warmup=iters, num_samples=iters, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), X, y, y_train=y)
    pred = numpyro.infer.Predictive(model, mcmc.get_samples(), return_sites=["f"])(
        jax.random.PRNGKey(2), X_test, y_train=y)["f"]
    return float(np.sqrt(np.mean((np.asarray(pred).mean(0) - f_test) ** 2)))


def rmse_estimator(n_trees, X, y, X_test, f_test, iters):
    est = bd.BARTRegressor(n_trees, num_warmup=iters, num_samples=iters, num_chains=1, seed=1).fit(X, y)
    return float(np.sqrt(np.mean((est.predict(X_test) - f_test) ** 2)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--n-trees", type=int, default=200)
    ap.add_argument("--T", type=int, default=200, help="timed run lengths T and 2T")
    ap.add_argument("--block", type=int, default=50, help="TreeGibbs iterations per jitted block")
    ap.add_argument("--rmse-iters", type=int, default=1000, help="warm-up = kept iterations for the RMSE fits")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "numpyro_bart_speed"))
    args = ap.parse_args()

    X, _, y = friedman(args.n, 0)
    X_test, f_test, _ = friedman(500, 1)
    rows = []
    rate, t = time_estimator(args.n_trees, X, y, args.T)
    rows.append(dict(row="BARTRegressor", its_per_s=rate, times=t, load=os.getloadavg()[0],
                     rmse=rmse_estimator(args.n_trees, X, y, X_test, f_test, args.rmse_iters)))
    for name, model in models(args.n_trees).items():
        rate, t = time_mcmc(model, X, y, args.T, args.block)
        rows.append(dict(row=name, its_per_s=rate, times=t, load=os.getloadavg()[0],
                         rmse=rmse_mcmc(model, X, y, X_test, f_test, args.rmse_iters)))
    base = rows[0]["its_per_s"]
    lines = [f"# A `bart` site under TreeGibbs vs BARTRegressor (Friedman n={args.n}, {args.n_trees} trees, 1 chain)",
             "", f"`python benchmarks/numpyro_bart_speed.py --T {args.T}` on {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} CPUs, jax {jax.__version__}, numpyro {numpyro.__version__}.", "",
             "| row | iterations/s | ratio to BARTRegressor | timed s | test RMSE of f | load |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['row']} | {r['its_per_s']:.1f} | {r['its_per_s'] / base:.2f} | "
                     f"{', '.join(f'{v:.1f}' for v in r['times'].values())} | {r['rmse']:.3f} | {r['load']:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out + ".md").write_text(text)
    Path(args.out + ".json").write_text(json.dumps(dict(args=vars(args), rows=rows), indent=1, default=str))


if __name__ == "__main__":
    main()
