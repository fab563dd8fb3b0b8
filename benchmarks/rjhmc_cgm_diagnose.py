"""Why RJHMC-Tree regression on cgm is slow and where a chain gets stuck (issue 29).

Runs short single chains of the built-in kernel on the cgm paper split (the settings of
``configs/cgm_hmc-df.yaml``: max_depth 5, alpha 0.45, beta 2.5, h 0.001) and prints per-iteration
NUTS gradient evaluations, step size, NUTS acceptance, RJ move / acceptance, leaves, sigma,
log-likelihood and the test MSE of the soft tree's prediction::

    python benchmarks/rjhmc_cgm_diagnose.py --warmup 30 --samples 20 --max-tree-depth 10 --seed 0
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402


def load(name="cgm"):
    os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
    import bdtree_jax as bd
    from bdtree_jax.soft import minmax_scaler

    X, y, Xt, yt = bd.datasets.load_split(name)
    X, Xt = X.to_numpy(float), Xt.to_numpy(float)
    lo, rng = minmax_scaler(X)
    return (((X - lo) / rng).astype(np.float32), y.to_numpy(np.float32),
            ((Xt - lo) / rng).astype(np.float32), yt.to_numpy(np.float32))


def predict(config, is_split, params, feature, X):
    """(n,) soft-tree mean prediction at h_final for one draw."""
    from bdtree_jax.soft import leaf_membership, right_prob_df, right_prob_dfi

    if config.kind == "df":
        psi = right_prob_df(X, feature, params["tree_tau"], config.h_final)
    else:
        psi = right_prob_dfi(X, params["tree_weights"], params["tree_tau"], config.h_final)
    phi = leaf_membership(is_split, psi)
    return np.asarray(phi @ params["leaf_mean"])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--max-tree-depth", type=int, default=10)
    p.add_argument("--leg-steps", type=int, default=4)
    p.add_argument("--h", type=float, default=0.001)
    p.add_argument("--h-init", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kind", choices=("df", "dfi"), default="df")
    p.add_argument("--leaf-proposal", choices=("conditional", "prior"), default="conditional")
    p.add_argument("--split-proposal", choices=("conditional", "prior"), default="conditional")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from bdtree_jax.driver import run_chains
    from bdtree_jax.kernels.rjhmc import RJHMCConfig, rjhmc

    X, y, Xt, yt = load()
    config = RJHMCConfig(task="regression", kind=a.kind, max_depth=5, alpha=0.45, beta=2.5,
                         h_init=a.h_init or a.h, h_final=a.h, num_warmup=a.warmup, leg_steps=a.leg_steps,
                         max_tree_depth=a.max_tree_depth, leaf_proposal=a.leaf_proposal,
                         split_proposal=a.split_proposal)
    data = {"X": jnp.asarray(X), "y": jnp.asarray(y)}
    n = a.warmup + a.samples
    t = time.perf_counter()
    tr, _ = run_chains(rjhmc(config), data, key=jax.random.key(a.seed), num_chains=1, num_iterations=n,
                       block_size=n, progress=False)
    wall = time.perf_counter() - t
    tr = jax.tree.map(lambda v: np.asarray(v[0]), tr)
    rows = []
    for i in range(n):
        params = {k: v[i] for k, v in tr["params"].items()}
        mse = float(np.mean((predict(config, tr["is_split"][i], params, tr["feature"][i], Xt) - yt) ** 2))
        rows.append(dict(it=i, grads=int(tr["nuts_grads"][i]), step=float(tr["step_size"][i]),
                         nuts_acc=float(tr["nuts_accept"][i]), div=int(tr["diverging"][i]), move=int(tr["move"][i]),
                         acc=bool(tr["accepted"][i]), log_alpha=float(tr["log_alpha"][i]), leaves=int(tr["n_leaves"][i]),
                         sigma=float(params["sigma"]), log_lik=float(tr["log_lik"][i]), test_mse=mse))
    print(f"# {a.kind} seed {a.seed} warmup {a.warmup} samples {a.samples} max_tree_depth {a.max_tree_depth} "
          f"h {a.h} leg_steps {a.leg_steps} leaf_proposal {a.leaf_proposal} split_proposal {a.split_proposal}: wall {wall:.1f} s incl. compile")
    print("it grads step nuts_acc div move acc log_alpha leaves sigma log_lik test_mse")
    for r in rows:
        print(f"{r['it']} {r['grads']} {r['step']:.2e} {r['nuts_acc']:.2f} {r['div']} {'gps'[r['move']]} "
              f"{int(r['acc'])} {r['log_alpha']:.3g} {r['leaves']} {r['sigma']:.3f} {r['log_lik']:.1f} {r['test_mse']:.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(args=vars(a), wall=wall, rows=rows), f)


if __name__ == "__main__":
    main()
