"""Cost of one multiclass BART sweep (K = 3 classes) against a binary probit BART sweep and a
counts sweep, same trees per class/model, on simulated rows (issue #41's "K classes cost <= K x
the binary sweep").

    python benchmarks/bart_multiclass_speed.py 150 50 inc      # rows, trees, incremental|batched

X (n, 5) uniform, y = floor(3 x_0); binary probit on ``y == 0``, counts of ``y == 0`` with random
exposures, multiclass on y.  Each kernel runs 200 sweeps inside one ``lax.scan`` under ``jit`` after
200 to compile and warm up; prints milliseconds per sweep and the ratios (CPU wall time: "under
load" on a shared machine).  Multiclass with the classes one after another (``CLASS_LOOP="map"``)
and batched (``"vmap"``); counts and multiclass (classes in turn) also with their gamma leaves drawn
by ``jax.random.loggamma``, as before ``_gamma.log_gamma_given`` (bart_rows_speed.jax_loggamma_leaves).
"""

import sys
import time

import jax
import numpy as np

from bart_rows_speed import jax_loggamma_leaves
from bdtree_jax.kernels import bart
from bdtree_jax.kernels import bart_multiclass as bm
from bdtree_jax.kernels import bart_poisson as bp
from bdtree_jax.problem.bart import build_bart_probit_problem
from bdtree_jax.problem.bart_multiclass import build_bart_multiclass_problem
from bdtree_jax.problem.bart_poisson import build_bart_poisson_problem


def ms_per_sweep(step, state, data, reps=200):
    f = jax.jit(lambda keys, s: jax.lax.scan(lambda s, k: (step(k, s, data)[0], None), s, keys)[0])
    keys = jax.random.split(jax.random.key(1), 2 * reps).reshape(2, reps)
    state = jax.block_until_ready(f(keys[0], state))
    t = time.perf_counter()
    jax.block_until_ready(f(keys[1], state))
    return (time.perf_counter() - t) / reps * 1e3


def main():
    n, M, inc = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "inc"
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(n, 5))
    y = (X[:, 0] * 3).astype(int) % 3
    pb = build_bart_probit_problem(X, y == 0, n_trees=M)
    cb = bart.BARTConfig(M, outcome="binary", incremental=inc)
    out = {"binary": ms_per_sweep(lambda k, s, d: bart.step(k, s, d, cb), bart.init(None, pb.data, cb), pb.data)}
    cm = bm.multiclass_config(M, incremental=inc)
    pp = build_bart_poisson_problem(X, (y == 0).astype(int), np.exp(rng.normal(size=n)), n_trees=M)
    out["counts"] = ms_per_sweep(lambda k, s, d: bp.step(k, s, d, cm), bp.init(None, pp.data, cm), pp.data)
    pm = build_bart_multiclass_problem(X, y, n_trees=M)
    for mode in ("map", "vmap"):
        bm.CLASS_LOOP = mode
        out[f"multiclass {mode}"] = ms_per_sweep(lambda k, s, d: bm.step(k, s, d, cm), bm.init(None, pm.data, cm),
                                                 pm.data)
    # the gamma leaves as drawn before _gamma.log_gamma_given (jax.random.loggamma), same process
    with jax_loggamma_leaves():
        out["counts, jax.random.loggamma"] = ms_per_sweep(lambda k, s, d: bp.step(k, s, d, cm),
                                                          bp.init(None, pp.data, cm), pp.data)
        bm.CLASS_LOOP = "map"
        out["multiclass map, jax.random.loggamma"] = ms_per_sweep(lambda k, s, d: bm.step(k, s, d, cm),
                                                                  bm.init(None, pm.data, cm), pm.data)
    print(f"n={n} trees={M} {'incremental' if inc else 'batched'}: ms/sweep",
          {k: round(v, 2) for k, v in out.items()},
          "| multiclass map / binary", round(out["multiclass map"] / out["binary"], 1),
          "/ counts", round(out["multiclass map"] / out["counts"], 2),
          "| vmap / counts", round(out["multiclass vmap"] / out["counts"], 2))


if __name__ == "__main__":
    main()
