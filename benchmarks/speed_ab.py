"""Before/after speed check of two checkouts of the library on numeric data (no categorical
columns, no missing cells), measured side by side in one run.

Two workloads, each through the public estimators:

* **cgm**: ``BayesianTreeClassifier(method="cgm")`` on bcw's paper split, ``--cgm-chains`` chains;
  proposals/s in aggregate.
* **bart**: ``BARTRegressor`` with ``--bart-trees`` trees on Friedman #1 (n = ``--bart-n``, 10
  features, noise sd 1); sweeps/s.

Compilation is excluded as in ``cgm_speed.py``: a fit of ``T`` iterations (``num_warmup=0``)
compiles, then warm fits of ``T`` and ``2T`` are timed and ``rate = chains * T / (t(2T) - t(T))``
(the estimators compile one block program whatever the run length).  Each measurement is a fresh
subprocess with ``PYTHONPATH`` set to one checkout; rounds alternate before/after (``--rounds``),
so slow drifts of a shared machine hit both; the table gives the median rate per checkout and the
ratio after/before, with the 1-minute load average before and after.

Usage::

    python benchmarks/speed_ab.py --before-rev 3f16579            # a worktree of that commit vs this checkout
    python benchmarks/speed_ab.py --before DIR --after DIR --rounds 3

Writes ``--out`` (.json and .md; default ``benchmarks/results/speed_ab``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, sys, time
import numpy as np
import bdtree_jax as bd
workload, T, chains, trees, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
if workload == "cgm":
    split = bd.datasets.load_split("bcw")
    X, y = split[0], split[1]
    make = lambda t: bd.BayesianTreeClassifier(method="cgm", num_warmup=0, num_samples=t, num_chains=chains, seed=0,
                                               progress=False)
else:
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(n, 10))
    y = (10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
         + rng.normal(size=n))
    chains = 1
    count = "num_trees" if "num_trees" in bd.BARTRegressor().get_params() else "n_trees"  # the older spelling
    make = lambda t: bd.BARTRegressor(**{count: trees}, num_warmup=0, num_samples=t, num_chains=1, seed=0,
                                      progress=False)

def wall(t):
    start = time.perf_counter()
    make(t).fit(X, y)
    return time.perf_counter() - start

wall(T)  # compile
t1 = min(wall(T) for _ in range(2))
t2 = min(wall(2 * T) for _ in range(2))
print(json.dumps(dict(rate=chains * T / (t2 - t1), t1=t1, t2=t2)))
"""


def _measure(path: Path, workload: str, args) -> dict:
    T = args.cgm_iterations if workload == "cgm" else args.bart_iterations
    # the same CPU devices for both checkouts (older ones chose min(cpu_count, 8) on import)
    env = dict(os.environ, PYTHONPATH=str(path))
    env.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))
    out = subprocess.run([sys.executable, "-c", _CHILD, workload, str(T), str(args.cgm_chains), str(args.bart_trees),
                          str(args.bart_n)], env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if out.returncode:
        raise RuntimeError(f"{workload} at {path} failed:\n{out.stderr[-3000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["load"] = os.getloadavg()[0]
    return row


def _git(path: Path, *cmd: str) -> str:
    return subprocess.run(["git", *cmd], cwd=path, capture_output=True, text=True).stdout.strip()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, default=None, help="checkout of the earlier version")
    parser.add_argument("--before-rev", default=None, help="or a commit of this repository (a temporary worktree)")
    parser.add_argument("--after", type=Path, default=_ROOT)
    parser.add_argument("--workloads", nargs="+", choices=("cgm", "bart"), default=["cgm", "bart"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cgm-chains", type=int, default=4)
    parser.add_argument("--cgm-iterations", type=int, default=5000)
    parser.add_argument("--bart-trees", type=int, default=200)
    parser.add_argument("--bart-n", type=int, default=1000)
    parser.add_argument("--bart-iterations", type=int, default=200)
    parser.add_argument("--out", default=str(_ROOT / "benchmarks" / "results" / "speed_ab"))
    args = parser.parse_args(argv)
    if (args.before is None) == (args.before_rev is None):
        parser.error("give exactly one of --before and --before-rev")
    tmp = None
    if args.before_rev is not None:
        tmp = tempfile.mkdtemp(prefix="speed_ab_")
        subprocess.run(["git", "worktree", "add", "--detach", tmp, args.before_rev], cwd=_ROOT, check=True,
                       capture_output=True)
        args.before = Path(tmp)
    try:
        versions = {"before": args.before, "after": args.after}
        revs = {k: _git(p, "rev-parse", "--short", "HEAD") for k, p in versions.items()}
        rows = {w: {"before": [], "after": []} for w in args.workloads}
        load_start = os.getloadavg()[0]
        for r in range(args.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for w in args.workloads:
                for v in order:
                    rows[w][v].append(_measure(versions[v], w, args))
                    print(f"round {r} {w} {v} ({revs[v]}): {rows[w][v][-1]}", flush=True)
    finally:
        if tmp is not None:
            subprocess.run(["git", "worktree", "remove", "--force", tmp], cwd=_ROOT, capture_output=True)
    summary = {w: dict(before=statistics.median(x["rate"] for x in rows[w]["before"]),
                       after=statistics.median(x["rate"] for x in rows[w]["after"])) for w in rows}
    for s in summary.values():
        s["ratio"] = s["after"] / s["before"]
    results = dict(args={k: str(v) for k, v in vars(args).items()}, revs=revs, machine=platform.platform(),
                   cpus=os.cpu_count(), load_start=load_start, load_end=os.getloadavg()[0], rows=rows, summary=summary)
    Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=1))
    unit = {"cgm": "proposals/s", "bart": "sweeps/s"}
    lines = [f"# Numeric-data speed, before ({revs['before']}) vs after ({revs['after']})", "",
             f"`python benchmarks/speed_ab.py {' '.join(sys.argv[1:] if argv is None else argv)}` on "
             f"{os.cpu_count()} CPUs ({platform.platform()}), load {load_start:.1f} -> {results['load_end']:.1f}; "
             f"median of {args.rounds} alternating rounds.", "",
             "| workload | unit | before | after | after / before |", "|---|---|---:|---:|---:|"]
    lines += [f"| {w} | {unit[w]} | {s['before']:.1f} | {s['after']:.1f} | {s['ratio']:.3f} |" for w, s in summary.items()]
    Path(args.out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
