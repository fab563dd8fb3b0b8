"""BCART-PCFG speed: time and peak memory of the score ``Q`` (``bdtree_jax.pcfg.build_grammar``).

Usage::

    python benchmarks/pcfg_speed.py              # default run (~7-8 min on 2 cores at load ~12)
    python benchmarks/pcfg_speed.py --quick      # smoke run (~3 min at load ~13)
    python benchmarks/pcfg_speed.py --big        # default + expensive points (~20 min more, up to ~4 GB)
    python benchmarks/pcfg_speed.py --json out.json      # also save the raw results
    python benchmarks/pcfg_speed.py --report out.json    # print the report of saved results again
    python benchmarks/pcfg_speed.py --one '{"data": "iris", "buckets": 10}'   # one point, JSON out

What is measured
----------------
For every configuration (data set, rows ``n``, features ``d``, ``n_buckets``, ``max_depth``,
strategy) a *fresh subprocess* (this script with ``--one``) codes the features
(:func:`bdtree_jax.pcfg.code_features`), then calls :func:`~bdtree_jax.pcfg.build_grammar` twice
with the same arguments:

* **first call**: includes tracing and XLA compilation of the JAX programs;
* **steady**: the second call, same shapes, as wall time and as process CPU time (all threads;
  less sensitive than wall time to other jobs on the machine).  Whatever the library still
  compiles during it is shown as "compile in steady" (JAX's own ``/jax/core/compile/*`` duration
  events via ``jax.monitoring``, overlapping intervals counted once).

The timings cover ``build_grammar`` only (enumeration of the boxes, their statistics, ``log Q`` and
``log Q_max``, the prior's ``Q`` and the DAG height), not the coding of the features.

**Peak RSS** is ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` of that subprocess at the end, minus the
same quantity in a baseline subprocess that only imports jax and bdtree_jax (and initialises the
CPU backend); it is the peak resident set size, i.e. the high-water mark of host memory, not
an allocation count.

``build_grammar`` finds a box's children in one of two ways: **grid** (lookups in a table of the tight
box of every box of the code grid; used when the table fits in ``grid_bytes``, default 2**28
bytes) or **scans** (JAX scans over the rows; ``grid_bytes=0`` forces them).  When the
enumeration would exceed the library's limits (``max_boxes``; in newer versions also the memory
budget ``max_bytes``) it raises ``ValueError``; that point is reported as "refused (too large)"
with the time it took to refuse and the message.  Some points pass ``max_boxes=100_000`` on
purpose, to show a refusal without minutes of enumeration first.

Every subprocess records a hash of ``pcfg.py``, and the report says whether all points ran the
same version of the code (and the git commit), so results of different versions are never mixed.

**Where the steady time goes** (second table): in the subprocess the benchmark wraps a few of the
module's private helpers with timers (nothing is edited on disk; a helper that has been renamed is
shown as "—"): building the grid table, grid lookups, the JAX scans (``_expand``), the
box statistics, the score DP (``_scores``, called for ``Q``/``Q_max`` and again for the prior), the DAG
height; "host" is the rest (packing, sorting and merging keys, duplicate-split removal).

Machine noise on a shared 2-core box is large (the load average is printed): compare numbers
from one run.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import time

# Run from a checkout without installing: make the repository root importable.
_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402

_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)
_PHASES = ("grid build", "grid lookups", "JAX scans", "box stats", "scores DP", "height", "host")


# ----------------------------------------------------------------------------------------------
# Configurations


def point(data, *, n=None, d=None, buckets=None, max_depth=None, scans=False, max_boxes=None):
    """One benchmark configuration (a plain dict, so it can travel as JSON).

    ``data``: a :func:`bdtree_jax.datasets.load` name or ``"xor"`` (then ``n`` and ``d`` are
    required); ``n`` for a real data set subsamples its rows (seeded, without replacement).
    ``scans=True`` passes ``grid_bytes=0``; ``max_boxes=None`` keeps the library default.
    """
    return dict(data=data, n=n, d=d, buckets=buckets, max_depth=max_depth, scans=scans, max_boxes=max_boxes)


def plan(mode: str) -> list[tuple[str, list[dict]]]:
    """The sections of the report, each a title and its configurations (a point that appears in
    several sections is run once)."""
    xor = functools.partial(point, "xor")
    if mode == "quick":
        return [
            ("Data sets", [
                point("iris", buckets=10), point("caesarian", buckets=10), xor(n=200, d=8),
                xor(n=100, d=20, max_depth=3),
            ]),
            ("(a) growth with n: iris, 10 buckets (subsampled rows)",
             [point("iris", n=50, buckets=10), point("iris", buckets=10)]),
            ("(b) growth with d: XOR, n = 100, max_depth = 3",
             [xor(n=100, d=m, max_depth=3) for m in (4, 8, 20)]),
            ("(c) growth with buckets: iris", [point("iris", buckets=b) for b in (3, 5, 10)]),
            ("Strategies: iris, 10 buckets", [point("iris", buckets=10), point("iris", buckets=10, scans=True)]),
        ]
    sections = [
        ("Data sets", [
            point("iris", buckets=10),
            point("iris", buckets=None, max_depth=2),
            point("iris", buckets=None, max_boxes=100_000),
            point("haberman", buckets=10),
            point("caesarian", buckets=10),
            point("vertebral", buckets=5),
            xor(n=200, d=4), xor(n=200, d=8),
            xor(n=200, d=20, max_depth=4),
        ]),
        ("(a) growth with n: iris, 10 buckets (subsampled rows; grid strategy)",
         [point("iris", n=m, buckets=10) for m in (50, 100)] + [point("iris", buckets=10)]),
        ("(a) growth with n: XOR, d = 20, max_depth = 4 (scans strategy)",
         [xor(n=m, d=20, max_depth=4) for m in (100, 200, 400)]),
        ("(b) growth with d: XOR, n = 200, max_depth = 4",
         [xor(n=200, d=m, max_depth=4) for m in (4, 8, 12, 16, 20)]),
        ("(c) growth with buckets: iris (unbounded depth; 20 and none with max_boxes = 100,000)",
         [point("iris", buckets=b) for b in (3, 5, 10)]
         + [point("iris", buckets=20, max_boxes=100_000), point("iris", buckets=None, max_boxes=100_000)]),
        ("Strategies: grid lookups vs JAX scans (grid_bytes=0) on iris, 10 buckets",
         [point("iris", buckets=10), point("iris", buckets=10, scans=True)]),
    ]
    if mode == "big":
        # Not here on purpose: iris unbucketed, unbounded, default limits.  It enumerates for many
        # minutes before it is refused, and the peak RSS per box measured on the points below is
        # several times the library's per-box memory estimate, so it may come close to the RAM.
        sections.append(("Big points (--big; minutes each, GBs of memory)", [
            point("iris", buckets=None, max_depth=3),
            point("iris", buckets=None, max_depth=4),
            point("iris", buckets=20),
            point("vertebral", buckets=5, scans=True),
            xor(n=200, d=12),
            xor(n=200, d=20, max_depth=5),
        ]))
    return sections


def _key(cfg: dict) -> str:
    return json.dumps(cfg, sort_keys=True)


# ----------------------------------------------------------------------------------------------
# One configuration (runs in its own subprocess)


def _load_xy(cfg: dict):
    """``(X float (n, d), y class codes (n,), n_classes)`` of a configuration."""
    os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
    from bdtree_jax import datasets

    if cfg["data"] == "xor":
        X, y = datasets.make_xor(cfg["n"], num_features=cfg["d"], num_relevant=min(4, cfg["d"]), seed=0)
    else:
        X, y = datasets.load(cfg["data"])
        if cfg["n"] is not None and cfg["n"] < len(X):
            rows = np.sort(np.random.default_rng(0).choice(len(X), cfg["n"], replace=False))
            X, y = X.iloc[rows], y.iloc[rows]
    _, y_codes = np.unique(y.to_numpy(), return_inverse=True)
    y_codes = y_codes.ravel()
    return X.to_numpy(float), y_codes, int(y_codes.max()) + 1


class _Intervals:
    """Total length of a union of time intervals (nested compile events are counted once)."""

    def __init__(self):
        self.spans = []

    def listener(self, event, duration, **_):
        if event in _COMPILE_EVENTS:
            end = time.perf_counter()
            self.spans.append((end - duration, end))

    def total(self, since: float) -> float:
        spans = sorted((max(a, since), b) for a, b in self.spans if b > since)
        out, cur_a, cur_b = 0.0, None, None
        for a, b in spans:
            if cur_b is None or a > cur_b:
                out += 0.0 if cur_b is None else cur_b - cur_a
                cur_a, cur_b = a, b
            else:
                cur_b = max(cur_b, b)
        return out + (0.0 if cur_b is None else cur_b - cur_a)


class _PhaseTimers:
    """Timers around the pcfg module's private helpers (in this process only)."""

    def __init__(self, pcfg):
        import jax

        self.seconds = dict.fromkeys(_PHASES[:-1], 0.0)
        self.available = set()
        self.grid_used = False
        timers = self

        def timed(name, fn, block=False):
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                t = time.perf_counter()
                out = fn(*args, **kwargs)
                if block:  # the caller converts to numpy right away: same cost, now attributed
                    out = jax.block_until_ready(out)
                timers.seconds[name] += time.perf_counter() - t
                return out

            return wrapper

        for attr, name, block in (("_expand", "JAX scans", True), ("_box_stats", "box stats", True),
                                  ("_scores", "scores DP", False), ("_dag_height", "height", False)):
            if callable(getattr(pcfg, attr, None)):
                setattr(pcfg, attr, timed(name, getattr(pcfg, attr), block))
                self.available.add(name)
        base = getattr(pcfg, "_GridTables", None)
        if isinstance(base, type) and hasattr(base, "tight"):

            class TimedGrid(base):
                def __init__(self, *args, **kwargs):
                    t = time.perf_counter()
                    super().__init__(*args, **kwargs)
                    timers.seconds["grid build"] += time.perf_counter() - t
                    timers.grid_used = True

                tight = timed("grid lookups", base.tight)

            pcfg._GridTables = TimedGrid
            self.available.update({"grid build", "grid lookups"})

    def reset(self):
        for k in self.seconds:
            self.seconds[k] = 0.0
        self.grid_used = False

    def report(self, total: float) -> dict:
        out = {k: (v if k in self.available else None) for k, v in self.seconds.items()}
        out["host"] = total - sum(v for v in out.values() if v is not None)
        return out


