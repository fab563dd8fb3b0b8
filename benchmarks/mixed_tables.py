"""Issue #26's yardsticks on tables with categorical columns and missing values (shipped in
``bdtree_jax.datasets``), ours against scikit-learn's decision trees and against ours on the same
data one-hot encoded and mean-imputed.

* ``penguins``: species from every other column (raw: strings, NaN), 5-fold stratified CV,
  accuracy of ``BayesianTreeClassifier(method="cgm")`` (posterior predictive), of scikit-learn's
  ``DecisionTreeClassifier`` (NaN handled natively, categorical columns ordinal-encoded) tuned over
  ``max_depth`` x ``min_samples_leaf`` by an inner 5-fold CV, and of ours on the one-hot encoded,
  mean-imputed table (means of the training fold).
* ``airquality``: Ozone (rows without it dropped), 5-fold CV, RMSE, ``BayesianTreeRegressor`` and
  ``BARTRegressor`` against ``DecisionTreeRegressor`` (tuned as above) and against themselves on
  the one-hot/imputed table.
* ``diamonds``: ``log(price)``, a 80/20 split, ``BARTRegressor`` with 200 trees and
  ``--diamond-sweeps`` kept sweeps: seconds per sweep (wall of the fit / sweeps, compilation
  included once) and test RMSE, native categorical columns against one-hot encoding.

Run: ``python benchmarks/mixed_tables.py [--sections penguins airquality diamonds] [--out results/...]``;
writes JSON and a markdown table (``--out`` stem, default ``benchmarks/results/mixed_tables``).
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
import pandas as pd

_ROOT = Path(__file__).resolve().parents[1]


def _onehot_imputed(train: pd.DataFrame, test: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """One-hot encode the non-numeric columns (levels of the training fold) and mean-impute."""
    both = pd.get_dummies(pd.concat([train, test], keys=["train", "test"]), dummy_na=False, dtype=float)
    tr, te = both.loc["train"].astype(float), both.loc["test"].astype(float)
    means = tr.mean()
    return tr.fillna(means).to_numpy(), te.fillna(means).to_numpy()


def _ordinal(train: pd.DataFrame, test: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Non-numeric columns ordinal-encoded (NaN kept), for scikit-learn's trees."""
    from sklearn.preprocessing import OrdinalEncoder

    cat = [c for c in train.columns if not pd.api.types.is_numeric_dtype(train[c]) or pd.api.types.is_bool_dtype(train[c])]
    tr, te = train.copy(), test.copy()
    if cat:
        enc = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=np.nan, encoded_missing_value=np.nan)
        tr[cat] = enc.fit_transform(train[cat].astype(object))
        te[cat] = enc.transform(test[cat].astype(object))
    return tr.to_numpy(float), te.to_numpy(float)


def _sklearn_tree(kind: str, seed: int):
    from sklearn.model_selection import GridSearchCV
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    grid = {"max_depth": [2, 3, 4, 5, 6, 8, None], "min_samples_leaf": [1, 2, 5, 10]}
    base = DecisionTreeClassifier(random_state=seed) if kind == "clf" else DecisionTreeRegressor(random_state=seed)
    return GridSearchCV(base, grid, cv=5, scoring=None if kind == "clf" else "neg_root_mean_squared_error")


def _rmse(a, b) -> float:
    return float(np.sqrt(np.mean((np.asarray(a, float) - np.asarray(b, float)) ** 2)))


def section_penguins(args) -> dict:
    os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
    import bdtree_jax as bd
    from sklearn.model_selection import StratifiedKFold

    X, y = bd.datasets.load("penguins")
    X = X.reset_index(drop=True)
    y = pd.Series(np.asarray(y)).reset_index(drop=True)
    rows = []
    for fold, (tr, te) in enumerate(StratifiedKFold(5, shuffle=True, random_state=args.seed).split(X, y)):
        Xtr, Xte, ytr, yte = X.iloc[tr], X.iloc[te], y.iloc[tr], y.iloc[te]
        kw = dict(method="cgm", num_warmup=args.warmup, num_samples=args.samples, num_chains=args.chains,
                  seed=args.seed)
        t = time.perf_counter()
        native = bd.BayesianTreeClassifier(**kw).fit(Xtr, ytr).score(Xte, yte)
        t_native = time.perf_counter() - t
        oh_tr, oh_te = _onehot_imputed(Xtr, Xte)
        onehot = bd.BayesianTreeClassifier(**kw).fit(oh_tr, ytr).score(oh_te, yte)
        o_tr, o_te = _ordinal(Xtr, Xte)
        sk = _sklearn_tree("clf", args.seed).fit(o_tr, ytr)
        rows.append(dict(fold=fold, ours_native=native, ours_onehot=onehot, sklearn=float(sk.score(o_te, yte)),
                         sklearn_params=sk.best_params_, seconds_native=t_native))
        print(f"[penguins] fold {fold}: native {native:.3f}, one-hot {onehot:.3f}, sklearn {rows[-1]['sklearn']:.3f}",
              flush=True)
    return dict(rows=rows, mean={k: float(np.mean([r[k] for r in rows])) for k in ("ours_native", "ours_onehot", "sklearn")})


