"""Log-linear BART for counts (``bd.BARTPoissonRegressor``, issue #41 item 2): sweep time against
plain ``bd.BARTRegressor`` and a fit on a public count response.

Sections (``--sections``, default all three):

1. **speed**: one backfitting sweep of ``--trees`` (200) trees at ``--n`` (10,000) rows, 10
   features, one chain, timed at the kernel (``step`` jitted, compiled first, then ``--sweeps``
   sweeps timed with ``block_until_ready``; the median of ``--repeats`` timings) for
   ``BARTRegressor`` with ``tree_sampler`` "grow-prune" (its vectorized two-pass sweep) and "cgm"
   (the single-tree kernel sweep that log-linear BART shares), and for log-linear BART with
   "grow-prune" and "cgm" (both through the single-tree kernel sweep); the single-tree kernel with
   ``incremental`` False (what vectorized chains run: whole-tree re-scoring) and True (what a
   sequential chain runs: local re-scoring).  Trees start from 50 warm-up sweeps so they are not
   stumps.
2. **haberman**: the public Haberman survival data (``../shared/data/haberman.csv``, UCI, CC BY
   4.0): the count of positive axillary lymph nodes (0-52) from the patient's age, year of
   operation and 5-year survival status; a random 2/3 training, 1/3 test split (``--seed``):
   test mean Poisson deviance and log-likelihood of ``BARTPoissonRegressor`` (200 trees), a
   constant rate, scikit-learn's ``PoissonRegressor`` (log-linear GLM) and
   ``HistGradientBoostingRegressor(loss="poisson")``.  The node counts are strongly overdispersed
   (variance/mean ~ 7), which a Poisson model of the mean does not describe; the deviance compares
   the means only.
3. **simulated**: Friedman #1 on the log scale with exposures (:func:`simulated`), 2,000 training
   and 2,000 test rows: the same table, with the true means as a row.

The machine running this is named in the output (CPU count, JAX backend, 1-minute load average):
timings on a shared machine are "under load" numbers.

Usage::

    python benchmarks/bart_poisson.py                   # all three sections
    python benchmarks/bart_poisson.py --sections speed --n 10000 --trees 200

Writes ``benchmarks/results/bart_poisson.{json,md}`` and prints the markdown.
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

import bdtree_jax as bd
from bdtree_jax.kernels import bart, bart_poisson
from bdtree_jax.problem.bart import build_bart_problem
from bdtree_jax.problem.bart_poisson import build_bart_poisson_problem

ROOT = Path(__file__).resolve().parent


def _machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, JAX {jax.__version__} on "
            f"{jax.default_backend()}, 1-min load {load:.1f}")


def _time_sweeps(step, state, data, sweeps: int, repeats: int) -> float:
    """Median seconds per sweep of ``sweeps`` jitted sweeps (compiled beforehand)."""
    keys = jax.random.split(jax.random.key(1), sweeps)

    @jax.jit
    def run(state, keys):
        return jax.lax.scan(lambda s, k: (step(k, s, data)[0], None), state, keys)[0]

    jax.block_until_ready(run(state, keys))  # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(run(state, keys))
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / sweeps


def speed(n: int, trees: int, sweeps: int, repeats: int) -> list[dict]:
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(n, 10))
    f = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    y_normal = f + rng.normal(size=n)
    y_counts = rng.poisson(np.exp(f / 10.0))
    rows = []
    cases = [("normal", "grow-prune", False), ("normal", "cgm", False), ("normal", "cgm", True),
             ("poisson", "grow-prune", False), ("poisson", "grow-prune", True), ("poisson", "cgm", False),
             ("poisson", "cgm", True)]
    for model, sampler, incremental in cases:
        if True:
            if model == "normal":
                p = build_bart_problem(X, y_normal, n_trees=trees)
                config = bart.BARTConfig(trees, tree_sampler=sampler, incremental=incremental)
                mod = bart
            else:
                p = build_bart_poisson_problem(X, y_counts, n_trees=trees)
                config = bart_poisson.poisson_config(trees, tree_sampler=sampler, incremental=incremental)
                mod = bart_poisson
            step = lambda k, s, d, m=mod, c=config: m.step(k, s, d, c)  # noqa: E731
            state = mod.init(None, p.data, config)
            warm = jax.jit(lambda s, d, step=step: jax.lax.scan(lambda s, k: (step(k, s, d)[0], None), s,
                                                                  jax.random.split(jax.random.key(0), 50))[0])
            state = jax.block_until_ready(warm(state, p.data))
            sec = _time_sweeps(lambda k, s, d, step=step: step(k, s, d), state, p.data, sweeps, repeats)
            rows.append(dict(model=model, tree_sampler=sampler, incremental=incremental, n=n, trees=trees,
                             seconds_per_sweep=sec))
            print(rows[-1], flush=True)
    base = next(r["seconds_per_sweep"] for r in rows if r["model"] == "normal" and r["tree_sampler"] == "grow-prune")
    for r in rows:
        r["vs_normal_grow_prune"] = r["seconds_per_sweep"] / base
    return rows


def _deviance(y, mu):
    mu = np.maximum(mu, 1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(y > 0, y * np.log(y / mu), 0.0)
    return float(np.mean(2 * (t - (y - mu))))


def haberman(seed: int, warmup: int, samples: int) -> list[dict]:
    import pandas as pd
    from sklearn.model_selection import train_test_split

    df = pd.read_csv(ROOT.parent.parent / "shared" / "data" / "haberman.csv")
    y = df["positive_axillary_nodes"].to_numpy()
    X = df[["age", "year_of_operation", "target"]].to_numpy(float)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=1 / 3, random_state=seed)
    return _compare(X_tr, y_tr, X_te, y_te, seed, warmup, samples)


def simulated(seed: int, warmup: int, samples: int, n: int = 2000) -> list[dict]:
    """Friedman #1 on the log scale: ``y ~ Poisson(exposure exp(f(x) / 10 - 1))``, ``x ~ U[0, 1]**10``
    (five inert features), exposure ``U[0.5, 2]``; ``n`` training and ``n`` test rows; the test
    rows' true means are reported as a model ("truth")."""
    rng = np.random.default_rng(seed)

    def rows(m):
        X = rng.uniform(size=(m, 10))
        f = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
        e = rng.uniform(0.5, 2.0, m)
        mu = e * np.exp(f / 10.0 - 1.0)
        return X, rng.poisson(mu), e, mu

    X_tr, y_tr, e_tr, _ = rows(n)
    X_te, y_te, e_te, mu_te = rows(n)
    return _compare(X_tr, y_tr, X_te, y_te, seed, warmup, samples, e_tr, e_te, mu_te)


