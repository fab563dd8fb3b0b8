"""Scale benchmark (issue #25): ours against bartz where the data or the chains get big, on whatever
backend JAX has (CPU here; the same script on a GPU machine with bigger sizes), ours and bartz in
one process per measurement.

Sections (``--sections``, default all):

1. **bart**: BART regression on Friedman #1 (``D = 10``, ``sigma = 1``; ``make_friedman`` of
   ``benchmarks/bart_speed.py``), 200 trees, grow-prune, 1 chain, for every ``n`` of ``--bart-n``.
   Sweeps/s of ours (``bd.BARTRegressor(num_warmup=0, num_samples=T)``: what users run, trace
   recording and the posterior's construction included, as bartz's ``Bart`` records its trace;
   ``--bart-ours kernel`` or ``both`` adds a jitted ``lax.fori_loop`` over
   ``bdtree_jax.kernels.bart.step``, no trace.  Measured both ways once on the 2-core CPU at
   n = 1000 (load ~7): estimator 474 sweeps/s, kernel loop 212 sweeps/s -- the loop draws each
   sweep's randomness inside it, the driver a whole block's at once -- so the estimator, what users
   get, is the default) and of bartz (``bartz.Bart(X.T, y, num_trees=200,
   num_chains=1, n_burn=0, n_save=T)``), by differencing two run lengths so compilation is excluded
   (``two_lengths`` of bart_speed.py: ``rate = T / (t(2T) - t(T))``, the minimum of ``--repeats``
   warm timings per length).  ``T`` adapts to ``n``: a pilot of ``--pilot`` sweeps (compiled, then
   timed warm) estimates the rate and ``T = --target-s x rate`` (at least ``--t-min``; a multiple of
   100 from 100 on, so that our estimator's block program of 100 sweeps serves both lengths).
   Every (sampler, n) runs in a fresh subprocess; its **peak memory** is the child's peak RSS
   (``os.wait4`` rusage, ``ru_maxrss``) and, on an accelerator, the device's
   ``memory_stats()["peak_bytes_in_use"]``.  On an accelerator a size whose estimated footprint
   exceeds the device memory is skipped (said so in the table).
2. **fitmem**: the issue's memory criterion: peak RSS of a ``BARTRegressor(num_trees=200,
   num_warmup=--fit-warmup, num_samples=--fit-draws)`` fit at ``n = --fit-n`` (100k by default),
   in a fresh subprocess (goal <= 4 GB); ``--fit-memory-who ours bartz`` adds bartz's fit.
3. **cost**: XLA's static cost analysis of one BART sweep at ``n = --cost-n`` (1M by default; it
   only compiles, nothing runs at that size): ``jax.jit(f).lower(...).compile().cost_analysis()``
   ("flops", "bytes accessed") of ours (one ``bdtree_jax.kernels.bart.step``, 200 trees,
   ``max_depth`` 5, the state's shapes from ``jax.eval_shape(bart.init)``: stumps, but the program
   is the same for any trees) and of bartz's ``bartz.mcmcstep.step(key, state)`` on the initial
   state ``bartz.Bart`` builds for the same rows and trees (its defaults: ``maxdepth=6``, i.e.
   splits down to depth 5 like our ``max_depth=5``; 255 cuts, uint8 ``X``; captured before its
   MCMC loop runs).  XLA counts a ``while`` loop's body **once** whatever its trip count (a
   ``lax.scan`` over 200 trees counts as one tree), so the table also gives the loop-corrected
   totals: the compiled HLO's while bodies are re-costed on their own and multiplied by their
   known trip counts (nested loops likewise).  Both compile for the CPU backend, also on a GPU
   machine (``--cost-backend default`` compiles for JAX's default backend instead).
4. **cgm**: the CGM single-tree sampler on the RJHMC paper's bcw split (``max_depth`` 6), chains in
   ``--cgm-chains``: proposals/s of ours (``run_chains`` with ``bd.sample``'s block size) and of
   bartz (``num_trees=1``, binary outcome), by ``bench_ours`` / ``bench_bartz`` of
   ``benchmarks/cgm_speed.py`` (two lengths, minimum of ``--repeats`` warm timings).  ``T`` per
   chain count: ``--target-s`` seconds at the rate predicted from the previous chain count
   (``rate x sqrt(c / c_prev)``).
5. **hmc**: HMC-DF (RJHMC, fast schedule, the paper's bcw h / alpha / beta, ``max_depth`` 5) with
   ``--hmc-chains`` chains through ``run_chains`` (the default chain layout of the backend):
   seconds per iteration over all chains, ``(t(W + T2) - t(W + T1)) / (T2 - T1)`` of two warm runs
   with ``num_warmup = W`` (sampling-phase iterations), as ``benchmarks/rjhmc_speed.py`` times one
   chain.  The issue's figure is 64 chains; on a CPU the default is fewer (said so).

Usage::

    python benchmarks/scale_speed.py --quick          # smoke run, ~2 min on 2 CPU cores
    python benchmarks/scale_speed.py                  # CPU: n in {1k, 10k, 100k}, ~10 min on 2 cores
    python benchmarks/scale_speed.py --sections cost --cost-n 1000000
    python benchmarks/scale_speed.py                  # on a GPU: n up to 10M, chains up to 4096
    python benchmarks/scale_speed.py --t-min 20 --target-s 1   # GPU, shorter runs at the largest n (our
                                                      # estimator then compiles a block per length)

Writes ``<--out>.json`` and ``<--out>.md`` (default ``benchmarks/results/scale_speed_<backend>``)
and prints the markdown.  Timings are wall clock on a possibly shared machine: the 1-minute load
average is recorded at the start and the end; compare numbers from one run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

# Run from a checkout without installing: make the repository root and this folder importable.
_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
for _p in (str(_ROOT), str(_HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import numpy as np

RESULTS = _HERE / "results"
SECTIONS = ("cost", "bart", "fitmem", "cgm", "hmc")
TREES = 200
N_FEATURES = 10
GB = 1e9


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load1() -> float:
    try:
        return float(os.getloadavg()[0])
    except OSError:
        return float("nan")


def _peak_rss_self() -> int:
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def _device_memory() -> dict:
    """Peak and limit of the first device's allocator (accelerators; CPU devices have none)."""
    import jax

    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # noqa: BLE001 - not every backend has them
        stats = {}
    return dict(device_peak_bytes=stats.get("peak_bytes_in_use"), device_bytes_limit=stats.get("bytes_limit"))


def _emit(result: dict) -> None:
    """A worker's result: one line on stdout, read by the parent."""
    result = dict(result, peak_rss_self=_peak_rss_self(), **_device_memory())
    print("@@" + json.dumps(result, default=float), flush=True)


# ----------------------------------------------------------------------------------------------
# workers (each runs in a fresh subprocess: ``scale_speed.py --worker '{"kind": ...}'``)