def run_one(cfg: dict) -> dict:
    """Time two ``build_grammar`` calls of one configuration; return a JSON-able dict."""
    import jax

    from bdtree_jax import pcfg
    from bdtree_jax.likelihoods import DirichletMultinomial

    pcfg_sha = _file_hash(pcfg.grammar.__file__)  # the version imported
    X, y_codes, n_classes = _load_xy(cfg)
    codes, boundary_cut = pcfg.code_features(X, cfg["buckets"])
    lik = DirichletMultinomial(n_classes, 1.0)
    stats = lik.point_stats(y_codes)
    kwargs = dict(log_phi=2.0, max_depth=cfg["max_depth"], boundary_cut=boundary_cut)
    if cfg["scans"]:
        kwargs["grid_bytes"] = 0
    if cfg["max_boxes"] is not None:
        kwargs["max_boxes"] = cfg["max_boxes"]

    compile_spans = _Intervals()
    jax.monitoring.register_event_duration_secs_listener(compile_spans.listener)
    phases = _PhaseTimers(pcfg.grammar)
    n_codes = codes.max(axis=0) + 1
    out = dict(cfg=cfg, pcfg_sha=pcfg_sha, n_rows=int(codes.shape[0]), n_features=int(codes.shape[1]),
               n_codes=[int(b) for b in n_codes], K=int(np.sum(n_codes - 1)), status="ok")
    calls = []
    for _ in range(2):  # first call, then steady
        phases.reset()
        c0, t0 = time.process_time(), time.perf_counter()
        try:
            g = pcfg.build_grammar(codes, stats, lik, **kwargs)
        except ValueError as exc:
            out.update(status="refused", message=str(exc), refused_after_s=time.perf_counter() - t0,
                       first_compile_s=compile_spans.total(t0))
            break
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        calls.append(dict(seconds=dt, cpu_s=cpu, compile_s=compile_spans.total(t0), phases=phases.report(dt),
                          boxes=int(g.n_boxes), log_q_root=float(g.log_q[-1, 0]),
                          log_qmax_root=float(g.log_qmax[-1, 0])))
        out["strategy"] = "grid" if phases.grid_used else "scans"
        del g
    if calls:
        first, steady = calls[0], calls[-1]
        out.update(boxes=first["boxes"], first_s=first["seconds"], first_compile_s=first["compile_s"],
                   steady_s=steady["seconds"], steady_cpu_s=steady["cpu_s"], steady_compile_s=steady["compile_s"],
                   phases=steady["phases"],
                   log_q_root=first["log_q_root"], log_qmax_root=first["log_qmax_root"],
                   same_both_calls=all(c["boxes"] == first["boxes"] and c["log_q_root"] == first["log_q_root"]
                                       for c in calls))
    if "strategy" not in out:  # refused on the first call: which strategy it would have used
        size = getattr(getattr(pcfg, "_GridTables", None), "size", None)
        grid_bytes = kwargs.get("grid_bytes", 2.0**28)
        out["strategy"] = "?" if size is None else ("grid" if size(n_codes) <= grid_bytes else "scans")
    out["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return out


def _file_hash(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha1(fh.read()).hexdigest()[:10]


def _git_head() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=_ROOT, capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "bdtree_jax"], cwd=_ROOT, capture_output=True,
                               text=True).stdout.strip()
    except OSError:
        return "n/a"
    return f"{head}{' + uncommitted changes in bdtree_jax/' if dirty else ''}"


