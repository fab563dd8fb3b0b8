"""The tempering experiment of Angelopoulos & Cussens (2005), "Tempering for Bayesian C&RT"
(ICML), section 7, Table 6, with bdtree_jax's ``method="cgm"`` sampler.

Protocol
--------
* Datasets: ``bcw`` (Breast Cancer Wisconsin, 683 complete rows, 9 features, 2 classes) and
  ``waveform`` (WF).  Our bundled waveform is UCI's 21-attribute version (5000 x 21, 3 classes);
  the paper's WF has 40 attributes (UCI "waveform-+noise": the 21 plus 19 pure-noise ones), so
  the WF rows are not the same problem and the WF tree space of the paper is larger.
* Split: one fixed random train / hold-out split, stratified by class,
  ``sklearn.model_selection.train_test_split(test_size=1 - f, stratify=y, random_state=0)``
  with ``f = 0.8`` (``--split-seed``, ``--train-fraction``).  The paper's split is "arbitrary"
  80/20, except for WF where "due to an unfortunate error" it is 20 % train / 80 % hold-out;
  ``--waveform-train-fraction 0.2`` reproduces that (default 0.8 like the other datasets).
* Prior (the paper's, §7): ``alpha = 0.95``, ``beta = 1``, Dirichlet concentration 1 for every
  class, ``min_leaf_size = 5``.  The paper has no depth limit; our trees live in a fixed heap, so
  we set ``--max-depth`` (default 8).  The prior's split probability ``0.95 / (1 + d)`` at depth
  ``d`` and at least 5 rows per leaf keep trees small (bcw: 6–10 leaves), but not shallow: in a
  2000-iteration check on bcw the regrow chain spent most of its time at depth 5–7 (so a bound of
  6 would bind) and never reached 8; in the first few hundred iterations it occasionally does.
  A larger heap costs time (see Cost), so 8 is one level of headroom.  The table reports the
  deepest tree visited and the fraction of draws at the bound, to check that it does not bind
  (WF, with 4000 training rows, is the case to watch).
* Sampler: one chain per run (``num_chains=1``, ``seed = s``), ``num_warmup = 0`` (the paper
  keeps every tree: "We use no burn-in"), proposal ``--proposal`` (default ``"regrow"``:
  prune a uniformly chosen node's subtree and regrow it from the prior, the paper's uniform
  choice backtracking q_uc).
* Tempering: off (``n_temperatures = 1``) or on (MrBayes' default, as in the paper: 4 rungs with
  inverse temperatures ``1 / (1 + 0.2 i)``, a swap between two random rungs proposed after every
  iteration, only the cold rung recorded).
* Grid: dataset x tempering {F, T} x chain length (``--lengths``, default 10 000 and 50 000
  iterations; paper: 50K / 125K / 250K for bcw, 50K for WF) x seeds (``--seeds``, default 0 1 2).
* Measured per run, on the hold-out set: ``acc_max`` (accuracy of the most probable class) and
  ``acc_prob`` (expected accuracy when the class is drawn from the posterior class
  probabilities: the mean posterior probability of the true class), via
  :func:`bdtree_jax.diagnostics.accuracy_max_prob`; the posterior probability of the "positive"
  class at every hold-out row (bcw: label 2, benign, the paper's 66 % "positives"; WF: label 1,
  the paper does not say which class it used); the mean number of leaves, the MH acceptance
  rate of the (cold) chain, the swap acceptance rates of adjacent rungs (tempered runs), and the
  sampling time.
* Timing excludes compilation: before the first run of each (dataset, tempering) configuration a
  throw-away run of one compiled block (``--block-size`` iterations, default 500, seed 10**6) is
  made with identical settings and data; it compiles the programs that the timed runs then reuse
  (compiled blocks are cached per configuration and do not depend on the seed or the run length).
  The timed figure is ``post.info["seconds"]`` (the sampling loop, incl. moving the trace to the
  host, excl. building the split grid and predictions) per 1000 iterations.  The throw-away run's
  time (compilation + one block) is reported separately.  The machine is shared: timings are noisy.
* Tables: per (dataset, length, tempering) the mean and sample standard deviation (ddof = 1)
  over seeds of ``acc_max`` and ``acc_prob`` in %, next to the paper's Table 6 row of the same
  length when there is one; seconds per 1000 iterations next to the paper's (bcw 8.1 s / 17 s,
  WF 291 s / 1151 s without / with tempering; on 2005 hardware, in Prolog) and the speed-up factor.
  Also, for bcw at the longest length, the top-5-tree table per seed (the paper's Table 4; also
  the untempered one), and probability-agreement plots (the paper's Figs 2, 3, 8, 9: seed
  ``seeds[0]`` vs ``seeds[1]``) for every dataset x tempering at the longest length, saved as
  PNGs next to ``--out``.

Cost
----
Measured on our shared 2-core machine with ``proposal="regrow"``, ``max_depth=8``, after
compilation: bcw ≈ 25 s per 1000 iterations untempered and ≈ 95 s tempered (the 4 rungs run one
after another on CPU); WF (4000 training rows) ≈ 500 s per 1000 untempered.  The default grid
(lengths 10 000 + 50 000, 3 seeds) is therefore ≈ 6 h for bcw and several days for WF; run bcw
first (``--datasets bcw``) and WF with ``--lengths`` of a few thousand, or on a faster machine.
(``proposal="cgm"`` is several times cheaper per iteration, but is not the paper's q_uc.)

Usage
-----
::

    python benchmarks/tempering_protocol.py --quick                 # smoke test (~3 min)
    python benchmarks/tempering_protocol.py                         # the full protocol
    python benchmarks/tempering_protocol.py --datasets bcw --lengths 50000 125000 250000 --resume

``--resume`` keeps the runs already stored in the JSON next to ``--out`` whose settings are
identical and only runs the missing ones.  Output: ``--out`` (markdown, default
``benchmarks/results/tempering_protocol.md``), the same path with ``.json`` (every run's numbers
and hold-out probabilities), ``_trees.json`` (bcw runs' full tree-visit frequencies, for the
top-tree tables) and ``_<dataset>_<length>_<T|F>.png`` (agreement plots); all rewritten after
every run.  ``--quick`` (bcw only, 300 iterations, unless ``--datasets`` / ``--lengths`` are
given) writes to ``tempering_protocol_quick.*`` by default.
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
from sklearn.model_selection import train_test_split  # noqa: E402

os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
import bdtree_jax as bd  # noqa: E402
from bdtree_jax import diagnostics  # noqa: E402

ALL_DATASETS = ("bcw", "waveform")
LABEL = {"bcw": "BCW", "waveform": "WF"}
POSITIVE = {"bcw": 2, "waveform": 1}  # bcw: benign (2), 66 % of rows, like the paper's "positives"

# Angelopoulos & Cussens (2005), Table 6: (dataset, iterations, tempered) ->
# (mean acc_max, sd acc_max, mean acc_prob, sd acc_prob), in %.
PAPER_TABLE6 = {
    ("bcw", 50000, False): (96.1, 1.9, 93.2, 1.2),
    ("bcw", 50000, True): (96.6, 0.9, 93.1, 0.4),
    ("bcw", 125000, False): (95.1, 0.3, 92.9, 0.7),
    ("bcw", 125000, True): (97.1, 1.2, 93.5, 0.5),
    ("bcw", 250000, False): (96.1, 1.2, 92.8, 1.4),
    ("bcw", 250000, True): (95.8, 0.3, 93.3, 0.1),
    ("waveform", 50000, False): (71.0, 3.7, 55.6, 1.2),
    ("waveform", 50000, True): (72.5, 2.9, 57.5, 0.8),
}
# §7: seconds per 1000 iterations (without, with tempering).
PAPER_SECONDS = {("bcw", False): 8.1, ("bcw", True): 17.0, ("waveform", False): 291.0, ("waveform", True): 1151.0}

COMPILE_SEED = 10**6


# ----------------------------------------------------------------------------------------------
# data and settings


def dataset_settings(name: str, args) -> dict:
    """Everything that defines a dataset's runs (stored runs are reused only if this is equal)."""
    frac = args.waveform_train_fraction if name == "waveform" else args.train_fraction
    return dict(
        train_fraction=frac, split_seed=args.split_seed, proposal=args.proposal, max_depth=args.max_depth,
        min_leaf_size=5, alpha=0.95, beta=1.0, concentration=1.0, n_temperatures_on=4, delta_t=0.2,
        block_size=block_size(args), positive=POSITIVE[name],
    )


