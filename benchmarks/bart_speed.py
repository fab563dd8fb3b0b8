"""BART benchmark (issue #9): our ``bd.BARTRegressor`` / ``bd.BARTClassifier`` against bartz, run
in the same process on the same data and iteration counts, plus PG vs grow-prune mixing per second.

Sections (``--sections``, default all three):

1. **friedman** (Friedman #1): ``y = 10 sin(pi x1 x2) + 20 (x3 - 0.5)**2 + 10 x4 + 5 x5 +
   N(0, sigma**2)``, ``x ~ U[0, 1]**10`` (five inert features), ``n = 1000`` training rows,
   ``sigma = 1``, a separate test set of ``--n-test`` rows (another seed).  200 trees.  For each of
   our tree samplers (grow-prune, cgm, pg) and for bartz (``bartz.Bart``, continuous outcome, its
   defaults; and again with ``sigma_scale`` set to our sigma prior, Chipman et al.'s calibration):
   test RMSE of the posterior mean against the noise-free ``f`` and posterior mean of ``sigma``,
   both averaged over one fit per seed of ``--fit-seeds`` (a single chain's RMSE moves by ~5 %
   with the seed), effective sample size of ``sigma`` per second of the saved draws,
   iterations/s and compile time.
2. **bcw** (probit): ``bd.BARTClassifier`` vs ``bartz.Bart(outcome_type="binary")`` on the RJHMC
   paper's bcw split (``bd.datasets.load_split("bcw")``): test accuracy, test log loss, it/s.
   Skipped (and said so) if this checkout has no ``BARTClassifier``.
3. **hypercube** (Lakshminarayanan et al. 2015): ``bd.datasets.make_hypercube(D, num_per_vertex=10)`` (2**D
   clusters at the vertices of {-1, 1}^D, no y noise), ``num_trees = 1`` as in that paper, several
   chains from the stump: ArviZ's bulk ESS (over chains) of ``sigma`` and of the fit at a few
   training rows (one per chosen vertex), divided by the sampling seconds of the saved draws, for
   ``tree_sampler="pg"`` and ``"grow-prune"``, with pgbart's CLI prior of its hypercube examples
   (``beta = 0.5``, cuts uniform on each feature's range; ``--hypercube-beta``,
   ``--hypercube-split-prior``).  Grow-prune sweeps are far cheaper, so it runs
   ``--hypercube-iteration-factor`` times PG's iterations (so its ESS is not limited by a short run).

How things are timed (wall clock, ``time.perf_counter``; the machine is shared, so the 1-minute
load average is recorded next to every timing):

* **iterations/s** (one iteration = one backfitting sweep over all trees, then sigma or the probit
  latents) excludes compilation by timing two run lengths, as ``benchmarks/cgm_speed.py`` does: a
  fit of ``T`` iterations (``num_warmup=0``) is run once to compile, then timed warm (``t(T)``),
  then a fit of ``2T`` (``t(2T)``); ``rate = chains * T / (t(2T) - t(T))`` iterations/s in
  aggregate over the chains (chains of ours are spread over the JAX CPU devices; bartz picks its
  own with ``num_chain_devices="auto"``).  bartz compiles one program per run length, so its
  ``2T`` run is done once to compile and then timed warm.  Our estimators compile one block of
  ``min(100, iterations)`` sweeps whatever the run length, so ``T >= 100`` keeps one program.
* **compile** = first ``t(T)`` minus warm ``t(T)`` (bartz compiles again for every new run shape,
  including the final fit).
* **fit wall**: the reported fit (``--warmup`` + ``--samples``), ours warm (its block program was
  compiled by the timing runs), bartz including its compilation for that shape.
* **ESS/s**: ArviZ bulk ESS of the saved draws (chains x draws) divided by the saved draws' share
  of the warm fit wall time, ``wall * samples / (warmup + samples)``.

PG costs about 20x a grow-prune sweep, so it gets its own (smaller) iteration counts,
``--pg-warmup`` / ``--pg-samples``; the table shows the counts of every row.

Usage::

    python benchmarks/bart_speed.py --quick              # smoke run (~3 min; 50 trees, few iterations)
    python benchmarks/bart_speed.py                      # full run (13 min at load 3-4 on 2 cores; 25 min at load 5-6)
    python benchmarks/bart_speed.py --sections friedman --warmup 1000 --samples 1000 --chains 2

Writes ``benchmarks/results/bart_speed.{json,md}`` (``--out`` to change the stem) and prints the
markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

# Run from a checkout without installing: make the repository root importable.
_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import numpy as np  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SECTIONS = ("friedman", "bcw", "hypercube")
OUR_SAMPLERS = ("grow-prune", "cgm", "pg")
#: Friedman rows by default: the three samplers at the estimator's defaults, and grow-prune with
#: CGM98's rule availability and with one more level of depth (what the defaults cost).
FRIEDMAN_ROWS = ("grow-prune", "grow-prune:valid_cuts=data", "grow-prune:max_depth=6", "cgm", "pg")


def variant(name: str) -> tuple[str, dict]:
    """``"grow-prune:valid_cuts=data,max_depth=6"`` -> ``("grow-prune", {"valid_cuts": "data",
    "max_depth": 6})``: a sampler of ours with estimator keywords that differ from the defaults."""
    sampler, _, rest = name.partition(":")
    if sampler not in OUR_SAMPLERS:
        raise argparse.ArgumentTypeError(f"unknown sampler {sampler!r} (one of {OUR_SAMPLERS}, optionally "
                                         "followed by ':key=value,...')")
    extra = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        extra[key] = int(value) if value.lstrip("-").isdigit() else value
    return sampler, extra


def _row_name(name: str) -> str:
    variant(name)  # validates
    return name


# ----------------------------------------------------------------------------------------------
# helpers


def load1() -> float:
    try:
        return float(os.getloadavg()[0])
    except OSError:
        return float("nan")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _git_state() -> str:
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=_ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"git {head}" + (" + uncommitted changes" if dirty else "")


def make_friedman(n: int, n_features: int = 10, sigma: float = 1.0, seed: int = 0):
    """Friedman #1: ``X ~ U[0,1]^(n, F)``, returns ``(X, y, f)`` with ``y = f + N(0, sigma**2)``."""
    if n_features < 5:
        raise ValueError("the Friedman function needs at least 5 features")
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, n_features))
    f = (10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4])
    return X, f + sigma * rng.standard_normal(n), f


