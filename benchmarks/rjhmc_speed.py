"""RJHMC-Tree speed: our padded JAX kernel (fast and paper schedules) vs the reference's cost model.

Seconds per RJ iteration on the paper's iris and bcw train splits (HMC-DF and HMC-DFI, the paper's
h / alpha / beta (the authors' training script), ``max_depth=5``, one chain), all measured in one process:

* **ours, fast schedule** (``RJHMCConfig(schedule="fast")``, ``leg_steps=4``): run through
  ``bdtree_jax.driver.run_chains`` with a fixed block size, so every run length uses one compiled
  program.  ``num_warmup`` is set small (``--fast-warmup``, default 20) and two run lengths
  ``num_warmup + T1`` and ``num_warmup + T2`` are timed warm; ``(t2 - t1) / (T2 - T1)`` is the cost
  of an iteration **in the sampling phase** (frozen step size and mass matrix, move probabilities
  (0.2, 0.2, 0.6)).  Compile time = first (cold) call minus the warm call of the same length.  The
  warm-up cost per iteration is estimated from the short run as ``(t1 - T1 * s_sampling) /
  num_warmup`` (it includes the chain init and the per-call overhead), and the paper's bcw chain
  (200 warm-up + 800 sampling iterations) is extrapolated as ``200 s_warmup + 800 s_sampling``.
  Caveat: with a short warm-up the global NUTS adaptation sees ``2 * 4 * num_warmup`` transitions
  instead of 1600, so the step size (hence gradients per iteration, printed) can differ from a
  paper-length run; ``--full`` measures the real thing.
* **``--full``**: bcw HMC-DF with the paper's ``num_warmup=200``: cold 20 iterations (compile),
  warm 20, warm 200 (warm-up only) and warm 1000 (200 + 800): the 1000-iteration chain's wall time
  excluding compilation, and the warm-up / sampling split ``t200 / 200`` and ``(t1000 - t200) / 800``.
* **ours, paper schedule** (``schedule="paper"``: every leg re-adapts NUTS for 500 steps and keeps
  one draw, as the reference does; padded, so no recompilation): a jitted loop over the kernel's
  ``step`` (``n`` traced), compiled ahead of time (``jit(...).lower(...).compile()``, timed
  separately), then ``--paper-iterations`` (default 2) iterations timed in one call (an iteration
  takes seconds, so the per-call overhead is negligible).  Started from the fast chain's final
  state (same padded layout; ``num_warmup=0``, so sampling-phase moves) rather than from ``init``:
  the cost of a paper-schedule iteration is 2 x 501 NUTS transitions whose tree depth depends
  strongly on the state (gradients per iteration are printed; from a prior draw an iteration can
  take minutes on bcw), and a short timing should see a typical state, not the first one.  One
  iteration is a small sample: the same dataset can need 80 or 800 gradients per transition
  depending on the state.  The per-leg re-adaptation starts from step size 1 without NumPyro's
  ``find_reasonable_step_size`` heuristic, like ``NUTS(model)`` with its defaults (the reference);
  the printed gradients per NUTS transition compare ours with the reference's legs.
* **reference cost model**: what the authors' code does per leg — a NumPyro model written for the
  *current* topology (unpadded: a Python loop over its internal nodes, per-node sites ``tau_i ~
  Beta(1, 1)`` and ``index_i ~ Categorical(1/F)`` (DF) or ``Dirichlet(1)`` (DFI), leaf memberships
  as products along the paths, Dirichlet-multinomial soft-count likelihood without the per-leaf
  constant as ``numpyro.factor``), and a **new** ``MCMC(NUTS(model)`` or
  ``DiscreteHMCGibbs(NUTS(model), random_walk=True)`` for DF, ``num_warmup=500, num_samples=1)``
  per leg, started from the previous leg's draw (``init_params``), so JAX traces and compiles
  afresh every leg.  Two legs per RJ iteration plus the two eager ``log_density`` evaluations of
  the acceptance at ``h_final``.  ``--ref-iterations`` (default 3) iterations grow the tree
  1 -> 2 -> 3 -> 4 internal nodes (root, left, right, left-left), after one untimed leg that pays
  the process-wide one-time costs.  Reported: seconds per iteration including compilation (the
  cost model) and without it, using JAX's own compile-event timers (``jax.monitoring``: trace +
  lowering + XLA backend compile) to separate compilation from running.  Calling ``mcmc.run``
  again on the same ``MCMC`` object does **not** reuse the executable with this NumPyro (0.22):
  the sampling loop is lowered and XLA-compiled again.  The last leg's warm-up is re-run once on
  its ``MCMC`` object (``mcmc.warmup``, same key and start, so the same trajectory) to show that and
  to count its gradient evaluations (NUTS ``num_steps``) for the per-transition comparison.
  Simplifications: constant ``h = h_init`` inside a leg (the reference anneals h with a patched
  NumPyro; only bcw DFI has ``h_init != h_final``), ``progress_bar=False`` (NumPyro's default
  progress bar runs the loop from Python and is slower), no Gibbs-quirk replication.

Usage::

    python benchmarks/rjhmc_speed.py --quick    # smoke run (~1.5 min): bcw DF, fast + 1 reference iteration
    python benchmarks/rjhmc_speed.py            # iris + bcw, DF + DFI; paper schedule on iris (~8-9 min)
    python benchmarks/rjhmc_speed.py --full     # + paper schedule on bcw (1-4 min per kind) and the
                                                #   bcw DF 200 + 800-iteration chain (~2.5 min): ~15 min
    python benchmarks/rjhmc_speed.py --kinds df --datasets bcw --json /tmp/rjhmc_speed.json
    python benchmarks/rjhmc_speed.py --datasets cgm --kinds df --fast-warmup 10 --fast-lengths 5 15
                                                # cgm regression at h = 0.001: the configuration
                                                #   before issue 29 and today's, side by side (~5 min)

**cgm** (regression, ``--datasets cgm``) is timed like the fast rows, once per entry of
``CGM_VARIANTS``: the configuration before issue 29 (the paper's jump, whose new leaf mean is a
prior draw, and NUTS ``max_tree_depth=10``) and today's (leaf means from their full conditional,
``max_tree_depth=5``), in the same process, so the two numbers share the machine's load.

Timings are wall-clock on a shared machine: other processes compete for the CPU (the load
average before/after is printed), so expect 10-30 % noise; compare numbers from one run only.
"""

