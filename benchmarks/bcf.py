"""Bayesian causal forests: ``bd.BCFRegressor`` against stochtree 0.4.5's ``BCFModel`` (issue #42)
on the simulation designs of Hahn, Murray & Carvalho (2020, §6.1), side by side in one run.

Design (as the paper and stochtree's BCF vignette): ``x1, x2, x3 ~ N(0, 1)``, ``x4 ~ Bernoulli(1/2)``,
``x5`` uniform on {1, 2, 3} (passed as a number to both), ``g(1, 2, 3) = (2, -1, -4)``;
prognostic ``mu = 1 + g(x5) + x1 x3`` (linear) or ``-6 + g(x5) + 6 |x3 - 1|`` (nonlinear);
effect ``tau = 3`` (homogeneous) or ``1 + 2 x2 x4`` (heterogeneous);
``pi = 0.8 Phi(3 mu / sd(mu) - x1 / 2) + 0.05 + u / 10``, ``u ~ U(0, 1)``; ``z ~ Bernoulli(pi)``;
``y = mu + tau z + N(0, 1)``; n = 250 and 500.  Both methods get the true propensity ``pi`` (the
same input, no propensity model fitted: that keeps a replication short).

Per replication and method: CATE RMSE at the training rows, the share of training rows whose 95 %
CATE interval covers the true effect, whether the 95 % interval of the sample ATE (mean CATE over
the training rows) covers ``mean(tau)``, and seconds per sweep (wall clock of the fit over its
sweeps; ours after the first replication of a row count, which compiles).

Settings: ``BCFRegressor()`` defaults (200 + 50 trees; chains and sweeps as ``--chains``,
``--warmup``, ``--samples``, by default the estimator's); ``BCFModel.sample`` with stochtree's defaults (250 + 100 trees, 5 grow-from-root sweeps, no
burn-in, ``adaptive_coding=False``) and 300 kept MCMC sweeps.

Usage::

    python benchmarks/bcf.py --reps 50 --minutes 40 [--n 250 500]
    python benchmarks/bcf.py --speed           # the marginal cost of a sweep, both methods
    python benchmarks/bcf.py --tag _v2 --stochtree-from benchmarks/results/bcf.jsonl  # ours only

Appends every replication to ``benchmarks/results/bcf{tag}.jsonl`` as it finishes (a rerun resumes)
and writes the table to ``benchmarks/results/bcf{tag}.md``.  ``--stochtree-from`` copies
stochtree's figures of the same (n, design, replication) from an earlier run's rows instead of
refitting it: the data and stochtree's seed depend only on those, and stochtree's draws are
reproducible (checked: two replications refitted gave the recorded figures to the last digit).
``--chains 1 --warmup 200 --samples 300`` is the first run's setting (``bcf.jsonl``).  stochtree is read from
``/tmp/stochtree_pkgs`` (``pip install --target``), never a project dependency.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np
from scipy.stats import norm

from bdtree_jax.estimators.bcf import BCFRegressor

ROOT = Path(__file__).resolve().parent
JSONL = ROOT / "results" / "bcf.jsonl"  # main() sets bcf{--tag}.jsonl
DESIGNS = [(mu, tau) for mu in ("linear", "nonlinear") for tau in ("homogeneous", "heterogeneous")]
SAMPLES = 300  # stochtree's kept MCMC sweeps
#: ours: num_chains, num_warmup, num_samples (None: the estimator's defaults); set by main()
OURS = dict(num_chains=None, num_warmup=None, num_samples=None)


def simulate(n: int, mu_kind: str, tau_kind: str, rng: np.random.Generator):
    """``(X (n, 5), y, z, pi, tau)`` of one replication (module docstring)."""
    x1, x2, x3 = rng.normal(size=(3, n))
    x4 = rng.binomial(1, 0.5, n).astype(float)
    x5 = rng.integers(1, 4, n).astype(float)
    g = np.select([x5 == 1, x5 == 2], [2.0, -1.0], -4.0)
    mu = 1 + g + x1 * x3 if mu_kind == "linear" else -6 + g + 6 * np.abs(x3 - 1)
    tau = np.full(n, 3.0) if tau_kind == "homogeneous" else 1 + 2 * x2 * x4
    pi = 0.8 * norm.cdf(3 * mu / np.std(mu) - 0.5 * x1) + 0.05 + rng.uniform(size=n) / 10
    z = rng.binomial(1, pi)
    y = mu + tau * z + rng.normal(size=n)
    return np.column_stack([x1, x2, x3, x4, x5]), y, z, pi, tau


def _scores(cate_draws: np.ndarray, tau: np.ndarray) -> dict:
    """cate_draws (D, n) at the training rows."""
    lo, hi = np.quantile(cate_draws, [0.025, 0.975], axis=0)
    ate = cate_draws.mean(1)
    a_lo, a_hi = np.quantile(ate, [0.025, 0.975])
    return dict(rmse=float(np.sqrt(np.mean((cate_draws.mean(0) - tau) ** 2))),
                cover=float(np.mean((lo <= tau) & (tau <= hi))),
                ate_cover=bool(a_lo <= tau.mean() <= a_hi), ate_width=float(a_hi - a_lo),
                width=float(np.mean(hi - lo)))


def split_rhat(draws: np.ndarray) -> np.ndarray:
    """draws (C, S, n) -> (n,) split R-hat (Gelman et al. 2013) of each column, C >= 1."""
    h = draws.shape[1] // 2
    x = np.concatenate([draws[:, :h], draws[:, h:2 * h]], 0)
    within = x.var(1, ddof=1).mean(0)
    between = h * x.mean(1).var(0, ddof=1)
    return np.sqrt(((h - 1) / h * within + between / h) / np.maximum(within, 1e-12))


def ours(X, y, z, pi, tau, seed: int) -> dict:
    model = BCFRegressor(seed=seed, progress=False, **{k: v for k, v in OURS.items() if v is not None})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, y, z, propensity=pi)
    post = model.posterior_
    draws = post.cate_draws(X)
    rhat = split_rhat(draws.reshape(post.num_chains, -1, draws.shape[1]))
    sweeps = post.num_chains * (post.info["num_warmup"] + post.info["num_samples"])
    return dict(_scores(draws, tau), per_sweep=post.info["seconds"] / sweeps, chains=int(post.num_chains),
                sweeps=int(sweeps), rhat_median=float(np.median(rhat)), rhat_over_1_1=float(np.mean(rhat > 1.1)))


def stochtree(X, y, z, pi, tau, seed: int) -> dict:
    sys.path.insert(0, "/tmp/stochtree_pkgs")
    from stochtree import BCFModel

    model = BCFModel()
    t0 = time.perf_counter()
    model.sample(X_train=X, Z_train=z.astype(float), y_train=y, propensity_train=pi, num_gfr=5, num_burnin=0,
                 num_mcmc=SAMPLES, general_params=dict(random_seed=seed))
    seconds = time.perf_counter() - t0
    return dict(_scores(np.asarray(model.tau_hat_train).T, tau), per_sweep=seconds / (5 + SAMPLES))


def marginal_speed(n: int, repeats: int = 3) -> dict:
    """Seconds per sweep as the marginal cost of 300 more sweeps (400 against 100 kept sweeps, no
    warm-up / grow-from-root sweeps; the median of ``repeats``), after a first fit that compiles:
    what a sweep costs without the fixed costs (ours: the problem, compiling; stochtree: setup)."""
    X, y, z, pi, _ = simulate(n, "linear", "heterogeneous", np.random.default_rng(7))
    sys.path.insert(0, "/tmp/stochtree_pkgs")
    from stochtree import BCFModel

    def ours_fit(sweeps):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            BCFRegressor(num_warmup=0, num_samples=sweeps, num_chains=1, progress=False).fit(X, y, z, propensity=pi)
            return time.perf_counter() - t0

    def stoch_fit(sweeps):
        t0 = time.perf_counter()
        BCFModel().sample(X_train=X, Z_train=z.astype(float), y_train=y, propensity_train=pi, num_gfr=0,
                          num_burnin=0, num_mcmc=sweeps, general_params=dict(random_seed=1))
        return time.perf_counter() - t0

    out = {}
    for name, fit in (("ours", ours_fit), ("stochtree", stoch_fit)):
        fit(100), fit(400)  # compile (ours) and warm caches
        out[name] = float(np.median([(fit(400) - fit(100)) / 300 for _ in range(repeats)]))
    return dict(n=n, load=os.getloadavg()[0], **out)


def _rows(path: Path) -> dict:
    """{(n, mu, tau, rep): row} of a results file (empty if none)."""
    if not path.exists():
        return {}
    return {(r["n"], r["mu"], r["tau"], r["rep"]): r for r in map(json.loads, path.read_text().splitlines())}


def run(ns, reps: int, minutes: float, stochtree_from: Path | None = None) -> None:
    done = set(_rows(JSONL))
    earlier = _rows(stochtree_from) if stochtree_from is not None else None
    stop = time.time() + 60 * minutes
    for rep in range(reps):
        for n in ns:
            for mu_kind, tau_kind in DESIGNS:
                if (n, mu_kind, tau_kind, rep) in done:
                    continue
                if time.time() > stop:
                    return
                seed = 1000 * rep + 10 * DESIGNS.index((mu_kind, tau_kind)) + (n == 500)
                data = simulate(n, mu_kind, tau_kind, np.random.default_rng(seed))
                key = (n, mu_kind, tau_kind, rep)
                if earlier is not None and key not in earlier:
                    continue
                row = dict(n=n, mu=mu_kind, tau=tau_kind, rep=rep, load=os.getloadavg()[0],
                           ours=ours(*data, seed=seed),
                           stochtree=stochtree(*data, seed=seed) if earlier is None else earlier[key]["stochtree"])
                if earlier is not None:
                    row["stochtree_from"] = stochtree_from.name
                with JSONL.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(n, mu_kind, tau_kind, rep, {k: round(v["rmse"], 3) for k, v in row.items()
                                                  if isinstance(v, dict)}, flush=True)


def table() -> str:
    rows = [json.loads(line) for line in JSONL.read_text().splitlines()]
    out = ["| n | mu | tau | reps | method | CATE RMSE | CATE 95% cover | CATE width | ATE 95% cover | "
           "ATE width | s / sweep (median) |", "|" + "---|" * 11]
    for n in sorted({r["n"] for r in rows}):
        for mu_kind, tau_kind in DESIGNS:
            sel = [r for r in rows if (r["n"], r["mu"], r["tau"]) == (n, mu_kind, tau_kind)]
            if not sel:
                continue
            for method in ("ours", "stochtree"):
                v = [r[method] for r in sel]
                speed = [x["per_sweep"] for r, x in zip(sel, v) if method != "ours" or r["rep"] > 0]
                speed = float(np.median(speed)) if speed else float("nan")
                out.append(f"| {n} | {mu_kind} | {tau_kind} | {len(sel)} | {method} | "
                           f"{np.mean([x['rmse'] for x in v]):.3f} | {np.mean([x['cover'] for x in v]):.3f} | "
                           f"{np.mean([x['width'] for x in v]):.2f} | {np.mean([x['ate_cover'] for x in v]):.2f} | "
                           f"{np.mean([x['ate_width'] for x in v]):.2f} | {speed * 1e3:.2f} ms |")
    loads = [r["load"] for r in rows]
    head = (f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, JAX {jax.__version__} on {jax.default_backend()}; "
            f"1-minute load average {min(loads):.1f}-{max(loads):.1f} during the run (**under load**: shared "
            f"machine, timings are indicative only).\n")
    notes = ("\nColumns: means over replications; CATE RMSE and coverage at the training rows; ATE: the sample "
             "ATE (mean effect over the training rows), covered by the 95 % interval of the per-draw mean CATE. "
             "Per sweep (median over replications): ours the sampler's run over its sweeps (all chains; "
             f"{_settings(rows)}), without building the problem; stochtree the whole `sample` call (setup, 5 grow-from-root "
             "sweeps, 300 MCMC sweeps, its in-sample predictions) over 305: not the same costs, see the marginal "
             "table below.\n")
    rhat = [r["ours"]["rhat_median"] for r in rows if r["ours"].get("chains", 1) > 1]
    if rhat:
        notes += (f"Ours, split R-hat of the training rows' CATE over the chains: median over rows and replications "
                  f"{np.median(rhat):.3f}; share of rows above 1.1, mean over replications "
                  f"{np.mean([r['ours']['rhat_over_1_1'] for r in rows if r['ours'].get('chains', 1) > 1]):.3f}.\n")
    if any("stochtree_from" in r for r in rows):
        notes += (f"stochtree's figures copied from `{rows[0].get('stochtree_from')}` (the same data and seeds; "
                  "not refitted in this run).\n")
    return head + notes + "\n" + "\n".join(out) + "\n"


def _settings(rows) -> str:
    """Ours' chains x sweeps of the rows, e.g. ``4 x 750 sweeps``."""
    got = sorted({(r["ours"].get("chains", 1), r["ours"].get("sweeps", 500) // r["ours"].get("chains", 1))
                  for r in rows})
    return ", ".join(f"{c} x {s} sweeps" for c, s in got)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[250, 500])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--minutes", type=float, default=40.0)
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--speed", action="store_true", help="only the marginal seconds per sweep (bcf_speed.json)")
    parser.add_argument("--tag", default="", help="results in bcf{tag}.jsonl and bcf{tag}.md")
    parser.add_argument("--stochtree-from", type=Path, default=None,
                        help="copy stochtree's figures from this earlier results file instead of refitting")
    for name in ("chains", "warmup", "samples"):
        parser.add_argument(f"--{name}", type=int, default=None, help=f"ours' num_{name} (default: the estimator's)")
    args = parser.parse_args()
    global JSONL
    JSONL = ROOT / "results" / f"bcf{args.tag}.jsonl"
    OURS.update(num_chains=args.chains, num_warmup=args.warmup, num_samples=args.samples)
    if args.speed:
        rows = [marginal_speed(n) for n in args.n]
        (ROOT / "results" / "bcf_speed.json").write_text(json.dumps(rows, indent=1))
        print(rows)
        return
    if not args.table_only:
        run(args.n, args.reps, args.minutes, args.stochtree_from)
    text = table()
    speed_file = ROOT / "results" / "bcf_speed.json"
    if speed_file.exists():
        text += "\nMarginal seconds per sweep (``--speed``: 400 against 100 kept sweeps, no warm-up, median of 3):\n\n"
        text += "| n | ours | stochtree | load |\n|---|---|---|---|\n"
        for r in json.loads(speed_file.read_text()):
            text += f"| {r['n']} | {r['ours'] * 1e3:.2f} ms | {r['stochtree'] * 1e3:.2f} ms | {r['load']:.1f} |\n"
    (ROOT / "results" / f"bcf{args.tag}.md").write_text("# BCF against stochtree 0.4.5 (benchmarks/bcf.py)\n\n" + text)
    print(text)


if __name__ == "__main__":
    main()
