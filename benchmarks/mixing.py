"""Mixing of every sampler on the RJHMC paper's splits (issue #40, "Measure first").

For each method x dataset x seed, one fit with the library's defaults (what ``bd.sample(X, y,
method=...)`` and the estimators do with no options; ``--chains``, ``--warmup`` and ``--samples``
override them), and for its draws:

* **R-hat** (rank-normalised split R-hat, ``az.rhat(method="rank")``), **bulk and tail ESS**
  (``az.ess``) and **ESS per second** of (a) the log-likelihood ``stats["log_lik"]``, (b) the
  number of leaves ``stats["n_leaves"]`` and (c) the posterior mean of the response at 20 fixed
  test rows (per draw, the leaf posterior mean given the draw's tree: ``predict_draws``; for
  classification every class probability, only the second class with two classes); (c) reports
  the worst row: the largest R-hat and the smallest ESS over rows (and classes).  (a) and (b)
  are also checked against :func:`bdtree_jax.diagnostics.convergence_diagnostics` (the library's
  own R-hat and bulk ESS).  ESS per second divides by the fit's wall time (``bd.sample`` /
  ``fit``, building the problem included) with and without the time JAX spent compiling during
  the fit (trace + lowering + XLA compile events of ``jax.monitoring``, overlapping spans counted
  once): the first seed of a (method, dataset) compiles, later seeds reuse the programs.
* **split-inclusion frequencies per chain**: for every split (feature, threshold) and every
  feature, the fraction of each chain's draws whose tree uses it, with its Monte Carlo standard
  error (``az.mcse`` of the 0/1 indicator within the chain), and the splits the chains disagree
  on most: ``z = sd over chains of the frequencies / sqrt(mean over chains of MCSE^2)``, each
  chain's MCSE at least that of independent draws, ``sqrt(p(1-p)/S)`` with ``p`` the pooled
  frequency (so a split that one chain always uses and another never gets a large ``z``, not an
  infinite one).  Chains that sample the same distribution give ``z`` about 1.  Soft trees
  (hmc-df) have continuous thresholds: per feature only; hmc-dfi's oblique rules use every
  feature: none.

Methods: ``cgm`` (``bd.CGM()``), ``cgm+regrow`` (``bd.CGM(proposal="cgm+regrow")``),
``tempered`` (``bd.CGM()`` with ``bd.Tempering(num_temperatures=4)``: the default ladder
``delta_t`` 0.2; ``Tempering()``'s own default is one rung, i.e. off), ``wu``, ``pg``, ``smc``
(each chain an independent SMC run; the library has no SMC-initialised MCMC), ``pcfg`` (exact
independent draws: the control, where the grammar fits), ``hmc-df``, ``hmc-dfi`` (RJHMC-Tree,
soft trees with their own prior) and ``estimator`` (``BayesianTreeClassifier().fit`` or
``BayesianTreeRegressor().fit``).  Datasets: the paper splits ``bcw``, ``cgm`` (regression),
``iris``, ``raisin``, ``wine`` (``bd.datasets.load_split``; the 20 rows are the first 20 test
rows) and the tables with categorical columns and missing values ``penguins`` and
``airquality`` (regression; ``bd.datasets.load``: 20 % held out, ``train_test_split(...,
random_state=0)``, the first 20 held-out rows).  A method that refuses a dataset (a
``ValueError``: categorical data for RJHMC, a grammar too large for PCFG ...) is listed with its
message.

Usage::

    python benchmarks/mixing.py --quick                      # ~2 min smoke run
    python benchmarks/mixing.py --datasets bcw wine --seeds 0 1 2
    python benchmarks/mixing.py --methods cgm pg --datasets iris --chains 8 --samples 2000 --resume

Writes ``--out`` (default ``benchmarks/results/mixing``; ``mixing_quick`` with ``--quick``) with
the suffixes ``.json`` (everything), ``.csv`` (one row per fit), ``_splits.csv`` (the inclusion
table of every fit: splits used by at least 1 % of some chain's draws) and ``.md`` (tables).  The
JSON is rewritten after every fit; ``--resume`` keeps the fits in it whose settings match.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
for _p in (str(_ROOT), str(_HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from pcfg_speed import _COMPILE_EVENTS, _Intervals  # noqa: E402  (compile spans from jax.monitoring)

METHODS = ("cgm", "cgm+regrow", "tempered", "wu", "pg", "smc", "pcfg", "hmc-df", "hmc-dfi", "estimator")
PAPER = ("bcw", "cgm", "iris", "raisin", "wine")
MIXED = ("penguins", "airquality")
N_ROWS = 20  # fixed test rows for (c)
MIN_SHOWN = 0.01  # splits kept in the inclusion tables: used by >= 1 % of some chain's draws
#: --quick: one small dataset, short chains, one method of each posterior kind (hard trees by MCMC,
#: tempered MCMC, SMC, exact PCFG draws, soft trees) and the estimator; ~2 min at load ~10 on 2 cores.
QUICK = dict(datasets=["iris"], methods=["cgm", "tempered", "smc", "pcfg", "hmc-df", "estimator"], warmup=100,
             samples=100, chains=2)


# ----------------------------------------------------------------------------------------------
# data and methods


def load_data(bd, name: str) -> dict:
    """``X``, ``y`` (training rows), ``rows`` (the 20 fixed test rows) and ``task``."""
    if name in PAPER:
        X, y, X_test, _ = bd.datasets.load_split(name)
        task = "regression" if name == "cgm" else "classification"
        return dict(X=X, y=y, rows=X_test.iloc[:N_ROWS], task=task)
    if name in MIXED:
        from sklearn.model_selection import train_test_split

        X, y = bd.datasets.load(name)
        X, y = X.reset_index(drop=True), y.reset_index(drop=True)
        task = "regression" if name in bd.datasets.REGRESSION else "classification"
        Xtr, Xte, ytr, _ = train_test_split(X, y, test_size=0.2, random_state=0,
                                            stratify=y if task == "classification" else None)
        return dict(X=Xtr, y=ytr, rows=Xte.iloc[:N_ROWS], task=task)
    raise ValueError(f"unknown dataset {name!r}; valid: {PAPER + MIXED}")


def fit(bd, method: str, data: dict, run: dict):
    """The posterior of one fit: ``bd.sample`` with the method's default object, or an estimator."""
    if method == "estimator":
        cls = bd.BayesianTreeRegressor if data["task"] == "regression" else bd.BayesianTreeClassifier
        return cls(**run).fit(data["X"], data["y"]).posterior_
    obj, tempering = {
        "cgm": (bd.CGM(), None),
        "cgm+regrow": (bd.CGM(proposal="cgm+regrow"), None),
        "tempered": (bd.CGM(), bd.Tempering(num_temperatures=4)),
        "wu": (bd.WU(), None),
        "pg": (bd.PG(), None),
        "smc": (bd.SMC(), None),
        "pcfg": (bd.PCFG(num_buckets=10), None),
        "hmc-df": (bd.RJHMC(kind="df"), None),
        "hmc-dfi": (bd.RJHMC(kind="dfi"), None),
    }[method]
    return bd.sample(data["X"], data["y"], method=obj, task=data["task"], tempering=tempering, progress=False, **run)