def block_size(args) -> int:
    """One compiled block length for every run (a shorter run would compile a shorter block)."""
    return int(min(args.block_size, min(args.lengths)))


def load_split(name: str, settings: dict):
    X, y = bd.datasets.load(name)
    X_tr, X_te, y_tr, y_te = train_test_split(
        X, y, test_size=1 - settings["train_fraction"], stratify=y, random_state=settings["split_seed"]
    )
    return X_tr, y_tr, X_te, y_te


def fit(X, y, settings: dict, *, tempered: bool, length: int, seed: int):
    return bd.sample(
        X, y, task="classification", method="cgm", max_depth=settings["max_depth"], alpha=settings["alpha"],
        beta=settings["beta"], min_leaf_size=settings["min_leaf_size"], concentration=settings["concentration"],
        num_warmup=0, num_samples=int(length), num_chains=1, seed=int(seed), proposal=settings["proposal"],
        num_temperatures=settings["n_temperatures_on"] if tempered else 1, delta_t=settings["delta_t"],
        block_size=settings["block_size"], progress=False,
    )


def run_key(name: str, length: int, tempered: bool, seed: int) -> str:
    return f"{name}|{length}|{'T' if tempered else 'F'}|{seed}"


def run_one(post, X_te, y_te, settings: dict, length: int) -> tuple[dict, dict]:
    """The numbers of one run, and its full tree-visit frequencies."""
    t0 = time.perf_counter()
    acc_max, acc_prob = diagnostics.accuracy_max_prob(post, X_te, y_te)
    pos = diagnostics.positive_proba(post, X_te, settings["positive"])
    seconds_predict = time.perf_counter() - t0
    st = post.stats
    depth = np.asarray(st["depth"])
    freqs = post.tree_frequencies()
    rec = dict(
        acc_max=acc_max, acc_prob=acc_prob,
        seconds=float(post.info["seconds"]), s_per_1000=1000.0 * float(post.info["seconds"]) / length,
        seconds_predict=seconds_predict,
        mean_leaves=float(np.mean(st["n_leaves"])), mean_depth=float(depth.mean()),
        max_depth_reached=int(depth.max()), frac_at_max_depth=float(np.mean(depth >= settings["max_depth"])),
        acceptance=post.acceptance_rate(), n_distinct_trees=len(freqs),
        top_tree_frequency=float(next(iter(freqs.values()))),
        positive_proba=[round(float(p), 6) for p in pos],
    )
    if "swap_pair" in st:
        rates = post.swap_rates()
        rec["swap_adjacent"] = [float(rates[i, i + 1]) for i in range(rates.shape[0] - 1)]
        rec["swap_overall"] = float(np.mean(st["swap_accepted"]))
    return rec, freqs