from __future__ import annotations

import argparse
import json
import math
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

# the paper's per-dataset h_init, h_final, alpha, beta (the authors' training script)
PAPER = {
    ("iris", "df"): dict(h_init=0.01, h_final=0.01, alpha=0.45, beta=1.0),
    ("bcw", "df"): dict(h_init=0.025, h_final=0.025, alpha=0.45, beta=2.5),
    ("iris", "dfi"): dict(h_init=0.01, h_final=0.01, alpha=0.7, beta=1.0),
    ("bcw", "dfi"): dict(h_init=0.1, h_final=0.025, alpha=0.95, beta=2.0),
}
# cgm regression (configs/cgm_hmc-df.yaml, cgm_hmc-dfi.yaml): the paper's h, alpha, beta
CGM_PAPER = {
    "df": dict(h_init=0.001, h_final=0.001, alpha=0.45, beta=2.5),
    "dfi": dict(h_init=0.01, h_final=0.001, alpha=0.45, beta=2.5),
}
# today's configuration (before issue 29) and the new one, timed side by side in one run
CGM_VARIANTS = {
    "before (prior jump, max_tree_depth 10)": dict(leaf_proposal="prior", split_proposal="prior", max_tree_depth=10),
    "now (conditional leaves and rules, max_tree_depth 5)": dict(
        leaf_proposal="conditional", split_proposal="conditional", max_tree_depth=5
    ),
}
PAPER_WARMUP, PAPER_SAMPLES = 200, 800
LEG_WARMUP = 500
LEG_STEPS = 4  # RJHMCConfig default (fast schedule)
# grown one node per RJ iteration in the reference cost model (heap ids: root, left, right, left-left)
REF_GROWTH = (0, 1, 2, 3)

_COMPILE_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "backend",
}


def _load():
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


def _log(msg):
    print(msg, file=sys.stderr, flush=True)


def _fmt(x, digits=3):
    if x is None or not np.isfinite(x):
        return "—"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}g}"


def _pct(x):
    return "—" if x is None or not np.isfinite(x) else f"{100 * x:.0f} %"


def _ratio(a, b):
    if a is None or b is None or not np.isfinite(a) or not np.isfinite(b) or b <= 0:
        return "—"
    q = a / b
    return f"{q:.0f}×" if q >= 100 else f"{q:.1f}×" if q >= 1 else f"{q:.2g}×"


class CompileTimer:
    """Accumulates JAX's compile-event durations (seconds) while installed."""

    def __init__(self):
        self.totals = {v: 0.0 for v in _COMPILE_EVENTS.values()}
        self.count = 0

    def __call__(self, event, duration, **_):
        key = _COMPILE_EVENTS.get(event)
        if key is not None:
            self.totals[key] += float(duration)
            if key == "backend":
                self.count += 1

    def snapshot(self):
        return dict(self.totals, n_backend=self.count)

    @staticmethod
    def diff(a, b):
        return {k: b[k] - a[k] for k in a}


COMPILE = CompileTimer()


# ----------------------------------------------------------------------------------------------
# data


def load_data(name):
    import jax.numpy as jnp

    os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
    import bdtree_jax as bd
    from bdtree_jax.soft import minmax_scaler

    X_train, y_train, _, _ = bd.datasets.load_split(name)
    X = X_train.to_numpy(float)
    lo, rng = minmax_scaler(X)
    Xs = ((X - lo) / rng).astype(np.float32)
    classes, codes = np.unique(y_train.to_numpy(), return_inverse=True)
    codes = codes.astype(np.int32)
    return dict(X=Xs, y=codes, K=len(classes), data={"X": jnp.asarray(Xs), "y": jnp.asarray(codes)})


# ----------------------------------------------------------------------------------------------
# ours


