"""Issue #28's memory bounds, measured: the XLA factor of the run-memory estimate and the CGM
200,000 x 20 fit + score peak.

Two groups of measurements, every one in a fresh subprocess whose **peak resident memory** is its
``ru_maxrss`` (``os.wait4``):

* ``factor``: small runs of every sampler whose counted arrays (``bdtree_jax.methods._memory``'s
  :func:`estimate_run`, before its ``XLA_FACTOR``) are large (deep padded trees, many
  iterations).  For each, the worker records its peak RSS just before ``method.run`` (data,
  problem, JAX started) and after it; ``ratio = (after - before) / counted``.  ``XLA_FACTOR`` is
  the largest ratio, rounded up.
* ``issue``: issue #28 item 6, CGM classification on 200,000 x 20 rows (float64, 32 MB), one
  chain of 1,000 warm-up and 1,000 kept draws, then ``score`` on 20,000 of the rows; the peak
  of the whole subprocess (goal: <= 1.5 GB; 4.22 GB before prediction streamed over chunks,
  commit f8bb3b0).

Usage::

    python benchmarks/memory_bounds.py                    # both groups
    python benchmarks/memory_bounds.py --only issue --draws 200   # a quicker check first

Results: ``benchmarks/results/memory_bounds.json`` and ``.md`` (``--out`` another stem; groups not
run keep their previous results).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent

#: The factor runs: (name, method, method options, dataset, max_depth, chains, warmup, samples, rungs).
FACTOR_RUNS = [
    ("cgm depth 13, 4 chains", "cgm", {}, "iris", 13, 4, 500, 500, 1),
    ("cgm depth 12, 4 rungs, 2 chains", "cgm", {}, "iris", 12, 2, 300, 300, 4),
    ("wu depth 12, 2 chains", "wu", {"num_local_steps": 2}, "iris", 12, 2, 300, 300, 1),
    ("pg depth 8, 10 particles, 2 chains", "pg", {}, "iris", 8, 2, 100, 100, 1),
    ("smc depth 9, 200 particles, 4 runs", "smc", {"num_particles": 200}, "iris", 9, 4, 0, 1000, 1),
    ("bart 200 trees depth 6, 2 chains", "bart", {"num_trees": 200}, "cgm", 6, 2, 250, 500, 1),
]
# (PCFG's grammar checks its own memory level by level as it is built; its draws are counted.)


def _rss_peak() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def _issue_data(n: int, n_features: int = 20, seed: int = 0):
    """(n, F) float64 inputs and a binary response given by a depth-3 rule plus 10 % label noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, n_features))
    y = ((X[:, 0] > 0) ^ (X[:, 1] > 0.5)) | (X[:, 2] > 1.5)
    flip = rng.random(n) < 0.1
    return X, np.where(flip, ~y, y).astype(int)


def worker_factor(spec: dict) -> dict:
    os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
    import bdtree_jax as bd
    from bdtree_jax.methods import RunOptions, Tempering, method_from_name
    from bdtree_jax.methods._memory import XLA_FACTOR, estimate_run
    from bdtree_jax.problem import build_problem

    name, method_name, method_options, dataset, depth, chains, warmup, samples, rungs = spec["run"]
    if method_name == "bart":
        return _worker_bart(spec)
    X, y = bd.datasets.load(dataset)
    method = method_from_name(method_name)
    if method_options:
        import dataclasses

        method = dataclasses.replace(method, **method_options)
    problem = build_problem(X, y, prior=bd.TreePrior(max_depth=depth), **method.problem_options())
    options = RunOptions(num_warmup=warmup, num_samples=samples, num_chains=chains, progress=False)
    parts = estimate_run(method, problem, options, rungs)
    counted = sum(p.nbytes for p in parts)
    before = _rss_peak()
    t = time.perf_counter()
    method.run(problem, options, Tempering(rungs) if rungs > 1 else None)
    seconds = time.perf_counter() - t
    after = _rss_peak()
    return dict(name=name, method=method_name, counted=counted, before=before, after=after,
                ratio=(after - before) / counted, seconds=seconds, xla_factor_used=XLA_FACTOR,
                parts=[dict(what=p.what, nbytes=p.nbytes, device=p.device) for p in parts])


