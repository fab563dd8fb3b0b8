"""Survival BART against scikit-survival's random survival forest and Cox model (issue #41).

    PYTHONPATH=<dir with scikit-survival> python benchmarks/bart_survival.py --splits 3

Data: the German Breast Cancer Study Group 2 trial (GBSG2; 686 patients, 8 covariates of which 3
categorical, recurrence-free survival in days, 56 % censored), as scikit-survival ships it
(``sksurv.datasets.load_gbsg2``; Schumacher et al. 1994).  Each split holds out a stratified 25 %
(by the event) with ``seed = split``.  Metrics on the held-out rows: Harrell's concordance index
(ours, checked against ``sksurv.metrics.concordance_index_censored``) and the integrated Brier
score over the 10th-80th percentiles of the test times (``sksurv.metrics.integrated_brier_score``,
inverse-probability-of-censoring weighted from the training rows).  Models: ``bd.BARTSurvival``
(defaults: 200 trees, 2 chains x (250 + 500) sweeps; the table as it is, categorical columns
included), ``RandomSurvivalForest(n_estimators=500, min_samples_leaf=15)`` and
``CoxPHSurvivalAnalysis`` (categorical columns one-hot encoded for both).  Writes a Markdown table
to ``--out`` (default ``benchmarks/results/bart_survival.md``) with the command, machine and load.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
import warnings

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--splits", type=int, default=3)
    p.add_argument("--out", default="benchmarks/results/bart_survival.md")
    args = p.parse_args(argv)

    import pandas as pd
    from sklearn.model_selection import train_test_split
    from sksurv.datasets import load_gbsg2
    from sksurv.ensemble import RandomSurvivalForest
    from sksurv.linear_model import CoxPHSurvivalAnalysis
    from sksurv.metrics import concordance_index_censored, integrated_brier_score

    import bdtree_jax as bd
    from bdtree_jax.posterior.bart_survival import concordance_index

    X, y = load_gbsg2()
    event_field, time_field = y.dtype.names
    onehot = pd.get_dummies(X, drop_first=True).astype(float)
    rows, load_start = [], os.getloadavg()[0]
    for split in range(args.splits):
        train, test = train_test_split(np.arange(len(X)), test_size=0.25, random_state=split,
                                       stratify=y[event_field])
        y_train, y_test = y[train], y[test]
        times = np.percentile(y_test[time_field], np.linspace(10, 80, 15))
        models = {}
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", bd.ConvergenceWarning)
            ours = bd.BARTSurvival(seed=split, progress=False).fit(X.iloc[train], y_train)
        models["bd.BARTSurvival"] = (time.perf_counter() - start, -ours.predict(X.iloc[test]),
                                     ours.predict_survival_function(X.iloc[test], times))
        for name, model in [("RandomSurvivalForest", RandomSurvivalForest(n_estimators=500, min_samples_leaf=15,
                                                                          random_state=split, n_jobs=2)),
                            ("CoxPH", CoxPHSurvivalAnalysis())]:
            start = time.perf_counter()
            model.fit(onehot.iloc[train], y_train)
            seconds = time.perf_counter() - start
            curves = np.asarray([fn(times) for fn in model.predict_survival_function(onehot.iloc[test])])
            models[name] = (seconds, model.predict(onehot.iloc[test]), curves)
        for name, (seconds, risk, curves) in models.items():
            c = concordance_index(y_test[time_field], y_test[event_field], risk)
            c_sksurv = concordance_index_censored(y_test[event_field], y_test[time_field], risk)[0]
            assert abs(c - c_sksurv) < 1e-9, (c, c_sksurv)
            ibs = integrated_brier_score(y_train, y_test, curves, times)
            rows.append(dict(split=split, model=name, c_index=c, ibs=ibs, seconds=seconds))
            print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    summary = table.groupby("model").agg(c_index=("c_index", "mean"), c_sd=("c_index", "std"), ibs=("ibs", "mean"),
                                         ibs_sd=("ibs", "std"), seconds=("seconds", "mean"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [
        "# Survival BART vs scikit-survival on GBSG2 (issue #41)", "",
        f"Command: `python benchmarks/bart_survival.py --splits {args.splits}` (git {commit}; "
        f"scikit-survival {__import__('sksurv').__version__}); {platform.machine()}, {os.cpu_count()} CPUs, "
        f"1-minute load {load_start:.1f} at start, {os.getloadavg()[0]:.1f} at end (seconds are fit wall "
        "times under that load; ours include compiling).", "",
        "Held-out 25 % per split (stratified by the event, seed = split). Higher C is better, lower "
        "integrated Brier score (IBS) is better.", "",
        "| model | C-index (mean ± sd) | IBS (mean ± sd) | fit s |", "|---|---:|---:|---:|",
    ]
    for name, r in summary.iterrows():
        lines.append(f"| {name} | {r.c_index:.3f} ± {r.c_sd:.3f} | {r.ibs:.4f} ± {r.ibs_sd:.4f} | {r.seconds:.1f} |")
    lines += ["", "Per split:", "", "| split | model | C | IBS | s |", "|---:|---|---:|---:|---:|"]
    lines += [f"| {r.split} | {r.model} | {r.c_index:.3f} | {r.ibs:.4f} | {r.seconds:.1f} |" for r in table.itertuples()]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
