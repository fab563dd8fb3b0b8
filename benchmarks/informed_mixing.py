"""CGM against CGM + the informed change (``proposal="cgm+informed"``), side by side in one
process: R-hat, bulk ESS and ESS per second of the log-likelihood, the number of leaves and the
worst of the posterior predictive means the convergence check reads
(:func:`bdtree_jax.diagnostics.convergence_diagnostics`), per dataset and seed.  Each
configuration is compiled by a short run first, so the seconds are sampling only.

    python benchmarks/informed_mixing.py --datasets bcw wine --seeds 0 1 --num-samples 2000
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings

os.environ.setdefault("BDTREE_CPU_DEVICES", "1")

import numpy as np  # noqa: E402

import bdtree_jax as bd  # noqa: E402
from bdtree_jax.diagnostics import convergence_diagnostics  # noqa: E402

CONFIGS = {
    "cgm": dict(method=bd.CGM()),
    "cgm+informed": dict(method=bd.CGM(proposal="cgm+informed")),
    "cgm, tempered 4": dict(method=bd.CGM(), tempering=bd.Tempering(4)),
    "cgm+informed, tempered 4": dict(method=bd.CGM(proposal="cgm+informed"), tempering=bd.Tempering(4)),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["bcw", "wine", "iris"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--num-samples", type=int, default=2000)
    ap.add_argument("--num-chains", type=int, default=4)
    args = ap.parse_args()
    warnings.simplefilter("ignore", bd.ConvergenceWarning)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, jax {bd.__version__ and ''}"
          f"{__import__('jax').__version__}; {args.num_chains} chains x ({args.num_samples} warm-up + "
          f"{args.num_samples} draws)")
    print("| data | seed | sampler | s | R-hat loglik / leaves / pred | ESS loglik / leaves / pred | ESS/s loglik / pred |")
    print("|---|---|---|---|---|---|---|")
    for name in args.datasets:
        X, y = bd.datasets.load_split(name)[:2] if name == "cgm" else bd.datasets.load(name)
        task = "regression" if name == "cgm" else "classification"
        for label in args.configs:  # compile each configuration once
            bd.sample(X, y, task=task, num_warmup=5, num_samples=5, num_chains=args.num_chains, **CONFIGS[label])
        for seed in args.seeds:
            for label in args.configs:
                t0 = time.perf_counter()
                post = bd.sample(X, y, task=task, num_warmup=args.num_samples, num_samples=args.num_samples,
                                 num_chains=args.num_chains, seed=seed, **CONFIGS[label])
                seconds = time.perf_counter() - t0
                d = convergence_diagnostics(post)
                keys = ("log_lik", "n_leaves", "predictive_mean")
                rhat = " / ".join(f"{d[k]['rhat']:.3f}" for k in keys)
                ess = " / ".join(f"{d[k]['ess_bulk']:.0f}" for k in keys)
                per_s = f"{d['log_lik']['ess_bulk'] / seconds:.1f} / {d['predictive_mean']['ess_bulk'] / seconds:.1f}"
                print(f"| {name} | {seed} | {label} | {seconds:.1f} | {rhat} | {ess} | {per_s} |", flush=True)


if __name__ == "__main__":
    main()