# ----------------------------------------------------------------------------------------------
# diagnostics


def _quiet():
    """A context in which ArviZ's and numpy's warnings on degenerate draws are silenced."""
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("ignore")
    err = np.errstate(all="ignore")
    err.__enter__()
    return ctx, err


def chain_diagnostics(az, draws) -> dict:
    """Rank R-hat, bulk and tail ESS of (C, S) draws; NaN for a quantity that never changes or
    is not finite (as :func:`~bdtree_jax.diagnostics.convergence_diagnostics`), R-hat NaN with one chain."""
    draws = np.asarray(draws, np.float64)
    out = dict(rhat=float("nan"), ess_bulk=float("nan"), ess_tail=float("nan"))
    if draws.shape[1] < 4 or not np.all(np.isfinite(draws)) or np.ptp(draws) == 0:
        return out
    ctx, err = _quiet()
    try:
        out["ess_bulk"] = float(np.asarray(az.ess(draws, method="bulk")))
        out["ess_tail"] = float(np.asarray(az.ess(draws, method="tail")))
        if draws.shape[0] >= 2:
            out["rhat"] = float(np.asarray(az.rhat(draws, method="rank")))
    finally:
        err.__exit__(None, None, None)
        ctx.__exit__(None, None, None)
    return out


def prediction_quantities(post, rows) -> tuple[np.ndarray, list[str]]:
    """(C, S, Q) per-draw posterior means at the fixed rows and their Q labels (``row`` for
    regression, ``row:class``: every class, only the second with two classes)."""
    draws = np.asarray(post.predict_draws(rows), np.float64)  # (C*S, n, P), chains concatenated
    C, S = post.num_chains, post.num_draws
    n, P = draws.shape[1], draws.shape[2]
    if post.task == "regression":
        keep, labels = [0], [str(i) for i in range(n)]
    else:
        keep = [1] if P == 2 else list(range(P))
        labels = [f"{i}:{post.classes[k]}" for i in range(n) for k in keep]
    return draws[:, :, keep].reshape(C, S, n * len(keep)), labels