def load_regression(name):
    import jax.numpy as jnp

    import bdtree_jax as bd
    from bdtree_jax.soft import minmax_scaler

    X_train, y_train, _, _ = bd.datasets.load_split(name)
    X = X_train.to_numpy(float)
    lo, rng = minmax_scaler(X)
    Xs = ((X - lo) / rng).astype(np.float32)
    y = y_train.to_numpy(np.float32)
    return dict(X=Xs, y=y, K=None, data={"X": jnp.asarray(Xs), "y": jnp.asarray(y)})


def _config(kind, K, settings, max_depth, **kw):
    from bdtree_jax.kernels.rjhmc import RJHMCConfig

    if K is None:
        return RJHMCConfig(task="regression", kind=kind, max_depth=max_depth, **settings, **kw)
    return RJHMCConfig(task="classification", kind=kind, max_depth=max_depth, n_classes=K, **settings, **kw)


def _runner(config, data, block_size, seed=0):
    """``run(n) -> (seconds, traces, states)``: ``n`` iterations of one chain through ``run_chains``."""
    import jax

    from bdtree_jax.kernels.rjhmc import rjhmc
    from bdtree_jax.driver import run_chains

    algorithm = rjhmc(config)

    def run(n):
        t = time.perf_counter()
        traces, states = run_chains(algorithm, data, key=jax.random.key(seed), num_chains=1, num_iterations=n,
                                    block_size=block_size, progress=False)
        jax.block_until_ready(states)
        return time.perf_counter() - t, traces, states

    return run


def _advancer(config):
    """Jitted ``advance(key, state, data, n) -> (state, sum of nuts_grads, sum of n_leaves)``: ``n``
    RJ iterations of one chain from a given state (``n`` is traced: one executable for every n)."""
    import jax
    import jax.numpy as jnp

    from bdtree_jax.kernels.rjhmc import rjhmc

    algorithm = rjhmc(config)

    def advance(key, state, data, n):
        def body(i, carry):
            state, grads, leaves = carry
            k = jax.random.fold_in(key, i)
            if algorithm.draw is not None:
                k = algorithm.draw(k)
            state, info = algorithm.step(k, state, data)
            tr = algorithm.trace(state, info)
            return state, grads + tr["nuts_grads"].astype(jnp.int32), leaves + tr["n_leaves"].astype(jnp.int32)

        return jax.lax.fori_loop(0, n, body, (state, jnp.int32(0), jnp.int32(0)))

    return jax.jit(advance)


def bench_fast(d, kind, settings, max_depth, warmup, T1, T2, **options):
    L1, L2 = warmup + T1, warmup + T2
    block = math.gcd(L1, L2)
    config = _config(kind, d["K"], settings, max_depth, schedule="fast", num_warmup=warmup, **options)
    run = _runner(config, d["data"], block)
    c0 = COMPILE.snapshot()
    first, _, _ = run(L1)
    comp = CompileTimer.diff(c0, COMPILE.snapshot())
    t1, _, _ = run(L1)
    t2, tr, states = run(L2)
    s_it = (t2 - t1) / (L2 - L1)
    s_warm = (t1 - T1 * s_it) / warmup if warmup > 0 else float("nan")
    sl = slice(L1, L2)
    r = dict(
        num_warmup=warmup, lengths=[L1, L2], block_size=block, first=first, t1=t1, t2=t2,
        compile=max(first - t1, 0.0), jax_compile=comp, s_per_it=s_it, s_per_warmup_it=s_warm,
        grads_per_it=float(tr["nuts_grads"][0, sl].mean()),
        grads_per_warmup_it=float(tr["nuts_grads"][0, :warmup].mean()) if warmup else float("nan"),
        leaves=float(tr["n_leaves"][0, sl].mean()), accept=float(tr["accepted"][0, sl].mean()),
        step_size=float(tr["step_size"][0, -1]), log_lik=float(tr["log_lik"][0, sl].mean()),
        extrap_1000=PAPER_WARMUP * s_warm + PAPER_SAMPLES * s_it,
        extrap_1000_flat=(PAPER_WARMUP + PAPER_SAMPLES) * s_it,
    )
    r["us_per_grad"] = 1e6 * s_it / r["grads_per_it"] if r["grads_per_it"] > 0 else float("nan")
    r["state"] = states  # handed to the paper-schedule benchmark (popped before JSON)
    _log(f"    fast : {s_it:.4f} s/it sampling ({r['grads_per_it']:.0f} grads/it, {r['us_per_grad']:.0f} µs/grad, "
         f"{r['leaves']:.1f} leaves), warm-up ≈ {s_warm:.4f} s/it; compile {r['compile']:.1f} s "
         f"(cold {first:.1f} s, warm {L1} its {t1:.2f} s, {L2} its {t2:.2f} s)")
    return r


