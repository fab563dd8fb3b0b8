"""Multiclass BART (Murray's log-linear BART in ``bd.BARTClassifier``) against a one-vs-rest BART
built from the binary probit classifier and scikit-learn's HistGradientBoostingClassifier tuned by
grid search (issue #41, item 1).

    python benchmarks/bart_multiclass.py --splits 3 --num-trees 50
    python benchmarks/bart_multiclass.py --dataset iris --splits 5 --append

Data (``--dataset``): the UCI wine table (178 wines, 13 chemical measurements, 3 cultivars; nearly
separable) or UCI iris (150 flowers, 4 measurements, 3 species; two overlap), ``bd.datasets.load``.
Each split holds out a stratified 25 % with ``seed = split``; all models see the same
rows.  Models: ``bd.BARTClassifier(num_trees=T)`` on the 3 classes (T trees per class), one-vs-rest
BART (one binary ``bd.BARTClassifier(num_trees=T)`` per class on ``y == k``, the three probabilities
``P_k`` normalised to sum 1: the same 3 T trees in all), both ``--num-chains`` (2) chains x (``--warmup`` +
``--samples``) sweeps; ``HistGradientBoostingClassifier`` with ``GridSearchCV`` (3-fold, log-loss)
over ``learning_rate`` {0.03, 0.1, 0.3} x ``max_leaf_nodes`` {4, 8, 16} x ``max_iter`` {100, 300}.
``--models`` picks among those (``multiclass``, ``ovr``, ``hgb``) and ``cv``: multiclass BART with
``k`` chosen among ``--k`` by ``GridSearchCV`` (3-fold, log-loss) on the training rows, refitted on
them (the boosting grid's counterpart; 3 x len(k) + 1 fits per split).
Metrics on the held-out rows: log-loss (lower is better) and accuracy; for multiclass BART also the
largest split R-hat (ArviZ, rank-normalised) of its class probabilities at the held-out rows over
the chains (a mixing check).  Writes a Markdown table to ``--out`` (default
``benchmarks/results/bart_multiclass.md``) with the command, machine and load; ``--append`` adds it
as a new dated section at the end of the file instead.
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


def _max_rhat(draws: np.ndarray, num_chains: int) -> float:
    """The largest rank-normalised split R-hat (ArviZ) over the (C * S, n, K) probability draws."""
    import arviz as az

    C = num_chains
    values = draws.reshape(C, draws.shape[0] // C, -1)
    return float(np.nanmax(az.rhat(az.convert_to_dataset({"p": values}))["p"].values))


def _rows(split, probs, rhat, notes, yte, classes) -> list[dict]:
    """One result row per model of a split (printed as it goes)."""
    from sklearn.metrics import accuracy_score, log_loss

    rows = []
    for name, (seconds, prob) in probs.items():
        rows.append(dict(split=split, model=name, log_loss=log_loss(yte, prob, labels=classes),
                         accuracy=accuracy_score(yte, classes[np.argmax(prob, 1)]), seconds=seconds,
                         rhat=rhat.get(name, np.nan), note=notes.get(name, "")))
        print(rows[-1], flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", choices=["wine", "iris"], default="wine")
    p.add_argument("--splits", type=int, default=3)
    p.add_argument("--num-chains", type=int, default=2)
    p.add_argument("--num-trees", type=int, default=50)
    p.add_argument("--warmup", type=int, default=250)
    p.add_argument("--samples", type=int, default=500)
    p.add_argument("--k", type=float, nargs="+", default=[2.0],
                   help="BART's leaf prior k (both BART models; several values: one row each, a sensitivity "
                        "check on the same splits, not a choice by the test rows)")
    p.add_argument("--models", nargs="+", choices=["multiclass", "ovr", "cv", "hgb"],
                   default=["multiclass", "ovr", "hgb"],
                   help="cv: multiclass BART with k chosen among --k by 3-fold CV log-loss on the training rows "
                        "(GridSearchCV, as the boosting's grid)")
    p.add_argument("--out", default="benchmarks/results/bart_multiclass.md")
    p.add_argument("--append", action="store_true", help="add a dated section to --out instead of rewriting it")
    args = p.parse_args(argv)

    import pandas as pd
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.model_selection import GridSearchCV, train_test_split

    import bdtree_jax as bd

    X, y = bd.datasets.load(args.dataset)
    y = np.asarray(y)
    classes = np.unique(y)
    run = dict(num_trees=args.num_trees, num_warmup=args.warmup, num_samples=args.samples, num_chains=args.num_chains,
               progress=False)
    tag = (lambda k: f", k={k:g}") if len(args.k) > 1 else (lambda k: "")
    rows, load_start = [], os.getloadavg()[0]
    for split in range(args.splits):
        train, test = train_test_split(np.arange(len(X)), test_size=0.25, random_state=split, stratify=y)
        Xtr, Xte, ytr, yte = X.iloc[train], X.iloc[test], y[train], y[test]
        probs, rhat, notes = {}, {}, {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", bd.ConvergenceWarning)
            for k in args.k if "multiclass" in args.models else ():
                start = time.perf_counter()
                multi = bd.BARTClassifier(seed=split, k=k, **run).fit(Xtr, ytr)
                name = f"BART multiclass (log-linear{tag(k)})"
                probs[name] = (time.perf_counter() - start, multi.predict_proba(Xte))
                rhat[name] = _max_rhat(multi.posterior_.predict_proba_draws(Xte), args.num_chains)
            for k in args.k if "ovr" in args.models else ():
                start = time.perf_counter()
                ovr = np.stack([bd.BARTClassifier(seed=split, k=k, **run).fit(Xtr, ytr == c).predict_proba(Xte)[:, 1]
                                for c in classes], axis=1)
                probs[f"BART one-vs-rest (probit{tag(k)})"] = (time.perf_counter() - start,
                                                               ovr / ovr.sum(1, keepdims=True))
            if "cv" in args.models:
                start = time.perf_counter()
                cv = GridSearchCV(bd.BARTClassifier(seed=split, **run), dict(k=list(args.k)), cv=3,
                                  scoring="neg_log_loss", n_jobs=1).fit(Xtr, ytr)
                name = "BART multiclass (k by 3-fold CV)"
                probs[name] = (time.perf_counter() - start, cv.predict_proba(Xte))
                rhat[name] = _max_rhat(cv.best_estimator_.posterior_.predict_proba_draws(Xte), args.num_chains)
                notes[name] = str(cv.best_params_)
        if "hgb" not in args.models:
            rows += _rows(split, probs, rhat, notes, yte, classes)
            continue
        start = time.perf_counter()
        grid = GridSearchCV(HistGradientBoostingClassifier(early_stopping=False, random_state=split),
                            dict(learning_rate=[0.03, 0.1, 0.3], max_leaf_nodes=[4, 8, 16], max_iter=[100, 300]),
                            cv=3, scoring="neg_log_loss", n_jobs=1).fit(Xtr, ytr)
        probs["HistGradientBoosting (grid search)"] = (time.perf_counter() - start, grid.predict_proba(Xte))
        notes["HistGradientBoosting (grid search)"] = str(grid.best_params_)
        rows += _rows(split, probs, rhat, notes, yte, classes)
    table = pd.DataFrame(rows)
    summary = table.groupby("model", sort=False).agg(log_loss=("log_loss", "mean"), ll_sd=("log_loss", "std"),
                                                     accuracy=("accuracy", "mean"), seconds=("seconds", "mean"),
                                                     rhat=("rhat", "max"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    cmd = (f"python benchmarks/bart_multiclass.py --dataset {args.dataset} --splits {args.splits} --num-trees "
           f"{args.num_trees} --num-chains {args.num_chains} --warmup {args.warmup} --samples {args.samples} "
           f"--k {' '.join(f'{k:g}' for k in args.k)} --models {' '.join(args.models)}"
           f"{' --append' if args.append else ''}")
    about = {"wine": "UCI wine (178 rows, 13 features, 3 classes)",
             "iris": "UCI iris (150 rows, 4 features, 3 classes)"}
    title = f"Multiclass BART vs one-vs-rest BART and gradient boosting on {args.dataset} (issue #41)"
    lines = [
        f"## {time.strftime('%Y-%m-%d', time.gmtime())}: {title}" if args.append else f"# {title}", "",
        f"Command: `{cmd}` (git {commit}); {platform.machine()}, {os.cpu_count()} CPUs, 1-minute load "
        f"{load_start:.1f} at start, {os.getloadavg()[0]:.1f} at end (seconds are fit wall times under that load; "
        "BART's include compiling).", "",
        f"{about[args.dataset]}; held-out 25 % per split (stratified, seed = split). BART: "
        f"{args.num_trees} trees per class (one-vs-rest: per binary model), {args.num_chains} chains x "
        f"({args.warmup} + "
        f"{args.samples}) sweeps, leaf prior k as named (several k: a sensitivity check on the same splits, "
        "not tuned on the test rows). Lower log-loss is better.", "",
        "| model | test log-loss (mean ± sd) | accuracy | fit s | max R-hat (test P) |", "|---|---:|---:|---:|---:|",
    ]
    for name, r in summary.iterrows():
        rh = "" if np.isnan(r.rhat) else f"{r.rhat:.3f}"
        lines.append(f"| {name} | {r.log_loss:.4f} ± {r.ll_sd:.4f} | {r.accuracy:.3f} | {r.seconds:.1f} | {rh} |")
    lines += ["", "Per split:", "", "| split | model | log-loss | accuracy | s | R-hat | grid choice |",
              "|---:|---|---:|---:|---:|---:|---|"]
    lines += [f"| {r.split} | {r.model} | {r.log_loss:.4f} | {r.accuracy:.3f} | {r.seconds:.1f} | "
              f"{'' if np.isnan(r.rhat) else f'{r.rhat:.3f}'} | {r.note} |" for r in table.itertuples()]
    with open(args.out, "a" if args.append else "w") as f:
        f.write(("\n" if args.append else "") + "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
