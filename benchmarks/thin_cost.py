"""What thinning costs per iteration (issue #40): CGM on the wine data, ``thin`` in {1, 10, 100}.

Each measurement is one :func:`bdtree_jax.driver.run_chains` of the kernel ``bd.sample(X, y,
method="cgm")`` builds for the wine data (default prior), ``--chains`` chains looped on one
device, ``num_warmup=0``, ``thin=k``, its default block of 2000 iterations: ``N`` iterations
whatever ``k`` (``N // k`` recorded).  It times the driver's loop and its host copies of the
traces, not the posterior's assembly.  Compilation is excluded: every ``thin`` is run once first,
then each timed value is ``(t(2N) - t(N)) / N`` (µs per iteration of the run, all chains
together), which also cancels the run's fixed costs; both the wall clock and the process's CPU
time (less sensitive to other processes on a shared machine) are given.  Rounds interleave the
``thin`` values (1, 10, 100, 1, 10, 100, ...), so a machine's drift hits them alike; the table
gives the median per ``thin`` and the median over rounds of each round's ratio ``thin=k /
thin=1``.  The number of block programs traced (:func:`bdtree_jax.driver.trace_count`) by the
first runs is printed too (one per ``thin`` before issue #40, one in all after).

``--checkouts A B`` runs the measurement in fresh subprocesses with ``PYTHONPATH`` set to each
checkout, alternating ``A B A B ...`` (``--alternations`` times), and reports each checkout's
median ratios (e.g. an old ``driver.py`` in a temporary copy against this one).

Usage::

    python benchmarks/thin_cost.py                        # this checkout, 5 rounds
    python benchmarks/thin_cost.py --checkouts /tmp/old . --alternations 2

The ratios are what to read: on a shared machine the absolute µs move with the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measure(iterations: int, rounds: int, thins: list[int], chains: int) -> dict:
    """Run the interleaved rounds in this process; returns µs per iteration (wall and CPU) and
    the ratios to the first ``thin``."""
    import jax

    import bdtree_jax as bd
    from bdtree_jax import driver
    from bdtree_jax.problem import build_problem

    X, y = bd.datasets.load("wine")
    # the kernel bd.sample(X, y, method="cgm") runs (default prior and move probabilities)
    kernel = bd.CGM().kernel(build_problem(X, y, task="classification"), "loop", (1.0,), 0)

    def seconds(thin: int, n: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        driver.run_chains(kernel.algorithm, kernel.data, key=jax.random.key(0), num_chains=chains, num_iterations=n,
                          block_size=driver.CGM_BLOCK_SIZE, chain_method="loop", thin=thin, progress=False)
        return time.perf_counter() - wall, time.process_time() - cpu

    traces_before = driver.trace_count()
    t0 = time.perf_counter()
    for thin in thins:  # compile (block_size = min(2000, N): one shape for every length here)
        seconds(thin, iterations)
    first_s = time.perf_counter() - t0
    traced = driver.trace_count() - traces_before
    wall = {k: [] for k in thins}
    cpu = {k: [] for k in thins}
    for _ in range(rounds):
        for thin in thins:
            w1, c1 = seconds(thin, iterations)
            w2, c2 = seconds(thin, 2 * iterations)
            wall[thin].append(1e6 * (w2 - w1) / iterations)
            cpu[thin].append(1e6 * (c2 - c1) / iterations)

    def summary(per_iter):
        base = per_iter[thins[0]]
        return dict(us=per_iter, median_us={k: statistics.median(v) for k, v in per_iter.items()},
                    median_ratio={k: statistics.median(a / b for a, b in zip(v, base)) for k, v in per_iter.items()})

    return dict(iterations=iterations, rounds=rounds, chains=chains, thins=thins, block_programs_traced=traced,
                first_runs_s=first_s, wall=summary(wall), cpu=summary(cpu), load=os.getloadavg(),
                devices=len(jax.devices()))


def _table(name: str, result: dict) -> str:
    lines = [f"{name}: {result['chains']} chains on {result['devices']} device(s), N={result['iterations']}, "
             f"{result['rounds']} rounds, {result['block_programs_traced']} block program(s) traced for thin "
             f"{result['thins']}, 1-min load {result['load'][0]:.2f}",
             "| thin | wall µs/iter | wall ratio | CPU µs/iter | CPU ratio | wall per round (µs) |",
             "|---|---|---|---|---|---|"]
    for k in map(str, result["thins"]):
        w, c = result["wall"], result["cpu"]
        rounds = ", ".join(f"{x:.1f}" for x in w["us"][k])
        lines.append(f"| {k} | {w['median_us'][k]:.1f} | {w['median_ratio'][k]:.3f} | {c['median_us'][k]:.1f} | "
                     f"{c['median_ratio'][k]:.3f} | {rounds} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=4000, help="N: runs of N and 2N iterations are timed")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--thins", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--checkouts", nargs=2, metavar=("A", "B"), help="compare two checkouts in subprocesses")
    parser.add_argument("--alternations", type=int, default=2, help="with --checkouts: A B repeated this often")
    parser.add_argument("--json", action="store_true", help="print the result as JSON (what --checkouts reads)")
    parser.add_argument("--out", help="with --checkouts: also write the report to OUT.md and the results to OUT.json")
    args = parser.parse_args(argv)
    if args.checkouts is None:
        result = json.loads(json.dumps(measure(args.iterations, args.rounds, args.thins, args.chains)))
        print(json.dumps(result) if args.json else _table("this checkout", result))
        return result
    results, report = {c: [] for c in args.checkouts}, []
    for _ in range(args.alternations):
        for checkout in args.checkouts:
            env = dict(os.environ, PYTHONPATH=str(Path(checkout).resolve()), JAX_PLATFORMS="cpu",
                       PYTHONWARNINGS="ignore")
            cmd = [sys.executable, str(Path(__file__).resolve()), "--json", "--iterations", str(args.iterations),
                   "--rounds", str(args.rounds), "--chains", str(args.chains), "--thins", *map(str, args.thins)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
            if out.returncode:
                raise RuntimeError(f"{checkout} failed:\n{out.stderr[-3000:]}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            results[checkout].append(result)
            report.append(_table(checkout, result))
            print(report[-1], "\n", flush=True)
    for clock in ("wall", "cpu"):
        for checkout, runs in results.items():
            ratios = {k: statistics.median(r[clock]["median_ratio"][str(k)] for r in runs) for k in args.thins}
            us = {k: statistics.median(r[clock]["median_us"][str(k)] for r in runs) for k in args.thins}
            report.append(f"{clock:4s} {checkout}: median over {len(runs)} runs: " +
                          ", ".join(f"thin={k}: {us[k]:.1f} µs ({ratios[k]:.3f}x)" for k in args.thins))
            print(report[-1])
    if args.out:
        Path(args.out + ".md").write_text(f"`{' '.join(sys.argv)}`\n\n" + "\n\n".join(report) + "\n")
        Path(args.out + ".json").write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