def _worker_bart(spec: dict) -> dict:
    """A BART regression on ``make_cgm(2000)`` (the estimator's own problem and configuration)."""
    import bdtree_jax as bd
    from bdtree_jax.estimators import bart as bart_estimator
    from bdtree_jax.methods import _memory

    name, _, options, _, depth, chains, warmup, samples, _ = spec["run"]
    X, y = bd.datasets.make_cgm(2000, seed=0)
    counted = {}
    real = bart_estimator.check_bart

    def spy(config, problem, num_chains, num_warmup, num_samples, block_size, where=""):
        parts = _memory.estimate_bart(config, problem, num_chains, num_warmup, num_samples, block_size)
        counted["bytes"] = sum(p.nbytes for p in parts)
        counted["parts"] = [dict(what=p.what, nbytes=p.nbytes, device=p.device) for p in parts]
        counted["before"] = _rss_peak()
        return real(config, problem, num_chains, num_warmup, num_samples, block_size, where)

    bart_estimator.check_bart = spy
    reg = bd.BARTRegressor(max_depth=depth, num_warmup=warmup, num_samples=samples, num_chains=chains, **options)
    t = time.perf_counter()
    reg.fit(X, y)
    seconds = time.perf_counter() - t
    after = _rss_peak()
    return dict(name=name, method="bart", counted=counted["bytes"], before=counted["before"], after=after,
                ratio=(after - counted["before"]) / counted["bytes"], seconds=seconds,
                xla_factor_used=_memory.XLA_FACTOR, parts=counted["parts"])


def worker_issue(spec: dict) -> dict:
    import bdtree_jax as bd

    X, y = _issue_data(spec["rows"])
    t = time.perf_counter()
    clf = bd.BayesianTreeClassifier(num_warmup=spec["draws"], num_samples=spec["draws"], num_chains=1, seed=0)
    clf.fit(X, y)
    fit_seconds = time.perf_counter() - t
    fit_peak = _rss_peak()
    t = time.perf_counter()
    accuracy = float(clf.score(X[: spec["score_rows"]], y[: spec["score_rows"]]))
    return dict(fit_seconds=fit_seconds, score_seconds=time.perf_counter() - t, fit_peak=fit_peak,
                accuracy=accuracy, nbytes_per_draw=int(clf.posterior_.nbytes_per_draw))