def section_airquality(args) -> dict:
    import bdtree_jax as bd
    from sklearn.model_selection import KFold

    X, y = bd.datasets.load("airquality")
    X = X.reset_index(drop=True)
    y = np.asarray(y, float)
    rows = []
    for fold, (tr, te) in enumerate(KFold(5, shuffle=True, random_state=args.seed).split(X)):
        Xtr, Xte, ytr, yte = X.iloc[tr], X.iloc[te], y[tr], y[te]
        oh_tr, oh_te = _onehot_imputed(Xtr, Xte)
        row = dict(fold=fold)
        for name, make in (("cart", lambda: bd.BayesianTreeRegressor(
                method="cgm", num_warmup=args.warmup, num_samples=args.samples, num_chains=args.chains, seed=args.seed)),
                           ("bart", lambda: bd.BARTRegressor(num_warmup=args.bart_warmup, num_samples=args.bart_samples,
                                                             num_chains=args.chains, seed=args.seed, progress=False))):
            row[f"{name}_native"] = _rmse(make().fit(Xtr, ytr).predict(Xte), yte)
            row[f"{name}_onehot"] = _rmse(make().fit(oh_tr, ytr).predict(oh_te), yte)
        o_tr, o_te = _ordinal(Xtr, Xte)
        sk = _sklearn_tree("reg", args.seed).fit(o_tr, ytr)
        row.update(sklearn=_rmse(sk.predict(o_te), yte), sklearn_params=sk.best_params_)
        rows.append(row)
        print(f"[airquality] fold {fold}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()
                                                         if isinstance(v, float)), flush=True)
    keys = [k for k in rows[0] if isinstance(rows[0][k], float)]
    return dict(rows=rows, mean={k: float(np.mean([r[k] for r in rows])) for k in keys})


def section_diamonds(args) -> dict:
    import bdtree_jax as bd
    from sklearn.model_selection import train_test_split

    X, y = bd.datasets.load("diamonds")
    y = np.log(np.asarray(y, float))
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=args.seed)
    out = {}
    oh_tr, oh_te = _onehot_imputed(Xtr, Xte)
    for name, (a, b) in (("native", (Xtr, Xte)), ("onehot", (oh_tr, oh_te))):
        W, S = args.diamond_warmup, args.diamond_sweeps
        est = bd.BARTRegressor(num_trees=200, num_warmup=W, num_samples=S, num_chains=1, seed=args.seed,
                               progress=False)
        t = time.perf_counter()
        est.fit(a, ytr)
        wall = time.perf_counter() - t
        out[name] = dict(seconds_per_sweep=wall / (W + S), wall=wall, rmse=_rmse(est.predict(b), yte), sweeps=W + S)
        print(f"[diamonds] {name}: {out[name]}", flush=True)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", nargs="+", default=["penguins", "airquality", "diamonds"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--bart-warmup", type=int, default=250)
    parser.add_argument("--bart-samples", type=int, default=500)
    parser.add_argument("--diamond-warmup", type=int, default=100)
    parser.add_argument("--diamond-sweeps", type=int, default=1000)
    parser.add_argument("--out", default=str(_ROOT / "benchmarks" / "results" / "mixed_tables"))
    args = parser.parse_args(argv)
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=_ROOT, capture_output=True, text=True).stdout.strip()
    results = dict(argv=argv, args=vars(args), git=git, machine=platform.platform(), cpus=os.cpu_count(),
                   load_start=os.getloadavg()[0])
    for s in args.sections:
        t = time.perf_counter()
        results[s] = globals()[f"section_{s}"](args)
        results[s]["seconds"] = time.perf_counter() - t
    results["load_end"] = os.getloadavg()[0]
    Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=1, default=str))
    lines = [f"# Categorical and missing values on real tables (git {git}, {os.cpu_count()} CPUs, "
             f"load {results['load_start']:.1f} -> {results['load_end']:.1f})", ""]
    for s in ("penguins", "airquality"):
        if s in results:
            lines += [f"## {s} (5-fold CV; mean over folds)", "", "| model | score |", "|---|---:|"]
            lines += [f"| {k} | {v:.4f} |" for k, v in results[s]["mean"].items()] + [""]
    if "diamonds" in results:
        lines += ["## diamonds: BART 200 trees, log(price)", "", "| encoding | s / sweep | test RMSE |", "|---|---:|---:|"]
        lines += [f"| {k} | {v['seconds_per_sweep']:.4f} | {v['rmse']:.4f} |" for k, v in results["diamonds"].items()
                  if isinstance(v, dict)]
    Path(args.out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