def worst_prediction(az, q: np.ndarray, labels: list[str]) -> dict:
    """The worst of the Q quantities (C, S, Q): largest R-hat, smallest bulk and tail ESS, and
    the rows (``row:class``) where they occur."""
    per = [chain_diagnostics(az, q[:, :, j]) for j in range(q.shape[2])]
    out = {}
    for key, pick in (("rhat", np.nanargmax), ("ess_bulk", np.nanargmin), ("ess_tail", np.nanargmin)):
        vals = np.array([p[key] for p in per])
        if np.all(np.isnan(vals)):
            out[key], out[f"{key}_at"] = float("nan"), None
        else:
            j = int(pick(vals))
            out[key], out[f"{key}_at"] = float(vals[j]), labels[j]
    out["n_constant"] = int(sum(np.isnan(p["ess_bulk"]) for p in per))
    return out


def split_indicators(post) -> dict:
    """Per-draw 0/1 use of every split and every feature: ``{"feature": (names, (C, S, K)),
    "split": (names, (C, S, K))}`` (hard trees: (feature, threshold), a categorical feature's
    rules counted per feature; soft hmc-df trees: per feature only; hmc-dfi: none)."""
    names = list(post.feature_names) or [f"x{f}" for f in range(10**4)]
    if hasattr(post, "trees"):
        is_split, feature = np.asarray(post.trees.is_split), np.asarray(post.trees.feature)
        cut = np.asarray(post.trees.cut)
        categorical = np.asarray(post.grid.level_count if post.grid.level_count is not None else
                                 np.zeros(post.grid.thresholds.shape[0]), int) > 0
    elif getattr(post, "config", None) is not None and post.config.kind == "df":
        is_split, feature = np.asarray(post.draws["is_split"]), np.asarray(post.draws["feature"], np.int64)
        is_split = is_split[..., : feature.shape[-1]]  # the internal slots
        cut, categorical = None, None
    else:
        return {}
    C, S = is_split.shape[:2]
    draw, node = np.nonzero(is_split.reshape(C * S, -1))
    f = feature.reshape(C * S, -1)[draw, node].astype(np.int64)
    out = {"feature": _indicator(draw, f, [names[k] for k in range(int(f.max(initial=0)) + 1)], C, S)}
    if cut is not None:
        c = np.where(categorical[f], -1, cut.reshape(C * S, -1)[draw, node])
        keys, inverse = np.unique(np.stack([f, c], 1), axis=0, return_inverse=True)
        labels = [f"{names[a]} (levels)" if b < 0 else f"{names[a]}<={post.grid.thresholds[a, b]:.6g}" for a, b in keys]
        out["split"] = _indicator(draw, inverse.ravel(), labels, C, S)
    return out