def bench_full(d, kind, settings, max_depth, block=20):
    run = _runner(_config(kind, d["K"], settings, max_depth, schedule="fast", num_warmup=PAPER_WARMUP), d["data"], block)
    first, _, _ = run(block)
    t20, _, _ = run(block)
    t200, _, _ = run(PAPER_WARMUP)
    t1000, tr, _ = run(PAPER_WARMUP + PAPER_SAMPLES)
    r = dict(block_size=block, compile=max(first - t20, 0.0), t200=t200, t1000=t1000,
             s_per_warmup_it=t200 / PAPER_WARMUP, s_per_it=(t1000 - t200) / PAPER_SAMPLES,
             grads_per_it=float(tr["nuts_grads"][0, PAPER_WARMUP:].mean()),
             grads_per_warmup_it=float(tr["nuts_grads"][0, :PAPER_WARMUP].mean()),
             leaves=float(tr["n_leaves"][0, PAPER_WARMUP:].mean()),
             accept=float(tr["accepted"][0, PAPER_WARMUP:].mean()), step_size=float(tr["step_size"][0, -1]))
    _log(f"    full : 1000 iterations {t1000:.1f} s warm (+ compile {r['compile']:.1f} s); warm-up "
         f"{r['s_per_warmup_it']:.4f} s/it ({r['grads_per_warmup_it']:.0f} grads/it), sampling {r['s_per_it']:.4f} s/it "
         f"({r['grads_per_it']:.0f} grads/it), {r['leaves']:.1f} leaves")
    return r


def bench_paper(d, kind, settings, max_depth, n_iter, start_state, seed=0):
    """Paper schedule from ``start_state`` (a fast-schedule chain's state: same padded layout).
    Compiled ahead of time (``jit(...).lower(...).compile()``, timed), then ``n_iter`` iterations
    timed in one call; at seconds per iteration the per-call overhead is negligible."""
    import jax
    import jax.numpy as jnp

    advance = _advancer(_config(kind, d["K"], settings, max_depth, schedule="paper", num_warmup=0))
    state = jax.tree.map(lambda a: a[0], start_state)
    key = jax.random.key(seed + 1)
    n = jnp.int32(n_iter)
    c0 = COMPILE.snapshot()
    t = time.perf_counter()
    compiled = advance.lower(key, state, d["data"], n).compile()
    compile_s = time.perf_counter() - t
    comp = CompileTimer.diff(c0, COMPILE.snapshot())
    t = time.perf_counter()
    out = compiled(key, state, d["data"], n)
    jax.block_until_ready(out)
    dt = time.perf_counter() - t
    s_it = dt / n_iter
    r = dict(iterations=n_iter, seconds=dt, compile=compile_s, jax_compile=comp, s_per_it=s_it,
             grads_per_it=int(out[1]) / n_iter, leaves=int(out[2]) / n_iter,
             start_leaves=int(np.asarray(start_state.is_split[0]).sum()) + 1)
    r["us_per_grad"] = 1e6 * s_it / r["grads_per_it"] if r["grads_per_it"] > 0 else float("nan")
    _log(f"    paper: {s_it:.2f} s/it ({r['grads_per_it']:.0f} grads/it = {r['grads_per_it'] / 1002:.0f} per NUTS "
         f"transition, {r['us_per_grad']:.0f} µs/grad, {r['leaves']:.1f} leaves); {n_iter} its {dt:.1f} s; "
         f"compile {compile_s:.1f} s")
    return r


# ----------------------------------------------------------------------------------------------
# reference cost model: unpadded fixed-topology NumPyro model, a new MCMC per leg


def make_reference_model(internal, n_features, n_classes, kind):
    """NumPyro model of the soft tree with internal nodes ``internal`` (heap ids, root 0, children
    ``2i+1`` / ``2i+2``) baked in as Python structure.  ``model(X, y, h)``."""
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import gammaln

    internal = tuple(sorted(internal))
    is_internal = set(internal)
    leaves = sorted(c for node in internal for c in (2 * node + 1, 2 * node + 2) if c not in is_internal)
    paths = []
    for leaf in leaves:
        path, c = [], leaf
        while c > 0:
            p = (c - 1) // 2
            path.append((p, c == 2 * p + 2))  # (ancestor, goes right)
            c = p
        paths.append(path[::-1])

    def model(X, y, h):
        psi = {}
        for node in internal:
            tau = numpyro.sample(f"tau_{node}", dist.Beta(1.0, 1.0))
            if kind == "df":
                idx = numpyro.sample(f"index_{node}", dist.Categorical(probs=jnp.full(n_features, 1.0 / n_features)))
                x = jnp.take(X, idx, axis=1)
            else:
                w = numpyro.sample(f"index_{node}", dist.Dirichlet(jnp.ones(n_features)))
                x = X @ w
            psi[node] = jax.nn.sigmoid((x - tau) / h)
        phi = []
        for path in paths:
            m = jnp.ones(X.shape[0], X.dtype)
            for node, right in path:
                m = m * (psi[node] if right else 1.0 - psi[node])
            phi.append(m)
        phi = jnp.stack(phi, axis=1)  # (n, L)
        counts = phi.T @ jax.nn.one_hot(y, n_classes, dtype=phi.dtype)  # (L, K)
        log_l = jnp.sum(gammaln(counts + 1.0).sum(-1) - gammaln(counts.sum(-1) + n_classes))
        numpyro.factor("log_prob", log_l)

    return model