def worker_info(spec: dict) -> dict:
    import jax

    try:
        import bartz

        bartz_version = bartz.__version__
    except Exception:  # noqa: BLE001
        bartz_version = "not installed"
    import numpyro

    devs = jax.devices()
    mem = _device_memory()
    return dict(jax=jax.__version__, jaxlib=getattr(jax.lib, "__version__", None) or _jaxlib_version(),
                bartz=bartz_version, numpyro=numpyro.__version__, numpy=np.__version__,
                python=platform.python_version(), backend=jax.default_backend(), n_devices=len(devs),
                devices=[str(d) for d in devs], device_kinds=sorted({d.device_kind for d in devs}),
                device_bytes_limit=mem["device_bytes_limit"])


def _jaxlib_version():
    try:
        import jaxlib

        return jaxlib.__version__
    except Exception:  # noqa: BLE001
        return None


def _choose_T(rate: float, target_s: float, t_min: int, t_max: int, multiple_from: int = 100) -> int:
    T = int(np.clip(round(target_s * rate), t_min, t_max)) if np.isfinite(rate) and rate > 0 else t_min
    if T >= multiple_from:
        T = -(-T // multiple_from) * multiple_from
    return T


def worker_bart(spec: dict) -> dict:
    """Sweeps/s of one sampler at one ``n`` (two lengths after a pilot)."""
    import jax
    from bart_speed import _bartz, make_friedman, two_lengths

    who, n, trees, seed = spec["who"], spec["n"], spec["trees"], spec["seed"]
    X, y, _ = make_friedman(n, N_FEATURES, 1.0, seed=spec["data_seed"])

    if who == "ours":
        os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
        import bdtree_jax as bd

        def run(T):
            bd.BARTRegressor(num_trees=trees, tree_sampler="grow-prune", num_warmup=0, num_samples=T, num_chains=1,
                             seed=seed, progress=False).fit(X, y)

    elif who == "ours-kernel":
        from bdtree_jax.driver import plan_chains
        from bdtree_jax.kernels import bart
        from bdtree_jax.problem.bart import build_bart_problem

        problem = build_bart_problem(X, y, n_trees=trees)
        config = _our_config(problem, trees, plan_chains(1).chain_method == "loop")
        state0 = jax.jit(lambda d: bart.init(None, d, config))(problem.data)

        @jax.jit
        def advance(key, state, data, n_steps):
            def body(i, s):
                return bart.step(jax.random.fold_in(key, i), s, data, config)[0]

            return jax.lax.fori_loop(0, n_steps, body, state)

        key = jax.random.key(seed)

        def run(T):
            jax.block_until_ready(advance(key, state0, problem.data, jnp_int(T)))

    elif who == "bartz":

        def run(T):
            _bartz(X, y, 0, T, 1, seed, num_trees=trees)

    else:
        raise ValueError(who)

    # ours: the pilot is the block program of T >= 100 (one compilation serves every length)
    P = spec["pilot"] if who != "ours" else max(spec["pilot"], min(spec["t_min"], 100))
    t = time.perf_counter()
    run(P)
    pilot_first = time.perf_counter() - t
    t = time.perf_counter()
    run(P)
    pilot_warm = time.perf_counter() - t
    rate_est = P / pilot_warm
    T = _choose_T(rate_est, spec["target_s"], spec["t_min"], spec["t_max"])
    if who == "bartz" and spec.get("reuse_pilot") and P >= spec["t_min"] and pilot_warm >= 0.5 * spec["target_s"]:
        T = P  # its program for P sweeps is compiled already
    # bartz compiles one program per run length; our estimator one block of min(100, T) sweeps (T and
    # 2T share it from T = 100 on); the kernel loop's length is traced
    per_length = who == "bartz" or (who == "ours" and T < 100)
    log(f"  [{who} n={n}] pilot {P} sweeps: first {pilot_first:.1f} s, warm {pilot_warm:.2f} s "
        f"(~{rate_est:.1f}/s) -> T = {T}")
    r = two_lengths(run, T, compiles_per_length=per_length, repeats=spec["repeats"])
    r["rate"] = T / r["delta"] if r["delta"] > 0 else float("nan")
    r.update(who=who, n=n, trees=trees, pilot=P, pilot_first=pilot_first, pilot_warm=pilot_warm,
             pilot_compile=max(pilot_first - pilot_warm, 0.0), rate_pilot=rate_est)
    log(f"  [{who} n={n}] {r['rate']:.2f} sweeps/s (T={T}: t(T) {r['tT']:.2f} s, t(2T) {r['t2T']:.2f} s; "
        f"load {r['load']:.2f})")
    return r


def jnp_int(v):
    import jax.numpy as jnp

    return jnp.int32(v)


def _our_config(problem, trees: int, incremental: bool, max_depth: int = 5):
    """The BARTConfig ``BARTRegressor`` builds (its trace dtypes; ``incremental`` as its chain plan)."""
    from bdtree_jax.kernels import cgm
    from bdtree_jax.kernels.bart import BARTConfig

    dtypes = cgm.CGMConfig.from_prior(problem.prior, n_features=problem.n_features,
                                      n_cuts=int(problem.grid.n_cuts.max())).trace_dtypes
    return BARTConfig(trees, max_depth, "grow-prune", trace_dtypes=dtypes, incremental=incremental,
                      outcome=problem.outcome)


def worker_fitmem(spec: dict) -> dict:
    """One full fit (``fit_warmup + fit_draws`` sweeps), wall time; the parent reads the peak RSS."""
    from bart_speed import _bartz, make_friedman

    who, n, trees = spec["who"], spec["n"], spec["trees"]
    X, y, _ = make_friedman(n, N_FEATURES, 1.0, seed=spec["data_seed"])
    rss_data = _peak_rss_self()
    t = time.perf_counter()
    extra = {}
    if who == "ours":
        import bdtree_jax as bd

        est = bd.BARTRegressor(num_trees=trees, num_warmup=spec["warmup"], num_samples=spec["draws"], num_chains=1,
                               seed=spec["seed"], progress=False).fit(X, y)
        post = est.posterior_
        extra["posterior_bytes"] = _nbytes(post)
    else:
        b = _bartz(X, y, spec["warmup"], spec["draws"], 1, spec["seed"], num_trees=trees)
        extra["posterior_bytes"] = _nbytes(b._main_trace)
    wall = time.perf_counter() - t
    if extra["posterior_bytes"]:
        extra["bytes_per_draw"] = extra["posterior_bytes"] / spec["draws"]
    return dict(who=who, n=n, trees=trees, warmup=spec["warmup"], draws=spec["draws"], wall=wall,
                rss_after_data=rss_data, **extra)


def _nbytes(obj, _seen=None, _depth=0) -> int:
    """Bytes of the numpy / JAX arrays reachable from ``obj`` (attributes, dicts, sequences)."""
    _seen = set() if _seen is None else _seen
    if id(obj) in _seen or _depth > 6:
        return 0
    _seen.add(id(obj))
    if isinstance(obj, np.ndarray) or type(obj).__name__ in ("ArrayImpl", "Array"):
        return int(getattr(obj, "nbytes", 0))
    if isinstance(obj, dict):
        return sum(_nbytes(v, _seen, _depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v, _seen, _depth + 1) for v in obj)
    if hasattr(obj, "__dict__"):
        return sum(_nbytes(v, _seen, _depth + 1) for v in vars(obj).values())
    if hasattr(obj, "__slots__"):
        return sum(_nbytes(getattr(obj, s, None), _seen, _depth + 1) for s in obj.__slots__)
    return 0


# --- XLA cost analysis, with while loops counted by their trip counts ---------------------------

_COMP_RE = re.compile(r"^(ENTRY )?%([^\s(]+) \(")
_WHILE_RE = re.compile(r"\bwhile\(.*?condition=%([^\s,]+), body=%([^\s,]+)")
_TRIP_RE = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_REF_RE = re.compile(r"%([^\s,(){}]+)")
COST_KEYS = ("flops", "bytes accessed", "transcendentals")


def _split_computations(text: str) -> tuple[dict, str]:
    comps, entry, cur = {}, None, None
    for line in text.splitlines():
        m = _COMP_RE.match(line)
        if m:
            cur = m.group(2)
            comps[cur] = []
            if m.group(1):
                entry = cur
            continue
        if cur is not None:
            if line.startswith("}"):
                cur = None
            else:
                comps[cur].append(line)
    return comps, entry


def _flat_cost(text: str, comp: str, client) -> dict:
    """XLA's cost analysis of the module with ``comp`` as its entry (loops inside counted once)."""
    from jax._src.lib import xla_client as xc
    from jaxlib import _hlo

    out = []
    for i, line in enumerate(text.splitlines()):
        if i == 0 and line.startswith("HloModule"):
            out.append("HloModule cost_of_" + re.sub(r"\W", "_", comp))
            continue
        m = _COMP_RE.match(line)
        if m:
            line = line[len(m.group(1) or ""):]
            if m.group(2) == comp:
                line = "ENTRY " + line
        out.append(line)
    module = _hlo.hlo_module_from_text("\n".join(out))
    c = xc._xla.hlo_module_cost_analysis(client, module)
    return {k: float(c.get(k, 0.0)) for k in COST_KEYS}


def loop_corrected_cost(compiled, client) -> dict:
    """XLA's ``cost_analysis()`` of ``compiled`` and the same with every ``while`` body counted
    ``known_trip_count`` times (recursively).  XLA's own analysis counts a body once."""
    flat = compiled.cost_analysis()
    flat = flat[0] if isinstance(flat, (list, tuple)) else flat
    flat = {k: float(flat.get(k, 0.0)) for k in COST_KEYS}
    text = compiled.as_text()
    comps, entry = _split_computations(text)
    loops, unknown = [], []
    memo_flat, memo_corr = {}, {}

    def flat_of(c):
        if c not in memo_flat:
            memo_flat[c] = _flat_cost(text, c, client)
        return memo_flat[c]

    def correction(c, stack=()):
        if c in memo_corr:
            return memo_corr[c]
        if c in stack:
            return {k: 0.0 for k in COST_KEYS}
        corr = {k: 0.0 for k in COST_KEYS}
        in_loops = set()
        for line in comps.get(c, ()):
            m = _WHILE_RE.search(line)
            if m:
                cond, body = m.group(1), m.group(2)
                in_loops.update((cond, body))
                t = _TRIP_RE.search(line)
                trip = int(t.group(1)) if t else None
                if trip is None:
                    unknown.append(body)
                fb = flat_of(body)
                cb = correction(body, stack + (c,))
                loops.append(dict(body=body, in_computation=c, top=c == entry, trip_count=trip,
                                  body_bytes=fb["bytes accessed"] + cb["bytes accessed"]))
                for k in COST_KEYS:  # replace the single counted body by trip x (its true cost)
                    corr[k] += (trip or 1) * (fb[k] + cb[k]) - fb[k]
        for line in comps.get(c, ()):  # calls, conditionals, fusions: their own loops
            for ref in set(_REF_RE.findall(line)):
                if ref in comps and ref != c and ref not in in_loops:
                    sub = correction(ref, stack + (c,))
                    for k in COST_KEYS:
                        corr[k] += sub[k]
        memo_corr[c] = corr
        return corr

    corr = correction(entry)
    total = {k: flat[k] + corr[k] for k in COST_KEYS}
    return dict(xla=flat, loop_corrected=total, loops=loops, unknown_trip_counts=len(unknown))


def _safe_cost(compiled, client) -> dict:
    """:func:`loop_corrected_cost`, or XLA's own count alone (and why) if the HLO text does not parse."""
    try:
        return loop_corrected_cost(compiled, client)
    except Exception as exc:  # noqa: BLE001 - report XLA's figure rather than nothing
        flat = compiled.cost_analysis()
        flat = flat[0] if isinstance(flat, (list, tuple)) else flat
        flat = {k: float(flat.get(k, 0.0)) for k in COST_KEYS}
        log(f"  [cost] loop correction failed: {exc!r}")
        return dict(xla=flat, loop_corrected={k: float("nan") for k in COST_KEYS}, loops=[], unknown_trip_counts=0,
                    correction_error=repr(exc)[:300])


def worker_cost(spec: dict) -> dict:
    import jax
    from bart_speed import make_friedman

    n, trees = spec["n"], spec["trees"]
    client = jax.devices()[0].client
    X, y, _ = make_friedman(n, N_FEATURES, 1.0, seed=spec["data_seed"])
    out = dict(n=n, trees=trees, backend=jax.default_backend())
    rows = []
    if "ours" in spec["who"]:
        from bdtree_jax.driver import plan_chains
        from bdtree_jax.kernels import bart
        from bdtree_jax.problem.bart import build_bart_problem

        problem = build_bart_problem(X, y, n_trees=trees, max_depth=5)
        default_incremental = plan_chains(1).chain_method == "loop"
        variants = (default_incremental,) + ((not default_incremental,) if spec.get("variants") == "both" else ())
        for incremental in variants:
            config = _our_config(problem, trees, incremental)
            state = jax.eval_shape(lambda d: bart.init(None, d, config), problem.data)  # noqa: B023
            f = jax.jit(lambda key, s, d: bart.step(key, s, d, config), donate_argnums=1)  # noqa: B023
            t = time.perf_counter()
            compiled = f.lower(jax.random.key(0), state, problem.data).compile()
            secs = time.perf_counter() - t
            cost = _safe_cost(compiled, client)
            what = (f"ours: bdtree_jax.kernels.bart.step, incremental={incremental} "
                    f"({'this backend' if incremental == default_incremental else 'the other backend'}'s variant)")
            rows.append(dict(who="ours", variant=f"incremental={incremental}", default=incremental == default_incremental,
                             what=what, compile_s=secs, **cost))
            log(f"  [cost] {what}: {secs:.1f} s to compile; bytes {cost['xla']['bytes accessed']:.3g} (XLA) / "
                f"{cost['loop_corrected']['bytes accessed']:.3g} (loops x trips)")
            del compiled
        del problem
    if "bartz" in spec["who"]:
        import bartz
        import bartz._interface as bzi

        class _Captured(Exception):
            pass

        def _capture(initial_state, *args, **kwargs):
            raise _Captured(initial_state)

        real = bzi._run_mcmc
        bzi._run_mcmc = _capture
        try:
            bartz.Bart(np.ascontiguousarray(X.T.astype(np.float32)), y.astype(np.float32), num_trees=trees,
                       num_chains=None, n_burn=0, n_save=1, printevery=None, seed=0)
            raise RuntimeError("bartz.Bart did not reach its MCMC loop")
        except _Captured as exc:
            state = exc.args[0]
        finally:
            bzi._run_mcmc = real
        t = time.perf_counter()
        compiled = bartz.mcmcstep.step.lower(jax.random.key(0), state).compile()
        secs = time.perf_counter() - t
        cost = _safe_cost(compiled, client)
        shapes = {"X": [list(state.X.shape), str(state.X.dtype)],
                  "leaf_indices": [list(state.forest.leaf_indices.shape), str(state.forest.leaf_indices.dtype)],
                  "heap": list(state.forest.leaf_tree.shape)}
        what = "bartz: bartz.mcmcstep.step on bartz.Bart's initial state (num_chains=None, maxdepth=6)"
        rows.append(dict(who="bartz", variant="default", default=True, what=what, compile_s=secs, shapes=shapes,
                         **cost))
        log(f"  [cost] {what}: {secs:.1f} s to compile; shapes {shapes}; bytes {cost['xla']['bytes accessed']:.3g} "
            f"(XLA) / {cost['loop_corrected']['bytes accessed']:.3g} (loops x trips)")
    out["rows"] = rows
    return out


# --- CGM and HMC-DF ----------------------------------------------------------------------------


def worker_cgm(spec: dict) -> dict:
    import contextlib

    from cgm_speed import bench_bartz, bench_ours

    import bdtree_jax as bd
    from bdtree_jax.driver import CGM_BLOCK_SIZE

    X, y, _, _ = bd.datasets.load_split("bcw")
    problem = bd.build_problem(X, y, task="classification", prior=bd.TreePrior(max_depth=6))
    Xb, yb = X.to_numpy(float), y.to_numpy()
    block = CGM_BLOCK_SIZE
    target, t_min, t_max, reps = spec["target_s"], spec["t_min"], spec["t_max"], spec["repeats"]
    rows = []
    last = {"ours": None, "bartz": None}

    def T_for(who, c, pred):
        T = int(np.clip(round(target * pred / c), t_min, t_max))
        return -(-T // block) * block if (who == "ours" and T > block) else T

    for c in spec["chains"]:
        row = dict(chains=c)
        prev = last["ours"]  # aggregate rate predicted from the previous chain count, x sqrt(chain ratio)
        T = T_for("ours", c, prev[1] * math.sqrt(c / prev[0]) if prev else spec["rate_guess"])
        log(f"  [cgm] {c} chain(s): ours T={T}")
        with contextlib.redirect_stdout(sys.stderr):
            r = bench_ours(problem, [c], lambda _c, T=T: T, block, reps)[c]
        row["ours"] = {k: r[k] for k in ("rate", "compile", "tT", "t2T", "T", "devices", "leaves", "accept")}
        last["ours"] = (c, r["rate"])
        if spec["bartz"]:
            # bartz's T from our rate at these chains (each bartz length compiles anew: no pilot)
            Tb = T_for("bartz", c, r["rate"] if np.isfinite(r["rate"]) else spec["rate_guess"])
            log(f"  [cgm] {c} chain(s): bartz T={Tb}")
            with contextlib.redirect_stdout(sys.stderr):
                b = bench_bartz(Xb, yb, [c], lambda _c, Tb=Tb: Tb, reps)[c]
            row["bartz"] = None if b is None else {k: b[k] for k in ("rate", "compile", "tT", "t2T", "T")}
            if b is not None and np.isfinite(b["rate"]):
                last["bartz"] = (c, b["rate"])
        row["load"] = load1()
        rows.append(row)
    return dict(rows=rows, n=int(problem.train_bins.shape[0]), block_size=block)


def worker_hmc(spec: dict) -> dict:
    import jax
    from rjhmc_speed import PAPER, _config, load_data

    from bdtree_jax.driver import plan_chains, run_chains
    from bdtree_jax.kernels.rjhmc import rjhmc

    d = load_data("bcw")
    settings = PAPER[("bcw", "df")]
    C, W, (T1, T2) = spec["chains"], spec["warmup"], spec["lengths"]
    algorithm = rjhmc(_config("df", d["K"], settings, spec["max_depth"], schedule="fast", num_warmup=W))
    L1, L2 = W + T1, W + T2
    block = math.gcd(L1, L2)
    plan = plan_chains(C)

    def run(n):
        t = time.perf_counter()
        traces, states = run_chains(algorithm, d["data"], key=jax.random.key(spec["seed"]), num_chains=C,
                                    num_iterations=n, block_size=block, progress=False, plan=plan)
        jax.block_until_ready(states)
        return time.perf_counter() - t, traces

    first, _ = run(L1)
    t1, _ = run(L1)
    t2, tr = run(L2)
    s_it = (t2 - t1) / (L2 - L1)
    sl = slice(L1, L2)
    r = dict(chains=C, chain_method=plan.chain_method, devices=len(plan.devices), num_warmup=W, lengths=[L1, L2],
             block_size=block, first=first, t1=t1, t2=t2, compile=max(first - t1, 0.0), s_per_it=s_it,
             s_per_it_per_chain=s_it / C, grads_per_it=float(np.mean(tr["nuts_grads"][:, sl])),
             leaves=float(np.mean(tr["n_leaves"][:, sl])), accept=float(np.mean(tr["accepted"][:, sl])),
             max_depth=spec["max_depth"], settings=settings, load=load1())
    log(f"  [hmc] {C} chains ({plan.chain_method}, {len(plan.devices)} device(s)): {s_it:.4f} s/it all chains "
        f"(t({L1}) {t1:.2f} s, t({L2}) {t2:.2f} s; compile {r['compile']:.1f} s; {r['grads_per_it']:.0f} grads/it)")
    return r


WORKERS = dict(info=worker_info, bart=worker_bart, fitmem=worker_fitmem, cost=worker_cost, cgm=worker_cgm,
               hmc=worker_hmc)


# ----------------------------------------------------------------------------------------------
# parent: runs the workers, collects, reports


def run_worker(spec: dict, timeout: float | None, env: dict | None = None) -> dict:
    """Run a worker in a fresh interpreter (``env``: extra environment variables); returns its
    result with ``peak_rss`` (the child's ``ru_maxrss`` from ``os.wait4``, bytes) and ``wall``, or
    ``error``."""
    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join([str(_ROOT), str(_HERE)] + [p for p in [env.get("PYTHONPATH")] if p])
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)],
                            cwd=str(_ROOT), env=env, stdout=subprocess.PIPE, text=True)
    timer = threading.Timer(timeout, proc.kill) if timeout else None
    if timer:
        timer.start()
    try:
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        if timer:
            timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t
    peak = int(usage.ru_maxrss) * 1024
    lines = [ln for ln in out.splitlines() if ln.startswith("@@")]
    if proc.returncode != 0 or not lines:
        why = f"exit status {proc.returncode}" + (" (killed: timeout or out of memory)" if proc.returncode < 0 else "")
        return dict(error=why, peak_rss=peak, wall=wall)
    res = json.loads(lines[-1][2:])
    res.update(peak_rss=peak, wall=wall)
    return res


