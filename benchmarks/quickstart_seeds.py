"""Issue #40: does the README's first command (``bdtree run quickstart``) pass the library's own
convergence check at seeds 0-4, and how long does it take?

Runs the installed ``bdtree`` command (the same process a user starts: import, compile, sampling,
plots and files) once per seed in a temporary folder, with ``--set seed=S`` and any ``--set``
options given here (e.g. the old config, ``--set num_chains=4 --set num_temperatures=4 --set
num_warmup=1000 --set num_samples=2000 --set run_until=null``), and reads its ``metrics.json``:
R-hat and bulk ESS of the checked quantities, whether the ConvergenceWarning fired, the
``run_until`` rounds, the sampling seconds and the command's wall time.

Run: ``python benchmarks/quickstart_seeds.py [--seeds 0 1 2 3 4] [--set KEY=VALUE ...] [--out PATH]``
(writes ``PATH.json`` and ``PATH.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
QUANTITIES = ("log_lik", "n_leaves", "predictive_mean")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", default=str(_ROOT / "benchmarks" / "results" / "quickstart_seeds"))
    args = p.parse_args(argv)
    bdtree = shutil.which("bdtree", path=os.path.dirname(sys.executable)) or shutil.which("bdtree")
    rows = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [bdtree, "run", "quickstart", "--set", f"seed={seed}"]
            for kv in args.sets:
                cmd += ["--set", kv]
            t0 = time.perf_counter()
            done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr}")
            m = json.loads((Path(tmp) / "runs" / "quickstart" / "metrics.json").read_text())
        c = m["convergence"]
        row = dict(seed=seed, wall_seconds=wall, sampling_seconds=m["seconds"], warned=c["warned"],
                   run_until=m.get("run_until"), test_accuracy_pooled=m["test_accuracy_pooled"],
                   **{f"{q}_rhat": c[q]["rhat"] for q in QUANTITIES}, **{f"{q}_ess_bulk": c[q]["ess_bulk"] for q in QUANTITIES})
        rows.append(row)
        print(json.dumps(row), flush=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    meta = dict(machine=f"{platform.machine()}, {os.cpu_count()} CPUs", python=platform.python_version(),
                sets=args.sets, load_after=load)
    Path(args.out + ".json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    lines = [f"# `bdtree run quickstart` at seeds {', '.join(map(str, args.seeds))} (benchmarks/quickstart_seeds.py)", "",
             f"Machine: {meta['machine']}, Python {meta['python']}; extra options: {' '.join(args.sets) or 'none'}; "
             f"1-minute load average after the runs {load:.1f}.", "",
             "| seed | warned | rounds | iterations / chain | R-hat log_lik / n_leaves / pred. mean | bulk ESS (same) | "
             "sampling s | wall s | test accuracy |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ru = r["run_until"] or {}
        lines.append(f"| {r['seed']} | {'yes' if r['warned'] else 'no'} | {ru.get('rounds', '-')} | {ru.get('iterations', '-')} | "
                     + " / ".join(f"{r[f'{q}_rhat']:.3f}" for q in QUANTITIES) + " | "
                     + " / ".join(f"{r[f'{q}_ess_bulk']:.0f}" for q in QUANTITIES)
                     + f" | {r['sampling_seconds']:.1f} | {r['wall_seconds']:.1f} | {r['test_accuracy_pooled']:.3f} |")
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