# ----------------------------------------------------------------------------------------------
# summaries


def _mean_sd(x) -> tuple[float, float]:
    x = np.asarray(x, float)
    return float(x.mean()), (float(np.std(x, ddof=1)) if len(x) > 1 else float("nan"))


def _fmt(v, digits=1) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:.{digits}f}"


def runs_of(results: dict, name: str, length: int, tempered: bool, seeds) -> list[dict]:
    runs = results.get(name, {}).get("runs", {})
    return [runs[k] for s in seeds if (k := run_key(name, length, tempered, s)) in runs]


def agreement_png(out_md: str, name: str, length: int, tempered: bool) -> str:
    return f"{os.path.splitext(out_md)[0]}_{name}_{length}_{'T' if tempered else 'F'}.png"


def longest_length(results: dict, name: str, args) -> int | None:
    """The longest of ``args.lengths`` for which ``name`` has stored runs (None if it has none)."""
    have = {r["length"] for r in results.get(name, {}).get("runs", {}).values()}
    lengths = [n for n in args.lengths if n in have]
    return max(lengths) if lengths else None


def make_plots(results: dict, args, out_md: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if len(args.seeds) < 2:
        return []
    s0, s1 = args.seeds[:2]
    written = []
    for name in args.datasets:
        runs = results.get(name, {}).get("runs", {})
        length = longest_length(results, name, args)
        for tempered in (False, True):
            a, b = runs.get(run_key(name, length, tempered, s0)), runs.get(run_key(name, length, tempered, s1))
            if a is None or b is None:
                continue
            fig, ax = plt.subplots(figsize=(4.2, 4.2))
            pos = results[name]["settings"]["positive"]
            diagnostics.plot_agreement(
                a["positive_proba"], b["positive_proba"], ax=ax,
                title=f"{LABEL[name]}, {length} it., tempering={'T' if tempered else 'F'}",
                labels=(f"P(y={pos}) seed {s0}", f"P(y={pos}) seed {s1}"),
            )
            fig.tight_layout()
            path = agreement_png(out_md, name, length, tempered)
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return written


def markdown(results: dict, trees: dict, args, out_md: str, plots: list[str]) -> str:
    names = [n for n in args.datasets if results.get(n, {}).get("runs")]
    lines = [
        "# Tempering for Bayesian C&RT (Angelopoulos & Cussens 2005, Table 6) with bdtree_jax",
        "",
        "Commands (runs of one dataset may come from several `--resume` invocations; the last is shown):",
        "",
        *[f"* {LABEL[n]}: `{results[n].get('command', results_command())}`" for n in names],
        "",
        f"Prior α = 0.95, β = 1, Dirichlet concentration 1, min_leaf_size = 5, max_depth = {args.max_depth}; "
        f"proposal `{args.proposal}`; one chain per seed (seeds {', '.join(map(str, args.seeds))}), "
        "no burn-in (all draws kept); tempering T = 4 rungs, β_i = 1/(1 + 0.2 i), a swap proposed "
        "after every iteration. Accuracies on the hold-out set, in %; sd = sample sd (ddof = 1) over seeds.",
        "",
        "| Dataset | train | hold-out | features | classes | positive label | positives train / hold-out |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in names:
        d = results[n]["data"]
        lines.append(f"| {LABEL[n]} | {d['n_train']} | {d['n_test']} | {d['n_features']} | {d['classes']} | "
                     f"{d['positive']} | {100 * d['pos_train']:.1f} % / {100 * d['pos_test']:.1f} % |")
    lines += [
        "",
        "The paper's WF has 40 attributes (21 + 19 noise) and a 20 % / 80 % train / hold-out split; "
        "ours has 21 attributes" + (" and the same 80/20 split as bcw." if args.waveform_train_fraction == 0.8
                                    else f" and a {args.waveform_train_fraction:.0%} training fraction."),
        "",
        "## Table 6 — variation in predictive accuracy over seeds",
        "",
        "| Data | iter | t | seeds | acc_max | σ acc_max | acc_prob | σ acc_prob | paper acc_max (σ) | "
        "paper acc_prob (σ) | s / 1000 it | paper s / 1000 it | speed-up | leaves | accept. | "
        "swap rates 1↔2, 2↔3, 3↔4 | deepest (at bound) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in names:
        for length in sorted(args.lengths):
            for tempered in (False, True):
                rs = runs_of(results, n, length, tempered, args.seeds)
                if not rs:
                    continue
                am, asd = _mean_sd([100 * r["acc_max"] for r in rs])
                pm, psd = _mean_sd([100 * r["acc_prob"] for r in rs])
                paper = PAPER_TABLE6.get((n, length, tempered))
                pa = f"{paper[0]} ({paper[1]})" if paper else "—"
                pp = f"{paper[2]} ({paper[3]})" if paper else "—"
                spk = np.array([r["s_per_1000"] for r in rs])
                ps = PAPER_SECONDS[(n, tempered)]
                swaps = "—"
                if tempered:
                    sw = np.mean([r["swap_adjacent"] for r in rs], axis=0)
                    swaps = ", ".join(f"{v:.2f}" for v in sw)
                deepest = max(r["max_depth_reached"] for r in rs)
                at_bound = np.mean([r["frac_at_max_depth"] for r in rs])
                lines.append(
                    f"| {LABEL[n]} | {length // 1000 if length % 1000 == 0 else length / 1000:g}K | "
                    f"{'T' if tempered else 'F'} | {len(rs)} | {_fmt(am)} | {_fmt(asd)} | {_fmt(pm)} | {_fmt(psd)} | "
                    f"{pa} | {pp} | {spk.mean():.3f} | {ps:g} | {ps / spk.mean():.2g}× | "
                    f"{np.mean([r['mean_leaves'] for r in rs]):.1f} | {np.mean([r['acceptance'] for r in rs]):.3f} | "
                    f"{swaps} | {deepest} ({100 * at_bound:.1f} %) |"
                )
    lines += ["", "Paper's Table 6 rows for the same datasets (acc_max, σ, acc_prob, σ in %):", "",
              "| Data | iter | t | acc_max | σ acc_max | acc_prob | σ acc_prob |", "|---|---|---|---|---|---|---|"]
    for (n, length, tempered), v in PAPER_TABLE6.items():
        if n in names:
            lines.append(f"| {LABEL[n]} | {length // 1000}K | {'T' if tempered else 'F'} | "
                         + " | ".join(f"{x}" for x in v) + " |")

    lines += ["", "## Per run", "",
              "| Data | iter | t | seed | acc_max | acc_prob | s / 1000 it | leaves | accept. | distinct trees | "
              "top tree freq. | swap (overall) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in names:
        for length in sorted(args.lengths):
            for tempered in (False, True):
                for s in args.seeds:
                    r = results[n]["runs"].get(run_key(n, length, tempered, s))
                    if r is None:
                        continue
                    lines.append(
                        f"| {LABEL[n]} | {length} | {'T' if tempered else 'F'} | {s} | {100 * r['acc_max']:.2f} | "
                        f"{100 * r['acc_prob']:.2f} | {r['s_per_1000']:.3f} | {r['mean_leaves']:.2f} | "
                        f"{r['acceptance']:.3f} | {r['n_distinct_trees']} | {r['top_tree_frequency']:.4f} | "
                        f"{_fmt(r.get('swap_overall'), 3) if tempered else '—'} |")

    lines += ["", "Throw-away compile runs (compilation + one block of "
              f"{block_size(args)} iterations; not part of the timings above):", ""]
    for n in names:
        comp = results[n].get("compile_seconds", {})
        if comp:
            lines.append(f"* {LABEL[n]}: " + ", ".join(f"tempering={k}: {v:.1f} s" for k, v in sorted(comp.items())))

    # top-tree tables (paper's Tables 2-5) for bcw at the longest length
    length = max(args.lengths)
    for tempered in (True, False):
        keys = [run_key("bcw", length, tempered, s) for s in args.seeds]
        if "bcw" in names and keys and all(k in trees for k in keys):
            table = diagnostics.top_tree_table([trees[k] for k in keys], k=5,
                                               names=[f"p_seed{s}" for s in args.seeds])
            lines += ["", f"## Top-5 trees — BCW, {length} iterations, tempering={'T' if tempered else 'F'} "
                      "(cf. the paper's Tables 2–5)", "",
                      "Visit frequency of the 5 trees most visited over the pooled runs (mean frequency), per seed.",
                      "", "| Tree | " + " | ".join(table.columns) + " |", "|---|" + "---|" * len(table.columns)]
            for i, (tree, row) in enumerate(table.iterrows()):
                lines.append(f"| T{i + 1} | " + " | ".join(f"{v:.5f}" for v in row) + " |")
            lines += ["", "Trees:", ""] + [f"* T{i + 1}: `{t}`" for i, t in enumerate(table.index)]

    if plots:
        lines += ["", "## Probability agreement (paper's Figs 1–9)", "",
                  f"Posterior probability of the positive class at every hold-out row, seed {args.seeds[0]} "
                  f"(x) vs seed {args.seeds[1]} (y), longest chain run for each dataset.", ""]
        for p in plots:
            rel = os.path.relpath(p, os.path.dirname(out_md))
            lines.append(f"![{os.path.basename(p)}]({rel})")
        lines.append("")
        lines += ["| Data | iter | t | mean abs. difference | max abs. difference |", "|---|---|---|---|---|"]
        for n in names:
            length = longest_length(results, n, args)
            for tempered in (False, True):
                a = results[n]["runs"].get(run_key(n, length, tempered, args.seeds[0]))
                b = results[n]["runs"].get(run_key(n, length, tempered, args.seeds[1]))
                if a and b:
                    d = np.abs(np.array(a["positive_proba"]) - np.array(b["positive_proba"]))
                    lines.append(f"| {LABEL[n]} | {length // 1000}K | {'T' if tempered else 'F'} | {d.mean():.4f} "
                                 f"| {d.max():.4f} |")

    lines += ["", f"Machine: {platform.platform()}, {os.cpu_count()} CPUs (shared; timings are noisy). "
              "The paper's timings are from 2005 hardware (Prolog SLP implementation).", ""]
    return "\n".join(lines)


def results_command() -> str:
    return "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], _ROOT)] + sys.argv[1:])


# ----------------------------------------------------------------------------------------------


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=None, choices=ALL_DATASETS, help="default: bcw waveform")
    p.add_argument("--lengths", nargs="+", type=int, default=None,
                   help="chain lengths in iterations (default 10000 50000; paper 50000 125000 250000)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--proposal", default="regrow", choices=("regrow", "cgm", "cgm+regrow"))
    p.add_argument("--max-depth", type=int, default=8, help="depth bound of the tree heap (default 8; paper: none)")
    p.add_argument("--train-fraction", type=float, default=0.8)
    p.add_argument("--waveform-train-fraction", type=float, default=0.8,
                   help="training fraction for waveform (default 0.8; the paper's WF split was 0.2)")
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--block-size", type=int, default=500)
    p.add_argument("--quick", action="store_true", help="smoke test: bcw, 300 iterations (unless given)")
    p.add_argument("--resume", action="store_true", help="reuse runs stored in the JSON with the same settings")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: rewrite the markdown and plots from the stored JSON (all its datasets and lengths)")
    p.add_argument("--out", default=None, help="markdown output (default benchmarks/results/tempering_protocol.md)")
    args = p.parse_args(argv)
    if args.datasets is None:
        args.datasets = ["bcw"] if args.quick else list(ALL_DATASETS)
    if args.lengths is None:
        args.lengths = [300] if args.quick else [10000, 50000]
    if args.out is None:
        stem = "tempering_protocol_quick.md" if args.quick else "tempering_protocol.md"
        args.out = os.path.join(_ROOT, "benchmarks", "results", stem)
    if min(args.lengths) < 1 or len(set(args.seeds)) != len(args.seeds):
        p.error("lengths must be >= 1 and seeds distinct")

    out_md = os.path.abspath(args.out)
    out_json = os.path.splitext(out_md)[0] + ".json"
    out_trees = os.path.splitext(out_md)[0] + "_trees.json"
    os.makedirs(os.path.dirname(out_md), exist_ok=True)

    stored, stored_trees = {}, {}
    if (args.resume or args.report_only) and os.path.exists(out_json):
        with open(out_json) as fh:
            stored = json.load(fh).get("results", {})
        if os.path.exists(out_trees):
            with open(out_trees) as fh:
                stored_trees = json.load(fh)

    results = {k: v for k, v in stored.items() if k not in args.datasets}
    trees = dict(stored_trees)

    def save():
        with open(out_json, "w") as fh:
            json.dump(dict(command=results_command(), results=results), fh, indent=1)
        with open(out_trees, "w") as fh:
            json.dump(trees, fh)
        plots = make_plots(results, args, out_md)
        with open(out_md, "w") as fh:
            fh.write(markdown(results, trees, args, out_md, plots))

    if args.report_only:
        if not stored:
            p.error(f"--report-only needs stored results in {out_json}")
        results = stored
        args.datasets = [n for n in ALL_DATASETS if n in stored]
        args.lengths = sorted({r["length"] for v in stored.values() for r in v["runs"].values()})
        plots = make_plots(results, args, out_md)
        with open(out_md, "w") as fh:
            fh.write(markdown(results, trees, args, out_md, plots))
        print(f"wrote {out_md}")
        return

    t_start = time.perf_counter()
    for name in args.datasets:
        settings = dataset_settings(name, args)
        old = stored.get(name, {})
        keep = old.get("runs", {}) if old.get("settings") == settings else {}
        X_tr, y_tr, X_te, y_te = load_split(name, settings)
        classes = sorted(np.unique(y_tr).tolist())
        results[name] = dict(
            settings=settings,
            data=dict(n_train=len(y_tr), n_test=len(y_te), n_features=X_tr.shape[1], classes=classes,
                      positive=settings["positive"], pos_train=float(np.mean(y_tr == settings["positive"])),
                      pos_test=float(np.mean(y_te == settings["positive"]))),
            command=results_command(),
            compile_seconds=dict(old.get("compile_seconds", {})) if keep else {},
            runs={},
        )
        print(f"{name}: {len(y_tr)} train / {len(y_te)} hold-out rows; {settings}", flush=True)
        for tempered in (False, True):
            tag = "T" if tempered else "F"
            compiled = False
            for length in sorted(args.lengths):
                for seed in args.seeds:
                    key = run_key(name, length, tempered, seed)
                    if key in keep and (name != "bcw" or key in stored_trees):
                        print(f"  {key}: reused from {out_json}", flush=True)
                        results[name]["runs"][key] = keep[key]
                        continue
                    if not compiled:
                        warm = fit(X_tr, y_tr, settings, tempered=tempered, length=settings["block_size"],
                                   seed=COMPILE_SEED)
                        results[name]["compile_seconds"][tag] = float(warm.info["seconds"])
                        print(f"  {name} tempering={tag}: compile run ({settings['block_size']} it.) "
                              f"{warm.info['seconds']:.1f}s", flush=True)
                        del warm
                        compiled = True
                    post = fit(X_tr, y_tr, settings, tempered=tempered, length=length, seed=seed)
                    rec, freqs = run_one(post, X_te, y_te, settings, length)
                    del post
                    rec.update(dataset=name, length=length, tempered=tempered, seed=seed)
                    results[name]["runs"][key] = rec
                    if name == "bcw":
                        trees[key] = freqs
                    swap = f", swaps {['%.2f' % v for v in rec['swap_adjacent']]}" if tempered else ""
                    print(f"  {key}: acc_max {100 * rec['acc_max']:.1f} acc_prob {100 * rec['acc_prob']:.1f} | "
                          f"{rec['s_per_1000']:.3f} s/1000 it | leaves {rec['mean_leaves']:.1f} | accept "
                          f"{rec['acceptance']:.3f}{swap} | total {time.perf_counter() - t_start:.0f}s", flush=True)
                    save()
        save()

    save()
    print()
    print(markdown(results, trees, args, out_md, make_plots(results, args, out_md)))
    print(f"total wall time {time.perf_counter() - t_start:.0f}s")


if __name__ == "__main__":
    main()
