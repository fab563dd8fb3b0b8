"""One multiclass BART fit on a wine hold-out, diagnosed (issue #41): test and train log-loss, the
test log-loss of each chain alone, the split R-hat (ArviZ, rank-normalised) of the held-out class
probabilities, and the log-loss of the softmax of the posterior mean ``log lambda`` (a plug-in
that is not the posterior predictive; it shows how widely the draws' log-odds spread).

    python benchmarks/bart_multiclass_diagnose.py --k 2 --warmup 250 --samples 500 --chains 4 --split 0

Wine's split ``s`` is the benchmark's (``benchmarks/bart_multiclass.py``): a stratified 25 %
hold-out with ``random_state = s``; the fit's seed is ``s``.  Prints one line.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in (("--k", 2.0), ("--warmup", 250), ("--samples", 500), ("--chains", 4), ("--split", 0),
                          ("--num-trees", 50)):
        p.add_argument(flag, type=type(default), default=default)
    args = p.parse_args(argv)

    import arviz as az
    from scipy.special import softmax
    from sklearn.metrics import log_loss
    from sklearn.model_selection import train_test_split

    import bdtree_jax as bd

    X, y = bd.datasets.load("wine")
    y = np.asarray(y)
    classes = np.unique(y)
    train, test = train_test_split(np.arange(len(X)), test_size=0.25, random_state=args.split, stratify=y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bd.ConvergenceWarning)
        start = time.perf_counter()
        clf = bd.BARTClassifier(seed=args.split, k=args.k, num_trees=args.num_trees, num_warmup=args.warmup,
                                num_samples=args.samples, num_chains=args.chains, progress=False)
        clf.fit(X.iloc[train], y[train])
        seconds = time.perf_counter() - start
    post = clf.posterior_
    draws = post.predict_proba_draws(X.iloc[test])  # (C * S, n, K)
    C, S = args.chains, draws.shape[0] // args.chains
    per_chain = draws.reshape(C, S, len(test), len(classes))
    rhat = az.rhat(az.convert_to_dataset({"p": per_chain.reshape(C, S, -1)}))["p"].values
    plug_in = softmax(post.predict_draws(X.iloc[test]).mean(0), axis=1)
    train_p = post.predict_proba(X.iloc[train])
    chains = " ".join(f"{log_loss(y[test], c.mean(0), labels=classes):.4f}" for c in per_chain)
    print(f"k={args.k:g} trees={args.num_trees} chains={C} x ({args.warmup} + {args.samples}) split={args.split} "
          f"({seconds:.1f} s): test log-loss {log_loss(y[test], draws.mean(0), labels=classes):.4f}, per chain "
          f"{chains}; train {log_loss(y[train], train_p, labels=classes):.4f}; softmax of mean log lambda "
          f"{log_loss(y[test], plug_in, labels=classes):.4f}; R-hat of test P max {np.nanmax(rhat):.3f} median "
          f"{np.nanmedian(rhat):.3f}, share > 1.05 {np.mean(rhat > 1.05):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
