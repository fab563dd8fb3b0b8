"""DART (``sparse=True``) against BART on Friedman #1 with 100 noise features (issue 41, item 5).

Friedman #1 (``sklearn.datasets.make_friedman1``: ``y = 10 sin(pi x0 x1) + 20 (x2 - 1/2)**2 + 10 x3
+ 5 x4 + N(0, 1)``, every ``x ~ U[0, 1]``) with ``5 + 100`` features (the 100 beyond the first 5 are
noise), ``--n`` training rows and ``--n-test`` test rows.  ``BARTRegressor`` with and without
``sparse=True``, the same seed and settings, in one run; reports each feature's posterior inclusion
probability (:attr:`~bdtree_jax.BARTRegressor.variable_inclusion_`: the share of kept draws in which
some tree splits on the feature), the test RMSE of the posterior mean (against the noisy test ``y``
and against the noise-free function), sigma and the wall time (compile included; "under load" on a
shared machine)::

    python benchmarks/dart_friedman.py --md benchmarks/results/dart_friedman.md

The issue's targets: the 5 true features' inclusion >= 0.9, every noise feature's <= 0.1, and a
test RMSE better than BART without ``sparse``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402

N_TRUE, N_NOISE = 5, 100


def friedman(n: int, n_test: int, seed: int):
    """Train and test sets of Friedman #1 with ``N_NOISE`` noise features, and the test set's
    noise-free function."""
    from sklearn.datasets import make_friedman1

    X, y = make_friedman1(n_samples=n + n_test, n_features=N_TRUE + N_NOISE, noise=1.0, random_state=seed)
    f = (10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4])
    return X[:n], y[:n], X[n:], y[n:], f[n:]


def fit_one(sparse: bool, X, y, Xt, yt, ft, args) -> dict:
    import bdtree_jax as bd

    reg = bd.BARTRegressor(num_trees=args.trees, num_warmup=args.warmup, num_samples=args.samples,
                           num_chains=args.chains, seed=args.seed, sparse=sparse, tree_sampler=args.tree_sampler)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reg.fit(X, y)
    wall = time.perf_counter() - t0
    pred = reg.predict(Xt)
    out = dict(sparse=sparse, wall_s=wall, load_before=load,
               rmse_test=float(np.sqrt(np.mean((pred - yt) ** 2))),
               rmse_function=float(np.sqrt(np.mean((pred - ft) ** 2))),
               sigma=float(np.mean(reg.posterior_.sigma)),
               inclusion=reg.variable_inclusion_.tolist(),
               chain_inclusion=(reg.posterior_.variable_counts() > 0).mean(1).tolist(),  # (C, F)
               split_share=reg.feature_importances_.tolist(),
               warnings=[str(w.message).split(".")[0] for w in caught])
    if sparse:
        out.update(split_prob=reg.split_probs_.reshape(-1, X.shape[1]).mean(0).tolist(),
                   theta=float(np.mean(reg.theta_)), s_acceptance=reg.s_acceptance_,
                   theta_acceptance=reg.theta_acceptance_)
    return out


def report(results: dict) -> str:
    a = results["args"]
    lines = [
        "# DART on Friedman #1 with 100 noise features",
        "",
        f"`python benchmarks/dart_friedman.py` (n = {a['n']} training rows, {a['n_test']} test rows, "
        f"{N_TRUE} true + {N_NOISE} noise features, {a['trees']} trees, tree_sampler=\"{a.get('tree_sampler', 'grow-prune')}\", "
        f"{a['chains']} chains x "
        f"({a['warmup']} warm-up + {a['samples']} kept) sweeps, seed {a['seed']}; {results['machine']}, "
        "wall times under load on a shared machine, compile included).",
        "",
        "| | test RMSE (noisy y) | RMSE vs f(x) | mean sigma | min inclusion, true | max inclusion, noise | "
        "noise features > 0.1 | max noise inclusion per chain | wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["fits"]:
        inc = np.asarray(r["inclusion"])
        per_chain = ", ".join(f"{v:.3f}" for v in np.asarray(r["chain_inclusion"])[:, N_TRUE:].max(1))
        lines.append(f"| {'DART (sparse=True)' if r['sparse'] else 'BART'} | {r['rmse_test']:.3f} | "
                     f"{r['rmse_function']:.3f} | {r['sigma']:.3f} | {inc[:N_TRUE].min():.3f} | "
                     f"{inc[N_TRUE:].max():.3f} | {int(np.sum(inc[N_TRUE:] > 0.1))} | {per_chain} | {r['wall_s']:.0f} |")
    dart = next(r for r in results["fits"] if r["sparse"])
    bart = next(r for r in results["fits"] if not r["sparse"])
    inc_d, inc_b = np.asarray(dart["inclusion"]), np.asarray(bart["inclusion"])
    lines += ["", f"DART: mean theta {dart['theta']:.3f}; acceptance of the s step's Dirichlet proposal "
              f"{dart['s_acceptance']:.3f}, of the theta steps {dart['theta_acceptance']:.3f}.", "",
              "Posterior inclusion probability per feature (share of kept draws with a split on it) and DART's "
              "mean split probability s:", "",
              "| feature | BART inclusion | DART inclusion | DART mean s |", "|---|---|---|---|"]
    noise_rows = [int(i) for i in np.argsort(-inc_d[N_TRUE:])[:5] + N_TRUE]
    for i in list(range(N_TRUE)) + noise_rows:
        lines.append(f"| x{i}{'' if i < N_TRUE else ' (noise)'} | {inc_b[i]:.3f} | {inc_d[i]:.3f} | "
                     f"{dart['split_prob'][i]:.4f} |")
    lines += ["", f"(the five noise features of highest DART inclusion shown; over all {N_NOISE} noise features DART's "
              f"mean inclusion is {inc_d[N_TRUE:].mean():.3f}, BART's {inc_b[N_TRUE:].mean():.3f}.)"]
    if any(r["warnings"] for r in results["fits"]):
        lines += ["", "Warnings: " + "; ".join(f"{'DART' if r['sparse'] else 'BART'}: {w}"
                                              for r in results["fits"] for w in r["warnings"])]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--n-test", type=int, default=1000)
    p.add_argument("--trees", type=int, default=200)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--warmup", type=int, default=2000)
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tree-sampler", default="grow-prune", choices=("grow-prune", "cgm"))
    p.add_argument("--json", default=None)
    p.add_argument("--md", default=None)
    args = p.parse_args(argv)
    X, y, Xt, yt, ft = friedman(args.n, args.n_test, args.seed)
    import jax

    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__} " \
              f"on {jax.devices()[0].platform}"
    fits = []
    for sparse in (False, True):
        fits.append(fit_one(sparse, X, y, Xt, yt, ft, args))
        print({k: v for k, v in fits[-1].items() if k not in ("inclusion", "chain_inclusion", "split_share", "split_prob")},
              flush=True)
    results = dict(args=vars(args), machine=machine, fits=fits)
    text = report(results)
    print(text)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
