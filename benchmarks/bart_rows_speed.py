"""Sweep time of the BART models whose leaf rows are not ``[1, r, r**2]`` -- log-linear BART for
counts and ``BARTRegressor(variance_trees=J)`` -- against a plain BART sweep, before and after the
two-pass grow-prune sweep served them (kernels/bart_grow_prune.py ``rows_sweep``), and before and
after their gamma leaves were drawn by ``_gamma.log_gamma_given`` (before: ``jax.random.loggamma``
with one key per tree, :func:`jax_loggamma_leaves`).

One process, the cases interleaved (each repeat times every case once, the medians reported) so
that a loaded machine slows them alike: plain BART's grow-prune sweep; the model by the single-tree
CGM kernel per tree restricted to grow and prune (``bart._kernel_sweep``, the first path); the
model by ``rows_sweep`` with ``jax.random.loggamma`` leaves (the second); the model by
``rows_sweep`` (the path now).  Data: Friedman #1 as benchmarks/bart_poisson.py
(counts ``Poisson(exp(f / 10))``) and benchmarks/bart_variance.py (``sigma(x) = 0.5 + 4 x5**2``).

    python benchmarks/bart_rows_speed.py --n 10000 --trees 200 --variance-trees 50

Prints a markdown table (seconds per sweep and the ratio to plain BART).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import time

import jax
import numpy as np

from bdtree_jax import likelihoods
from bdtree_jax.kernels import bart, bart_poisson, bart_variance
from bdtree_jax.problem.bart import build_bart_problem
from bdtree_jax.problem.bart_poisson import build_bart_poisson_problem
from bdtree_jax.problem.bart_variance import build_bart_variance_problem


def _kernel_path(state, data, total, uniforms, leaf_draws, config, rows):
    """The path before: the single-tree CGM kernel per tree (what ``bart._backfit_rows`` ran)."""
    total, values, changed, trees = bart._kernel_sweep(state, data, None, total, None, uniforms, leaf_draws,
                                                       jax.numpy.zeros((config.n_trees,), jax.numpy.uint32), config,
                                                       rows=rows)
    return total, values, changed, trees, bart._can_split(trees, data)


@contextlib.contextmanager
def jax_loggamma_leaves():
    """Within it, programs traced draw the gamma leaves as before ``_gamma.log_gamma_given``:
    one PRNG key per tree in the sweep's draws and ``jax.random.loggamma`` of it in the loop."""
    saved_draw, lik = bart_poisson.draw, likelihoods.BARTLeafPoissonGamma
    saved_values = lik.draw_values

    def draw(key, config):
        draws = saved_draw(key, config)
        return draws._replace(normals=draws.normals.key)  # (M,) keys; the batch is left unused

    def draw_values(self, stats, key):
        shape, rate = self.leaf_posterior(stats)
        return jax.random.loggamma(key, shape) - jax.numpy.log(rate)

    bart_poisson.draw, lik.draw_values = draw, draw_values
    try:
        yield
    finally:
        bart_poisson.draw, lik.draw_values = saved_draw, saved_values


def _compiled(mod, config, data, kernel_path: bool, sweeps: int, jax_loggamma: bool = False):
    """A jitted run of ``sweeps`` sweeps (traced with the chosen path; with ``jax_loggamma`` the
    gamma leaves drawn as before, :func:`jax_loggamma_leaves`) and a warmed-up state."""
    saved = bart.rows_sweep
    if kernel_path:
        bart.rows_sweep = _kernel_path
    try:
        def run(state, keys):
            return jax.lax.scan(lambda s, k: (mod.step(k, s, data, config)[0], None), state, keys)[0]

        with jax_loggamma_leaves() if jax_loggamma else contextlib.nullcontext():
            run = jax.jit(run).lower(mod.init(None, data, config), jax.random.split(jax.random.key(0), sweeps)).compile()
    finally:
        bart.rows_sweep = saved
    state = mod.init(None, data, config)
    for i in range(50 // sweeps + 1):  # warm-up: trees of a typical size
        state = run(state, jax.random.split(jax.random.key(100 + i), sweeps))
    return run, jax.block_until_ready(state)


#: (kernel path, jax.random.loggamma leaves, label) of each model's cases
PATHS = [(True, False, "kernel sweep"), (False, True, "grow-prune sweep, jax.random.loggamma leaves"),
         (False, False, "grow-prune sweep (now)")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--trees", type=int, default=200)
    ap.add_argument("--variance-trees", type=int, default=50)
    ap.add_argument("--sweeps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--models", default="poisson,variance")
    args = ap.parse_args()
    n, M, J = args.n, args.trees, args.variance_trees
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(n, 10))
    f = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    cases = {}
    p = build_bart_problem(X, f + rng.normal(size=n), n_trees=M)
    cases["plain BART (grow-prune sweep)"] = _compiled(bart, bart.BARTConfig(M), p.data, False, args.sweeps)
    models = args.models.split(",")
    if "poisson" in models:
        p = build_bart_poisson_problem(X, rng.poisson(np.exp(f / 10.0)), n_trees=M)
        config = bart_poisson.poisson_config(M, incremental=False)
        for kernel_path, jax_loggamma, name in PATHS:
            cases[f"Poisson, {name}"] = _compiled(bart_poisson, config, p.data, kernel_path, args.sweeps, jax_loggamma)
    if "variance" in models:
        y = f + (0.5 + 4.0 * X[:, 5] ** 2) * rng.normal(size=n)
        p = build_bart_variance_problem(X, y, variance_trees=J, n_trees=M)
        config = bart_variance.VarianceConfig.of(bart.BARTConfig(M, incremental=False, sample_sigma=False), J)
        for kernel_path, jax_loggamma, name in PATHS:
            cases[f"variance_trees={J}, {name}"] = _compiled(bart_variance, config, p.variance_data(), kernel_path,
                                                            args.sweeps, jax_loggamma)
    times = {name: [] for name in cases}
    load0 = os.getloadavg()[0]
    for r in range(args.repeats):
        for name, (run, state) in cases.items():
            keys = jax.random.split(jax.random.key(1000 + r), args.sweeps)
            t0 = time.perf_counter()
            jax.block_until_ready(run(state, keys))
            times[name].append((time.perf_counter() - t0) / args.sweeps)
    base = float(np.median(times["plain BART (grow-prune sweep)"]))
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, JAX {jax.__version__} on {jax.default_backend()}; "
          f"1-min load {load0:.1f} before, {os.getloadavg()[0]:.1f} after; n = {n}, {M} trees; median of "
          f"{args.repeats} interleaved repeats of {args.sweeps} sweeps\n")
    print("| model | s / sweep | vs plain BART |\n|---|---|---|")
    for name, t in times.items():
        print(f"| {name} | {np.median(t):.4f} | {np.median(t) / base:.2f} |")


if __name__ == "__main__":
    main()
