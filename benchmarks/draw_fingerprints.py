"""Fingerprints (SHA-256) of the draws of the README's examples on bcw, for checking that a
refactor keeps draws bit-identical.

Run before and after a change and compare the printed JSON (``--out FILE`` writes it):

    python benchmarks/draw_fingerprints.py --out before.json
    ... change ...
    python benchmarks/draw_fingerprints.py --out after.json && diff before.json after.json

Short runs (a few hundred iterations, 2 chains) keep it to a couple of minutes on a laptop CPU.
Every example is spelled with the flat keywords the estimators have always accepted, so the same
script runs against older and newer versions of the library.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import warnings

import numpy as np


def _digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
    return h.hexdigest()[:16]


def _tree_digest(post) -> str:
    trees = post.trees
    return _digest([trees.is_split, trees.feature, trees.cut])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None)
    args = p.parse_args()
    warnings.simplefilter("ignore")
    import bdtree_jax as bd

    X_train, y_train, X_test, y_test = bd.datasets.load_split("bcw")
    run = dict(num_warmup=100, num_samples=100, num_chains=2, seed=0)
    out = {}
    examples = {
        "cgm": dict(method="cgm", max_depth=6),
        "cgm+regrow,tempered": dict(method="cgm", proposal="cgm+regrow", num_temperatures=3, max_depth=5),
        "pg": dict(method="pg", num_particles=10, max_depth=5),
        "wu": dict(method="wu", num_local_steps=5, max_depth=5),
        "hmc-df": dict(method="hmc-df", max_depth=3, alpha=0.45, beta=2.5, h_init=0.025),
    }
    for name, kw in examples.items():
        r = dict(run)
        if name == "hmc-df":
            r.update(num_warmup=10, num_samples=10)
        clf = bd.BayesianTreeClassifier(**kw, **r).fit(X_train, y_train)
        post = clf.posterior_
        if name == "hmc-df":
            out[name] = _digest(np.asarray(post.draws[k]) for k in sorted(post.draws))
        else:
            out[name] = _tree_digest(post)
        out[name + ":proba"] = _digest([np.round(clf.predict_proba(X_test), 6)])
    smc = bd.sample(X_train, y_train, method="smc", num_particles=50, num_samples=20, num_chains=2, seed=0,
                    max_depth=5)
    out["smc"] = _tree_digest(smc)
    pcfg = bd.sample(X_train, y_train, method="pcfg", num_samples=20, num_chains=2, seed=0, max_depth=3,
                     num_buckets=4)
    out["pcfg"] = _tree_digest(pcfg)
    clf = bd.BARTClassifier(num_trees=20, tree_sampler="grow-prune", num_warmup=50, num_samples=50, num_chains=2,
                            seed=0).fit(X_train, y_train)
    out["bart-classifier:proba"] = _digest([np.round(clf.predict_proba(X_test), 6)])
    X, y = bd.datasets.make_cgm(300, seed=0)
    for sampler in ("grow-prune", "cgm", "pg"):
        reg = bd.BARTRegressor(num_trees=10, tree_sampler=sampler, num_warmup=30, num_samples=30, num_chains=2,
                               seed=0).fit(X, y)
        out[f"bart-{sampler}:predict"] = _digest([np.round(reg.predict(X[:50]), 6)])
    text = json.dumps(out, indent=1, sort_keys=True)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