def _unconstrain(params, kind):
    from numpyro.distributions import constraints
    from numpyro.distributions.transforms import biject_to

    out = {}
    for k, v in params.items():
        if k.startswith("tau_"):
            out[k] = biject_to(constraints.unit_interval).inv(v)
        elif kind == "dfi":
            out[k] = biject_to(constraints.simplex).inv(v)
        else:
            out[k] = v  # discrete index: Gibbs block values are given as is
    return out


def bench_reference(d, kind, settings, n_iter, seed=0):
    import jax
    import jax.numpy as jnp
    from numpyro.infer import MCMC, NUTS, DiscreteHMCGibbs
    from numpyro.infer.util import log_density

    X, y = d["data"]["X"], d["data"]["y"]
    F, K = d["X"].shape[1], d["K"]
    h_init, h_final = settings["h_init"], settings["h_final"]
    rng = np.random.default_rng(seed)
    key = jax.random.key(seed)

    def leg(internal, init):
        nonlocal key
        key, k = jax.random.split(key)
        model = make_reference_model(internal, F, K, kind)
        kernel = NUTS(model) if kind == "dfi" else DiscreteHMCGibbs(NUTS(model), random_walk=True)
        mcmc = MCMC(kernel, num_warmup=LEG_WARMUP, num_samples=1, progress_bar=False)
        init_params = None if init is None else _unconstrain(init, kind)
        c0 = COMPILE.snapshot()
        t = time.perf_counter()
        mcmc.run(k, X, y, h_init, init_params=init_params)
        draw = {n: v[-1] for n, v in mcmc.get_samples().items()}
        jax.block_until_ready(draw)
        dt = time.perf_counter() - t
        comp = CompileTimer.diff(c0, COMPILE.snapshot())

        def rerun():
            """The same leg's warm-up again on the same MCMC object (same key and start, so the same
            trajectory), collecting NUTS's ``num_steps`` (gradient evaluations per transition)."""
            field = "num_steps" if kind == "dfi" else "block_states.1.num_steps"
            c0 = COMPILE.snapshot()
            t = time.perf_counter()
            mcmc.warmup(k, X, y, h_init, init_params=init_params, collect_warmup=True, extra_fields=(field,))
            steps = np.asarray(mcmc.get_extra_fields()[field])
            return time.perf_counter() - t, CompileTimer.diff(c0, COMPILE.snapshot()), int(steps.sum())

        return draw, model, dt, comp, rerun

    def grow(params, node):
        new = dict(params)
        new[f"tau_{node}"] = jnp.float32(rng.uniform())
        new[f"index_{node}"] = (jnp.int32(rng.integers(F)) if kind == "df"
                                else jnp.asarray(rng.dirichlet(np.ones(F)), jnp.float32))
        return new

    # untimed: the chain's initial NUTS run at the stump (pays the process-wide one-time costs)
    t = time.perf_counter()
    params, _, _, _, _ = leg(REF_GROWTH[:1], None)
    first_leg = time.perf_counter() - t
    legs, iters, iter_compile = [], [], []
    rerun = None
    for i in range(n_iter):
        T, T_new = REF_GROWTH[: i + 1], REF_GROWTH[: i + 2]
        c_it = COMPILE.snapshot()
        t_it = time.perf_counter()
        x1, model1, dt1, comp1, _ = leg(T, params)  # leg at T
        x_star = grow(x1, REF_GROWTH[i + 1])  # jump
        x2, model2, dt2, comp2, rerun = leg(T_new, x_star)  # leg at T'
        t_acc = time.perf_counter()
        lp_new, _ = log_density(model2, (X, y, h_final), {}, x_star)
        lp_old, _ = log_density(model1, (X, y, h_final), {}, x1)
        float(lp_new - lp_old)
        acc = time.perf_counter() - t_acc
        iters.append(time.perf_counter() - t_it)
        c = CompileTimer.diff(c_it, COMPILE.snapshot())
        iter_compile.append(c["trace"] + c["lower"] + c["backend"])
        params = x2  # always "accept", so the tree grows and every leg has a new topology
        for n_int, dt, comp in ((len(T), dt1, comp1), (len(T_new), dt2, comp2)):
            cs = comp["trace"] + comp["lower"] + comp["backend"]
            legs.append(dict(internal_nodes=n_int, seconds=dt, compile=cs, run=dt - cs, jax_compile=comp))
        _log(f"    ref  : iteration {i + 1}: {iters[-1]:.1f} s, of which {iter_compile[-1]:.1f} s JAX compilation "
             f"(legs {dt1:.1f} + {dt2:.1f} s with {len(T)} / {len(T_new)} internal nodes; run-only "
             f"{legs[-2]['run']:.2f} + {legs[-1]['run']:.2f} s; acceptance {acc:.2f} s)")
    # the last leg once more on the same MCMC object
    re_wall, re_comp, re_grads = rerun()
    re_cs = re_comp["trace"] + re_comp["lower"] + re_comp["backend"]
    iters, iter_compile = np.array(iters), np.array(iter_compile)
    r = dict(
        iterations=n_iter, growth=list(REF_GROWTH[: n_iter + 1]), first_leg_untimed=first_leg, legs=legs,
        iteration_seconds=iters.tolist(), iteration_compile_seconds=iter_compile.tolist(),
        s_per_it=float(iters.mean()), s_per_it_run=float((iters - iter_compile).mean()),
        compile_fraction=float(iter_compile.sum() / iters.sum()),
        s_per_leg=float(np.mean([lg["seconds"] for lg in legs])),
        s_per_leg_run=float(np.mean([lg["run"] for lg in legs])),
        rerun_last_leg=dict(internal_nodes=len(REF_GROWTH[: n_iter + 1]), seconds=re_wall, compile=re_cs,
                            n_backend_compiles=re_comp["n_backend"], first_seconds=legs[-1]["seconds"],
                            warmup_grads=re_grads, grads_per_transition=re_grads / LEG_WARMUP,
                            us_per_grad=1e6 * legs[-1]["run"] / max(re_grads, 1)),
    )
    _log(f"    ref  : {r['s_per_it']:.1f} s/it incl. compile, {r['s_per_it_run']:.2f} s/it without "
         f"({100 * r['compile_fraction']:.0f} % compilation); last leg re-run on the same MCMC: {re_wall:.1f} s "
         f"(first {legs[-1]['seconds']:.1f} s), of which {re_cs:.1f} s compiling again "
         f"({re_comp['n_backend']} XLA compile(s)); its 500 NUTS warm-up transitions took {re_grads} gradients "
         f"({re_grads / LEG_WARMUP:.0f} per transition, ≈ {r['rerun_last_leg']['us_per_grad']:.0f} µs/grad from the "
         f"run-only time)")
    return r


