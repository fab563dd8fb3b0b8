"""Heteroskedastic BART (``bd.BARTRegressor(variance_trees=J)``, issue #41 item 4): predictive
quality against plain BART on heteroskedastic data, and sweep time against plain BART.

Sections (``--sections``, default both):

1. **simulated**: Friedman #1 mean with a noise sd that changes 9-fold over the inputs
   (:func:`simulated`: ``y = 10 sin(pi x0 x1) + 20 (x2 - 1/2)**2 + 10 x3 + 5 x4 + sigma(x) eps``,
   ``sigma(x) = 0.5 + 4 x5**2``, ``x ~ U[0, 1]**10``), ``--n`` training and 2,000 test rows
   (``--seed``).  Side by side in one run: ``BARTRegressor`` (200 trees) and
   ``BARTRegressor(variance_trees=--variance-trees)`` (200 + J trees), 2 chains: test mean log
   predictive density (``log mean_draws N(y; f, sigma**2)``), 90% predictive interval coverage
   overall and in the thirds of the test rows by true ``sigma(x)``, mean interval width, RMSE of
   the mean against the true function, and for the heteroskedastic model the mean absolute
   relative error of its posterior mean ``sigma(x)``.  The truth itself is a row (the exact
   density and intervals).
2. **speed**: one sweep at ``--speed-n`` (10,000) rows, 10 features, 200 mean trees, one chain,
   timed at the kernel (``step`` jitted, compiled first, 50 warm-up sweeps, then ``--sweeps``
   sweeps timed, the median of ``--repeats``; :func:`bart_poisson._time_sweeps`): plain BART's
   grow-prune sweep (``BARTRegressor``'s default) and its single-tree kernel sweep (``tree_sampler=
   "cgm"``, the path every BART model other than plain BART's grow-prune runs) against the
   heteroskedastic sweep (both forests through the single-tree kernel sweep with grow-prune moves;
   ``incremental`` False as vectorized chains run it, True as a sequential chain does) with J = 50
   and 200 variance trees.

The machine is named in the output (CPU count, JAX backend, 1-minute load average): timings on a
shared machine are "under load" numbers.

Usage::

    python benchmarks/bart_variance.py                          # both sections
    python benchmarks/bart_variance.py --sections speed --speed-n 10000

Writes ``benchmarks/results/bart_variance.{json,md}`` and prints the markdown.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np

import bdtree_jax as bd
from bdtree_jax.kernels import bart, bart_variance
from bdtree_jax.problem.bart import build_bart_problem
from bdtree_jax.problem.bart_variance import build_bart_variance_problem

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from bart_poisson import _machine, _time_sweeps, write_results  # noqa: E402


def _friedman(rng, m):
    X = rng.uniform(size=(m, 10))
    f = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    sd = 0.5 + 4.0 * X[:, 5] ** 2
    return X, f, sd, f + sd * rng.normal(size=m)


def simulated(seed: int, n: int, variance_trees: int, warmup: int, samples: int) -> list[dict]:
    """The side-by-side table of section 1 (module docstring)."""
    from scipy.stats import norm

    rng = np.random.default_rng(seed)
    X_tr, _, _, y_tr = _friedman(rng, n)
    X_te, f_te, sd_te, y_te = _friedman(rng, 2000)
    thirds = np.digitize(sd_te, np.quantile(sd_te, [1 / 3, 2 / 3]))
    z = norm.ppf(0.95)
    out = []

    def add(name, lpd, lo, hi, f_hat, seconds, sigma_err=float("nan")):
        inside = (lo <= y_te) & (y_te <= hi)
        out.append(dict(model=name, test_lpd=float(np.mean(lpd)), coverage=float(inside.mean()),
                        coverage_by_sigma_third=[float(inside[thirds == k].mean()) for k in range(3)],
                        width=float(np.mean(hi - lo)), rmse_f=float(np.sqrt(np.mean((f_hat - f_te) ** 2))),
                        sigma_rel_error=sigma_err, seconds=seconds))
        print(out[-1], flush=True)

    add("truth (f and sigma(x) known)", norm.logpdf(y_te, f_te, sd_te), f_te - z * sd_te, f_te + z * sd_te, f_te, 0.0)
    for J in (0, variance_trees):
        t0 = time.perf_counter()
        reg = bd.BARTRegressor(num_trees=200, variance_trees=J, num_warmup=warmup, num_samples=samples,
                               num_chains=2, seed=seed, progress=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", bd.ConvergenceWarning)
            reg.fit(X_tr, y_tr)
        seconds = time.perf_counter() - t0
        post = reg.posterior_
        lo, hi = reg.predict_interval(X_te, prob=0.9, predictive=True)
        if J:
            lpd = post.log_predictive_density(X_te, y_te)
            err = float(np.mean(np.abs(reg.predict_sigma(X_te) / sd_te - 1)))
            name = f"BARTRegressor(variance_trees={J})"
        else:
            from scipy.special import logsumexp

            f = post.predict_draws(X_te)
            sigma = np.asarray(post.sigma, float).reshape(-1, 1)
            lpd = logsumexp(norm.logpdf(y_te, f, sigma), axis=0) - np.log(len(f))
            err = float(np.mean(np.abs(float(np.mean(post.sigma)) / sd_te - 1)))
            name = "BARTRegressor (homoskedastic)"
        add(name, lpd, lo, hi, reg.predict(X_te), seconds, err)
    return out


def speed(n: int, trees: int, sweeps: int, repeats: int) -> list[dict]:
    """The sweep times of section 2 (module docstring)."""
    rng = np.random.default_rng(0)
    X, _, _, y = _friedman(rng, n)
    rows = []
    cases = [(0, "grow-prune", False), (0, "cgm", False), (50, "grow-prune", False), (50, "grow-prune", True),
             (200, "grow-prune", True)]
    for J, sampler, incremental in cases:
        if J == 0:
            p = build_bart_problem(X, y, n_trees=trees)
            config, data, mod = bart.BARTConfig(trees, tree_sampler=sampler, incremental=incremental), p.data, bart
        else:
            p = build_bart_variance_problem(X, y, variance_trees=J, n_trees=trees)
            mean = bart.BARTConfig(trees, incremental=incremental, sample_sigma=False)
            config, data, mod = bart_variance.VarianceConfig.of(mean, J), p.variance_data(), bart_variance
        step = lambda k, s, d, m=mod, c=config: m.step(k, s, d, c)  # noqa: E731
        state = mod.init(None, data, config)
        warm = jax.jit(lambda s, d, step=step: jax.lax.scan(lambda s, k: (step(k, s, d)[0], None), s,
                                                              jax.random.split(jax.random.key(0), 50))[0])
        state = jax.block_until_ready(warm(state, data))
        sec = _time_sweeps(step, state, data, sweeps, repeats)
        name = f"plain BART ({'grow-prune sweep' if sampler == 'grow-prune' else 'single-tree CGM kernel sweep'})"
        rows.append(dict(model=name if J == 0 else f"variance_trees={J} (grow-prune moves, kernel sweep)",
                         incremental=incremental, n=n, trees=trees, variance_trees=J, seconds_per_sweep=sec))
        print(rows[-1], flush=True)
    base = rows[0]["seconds_per_sweep"]
    for r in rows:
        r["vs_plain"] = r["seconds_per_sweep"] / base
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    options = dict(sections="simulated,speed", n=1000, variance_trees=50, warmup=500, samples=500, seed=0,
                   speed_n=10_000, trees=200, sweeps=10, repeats=3, out=str(ROOT / "results" / "bart_variance"))
    for name, default in options.items():
        ap.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    args = ap.parse_args()
    sections = args.sections.split(",")
    result = dict(machine=_machine(), args=vars(args))
    if "simulated" in sections:
        result["simulated"] = simulated(args.seed, args.n, args.variance_trees, args.warmup, args.samples)
    if "speed" in sections:
        result["speed"] = speed(args.speed_n, args.trees, args.sweeps, args.repeats)
    result["machine_after"] = _machine()
    lines = ["# Heteroskedastic BART (benchmarks/bart_variance.py)", "",
             f"Machine: {result['machine']} (after: {result['machine_after']}); timings are under load.", ""]
    if "simulated" in result:
        lines += [f"## Simulated: Friedman #1 mean, sigma(x) = 0.5 + 4 x5^2 ({args.n} training, 2,000 test rows, "
                  f"seed {args.seed}, {args.warmup} + {args.samples} sweeps x 2 chains)", "",
                  "| model | test mean log pred. density | 90% PI coverage | coverage by sigma third (low, mid, high) "
                  "| mean PI width | RMSE of f | mean rel. error of sigma(x) | seconds |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in result["simulated"]:
            by = ", ".join(f"{c:.3f}" for c in r["coverage_by_sigma_third"])
            lines.append(f"| {r['model']} | {r['test_lpd']:.3f} | {r['coverage']:.3f} | {by} | "
                         f"{r['width']:.2f} | {r['rmse_f']:.3f} | {r['sigma_rel_error']:.3f} | {r['seconds']:.0f} |")
        lines.append("")
    if "speed" in result:
        lines += ["## Sweep time", "", "| model | incremental | n | mean trees | variance trees | s / sweep | vs plain |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['model']} | {r['incremental']} | {r['n']} | {r['trees']} | {r['variance_trees']} | "
                  f"{r['seconds_per_sweep']:.4f} | {r['vs_plain']:.2f} |" for r in result["speed"]]
        lines.append("")
    write_results(args.out, result, lines)


if __name__ == "__main__":
    main()