def _git_state() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=_ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_ROOT,
                               capture_output=True, text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    dirty = [ln[3:] for ln in dirty if ln.strip()]
    return f"git {head}" + (f" + uncommitted changes in {', '.join(dirty)}" if dirty else " (clean)")


def _bart_bytes_estimate(n: int, trees: int) -> dict:
    """Rough device footprint of a 1-chain BART run at ``n`` rows (to skip what cannot fit)."""
    ours = n * (trees * 2 * 3 + N_FEATURES * 4 * 4 + 64)  # int16 leaf ids (+ scratch), bins, sorted bins, rows
    bz = n * (trees * 1 * 3 + N_FEATURES * 2 + 64)  # uint8 leaf indices (+ scratch), uint8 X, residuals
    return {"ours": ours, "ours-kernel": ours, "bartz": bz}


def section_bart(args, info) -> dict:
    rows = []
    limit = info.get("device_bytes_limit")
    whos = {"estimator": ["ours"], "kernel": ["ours-kernel"], "both": ["ours", "ours-kernel"]}[args.bart_ours] + ["bartz"]
    for n in args.bart_n:
        est = _bart_bytes_estimate(n, TREES)
        for who in whos:
            if limit and est[who] > limit:
                rows.append(dict(who=who, n=n, skipped=f"estimated {est[who] / GB:.1f} GB > device's "
                                                       f"{limit / GB:.1f} GB"))
                log(f"[bart] {who} n={n}: skipped (estimated {est[who] / GB:.1f} GB)")
                continue
            log(f"[bart] {who} n={n} (load {load1():.2f})")
            spec = dict(kind="bart", who=who, n=n, trees=TREES, seed=args.seed, data_seed=args.data_seed,
                        pilot=args.pilot, target_s=args.target_s, t_max=args.t_max, repeats=args.repeats,
                        t_min=args.t_min if who == "ours" else args.t_min_other, reuse_pilot=True)
            res = run_worker(spec, args.worker_timeout)
            res.setdefault("who", who)
            res.setdefault("n", n)
            if "error" in res:
                log(f"  [{who} n={n}] FAILED: {res['error']}")
            rows.append(res)
    return dict(rows=rows, trees=TREES, n_features=N_FEATURES, ours_via=args.bart_ours)