# ----------------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="RJHMC-Tree speed: ours (fast / paper schedule) vs the reference cost model.")
    parser.add_argument("--quick", action="store_true", help="smoke run (< 2 min): bcw, DF, short runs")
    parser.add_argument("--datasets", nargs="+", choices=("iris", "bcw", "cgm"), default=None,
                        help="default: iris bcw (cgm: the regression rows, before / now)")
    parser.add_argument("--kinds", nargs="+", choices=("df", "dfi"), default=None, help="default: df dfi")
    parser.add_argument("--max-depth", type=int, default=5)
    parser.add_argument("--fast-warmup", type=int, default=None, help="num_warmup of the timed fast runs (default 20)")
    parser.add_argument("--fast-lengths", type=int, nargs=2, default=None, metavar=("T1", "T2"),
                        help="sampling iterations after the warm-up in the two timed runs (default 20 60; quick 20 40)")
    parser.add_argument("--paper-iterations", type=int, default=None,
                        help="timed paper-schedule iterations per dataset/kind (default 1)")
    parser.add_argument("--paper-datasets", nargs="*", choices=("iris", "bcw"), default=None,
                        help="datasets that get the paper-schedule timing (default: iris; quick: none; --full: "
                             "iris bcw).  One bcw iteration takes minutes.")
    parser.add_argument("--ref-iterations", type=int, default=None, help="reference RJ iterations (default 3; quick 1)")
    parser.add_argument("--full", action="store_true", help="also time a full bcw DF chain, 200 + 800 iterations")
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--json", type=str, default=None, metavar="PATH", help="write all numbers as JSON")
    args = parser.parse_args(argv)

    datasets = args.datasets or (["bcw"] if args.quick else ["iris", "bcw"])
    kinds = args.kinds or (["df"] if args.quick else ["df", "dfi"])
    warmup = args.fast_warmup if args.fast_warmup is not None else 20
    T1, T2 = args.fast_lengths or ((20, 40) if args.quick else (20, 60))
    n_paper = args.paper_iterations or 1
    if args.paper_datasets is not None:
        paper_datasets = args.paper_datasets
    else:
        paper_datasets = [] if args.quick else (["iris", "bcw"] if args.full else ["iris"])
    n_ref = args.ref_iterations or (1 if args.quick else 3)
    if not (0 < T1 < T2 and n_paper >= 1 and 1 <= n_ref <= len(REF_GROWTH) - 1):
        parser.error(f"need 0 < T1 < T2, n_paper >= 1 and 1 <= --ref-iterations <= {len(REF_GROWTH) - 1}")

    load_before = _load()
    t_start = time.perf_counter()

    import jax
    import numpyro
    from jax import monitoring

    monitoring.register_event_duration_secs_listener(COMPILE)

    results = {}
    cgm = {}
    full = None
    for ds in datasets:
        if ds == "cgm":
            d = load_regression(ds)
            for kind in kinds:
                for label, options in CGM_VARIANTS.items():
                    _log(f"cgm (n={d['X'].shape[0]}, regression) HMC-{kind.upper()} {CGM_PAPER[kind]}: {label}")
                    r = bench_fast(d, kind, CGM_PAPER[kind], args.max_depth, warmup, T1, T2, **options)
                    r.pop("state")
                    cgm[f"{kind}/{label}"] = dict(options, **r)
            continue
        d = load_data(ds)
        for kind in kinds:
            settings = PAPER[(ds, kind)]
            _log(f"{ds} (n={d['X'].shape[0]}, F={d['X'].shape[1]}, K={d['K']}) HMC-{kind.upper()} {settings}")
            r = dict(settings=settings)
            r["fast"] = bench_fast(d, kind, settings, args.max_depth, warmup, T1, T2)
            state = r["fast"].pop("state")
            r["paper"] = (bench_paper(d, kind, settings, args.max_depth, n_paper, state)
                          if ds in paper_datasets else None)
            r["reference"] = None if args.no_reference else bench_reference(d, kind, settings, n_ref)
            results[f"{ds}/{kind}"] = r
        if args.full and ds == "bcw" and "df" in kinds:
            _log("bcw HMC-DF full chain (200 + 800 iterations, fast schedule)")
            full = bench_full(d, "df", PAPER[("bcw", "df")], args.max_depth)
    if args.full and full is None:
        d = load_data("bcw")
        _log("bcw HMC-DF full chain (200 + 800 iterations, fast schedule)")
        full = bench_full(d, "df", PAPER[("bcw", "df")], args.max_depth)
    load_after = _load()
    total = time.perf_counter() - t_start

    # ------------------------------------------------------------------ report
    script = os.path.relpath(sys.argv[0], _ROOT) if os.path.exists(sys.argv[0]) else sys.argv[0]
    command = " ".join(shlex.quote(a) for a in ["python", script] + sys.argv[1:])
    lines = []
    p = lines.append
    p(f"## RJHMC-Tree speed (one chain, max_depth {args.max_depth}, paper h / alpha / beta)")
    p("")
    p(f"- command: `{command}` (cwd `{os.getcwd()}`)")
    p(f"- python {platform.python_version()}, jax {jax.__version__}, numpyro {numpyro.__version__}, "
      f"numpy {np.__version__}; os.cpu_count()={os.cpu_count()}; jax devices {jax.devices()}")
    p(f"- load average before / after: {load_before[0]:.2f} / {load_after[0]:.2f} on {os.cpu_count()} cores "
      "(other processes share the CPU: expect 10-30 % noise; compare within this run)")
    p(f"- **fast**: s/it of sampling-phase iterations = (t({warmup + T2}) − t({warmup + T1})) / {T2 - T1}, "
      f"warm runs of `run_chains` (block size {math.gcd(warmup + T1, warmup + T2)}, one executable) "
      f"with num_warmup={warmup}, leg_steps=4; compile = cold − warm call of {warmup + T1} iterations")
    if paper_datasets:
        p(f"- **paper** (on {' and '.join(paper_datasets)}): schedule='paper' (500 NUTS warm-up + 1 draw per leg, "
          "padded: no recompilation), "
          f"s/it = wall time of {n_paper} iteration(s) / {n_paper} (compiled ahead of time), one jitted loop over "
          "`step` started from the fast chain's final state (sampling phase, num_warmup=0)")
    if not args.no_reference:
        samplers = " / ".join(x for k, x in (("df", "DiscreteHMCGibbs(NUTS, random_walk=True)"), ("dfi", "NUTS"))
                              if k in kinds)
        p(f"- **reference**: a new `MCMC({samplers}, num_warmup=500, num_samples=1, progress_bar=False)` on an "
          f"unpadded fixed-topology model per leg, 2 legs + acceptance per iteration, {n_ref} iteration(s) "
          f"growing 1→{n_ref + 1} internal nodes; 'incl. compile' = wall time; 'run only' = wall − JAX's "
          "compile timers (trace + lowering + XLA compile, `jax.monitoring`)")
    if cgm:
        p("")
        p(f"### cgm regression (h_final 0.001; num_warmup={warmup}, sampling s/it = (t({warmup + T2}) − "
          f"t({warmup + T1})) / {T2 - T1}, one chain)")
        p("")
        p(f"| kind | configuration | s/it, whole warm run t({warmup + T2}) / {warmup + T2} | s/it sampling | "
          "grads/it sampling | grads/it warm-up | step size | leaves | mean log-lik | compile |")
        p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for key, f in cgm.items():
            kind, label = key.split("/", 1)
            p(f"| {kind.upper()} | {label} | {_fmt(f['t2'] / (warmup + T2))} | {_fmt(f['s_per_it'])} | "
              f"{f['grads_per_it']:.0f} | {f['grads_per_warmup_it']:.0f} | {f['step_size']:.3g} | {f['leaves']:.1f} | "
              f"{f['log_lik']:.0f} | {f['compile']:.1f} s |")
        p("")
        p("- the whole-run figure (warm-up + sampling, chain init included) is the robust one when a "
          "sampling-phase difference of a few cheap iterations drowns in the machine's noise "
          "(it can even come out negative)")
    if not results:
        p(f"- total benchmark wall time: {time.perf_counter() - t_start:.0f} s")
        print("\n".join(lines))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(dict(command=command, cpu_count=os.cpu_count(), load_before=list(load_before),
                               load_after=list(load_after), cgm=cgm), fh, indent=1, default=float)
        return
    p("")
    p("| dataset | kind | fast s/it | fast compile | paper s/it | ref. s/it (incl. compile) | ref. s/it (run only) "
      "| compile share of ref. | ref / fast | ref / paper | paper / fast | grads per NUTS transition: fast / paper / ref. "
      "| 1000-it chain, fast (extrap.) |")
    p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key, r in results.items():
        ds, kind = key.split("/")
        f, pa, rf = r["fast"], r["paper"], r["reference"]
        p(f"| {ds} | {kind.upper()} | {_fmt(f['s_per_it'])} | {f['compile']:.1f} s | "
          f"{_fmt(pa['s_per_it']) if pa else '—'} | {_fmt(rf['s_per_it']) if rf else '—'} | "
          f"{_fmt(rf['s_per_it_run']) if rf else '—'} | {_pct(rf['compile_fraction'] if rf else None)} | "
          f"{_ratio(rf['s_per_it'] if rf else None, f['s_per_it'])} | "
          f"{_ratio(rf['s_per_it'] if rf else None, pa['s_per_it'] if pa else None)} | "
          f"{_ratio(pa['s_per_it'] if pa else None, f['s_per_it'])} | "
          f"{f['grads_per_it'] / (2 * LEG_STEPS):.0f} / "
          f"{_fmt(pa['grads_per_it'] / (2 * (LEG_WARMUP + 1)) if pa else None, 2)} / "
          f"{_fmt(rf['rerun_last_leg']['grads_per_transition'] if rf else None, 2)} | "
          f"{f['extrap_1000']:.0f} s |")
    p("")
    p("- 1000-it chain (extrap.) = 200 × warm-up s/it + 800 × sampling s/it from the fast runs above, "
      "excluding compilation (goal for bcw: < 120 s); the warm-up s/it estimate includes the chain init and "
      "call overhead.")
    for key, r in results.items():
        f = r["fast"]
        p(f"  - fast {key}: warm-up ≈ {_fmt(f['s_per_warmup_it'])} s/it ({f['grads_per_warmup_it']:.0f} grads/it), "
          f"sampling {_fmt(f['s_per_it'])} s/it ({f['grads_per_it']:.0f} grads/it, {_fmt(f['us_per_grad'])} µs/grad, "
          f"step size {f['step_size']:.3g}, {f['leaves']:.1f} leaves, accept {f['accept']:.2f}); "
          f"1000 × sampling s/it = {f['extrap_1000_flat']:.0f} s; compile {f['compile']:.1f} s "
          f"(JAX timers {sum(f['jax_compile'][k] for k in ('trace', 'lower', 'backend')):.1f} s)")
    if paper_datasets:
        p("- paper schedule (one padded program; per iteration 2 × 501 NUTS transitions, whose tree depth varies "
          "a lot from state to state):")
        for key, r in results.items():
            pa = r["paper"]
            if pa is None:
                continue
            p(f"  - {key}: {pa['grads_per_it']:.0f} grads/it ({_fmt(pa['us_per_grad'])} µs/grad, "
              f"{pa['leaves']:.1f} leaves), compile {pa['compile']:.1f} s")
    if full is not None:
        p(f"- **bcw DF full chain, fast schedule** (num_warmup=200, 200 + 800 iterations, block 20, measured): "
          f"**{full['t1000']:.1f} s** excluding compilation (+ {full['compile']:.1f} s compile); "
          f"warm-up {_fmt(full['s_per_warmup_it'])} s/it ({full['grads_per_warmup_it']:.0f} grads/it), "
          f"sampling {_fmt(full['s_per_it'])} s/it ({full['grads_per_it']:.0f} grads/it, step size "
          f"{full['step_size']:.3g}, {full['leaves']:.1f} leaves)")
    if not args.no_reference:
        p("- reference legs (internal nodes: wall s = compile + run):")
        for key, r in results.items():
            rf = r["reference"]
            legs = ", ".join(f"{lg['internal_nodes']}: {lg['seconds']:.1f} = {lg['compile']:.1f} + {lg['run']:.2f}"
                             for lg in rf["legs"])
            rr = rf["rerun_last_leg"]
            p(f"  - {key}: {legs}; the last leg's warm-up re-run on the same MCMC object: {rr['seconds']:.1f} s, "
              f"of which {rr['compile']:.1f} s compiling again ({rr['n_backend_compiles']} XLA compile(s)); "
              f"{rr['grads_per_transition']:.0f} gradients per NUTS transition (≈ {_fmt(rr['us_per_grad'])} µs/grad)")
    p(f"- total benchmark wall time: {total:.0f} s")
    print("\n".join(lines))

    if args.json:
        out = dict(command=command, python=platform.python_version(), jax=jax.__version__,
                   numpyro=numpyro.__version__, cpu_count=os.cpu_count(), load_before=list(load_before),
                   load_after=list(load_after), total_seconds=total, max_depth=args.max_depth,
                   fast_warmup=warmup, fast_lengths=[T1, T2], paper_iterations=n_paper, ref_iterations=n_ref,
                   results=results, full=full)
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1, default=float)
        _log(f"wrote {args.json}")


if __name__ == "__main__":
    main()
