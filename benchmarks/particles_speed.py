"""Particle samplers' speed: top-down SMC and Particle Gibbs throughput, and accuracy vs time against CGM.

Everything runs in one process and every timing **excludes compilation**: each compiled function
is called once first (warm-up, a different seed) and then timed warm with
``jax.block_until_ready``.

1. **Throughput vs particles** (bcw train, 478 x 9, ``max_depth=6``, alpha 0.95, beta 1): for
   ``P`` in ``--particles`` (default 1, 10, 100, 1000)

   * SMC: ``bdtree_jax.kernels.smc.compiled_run(SMCConfig(..., num_particles=P, proposal="prior",
     ess_threshold=0.1), n_bins)``.  After the warm-up call, runs with fresh seeds are timed one by
     one (at least ``--repeats`` runs and until ``--min-time`` seconds are spent, at most 50):
     median seconds per run, median stages per run, and **particle-stages/s** =
     ``P * sum(stages) / sum(seconds)`` over the timed runs.
   * PG: one conditional-SMC sweep ``bdtree_jax.kernels.pg.step`` (jitted, ``P`` particles, prior
     proposal) from the stump for ``--pg-warm-sweeps`` sweeps (the first compiles), so the
     reference tree is no longer the stump, then ``--pg-timed-sweeps`` sweeps timed one by one:
     median seconds per sweep, mean stages per sweep, particle-stages/s as above, the fraction of
     sweeps that changed the tree, and the reference's leaves.
2. **Throughput vs n**: ``make_classification(n_samples=n, n_features=10, n_informative=5,
   random_state=0)`` for ``n`` in ``--ns`` (default 250, 1000, 4000, 16000): the same SMC
   measurement with ``P = 100`` and PG sweep with ``P = 10``.
3. **Accuracy vs time** on bcw (the paper's train/test split, ``load_split("bcw")``) and on a
   larger problem (``make_classification(n_samples=6000, n_features=10, n_informative=5,
   n_redundant=2, random_state=0)``: first 5000 rows train, last 1000 test), same prior
   (``max_depth=6``, alpha 0.95, beta 1), all through ``bdtree_jax.sample`` with
   ``num_chains=1``:

   * SMC, ``P`` in ``--acc-particles`` (default 10, 100, 1000), prior proposal, ess 0.1, one run
     (``num_samples=1000`` draws resampled from the final particles).  Compiled by an identical
     call with ``seed=1`` first (``compiled_run`` is cached per configuration), then timed with
     ``seed=0``.
   * CGM, one chain of ``B`` iterations for ``B`` in ``--cgm-budgets`` (default 1000, 5000,
     20000, 100000), ``num_warmup = B // 2``, ``block_size=--cgm-block-size`` (500).  The block
     program is compiled by a short warm-up run of exactly one block (``bd.sample`` reuses it for
     equal configuration and block size).
   * PG, 10 particles, ``B`` in ``--pg-budgets`` (default 100, 500, 2000) sweeps, ``num_warmup =
     B // 2``, ``block_size=--pg-block-size`` (100), compiled the same way.

   Reported: test accuracy of the posterior-averaged ``predict``, **seconds** =
   ``posterior.info["seconds"]`` (the sampler's run: SMC runs + copying the particles to the host,
   or ``run_chains`` for the chains), and the wall time of the whole warm ``bd.sample`` call
   (adds binning the data and building the posterior object).  Prediction time is not counted.
   A final line pairs every SMC run with the CGM budget closest in time (log scale) and says
   which had the better test accuracy.  One run per point: on bcw's 205 test rows one row is
   0.5 %, so differences of 1-2 rows are noise.

Usage::

    python benchmarks/particles_speed.py --quick   # smoke run of all three parts (~2-4 min)
    python benchmarks/particles_speed.py           # full run (estimated ~5-15 min on 2 quiet cores; not yet run)
    python benchmarks/particles_speed.py --parts 1,2 --particles 10,100

The markdown tables go to stdout and to ``benchmarks/results/particles_speed.md``; all numbers to
``benchmarks/results/particles_speed.json`` (``--out`` changes the stem; ``--no-write`` writes
nothing).  Progress goes to stderr.  Timings are wall-clock: on a shared machine other processes
compete for the CPU (the load average before / after is printed), so compare numbers from one
run only.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shlex
import sys
import time

# Run from a checkout without installing: make the repository root importable.
_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402

MAX_DEPTH = 6
ALPHA, BETA = 0.95, 1.0


def _log(*a):
    print(*a, file=sys.stderr, flush=True)


def _load():
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


def _ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def _fmt_s(x):
    if x is None or not np.isfinite(x):
        return "—"
    if x < 0.01:
        return f"{x * 1000:.2f} ms"
    if x < 1:
        return f"{x * 1000:.0f} ms"
    return f"{x:.2f} s"


def _fmt_rate(x):
    if x is None or not np.isfinite(x):
        return "—"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def _fmt_acc(x):
    return "—" if x is None or not np.isfinite(x) else f"{100 * x:.1f} %"


# ----------------------------------------------------------------------------------------------
# data


def _build(X, y):
    import bdtree_jax as bd

    problem = bd.build_problem(X, y, task="classification",
                               prior=bd.TreePrior(max_depth=MAX_DEPTH, alpha=ALPHA, beta=BETA))
    return problem.data, problem, int(problem.grid.n_cuts.max()) + 1


def _synthetic(n, **kw):
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=n, n_features=10, n_informative=5, random_state=0, **kw)
    return X.astype(np.float64), y.astype(np.int64)


# ----------------------------------------------------------------------------------------------
# throughput


def smc_throughput(data, n_bins, P, *, ess, repeats, min_time, seed=0):
    """Warm-up call, then >= ``repeats`` timed runs (fresh keys) until ``min_time`` s are spent."""
    import jax

    from bdtree_jax.kernels import smc

    run = smc.compiled_run(smc.SMCConfig(MAX_DEPTH, 1, int(P), "prior", float(ess)), n_bins)
    t = time.perf_counter()
    jax.block_until_ready(run(jax.random.key(10_000 + seed), data))
    first = time.perf_counter() - t
    secs, stages, resampled, logz = [], [], [], []
    spent = 0.0
    i = 0
    while (i < repeats or spent < min_time) and i < 50:
        key = jax.random.key(seed + i)
        t = time.perf_counter()
        r = jax.block_until_ready(run(key, data))
        dt = time.perf_counter() - t
        spent += dt
        secs.append(dt)
        stages.append(int(r.n_stages))
        resampled.append(int(r.n_resampled))
        logz.append(float(r.log_evidence))
        i += 1
    out = dict(P=int(P), runs=len(secs), seconds=float(np.median(secs)), seconds_all=secs,
               stages=float(np.median(stages)), stages_all=stages, resampled=float(np.median(resampled)),
               log_evidence=float(np.median(logz)), compile=max(first - float(np.median(secs)), 0.0),
               rate=P * sum(stages) / sum(secs))
    _log(f"    SMC P={P}: {_fmt_s(out['seconds'])}/run ({out['runs']} runs), {out['stages']:.0f} stages, "
         f"{_fmt_rate(out['rate'])} particle-stages/s, log Z {out['log_evidence']:.1f}, compile {out['compile']:.1f} s")
    return out


def pg_throughput(data, n_bins, P, *, warm_sweeps, timed_sweeps, seed=0):
    """Sweeps of pg.step from the stump: ``warm_sweeps`` untimed (the first compiles), then
    ``timed_sweeps`` timed one by one."""
    import jax

    from bdtree_jax.kernels import pg
    from bdtree_jax.tree import n_leaves

    config = pg.PGConfig(MAX_DEPTH, 1, int(P), "prior", n_bins=n_bins)
    step = jax.jit(functools.partial(pg.step, config=config))
    state = pg.init(None, data, config)
    key = jax.random.key(seed)
    t = time.perf_counter()
    state, info = jax.block_until_ready(step(jax.random.fold_in(key, 0), state, data))
    first = time.perf_counter() - t
    for i in range(1, warm_sweeps):
        state, info = step(jax.random.fold_in(key, i), state, data)
    jax.block_until_ready(state)
    leaves_start = int(n_leaves(state.tree))
    secs, stages, changed, leaves = [], [], [], []
    for i in range(warm_sweeps, warm_sweeps + timed_sweeps):
        k = jax.random.fold_in(key, i)
        t = time.perf_counter()
        state, info = jax.block_until_ready(step(k, state, data))
        secs.append(time.perf_counter() - t)
        stages.append(int(info.n_stages))
        changed.append(bool(info.accepted))
        leaves.append(int(n_leaves(state.tree)))
    out = dict(P=int(P), sweeps=len(secs), warm_sweeps=warm_sweeps, seconds=float(np.median(secs)),
               seconds_all=secs, stages=float(np.mean(stages)), stages_all=stages,
               changed=float(np.mean(changed)), leaves_start=leaves_start, leaves=float(np.mean(leaves)),
               compile=max(first - float(np.median(secs)), 0.0), rate=P * sum(stages) / sum(secs))
    _log(f"    PG  P={P}: {_fmt_s(out['seconds'])}/sweep ({out['sweeps']} sweeps after {warm_sweeps}), "
         f"{out['stages']:.1f} stages, {_fmt_rate(out['rate'])} particle-stages/s, {out['leaves']:.1f} leaves, "
         f"changed {out['changed']:.2f}, compile {out['compile']:.1f} s")
    return out


# ----------------------------------------------------------------------------------------------
# accuracy vs time


def _accuracy(post, X_test, y_test):
    t = time.perf_counter()
    pred = post.predict(X_test)
    acc = float(np.mean(np.asarray(pred) == np.asarray(y_test)))
    return acc, time.perf_counter() - t


def _timed_sample(X, y, **kw):
    import bdtree_jax as bd

    t = time.perf_counter()
    post = bd.sample(X, y, max_depth=MAX_DEPTH, alpha=ALPHA, beta=BETA, num_chains=1, progress=False, **kw)
    return post, time.perf_counter() - t


def accuracy_vs_time(name, X, y, X_test, y_test, *, smc_particles, cgm_budgets, pg_budgets, pg_particles,
                     cgm_block, pg_block, ess):
    rows = []

    for P in smc_particles:
        common = dict(method="smc", num_particles=int(P), ess_threshold=ess, num_samples=1000)
        _, first = _timed_sample(X, y, seed=1, **common)  # compiles (same config -> same executable)
        post, wall = _timed_sample(X, y, seed=0, **common)
        acc, pt = _accuracy(post, X_test, y_test)
        row = dict(method="SMC", budget=f"P={P}", P=int(P), seconds=float(post.info["seconds"]), wall=wall,
                   first_call=first, accuracy=acc, predict_seconds=pt, stages=int(post.info["n_stages"][0]),
                   log_evidence=float(post.log_evidence), leaves=float(np.mean(post.stats["n_leaves"])))
        rows.append(row)
        _log(f"    {name} SMC P={P}: {row['seconds']:.2f} s (call {wall:.2f} s, first call {first:.1f} s), "
             f"acc {_fmt_acc(acc)}, {row['stages']} stages, log Z {row['log_evidence']:.1f}")

    def chains(method, budgets, block, extra, label):
        # One block compiles the program that every later run of this configuration reuses.
        _, first = _timed_sample(X, y, method=method, seed=1, num_warmup=block // 2, num_samples=block - block // 2,
                                 block_size=block, **extra)
        _log(f"    {name} {label}: warm-up run of one block ({block} its) {first:.1f} s (compiles)")
        for B in budgets:
            if B < block:
                _log(f"    {name} {label}: budget {B} < block size {block} would compile another program; skipped")
                continue
            post, wall = _timed_sample(X, y, method=method, seed=0, num_warmup=B // 2, num_samples=B - B // 2,
                                       block_size=block, **extra)
            acc, pt = _accuracy(post, X_test, y_test)
            row = dict(method=label, budget=f"{B} its", iterations=int(B), seconds=float(post.info["seconds"]),
                       wall=wall, accuracy=acc, predict_seconds=pt,
                       leaves=float(np.mean(post.stats["n_leaves"])),
                       accept=float(np.mean(post.stats["accepted"])))
            rows.append(row)
            _log(f"    {name} {label} {B} its: {row['seconds']:.2f} s (call {wall:.2f} s), acc {_fmt_acc(acc)}, "
                 f"{row['leaves']:.1f} leaves, accept {row['accept']:.3f}")

    chains("cgm", cgm_budgets, cgm_block, {}, "CGM")
    if pg_budgets:
        chains("pg", pg_budgets, pg_block, dict(num_particles=int(pg_particles)), f"PG (P={pg_particles})")
    return rows


def _equal_time(rows):
    """Pair every SMC point with the CGM budget closest in (log) time."""
    smc = [r for r in rows if r["method"] == "SMC"]
    cgm = [r for r in rows if r["method"] == "CGM"]
    pairs = []
    for s in smc:
        if not cgm:
            break
        c = min(cgm, key=lambda r: abs(np.log(max(r["seconds"], 1e-9)) - np.log(max(s["seconds"], 1e-9))))
        d = s["accuracy"] - c["accuracy"]
        pairs.append(dict(smc=s["budget"], smc_seconds=s["seconds"], smc_accuracy=s["accuracy"],
                          cgm=c["budget"], cgm_seconds=c["seconds"], cgm_accuracy=c["accuracy"],
                          winner="SMC" if d > 0 else "CGM" if d < 0 else "tie"))
    return pairs


# ----------------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description="SMC / Particle Gibbs throughput and accuracy vs time against CGM.")
    parser.add_argument("--quick", action="store_true", help="tiny version of all three parts (checks the script)")
    parser.add_argument("--parts", type=str, default="1,2,3", help="which parts to run (default 1,2,3)")
    parser.add_argument("--particles", type=str, default=None, help="part 1 P values (default 1,10,100,1000)")
    parser.add_argument("--ns", type=str, default=None, help="part 2 n values (default 250,1000,4000,16000)")
    parser.add_argument("--n-smc-particles", type=int, default=100, help="part 2 SMC particles (default 100)")
    parser.add_argument("--n-pg-particles", type=int, default=10, help="part 2 PG particles (default 10)")
    parser.add_argument("--ess", type=float, default=0.1, help="SMC ess_threshold (default 0.1)")
    parser.add_argument("--repeats", type=int, default=None, help="SMC: at least this many timed runs (default 5)")
    parser.add_argument("--min-time", type=float, default=None, help="SMC: time runs until this many s (default 1)")
    parser.add_argument("--pg-warm-sweeps", type=int, default=None, help="PG: untimed sweeps first (default 20)")
    parser.add_argument("--pg-timed-sweeps", type=int, default=None, help="PG: timed sweeps (default 10)")
    parser.add_argument("--acc-particles", type=str, default=None, help="part 3 SMC P values (default 10,100,1000)")
    parser.add_argument("--cgm-budgets", type=str, default=None, help="part 3 CGM iterations (default 1000,5000,20000,100000)")
    parser.add_argument("--pg-budgets", type=str, default=None, help="part 3 PG iterations (default 100,500,2000; '' = none)")
    parser.add_argument("--pg-particles", type=int, default=10, help="part 3 PG particles (default 10)")
    parser.add_argument("--cgm-block-size", type=int, default=500)
    parser.add_argument("--pg-block-size", type=int, default=100)
    parser.add_argument("--large-n", type=int, default=None,
                        help="part 3 synthetic problem size (default 6000 = 5000 train + 1000 test)")
    parser.add_argument("--out", type=str, default=os.path.join(_HERE, "results", "particles_speed"),
                        help="output stem: writes STEM.md and STEM.json")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)

    q = args.quick
    parts = set(_ints(args.parts))
    particles = _ints(args.particles) if args.particles else ([1, 10, 100] if q else [1, 10, 100, 1000])
    ns = _ints(args.ns) if args.ns else ([250, 1000] if q else [250, 1000, 4000, 16000])
    repeats = args.repeats or (2 if q else 5)
    min_time = args.min_time if args.min_time is not None else (0.0 if q else 1.0)
    pg_warm = args.pg_warm_sweeps or (3 if q else 20)
    pg_timed = args.pg_timed_sweeps or (3 if q else 10)
    acc_particles = _ints(args.acc_particles) if args.acc_particles else ([10, 100] if q else [10, 100, 1000])
    cgm_budgets = _ints(args.cgm_budgets) if args.cgm_budgets else ([500, 2000] if q else [1000, 5000, 20000, 100000])
    if args.pg_budgets is not None:
        pg_budgets = _ints(args.pg_budgets)
    else:
        pg_budgets = [100, 200] if q else [100, 500, 2000]
    large_n = args.large_n or (1200 if q else 6000)
    large_test = large_n // 6

    command = " ".join(shlex.quote(a) for a in ["python", os.path.relpath(os.path.abspath(sys.argv[0]), _ROOT)]
                       + (sys.argv[1:] if argv is None else list(argv)))
    load_before = _load()
    t_start = time.perf_counter()

    import jax

    import bdtree_jax as bd

    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    machine = dict(python=platform.python_version(), jax=jax.__version__, numpy=np.__version__,
                   cpu_count=os.cpu_count(), affinity=affinity, machine=platform.machine(),
                   processor=platform.processor() or platform.machine(), devices=[str(d) for d in jax.devices()],
                   XLA_FLAGS=os.environ.get("XLA_FLAGS"), BDTREE_CPU_DEVICES=os.environ.get("BDTREE_CPU_DEVICES"))
    _log(f"command: {command}")
    _log(f"python {machine['python']}, jax {machine['jax']}, os.cpu_count()={machine['cpu_count']} "
         f"(affinity {affinity}), devices {machine['devices']}, load {load_before[0]:.2f}")

    X_bcw, y_bcw, Xt_bcw, yt_bcw = bd.datasets.load_split("bcw")
    results = dict(particles=None, n=None, accuracy=None)

    if 1 in parts:
        _log(f"part 1: throughput vs particles on bcw train {X_bcw.shape}")
        data, _, n_bins = _build(X_bcw, y_bcw)
        rows = []
        for P in particles:
            rows.append(dict(P=P, smc=smc_throughput(data, n_bins, P, ess=args.ess, repeats=repeats, min_time=min_time),
                             pg=pg_throughput(data, n_bins, P, warm_sweeps=pg_warm, timed_sweeps=pg_timed)))
        results["particles"] = rows

    if 2 in parts:
        _log(f"part 2: throughput vs n (SMC P={args.n_smc_particles}, PG P={args.n_pg_particles})")
        rows = []
        for n in ns:
            X, y = _synthetic(n)
            data, _, n_bins = _build(X, y)
            _log(f"  n={n} (n_bins {n_bins})")
            rows.append(dict(n=n, n_bins=n_bins,
                             smc=smc_throughput(data, n_bins, args.n_smc_particles, ess=args.ess, repeats=repeats,
                                                min_time=min_time),
                             pg=pg_throughput(data, n_bins, args.n_pg_particles, warm_sweeps=pg_warm,
                                              timed_sweeps=pg_timed)))
        results["n"] = rows

    if 3 in parts:
        X, y = _synthetic(large_n, n_redundant=2)
        n_train = large_n - large_test
        problems = [("bcw", X_bcw, y_bcw, Xt_bcw, yt_bcw),
                    (f"synthetic {n_train}/{large_test}", X[:n_train], y[:n_train], X[n_train:], y[n_train:])]
        acc = {}
        for name, Xa, ya, Xb, yb in problems:
            _log(f"part 3: accuracy vs time on {name} (train {Xa.shape}, test {len(yb)})")
            rows = accuracy_vs_time(name, Xa, ya, Xb, yb, smc_particles=acc_particles, cgm_budgets=cgm_budgets,
                                    pg_budgets=pg_budgets, pg_particles=args.pg_particles,
                                    cgm_block=args.cgm_block_size, pg_block=args.pg_block_size, ess=args.ess)
            acc[name] = dict(n_train=len(ya), n_test=len(yb), n_features=int(np.shape(Xa)[1]), rows=rows,
                             equal_time=_equal_time(rows))
        results["accuracy"] = acc

    load_after = _load()
    total = time.perf_counter() - t_start

    # ------------------------------------------------------------------ report
    lines = []
    p = lines.append
    p("## Particle samplers: SMC and Particle Gibbs throughput, accuracy vs time against CGM"
      + (" (`--quick` smoke run: tiny sizes, not for reporting)" if q else ""))
    p("")
    p(f"- command: `{command}` (cwd `{os.getcwd()}`)")
    p(f"- machine: os.cpu_count()={machine['cpu_count']} (usable {affinity}), {machine['machine']}; "
      f"python {machine['python']}, jax {machine['jax']}, numpy {machine['numpy']}; jax devices {machine['devices']} "
      f"(BDTREE_CPU_DEVICES={machine['BDTREE_CPU_DEVICES']!r}, XLA_FLAGS={machine['XLA_FLAGS']!r})")
    p(f"- load average before / after: {load_before[0]:.2f} / {load_after[0]:.2f} "
      "(> 0.5 before means other processes were running: expect noise)")
    p(f"- prior: max_depth={MAX_DEPTH}, alpha={ALPHA}, beta={BETA}, min_leaf_size 1, Dirichlet(1) leaves; "
      f"SMC: prior proposal, ess_threshold={args.ess}, multinomial resampling, node-wise growth, 1 island; "
      "PG: prior proposal. All timings exclude compilation (a warm-up call of the same compiled program first).")
    p("")

    def throughput_table(rows, key, label):
        p(f"| {label} | SMC s/run | SMC stages | SMC resampled | SMC particle-stages/s | SMC log Z | "
          "PG s/sweep | PG stages/sweep | PG particle-stages/s | PG leaves | PG changed | compile SMC / PG |")
        p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            s, g = r["smc"], r["pg"]
            p(f"| {r[key]} | {_fmt_s(s['seconds'])} | {s['stages']:.0f} | {s['resampled']:.0f} | "
              f"{_fmt_rate(s['rate'])} | {s['log_evidence']:.1f} | {_fmt_s(g['seconds'])} | {g['stages']:.1f} | "
              f"{_fmt_rate(g['rate'])} | {g['leaves']:.1f} | {g['changed']:.2f} | "
              f"{s['compile']:.1f} s / {g['compile']:.1f} s |")
        p("")

    if results["particles"] is not None:
        p(f"### 1. Throughput vs particles (bcw train, {X_bcw.shape[0]} × {X_bcw.shape[1]})")
        p("")
        p(f"- SMC: median over ≥ {repeats} warm runs with fresh seeds (and ≥ {min_time:g} s of timed runs, ≤ 50 runs); "
          "stages, resamplings and log Z are medians; particle-stages/s = P · Σ stages / Σ seconds.")
        p(f"- PG: one conditional-SMC sweep with P particles (the reference included): median of {pg_timed} "
          f"sweeps timed one by one after {pg_warm} untimed sweeps from the stump; stages and leaves (of the "
          "chain's tree) are means over the timed sweeps; 'changed' = fraction of sweeps that returned a "
          "different tree.")
        p("")
        throughput_table(results["particles"], "P", "P")

    if results["n"] is not None:
        p(f"### 2. Throughput vs n (make_classification, 10 features; SMC P={args.n_smc_particles}, "
          f"PG P={args.n_pg_particles})")
        p("")
        p("- same measurements as part 1 (n_bins per feature: "
          + ", ".join(f"n={r['n']}: {r['n_bins']}" for r in results["n"]) + ")")
        p("")
        throughput_table(results["n"], "n", "n")

    verdicts = []
    if results["accuracy"] is not None:
        p("### 3. Accuracy vs time (one chain / one run; test accuracy of the posterior-averaged `predict`)")
        p("")
        p("- seconds = `posterior.info['seconds']` of a warm `bd.sample` call (SMC: the run and the copy to the "
          "host; CGM / PG: `run_chains`), call = the whole warm `bd.sample` call (adds binning and building the "
          "posterior); compilation excluded (SMC: an identical call with seed 1 first; CGM / PG: a one-block run "
          f"first; block sizes CGM {args.cgm_block_size}, PG {args.pg_block_size}); iterations: half warm-up, "
          "half kept; SMC keeps 1000 draws resampled from its particles. One run per point: on bcw's 205 "
          "test rows one row is 0.5 %.")
        p("")
        for name, a in results["accuracy"].items():
            p(f"#### {name} (train {a['n_train']} × {a['n_features']}, test {a['n_test']})")
            p("")
            p("| method | budget | seconds | call | test accuracy | mean leaves | notes |")
            p("|---|---:|---:|---:|---:|---:|---|")
            for r in a["rows"]:
                if r["method"] == "SMC":
                    note = f"{r['stages']} stages, log Z {r['log_evidence']:.1f}"
                else:
                    note = f"accept {r['accept']:.3f}"
                p(f"| {r['method']} | {r['budget']} | {_fmt_s(r['seconds'])} | {_fmt_s(r['wall'])} | "
                  f"{_fmt_acc(r['accuracy'])} | {r['leaves']:.1f} | {note} |")
            p("")
            pairs = a["equal_time"]
            if pairs:
                desc = "; ".join(
                    f"SMC {e['smc']} ({_fmt_s(e['smc_seconds'])}, {_fmt_acc(e['smc_accuracy'])}) vs CGM {e['cgm']} "
                    f"({_fmt_s(e['cgm_seconds'])}, {_fmt_acc(e['cgm_accuracy'])}): {e['winner']}"
                    for e in pairs)
                p(f"- equal time (each SMC run vs the CGM budget closest in time): {desc}")
                wins = {w: sum(e["winner"] == w for e in pairs) for w in ("SMC", "CGM", "tie")}
                best = {m: max((r for r in a["rows"] if r["method"].startswith(m)), key=lambda r: r["accuracy"],
                               default=None) for m in ("SMC", "CGM", "PG")}
                best_s = ", ".join(f"{m} {_fmt_acc(r['accuracy'])} ({r['budget']}, {_fmt_s(r['seconds'])})"
                                   for m, r in best.items() if r is not None)
                p(f"- best accuracy per method: {best_s}")
                verdicts.append((name, wins, len(pairs)))
                p("")
        if verdicts:
            n_smc = sum(w["SMC"] for _, w, _ in verdicts)
            n_cgm = sum(w["CGM"] for _, w, _ in verdicts)
            lead = ("SMC gives the better test accuracy at equal time more often" if n_smc > n_cgm else
                    "CGM gives the better test accuracy at equal time more often" if n_cgm > n_smc else
                    "neither SMC nor CGM is more accurate at equal time more often")
            detail = "; ".join(f"{name}: SMC better in {w['SMC']}, CGM better in {w['CGM']}, tie in {w['tie']} "
                               f"of {k} equal-time pairs" for name, w, k in verdicts)
            p(f"**Equal-time verdict: {lead} ({detail}).**")
            results["verdict"] = dict(lead=lead, detail=detail)
            p("")
    p(f"- total benchmark wall time: {total:.0f} s")
    text = "\n".join(lines)
    print(text)

    if not args.no_write:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out + ".md", "w") as fh:
            fh.write(text + "\n")
        out = dict(command=command, quick=q, machine=machine, load_before=list(load_before),
                   load_after=list(load_after), total_seconds=total,
                   settings=dict(max_depth=MAX_DEPTH, alpha=ALPHA, beta=BETA, ess_threshold=args.ess,
                                 particles=particles, ns=ns, n_smc_particles=args.n_smc_particles,
                                 n_pg_particles=args.n_pg_particles, repeats=repeats, min_time=min_time,
                                 pg_warm_sweeps=pg_warm, pg_timed_sweeps=pg_timed, acc_particles=acc_particles,
                                 cgm_budgets=cgm_budgets, pg_budgets=pg_budgets, pg_particles=args.pg_particles,
                                 cgm_block_size=args.cgm_block_size, pg_block_size=args.pg_block_size,
                                 large_n=large_n, parts=sorted(parts)),
                   results=results, markdown=text)
        with open(args.out + ".json", "w") as fh:
            json.dump(out, fh, indent=1, default=float)
        _log(f"wrote {args.out}.md and {args.out}.json")


if __name__ == "__main__":
    main()