def baseline() -> dict:
    """Peak RSS after importing jax and bdtree_jax and initialising the CPU backend."""
    import jax

    import bdtree_jax  # noqa: F401
    from bdtree_jax import pcfg  # noqa: F401

    jax.devices()
    return dict(maxrss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


# ----------------------------------------------------------------------------------------------
# Driver


def _subprocess(args: list[str], timeout: float) -> dict:
    """Run this script with ``args`` in a fresh interpreter; its last ``@@`` line, parsed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = _ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, os.path.abspath(__file__), *args]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(status="timeout", message=f"killed after {timeout:.0f} s", wall_s=time.perf_counter() - t)
    wall = time.perf_counter() - t
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        return dict(status="error", message=f"exit code {proc.returncode}: {tail}", wall_s=wall)
    out = json.loads(lines[-1][2:])
    out["wall_s"] = wall
    return out


def _describe(cfg: dict) -> str:
    parts = [cfg["data"]]
    for k in ("n", "d", "buckets", "max_depth", "max_boxes"):
        if cfg[k] is not None:
            parts.append(f"{k}={cfg[k]}")
    if cfg["scans"]:
        parts.append("scans")
    return " ".join(parts)


def _s(x, digits=2):
    return "—" if x is None else f"{x:.{digits}f}"


def _mb(r, base_kb):
    return "—" if "maxrss_kb" not in r else f"{(r['maxrss_kb'] - base_kb) / 1024:.0f}"


def _row(cfg: dict, r: dict, base_kb: int, show_version: bool = False) -> str:
    n = r.get("n_rows", cfg["n"] or "")
    d = r.get("n_features", cfg["d"] or "")
    buckets = "none" if cfg["buckets"] is None else cfg["buckets"]
    depth = "∞" if cfg["max_depth"] is None else cfg["max_depth"]
    strategy = r.get("strategy", "scans" if cfg["scans"] else "?")
    if cfg["scans"]:
        strategy += " (grid_bytes=0)"
    status = r.get("status", "?")
    if status == "ok":
        boxes = f"{r['boxes']:,}"
        first, steady, cpu = _s(r["first_s"]), _s(r["steady_s"]), _s(r["steady_cpu_s"])
        note = f"compile in steady {r['steady_compile_s']:.1f} s" if r["steady_compile_s"] > 0.05 else ""
        if not r["same_both_calls"]:
            note += " (the two calls DIFFER)"
    elif status == "refused":
        boxes = "refused (too large)"
        first, steady, cpu = f"{r['refused_after_s']:.2f} (to refuse)", "—", "—"
        note = re.sub(r"\s*\([^()]*\)", "", r["message"]).split(". ")[0] + " …"  # first sentence, no asides
    else:
        boxes, first, steady, cpu, note = status, "—", "—", "—", r.get("message", "")
    if show_version and "pcfg_sha" in r:
        note = f"{note} [pcfg.py {r['pcfg_sha']}]".strip()
    return (f"| {cfg['data']} | {n} | {d} | {buckets} | {r.get('K', '')} | {depth} | {strategy} | {boxes} | "
            f"{first} | {steady} | {cpu} | {_mb(r, base_kb)} | {note} |")


def _slope(xs, ys) -> float | None:
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    ok = (xs > 0) & (ys > 0)
    if ok.sum() < 2 or np.ptp(np.log(xs[ok])) == 0:
        return None
    return float(np.polyfit(np.log(xs[ok]), np.log(ys[ok]), 1)[0])


def _growth_note(title: str, cfgs: list[dict], results: dict, base_kb: int) -> str | None:
    """Log-log slopes of steady time, boxes and peak RSS against the swept variable."""
    var = "n" if "growth with n" in title else "d" if "growth with d" in title else None
    if var is None:
        return None
    pts = [(cfg, results[_key(cfg)]) for cfg in cfgs]
    pts = [(c, r) for c, r in pts if r.get("status") == "ok"]
    xs = [r["n_rows"] if var == "n" else r["n_features"] for _, r in pts]
    fits = {
        "steady time": _slope(xs, [r["steady_s"] for _, r in pts]),
        "boxes": _slope(xs, [r["boxes"] for _, r in pts]),
        "peak RSS": _slope(xs, [max(r["maxrss_kb"] - base_kb, 1) for _, r in pts]),
    }
    txt = ", ".join(f"{k} ∝ {var}^{v:.1f}" for k, v in fits.items() if v is not None)
    return f"- log-log slopes over the points that ran: {txt}" if txt else None


def _load_avg():
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "n/a"


def main(argv=None):
    parser = argparse.ArgumentParser(description="Time and peak memory of bdtree_jax.pcfg.build_grammar.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="smoke run (fewer, smaller points)")
    mode.add_argument("--big", action="store_true", help="also the expensive points (slow, several GB)")
    mode.add_argument("--one", metavar="JSON", help="run one configuration here, print '@@' + JSON result")
    mode.add_argument("--report", metavar="PATH", help="only print the report of a --json file")
    mode.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per configuration subprocess (default 300; --big 1800)")
    parser.add_argument("--json", metavar="PATH", help="also write all raw results to this JSON file")
    args = parser.parse_args(argv)

    if args.one is not None:
        cfg = point(**{"data": "iris", **json.loads(args.one)})
        print("@@" + json.dumps(run_one(cfg)), flush=True)
        return
    if args.baseline:
        print("@@" + json.dumps(baseline()), flush=True)
        return
    if args.report:
        with open(args.report) as fh:
            saved = json.load(fh)
        results = {r["key"]: r for r in saved["results"]}
        print(report(plan(saved["meta"]["mode"]), results, saved["meta"]))
        return

    run_mode = "quick" if args.quick else "big" if args.big else "default"
    timeout = args.timeout or (1800.0 if args.big else 300.0)
    sections = plan(run_mode)
    cmd = [os.path.relpath(sys.argv[0], _ROOT) if os.path.exists(sys.argv[0]) else sys.argv[0]] + sys.argv[1:]
    meta = dict(mode=run_mode, command=f"python {' '.join(shlex.quote(a) for a in cmd)}", cwd=os.getcwd(),
                uptime_before=_uptime(), load_before=_load_avg()[0], git_before=_git_head())
    t_start = time.perf_counter()

    base = _subprocess(["--baseline"], timeout)
    if "maxrss_kb" not in base:
        raise SystemExit(f"baseline subprocess failed: {base}")
    meta["baseline_kb"] = base["maxrss_kb"]
    print(f"baseline (import jax + bdtree_jax): peak RSS {base['maxrss_kb'] / 1024:.0f} MB", file=sys.stderr,
          flush=True)

    results: dict[str, dict] = {}
    for _, cfgs in sections:
        for cfg in cfgs:
            k = _key(cfg)
            if k in results:
                continue
            t = time.perf_counter()
            r = _subprocess(["--one", json.dumps(cfg)], timeout)
            results[k] = r
            what = (f"{r['boxes']:,} boxes, first {r['first_s']:.2f} s, steady {r['steady_s']:.2f} s"
                    if r.get("status") == "ok" else f"{r.get('status')}: {r.get('message', '')[:100]}")
            print(f"  {_describe(cfg):45s} {what}  [{time.perf_counter() - t:.0f} s wall, "
                  f"load {_load_avg()[0]:.1f}]", file=sys.stderr, flush=True)
    meta.update(total_s=time.perf_counter() - t_start, uptime_after=_uptime(), git_after=_git_head())
    if args.json:  # raw results first, so a failure while formatting loses nothing
        with open(args.json, "w") as fh:
            json.dump(dict(meta=meta, results=[dict(key=k, **r) for k, r in results.items()]), fh, indent=1)
    print(report(sections, results, meta))


def report(sections, results: dict, meta: dict) -> str:
    """The markdown report of a run."""
    import jax

    base_kb = meta["baseline_kb"]
    versions = sorted({r["pcfg_sha"] for r in results.values() if "pcfg_sha" in r})
    lines = []
    p = lines.append
    p("## BCART-PCFG: time and peak memory of `pcfg.build_grammar` (the score Q)")
    p("")
    p(f"- command: `{meta['command']}` (cwd `{meta['cwd']}`), mode {meta['mode']}")
    p(f"- python {platform.python_version()}, jax {jax.__version__}, numpy {np.__version__}, "
      f"os.cpu_count()={os.cpu_count()}")
    p(f"- library: git {meta['git_before']} at the start, {meta['git_after']} at the end; pcfg.py hash "
      + (f"{versions[0]} for every point" if len(versions) == 1 else
         f"CHANGED during the run ({', '.join(versions)}; each row's note says which): compare points with care"))
    p(f"- `uptime` before: {meta['uptime_before']}")
    p(f"- `uptime` after:  {meta['uptime_after']}")
    p("- DirichletMultinomial(concentration 1), log_phi = 2; each point in a fresh subprocess; "
      "first call includes JAX compilation, steady = second call with the same shapes; "
      f"peak RSS = ru_maxrss of the subprocess minus {base_kb / 1024:.0f} MB (import-only baseline)")
    p("- K = split candidates; strategy = how children are found (grid lookups / JAX scans); steady CPU s = "
      "process CPU time of the steady call, all threads (less sensitive to the load than wall time)")
    for title, cfgs in sections:
        p("")
        p(f"### {title}")
        p("")
        p("| dataset | n | d | buckets | K | max_depth | strategy | boxes | first-call s | steady s | "
          "steady CPU s | peak RSS MB | note |")
        p("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|")
        for cfg in cfgs:
            p(_row(cfg, results[_key(cfg)], base_kb, show_version=len(versions) > 1))
        note = _growth_note(title, cfgs, results, base_kb)
        if note:
            p("")
            p(note)

    # strategy agreement
    p("")
    p("### Strategy agreement (grid vs scans)")
    p("")
    pairs = {}
    for _, cfgs in sections:
        for cfg in cfgs:
            pairs.setdefault(_key({**cfg, "scans": False}), {})[cfg["scans"]] = results[_key(cfg)]
    for k, pair in pairs.items():
        if len(pair) == 2 and all(r.get("status") == "ok" for r in pair.values()):
            g, s = pair[False], pair[True]
            same = g["boxes"] == s["boxes"] and g["log_q_root"] == s["log_q_root"]
            p(f"- {_describe(json.loads(k))}: grid ({g['strategy']}) {g['boxes']:,} boxes, log_q[-1,0] = "
              f"{g['log_q_root']:.6f}; scans {s['boxes']:,} boxes, log_q[-1,0] = {s['log_q_root']:.6f} -> "
              f"{'identical' if same else 'DIFFERENT (|Δ log Q| = %.3g)' % abs(g['log_q_root'] - s['log_q_root'])}; "
              f"steady {g['steady_s']:.2f} s vs {s['steady_s']:.2f} s")

    # phase breakdown
    p("")
    p("### Where the steady (second-call) time goes, seconds")
    p("")
    p("| configuration | steady | compile in it | " + " | ".join(_PHASES) + " |")
    p("|---|---:|---:|" + "---:|" * len(_PHASES))
    seen = set()
    for _, cfgs in sections:
        for cfg in cfgs:
            k = _key(cfg)
            r = results[k]
            if k in seen or r.get("status") != "ok":
                continue
            seen.add(k)
            ph = r["phases"]
            p(f"| {_describe(cfg)} | {r['steady_s']:.2f} | {r['steady_compile_s']:.2f} | "
              + " | ".join(_s(ph.get(name)) for name in _PHASES) + " |")

    # refusals and goals
    refusals = [(json.loads(k), r) for k, r in results.items() if r.get("status") in ("refused", "error", "timeout")]
    if refusals:
        p("")
        p("### Refused / failed points")
        p("")
        for cfg, r in refusals:
            p(f"- {_describe(cfg)}: **{r['status']}** — {r.get('message', '')}")
    p("")
    p("### Project goals")
    p("")
    iris = results.get(_key(point("iris", buckets=10)))
    if iris and iris.get("status") == "ok":
        p(f"- iris (10 buckets) under 1 s after compilation: steady {iris['steady_s']:.2f} s "
          f"({'met' if iris['steady_s'] < 1 else 'NOT met'} at load {meta['load_before']:.1f}; first call "
          f"{iris['first_s']:.2f} s)")
    for cfg_k, r in results.items():
        cfg = json.loads(cfg_k)
        if cfg["data"] == "xor" and cfg["d"] == 20 and cfg["n"] == 200:
            status = (f"handled: {r['boxes']:,} boxes, first {r['first_s']:.1f} s, steady {r['steady_s']:.1f} s, "
                      f"peak RSS {_mb(r, base_kb)} MB" if r.get("status") == "ok" else r.get("status"))
            p(f"- XOR d = 20, n = 200, max_depth = {cfg['max_depth']}: {status}")
    p("")
    p(f"- total benchmark wall time: {meta['total_s']:.0f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
