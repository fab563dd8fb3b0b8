"""Many CGM chains at once: where one batched step's bytes and flops go, ours and bartz's.

What it measures (bcw paper split, ``bd.datasets.load_split("bcw")``: 478 rows x 9 features,
``max_depth`` 6, the CGM98 prior and moves of ``method="cgm"``):

* **XLA cost analysis** of one batched step, ``jax.jit(f).lower(*args).compile().cost_analysis()``
  ("bytes accessed" and "flops"; a property of the compiled program, the same on any machine
  with the same backend), at 64 / 1,024 / 4,096 chains:

  - ours *before*: the branch-free kernel (``CGMConfig(incremental=False)``, the one
    ``chain_method="vmap"`` runs) re-scoring the proposed tree with
    :func:`bdtree_jax.kernels._moves.score`, as it did before this benchmark was written;
  - ours *after*: the same kernel as it is now (:func:`bdtree_jax.kernels.cgm._score_batched`);
  - ours *incremental, vmapped*: the CPU kernel batched (its ``lax.cond`` branches become
    selects, so every chain pays both), for reference;
  - bartz 0.13: ``bartz.mcmcstep.step`` on the state of ``bartz.Bart(..., num_trees=1,
    num_chains=c, outcome_type="binary")`` (as benchmarks/cgm_speed.py runs it), with one CPU
    device so the whole batch is one program.

  and a breakdown of ours (the step's parts compiled alone) and of bartz (tree moves vs the
  probit latent update) at 1,024 chains.
* **CPU wall rates** (proposals/s, aggregate): ``T`` vmapped steps in one ``lax.scan``, ours
  before and after compiled in the same process and timed alternately (the machine is shared:
  single timings move 10-30 %), the best of the rounds for each.  bartz's rate is its jitted
  ``step`` called ``T`` times on the same state.

Usage::

    python benchmarks/cgm_many_chains.py --quick   # about a minute: 64 chains only, no breakdown
    python benchmarks/cgm_many_chains.py           # about 10 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sys
import time

os.environ.setdefault("BDTREE_CPU_DEVICES", "1")  # one program for the whole batch (cost analysis)

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import bdtree_jax as bd  # noqa: E402
from bdtree_jax.kernels import _moves, cgm  # noqa: E402


def _setup():
    X, y, _, _ = bd.datasets.load_split("bcw")
    problem = bd.build_problem(X, y, task="classification", prior=bd.TreePrior(max_depth=6))
    data = problem.data
    config = cgm.CGMConfig.from_prior(problem.prior, n_features=data.bins.shape[1],
                                      n_cuts=int(problem.grid.n_cuts.max()), incremental=False)
    return X, y, data, config


def _stacked_edit(tree, move, node, feature, cut):
    """The tree edit as it was: all four moves' trees built, one picked."""
    from bdtree_jax.tree import change, grow, prune, swap

    edits = (grow(tree, node, feature, cut), prune(tree, node), change(tree, node, feature, cut), swap(tree, node))
    return jax.tree.map(lambda *xs: jnp.stack(xs)[jnp.clip(move, 0, 3)], *edits)


@contextlib.contextmanager
def _before():
    """Trace the branch-free kernel as it was: the four edits stacked and the proposed tree
    re-scored by ``_moves.score``."""
    new = cgm._score_batched, cgm._edit
    cgm._score_batched, cgm._edit = _moves.score, _stacked_edit
    try:
        yield
    finally:
        cgm._score_batched, cgm._edit = new


def _cost(f, *args):
    ca = jax.jit(f).lower(*args).compile().cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    return float(ca.get("bytes accessed", np.nan)), float(ca.get("flops", np.nan))


def _states(c, data, config):
    return jax.vmap(lambda k: cgm.init(k, data, config))(jnp.arange(c))


def _batched_step(config):
    def f(u, states, data):
        return jax.vmap(lambda u, s: cgm.step_with_uniforms(u, s, data, config))(u, states)

    return f


_BARTZ_STATES = {}


def _bartz_state(X, y, c):
    """bartz's MCMC state for ``c`` chains (built once per count: building compiles bartz's loop;
    a copy each call, as ``mcmcstep.step`` donates its state)."""
    if c not in _BARTZ_STATES:
        _BARTZ_STATES[c] = _new_bartz_state(X, y, c)
    return jax.tree.map(lambda a: a.copy() if isinstance(a, jax.Array) else a, _BARTZ_STATES[c])


def _new_bartz_state(X, y, c):
    import bartz

    Xt = np.ascontiguousarray(np.asarray(X.to_numpy(float), np.float32).T)
    b = bartz.Bart(Xt, np.asarray(y.to_numpy(), np.float32), outcome_type="binary", num_trees=1, num_chains=c,
                   n_burn=0, n_save=1, printevery=None, seed=0)
    return b._mcmc_state  # noqa: SLF001