def two_lengths(run, T: int, *, compiles_per_length: bool, repeats: int = 1) -> dict:
    """``run(n)`` runs ``n`` iterations and blocks.  Returns first/warm timings, compile, load and
    ``delta = t(2T) - t(T)`` (minimum over ``repeats`` warm timings of each length)."""
    loads = [load1()]
    t = time.perf_counter()
    run(T)
    first = time.perf_counter() - t
    if compiles_per_length:
        run(2 * T)  # compile the 2T shape, untimed
    tT, t2T = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        run(T)
        tT.append(time.perf_counter() - t)
        t = time.perf_counter()
        run(2 * T)
        t2T.append(time.perf_counter() - t)
    loads.append(load1())
    tT, t2T = min(tT), min(t2T)
    return dict(T=T, first=first, tT=tT, t2T=t2T, delta=t2T - tT, compile=max(first - tT, 0.0),
                load=float(np.nanmean(loads)))


def ess(draws) -> float:
    """ArviZ bulk ESS of a (chains, draws) array."""
    import arviz as az

    a = np.asarray(draws, np.float64)
    if not np.all(np.isfinite(a)) or np.ptp(a) == 0:
        return float("nan")
    return float(np.asarray(az.ess(a)))


def rhat(draws) -> float:
    import arviz as az

    a = np.asarray(draws, np.float64)
    if a.shape[0] < 2 or not np.all(np.isfinite(a)) or np.ptp(a) == 0:
        return float("nan")
    return float(np.asarray(az.rhat(a)))


def log_loss(y: np.ndarray, p: np.ndarray) -> float:
    p = np.clip(np.asarray(p, np.float64), 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))


def fmt(x, spec=".3f", none="—") -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return none
    return format(x, spec)


def ratio(a, b) -> str:
    if a is None or b is None or not np.isfinite(a) or not np.isfinite(b) or b <= 0:
        return "—"
    r = a / b
    return f"{r:.2f}×" if r >= 0.1 else f"{r:.3f}×"


# ----------------------------------------------------------------------------------------------
# runners: ours


def _ours_estimator(cls, sampler, warmup, samples, chains, args, **extra):
    sampler, keywords = variant(sampler)
    kw = dict(num_trees=args.trees, tree_sampler=sampler, num_warmup=warmup, num_samples=samples,
              num_chains=chains, seed=args.seed, progress=False)
    kw.update(keywords)
    kw.update(extra)
    return cls(**kw)


def time_ours(cls, X, y, sampler, chains, T, args, **extra) -> dict:
    """Two-length rate of our estimator ``cls`` (fits with ``num_warmup=0``)."""

    def run(n):
        est = _ours_estimator(cls, sampler, 0, n, chains, args, **extra).fit(X, y)
        del est

    r = two_lengths(run, T, compiles_per_length=False, repeats=1 if variant(sampler)[0] == "pg" else args.repeats)
    r["rate"] = chains * T / r["delta"] if r["delta"] > 0 else float("nan")
    return r


