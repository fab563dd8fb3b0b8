"""Mixing of WU against plain CGM and CGM + perturb on bcw, at the same number of proposals.

    python benchmarks/wu_mixing.py [--iterations 1000] [--chains 4] [--n-local 25]

WU makes ``2 n_local + 1`` proposals per iteration (``n_local`` CGM moves, one restructure,
``n_local`` CGM moves); CGM runs ``(2 n_local + 1) x iterations`` single proposals and CGM +
perturb (one CGM and one perturb proposal per iteration) half as many iterations, so all three
make the same number of proposals.  Same prior (``max_depth`` 6, ``alpha`` 0.95, ``beta`` 1),
the RJHMC paper's bcw training split, chains from the stump, the first half of each run discarded.
The traces are thinned to the same number of recorded points per chain and ArviZ's effective
sample size of the log likelihood and of the number of leaves is divided by the sampling seconds
(compilation excluded: each configuration is run once before it is timed).  Writes
``benchmarks/results/wu_mixing.{json,md,png}`` (traces of log likelihood and leaves).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=1000, help="WU iterations (the others match its proposals)")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--n-local", type=int, default=25)
    args = parser.parse_args(argv)

    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
    import bdtree_jax as bd

    X, y, _, _ = bd.datasets.load_split("bcw")
    per_wu = 2 * args.n_local + 1
    runs = {
        "CGM": dict(method="cgm", proposal="cgm", iters=per_wu * args.iterations, block=5000),
        "CGM + perturb": dict(method="cgm", proposal="cgm+perturb", iters=per_wu * args.iterations // 2, block=5000),
        "WU (MH restructure)": dict(method="wu", restructure="pi", iters=args.iterations, block=100),
        "WU (Gibbs restructure)": dict(method="wu", restructure="auto", iters=args.iterations, block=100),
    }
    points = args.iterations // 2  # recorded points per chain after thinning (the kept half of WU)
    rows, traces = [], {}
    for name, r in runs.items():
        block = min(r["block"], r["iters"])  # the compile run and the timed run share one program
        kw = dict(max_depth=6, alpha=0.95, beta=1.0, num_chains=args.chains, block_size=block)
        if r["method"] == "wu":
            kw.update(method="wu", num_local_steps=args.n_local, restructure=r["restructure"])
        else:
            kw.update(method="cgm", proposal=r["proposal"])
        half = r["iters"] // 2
        bd.sample(X, y, num_warmup=0, num_samples=block, seed=99, **kw)  # compile (untimed)
        t0 = time.perf_counter()
        post = bd.sample(X, y, num_warmup=half, num_samples=r["iters"] - half, seed=0, **kw)
        seconds = time.perf_counter() - t0
        thin = max(1, (r["iters"] - half) // points)
        ll = post.stats["log_lik"][:, ::thin][:, :points]
        leaves = post.stats["n_leaves"][:, ::thin][:, :points].astype(float)
        ess_ll = float(np.asarray(az.ess(ll.astype(np.float64))))  # (chains, draws) -> bulk ESS
        ess_leaves = float(np.asarray(az.ess(leaves)))
        per_iteration = per_wu if r["method"] == "wu" else 2 if r["proposal"] == "cgm+perturb" else 1
        rows.append(dict(method=name, iterations=r["iters"], proposals=r["iters"] * per_iteration,
                         seconds=seconds, ess_log_lik=ess_ll, ess_leaves=ess_leaves,
                         ess_log_lik_per_s=ess_ll / seconds, ess_leaves_per_s=ess_leaves / seconds,
                         mean_log_lik=float(ll.mean()), mean_leaves=float(leaves.mean()),
                         accept=float(np.mean(post.stats["accepted"]))))
        traces[name] = (ll, leaves)
        print(rows[-1], flush=True)

    RESULTS.mkdir(exist_ok=True)
    fig, axes = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for name, (ll, leaves) in traces.items():
        axes[0].plot(ll[0], lw=0.7, label=name)
        axes[1].plot(leaves[0], lw=0.7, label=name)
    axes[0].set_ylabel("log likelihood (chain 0)")
    axes[1].set_ylabel("leaves (chain 0)")
    axes[1].set_xlabel(f"recorded point (kept half, thinned to {points} per chain: equal proposals)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "wu_mixing.png", dpi=110)
    (RESULTS / "wu_mixing.json").write_text(json.dumps(dict(args=vars(args), rows=rows), indent=1))
    lines = [
        "# WU vs CGM vs CGM + perturb on bcw (equal numbers of proposals)", "",
        f"`python benchmarks/wu_mixing.py {' '.join(os.sys.argv[1:])}`".replace(" `", "`"), "",
        "| method | iterations | proposals | seconds | ESS log lik | ESS leaves | ESS log lik / s | ESS leaves / s | mean log lik | mean leaves |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['method']} | {r['iterations']} | {r['proposals']} | {r['seconds']:.1f} | {r['ess_log_lik']:.0f} | "
                     f"{r['ess_leaves']:.0f} | {r['ess_log_lik_per_s']:.1f} | {r['ess_leaves_per_s']:.1f} | "
                     f"{r['mean_log_lik']:.1f} | {r['mean_leaves']:.1f} |")
    lines += ["", "![traces](wu_mixing.png)"]
    (RESULTS / "wu_mixing.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