def cost_table(X, y, data, config, chains):
    incr = cgm.CGMConfig(config.max_depth, config.min_leaf_size, config.move_probs, config.trace_dtypes, True)
    rows = []
    for c in chains:
        s = _states(c, data, config)
        u = jax.random.uniform(jax.random.key(0), (c, 5))
        with _before():
            rows.append(("ours, before", c, *_cost(_batched_step(config), u, s, data)))
        rows.append(("ours, after", c, *_cost(_batched_step(config), u, s, data)))
        rows.append(("ours incremental, vmapped", c, *_cost(_batched_step(incr), u, s, data)))
        try:
            from bartz import mcmcstep

            st = _bartz_state(X, y, c)
            rows.append(("bartz 0.13", c, *_cost(lambda k, st: mcmcstep.step(k, st), jax.random.key(1), st)))
        except Exception as exc:  # noqa: BLE001
            print(f"bartz at {c} chains failed: {exc!r}", file=sys.stderr)
        print(f"  cost analysis at {c} chains done", file=sys.stderr, flush=True)
    return rows


def breakdown(X, y, data, config, c):
    """Bytes and flops per chain of the parts of one step, each compiled alone."""
    from bdtree_jax.priors import node_bounds, subtree_sums
    from bdtree_jax.tree import leaf_index

    s = _states(c, data, config)
    u = jax.random.uniform(jax.random.key(0), (c, 5))
    V = lambda g: jax.vmap(g, in_axes=(0, None))  # noqa: E731
    n_nodes = s.tree.is_split.shape[-1]
    parts = [
        ("ours", "move, node and rule draw (`_choose`)",
         lambda u, s, d: jax.vmap(lambda u, s: cgm._choose(u, s, d, config))(u, s), (u, s, data)),
        ("ours", "rows' leaves (`leaf_index`, all rows through the tree)",
         lambda t, d: V(lambda t, d: leaf_index(t, d.bins, max_cut=d.bins.shape[0]))(t, d), (s.tree, data)),
        ("ours before", "node sums (`subtree_sums`, 16 scatter lanes)",
         lambda l, d: V(lambda l, d: subtree_sums(d.point_stats, l, n_nodes))(l, d), (s.leaf_id, data)),
        ("ours before", "valid-cut bounds (`node_bounds`, int32)",
         lambda t, l, d: jax.vmap(lambda t, l: node_bounds(t, l, d, 1))(t, l), (s.tree, s.leaf_id, data)),
        ("ours before", "whole re-score (`_moves.score`)",
         lambda t, d: V(lambda t, d: _moves.score(t, d, config, 1.0))(t, d), (s.tree, data)),
        ("ours after", "whole re-score (`cgm._score_batched`)",
         lambda t, d: V(lambda t, d: cgm._score_batched(t, d, config, 1.0))(t, d), (s.tree, data)),
        ("ours", "log-likelihood and log-prior from cached sums (`with_scores`)",
         lambda s, d: jax.vmap(lambda s: _moves.with_scores(s.tree, s.leaf_id, s.stats, s.lo, s.hi, d, 1.0))(s),
         (s, data)),
        ("ours", "accept: select every state field",
         lambda a, b, acc: jax.tree.map(lambda x, y: jnp.where(acc.reshape((-1,) + (1,) * (x.ndim - 1)), x, y), a, b),
         (s, s, u[:, 0] > 0.5)),
        ("ours", "local move alone (grow / prune / change at a nog, `_local_step`)",
         lambda u, s, d: jax.vmap(lambda u, s: cgm._local_step(s, *cgm._choose(u, s, d, config), u[4], d, config))(u, s),
         (u, s, data)),
        ("ours", "subtree move alone (change higher up / swap, `_subtree_step`)",
         lambda u, s, d: jax.vmap(lambda u, s: cgm._subtree_step(s, *cgm._choose(u, s, d, config), u[4], d, config))(u, s),
         (u, s, data)),
    ]
    rows = [(who, what, *(x / c for x in _cost(f, *args))) for who, what, f, args in parts]
    try:
        from bartz.mcmcstep import _state as bstate
        from bartz.mcmcstep import _step as bstep

        st = _bartz_state(X, y, c)
        wrap = lambda f: bstate.split_key_for_chains(bstate.vmap_chains(f))  # noqa: E731
        for what, f in [("tree moves (`step_trees`: propose, accept, leaf values)", bstep.step_trees),
                        ("probit latent (`step_z`)", bstep.step_z)]:
            rows.append(("bartz", what, *(x / c for x in _cost(wrap(f), jax.random.key(1), st))))
    except Exception as exc:  # noqa: BLE001
        print(f"bartz breakdown failed: {exc!r}", file=sys.stderr)
    return rows


