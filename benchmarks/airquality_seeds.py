"""Issue #26: is the single-tree gap on airquality (native missing-value routing vs mean
imputation, ``BayesianTreeRegressor(method="cgm")``) the chains' variability or a cost of routing
the missing cells?

Airquality has no categorical column; only ``Solar.R`` has missing cells (5 of 116 rows), so the
native and the imputed fits differ through those cells alone. For every fold of the same 5-fold
split as ``mixed_tables.py`` and several seeds, both fits run with the same options; the test RMSE
is reported over all test rows and separately over the test rows with and without a missing
``Solar.R``, and the per-seed CV means give the spread a single run has.

Run: ``python benchmarks/airquality_seeds.py [--seeds 0 1 2 3] [--chains 4] [--out ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np

_ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> None:
    os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
    import bdtree_jax as bd
    from mixed_tables import _onehot_imputed
    from sklearn.model_selection import KFold

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--out", default=str(_ROOT / "benchmarks" / "results" / "airquality_seeds"))
    args = p.parse_args(argv)

    X, y = bd.datasets.load("airquality")
    X = X.reset_index(drop=True)
    y = np.asarray(y, float)
    t0, load0 = time.time(), os.getloadavg()[0]
    rows = []
    for seed in args.seeds:
        for fold, (tr, te) in enumerate(KFold(5, shuffle=True, random_state=0).split(X)):
            Xtr, Xte, ytr, yte = X.iloc[tr], X.iloc[te], y[tr], y[te]
            oh_tr, oh_te = _onehot_imputed(Xtr, Xte)
            miss = Xte["Solar.R"].isna().to_numpy()
            row = dict(seed=seed, fold=fold, n_test=len(te), n_test_missing=int(miss.sum()),
                       n_train_missing=int(Xtr["Solar.R"].isna().sum()))
            for name, (a, b) in dict(native=(Xtr, Xte), imputed=(oh_tr, oh_te)).items():
                est = bd.BayesianTreeRegressor(method="cgm", num_warmup=args.warmup, num_samples=args.samples,
                                               num_chains=args.chains, seed=seed)
                sq = (est.fit(a, ytr).predict(b) - yte) ** 2
                row[f"{name}_sse"] = float(sq.sum())
                row[f"{name}_sse_missing"] = float(sq[miss].sum())
                row[f"{name}_sse_observed"] = float(sq[~miss].sum())
            rows.append(row)
            print(json.dumps(row), flush=True)

    def rmse(rs, key, n):
        return float(np.sqrt(sum(r[key] for r in rs) / sum(r[n] for r in rs)))

    summary = {}
    for name in ("native", "imputed"):
        per_seed = [np.sqrt(np.mean([r[f"{name}_sse"] / r["n_test"] for r in rows if r["seed"] == s]))
                    for s in args.seeds]
        summary[name] = dict(
            rmse_pooled=rmse(rows, f"{name}_sse", "n_test"),
            rmse_missing_rows=(float(np.sqrt(sum(r[f"{name}_sse_missing"] for r in rows)
                                             / max(1, sum(r["n_test_missing"] for r in rows))))),
            rmse_observed_rows=float(np.sqrt(sum(r[f"{name}_sse_observed"] for r in rows)
                                             / sum(r["n_test"] - r["n_test_missing"] for r in rows))),
            per_seed_cv_mse_rmse=[float(v) for v in per_seed],
        )
    rev = subprocess.run(["git", "-C", str(_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    meta = dict(command="python benchmarks/airquality_seeds.py " + " ".join(argv or []), git=rev,
                cpus=os.cpu_count(), machine=platform.machine(), wall_s=round(time.time() - t0, 1),
                load_start=load0, load_end=os.getloadavg()[0], args=vars(args))
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(dict(meta=meta, summary=summary, rows=rows), indent=1))
    lines = [f"# Airquality, single tree (cgm): native missing-cell routing vs mean imputation, by seed (git {rev})",
             "", f"- command: `{meta['command']}`; {meta['cpus']} CPUs; load {load0:.1f} -> {meta['load_end']:.1f}; "
             f"wall {meta['wall_s']} s", f"- {args.chains} chains x ({args.warmup} + {args.samples}) per fit; "
             f"seeds {args.seeds}; the same 5 folds (KFold(5, shuffle=True, random_state=0)) for every seed", "",
             "| fit | RMSE, all test rows (pooled over seeds) | rows with Solar.R missing | rows with Solar.R observed "
             "| per-seed CV RMSE (sqrt of the mean fold MSE) |", "|---|---:|---:|---:|---|"]
    for name, s in summary.items():
        lines.append(f"| {name} | {s['rmse_pooled']:.2f} | {s['rmse_missing_rows']:.2f} | "
                     f"{s['rmse_observed_rows']:.2f} | {', '.join(f'{v:.2f}' for v in s['per_seed_cv_mse_rmse'])} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main(sys.argv[1:])