def _indicator(draw, column, labels, C, S):
    ind = np.zeros((C * S, len(labels)), bool)
    ind[draw, column] = True
    used = ind.any(0)
    return [lab for lab, u in zip(labels, used) if u], ind[:, used].reshape(C, S, -1)


def inclusion_table(az, names: list, ind: np.ndarray) -> list[dict]:
    """Per split, the per-chain frequencies and MCSEs and the disagreement ``z`` (module doc),
    for the splits some chain uses in >= 1 % of its draws, largest ``z`` first."""
    C, S, K = ind.shape
    freq = ind.mean(1)  # (C, K)
    keep = np.nonzero(freq.max(0) >= MIN_SHOWN)[0]
    mcse = np.zeros((C, len(keep)))
    ctx, err = _quiet()
    try:
        for c in range(C):
            for j, k in enumerate(keep):
                x = ind[c, :, k].astype(np.float64)
                if np.ptp(x) > 0 and S >= 4:
                    mcse[c, j] = float(np.asarray(az.mcse(x[None, :], method="mean")))
    finally:
        err.__exit__(None, None, None)
        ctx.__exit__(None, None, None)
    rows = []
    for j, k in enumerate(keep):
        p = freq[:, k]
        pooled = float(p.mean())
        floor = np.sqrt(pooled * (1 - pooled) / S)
        m = np.maximum(np.nan_to_num(mcse[:, j], nan=0.0), floor)
        z = float(np.std(p, ddof=1) / np.sqrt(np.mean(m**2))) if C >= 2 and np.any(m > 0) else float("nan")
        rows.append(dict(split=names[k], pooled=round(pooled, 5), freq=[round(float(v), 5) for v in p],
                         mcse=[round(float(v), 5) for v in mcse[:, j]], z=round(z, 4)))
    return sorted(rows, key=lambda r: -np.nan_to_num(r["z"], nan=-1.0))


# ----------------------------------------------------------------------------------------------
# one fit


def measure(bd, az, spans, method: str, name: str, data: dict, seed: int, run: dict) -> dict:
    """Fit once and measure everything (module doc); a refused fit gives ``status="refused"``."""
    row = dict(dataset=name, method=method, seed=seed, task=data["task"], n_train=len(data["X"]),
               **{k: run.get(k) for k in ("num_chains", "num_warmup", "num_samples")}, load_before=os.getloadavg()[0])
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            post = fit(bd, method, data, dict(run, seed=seed))
        except Exception as e:  # noqa: BLE001  (a refusal is a ValueError; anything else is reported too)
            row.update(status="refused" if isinstance(e, ValueError) else "error", message=f"{type(e).__name__}: {e}"[:400],
                       wall_s=time.perf_counter() - t0)
            return row
    wall = time.perf_counter() - t0
    compile_s = spans.total(t0)
    row.update(status="ok", wall_s=wall, compile_s=compile_s, sample_s=max(wall - compile_s, 1e-9),
               chains=post.num_chains, draws=post.num_draws, posterior=type(post).__name__,
               convergence_warning=any(w.category is bd.ConvergenceWarning for w in caught),
               other_warnings=sorted({f"{w.category.__name__}: {str(w.message)[:120]}" for w in caught
                                      if w.category is not bd.ConvergenceWarning}),
               acceptance=float(np.mean(post.stats["accepted"])) if "accepted" in post.stats else None,
               log_lik_sha1=hashlib.sha1(np.ascontiguousarray(post.stats["log_lik"]).tobytes()).hexdigest()[:12],
               mean_log_lik=float(np.mean(post.stats["log_lik"])), mean_leaves=float(np.mean(post.stats["n_leaves"])))
    library = bd.diagnostics.convergence_diagnostics(post)
    for key, short in (("log_lik", "ll"), ("n_leaves", "leaves")):
        d = chain_diagnostics(az, post.stats[key])
        row.update({f"{short}_{k}": v for k, v in d.items()})
        if key in library:  # the library's R-hat and bulk ESS are the same ArviZ calls
            row[f"{short}_matches_library"] = bool(np.allclose([library[key]["rhat"], library[key]["ess_bulk"]],
                                                               [d["rhat"], d["ess_bulk"]], equal_nan=True))
    q, labels = prediction_quantities(post, data["rows"])
    row.update({f"pred_{k}": v for k, v in worst_prediction(az, q, labels).items()})
    for short in ("ll", "leaves", "pred"):
        row[f"{short}_ess_per_s"] = row[f"{short}_ess_bulk"] / wall
        row[f"{short}_ess_per_s_excl_compile"] = row[f"{short}_ess_bulk"] / row["sample_s"]
    row["inclusion"] = {kind: inclusion_table(az, names, ind) for kind, (names, ind) in split_indicators(post).items()}
    for kind, table in row["inclusion"].items():
        row[f"{kind}_z_max"] = table[0]["z"] if table else float("nan")
    row["load_after"] = os.getloadavg()[0]
    return row


