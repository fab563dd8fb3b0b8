"""Candidate defaults for converged fits: the library's own convergence check
(:func:`bdtree_jax.diagnostics.convergence_diagnostics`: R-hat and bulk ESS of the log-likelihood,
the number of leaves and the predictive mean at 20 training rows) after one fit per
(table, candidate, seed), with the wall time (compile included).

    python benchmarks/default_candidates.py --datasets bcw penguins iris \
        --candidates tempered4_until tempered8_hot_until regrow_t4_until --seeds 0

Tables and their test rows as ``benchmarks/mixing.py`` (its ``load_data``).  One JSON line per
fit on stdout; ``--out FILE`` appends them to FILE as well.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def candidates(bd) -> dict:
    """``{name: bd.sample keywords}``: the library defaults (4 chains x (1000 + 1000), CGM) changed as named."""
    until = bd.Converged(max_iterations=64_000)
    return {
        "default": dict(method=bd.CGM()),
        "tempered4": dict(method=bd.CGM(), tempering=bd.Tempering(num_temperatures=4)),
        "tempered4_until": dict(method=bd.CGM(), tempering=bd.Tempering(num_temperatures=4), run_until=until),
        "tempered8_hot_until": dict(method=bd.CGM(), tempering=bd.Tempering(num_temperatures=8, delta_t=0.5),
                                    run_until=until),
        "regrow_t4_until": dict(method=bd.CGM(proposal="cgm+regrow"), tempering=bd.Tempering(num_temperatures=4),
                                run_until=until),
        "tempered4_until_depth4": dict(method=bd.CGM(), tempering=bd.Tempering(num_temperatures=4), run_until=until,
                                       max_depth=4),
        "tempered8_hot_until_depth4": dict(method=bd.CGM(), tempering=bd.Tempering(num_temperatures=8, delta_t=0.5),
                                           run_until=until, max_depth=4),
        "tempered4_until_16chains": dict(method=bd.CGM(), tempering=bd.Tempering(num_temperatures=4), run_until=until,
                                         num_chains=16),
        "informed_t4_until": dict(method=bd.CGM(proposal="cgm+informed"), tempering=bd.Tempering(num_temperatures=4),
                                  run_until=until),
        "wu": dict(method=bd.WU()),
        "wu_t4": dict(method=bd.WU(), tempering=bd.Tempering(num_temperatures=4)),
    }


def main(argv=None) -> int:
    import bdtree_jax as bd
    from bdtree_jax.diagnostics import convergence_diagnostics
    from mixing import load_data

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["bcw", "penguins", "iris"])
    p.add_argument("--candidates", nargs="+", choices=sorted(candidates(bd)), default=["tempered4_until"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    for name in args.datasets:
        data = load_data(bd, name)
        for cand in args.candidates:
            for seed in args.seeds:
                start = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    post = bd.sample(data["X"], data["y"], task=data["task"], progress=False, seed=seed,
                                     **candidates(bd)[cand])
                wall = time.perf_counter() - start
                checked = convergence_diagnostics(post)
                until = post.info.get("run_until")
                row = dict(dataset=name, candidate=cand, seed=seed, wall_s=round(wall, 1),
                           rhat_max=round(max(d["rhat"] for d in checked.values()), 3),
                           ess_bulk_min=round(min(d["ess_bulk"] for d in checked.values())),
                           checked={k: [round(d["rhat"], 3), round(d["ess_bulk"])] for k, d in checked.items()},
                           run_until=until and {k: until[k] for k in ("converged", "rounds", "thin", "iterations")},
                           load=os.getloadavg()[0])
                line = json.dumps(row)
                print(line, flush=True)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