def fit_ours(cls, X, y, sampler, warmup, samples, chains, args, **extra):
    load_before = load1()
    t = time.perf_counter()
    est = _ours_estimator(cls, sampler, warmup, samples, chains, args, **extra).fit(X, y)
    wall = time.perf_counter() - t
    return est, dict(wall=wall, load=0.5 * (load_before + load1()))


# ----------------------------------------------------------------------------------------------
# runners: bartz


def _bartz(X, y, n_burn, n_save, chains, seed, **kw):
    import jax

    import bartz

    b = bartz.Bart(np.ascontiguousarray(np.asarray(X, np.float32).T), np.asarray(y, np.float32),
                   num_trees=kw.pop("num_trees"), num_chains=chains, n_burn=n_burn, n_save=n_save,
                   printevery=None, seed=seed, **kw)
    jax.block_until_ready(b._mcmc_state)  # noqa: SLF001 - the run is asynchronous otherwise
    return b


def time_bartz(X, y, chains, T, args, **kw) -> dict:
    def run(n):
        _bartz(X, y, 0, n, chains, args.seed, num_trees=args.trees, **kw)

    r = two_lengths(run, T, compiles_per_length=True, repeats=args.repeats)
    r["rate"] = chains * T / r["delta"] if r["delta"] > 0 else float("nan")
    return r


def fit_bartz(X, y, warmup, samples, chains, args, **kw):
    load_before = load1()
    t = time.perf_counter()
    b = _bartz(X, y, warmup, samples, chains, args.seed, num_trees=args.trees, **kw)
    wall = time.perf_counter() - t
    return b, dict(wall=wall, load=0.5 * (load_before + load1()))


# ----------------------------------------------------------------------------------------------
# sections


def _iters(args, sampler):
    if not sampler.startswith("bartz") and variant(sampler)[0] == "pg":
        return args.pg_warmup, args.pg_samples, args.pg_rate_iterations
    return args.warmup, args.samples, args.rate_iterations


def _chipman_sigma_scale(X, y, trees: int) -> float:
    """Our sigma prior's harmonic-mean sd in y units (``sqrt(lam) * y_scale``): bartz's
    ``sigma_scale`` that gives it Chipman et al.'s calibration instead of its ``var(y)`` default."""
    os.environ.setdefault("BDTREE_CPU_DEVICES", str(min(os.cpu_count() or 1, 8)))  # chains over the cores
    from bdtree_jax.problem.bart import build_bart_problem

    problem = build_bart_problem(X, y, n_trees=trees)
    return float(np.sqrt(problem.lam) * problem.y_scale)


