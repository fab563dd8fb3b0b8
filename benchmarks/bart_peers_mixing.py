"""BART's mixing of f against its peers (issue #40): ESS of the posterior draws of f at test rows
per sweep and per second, and test RMSE, for ``bd.BARTRegressor`` (defaults and variants),
bartz and stochtree (its grow-from-root warm start, GFR, then MCMC), one chain each, in one
process on Friedman #1.

    python benchmarks/bart_peers_mixing.py --n-train 10000 --warmup 200 --samples 800
    python benchmarks/bart_peers_mixing.py --variants "" "k=3" --peers bartz stochtree

bartz 0.13 and stochtree 0.4.5 are not dependencies of the project: install them where this
script can import them (e.g. ``pip install --target DIR bartz==0.13.0 stochtree==0.4.5`` and
``PYTHONPATH=DIR``); a peer that cannot be imported is reported and skipped.

What is measured, per sampler: the bulk ESS (ArviZ, one chain) of the S saved draws of f at each of
the test rows, its median over the rows (``ess``) and ``ess / S`` (per sweep, which the machine's
load does not change); the wall time of the saved sweeps from a second, identical fit in the same
process (the first compiles; stochtree compiles nothing, its GFR sweeps are counted with the
warm-up); ESS per second = median ESS / that time; the test RMSE of the posterior mean against
the noise-free f; the mean of sigma's draws.  Our fits and bartz's time warm-up and saved sweeps
together; the per-second figure takes the saved fraction of the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bart_speed import load1, make_friedman  # noqa: E402


def _ess_per_row(draws: np.ndarray) -> np.ndarray:
    """(R,) bulk ESS of (S, R) draws of one chain."""
    import arviz as az

    return np.array([float(az.ess(draws[None, :, r], method="bulk")) for r in range(draws.shape[1])])


def _kwargs(spec: str) -> dict:
    out = {}
    for item in filter(None, spec.split(",")):
        key, value = item.split("=")
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


def run_ours(X, y, X_test, args, spec: str) -> dict:
    import bdtree_jax as bd

    kw = dict(num_trees=args.trees, num_warmup=args.warmup, num_samples=args.samples, num_chains=1,
              seed=args.seed, progress=False, **_kwargs(spec))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bd.BARTRegressor(**kw).fit(X, y)  # compiles
        load = load1()
        t = time.perf_counter()
        est = bd.BARTRegressor(**kw).fit(X, y)
        wall = time.perf_counter() - t
    draws = np.asarray(est.posterior_.predict_draws(X_test)).reshape(-1, len(X_test))
    return dict(draws=draws, wall=wall, saved_wall=wall * args.samples / (args.warmup + args.samples),
                sigma=float(np.mean(est.posterior_.sigma)), load=0.5 * (load + load1()))


def run_bartz(X, y, X_test, args) -> dict:
    import jax

    import bartz

    def fit():
        b = bartz.Bart(np.ascontiguousarray(np.asarray(X, np.float32).T), np.asarray(y, np.float32),
                       num_trees=args.trees, num_chains=1, n_burn=args.warmup, n_save=args.samples, printevery=None,
                       seed=args.seed)
        jax.block_until_ready(b._mcmc_state)  # noqa: SLF001 - the run is asynchronous otherwise
        return b

    fit()
    load = load1()
    t = time.perf_counter()
    b = fit()
    wall = time.perf_counter() - t
    draws = np.asarray(b.predict(np.ascontiguousarray(np.asarray(X_test, np.float32).T), kind="mean_samples"))
    return dict(draws=draws.reshape(args.samples, -1), wall=wall,
                saved_wall=wall * args.samples / (args.warmup + args.samples),
                sigma=float(np.mean(np.asarray(b.get_error_sdev()))), load=0.5 * (load + load1()))


def run_stochtree(X, y, X_test, args) -> dict:
    from stochtree import BARTModel

    load = load1()
    t = time.perf_counter()
    model = BARTModel()
    model.sample(X_train=X, y_train=y, X_test=X_test, num_gfr=args.gfr, num_burnin=0,
                 num_mcmc=args.samples, general_params={"random_seed": args.seed},
                 mean_forest_params={"num_trees": args.trees})
    wall = time.perf_counter() - t
    draws = np.asarray(model.y_hat_test).T  # (S, R)
    sigma = np.sqrt(np.asarray(model.global_var_samples)) if model.global_var_samples is not None else np.nan
    return dict(draws=draws, wall=wall, saved_wall=wall * args.samples / (args.gfr + args.samples),
                sigma=float(np.mean(sigma)), load=0.5 * (load + load1()))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-train", type=int, default=10_000)
    parser.add_argument("--n-test", type=int, default=200)
    parser.add_argument("--n-features", type=int, default=10)
    parser.add_argument("--noise", type=float, default=1.0)
    parser.add_argument("--trees", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--samples", type=int, default=800)
    parser.add_argument("--gfr", type=int, default=10, help="stochtree's grow-from-root sweeps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--variants", nargs="*", default=[""],
                        help="our BARTRegressor variants, each 'key=value,key=value' ('' = defaults)")
    parser.add_argument("--peers", nargs="*", default=["bartz", "stochtree"])
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    X, y, _ = make_friedman(args.n_train, args.n_features, args.noise, seed=args.data_seed)
    X_test, _, f_test = make_friedman(args.n_test, args.n_features, args.noise, seed=args.data_seed + 1)
    rows = []
    runs = [(f"ours {v}".strip() if v else "ours defaults", lambda v=v: run_ours(X, y, X_test, args, v))
            for v in args.variants]
    runs += [(p, {"bartz": lambda: run_bartz(X, y, X_test, args),
                  "stochtree": lambda: run_stochtree(X, y, X_test, args)}[p]) for p in args.peers]
    for name, run in runs:
        try:
            r = run()
        except ImportError as e:
            print(f"{name}: skipped ({e})", flush=True)
            continue
        ess = _ess_per_row(r["draws"])
        rmse = float(np.sqrt(np.mean((r["draws"].mean(0) - f_test) ** 2)))
        row = dict(sampler=name, median_ess=float(np.median(ess)), ess_per_sweep=float(np.median(ess)) / args.samples,
                   ess_per_s=float(np.median(ess)) / r["saved_wall"], wall=r["wall"], saved_wall=r["saved_wall"],
                   rmse=rmse, sigma=r["sigma"], load=r["load"])
        rows.append(row)
        print(json.dumps(row), flush=True)
    best_peer = max((r for r in rows if not r["sampler"].startswith("ours")), key=lambda r: r["ess_per_s"], default=None)
    print(f"\nFriedman #1, n = {args.n_train} train / {args.n_test} test rows, {args.trees} trees, "
          f"{args.warmup} + {args.samples} sweeps, one chain, seed {args.seed}; os.cpu_count() = {os.cpu_count()}")
    print("| sampler | median ESS of f | ESS per sweep | ESS/s | vs best peer | test RMSE | mean sigma | fit wall s | load |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = r["ess_per_s"] / best_peer["ess_per_s"] if best_peer else float("nan")
        print(f"| {r['sampler']} | {r['median_ess']:.1f} | {r['ess_per_sweep']:.4f} | {r['ess_per_s']:.2f} | "
              f"{ratio:.2f}x | {r['rmse']:.3f} | {r['sigma']:.3f} | {r['wall']:.1f} | {r['load']:.1f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(args=vars(args), rows=rows), fh, indent=1)


if __name__ == "__main__":
    main()