def pg_breakdown(data, P):
    """Particle Gibbs: bytes and flops per particle of one stage's parts (one chain, ``P``
    particles ``vmap``-ped), each compiled alone."""
    from bdtree_jax.kernels import pg, smc

    pcfg = pg.PGConfig(6, 1, num_particles=P)
    stump = cgm.init(None, data, pcfg.cgm)
    parts = jax.tree.map(lambda a: jnp.broadcast_to(a, (P,) + jnp.shape(a)), stump)
    last = jnp.full((P,), -1, jnp.int32)
    is_ref = jnp.arange(P) == 0
    u = jax.random.uniform(jax.random.key(0), (P, 3))

    def advance(u, parts, last, d, is_ref, ref):
        one = lambda u, p, l, r: smc._advance(u, p, l, d, pcfg.smc, pcfg.n_bins, ref, r)  # noqa: E731
        return jax.vmap(one)(u, parts, last, is_ref)

    rows = [
        ("stage: every particle decides its next node (`smc._advance`)", advance, (u, parts, last, data, is_ref, stump.tree)),
        ("of which the grow (`_moves.propose_grow`)",
         lambda p, d, n: jax.vmap(lambda p, n: _moves.propose_grow(p, n, 1, 3, d, pcfg.cgm))(p, n), (parts, data, last + 1)),
        ("of which its re-score from cached sums (`with_scores`)",
         lambda s, d: jax.vmap(lambda s: _moves.with_scores(s.tree, s.leaf_id, s.stats, s.lo, s.hi, d, 1.0))(s),
         (parts, data)),
        ("resampling: gather whole particle states", lambda p, i: jax.tree.map(lambda a: a[i], p),
         (parts, jnp.zeros(P, jnp.int32))),
        ("finished flags (`smc.mark_finished`)", lambda p, l, d: smc.mark_finished(p, l, d), (parts, last, data)),
    ]
    return [(what, *(x / P for x in _cost(f, *args))) for what, f, args in rows]


def _scan_runner(config, data, c, T):
    def run(key, states, data):
        def body(states, k):
            u = jax.random.uniform(k, (c, 5))
            states, info = _batched_step(config)(u, states, data)
            return states, info.accepted.sum()

        return jax.lax.scan(body, states, jax.random.split(key, T))

    s = _states(c, data, config)
    return jax.jit(run).lower(jax.random.key(0), s, data).compile(), s


def wall_rates(X, y, data, config, chains, T_for, rounds):
    out = {}
    for c in chains:
        T = T_for(c)
        with _before():
            old, s = _scan_runner(config, data, c, T)
        new, _ = _scan_runner(config, data, c, T)
        # same chain: identical acceptances over the run (trees are checked by the tests)
        a_old = np.asarray(old(jax.random.key(3), s, data)[1])
        a_new = np.asarray(new(jax.random.key(3), s, data)[1])
        same = bool(np.array_equal(a_old, a_new))
        best = {"before": np.inf, "after": np.inf}
        for _ in range(rounds):
            for name, prog in (("before", old), ("after", new)):
                t = time.perf_counter()
                jax.block_until_ready(prog(jax.random.key(3), s, data))
                best[name] = min(best[name], time.perf_counter() - t)
        r = dict(T=T, same_acceptances=same, **{k: c * T / v for k, v in best.items()})
        try:
            from bartz import mcmcstep

            st = _bartz_state(X, y, c)
            keys = jax.random.split(jax.random.key(2), T + 1)
            st = mcmcstep.step(keys[-1], st)  # compile
            jax.block_until_ready(st)
            tb = np.inf
            for _ in range(rounds):
                t = time.perf_counter()
                for i in range(T):
                    st = mcmcstep.step(keys[i], st)
                jax.block_until_ready(st)
                tb = min(tb, time.perf_counter() - t)
            r["bartz"] = c * T / tb
        except Exception as exc:  # noqa: BLE001
            print(f"bartz wall at {c} chains failed: {exc!r}", file=sys.stderr)
            r["bartz"] = float("nan")
        out[c] = r
        print(f"  wall at {c} chains: {r}", file=sys.stderr, flush=True)
    return out