def section_fitmem(args, info) -> dict:
    rows = []
    for who in args.fit_memory_who:
        log(f"[fitmem] {who}: n={args.fit_n}, {TREES} trees, {args.fit_warmup} + {args.fit_draws} sweeps")
        spec = dict(kind="fitmem", who=who, n=args.fit_n, trees=TREES, warmup=args.fit_warmup, draws=args.fit_draws,
                    seed=args.seed, data_seed=args.data_seed)
        res = run_worker(spec, args.worker_timeout)
        res.setdefault("who", who)
        if "error" not in res:
            log(f"  [fitmem] {who}: peak RSS {res['peak_rss'] / GB:.2f} GB, fit {res['wall']:.1f} s")
        else:
            log(f"  [fitmem] {who}: FAILED {res['error']}")
        rows.append(res)
    return dict(rows=rows, n=args.fit_n, warmup=args.fit_warmup, draws=args.fit_draws, trees=TREES)


def section_cost(args, info) -> dict:
    log(f"[cost] one sweep at n={args.cost_n} (compile only)")
    spec = dict(kind="cost", n=args.cost_n, trees=TREES, data_seed=args.data_seed, who=["ours", "bartz"],
                variants=args.cost_variants)
    env = {"JAX_PLATFORMS": "cpu"} if args.cost_backend == "cpu" else None
    res = run_worker(spec, args.worker_timeout, env=env)
    if "error" in res:
        log(f"  [cost] FAILED: {res['error']}")
    return res


