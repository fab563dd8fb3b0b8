"""Hypercube-D mixing test (Particle Gibbs for BART, Lakshminarayanan et al. 2015; results in
``docs/benchmarks.md``): iterations and seconds until a chain first holds a tree that
separates every vertex of the hypercube, for Particle Gibbs and for CGM, over several seeds.

    python benchmarks/hypercube_mixing.py [--dims 3 4] [--seeds 0 1 2 3 4] [--pg-iters 2000] \
        [--cgm-iters 100000] [--num-particles 10] [--proposals prior posterior] [--split-prior range]

Data: ``bd.datasets.make_hypercube(D, num_per_vertex=10)`` (2**D clusters at the vertices of
{-1, 1}^D, x noise sd 0.1, y = f(vertex) with f ~ N(0, 9), no y noise), regression with the
shared CGM98 prior (alpha 0.95, beta 1, ``max_depth = D + 2``, ``split_prior="range"`` -- the
PG paper's cut rule -- unless ``--split-prior uniform``) and conjugate normal leaves (leaf-mean
prior scale ``a = 0.01``, so that an exact fit is rewarded), one
chain from the stump per seed (data seed = chain seed).  Time per iteration is measured on runs
after the first (compilation excluded).  Writes ``benchmarks/results/hypercube_mixing.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"
BLOCK = 100  # iterations per compiled block (the warm-up run compiles the same program)
A = 0.01  # leaf-mean prior N(mu_bar, sigma^2 / a): wide, so an exact fit is rewarded (the default 1/3 ties leaf means to sigma)


def first_separating(post, vertex: np.ndarray) -> int | None:
    """Index of the first draw whose leaves each hold the rows of one vertex (None if never)."""
    import jax

    os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
    from bdtree_jax.tree import Tree, leaf_index

    trees = Tree(*(np.asarray(a[0]) for a in post.trees))
    bins = jax.numpy.asarray(post.train_bins)
    leaf = np.asarray(jax.jit(jax.vmap(lambda t: leaf_index(t, bins)))(trees))  # (K, n)
    n_vertex = int(vertex.max()) + 1
    pairs = leaf.astype(np.int64) * n_vertex + vertex[None, :]
    for k in range(leaf.shape[0]):
        if len(np.unique(pairs[k])) == len(np.unique(leaf[k])):
            return k
    return None


def true_tree_log_posterior(X, y, D: int, split_prior: str) -> float:
    """log p(T) + log L(T) of the tree that splits every vertex apart (x0 <= 0, then x1 <= 0, ...)."""
    import bdtree_jax as bd
    from bdtree_jax.kernels import cgm
    from bdtree_jax.kernels._moves import score
    from bdtree_jax.tree import from_string

    problem = bd.build_problem(X, y, task="regression", prior=bd.TreePrior(max_depth=D + 2, split_prior=split_prior),
                               likelihood={"a": A})
    text = lambda d: "L" if d == D else f"x{d}<=0({text(d + 1)},{text(d + 1)})"  # noqa: E731
    tree = from_string(text(0), problem.grid.thresholds, D + 2)
    state = score(tree, problem.data, cgm.CGMConfig(D + 2), 1.0)
    return float(state.log_lik + state.log_prior)


def run(method: str, D: int, seed: int, iters: int, num_particles: int, proposal: str, split_prior: str):
    import bdtree_jax as bd

    X, y, vertex = bd.datasets.make_hypercube(D, num_per_vertex=10, seed=seed)
    kw = dict(num_particles=num_particles, proposal=proposal) if method == "pg" else {}  # cgm: its own moves
    t0 = time.perf_counter()
    post = bd.sample(X, y, task="regression", method=method, max_depth=D + 2, num_warmup=0, num_samples=iters,
                     num_chains=1, seed=seed, block_size=BLOCK, a=A, split_prior=split_prior, **kw)
    seconds = time.perf_counter() - t0
    log_post = (post.stats["log_lik"] + post.stats["log_prior"])[0]
    reached = np.flatnonzero(log_post >= true_tree_log_posterior(X, y, D, split_prior) - 1.0)
    return first_separating(post, vertex.to_numpy()), (int(reached[0]) if len(reached) else None), seconds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[3, 4])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--pg-iters", type=int, default=2000)
    parser.add_argument("--cgm-iters", type=int, default=100_000)
    parser.add_argument("--num-particles", type=int, default=10)
    parser.add_argument("--proposals", nargs="+", default=["prior", "posterior"], choices=["prior", "posterior"],
                        help="PG's proposals (one PG row per proposal)")
    parser.add_argument("--split-prior", default="range", choices=["range", "uniform"],
                        help="the cut rule of the shared prior (the PG paper's is 'range')")
    args = parser.parse_args(argv)
    rows = []
    for D in args.dims:
        runs = [("pg", p, args.pg_iters) for p in args.proposals] + [("cgm", "", args.cgm_iters)]
        for method, proposal, iters in runs:
            run(method, D, 10_000, BLOCK, args.num_particles, proposal, args.split_prior)  # compile (untimed)
            for seed in args.seeds:
                hit, mode, seconds = run(method, D, seed, iters, args.num_particles, proposal, args.split_prior)
                per_iter = seconds / iters
                label = f"pg ({args.num_particles} particles, {proposal})" if method == "pg" else "cgm"
                rows.append(dict(D=D, method=label, seed=seed, iterations=iters, first_hit=hit, first_mode=mode,
                                 seconds_per_iteration=per_iter,
                                 seconds_to_hit=None if hit is None else (hit + 1) * per_iter,
                                 seconds_to_mode=None if mode is None else (mode + 1) * per_iter))
                print(rows[-1], flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "hypercube_mixing.json").write_text(json.dumps(dict(args=vars(args), rows=rows), indent=1))
    lines = [
        "# Hypercube mixing: PG vs CGM", "",
        f"`python benchmarks/hypercube_mixing.py {' '.join(os.sys.argv[1:])}`".replace("  ", " "), "",
        "First iteration whose tree separates every vertex, and first iteration whose log posterior is",
        "within 1 nat of the separating tree's (x0 <= 0, x1 <= 0, ...; vertices with nearly equal",
        "f(v) make merging them about as probable as separating them).", "",
        "| D | method | seed | iterations run | first separating | s | first within 1 nat of the true tree | s | s / iteration |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    fmt_it = lambda k: "never" if k is None else str(k + 1)  # noqa: E731
    fmt_s = lambda t: "—" if t is None else f"{t:.3f}"  # noqa: E731
    for r in rows:
        lines.append(f"| {r['D']} | {r['method']} | {r['seed']} | {r['iterations']} | {fmt_it(r['first_hit'])} | "
                     f"{fmt_s(r['seconds_to_hit'])} | {fmt_it(r['first_mode'])} | {fmt_s(r['seconds_to_mode'])} | "
                     f"{r['seconds_per_iteration'] * 1e3:.3f} ms |")
    (RESULTS / "hypercube_mixing.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