NOTES = """## Reading the tables

- *before* is the branch-free kernel as it was (the proposed tree re-scored by `_moves.score`:
  16-lane scatter sums, int32 bounds and leaf ids); *after* is `cgm._score_batched` with the tree
  edit as selects.  Both run the same chain: the acceptances of the timed runs are compared
  above, and `tests/test_sampling.py::test_vectorized_chains_give_the_same_trees` checks that the
  trees equal the sequential kernel's.
- Under `vmap` a `lax.cond` whose predicate differs between chains runs both branches, so the
  incremental kernel batched (grow / prune / change at a nog re-scored locally, the rest through
  the subtree) costs more than the full re-score: its local branch alone is cheap, its subtree
  branch is not, and every chain pays both.  A cheaper batched step for the local moves needs the
  chains that take the subtree branch set apart (compaction), not a select.
- bartz's step spends most of its bytes on the probit latent (`step_z`, one truncated-normal
  draw per row and chain); its tree moves (grow or prune only) are the part comparable to ours.
- The sequential CPU path (`incremental=True`) is untouched: its step lowers to the same StableHLO
  before (commit 9bf30d6) and after these changes (checked once, source locations stripped).
- The programs' costs are counted by XLA on the CPU backend; a GPU program fuses differently,
  but bytes accessed per chain are the device-independent part of the comparison.
"""


def _mb(x):
    return f"{x / 1e6:,.1f}"


def _k(x):
    return f"{x / 1e3:,.1f}k" if np.isfinite(x) else "—"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller wall-clock runs (about a minute)")
    p.add_argument("--out", default=None, help="markdown output (default benchmarks/results/cgm_many_chains.md; "
                   "with --quick: print only)")
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    X, y, data, config = _setup()
    cost_chains = [64] if args.quick else [64, 1024, 4096]
    wall_chains = [64] if args.quick else [64, 1024]
    T_for = (lambda c: 200) if args.quick else (lambda c: 1000 if c <= 64 else 100)
    rounds = 2 if args.quick else 3
    costs = cost_table(X, y, data, config, cost_chains)
    print(f"cost table: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    parts = [] if args.quick else breakdown(X, y, data, config, 1024)
    pg_parts = [] if args.quick else pg_breakdown(data, 100)
    print(f"breakdown: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    walls = wall_rates(X, y, data, config, wall_chains, T_for, rounds)

    import bartz

    lines = []
    w = lines.append
    w("# Many CGM chains: cost of one batched step, ours and bartz")
    w("")
    w(f"- command: `python benchmarks/cgm_many_chains.py{' --quick' if args.quick else ''}`; python "
      f"{platform.python_version()}, jax {jax.__version__}, bartz {bartz.__version__}, backend "
      f"{jax.default_backend()} ({os.cpu_count()} cores, shared), one JAX device")
    w("- problem: bcw paper split (478 rows x 9 features, binary), `max_depth` 6, CGM98 prior, moves "
      "(0.25, 0.25, 0.40, 0.10); chains at the stump (the programs' costs do not depend on the trees)")
    w("- bartz: `Bart(X.T, y, outcome_type='binary', num_trees=1, num_chains=c)`'s state, "
      "`bartz.mcmcstep.step` (one grow-or-prune proposal per chain plus its probit latent and leaf draws)")
    w("")
    w("## XLA cost analysis of one batched step (CPU backend)")
    w("")
    w("| kernel | chains | bytes accessed (MB) | per chain (kB) | flops (M) | per chain (k) |")
    w("|---|---:|---:|---:|---:|---:|")
    for name, c, b, f in costs:
        w(f"| {name} | {c} | {_mb(b)} | {b / c / 1e3:,.1f} | {f / 1e6:,.1f} | {f / c / 1e3:,.1f} |")
    w("")
    if parts:
        w("## Where one chain's bytes go at 1,024 chains (each part compiled alone)")
        w("")
        w("| sampler | part | bytes per chain (kB) | flops per chain (k) |")
        w("|---|---|---:|---:|")
        for who, what, b, f in parts:
            w(f"| {who} | {what} | {b / 1e3:,.1f} | {f / 1e3:,.1f} |")
        w("")
    if pg_parts:
        w("## Particle Gibbs, 100 particles `vmap`-ped (one chain): per particle and stage")
        w("")
        w("| part | bytes per particle (kB) | flops per particle (k) |")
        w("|---|---:|---:|")
        for what, b, f in pg_parts:
            w(f"| {what} | {b / 1e3:,.1f} | {f / 1e3:,.1f} |")
        w("")
    w("## CPU wall rates (proposals/s, aggregate; best of alternating rounds)")
    w("")
    w("| chains | T | ours before | ours after | after / before | bartz | after / bartz | same acceptances |")
    w("|---:|---:|---:|---:|---:|---:|---:|---|")
    for c, r in walls.items():
        w(f"| {c} | {r['T']} | {_k(r['before'])} | {_k(r['after'])} | {r['after'] / r['before']:.2f}× | "
          f"{_k(r['bartz'])} | {r['after'] / r['bartz']:.2f}× | {r['same_acceptances']} |")
    w("")
    w(f"- total wall time {time.perf_counter() - t0:.0f} s")
    w("")
    w(NOTES)
    text = "\n".join(lines)
    print(text)
    if args.out is None and not args.quick:
        args.out = os.path.join(_HERE, "results", "cgm_many_chains.md")
    if args.out is not None and not args.no_write:
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
