"""The synthetic 'box' experiment of Angelopoulos & Cussens (2005), "Exploiting informative
priors for Bayesian classification and regression trees" (IJCAI), end of §5.4, with
bdtree_jax's ``box_constraints``.

The paper: a known 'true' tree generates synthetic training and test data (500 test rows); boxes
(regions of feature space declared to have a constant class distribution, so they must lie inside
one leaf) consistent with the true tree are added to the prior; test accuracy of the most
probable class, over 3 random seeds: 74.8 %, 76.2 %, 74.4 % without boxes, 78.6 % with (every
seed).  The paper gives neither its true tree nor its data; the design below is ours.

Design
------
* Features: 5 features ``x0 .. x4``, iid uniform on [0, 10]; ``x3`` and ``x4`` are irrelevant.
* True tree (binary class 0 / 1; 5 leaves, depth 3), ``P(y = 1)`` per leaf::

      x0 <= 5
      ├── x1 <= 6 ........................ A: 0.85   (30 % of the space)
      └── x1 >  6 ........................ B: 0.25   (20 %)
      x0 > 5
      ├── x2 <= 4 ........................ C: 0.15   (20 %)
      └── x2 >  4
          ├── x1 <= 5 .................... D: 0.80   (15 %)
          └── x1 >  5 .................... E: 0.20   (15 %)

  The root split is informative on its own (P(y = 1) = 0.61 left, 0.36 right), so a chain can
  climb to the true tree one split at a time.  Bayes-optimal accuracy (each leaf's majority
  class): 0.815 exactly; a tree that misses the D / E split (the right side all class 0) gets
  0.725.  The script also reports the Bayes classifier's accuracy on the actual test rows.
* Data: ``--n-train`` training rows (default 200: with 15–25 % label noise and two irrelevant
  features the data alone leave the structure uncertain) and 500 test rows, drawn once from
  ``numpy.random.default_rng(--data-seed)`` (default 0).  As in the paper the data are fixed and
  the seeds change only the MCMC.
* Boxes (each inside one true leaf, 0.5 inside the leaf's boundaries, open where the leaf is;
  leaf D gets none)::

      A: x0 <= 4.5, x1 <= 5.5
      B: x0 <= 4.5, x1 >= 6.5
      C: x0 >= 5.5, x2 <= 3.5
      E: x0 >= 5.5, x2 >= 4.5, x1 >= 5.5

  (as ``box_constraints=[{"x0": (None, 4.5), "x1": (None, 5.5)}, ...]``).  Features a box does
  not name are unbounded, so e.g. box A forbids any split on x2, x3, x4 in a node that holds
  ``x0 <= 4.5, x1 <= 5.5``; together the boxes force the root split to be on x0 in [4.5, 5.5],
  a split of its right child to be on x2 in [3.5, 4.5], and so on.  The script checks that every
  box lies inside its leaf, i.e. that the true tree respects them.  Note that conditioning the
  prior on the boxes removes competing trees but does not make the true splits cheaper (a valid
  tree keeps its unconstrained prior probability, up to the normalising constant).  The regrow
  proposal redraws a subtree that cuts a box (up to 32 times; exact, see
  :mod:`bdtree_jax.kernels.regrow`); CGM's local moves reject a rule that cuts one.
* Prior and sampler: ``alpha = 0.95``, ``beta = 1``, Dirichlet concentration 1,
  ``min_leaf_size = 5``, ``max_depth = 6`` (``--max-depth``); proposal ``"regrow"`` (the
  paper's q_uc, ``--proposal``); one chain per seed (``--seeds``, default 0 1 2) of
  ``--num-warmup`` (default 2000) + ``--num-samples`` (default 20 000) iterations; the same seeds
  with and without boxes; ``--n-temperatures`` (default 1) turns on tempering for both.
* Reported per seed, with and without boxes: test accuracy of the most probable class (the
  paper's measure), ``acc_prob`` (mean posterior probability of the true class), mean leaves,
  acceptance rate, seconds; and their means.  For reference: the Bayes-optimal accuracy and
  scikit-learn CART (``min_samples_leaf=5``) on the same data.

Usage
-----
::

    python benchmarks/box_experiment.py --quick          # smoke test (1 seed, 300 draws)
    python benchmarks/box_experiment.py                  # the experiment (~1-2 min per run, 6 runs)

Output: ``--out`` (markdown, default ``benchmarks/results/box_experiment.md``; with ``--quick``
``box_experiment_quick.md``) and the same path with ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time

# Run from a checkout without installing: make the repository root importable.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
import bdtree_jax as bd  # noqa: E402
from bdtree_jax import diagnostics  # noqa: E402

N_FEATURES = 5
DOMAIN = (0.0, 10.0)
N_TEST = 500

# True tree: leaf -> (region {feature: (low, high)}, P(y = 1)); None = the domain's edge.
LEAVES = {
    "A": ({"x0": (None, 5.0), "x1": (None, 6.0)}, 0.85),
    "B": ({"x0": (None, 5.0), "x1": (6.0, None)}, 0.25),
    "C": ({"x0": (5.0, None), "x2": (None, 4.0)}, 0.15),
    "D": ({"x0": (5.0, None), "x2": (4.0, None), "x1": (None, 5.0)}, 0.80),
    "E": ({"x0": (5.0, None), "x2": (4.0, None), "x1": (5.0, None)}, 0.20),
}
# Boxes: leaf -> box inside it.
BOXES = {
    "A": {"x0": (None, 4.5), "x1": (None, 5.5)},
    "B": {"x0": (None, 4.5), "x1": (6.5, None)},
    "C": {"x0": (5.5, None), "x2": (None, 3.5)},
    "E": {"x0": (5.5, None), "x2": (4.5, None), "x1": (5.5, None)},
}
PAPER = dict(without=(74.8, 76.2, 74.4), with_boxes=(78.6, 78.6, 78.6))
FEATURES = [f"x{i}" for i in range(N_FEATURES)]


def _bounds(region: dict, feature: str) -> tuple[float, float]:
    lo, hi = region.get(feature, (None, None))
    return (DOMAIN[0] if lo is None else lo), (DOMAIN[1] if hi is None else hi)


def in_region(X: pd.DataFrame, region: dict) -> np.ndarray:
    """Rows of X inside the region (low < x <= high, closed at the domain's edges)."""
    mask = np.ones(len(X), bool)
    for f, (lo, hi) in region.items():
        x = X[f].to_numpy()
        if lo is not None:
            mask &= x > lo
        if hi is not None:
            mask &= x <= hi
    return mask


def true_leaf(X: pd.DataFrame) -> np.ndarray:
    leaf = np.full(len(X), "", dtype=object)
    for name, (region, _) in LEAVES.items():
        leaf[in_region(X, region)] = name
    assert (leaf != "").all(), "the true tree's leaves must partition the domain"
    return leaf


def check_boxes() -> None:
    """Every box lies inside its true leaf, so the true tree is in the box-constrained prior's support."""
    for name, box in BOXES.items():
        region = LEAVES[name][0]
        for f in FEATURES:
            blo, bhi = _bounds(box, f)
            llo, lhi = _bounds(region, f)
            if not (llo <= blo and bhi <= lhi):
                raise AssertionError(f"box {name} leaves leaf {name} on {f}: box [{blo}, {bhi}], leaf [{llo}, {lhi}]")


def bayes_accuracy() -> float:
    """Exact accuracy of the true tree's majority-class rule under the uniform design."""
    width = DOMAIN[1] - DOMAIN[0]
    acc = 0.0
    for region, p in LEAVES.values():
        vol = np.prod([(_bounds(region, f)[1] - _bounds(region, f)[0]) / width for f in FEATURES])
        acc += vol * max(p, 1 - p)
    return float(acc)


def make_data(n_train: int, seed: int):
    rng = np.random.default_rng(seed)

    def draw(n):
        X = pd.DataFrame(rng.uniform(*DOMAIN, size=(n, N_FEATURES)), columns=FEATURES)
        p1 = np.array([LEAVES[leaf][1] for leaf in true_leaf(X)])
        y = pd.Series((rng.uniform(size=n) < p1).astype(int), name="target")
        return X, y

    X_tr, y_tr = draw(n_train)
    X_te, y_te = draw(N_TEST)
    return X_tr, y_tr, X_te, y_te


def fit_one(X_tr, y_tr, X_te, y_te, args, seed: int, boxes) -> dict:
    post = bd.sample(
        X_tr, y_tr, task="classification", method="cgm", max_depth=args.max_depth, alpha=0.95, beta=1.0,
        min_leaf_size=5, concentration=1.0, num_warmup=args.num_warmup, num_samples=args.num_samples,
        num_chains=1, seed=seed, proposal=args.proposal, box_constraints=boxes, progress=False,
        num_temperatures=args.n_temperatures,
    )
    acc_max, acc_prob = diagnostics.accuracy_max_prob(post, X_te, y_te)
    freqs = post.tree_frequencies()
    top, top_f = next(iter(freqs.items()))
    return dict(
        seed=seed, acc_max=acc_max, acc_prob=acc_prob, mean_leaves=float(np.mean(post.stats["n_leaves"])),
        acceptance=post.acceptance_rate(), seconds=float(post.info["seconds"]), n_distinct_trees=len(freqs),
        top_tree=top, top_tree_frequency=float(top_f),
    )


def markdown(res: dict, args) -> str:
    lines = [
        "# Box constraints on synthetic data (Angelopoulos & Cussens 2005, IJCAI, §5.4)",
        "",
        f"Command: `{results_command()}`",
        "",
        f"True tree: 5 leaves over 5 uniform features (x3, x4 irrelevant); {args.n_train} training rows, "
        f"{N_TEST} test rows (data seed {args.data_seed}); prior α = 0.95, β = 1, min_leaf_size = 5, "
        f"max_depth = {args.max_depth}; proposal `{args.proposal}`; "
        + (f"tempering with {args.n_temperatures} rungs (ΔT = 0.2); " if args.n_temperatures > 1 else "")
        + "one chain per seed, "
        f"{args.num_warmup} warm-up + {args.num_samples} kept iterations. Boxes: "
        + "; ".join(f"{k}: " + ", ".join(f"{f} ∈ [{'-∞' if lo is None else lo}, {'∞' if hi is None else hi}]"
                                          for f, (lo, hi) in b.items()) for k, b in BOXES.items()) + ".",
        "",
        f"Reference: Bayes-optimal accuracy {100 * res['bayes_exact']:.1f} % (exact), "
        f"{100 * res['bayes_test']:.1f} % on these test rows; CART (`min_samples_leaf=5`) "
        f"{100 * res['cart_test']:.1f} %. Training rows per box: "
        + ", ".join(f"{k} {v}" for k, v in res["rows_per_box"].items()) + ".",
        "",
        "| seed | acc (no boxes) | acc (boxes) | acc_prob (no boxes) | acc_prob (boxes) | leaves (no / boxes) | "
        "accept. (no / boxes) | s (no / boxes) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    no, yes = res["runs"]["without"], res["runs"]["with_boxes"]
    for a, b in zip(no, yes):
        lines.append(
            f"| {a['seed']} | {100 * a['acc_max']:.1f} | {100 * b['acc_max']:.1f} | {100 * a['acc_prob']:.1f} | "
            f"{100 * b['acc_prob']:.1f} | {a['mean_leaves']:.1f} / {b['mean_leaves']:.1f} | "
            f"{a['acceptance']:.3f} / {b['acceptance']:.3f} | {a['seconds']:.0f} / {b['seconds']:.0f} |")
    if no:
        def m(rs, k):
            return f"{100 * np.mean([r[k] for r in rs]):.1f}" if rs else "—"

        lines.append(f"| **mean** | **{m(no, 'acc_max')}** | **{m(yes, 'acc_max')}** | "
                     f"{m(no, 'acc_prob')} | {m(yes, 'acc_prob')} | | | |")
    lines += [
        "",
        f"Paper (its own true tree and data): without boxes {', '.join(map(str, PAPER['without']))} % "
        f"(mean {np.mean(PAPER['without']):.1f} %), with boxes 78.6 % for every seed.",
        "",
        "Most visited tree per run:",
        "",
    ]
    for label, rs in (("no boxes", no), ("boxes", yes)):
        for r in rs:
            lines.append(f"* {label}, seed {r['seed']} ({r['top_tree_frequency']:.3f}): `{r['top_tree']}`")
    lines += ["", f"Machine: {platform.platform()}, {os.cpu_count()} CPUs (shared; timings are noisy).", ""]
    return "\n".join(lines)


def results_command() -> str:
    return "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], _ROOT)] + sys.argv[1:])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="MCMC seeds (default 0 1 2)")
    p.add_argument("--num-samples", type=int, default=None, help="kept iterations per run (default 20000)")
    p.add_argument("--num-warmup", type=int, default=None, help="warm-up iterations per run (default 2000)")
    p.add_argument("--n-train", type=int, default=200)
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--max-depth", type=int, default=6)
    p.add_argument("--proposal", default="regrow", choices=("regrow", "cgm", "cgm+regrow"))
    p.add_argument("--n-temperatures", type=int, default=1, help="tempering rungs (ΔT = 0.2); 1 = off")
    p.add_argument("--quick", action="store_true", help="smoke test: seed 0, 100 + 300 iterations (unless given)")
    p.add_argument("--out", default=None, help="markdown output (default benchmarks/results/box_experiment.md)")
    args = p.parse_args(argv)
    if args.seeds is None:
        args.seeds = [0] if args.quick else [0, 1, 2]
    if args.num_samples is None:
        args.num_samples = 300 if args.quick else 20000
    if args.num_warmup is None:
        args.num_warmup = 100 if args.quick else 2000
    if args.out is None:
        args.out = os.path.join(_ROOT, "benchmarks", "results",
                                "box_experiment_quick.md" if args.quick else "box_experiment.md")
    out_md = os.path.abspath(args.out)
    out_json = os.path.splitext(out_md)[0] + ".json"
    os.makedirs(os.path.dirname(out_md), exist_ok=True)

    check_boxes()
    X_tr, y_tr, X_te, y_te = make_data(args.n_train, args.data_seed)
    bayes_pred = np.array([int(LEAVES[leaf][1] > 0.5) for leaf in true_leaf(X_te)])
    cart = DecisionTreeClassifier(min_samples_leaf=5, random_state=0).fit(X_tr, y_tr)
    res = dict(
        settings=dict(n_train=args.n_train, n_test=N_TEST, data_seed=args.data_seed, max_depth=args.max_depth,
                      proposal=args.proposal, n_temperatures=args.n_temperatures, num_warmup=args.num_warmup,
                      num_samples=args.num_samples,
                      leaves={k: [v[0], v[1]] for k, v in LEAVES.items()}, boxes=BOXES),
        bayes_exact=bayes_accuracy(), bayes_test=float(np.mean(bayes_pred == y_te.to_numpy())),
        cart_test=float(np.mean(cart.predict(X_te) == y_te.to_numpy())),
        rows_per_box={k: int(in_region(X_tr, b).sum()) for k, b in BOXES.items()},
        train_positive=float(y_tr.mean()),
        runs=dict(without=[], with_boxes=[]),
    )
    print(f"Bayes accuracy {res['bayes_exact']:.3f} (test rows {res['bayes_test']:.3f}), CART {res['cart_test']:.3f}; "
          f"training rows per box {res['rows_per_box']}", flush=True)
    t_start = time.perf_counter()
    for seed in args.seeds:
        for kind, boxes in (("without", None), ("with_boxes", list(BOXES.values()))):
            r = fit_one(X_tr, y_tr, X_te, y_te, args, seed, boxes)
            res["runs"][kind].append(r)
            print(f"  seed {seed} {kind}: acc {100 * r['acc_max']:.1f} % acc_prob {100 * r['acc_prob']:.1f} % | "
                  f"leaves {r['mean_leaves']:.1f} | accept {r['acceptance']:.3f} | {r['seconds']:.0f}s | "
                  f"total {time.perf_counter() - t_start:.0f}s", flush=True)
            with open(out_json, "w") as fh:
                json.dump(dict(command=results_command(), results=res), fh, indent=1)
            with open(out_md, "w") as fh:
                fh.write(markdown(res, args))
    print()
    print(markdown(res, args))
    print(f"total wall time {time.perf_counter() - t_start:.0f}s")


if __name__ == "__main__":
    main()