def _compare(X_tr, y_tr, X_te, y_te, seed, warmup, samples, e_tr=None, e_te=None, truth=None) -> list[dict]:
    """Test mean Poisson deviance and log-likelihood of a constant rate, a Poisson GLM, gradient
    boosting with Poisson loss and BARTPoissonRegressor (exposures as sample weights with the
    rate ``y / exposure`` as target for scikit-learn, scikit-learn's way of fitting an exposure)."""
    from scipy.stats import poisson
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.linear_model import PoissonRegressor

    e_tr = np.ones(len(y_tr)) if e_tr is None else e_tr
    e_te = np.ones(len(y_te)) if e_te is None else e_te
    out = []

    def add(name, mu, seconds):
        out.append(dict(model=name, test_deviance=_deviance(y_te, mu),
                        test_log_lik=float(np.mean(poisson.logpmf(y_te, np.maximum(mu, 1e-12)))), seconds=seconds))
        print(out[-1], flush=True)

    if truth is not None:
        add("truth (the test rows' means)", truth, 0.0)
    add("constant rate", e_te * y_tr.sum() / e_tr.sum(), 0.0)
    t0 = time.perf_counter()
    Z_tr, Z_te = (X_tr - X_tr.mean(0)) / X_tr.std(0), (X_te - X_tr.mean(0)) / X_tr.std(0)
    glm = PoissonRegressor(alpha=1e-4, max_iter=1000).fit(Z_tr, y_tr / e_tr, sample_weight=e_tr)
    add("sklearn PoissonRegressor (GLM)", e_te * glm.predict(Z_te), time.perf_counter() - t0)
    t0 = time.perf_counter()
    hgb = HistGradientBoostingRegressor(loss="poisson", max_iter=100, learning_rate=0.05, random_state=seed)
    hgb.fit(X_tr, y_tr / e_tr, sample_weight=e_tr)
    add("sklearn HistGradientBoosting (poisson)", e_te * hgb.predict(X_te), time.perf_counter() - t0)
    t0 = time.perf_counter()
    reg = bd.BARTPoissonRegressor(num_trees=200, num_warmup=warmup, num_samples=samples, num_chains=2, seed=seed,
                                  progress=False)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bd.ConvergenceWarning)
        reg.fit(X_tr, y_tr, exposure=e_tr)
    add("bd.BARTPoissonRegressor (200 trees)", reg.predict(X_te, exposure=e_te), time.perf_counter() - t0)
    return out


def write_results(out: str, result: dict, lines: list[str]) -> None:
    """``out + ".json"`` (``result``) and ``out + ".md"`` (``lines``), the markdown printed."""
    md = "\n".join(lines) + "\n"
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out + ".json").write_text(json.dumps(result, indent=1))
    Path(out + ".md").write_text(md)
    print(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default="speed,haberman,simulated")
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--trees", type=int, default=200)
    ap.add_argument("--sweeps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--out", default=str(ROOT / "results" / "bart_poisson"))
    args = ap.parse_args()
    sections = args.sections.split(",")
    result = dict(machine=_machine(), args=vars(args))
    if "speed" in sections:
        result["speed"] = speed(args.n, args.trees, args.sweeps, args.repeats)
    if "haberman" in sections:
        result["haberman"] = haberman(args.seed, args.warmup, args.samples)
    if "simulated" in sections:
        result["simulated"] = simulated(args.seed, args.warmup, args.samples)
    result["machine_after"] = _machine()
    lines = ["# Log-linear BART for counts (benchmarks/bart_poisson.py)", "",
             f"Machine: {result['machine']} (after: {result['machine_after']}); timings are under load.", ""]
    if "speed" in result:
        lines += ["## Sweep time", "",
                  "| model | tree_sampler | incremental | n | trees | s / sweep | vs normal grow-prune |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['model']} | {r['tree_sampler']} | {r['incremental']} | {r['n']} | {r['trees']} | "
                  f"{r['seconds_per_sweep']:.4f} | {r['vs_normal_grow_prune']:.2f} |" for r in result["speed"]]
        lines.append("")
    titles = dict(haberman="Haberman: positive axillary nodes (test third)",
                  simulated="Simulated: Friedman #1 on the log scale, exposures 0.5-2 (2,000 test rows)")
    for name, title in titles.items():
        if name in result:
            lines += [f"## {title}", "", "| model | test mean Poisson deviance | test mean log-lik | seconds |",
                      "|---|---|---|---|"]
            lines += [f"| {r['model']} | {r['test_deviance']:.3f} | {r['test_log_lik']:.3f} | {r['seconds']:.1f} |"
                      for r in result[name]]
            lines.append("")
    write_results(args.out, result, lines)


if __name__ == "__main__":
    main()