def section_cgm(args, info) -> dict:
    log(f"[cgm] chains {args.cgm_chains}")
    spec = dict(kind="cgm", chains=args.cgm_chains, target_s=args.cgm_target_s, t_min=args.cgm_t_min,
                t_max=args.cgm_t_max, repeats=args.repeats, rate_guess=args.cgm_rate_guess, bartz=True)
    res = run_worker(spec, args.worker_timeout)
    if "error" in res:
        log(f"  [cgm] FAILED: {res['error']}")
    return res


def section_hmc(args, info) -> dict:
    log(f"[hmc] {args.hmc_chains} chains")
    spec = dict(kind="hmc", chains=args.hmc_chains, warmup=args.hmc_warmup, lengths=args.hmc_lengths, max_depth=5,
                seed=args.seed)
    res = run_worker(spec, args.worker_timeout)
    if "error" in res:
        log(f"  [hmc] FAILED: {res['error']}")
    return res


# ----------------------------------------------------------------------------------------------
# report


def _f(x, spec=".2f", none="—"):
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return none
    return format(x, spec)


def _rate(x):
    if x is None or not np.isfinite(x):
        return "—"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e4:
        return f"{x / 1e3:.1f}k"
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def _ratio(a, b):
    if a is None or b is None or not np.isfinite(a) or not np.isfinite(b) or b <= 0:
        return "—"
    r = a / b
    return f"{r:.2f}×" if r >= 0.1 else f"{r:.3f}×"


def _gb(x):
    return "—" if x is None else f"{x / GB:.2f} GB"


def _n(n):
    for unit, s in ((10**6, "M"), (10**3, "k")):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{s}"
    return str(n)


