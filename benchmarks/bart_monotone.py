"""Monotone BART (``BARTRegressor(monotonic_cst=...)``, issue #41 item 6): test RMSE of the
constrained and the unconstrained fit side by side, and the sweep's cost against plain BART.

Sections (``--sections``, default both):

1. **quality**: the simulated monotone function (named here "monotone-4 of 10")::

       f(x) = 5 x0 x1 + 10 sqrt(x2) + 2 exp(x3),   x ~ U[0, 1]**10,   y = f(x) + N(0, 1)

   increasing in x0..x3, x4..x9 inert; ``--n-train`` (300) training and 2,000 test rows; test RMSE
   against the true ``f`` and against the noisy ``y`` of ``BARTRegressor`` (200 trees, 2 chains)
   unconstrained and with ``monotonic_cst=[1, 1, 1, 1, 0, ..., 0]``, one run, same seed; and
   the share of test rows where the unconstrained posterior mean breaks monotonicity along x0
   (a step of 0.05).
2. **speed**: one sweep of ``--trees`` (200) trees at ``--n`` (10,000) rows, 10 features, one
   chain, timed at the kernel (``step`` jitted, compiled first, then ``--sweeps`` sweeps, the
   median of ``--repeats`` timings, trees from 50 warm-up sweeps) for plain grow-prune BART and
   monotone BART with 1 and 4 constrained features.

Timings come from a shared machine: "under load" numbers (the machine and its load are printed).

Usage::

    python benchmarks/bart_monotone.py
    python benchmarks/bart_monotone.py --sections speed --n 10000 --trees 200

Writes ``benchmarks/results/bart_monotone.{json,md}`` and prints the markdown.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np

import bdtree_jax as bd
from bdtree_jax.kernels import bart, bart_monotone
from bdtree_jax.problem.bart import build_bart_problem

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from bart_poisson import _machine, _time_sweeps, write_results  # noqa: E402  (the shared helpers)


def monotone_f(X: np.ndarray) -> np.ndarray:
    """(n,) "monotone-4 of 10": increasing in x0..x3."""
    return 5 * X[:, 0] * X[:, 1] + 10 * np.sqrt(X[:, 2]) + 2 * np.exp(X[:, 3])


def quality(seed: int, n_train: int, warmup: int, samples: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    X_tr, X_te = rng.uniform(size=(n_train, 10)), rng.uniform(size=(2000, 10))
    y_tr = monotone_f(X_tr) + rng.normal(size=n_train)
    f_te = monotone_f(X_te)
    y_te = f_te + rng.normal(size=len(f_te))
    rows = []
    for name, cst in [("BART", None), ("monotone BART", [1, 1, 1, 1] + [0] * 6)]:
        t0 = time.perf_counter()
        model = bd.BARTRegressor(200, num_warmup=warmup, num_samples=samples, seed=seed, monotonic_cst=cst)
        model.fit(X_tr, y_tr)
        seconds = time.perf_counter() - t0
        pred = model.predict(X_te)
        up = X_te.copy()
        up[:, 0] = np.minimum(up[:, 0] + 0.05, 1.0)
        breaks = float(np.mean(model.predict(up) < pred - 1e-9))
        rows.append(dict(model=name, rmse_f=float(np.sqrt(np.mean((pred - f_te) ** 2))),
                         rmse_y=float(np.sqrt(np.mean((pred - y_te) ** 2))), breaks_x0=breaks, seconds=seconds))
        print(rows[-1], flush=True)
    return rows


def speed(n: int, trees: int, sweeps: int, repeats: int) -> list[dict]:
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(n, 10))
    y = monotone_f(X) + rng.normal(size=n)
    p = build_bart_problem(X, y, n_trees=trees)
    config = bart.BARTConfig(trees)
    rows = []
    for name, mono in [("plain", None), ("monotone, 1 feature", (1,) + (0,) * 9),
                       ("monotone, 4 features", (1,) * 4 + (0,) * 6)]:
        if mono is None:
            def step(k, s, d):
                return bart.step(k, s, d, config)
        else:
            def step(k, s, d, mono=mono):
                return bart_monotone.step(k, s, d, config, mono)
        warm = jax.jit(lambda s, d, step=step: jax.lax.scan(lambda s, k: (step(k, s, d)[0], None), s,
                                                              jax.random.split(jax.random.key(0), 50))[0])
        state = jax.block_until_ready(warm(bart.init(None, p.data, config), p.data))
        sec = _time_sweeps(step, state, p.data, sweeps, repeats)
        rows.append(dict(model=name, n=n, trees=trees, seconds_per_sweep=sec))
        print(rows[-1], flush=True)
    for r in rows:
        r["vs_plain"] = r["seconds_per_sweep"] / rows[0]["seconds_per_sweep"]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default="quality,speed")
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--trees", type=int, default=200)
    ap.add_argument("--sweeps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-train", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=250)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--out", default=str(ROOT / "results" / "bart_monotone"))
    args = ap.parse_args()
    sections = args.sections.split(",")
    result = dict(machine=_machine(), args=vars(args))
    if "quality" in sections:
        result["quality"] = quality(args.seed, args.n_train, args.warmup, args.samples)
    if "speed" in sections:
        result["speed"] = speed(args.n, args.trees, args.sweeps, args.repeats)
    result["machine_after"] = _machine()
    lines = ["# Monotone BART (benchmarks/bart_monotone.py)", "",
             f"Machine: {result['machine']} (after: {result['machine_after']}); timings are under load.", ""]
    if "quality" in result:
        lines += [f"## monotone-4 of 10: f = 5 x0 x1 + 10 sqrt(x2) + 2 exp(x3), noise sd 1, "
                  f"{args.n_train} training / 2,000 test rows (seed {args.seed})", "",
                  "| model | test RMSE vs f | test RMSE vs y | rows where x0 + 0.05 lowers the mean | fit s |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['model']} | {r['rmse_f']:.3f} | {r['rmse_y']:.3f} | {r['breaks_x0']:.3f} | "
                  f"{r['seconds']:.0f} |" for r in result["quality"]]
        lines.append("")
    if "speed" in result:
        lines += ["## Sweep time (under load)", "", "| model | n | trees | s / sweep | vs plain |", "|---|---|---|---|---|"]
        lines += [f"| {r['model']} | {r['n']} | {r['trees']} | {r['seconds_per_sweep']:.4f} | {r['vs_plain']:.2f} |"
                  for r in result["speed"]]
        lines.append("")
    write_results(args.out, result, lines)


if __name__ == "__main__":
    main()
