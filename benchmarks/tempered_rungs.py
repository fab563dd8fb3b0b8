"""Tempered Particle Gibbs and edit-prior chains on an accelerator: the rungs of each chain
``vmap``-ped (what ``bd.sample`` builds when chains are vectorized, the default on a GPU) against
the rungs looped with ``lax.map`` inside vmap-ped chains (what it built before the driver decided
the chain layout once: those two methods read ``chain_method`` before its default was set).

    python benchmarks/tempered_rungs.py [--chains 4] [--rungs 4] [--iterations 400] [--out DIR]

For each method and layout: seconds of one run of ``--iterations`` iterations after a first run
that compiles (bcw's paper split, 478 rows, ``max_depth`` 5), and whether both layouts give the
same trees.  Writes ``tempered_rungs.json`` and ``tempered_rungs.md`` to ``--out``.  Meant for a
GPU; on a CPU both layouts run but the comparison says little (chains there run sequentially).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import numpy as np


def _time_run(kernel, num_chains: int, iterations: int, seed: int = 0):
    os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
    from bdtree_jax.driver import run_chains

    def once():
        t0 = time.perf_counter()
        traces, _ = run_chains(kernel.algorithm, kernel.data, key=jax.random.key(seed), num_chains=num_chains,
                               num_iterations=iterations, block_size=iterations, progress=False,
                               chain_method="vmap")
        return time.perf_counter() - t0, traces

    compile_and_run, _ = once()
    seconds, traces = once()
    return compile_and_run, seconds, traces


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--rungs", type=int, default=4)
    p.add_argument("--iterations", type=int, default=400)
    p.add_argument("--out", default="benchmarks/results")
    args = p.parse_args()
    import bdtree_jax as bd

    X, y, _, _ = bd.datasets.load_split("bcw")
    problem = bd.build_problem(X, y, task="classification", prior=bd.TreePrior(max_depth=5))
    betas = bd.Tempering(args.rungs).betas
    methods = {
        "pg (10 particles)": bd.PG(num_particles=10),
        "edit prior": bd.CGM(initial_tree="x1<=2.5(x5<=3.5(L,L),L)", mean_edits=2.0, max_edits=20),
    }
    rows = []
    for name, method in methods.items():
        results = {}
        # the kernel's rungs follow the chain_method it is built for; the driver runs both layouts
        # with vmap-ped chains
        for layout, built_for in (("rungs vmap-ped", "vmap"), ("rungs lax.map (before)", "loop")):
            kernel = method.kernel(problem, built_for, betas, 0)
            results[layout] = _time_run(kernel, args.chains, args.iterations)
        (c1, s1, t1), (c2, s2, t2) = results.values()
        same = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(t1["tree"], t2["tree"]))
        rows.append(dict(method=name, vmap_seconds=s1, lax_map_seconds=s2, speedup=s2 / s1,
                         vmap_first_run_seconds=c1, lax_map_first_run_seconds=c2, same_trees=bool(same)))
        print(rows[-1], flush=True)
    device = jax.devices()[0]
    meta = dict(device=getattr(device, "device_kind", str(device)), platform=device.platform,
                jax=jax.__version__, chains=args.chains, rungs=args.rungs, iterations=args.iterations,
                command="python benchmarks/tempered_rungs.py " + " ".join(
                    f"--{k} {v}" for k, v in vars(args).items() if k != "out"))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tempered_rungs.json"), "w") as fh:
        json.dump(dict(meta=meta, rows=rows), fh, indent=1)
    lines = [f"# Tempered rungs: vmap-ped vs lax.map inside vmap-ped chains ({meta['device']})", "",
             f"`{meta['command']}` on {meta['device']} ({meta['platform']}, jax {meta['jax']}); bcw paper split, "
             f"max_depth 5, {args.chains} chains x {args.rungs} rungs, {args.iterations} iterations; seconds of a "
             "second run (the first compiles).", "",
             "| method | rungs vmap-ped (s) | rungs lax.map, before (s) | speed-up | same trees |", "|---|---:|---:|---:|---|"]
    lines += [f"| {r['method']} | {r['vmap_seconds']:.3f} | {r['lax_map_seconds']:.3f} | {r['speedup']:.2f}x | "
              f"{r['same_trees']} |" for r in rows]
    with open(os.path.join(args.out, "tempered_rungs.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