def report(results: dict, args, argv) -> str:
    info = results["info"]
    lines = []
    p = lines.append
    accel = info["backend"] != "cpu"
    p(f"# Scale benchmark (issue #25): ours vs bartz {info['bartz']} on {info['backend'].upper()} "
      f"({', '.join(info['device_kinds'])})")
    p("")
    p(f"- command: `{' '.join(shlex.quote(a) for a in ['python', 'benchmarks/scale_speed.py'] + list(argv))}`")
    p(f"- python {info['python']}, jax {info['jax']} (jaxlib {info['jaxlib']}), bartz {info['bartz']}, numpyro "
      f"{info['numpyro']}, numpy {info['numpy']}")
    p(f"- backend **{info['backend']}**, {info['n_devices']} device(s): {', '.join(info['device_kinds'])} "
      f"({', '.join(info['devices'][:4])}{' …' if len(info['devices']) > 4 else ''})"
      + (f", device memory {info['device_bytes_limit'] / GB:.1f} GB" if info.get("device_bytes_limit") else "")
      + f"; host: {platform.machine()}, os.cpu_count() = {os.cpu_count()}, {platform.platform()}")
    p(f"- checkout: {results['git']}")
    p(f"- started {results['started']} UTC; load average (1 min) at start / end: {results['load_start']:.2f} / "
      f"{results['load_end']:.2f}; total wall {results['total_s']:.0f} s"
      + (" — **--quick run: short timings, small sizes; not a result**" if args.quick else ""))
    p("- every measurement runs in a fresh subprocess (its own compile caches; its peak RSS from `os.wait4`)")
    p("")

    if "bart" in results:
        bt = results["bart"]
        rows = bt["rows"]
        p(f"## BART regression: Friedman #1, D = {bt['n_features']}, {bt['trees']} trees, grow-prune, 1 chain")
        p("")
        p("Sweeps/s = T / (t(2T) − t(T)), warm, the minimum of "
          f"{args.repeats} timing(s) per length; T from a pilot run (ours: {max(args.pilot, min(args.t_min, 100))} "
          f"sweeps, the block program every length uses; bartz and the kernel loop: {args.pilot} sweeps), aiming at "
          f"t(T) ≈ {args.target_s} s (ours T ≥ {args.t_min}, a multiple of 100 from 100 on; bartz T ≥ {args.t_min_other}; "
          "bartz keeps T = the pilot's length when that run took ≥ half the target: each bartz run length "
          "compiles anew).  ours = `bd.BARTRegressor(num_trees=200, num_warmup=0, "
          "num_samples=T, num_chains=1)` (what users run: binning, trace recording and the posterior included); "
          "ours (kernel) = a jitted `lax.fori_loop` over `kernels.bart.step`, no trace; bartz = "
          "`bartz.Bart(X.T, y, num_trees=200, num_chains=1, n_burn=0, n_save=T)` (its defaults: depth ≤ 5, "
          "255 cuts, trace recorded).  Peak RSS: the whole subprocess (data, compilation, both lengths)"
          + ("; device peak: `memory_stats()['peak_bytes_in_use']`." if accel else "."))
        p("")
        p("| n | sampler | sweeps/s | ours / bartz | T | t(T) | t(2T) | compile | peak RSS | "
          + ("device peak | " if accel else "") + "load |")
        p("|---:|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if accel else "") + "---:|")
        by = {(r["who"], r["n"]): r for r in rows}
        for n in sorted({r["n"] for r in rows}):
            bz = by.get(("bartz", n))
            bz_rate = bz.get("rate") if bz and "error" not in bz and "skipped" not in bz else None
            for who in ("ours", "ours-kernel", "bartz"):
                r = by.get((who, n))
                if r is None:
                    continue
                name = {"ours": "ours", "ours-kernel": "ours (kernel)", "bartz": "bartz"}[who]
                if "skipped" in r or "error" in r:
                    what = f"skipped: {r['skipped']}" if "skipped" in r else f"failed: {r['error']}"
                    cells = [_n(n), name, what, "", "", "", "", "", _gb(r.get("peak_rss")) if "error" in r else ""]
                    cells += [""] * (1 + accel)
                    p("| " + " | ".join(cells) + " |")
                    continue
                p(f"| {_n(n)} | {name} | {_f(r['rate'], '.1f')} | "
                  f"{_ratio(r['rate'], bz_rate) if who != 'bartz' else ''} | {r['T']} | {r['tT']:.2f} s | "
                  f"{r['t2T']:.2f} s | {r['pilot_compile']:.1f} s | {_gb(r['peak_rss'])} | "
                  + (f"{_gb(r.get('device_peak_bytes'))} | " if accel else "") + f"{r['load']:.2f} |")
        p("")
        goals = []
        for n, need in ((10_000, 1.2), (100_000, 1.2), (1_000, 1.0)):
            o, b = by.get(("ours", n)), by.get(("bartz", n))
            if o and b and "rate" in o and "rate" in b and np.isfinite(o["rate"]) and np.isfinite(b["rate"]):
                q = o["rate"] / b["rate"]
                goals.append(f"- n = {_n(n)}: ours / bartz = {q:.2f}× (goal ≥ {need}×{' on the 2-core CPU' if not accel else ''}): "
                             f"**{'met' if q >= need else 'NOT met'}**")
        if goals and not accel:
            p("Issue #25's CPU goals (one run each, same process kind):")
            lines.extend(goals)
            p("")

    if "fitmem" in results:
        fm = results["fitmem"]
        p(f"## Memory of a full fit: n = {_n(fm['n'])}, {fm['trees']} trees, {fm['warmup']} warm-up + "
          f"{fm['draws']} kept draws, 1 chain")
        p("")
        p("| sampler | peak RSS | fit wall (incl. compile) | posterior arrays | per kept draw | "
          + ("device peak | " if accel else "") + "goal |")
        p("|---|---:|---:|---:|---:|" + ("---:|" if accel else "") + "---|")
        for r in fm["rows"]:
            if "error" in r:
                p(f"| {r['who']} | failed: {r['error']} ({_gb(r.get('peak_rss'))}) | | | |" + (" |" if accel else "") + " |")
                continue
            goal = ("≤ 4 GB: **" + ("met" if r["peak_rss"] <= 4 * GB else "NOT met") + "**") if r["who"] == "ours" else ""
            p(f"| {r['who']} | {_gb(r['peak_rss'])} | {r['wall']:.1f} s | {_gb(r.get('posterior_bytes'))} | "
              f"{_f((r.get('bytes_per_draw') or float('nan')) / 1e3, '.1f')} kB | "
              + (f"{_gb(r.get('device_peak_bytes'))} | " if accel else "") + f"{goal} |")
        p("")
        if fm["n"] != 100_000 or fm["draws"] != 1000:
            p(f"(The issue's criterion is n = 100k with 1,000 draws; this run used n = {_n(fm['n'])}, "
              f"{fm['draws']} draws.)")
            p("")

    if "cost" in results:
        c = results["cost"]
        p(f"## XLA cost analysis of one BART sweep: n = {_n(c.get('n', args.cost_n))}, {TREES} trees")
        p("")
        if "error" in c:
            p(f"**failed**: {c['error']} (peak RSS {_gb(c.get('peak_rss'))})")
            p("")
        else:
            p(f"`jax.jit(f).lower(...).compile().cost_analysis()` on the **{c['backend']}** backend (compiled only, "
              "never run).  ours: `bdtree_jax.kernels.bart.step(key, state, data, config)` with `max_depth=5`, "
              "the state's shapes from `jax.eval_shape(bart.init)` (stumps; the program is the same for any trees), "
              "data from `build_bart_problem` on Friedman rows, the state donated; the row marked * is the variant "
              "this backend's estimator runs (`incremental=True` on CPU, `False` on accelerators).  bartz: "
              "`bartz.mcmcstep.step(key, state)` on the initial state `bartz.Bart` builds (captured before its "
              "MCMC loop; `maxdepth=6` = splits down to depth 5, 255 cuts, uint8 X).  XLA counts a `while` body "
              "once whatever its trip count (a scan over 200 trees counts as one tree): the *loop-corrected* "
              "columns re-cost every while body of the compiled HLO on its own and multiply it by its known "
              "trip count (nested loops likewise).  Bytes per row per tree = loop-corrected bytes / (n × trees).  "
              f"Peak RSS of the compiling subprocess: {_gb(c.get('peak_rss'))}.")
            p("")
            p("| program | bytes accessed (XLA) | flops (XLA) | bytes accessed (loop-corrected) | "
              "flops (loop-corrected) | bytes / row / tree | of which in the tree loop | loops (trip counts) | compile |")
            p("|---|---:|---:|---:|---:|---:|---:|---|---:|")
            n = c["n"]
            for r in c["rows"]:
                trips = ", ".join(str(lp["trip_count"]) for lp in r["loops"]) or "none"
                mark = " *" if r["who"] == "ours" and r["default"] else ""
                # loops over the trees: top-level loops of TREES / k trips (bartz unrolls its scan by 2)
                tl = [lp for lp in r["loops"] if lp.get("top") and lp["trip_count"]
                      and TREES % lp["trip_count"] == 0 and lp["trip_count"] >= TREES // 4]
                in_loop = (f"{sum(lp['trip_count'] * lp['body_bytes'] for lp in tl) / (n * TREES):.2f} "
                           f"({' + '.join(str(lp['trip_count']) for lp in tl)} trips)" if tl else "—")
                p(f"| {r['who']} {r['variant']}{mark} | {r['xla']['bytes accessed']:.3g} | {r['xla']['flops']:.3g} | "
                  f"{r['loop_corrected']['bytes accessed']:.3g} | {r['loop_corrected']['flops']:.3g} | "
                  f"{r['loop_corrected']['bytes accessed'] / (n * TREES):.2f} | {in_loop} | {trips}"
                  f"{' (' + str(r['unknown_trip_counts']) + ' unknown, counted once)' if r['unknown_trip_counts'] else ''} | "
                  f"{r['compile_s']:.1f} s |")
            p("")
            for r in c["rows"]:
                if r.get("correction_error"):
                    p(f"- {r['who']} {r['variant']}: the loop correction failed ({r['correction_error']}); XLA's "
                      "count only")
            bz = next((r for r in c["rows"] if r["who"] == "bartz"), None)
            for r in c["rows"]:
                if r["who"] != "ours" or bz is None:
                    continue
                name = f"ours {r['variant']}{' *' if r['default'] else ''} / bartz"
                a, b = r["loop_corrected"]["bytes accessed"], bz["loop_corrected"]["bytes accessed"]
                if np.isfinite(a) and np.isfinite(b) and b > 0:
                    fl = r["loop_corrected"]["flops"] / max(bz["loop_corrected"]["flops"], 1)
                    p(f"- {name}, bytes accessed (loop-corrected): **{a / b:.2f}×** — issue #25's goal ≤ 1: "
                      f"**{'met' if a <= b else 'NOT met'}**; flops {fl:.2f}×")
                a, b = r["xla"]["bytes accessed"], bz["xla"]["bytes accessed"]
                p(f"- {name}, bytes accessed as XLA counts them (every loop body once, so not the evidence): "
                  f"{a / b:.2f}×")
            if bz is not None and "shapes" in bz:
                p(f"- bartz's state: X {bz['shapes']['X']}, leaf_indices {bz['shapes']['leaf_indices']}, "
                  f"heap {bz['shapes']['heap']}")
            p("")

    if "cgm" in results:
        cg = results["cgm"]
        p("## CGM single tree, bcw paper split (478 × 9), max_depth 6: proposals/s")
        p("")
        if "error" in cg:
            p(f"**failed**: {cg['error']}")
            p("")
        else:
            p(f"`benchmarks/cgm_speed.py`'s `bench_ours` (`run_chains`, block {cg['block_size']}, this backend's "
              "chain layout) and `bench_bartz` (`Bart(outcome_type='binary', num_trees=1, num_chains=c)`); rate = "
              f"chains·T / (t(2T) − t(T)), minimum of {args.repeats} warm timing(s) per length, aggregate over chains; "
              f"T aims at t(T) ≈ {args.cgm_target_s} s.")
            p("")
            p("| chains | ours proposals/s | ours T | bartz proposals/s | bartz T | ours / bartz | ours compile | load |")
            p("|---:|---:|---:|---:|---:|---:|---:|---:|")
            for r in cg["rows"]:
                o, b = r["ours"], r.get("bartz")
                p(f"| {r['chains']} | {_rate(o['rate'])} | {o['T']} | {_rate(b['rate']) if b else 'failed'} | "
                  f"{b['T'] if b else ''} | {_ratio(o['rate'], b['rate'] if b else None)} | {o['compile']:.1f} s | "
                  f"{r['load']:.2f} |")
            p("")
            four = next((r for r in cg["rows"] if r["chains"] == 4 and r.get("bartz")), None)
            if four is not None and not accel:
                q = four["ours"]["rate"] / four["bartz"]["rate"]
                p(f"- 4 chains (issue #7's yardstick, goal ≥ 2× on the 2-core CPU): {q:.2f}× — "
                  f"**{'met' if q >= 2 else 'NOT met'}**")
                p("")

    if "hmc" in results:
        h = results["hmc"]
        p("## HMC-DF (RJHMC, fast schedule), bcw, max_depth 5: seconds per iteration over all chains")
        p("")
        if "error" in h:
            p(f"**failed**: {h['error']}")
        else:
            note = "" if h["chains"] == 64 else f" (**{h['chains']} chains, not the issue's 64**: {'CPU default' if not accel else 'set by --hmc-chains'})"
            p(f"`run_chains` with {h['chains']} chains{note}, chain layout `{h['chain_method']}` on "
              f"{h['devices']} device(s); paper h / alpha / beta for bcw DF ({h['settings']}); num_warmup = "
              f"{h['num_warmup']}; s/it = (t({h['lengths'][1]}) − t({h['lengths'][0]})) / "
              f"{h['lengths'][1] - h['lengths'][0]}, warm, one program (block {h['block_size']}).")
            p("")
            p("| chains | s / iteration (all chains) | per chain | grads / iteration | mean leaves | accept | compile | "
              "peak RSS | load |")
            p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            p(f"| {h['chains']} | {h['s_per_it']:.4f} | {h['s_per_it_per_chain']:.5f} | {h['grads_per_it']:.0f} | "
              f"{h['leaves']:.1f} | {h['accept']:.2f} | {h['compile']:.1f} s | {_gb(h['peak_rss'])} | {h['load']:.2f} |")
            if accel and h["chains"] == 64:
                p("")
                p(f"- GPU goal ≤ 0.2 s per iteration at 64 chains: **{'met' if h['s_per_it'] <= 0.2 else 'NOT met'}**")
        p("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--worker"]:
        spec = json.loads(argv[1])
        # every worker, bartz's included, runs under the same JAX set-up (bdtree_jax's CPU devices),
        # as when both run in one process
        import bdtree_jax  # noqa: F401
        _emit(WORKERS[spec["kind"]](spec))
        return

    parser = argparse.ArgumentParser(description="Scale benchmark (issue #25): BART sweeps/s vs n, XLA cost of a "
                                     "sweep, CGM proposals/s vs chains, HMC-DF s/iteration; ours vs bartz.")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--quick", action="store_true", help="smoke run (~2 min on 2 CPU cores): small n, few chains")
    parser.add_argument("--bart-n", type=int, nargs="+", default=None,
                        help="BART rows (default CPU 1000 10000 100000; accelerator 10000 100000 1000000 10000000)")
    parser.add_argument("--bart-ours", choices=("estimator", "kernel", "both"), default="estimator",
                        help="how ours is timed: BARTRegressor (default), a fori_loop over the kernel's step, or both")
    parser.add_argument("--pilot", type=int, default=None, help="pilot sweeps that estimate the rate (default 20)")
    parser.add_argument("--target-s", type=float, default=None,
                        help="BART: seconds aimed at for t(T) (default CPU 1.5, accelerator 1; quick 0.3)")
    parser.add_argument("--t-min", type=int, default=100,
                        help="BART: smallest T of our estimator (default 100: its block of 100 sweeps, one program "
                             "for the pilot and both lengths; lower it for very large n on an accelerator)")
    parser.add_argument("--t-min-other", type=int, default=20, help="BART: smallest T of bartz and of our kernel loop")
    parser.add_argument("--t-max", type=int, default=20000, help="BART: largest T")
    parser.add_argument("--repeats", type=int, default=None, help="warm timings per length, minimum used (default 2; quick 1)")
    parser.add_argument("--fit-n", type=int, default=None, help="fitmem rows (default 100000; quick 10000)")
    parser.add_argument("--fit-draws", type=int, default=None, help="fitmem kept draws (default 1000; quick 200)")
    parser.add_argument("--fit-warmup", type=int, default=None, help="fitmem warm-up sweeps (default 100; quick 20)")
    parser.add_argument("--fit-memory-who", nargs="+", choices=("ours", "bartz"), default=["ours"])
    parser.add_argument("--cost-n", type=int, default=None, help="rows of the cost analysis (default 1000000; quick 100000)")
    parser.add_argument("--cost-variants", choices=("default", "both"), default=None,
                        help="our kernel variants costed: the backend's (default) or both incremental=True/False "
                             "(default both; quick default)")
    parser.add_argument("--cost-backend", choices=("cpu", "default"), default="cpu",
                        help="backend the cost section compiles for: cpu (default, the issue's device-independent "
                             "evidence, also on a GPU machine) or JAX's default backend")
    parser.add_argument("--cgm-chains", type=int, nargs="+", default=None,
                        help="CGM chain counts (default CPU 1 4 64 1024; accelerator 1 64 1024 4096; quick 4)")
    parser.add_argument("--cgm-target-s", type=float, default=None, help="CGM: seconds aimed at for t(T) (default 1; quick 0.3)")
    parser.add_argument("--cgm-t-min", type=int, default=200)
    parser.add_argument("--cgm-t-max", type=int, default=400_000)
    parser.add_argument("--cgm-rate-guess", type=float, default=50_000, help="proposals/s assumed for the first chain count")
    parser.add_argument("--hmc-chains", type=int, default=None, help="HMC-DF chains (default accelerator 64, CPU 4; quick 2)")
    parser.add_argument("--hmc-warmup", type=int, default=None, help="HMC-DF num_warmup of the timed runs (default accelerator 20, CPU 10; quick 5)")
    parser.add_argument("--hmc-lengths", type=int, nargs=2, default=None, metavar=("T1", "T2"),
                        help="HMC-DF sampling iterations of the two runs (default accelerator 20 60, CPU 10 30; quick 5 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--worker-timeout", type=float, default=1800, help="seconds before a subprocess is killed")
    parser.add_argument("--out", default=None, help="output stem (default benchmarks/results/scale_speed_<backend>)")
    args = parser.parse_args(argv)

    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    load_start = load1()
    t0 = time.perf_counter()
    info = run_worker(dict(kind="info"), 300)
    if "error" in info:
        raise SystemExit(f"scale_speed: could not start JAX in a subprocess ({info['error']})")
    accel = info["backend"] != "cpu"
    q = args.quick
    defaults = dict(
        bart_n=([2000], [10_000, 100_000, 1_000_000, 10_000_000] if accel else [1000, 10_000, 100_000]),
        pilot=(10, 20), target_s=(0.3, 1.0 if accel else 1.5), repeats=(1, 2), cost_variants=("default", "both"),
        fit_n=(5000, 100_000), fit_draws=(100, 1000), fit_warmup=(20, 100), cost_n=(100_000, 1_000_000),
        cgm_chains=([4], [1, 64, 1024, 4096] if accel else [1, 4, 64, 1024]), cgm_target_s=(0.3, 1.0),
        hmc_chains=(2, 64 if accel else 4), hmc_warmup=(5, 20 if accel else 10),
        hmc_lengths=([5, 10], [20, 60] if accel else [10, 30]),
    )
    for k, (quick, full) in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, quick if q else full)
    if args.out is None:
        args.out = str(RESULTS / f"scale_speed_{info['backend']}")
    log(f"scale_speed: backend {info['backend']} ({', '.join(info['device_kinds'])}), sections {args.sections}; "
        f"load {load_start:.2f}")

    results = dict(info=info, started=started, load_start=load_start, git=_git_state())
    runners = dict(cost=section_cost, bart=section_bart, fitmem=section_fitmem, cgm=section_cgm, hmc=section_hmc)
    for name in SECTIONS:  # fixed order: compile-only first, then the timings
        if name in args.sections:
            results[name] = runners[name](args, info)
    results.update(load_end=load1(), total_s=time.perf_counter() - t0)
    text = report(results, args, argv)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(text + "\n")
    out.with_suffix(".json").write_text(json.dumps(dict(args=vars(args), argv=argv, **results), indent=1,
                                                   default=float))
    log(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