def section_friedman(args) -> dict:
    """Rates once per sampler; RMSE and sigma from one fit per seed of ``--fit-seeds`` (PG: the
    first seed only), averaged, because a single 1000-sweep chain's test RMSE moves by ~5 % with
    the seed (bartz's too)."""
    import bdtree_jax as bd

    X, y, _ = make_friedman(args.n_train, args.n_features, args.noise, seed=args.data_seed)
    X_test, _, f_test = make_friedman(args.n_test, args.n_features, args.noise, seed=args.data_seed + 1)
    sigma_scale = _chipman_sigma_scale(X, y, args.trees)
    rows = []
    C = args.chains
    for sampler in ["bartz", "bartz-chipman-sigma"] + list(args.samplers):
        W, S, T = _iters(args, sampler)
        seeds = list(args.fit_seeds[:1] if not sampler.startswith("bartz") and variant(sampler)[0] == "pg"
                     else args.fit_seeds)
        log(f"[friedman] {sampler}: rate T={T}, fit {W}+{S} x seeds {seeds}, {C} chain(s); load {load1():.2f}")
        per_seed = []
        try:
            if sampler == "bartz":
                timing = time_bartz(X, y, C, T, args)
            elif sampler == "bartz-chipman-sigma":
                timing = dict(rate=float("nan"), compile=float("nan"), load=load1())
            else:
                timing = time_ours(bd.BARTRegressor, X, y, sampler, C, T, args)
            for seed in seeds:
                run_args = argparse.Namespace(**{**vars(args), "seed": seed})
                if sampler.startswith("bartz"):
                    extra = dict(sigma_scale=sigma_scale) if sampler == "bartz-chipman-sigma" else {}
                    b, fit = fit_bartz(X, y, W, S, C, run_args, **extra)
                    pred = np.asarray(b.predict(np.ascontiguousarray(X_test.T.astype(np.float32))), np.float64)
                    sig = np.asarray(b.get_error_sdev(), np.float64).reshape(C, S)
                    del b
                else:
                    est, fit = fit_ours(bd.BARTRegressor, X, y, sampler, W, S, C, run_args)
                    pred = est.predict(X_test)
                    sig = np.asarray(est.posterior_.sigma, np.float64)
                    del est
                e = ess(sig)
                if sampler.startswith("bartz"):  # its fit wall includes compiling this run shape: warm rate
                    saved_s = C * S / timing["rate"] if np.isfinite(timing["rate"]) else None
                else:
                    saved_s = fit["wall"] * S / (W + S)
                per_seed.append(dict(seed=seed, rmse=float(np.sqrt(np.mean((pred - f_test) ** 2))),
                                     sigma_mean=float(sig.mean()), sigma_ess=e, sigma_rhat=rhat(sig),
                                     sigma_ess_per_s=(e / saved_s) if saved_s else float("nan"),
                                     fit_wall=fit["wall"], fit_load=fit["load"]))
                log(f"  seed {seed}: rmse {per_seed[-1]['rmse']:.3f}  sigma {per_seed[-1]['sigma_mean']:.3f}  "
                    f"fit {fit['wall']:.1f} s")
        except Exception as exc:  # noqa: BLE001 - report and go on
            log(f"  FAILED: {exc!r}")
            rows.append(dict(sampler=sampler, error=repr(exc)))
            continue
        mean = lambda k: float(np.mean([r[k] for r in per_seed]))  # noqa: E731
        rmses = [r["rmse"] for r in per_seed]
        row = dict(sampler=sampler, chains=C, warmup=W, samples=S, seeds=seeds, per_seed=per_seed,
                   rmse=mean("rmse"), rmse_sd=float(np.std(rmses, ddof=1)) if len(rmses) > 1 else float("nan"),
                   sigma_mean=mean("sigma_mean"), sigma_ess=mean("sigma_ess"), sigma_rhat=mean("sigma_rhat"),
                   sigma_ess_per_s=mean("sigma_ess_per_s"), rate=timing["rate"], compile=timing["compile"],
                   timing=timing, fit_wall=mean("fit_wall"), fit_load=mean("fit_load"), load=timing["load"])
        rows.append(row)
        log(f"  mean rmse {row['rmse']:.3f}  sigma {row['sigma_mean']:.3f}  {row['rate']:.1f} it/s  "
            f"compile {row['compile']:.1f} s  load {row['load']:.2f}")
    var_f = float(np.var(f_test))
    return dict(rows=rows, n_train=args.n_train, n_test=args.n_test, n_features=args.n_features, noise=args.noise,
                var_f_test=var_f, sigma_scale=sigma_scale)


def section_bcw(args) -> dict:
    import bdtree_jax as bd

    X, y, X_test, y_test = bd.datasets.load_split("bcw")
    X, X_test = X.to_numpy(float), X_test.to_numpy(float)
    y, y_test = y.to_numpy().astype(int), y_test.to_numpy().astype(int)
    has_ours = hasattr(bd, "BARTClassifier")
    samplers = ["bartz"] + (list(args.bcw_samplers) if has_ours else [])
    if not has_ours:
        log("[bcw] bd.BARTClassifier does not exist in this checkout: bartz only")
    rows = []
    C = args.chains
    for sampler in samplers:
        W, S, T = _iters(args, sampler)
        log(f"[bcw] {sampler}: rate T={T}, fit {W}+{S}, {C} chain(s); load {load1():.2f}")
        try:
            if sampler == "bartz":
                timing = time_bartz(X, y, C, T, args, outcome_type="binary")
                b, fit = fit_bartz(X, y, W, S, C, args, outcome_type="binary")
                p = np.asarray(b.predict(np.ascontiguousarray(X_test.T.astype(np.float32))), np.float64)
                del b
            else:
                timing = time_ours(bd.BARTClassifier, X, y, sampler, C, T, args)
                est, fit = fit_ours(bd.BARTClassifier, X, y, sampler, W, S, C, args)
                proba = np.asarray(est.predict_proba(X_test), np.float64)
                classes = list(getattr(est, "classes_", [0, 1]))
                p = proba[:, classes.index(1)]
                del est
        except Exception as exc:  # noqa: BLE001
            log(f"  FAILED: {exc!r}")
            rows.append(dict(sampler=sampler, error=repr(exc)))
            continue
        row = dict(sampler=sampler, chains=C, warmup=W, samples=S, accuracy=float(np.mean((p > 0.5) == y_test)),
                   log_loss=log_loss(y_test, p), rate=timing["rate"], compile=timing["compile"], timing=timing,
                   fit_wall=fit["wall"], fit_load=fit["load"], load=timing["load"])
        rows.append(row)
        log(f"  accuracy {row['accuracy']:.3f}  log loss {row['log_loss']:.3f}  {row['rate']:.1f} it/s  "
            f"compile {row['compile']:.1f} s  load {row['load']:.2f}")
    return dict(rows=rows, has_classifier=has_ours, n_train=len(y), n_test=len(y_test))