# ----------------------------------------------------------------------------------------------
# output

_CSV_SKIP = ("inclusion", "other_warnings")


def _fmt(v, digits=3):
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "–"
    if isinstance(v, float):
        if v != 0 and abs(v) < 10 ** -digits:
            return f"{v:.1g}"
        return f"{v:.{digits}f}" if abs(v) < 10 else f"{v:.0f}"
    return str(v)


def _split_text(r: dict, k: int = 2) -> str:
    """The ``k`` splits with the largest ``z`` of a fit: ``label: f1/f2/.. (z)``."""
    table = r.get("inclusion", {}).get("split") or r.get("inclusion", {}).get("feature") or []
    parts = []
    for s in table[:k]:
        parts.append(f"{s['split']}: " + "/".join(f"{p:.2f}" for p in s["freq"]) + f" (z {_fmt(s['z'], 1)})")
    return "; ".join(parts) or "–"


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# Mixing of the samplers (git {meta['git']}, {meta['cpus']} CPUs, load {meta['load_start']:.1f} "
             f"-> {meta['load_end']:.1f}; ESS/s under load)", "",
             *[f"- earlier command (rows kept by `--resume`): `{c}`" for c in meta.get("earlier_commands", [])],
             f"- command: `{meta['command']}`; total {meta['wall_s']:.0f} s",
             f"- run options: {meta['run_options'] or 'the library defaults (4 chains x (1000 + 1000))'}; "
             f"seeds {sorted({r['seed'] for r in rows})}", "- R-hat: max over seeds; ESS and ESS/s: median over seeds; "
             "pred = the worst of the 20 test rows (max R-hat, min ESS); ESS/s = bulk ESS / wall s of the fit "
             "(incl. compile: the 1st seed, which compiles; excl.: median over seeds); z_max: the largest between-chain disagreement of a split's inclusion "
             "frequency (~1 when chains agree); top splits: per-chain frequencies of the seed with the largest z", ""]
    lines += ["| data | method | seeds | chains x draws | wall s (1st seed) | compile s | R-hat ll | R-hat leaves | R-hat pred | "
              "bulk ESS ll | tail ESS ll | bulk ESS leaves | bulk ESS pred | tail ESS pred | ESS/s ll: 1st seed incl. compile / excl. | "
              "ESS/s pred excl | z_max | top disagreeing splits |",
              "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["method"]), []).append(r)
    for (name, method), rs in groups.items():
        ok = [r for r in rs if r["status"] == "ok"]
        if not ok:
            lines.append(f"| {name} | {method} | {len(rs)} | refused: {rs[0]['message'][:150].replace('|', '/')} |" + " |" * 14)
            continue

        def med(k):
            return float(np.nanmedian([r[k] for r in ok])) if any(not np.isnan(r[k]) for r in ok) else float("nan")

        def mx(k):
            return float(np.nanmax([r[k] for r in ok])) if any(not np.isnan(r[k]) for r in ok) else float("nan")

        first = min(ok, key=lambda r: r["seed"])
        worst = max(ok, key=lambda r: np.nan_to_num(r.get("split_z_max", r.get("feature_z_max", np.nan)), nan=-1))
        zkey = "split_z_max" if "split_z_max" in worst else "feature_z_max"
        lines.append(
            f"| {name} | {method} | {len(ok)} | {first['chains']} x {first['draws']} | {first['wall_s']:.1f} | "
            f"{first['compile_s']:.1f} | {_fmt(mx('ll_rhat'))} | {_fmt(mx('leaves_rhat'))} | {_fmt(mx('pred_rhat'))} | "
            f"{_fmt(med('ll_ess_bulk'), 0)} | {_fmt(med('ll_ess_tail'), 0)} | {_fmt(med('leaves_ess_bulk'), 0)} | "
            f"{_fmt(med('pred_ess_bulk'), 0)} | {_fmt(med('pred_ess_tail'), 0)} | "
            f"{_fmt(first['ll_ess_per_s'], 1)} / {_fmt(med('ll_ess_per_s_excl_compile'), 1)} | "
            f"{_fmt(med('pred_ess_per_s_excl_compile'), 1)} | {_fmt(worst.get(zkey), 1)} | {_split_text(worst)} |")
    same: dict = {}
    for r in rows:
        if r["status"] == "ok":
            same.setdefault((r["dataset"], r["seed"], r["log_lik_sha1"]), []).append(r["method"])
    fits: dict = {}
    for (d, s, _), m in same.items():
        if len(m) > 1:
            fits.setdefault(" = ".join(m), []).append(f"{d} seed {s}")
    lines += [""] + [f"- identical log-likelihood traces (SHA-1): {m} on {', '.join(f)}" for m, f in fits.items()]
    return "\n".join(lines) + "\n"


def _order(r: dict) -> tuple:
    names = PAPER + MIXED
    return (names.index(r["dataset"]) if r["dataset"] in names else len(names),
            METHODS.index(r["method"]) if r["method"] in METHODS else len(METHODS), r["seed"])


def write(out: Path, rows: list[dict], meta: dict) -> None:
    rows = sorted(rows, key=_order)
    out.parent.mkdir(parents=True, exist_ok=True)
    # one fit per line (the inclusion tables make the file large with more indentation)
    body = ",\n".join(json.dumps(r, default=str, separators=(",", ":")) for r in rows)
    out.with_suffix(".json").write_text(f'{{"meta": {json.dumps(meta, default=str)},\n"rows": [\n{body}]}}\n')
    keys = list(dict.fromkeys(k for r in rows for k in r if k not in _CSV_SKIP))
    with open(out.with_suffix(".csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, keys)
        w.writeheader()
        w.writerows([{k: r.get(k) for k in keys} for r in rows])
    with open(out.parent / f"{out.name}_splits.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["dataset", "method", "seed", "kind", "split", "pooled", "z", "freq_per_chain", "mcse_per_chain"])
        for r in rows:
            for kind, table in r.get("inclusion", {}).items():
                for s in table:
                    w.writerow([r["dataset"], r["method"], r["seed"], kind, s["split"], f"{s['pooled']:.4f}",
                                f"{s['z']:.3f}", ";".join(f"{p:.4f}" for p in s["freq"]),
                                ";".join(f"{m:.4f}" for m in s["mcse"])])
    out.with_suffix(".md").write_text(markdown(rows, meta))


# ----------------------------------------------------------------------------------------------


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", nargs="+", choices=METHODS, default=None, help="default: all")
    p.add_argument("--datasets", nargs="+", choices=PAPER + MIXED, default=None, help="default: all")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--chains", type=int, default=None, help="num_chains (default: the library's)")
    p.add_argument("--warmup", type=int, default=None, help="num_warmup (default: the library's)")
    p.add_argument("--samples", type=int, default=None, help="num_samples (default: the library's)")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke run (~2 min): {QUICK}, each unless given")
    p.add_argument("--resume", action="store_true", help="keep the fits of --out's JSON with the same run options; "
                   "run only the missing (dataset, method, seed)")
    p.add_argument("--out", default=None, help="output stem (default benchmarks/results/mixing[_quick])")
    args = p.parse_args(argv)
    if args.quick:
        for k, v in QUICK.items():
            if getattr(args, k) is None:
                setattr(args, k, v)
    methods, datasets = args.methods or list(METHODS), args.datasets or list(PAPER + MIXED)
    run = {k: v for k, v in (("num_chains", args.chains), ("num_warmup", args.warmup),
                             ("num_samples", args.samples)) if v is not None}
    out = Path(args.out or _HERE / "results" / ("mixing_quick" if args.quick else "mixing"))

    os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
    import jax

    import bdtree_jax as bd
    from bdtree_jax._arviz import _import_arviz

    az = _import_arviz()
    spans = _Intervals()
    jax.monitoring.register_event_duration_secs_listener(spans.listener)
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=_ROOT, capture_output=True, text=True).stdout.strip()
    meta = dict(command="python benchmarks/mixing.py " + shlex.join(sys.argv[1:] if argv is None else argv), git=git,
                cpus=os.cpu_count(), devices=len(jax.devices()), machine=platform.platform(), jax=jax.__version__,
                arviz=az.__version__, run_options=run, seeds=args.seeds, load_start=os.getloadavg()[0],
                compile_events=list(_COMPILE_EVENTS))
    old = []
    if args.resume and out.with_suffix(".json").exists():
        saved = json.loads(out.with_suffix(".json").read_text())
        old = [r for r in saved["rows"] if all(r.get(k) == run.get(k) for k in ("num_chains", "num_warmup", "num_samples"))]
        meta["earlier_commands"] = saved["meta"].get("earlier_commands", []) + [saved["meta"]["command"]]
    settings = ("dataset", "method", "seed", "num_chains", "num_warmup", "num_samples")
    done = {tuple(r.get(k) for k in settings): r for r in old}

    def kept(new):  # the resumed fits not run again (yet), after the new ones
        seen = {tuple(r.get(k) for k in settings) for r in new}
        return new + [r for k, r in done.items() if k not in seen]

    t_start, rows = time.perf_counter(), []
    for name in datasets:
        data = load_data(bd, name)
        for method in methods:
            for seed in args.seeds:
                key = (name, method, seed, *(run.get(k) for k in settings[3:]))
                if key in done:
                    rows.append(done[key])
                    continue
                refused = [r for r in rows if (r["dataset"], r["method"], r["status"]) == (name, method, "refused")]
                if refused:  # a refusal checks the data and options, not the seed: not run again
                    row = dict(refused[0], seed=seed, wall_s=0.0, message=f"(as seed {refused[0]['seed']}) "
                               + refused[0]["message"].removeprefix(f"(as seed {refused[0]['seed']}) "))
                else:
                    row = measure(bd, az, spans, method, name, data, seed, run)
                rows.append(row)
                brief = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()
                         if k in ("dataset", "method", "seed", "status", "wall_s", "compile_s", "ll_rhat",
                                  "ll_ess_bulk", "leaves_rhat", "pred_rhat", "pred_ess_bulk", "split_z_max", "message")}
                print(json.dumps(brief), flush=True)
                meta.update(load_end=os.getloadavg()[0], wall_s=time.perf_counter() - t_start)
                write(out, kept(rows), meta)
    meta.update(load_end=os.getloadavg()[0], wall_s=time.perf_counter() - t_start)
    write(out, kept(rows), meta)
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
