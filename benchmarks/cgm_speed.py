"""CGM speed benchmark: our JAX kernel vs bartz (1 tree) vs a plain-NumPy CGM, on bcw train.

Everything is measured in one process (except the cold fit, which is a fresh subprocess):

* **ours**: ``bdtree_jax.kernels.cgm`` through ``bdtree_jax.driver.run_chains`` with a fixed
  block size (default: ``bdtree_jax.sample``'s for ``method="cgm"``), for several chain counts.
  Compile time is excluded by timing two run lengths (``T`` and ``2T`` iterations, both warm):
  ``rate = chains * T / (t(2T) - t(T))`` proposals/s in aggregate.  ``T`` grows for small chain counts (``T = max(--iterations, --min-proposals /
  chains)``, rounded up to whole blocks) so every timed difference covers enough work to stand
  above the noise.  Compile time = first call of length ``T`` minus the warm time of length ``T``.
* **bartz** (``num_trees=1``, probit binary outcome): the same two-length rule.  bartz compiles
  one program per run shape, so each length is run once to compile and then timed warm.  One
  bartz iteration = one grow-or-prune proposal per tree (plus the latent/leaf Gibbs steps).
* **numpy**: :mod:`benchmarks.numpy_cgm` (one chain, same kernel and prior), timed after a
  burn-in from the stump.
* **cold run**: wall time of a fresh ``python -c`` running the README's Python example (import,
  bcw fit with 4 chains x (1000 + 1000) iterations including compilation, score, trees, ArviZ).

Usage::

    python benchmarks/cgm_speed.py --quick      # smoke run (~1-2 min)
    python benchmarks/cgm_speed.py              # full run (~10 min on 2 cores; timed runs of 0.8-8 s)
    python benchmarks/cgm_speed.py --check      # also the NumPy-vs-exact self-check (+~40 s)
    python benchmarks/cgm_speed.py --rounds 5   # also 5 alternating ours/bartz rounds at 4 chains

Machine noise on a shared 2-core box is 10-30 %: compare numbers from one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import textwrap
import time

# Run from a checkout without installing: make the repository root and this folder importable.
_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
for _p in (_ROOT, _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import numpy as np  # noqa: E402


def _load():
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


def _fmt_rate(x):
    if x is None or not np.isfinite(x):
        return "—"
    return f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}"


def _fmt_s(x):
    return "—" if x is None or not np.isfinite(x) else f"{x:.1f} s"


def _ratio(a, b):
    if a is None or b is None or not np.isfinite(a) or not np.isfinite(b) or b <= 0:
        return "—"
    return f"{a / b:.2f}×"


def _two_length(run, T, repeats):
    """``run(n)`` runs ``n`` iterations and blocks.  Returns dict(first, tT, t2T, rate_per_T)."""
    t = time.perf_counter()
    run(T)
    first = time.perf_counter() - t
    first_2T = None
    tT, t2T = [], []
    for r in range(repeats):
        t = time.perf_counter()
        run(T)
        tT.append(time.perf_counter() - t)
        t = time.perf_counter()
        run(2 * T)
        dt = time.perf_counter() - t
        if r == 0:
            first_2T = dt  # includes compilation if the run length is part of the compiled shape
        t2T.append(dt)
    if repeats > 1:
        t2T_warm = min(t2T[1:])  # the first 2T call may have compiled
    else:
        t = time.perf_counter()
        run(2 * T)
        t2T_warm = time.perf_counter() - t
    tT_warm = min(tT)
    return dict(first=first, first_2T=first_2T, tT=tT_warm, t2T=t2T_warm,
                compile=max(first - tT_warm, 0.0), delta=t2T_warm - tT_warm)


# ----------------------------------------------------------------------------------------------


def bench_ours(problem, chains, t_for, block_size, repeats, seed=0, chain_method=None):
    import jax

    import bdtree_jax as bd
    from bdtree_jax.driver import chain_devices, plan_chains, run_chains

    # exactly what bdtree_jax.sample runs (for the default chain_method)
    chain_method = plan_chains(1).chain_method if chain_method is None else chain_method
    data, _, algorithm = bd.CGM().kernel(problem, chain_method, (1.0,), 0)
    out = {}
    for c in chains:
        last = {}
        T = t_for(c)

        def run(n, c=c):
            traces, states = run_chains(
                algorithm, data, key=jax.random.key(seed), num_chains=c, num_iterations=n,
                block_size=block_size, progress=False, chain_method=chain_method,
            )
            jax.block_until_ready(states)
            last["traces"] = traces

        r = _two_length(run, T, repeats)
        r["rate"] = c * T / r["delta"] if r["delta"] > 0 else float("nan")
        tr = last["traces"]
        r["leaves"] = float(np.mean(tr["n_leaves"][:, -T:]))
        r["accept"] = float(np.mean(tr["accepted"][:, -T:]))
        r["devices"] = len(chain_devices(c))
        r["T"] = T
        out[c] = r
        print(f"  ours  {c:3d} chains: {_fmt_rate(r['rate'])}/s  compile {r['compile']:.1f} s  "
              f"(T={T}: first {r['first']:.2f} s, warm {r['tT']:.2f} s; 2T warm {r['t2T']:.2f} s)",
              file=sys.stderr, flush=True)
    return out


def bench_bartz(X, y, chains, t_for, repeats, seed=0):
    import jax

    import bartz

    Xt = np.ascontiguousarray(np.asarray(X, np.float32).T)
    yv = np.asarray(y, np.float32)
    out = {}
    for c in chains:
        T = t_for(c)

        def run(n, c=c):
            b = bartz.Bart(Xt, yv, outcome_type="binary", num_trees=1, num_chains=c, n_burn=0, n_save=n,
                           printevery=None, seed=seed)
            jax.block_until_ready(b._mcmc_state)  # noqa: SLF001

        try:
            r = _two_length(run, T, repeats)
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"  bartz {c:3d} chains failed: {exc!r}", file=sys.stderr)
            out[c] = None
            continue
        r["rate"] = c * T / r["delta"] if r["delta"] > 0 else float("nan")
        r["compile_2T"] = max(r["first_2T"] - r["t2T"], 0.0)
        r["T"] = T
        out[c] = r
        print(f"  bartz {c:3d} chains (T={T}): {_fmt_rate(r['rate'])}/s  compile {r['compile']:.1f} s "
              f"(+{r['compile_2T']:.1f} s for the 2T shape)", file=sys.stderr, flush=True)
    return out


def bench_numpy(bins, codes, n_classes, burn, T, seed=0):
    from numpy_cgm import NumpyCGM

    s = NumpyCGM(bins, codes, n_classes, concentration=1.0, max_depth=6, alpha=0.95, beta=1.0, seed=seed)
    s.run(burn)
    leaves = []
    t = time.perf_counter()
    s.run(T, callback=None)
    dt = time.perf_counter() - t
    leaves.append(s.n_leaves())
    rate = T / dt
    acc = float(s.n_accepted.sum() / max(s.n_proposed.sum(), 1))
    print(f"  numpy   1 chain : {_fmt_rate(rate)}/s ({T} iterations after {burn} burn-in, {dt:.2f} s)",
          file=sys.stderr, flush=True)
    return dict(rate=rate, seconds=dt, leaves=float(leaves[-1]), accept=acc)


COLD_CODE = textwrap.dedent(
    """
    import json, time
    t0 = time.perf_counter()
    import bdtree_jax as bd
    t1 = time.perf_counter()
    # The README's Python example, verbatim apart from the timers.
    X_train, y_train, X_test, y_test = bd.datasets.load_split("bcw")
    clf = bd.BayesianTreeClassifier(method="cgm", max_depth=6, num_warmup={warmup}, num_samples={samples},
                                    num_chains=4, seed=0).fit(X_train, y_train)
    t2 = time.perf_counter()
    acc = clf.score(X_test, y_test)
    post = clf.posterior_
    post.most_visited_tree()
    post.tree_text()
    idata = post.to_arviz()
    t3 = time.perf_counter()
    what = "README example: BayesianTreeClassifier(max_depth=6, num_warmup={warmup}, num_samples={samples}, num_chains=4) on bcw"
    print("@@" + json.dumps(dict(what=what, import_s=t1 - t0, fit_s=t2 - t1, rest_s=t3 - t2, accuracy=acc)))
    """
)


def bench_cold(warmup, samples):
    env = dict(os.environ)
    env["PYTHONPATH"] = _ROOT + os.pathsep + env.get("PYTHONPATH", "")
    code = COLD_CODE.format(warmup=warmup, samples=samples)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=_ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return dict(wall=wall, what="FAILED (see stderr)", import_s=float("nan"), fit_s=float("nan"))
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@")][-1]
    info = json.loads(line[2:])
    info["wall"] = wall
    print(f"  cold: {wall:.1f} s wall (import {info['import_s']:.1f} s, fit {info['fit_s']:.1f} s, "
          f"score + trees + to_arviz {info['rest_s']:.1f} s)", file=sys.stderr, flush=True)
    return info


# ----------------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description="CGM speed: ours vs bartz (1 tree) vs NumPy, bcw train.")
    parser.add_argument("--quick", action="store_true", help="fast smoke run (fewer chains and iterations)")
    parser.add_argument("--chains", type=str, default=None, help="comma-separated chain counts (default 1,4,16,64)")
    parser.add_argument("--bartz-chains", type=str, default=None, help="default: same as --chains")
    parser.add_argument("--iterations", type=int, default=None, help="T; rates use runs of T and 2T (default 5000)")
    parser.add_argument("--bartz-iterations", type=int, default=None, help="T for bartz (default: same as ours)")
    parser.add_argument("--block-size", type=int, default=None,
                        help="run_chains block size (default: bdtree_jax.sample's for method='cgm')")
    parser.add_argument("--min-proposals", type=int, default=None,
                        help="T >= this / chains for small chain counts (default 160000; quick 1000)")
    parser.add_argument("--repeats", type=int, default=3, help="warm timings per length; the minimum is used")
    parser.add_argument("--numpy-iterations", type=int, default=None, help="timed NumPy iterations (default 5000)")
    parser.add_argument("--chain-method", choices=("loop", "vmap"), default=None,
                        help="how our chains share a device (default: loop on CPU, as bd.sample)")
    parser.add_argument("--rounds", type=int, default=0,
                        help="after the table, this many alternating ours/bartz timings at --rounds-chains, "
                             "each with the table's rule; reports every round's ratio and their median")
    parser.add_argument("--rounds-chains", type=str, default="4", help="chain counts of --rounds (default 4)")
    parser.add_argument("--no-bartz", action="store_true")
    parser.add_argument("--no-numpy", action="store_true")
    parser.add_argument("--no-cold", action="store_true")
    parser.add_argument("--check", action="store_true", help="run the NumPy-vs-exact self-check first")
    args = parser.parse_args(argv)

    if args.quick:
        chains = [1, 4]
        T = args.iterations or 500
        min_prop = args.min_proposals or 1000
        np_T, np_burn = args.numpy_iterations or 1000, 500
        cold = (200, 200)
    else:
        chains = [1, 4, 16, 64]
        T = args.iterations or 5000
        min_prop = args.min_proposals or 160000
        np_T, np_burn = args.numpy_iterations or 5000, 2000
        cold = (1000, 1000)
    if args.chains:
        chains = [int(c) for c in args.chains.split(",")]
    bartz_chains = [int(c) for c in args.bartz_chains.split(",")] if args.bartz_chains else chains
    bartz_T = args.bartz_iterations or T
    if args.block_size is None:
        from bdtree_jax.driver import CGM_BLOCK_SIZE

        args.block_size = CGM_BLOCK_SIZE
    block = args.block_size

    def t_ours(c):
        t = max(T, -(-min_prop // c))
        return -(-t // block) * block if t > block else t

    def t_bartz(c):
        return max(bartz_T, -(-min_prop // c))

    load_before = _load()
    t_start = time.perf_counter()

    import jax

    import bdtree_jax as bd
    X, y, _, _ = bd.datasets.load_split("bcw")
    problem = bd.build_problem(X, y, task="classification", prior=bd.TreePrior(max_depth=6))
    bins = np.asarray(problem.train_bins)
    codes = np.asarray(problem.train_y)
    n, F = bins.shape

    check_tv = None
    if args.check:
        from numpy_cgm import check_against_exact

        print("NumPy CGM vs exact enumeration (6-point toy):", file=sys.stderr)
        check_tv = check_against_exact(100_000, verbose=True)

    print(f"bcw train: n={n}, F={F}; block_size={args.block_size}", file=sys.stderr)
    ours = bench_ours(problem, chains, t_ours, args.block_size, args.repeats, chain_method=args.chain_method)
    bz = {} if args.no_bartz else bench_bartz(X.to_numpy(float), y.to_numpy(), bartz_chains, t_bartz, args.repeats)
    npy = None if args.no_numpy else bench_numpy(bins, codes, len(problem.classes), np_burn, np_T)
    cold_info = None if args.no_cold else bench_cold(*cold)
    rounds = {}
    if args.rounds > 0 and not args.no_bartz:
        # Side by side again, alternating, so slow phases of the shared machine hit both samplers.
        Xb, yb = X.to_numpy(float), y.to_numpy()
        for c in [int(c) for c in args.rounds_chains.split(",")]:
            rounds[c] = []
            for k in range(args.rounds):
                print(f"round {k + 1}/{args.rounds}, {c} chains:", file=sys.stderr)
                ro = bench_ours(problem, [c], t_ours, args.block_size, args.repeats, chain_method=args.chain_method)[c]
                rb = bench_bartz(Xb, yb, [c], t_bartz, args.repeats)[c]
                rounds[c].append((ro["rate"], rb["rate"] if rb else float("nan")))
    load_after = _load()
    total = time.perf_counter() - t_start

    # ------------------------------------------------------------------ report
    try:
        import bartz

        bartz_version = bartz.__version__
    except Exception:  # noqa: BLE001
        bartz_version = "not installed"
    lines = []
    p = lines.append
    p("## CGM speed, bcw train (478 × 9, binary)")
    p("")
    p(f"- command: `{' '.join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], _ROOT) if os.path.exists(sys.argv[0]) else sys.argv[0]] + sys.argv[1:])}`"
      f" (cwd `{os.getcwd()}`)")
    p(f"- python {platform.python_version()}, jax {jax.__version__}, bartz {bartz_version}, numpy {np.__version__}; "
      f"os.cpu_count()={os.cpu_count()}")
    p(f"- jax devices: {jax.devices()} (BDTREE_CPU_DEVICES={os.environ.get('BDTREE_CPU_DEVICES')!r}, "
      f"XLA_FLAGS={os.environ.get('XLA_FLAGS')!r})")
    p(f"- load average before / after: {load_before[0]:.2f} / {load_after[0]:.2f} "
      "(>0.5 before means other processes were running)")
    p(f"- ours: `run_chains` block_size={args.block_size}, chain_method={args.chain_method or 'default'}, rate = chains·T/(t(2T) − t(T)), "
      f"T = max({T}, {min_prop}/chains) in whole blocks, min of {args.repeats} warm timings per length; "
      "max_depth 6, alpha 0.95, beta 1, move probs (0.25, 0.25, 0.4, 0.1); chains start at the stump")
    p(f"- bartz: `Bart(X.T, y, outcome_type='binary', num_trees=1, num_chains=c, n_burn=0, n_save=n, "
      f"printevery=None)`, same two-length rule with T = max({bartz_T}, {min_prop}/chains) (each length "
      "compiled once before timing; bartz's `num_chain_devices='auto'` picks the devices)")
    p("")
    p("| sampler | chains | devices | T | proposals/s (aggregate) | per chain | compile | ours / bartz | mean leaves | accept |")
    p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in chains:
        r = ours[c]
        b = bz.get(c) if bz else None
        p(f"| ours (JAX CGM) | {c} | {r['devices']} | {r['T']} | {_fmt_rate(r['rate'])} | {_fmt_rate(r['rate'] / c)} | "
          f"{_fmt_s(r['compile'])} | {_ratio(r['rate'], b['rate'] if b else None)} | {r['leaves']:.1f} | {r['accept']:.2f} |")
    for c in bartz_chains:
        b = bz.get(c) if bz else None
        if b is None:
            if not args.no_bartz:
                p(f"| bartz 1 tree | {c} | | | failed | | | | | |")
            continue
        p(f"| bartz 1 tree | {c} | auto | {b['T']} | {_fmt_rate(b['rate'])} | {_fmt_rate(b['rate'] / c)} | "
          f"{_fmt_s(b['compile'])} (+{b['compile_2T']:.1f} s per new run length) | | | |")
    if npy is not None:
        p(f"| NumPy CGM (benchmarks/numpy_cgm.py) | 1 | — | {np_T} | {_fmt_rate(npy['rate'])} | {_fmt_rate(npy['rate'])} | none | "
          f"ours(1 chain)/numpy = {_ratio(ours[chains[0]]['rate'] if chains[0] == 1 else None, npy['rate'])} | "
          f"{npy['leaves']:.0f} (last) | {npy['accept']:.2f} |")
    p("")
    if npy is not None:
        best = max(chains, key=lambda c: ours[c]["rate"])
        p(f"- best aggregate of ours: {_fmt_rate(ours[best]['rate'])}/s at {best} chains = "
          f"{_ratio(ours[best]['rate'], npy['rate'])} the single-chain NumPy baseline.")
    if cold_info is not None:
        p(f"- cold run of the {cold_info['what']} in a fresh subprocess: **{cold_info['wall']:.1f} s** wall "
          f"(interpreter start + import bdtree_jax {cold_info['import_s']:.1f} s + fit (incl. compile) "
          f"**{cold_info['fit_s']:.1f} s** + score, trees and `to_arviz()` {cold_info['rest_s']:.1f} s)")
    for c, rs in rounds.items():
        ratios = [a / b for a, b in rs]
        p(f"- {len(rs)} alternating rounds at {c} chains (ours, then bartz, same rule as the table): "
          + "; ".join(f"{_fmt_rate(a)} vs {_fmt_rate(b)} ({a / b:.2f}×)" for a, b in rs)
          + f". Median ours / bartz **{np.median(ratios):.2f}×** (range {min(ratios):.2f}–{max(ratios):.2f}×).")
    if check_tv is not None:
        p(f"- NumPy CGM self-check vs `bdtree_jax.exact.enumerate_posterior` (6 points, 33 trees, 100k iterations): "
          f"total variation {check_tv:.4f} ({'PASS' if check_tv < 0.03 else 'FAIL'}, threshold 0.03)")
    p(f"- total benchmark wall time: {total:.0f} s")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