def run_worker(kind: str, spec: dict, timeout: float) -> dict:
    """Run a worker in a fresh interpreter; its result with ``peak_rss`` (bytes, ``os.wait4``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", kind, json.dumps(spec)],
                            cwd=str(_ROOT), env=env, stdout=subprocess.PIPE, text=True)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)  # reaps the child: its peak RSS
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    peak = int(usage.ru_maxrss) * 1024
    lines = [ln for ln in out.splitlines() if ln.startswith("@@")]
    if proc.returncode != 0 or not lines:
        return dict(error=f"exit status {proc.returncode}", peak_rss=peak, wall=time.perf_counter() - t)
    return dict(json.loads(lines[-1][2:]), peak_rss=peak, wall=time.perf_counter() - t)


def _gb(n) -> str:
    return "–" if n is None else f"{n / 1e9:.2f} GB"


def report(results: dict) -> str:
    from bdtree_jax.methods._memory import COMPILE_BYTES, XLA_FACTOR

    lines = ["# Memory bounds (issue #28)", "",
             f"Machine: {results.get('machine', '?')}; commit {results.get('commit', '?')}.  Every figure is the peak "
             "resident memory (`ru_maxrss`) of a fresh subprocess.", ""]
    factor = results.get("factor")
    if factor:
        lines += ["## The estimate's XLA factor", "",
                  "`counted`: the arrays `bdtree_jax.methods._memory.estimate_run` counts (before `XLA_FACTOR`); "
                  "`before`/`after`: the worker's peak RSS just before and after `method.run`; "
                  "`growth = after - before` (compilation included); `estimate = XLA_FACTOR x counted + "
                  f"COMPILE_BYTES[method]` with today's constants (`XLA_FACTOR` = {XLA_FACTOR}, `COMPILE_BYTES` = "
                  + ", ".join(f"{k}: {_gb(v)}" for k, v in COMPILE_BYTES.items()) + "); it must cover the growth.", "",
                  "| run | counted | before | after | growth | growth / counted | estimate | covers | "
                  "seconds |", "|---|---:|---:|---:|---:|---:|---:|:---:|---:|"]
        for r in factor:
            if "error" in r:
                lines.append(f"| {r.get('name', '?')} | error: {r['error']} | | | | | | | |")
                continue
            compile_ = COMPILE_BYTES.get(r["method"], COMPILE_BYTES["*"])
            growth = r["after"] - r["before"]
            estimate = XLA_FACTOR * r["counted"] + compile_
            lines.append(f"| {r['name']} | {_gb(r['counted'])} | {_gb(r['before'])} | {_gb(r['after'])} | "
                         f"{_gb(growth)} | {growth / r['counted']:.2f} | {_gb(estimate)} | "
                         f"{'yes' if estimate >= growth else 'NO'} | {r['seconds']:.1f} |")
        if results.get("factor_note"):
            lines.append(f"\nThese runs: {results['factor_note']}.")
        lines.append("")
    issue = results.get("issue")
    if issue:
        lines += ["## Issue #28 item 6: CGM 200,000 x 20, fit + `score` on 20,000 rows", "",
                  "| draws (warm-up + kept) | chains | fit peak | fit + score peak | fit s | score s | accuracy |",
                  "|---|---:|---:|---:|---:|---:|---:|",
                  "| 1,000 + 1,000, before prediction streamed over chunks (issue #28; docs/memory.md, before commit "
                  "f8bb3b0) | 1 | ~1 GB | 4.22 GB | | 15.1 | |"]
        for r in issue:
            if "error" in r:
                lines.append(f"| {r.get('draws', '?')} | 1 | error: {r['error']} | {_gb(r.get('peak_rss'))} | | | |")
                continue
            lines.append(f"| {r['draws']:,} + {r['draws']:,} | 1 | {_gb(r['fit_peak'])} | {_gb(r['peak_rss'])} | "
                         f"{r['fit_seconds']:.1f} | {r['score_seconds']:.1f} | {r['accuracy']:.3f} |")
        lines += ["", "Goal: fit + score peak <= 1.5 GB.", ""]
    return "\n".join(lines)


def write(out: Path, results: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1, default=float) + "\n")
    out.with_suffix(".md").write_text(report(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", nargs=2, metavar=("KIND", "SPEC"), help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=("factor", "issue"), help="run one group")
    parser.add_argument("--runs", default="", help="factor: only the runs whose name contains this")
    parser.add_argument("--draws", type=int, default=1000, help="issue case: warm-up and kept draws (each)")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--out", default=str(_HERE / "results" / "memory_bounds"))
    args = parser.parse_args()
    if args.worker:
        kind, spec = args.worker[0], json.loads(args.worker[1])
        result = (worker_factor if kind == "factor" else worker_issue)(spec)
        print("@@" + json.dumps(result, default=float), flush=True)
        return
    out = Path(args.out)
    results = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else {}
    results["machine"] = f"{os.cpu_count()} CPU cores, {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB"
    try:
        results["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=_ROOT, capture_output=True,
                                           text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        results["commit"] = "?"
    if args.only in (None, "factor"):
        chosen = [run for run in FACTOR_RUNS if args.runs in run[0]]
        results["factor"] = [r for r in results.get("factor", []) if r.get("name") not in {run[0] for run in chosen}]
        for run in chosen:
            r = run_worker("factor", dict(run=run), args.timeout)
            r.setdefault("name", run[0])
            print(json.dumps({k: v for k, v in r.items() if k != "parts"}), flush=True)
            results["factor"].append(r)
    if args.only in (None, "issue"):
        spec = dict(rows=args.rows, draws=args.draws, score_rows=20_000)
        r = dict(run_worker("issue", spec, args.timeout), draws=args.draws, rows=args.rows)
        print(json.dumps(r), flush=True)
        results["issue"] = [x for x in results.get("issue", []) if x.get("draws") != args.draws] + [r]
    write(out, results)


if __name__ == "__main__":
    main()
