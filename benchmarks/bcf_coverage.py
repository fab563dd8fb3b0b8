"""Why BCF's CATE intervals under-cover in Hahn et al.'s heterogeneous designs (issue #42): several
chains per fit, so that the split R-hat of every training row's CATE can be read, and the coverage of
chain 0 alone set beside the coverage of all chains pooled; optionally other priors or budgets.

Data and seeds are ``benchmarks/bcf.py``'s (``simulate``, seed ``1000 rep + 10 design + (n == 500)``),
so replication ``rep`` here is replication ``rep`` there.  Per fit: CATE RMSE, 95 % coverage,
mean width, squared bias (of the posterior mean) and mean posterior variance over the training rows,
ATE coverage, for the pooled draws and for chain 0; the split R-hat of each row's CATE (median, max,
share above 1.1); the mean ``|tau - 1|`` of the rows missed (where the misses are).

Usage::

    python benchmarks/bcf_coverage.py --n 250 --design nonlinear:heterogeneous --reps 0 8 \\
        --chains 4 --warmup 200 --samples 300 --params '{"alpha_tau": 0.5, "beta_tau": 2.0}'
    python benchmarks/bcf_coverage.py --table      # means per setting of bcf_coverage.jsonl

Rows are appended to ``benchmarks/results/bcf_coverage.jsonl``.
"""

from __future__ import annotations

import argparse
import collections
import json
import time
import warnings
from pathlib import Path

import numpy as np

from bcf import DESIGNS, _scores, simulate, split_rhat
from bdtree_jax.estimators.bcf import BCFRegressor

JSONL = Path(__file__).resolve().parent / "results" / "bcf_coverage.jsonl"


def scores(d: np.ndarray, tau: np.ndarray) -> dict:
    """d (D, n) CATE draws at the training rows, tau (n,) the truth: ``bcf._scores`` with the squared
    bias of the posterior mean and the mean posterior variance over the rows."""
    return dict(_scores(d, tau), bias2=float(np.mean((d.mean(0) - tau) ** 2)), pvar=float(np.mean(d.var(0))))


def fit(n: int, mu_kind: str, tau_kind: str, rep: int, chains: int, warmup: int, samples: int, params: dict) -> dict:
    seed = 1000 * rep + 10 * DESIGNS.index((mu_kind, tau_kind)) + (n == 500)
    X, y, z, pi, tau = simulate(n, mu_kind, tau_kind, np.random.default_rng(seed))
    t0 = time.time()
    options = {k: v for k, v in params.items() if k != "propensity"}
    if params.get("propensity") == "constant":  # the prognostic forest without the propensity: a column it cannot split
        pi = np.full(n, z.mean())
    model = BCFRegressor(num_warmup=warmup, num_samples=samples, num_chains=chains, seed=seed, progress=False,
                         **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, y, z, propensity=pi)
    d = model.posterior_.cate_draws(X).reshape(chains, samples, n)
    r = split_rhat(d)
    pooled = d.reshape(-1, n)
    lo, hi = np.quantile(pooled, [0.025, 0.975], axis=0)
    miss = ~((lo <= tau) & (tau <= hi))
    return dict(n=n, mu=mu_kind, tau=tau_kind, rep=rep, variant=params, chains=chains, W=warmup, S=samples,
                secs=time.time() - t0, pooled=scores(pooled, tau), chain0=scores(d[0], tau),
                rhat_med=float(np.median(r)), rhat_max=float(np.max(r)), rhat_gt11=float(np.mean(r > 1.1)),
                miss_abs_dev=float(np.mean(np.abs(tau - 1)[miss])) if miss.any() else None,
                all_abs_dev=float(np.mean(np.abs(tau - 1))))


def table() -> str:
    groups = collections.defaultdict(list)
    for r in map(json.loads, JSONL.read_text().splitlines()):
        groups[(r["n"], r["mu"], r["tau"], json.dumps(r["variant"]), r["chains"], r["W"], r["S"])].append(r)
    out = ["| n | design | params | chains x (warm-up + kept) | reps | pooled CATE cover | RMSE | width | "
           "bias^2 | post. var | ATE cover | chain 0 CATE cover | chain 0 ATE cover | R-hat median | "
           "rows R-hat > 1.1 | missed rows' mean abs(tau - 1) (all rows') |", "|" + "---|" * 16]
    for (n, mu, tau, params, c, w, s), v in groups.items():
        def m(f):
            return np.mean([f(r) for r in v])
        miss = [r["miss_abs_dev"] for r in v if r["miss_abs_dev"] is not None]
        out.append(f"| {n} | {mu} {tau} | {params} | {c} x ({w} + {s}) | {len(v)} | "
                   f"{m(lambda r: r['pooled']['cover']):.3f} | {m(lambda r: r['pooled']['rmse']):.3f} | "
                   f"{m(lambda r: r['pooled']['width']):.2f} | {m(lambda r: r['pooled']['bias2']):.2f} | "
                   f"{m(lambda r: r['pooled']['pvar']):.2f} | {m(lambda r: r['pooled']['ate_cover']):.2f} | "
                   f"{m(lambda r: r['chain0']['cover']):.3f} | {m(lambda r: r['chain0']['ate_cover']):.2f} | "
                   f"{m(lambda r: r['rhat_med']):.3f} | {m(lambda r: r['rhat_gt11']):.2f} | "
                   f"{np.mean(miss) if miss else float('nan'):.2f} ({m(lambda r: r['all_abs_dev']):.2f}) |")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=250)
    parser.add_argument("--design", default="nonlinear:heterogeneous", help="mu:tau, e.g. linear:homogeneous")
    parser.add_argument("--reps", type=int, nargs=2, default=[0, 8], help="first and one past the last")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--params", default="{}", help='BCFRegressor keyword arguments as JSON; '
                        '"propensity": "constant" gives the fit the share treated instead of the true propensity')
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    if not args.table:
        mu_kind, tau_kind = args.design.split(":")
        for rep in range(*args.reps):
            row = fit(args.n, mu_kind, tau_kind, rep, args.chains, args.warmup, args.samples, json.loads(args.params))
            with JSONL.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    print(table())


if __name__ == "__main__":
    main()