def section_hypercube(args) -> dict:
    import bdtree_jax as bd

    rows = []
    C = args.hypercube_chains
    for D in args.dims:
        X, y, vertex = bd.datasets.make_hypercube(D, num_per_vertex=10, seed=args.data_seed)
        X, y, vertex = X.to_numpy(), y.to_numpy(), vertex.to_numpy()
        picks = np.unique(np.linspace(0, 2**D - 1, args.fit_points).round().astype(int))
        rows_idx = np.array([np.flatnonzero(vertex == v)[0] for v in picks])
        for sampler in args.hypercube_samplers:
            m = 1 if variant(sampler)[0] == "pg" else args.hypercube_iteration_factor
            W, S = m * args.hypercube_warmup, m * args.hypercube_samples
            log(f"[hypercube D={D}] {sampler}: {C} chains x ({W} + {S}); load {load1():.2f}")
            kw = dict(num_trees=args.hypercube_trees, tree_sampler=sampler, num_chains=C, seed=args.seed,
                      beta=args.hypercube_beta, split_prior=args.hypercube_split_prior, progress=False)
            try:
                bd.BARTRegressor(num_warmup=0, num_samples=min(100, W + S), **kw).fit(X, y)  # compile, untimed
                load_before = load1()
                t = time.perf_counter()
                est = bd.BARTRegressor(num_warmup=W, num_samples=S, **kw).fit(X, y)
                wall = time.perf_counter() - t
                load = 0.5 * (load_before + load1())
            except Exception as exc:  # noqa: BLE001
                log(f"  FAILED: {exc!r}")
                rows.append(dict(D=D, sampler=sampler, error=repr(exc)))
                continue
            post = est.posterior_
            saved_s = wall * S / (W + S)
            sig = np.asarray(post.sigma, np.float64)
            fits = post.predict_draws(X[rows_idx]).reshape(C, S, len(rows_idx))
            fit_ess = [ess(fits[:, :, j]) for j in range(len(rows_idx))]
            train_rmse = np.asarray(post.stats["train_rmse"], np.float64)
            row = dict(D=D, sampler=sampler, chains=C, warmup=W, samples=S, n=len(y), wall=wall, saved_seconds=saved_s,
                       load=load, sigma_ess=ess(sig), sigma_rhat=rhat(sig), fit_rows=rows_idx.tolist(),
                       fit_ess=fit_ess, fit_rhat=[rhat(fits[:, :, j]) for j in range(len(rows_idx))],
                       train_rmse_mean=float(train_rmse.mean()),
                       chains_fitting=int(np.sum(train_rmse[:, -1] < 0.1 * np.std(y))),
                       sd_y=float(np.std(y)))
            row["sigma_ess_per_s"] = row["sigma_ess"] / saved_s
            row["fit_ess_median"] = float(np.nanmedian(fit_ess)) if np.any(np.isfinite(fit_ess)) else float("nan")
            row["fit_ess_min"] = float(np.nanmin(fit_ess)) if np.any(np.isfinite(fit_ess)) else float("nan")
            row["fit_ess_median_per_s"] = row["fit_ess_median"] / saved_s
            row["fit_ess_min_per_s"] = row["fit_ess_min"] / saved_s
            rows.append(row)
            log(f"  ESS sigma {row['sigma_ess']:.0f} ({row['sigma_ess_per_s']:.1f}/s), fit median "
                f"{row['fit_ess_median']:.0f} ({row['fit_ess_median_per_s']:.1f}/s); wall {wall:.1f} s; "
                f"train RMSE {row['train_rmse_mean']:.3f}; load {load:.2f}")
            del est, post
    return dict(rows=rows, trees=args.hypercube_trees, beta=args.hypercube_beta,
                split_prior=args.hypercube_split_prior)


# ----------------------------------------------------------------------------------------------
# report


def report(results: dict, args, argv) -> str:
    import jax

    try:
        import bartz

        bartz_version = bartz.__version__
    except Exception:  # noqa: BLE001
        bartz_version = "not installed"
    lines = []
    p = lines.append
    p("# BART benchmark: ours vs bartz, and PG vs grow-prune mixing")
    p("")
    p(f"- command: `{' '.join(shlex.quote(a) for a in ['python', 'benchmarks/bart_speed.py'] + list(argv))}`")
    p(f"- python {platform.python_version()}, jax {jax.__version__}, bartz {bartz_version}, numpy {np.__version__}; "
      f"os.cpu_count()={os.cpu_count()}, jax devices: {len(jax.devices())} × {jax.devices()[0].platform}")
    p(f"- checkout: {_git_state()}")
    p(f"- started {results['started']} UTC; load average (1 min) at start / end: {results['load_start']:.2f} / "
      f"{results['load_end']:.2f}; total wall {results['total_s']:.0f} s.  The machine is shared (2 cores): "
      "rates move 10–30 % with the load, so compare rows of one run.")
    p("- it/s = chains·T / (t(2T) − t(T)), warm (compilation excluded), aggregate over chains; one iteration = "
      "one sweep over all trees + sigma (or the probit latents).  `load` = 1-min load average during the timing.")
    p("")

    if "friedman" in results:
        fr = results["friedman"]
        rows = fr["rows"]
        bz = next((r for r in rows if r["sampler"] == "bartz" and "error" not in r), None)
        p(f"## 1. Friedman #1: D = {fr['n_features']}, n = {fr['n_train']} train / "
          f"{fr['n_test']} test, sigma = {fr['noise']}, {args.trees} trees")
        p("")
        p(f"Test RMSE of the posterior mean against the noise-free f (var f on the test set = "
          f"{fr['var_f_test']:.1f}), and posterior mean σ, each the mean over the fit seeds (± sd of the RMSE "
          f"over seeds).  bartz: `bartz.Bart(X.T, y, num_trees={args.trees}, n_burn, n_save, seed)` with its "
          "defaults (255 quantile cuts per feature, a node's cuts from its ancestors' rules, trees of depth "
          "≤ 5, nodes of < 10 rows not split, σ prior with harmonic mean var(y)); `bartz-chipman-sigma` is bartz "
          f"with `sigma_scale` set to our prior's harmonic-mean sd ({fr['sigma_scale']:.3f}), i.e. Chipman et "
          "al.'s σ calibration from a linear fit.  Ours: `bd.BARTRegressor` defaults (255 quantile cuts, "
          "`max_cuts=255`; `valid_cuts='ancestors'`, a node's cuts from its ancestors' rules, no empty leaf; depth "
          "≤ 5; Chipman et al.'s σ prior); a row `sampler:key=value` changes one estimator parameter "
          "(`valid_cuts=data`: CGM98's cuts that split the node's rows; `max_depth=6`: one more level).")
        p("")
        p("| sampler | chains | warm-up + saved | seeds | test RMSE vs f | RMSE / bartz | mean σ | ESS(σ) | ESS(σ)/s | "
          "it/s | it/s / bartz | compile | fit wall | load |")
        p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if "error" in r:
                p(f"| {r['sampler']} | | | | failed: {r['error'][:80]} | | | | | | | | | |")
                continue
            name = r["sampler"] if r["sampler"].startswith("bartz") else f"ours {r['sampler']}"
            sd = f" ± {r['rmse_sd']:.3f}" if np.isfinite(r.get("rmse_sd", float("nan"))) else ""
            p(f"| {name} | {r['chains']} | {r['warmup']} + {r['samples']} | {len(r['seeds'])} | {r['rmse']:.3f}{sd} | "
              f"{ratio(r['rmse'], bz['rmse'] if bz else None)} | {r['sigma_mean']:.3f} | {fmt(r['sigma_ess'], '.0f')} | "
              f"{fmt(r['sigma_ess_per_s'], '.1f')} | {fmt(r['rate'], '.1f')} | "
              f"{ratio(r['rate'], bz['rate'] if bz else None)} | {fmt(r['compile'], '.1f')} s | {r['fit_wall']:.1f} s | "
              f"{r['load']:.1f} |")
        p("")
        p("Per seed (test RMSE / mean σ): " + "; ".join(
            f"{r['sampler']}: " + ", ".join(f"{q['rmse']:.3f}/{q['sigma_mean']:.3f}" for q in r["per_seed"])
            for r in rows if "error" not in r))
        p("")
        if bz is not None:
            p("Goals (issue #9), on the means over seeds:")
            for r in rows:
                if r["sampler"].startswith("bartz") or "error" in r:
                    continue
                ok = r["rmse"] <= 1.05 * bz["rmse"]
                p(f"- RMSE of ours {r['sampler']} within 5 % of bartz's or better: **{'met' if ok else 'NOT met'}** "
                  f"({r['rmse']:.3f} vs {bz['rmse']:.3f}, ratio {r['rmse'] / bz['rmse']:.3f}; "
                  f"{len(r['seeds'])} vs {len(bz['seeds'])} seeds)")
            gp = next((r for r in rows if r["sampler"] == "grow-prune" and "error" not in r), None)
            if gp is not None:
                ok = gp["rate"] >= bz["rate"]
                p(f"- grow-prune it/s ≥ bartz's: **{'met' if ok else 'NOT met'}** ({gp['rate']:.1f} vs "
                  f"{bz['rate']:.1f} it/s, ratio {gp['rate'] / bz['rate']:.3f})")
            p("- bartz's ESS(σ)/s uses its warm rate for the saved draws' seconds (its fit wall includes compiling).")
        p("")

    if "bcw" in results:
        bc = results["bcw"]
        rows = bc["rows"]
        bz = next((r for r in rows if r["sampler"] == "bartz" and "error" not in r), None)
        p(f"## 2. Probit BART on bcw (RJHMC split: {bc['n_train']} train / {bc['n_test']} test), {args.trees} trees")
        p("")
        if not bc["has_classifier"]:
            p("**`bd.BARTClassifier` does not exist in this checkout: only bartz was run.**  The section runs "
              "ours (`BARTClassifier(num_trees, tree_sampler, num_warmup, num_samples, num_chains, seed, progress)`, "
              "`predict_proba`) as soon as it exists.")
            p("")
        p("| sampler | chains | warm-up + saved | test accuracy | test log loss | it/s | it/s / bartz | compile | fit wall | load |")
        p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if "error" in r:
                p(f"| {r['sampler']} | | | failed: {r['error'][:80]} | | | | | | |")
                continue
            name = "bartz (binary)" if r["sampler"] == "bartz" else f"ours {r['sampler']}"
            p(f"| {name} | {r['chains']} | {r['warmup']} + {r['samples']} | {r['accuracy']:.4f} | {r['log_loss']:.4f} | "
              f"{fmt(r['rate'], '.1f')} | {ratio(r['rate'], bz['rate'] if bz else None)} | {r['compile']:.1f} s | "
              f"{r['fit_wall']:.1f} s | {r['load']:.1f} |")
        p("")

    if "hypercube" in results:
        hc = results["hypercube"]
        rows = hc["rows"]
        p(f"## 3. Hypercube mixing: BART with {hc['trees']} tree(s), PG vs grow-prune")
        p("")
        p(f"`make_hypercube(D, num_per_vertex=10)` (no y noise), `BARTRegressor(num_trees={hc['trees']}, "
          f"beta={hc['beta']}, split_prior={hc['split_prior']!r})` (pgbart's CLI prior of the hypercube examples: "
          "alpha 0.95, beta 0.5, cuts uniform on the range), other BART defaults, chains from the stump; "
          "grow-prune runs more iterations than PG (it is much cheaper per sweep), so "
          "its ESS is not limited by a short run.  ESS = ArviZ bulk ESS over "
          "chains of the saved draws; per second of the saved draws' share of the warm fit wall time.  Fit ESS: "
          "median (min) over one training row at each of the chosen vertices.  `chains fitting`: chains whose last "
          "draw has train RMSE < 0.1 sd(y).")
        p("")
        p("| D | sampler | chains | warm-up + saved | s (saved) | ESS(σ) | ESS(σ)/s | R̂(σ) | ESS(fit) median (min) | "
          "ESS(fit)/s median (min) | mean train RMSE | chains fitting | load |")
        p("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if "error" in r:
                p(f"| {r['D']} | {r['sampler']} | failed: {r['error'][:80]} | | | | | | | | | | |")
                continue
            p(f"| {r['D']} | {r['sampler']} | {r['chains']} | {r['warmup']} + {r['samples']} | {r['saved_seconds']:.2f} | "
              f"{fmt(r['sigma_ess'], '.0f')} | {fmt(r['sigma_ess_per_s'], '.1f')} | {fmt(r['sigma_rhat'], '.2f')} | "
              f"{fmt(r['fit_ess_median'], '.0f')} ({fmt(r['fit_ess_min'], '.0f')}) | "
              f"{fmt(r['fit_ess_median_per_s'], '.1f')} ({fmt(r['fit_ess_min_per_s'], '.1f')}) | "
              f"{r['train_rmse_mean']:.3f} (sd y {r['sd_y']:.2f}) | {r['chains_fitting']}/{r['chains']} | {r['load']:.1f} |")
        p("")
        p("ESS below ~100 with R̂ > 1.1 means the chains have not mixed between modes: per-second rates "
          "are then only indicative.")
        p("")
        for D in sorted({r["D"] for r in rows}):
            got = {r["sampler"]: r for r in rows if r["D"] == D and "error" not in r}
            if "pg" in got and "grow-prune" in got:
                for key, what in (("sigma_ess_per_s", "ESS(σ)/s"), ("fit_ess_median_per_s", "median ESS(fit)/s")):
                    a, b = got["pg"][key], got["grow-prune"][key]
                    if np.isfinite(a) and np.isfinite(b):
                        best = "PG" if a > b else "grow-prune"
                        p(f"- D = {D}, {what}: **{best}** mixes better per second (PG {a:.1f} vs grow-prune {b:.1f}, "
                          f"PG / grow-prune = {a / b:.3g}).")
                    else:
                        p(f"- D = {D}, {what}: not comparable (PG {a}, grow-prune {b}).")
        p("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description="BART benchmark: ours vs bartz (Friedman, bcw probit) and PG vs "
                                     "grow-prune mixing on the hypercube.")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--quick", action="store_true", help="smoke run: 50 trees, few iterations (~3 min)")
    parser.add_argument("--trees", type=int, default=None, help="trees for friedman and bcw (default 200; quick 50)")
    parser.add_argument("--chains", type=int, default=1, help="chains for friedman and bcw, ours and bartz")
    parser.add_argument("--samplers", nargs="+", type=_row_name, default=list(FRIEDMAN_ROWS),
                        help="our tree samplers in the friedman section")
    parser.add_argument("--bcw-samplers", nargs="+", type=_row_name, default=["grow-prune", "pg"])
    parser.add_argument("--warmup", type=int, default=None, help="warm-up sweeps (grow-prune, cgm, bartz; default 1000)")
    parser.add_argument("--samples", type=int, default=None, help="saved sweeps (grow-prune, cgm, bartz; default 1000)")
    parser.add_argument("--pg-warmup", type=int, default=None, help="PG warm-up sweeps (default 250)")
    parser.add_argument("--pg-samples", type=int, default=None, help="PG saved sweeps (default 500)")
    parser.add_argument("--rate-iterations", type=int, default=None,
                        help="T of the two-length rate (runs of T and 2T; default 400, >= 100)")
    parser.add_argument("--pg-rate-iterations", type=int, default=100, help="T for PG (>= 100)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="warm timings per length, the minimum is used (PG: 1); one timing per length has "
                             "given rates 5x off (a t(T) inflated by first-touch memory of the trace arrays)")
    parser.add_argument("--n-train", type=int, default=1000)
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--n-features", type=int, default=10)
    parser.add_argument("--noise", type=float, default=1.0, help="Friedman noise sd")
    parser.add_argument("--dims", type=int, nargs="+", default=None, help="hypercube D values (default 3 4)")
    parser.add_argument("--hypercube-trees", type=int, default=1)
    parser.add_argument("--hypercube-chains", type=int, default=4)
    parser.add_argument("--hypercube-warmup", type=int, default=None, help="default 1000 (quick 200)")
    parser.add_argument("--hypercube-samples", type=int, default=None, help="default 2000 (quick 300)")
    parser.add_argument("--hypercube-iteration-factor", type=int, default=None,
                        help="grow-prune (and cgm) run this many times PG's iterations (default 10; quick 5)")
    parser.add_argument("--hypercube-beta", type=float, default=0.5,
                        help="depth penalty of the hypercube runs (pgbart CLI default 0.5; BART's is 2)")
    parser.add_argument("--hypercube-split-prior", choices=("uniform", "range"), default="range")
    parser.add_argument("--hypercube-samplers", nargs="+", type=_row_name, default=["pg", "grow-prune"])
    parser.add_argument("--fit-points", type=int, default=4, help="training rows (vertices) whose fit ESS is taken")
    parser.add_argument("--seed", type=int, default=0, help="MCMC seed (ours and bartz)")
    parser.add_argument("--fit-seeds", type=int, nargs="+", default=None,
                        help="friedman: MCMC seeds of the fits whose RMSE and sigma are averaged (default 0 1 2 3; "
                             "quick 0); PG uses the first")
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "bart_speed"), help="output stem (.json and .md)")
    args = parser.parse_args(argv)

    q = args.quick
    defaults = dict(trees=(50, 200), warmup=(100, 1000), samples=(100, 1000), pg_warmup=(50, 250),
                    pg_samples=(50, 500), rate_iterations=(100, 400), dims=([3], [3, 4]),
                    hypercube_warmup=(200, 1000), hypercube_samples=(300, 2000),
                    hypercube_iteration_factor=(5, 10), fit_seeds=([0], [0, 1, 2, 3]))
    for k, (quick, full) in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, quick if q else full)
    if min(args.rate_iterations, args.pg_rate_iterations) < 100:
        parser.error("--rate-iterations and --pg-rate-iterations must be >= 100 (one compiled block of 100)")

    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    load_start = load1()
    t0 = time.perf_counter()
    log(f"bart_speed: sections {args.sections}; load {load_start:.2f}")
    results = {}
    runners = dict(friedman=section_friedman, bcw=section_bcw, hypercube=section_hypercube)
    for name in args.sections:
        results[name] = runners[name](args)
    results.update(started=started, load_start=load_start, load_end=load1(), total_s=time.perf_counter() - t0)
    text = report(results, args, argv)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(text + "\n")
    out.with_suffix(".json").write_text(json.dumps(dict(args=vars(args), argv=argv, **results), indent=1, default=float))


if __name__ == "__main__":
    main()
