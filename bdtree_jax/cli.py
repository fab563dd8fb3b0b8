"""Command line: ``bdtree run CONFIG`` runs a YAML config, a file or a bundled config by name
(``bdtree run quickstart``; ``bdtree configs`` lists the bundled ones).

A config is a YAML mapping (unknown keys are an error)::

    name: iris_cgm            # run name (default: the file's stem)
    dataset: iris             # bdtree_jax.datasets name; with split: paper, a paper split
    split: paper              # "paper" (load_split), "none" (train = test = all rows), or a
                              # test fraction such as 0.3 (stratified for classification, seeded)
    task: classification      # optional; inferred from the dataset
    method: cgm               # cgm, hmc-df, hmc-dfi, pcfg, smc, pg or wu
    max_depth: 6              # prior: max_depth, alpha, beta, min_leaf_size, split_prior
    alpha: 0.95               #        (uniform | range), valid_cuts, structure (cgm | pinball),
    beta: 1.0                 #        pinball_rate, pinball_balance, pinball_max_leaves;
                              # leaves: concentration (classification), nu, lam, a, mu_bar;
                              # the method's options: the fields of bdtree_jax.methods.CGM,
                              # RJHMC, PCFG, SMC, PG, WU (proposal, move_probs, num_particles,
                              # h_init, log_phi, n_local ...); tempering: n_temperatures, delta_t
    num_warmup: 4500          # sampler: num_warmup, num_samples, num_chains, seed, block_size,
                              # thin (keep every thin-th draw after warm-up), data_shards
                              # (split the rows over that many devices; bdtree_jax.RunOptions)
    num_samples: 500
    num_chains: 10
    seed: 0
    categorical_features: from_dtype  # optional: which columns are categorical (from_dtype,
                              # null, or a list of column names or indices); missing: mia
                              # (route missing cells; the default) or error
                              # (docs/categorical-missing.md; method cgm only, for now)
    output: runs/iris_cgm     # folder for metrics.json, posterior.nc, posterior.pkl, plots and
                              # checkpoint.pkl (written as the run goes; rerunning an interrupted
                              # config resumes from it and gives the identical chains)

The method's options may also be nested under ``method`` and the tempering options under
``tempering`` (both spellings are accepted; a key may not be given in both)::

    method: {name: pg, num_particles: 10, proposal: prior}
    tempering: {n_temperatures: 4, delta_t: 0.2}

Writes ``metrics.json`` (test accuracy or MSE and leaves: mean and sd over chains, each chain's
kept draws averaged into one prediction; the pooled posterior's score; and ``*_per_draw_*``, every
draw's own prediction scored and averaged, the RJHMC paper's metric; for ``pcfg`` also the exact
posterior predictive's and the MAP tree's scores, boxes and log evidence), the ArviZ file
``posterior.nc``, the pickled :class:`~bdtree_jax.posterior.Posterior`, ``trace.png`` (log
likelihood and leaves) and ``map_tree.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from .api import LEAF_OPTIONS, PRIOR_OPTIONS, sample, split_flat, tree_prior
from .methods import METHODS
from .methods.flat import TEMPERING_OPTIONS, method_options

__all__ = ["main", "load_config", "run_config", "bundled_configs", "find_config"]

#: The keys of a method's options (top level, or nested under ``method:``).
_METHOD_KEYS = set(method_options())
_MODEL_KEYS = set(PRIOR_OPTIONS) | set(LEAF_OPTIONS) | _METHOD_KEYS | set(TEMPERING_OPTIONS)
_SAMPLER_KEYS = {"num_warmup", "num_samples", "num_chains", "seed", "block_size", "thin", "data_shards"}
#: How the table's columns are read (docs/categorical-missing.md).
_DATA_KEYS = {"categorical_features", "missing"}
_RUN_KEYS = {"name", "dataset", "split", "task", "method", "output", "tempering"}
ALLOWED_KEYS = _MODEL_KEYS | _SAMPLER_KEYS | _DATA_KEYS | _RUN_KEYS
_REGRESSION_DATASETS = {"cgm", "airquality", "diamonds"}


def bundled_configs() -> dict:
    """``{name: file}`` of the configs shipped in ``bdtree_jax/configs`` (``bdtree run NAME``)."""
    from importlib.resources import files

    folder = files("bdtree_jax") / "configs"
    return {f.name[: -len(".yaml")]: f for f in sorted(folder.iterdir(), key=lambda f: f.name)
            if f.name.endswith(".yaml")}


def find_config(config):
    """The file of ``config``: an existing YAML file, else a bundled config's name (with or
    without ``.yaml``); raises ``ValueError`` listing the bundled names."""
    if os.path.isfile(config):
        return Path(config)
    bundled = bundled_configs()
    name = str(config).removesuffix(".yaml")
    if name in bundled:
        return bundled[name]
    raise ValueError(f"{config!r} is neither a YAML file nor a bundled config; bundled configs: {sorted(bundled)}.")


def load_config(config) -> dict:
    """Read and validate a YAML run config (a file or a bundled config's name); raises
    ``ValueError`` naming bad keys or values."""
    import yaml

    source = find_config(config)
    path = str(source)
    config = yaml.safe_load(source.read_text()) or {}
    if not isinstance(config, dict):
        raise ValueError(f"{path}: a config must be a YAML mapping of keys to values.")
    unknown = sorted(set(config) - ALLOWED_KEYS)
    if unknown:
        raise ValueError(f"{path}: unknown config keys {unknown}; allowed keys: {sorted(ALLOWED_KEYS)}.")
    if "dataset" not in config:
        raise ValueError(f"{path}: the config needs a 'dataset' key.")
    config.setdefault("name", source.name.removesuffix(".yaml"))
    config.setdefault("method", "cgm")
    config.setdefault("split", "paper")
    config.setdefault("output", os.path.join("runs", config["name"]))
    _flat_options(config, where=f"{path}: ")
    return config


def _method_name(config: dict) -> str:
    method = config["method"]
    return method.get("name") if isinstance(method, dict) else method


def _flat_options(config: dict, *, where: str) -> dict:
    """The config's model and sampler options as flat keywords (the nested ``method:`` and
    ``tempering:`` mappings spread out), checked."""
    flat = {k: config[k] for k in (_MODEL_KEYS | _SAMPLER_KEYS | _DATA_KEYS) if k in config}
    for section, allowed in (("method", _METHOD_KEYS | {"name"}), ("tempering", set(TEMPERING_OPTIONS))):
        nested = config.get(section, {})
        if not isinstance(nested, dict):
            if section == "method":
                continue
            raise ValueError(f"{where}tempering must be a mapping with keys {sorted(set(TEMPERING_OPTIONS))}; got {nested!r}.")
        unknown = sorted(set(nested) - allowed)
        if unknown:
            raise ValueError(f"{where}unknown {section} keys {unknown}; allowed: {sorted(allowed)}.")
        twice = sorted(set(nested) & set(flat))
        if twice:
            raise ValueError(f"{where}{twice} given both at the top level and under {section}:; give each once.")
        flat.update({k: v for k, v in nested.items() if k != "name"})
    if _method_name(config) not in METHODS:
        raise ValueError(f"{where}unknown method {_method_name(config)!r}; available: {METHODS}.")
    return flat


def _load_data(config):
    from . import datasets

    name, split = config["dataset"], config["split"]
    task = config.get("task") or ("regression" if name in _REGRESSION_DATASETS else "classification")
    if split == "paper":
        X_train, y_train, X_test, y_test = datasets.load_split(name)
    else:
        if name == "cgm":
            X, y = datasets.make_cgm(800, seed=int(config.get("seed", 0)))
        else:
            X, y = datasets.load(name)
        if split == "none":
            X_train, y_train, X_test, y_test = X, y, X, y
        else:
            from sklearn.model_selection import train_test_split

            frac = float(split)
            if not 0 < frac < 1:
                raise ValueError(f"split must be 'paper', 'none' or a test fraction in (0, 1); got {split!r}.")
            X_train, X_test, y_train, y_test = train_test_split(
                X, y, test_size=frac, random_state=int(config.get("seed", 0)),
                stratify=y if task == "classification" else None,
            )
    return task, X_train, y_train, X_test, y_test


def _sample_arguments(method: str, flat: dict, *, where: str) -> dict:
    """:func:`~bdtree_jax.sample`'s ``method``, ``tempering``, ``prior``, ``likelihood`` and run
    options from a config's flat options.  Flat keys are one of the YAML's two spellings, so no
    ``DeprecationWarning`` here."""
    method, tempering, prior_options, likelihood, rest, _moved = split_flat(method, flat, where=where)
    prior = tree_prior(prior_options, where) if prior_options else None
    return dict(method=method, tempering=tempering, prior=prior, likelihood=likelihood or None, **rest)


def run_config(config: dict, *, progress: bool | None = None) -> dict:
    """Run one config; returns the metrics dict (also written to ``output/metrics.json``)."""
    task, X_train, y_train, X_test, y_test = _load_data(config)
    kwargs = _flat_options(config, where="")
    for key in ("move_probs", "warmup_move_probs"):
        if key in kwargs:
            kwargs[key] = tuple(kwargs[key])
    if kwargs.get("initial_tree") == "cart":
        from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

        cart = DecisionTreeClassifier if task == "classification" else DecisionTreeRegressor
        kwargs["initial_tree"] = cart(
            max_depth=kwargs.get("max_depth", 6), min_samples_leaf=kwargs.get("min_leaf_size", 1), random_state=0,
        ).fit(X_train, y_train)
    out = Path(config["output"])
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # written after every block_size iterations; rerunning the same config resumes from it
    post = sample(X_train, y_train, task=task, progress=progress, checkpoint=str(out / "checkpoint.pkl"),
                  **_sample_arguments(_method_name(config), kwargs, where=f"{config['name']}: "))
    seconds = time.perf_counter() - t0
    draws = post.predict_draws(X_test)  # (chains*draws, n, P)
    C, S = post.num_chains, post.num_draws
    per_chain = draws.reshape(C, S, *draws.shape[1:]).mean(1)
    y_true = np.asarray(y_test)
    metrics = dict(
        name=config["name"], dataset=config["dataset"], method=_method_name(config), task=task,
        n_train=int(len(y_train)), n_test=int(len(y_test)), num_chains=C, num_draws_per_chain=S,
        seconds=seconds, config={k: v for k, v in config.items()},
    )
    leaves = post.stats["n_leaves"].mean(1)
    metrics["leaves_mean"], metrics["leaves_sd"] = float(leaves.mean()), float(leaves.std(ddof=1) if C > 1 else 0.0)
    if task == "classification":
        preds = post.classes[np.argmax(per_chain, axis=-1)]
        acc = (preds == y_true[None, :]).mean(1)
        pooled = (post.classes[np.argmax(draws.mean(0), axis=-1)] == y_true).mean()
        # the RJHMC paper's metric: accuracy of every draw's own prediction, averaged over a chain
        per_draw = (post.classes[np.argmax(draws, axis=-1)] == y_true[None, :]).mean(1).reshape(C, S).mean(1)
        metrics.update(test_accuracy_mean=float(acc.mean()), test_accuracy_sd=float(acc.std(ddof=1) if C > 1 else 0.0),
                       test_accuracy_pooled=float(pooled), test_accuracy_per_chain=acc.tolist(),
                       test_accuracy_per_draw_mean=float(per_draw.mean()),
                       test_accuracy_per_draw_sd=float(per_draw.std(ddof=1) if C > 1 else 0.0))
    else:
        mse = ((per_chain[..., 0] - y_true[None, :]) ** 2).mean(1)
        pooled = ((draws.mean(0)[:, 0] - y_true) ** 2).mean()
        per_draw = ((draws[..., 0] - y_true[None, :]) ** 2).mean(1).reshape(C, S).mean(1)
        metrics.update(test_mse_mean=float(mse.mean()), test_mse_sd=float(mse.std(ddof=1) if C > 1 else 0.0),
                       test_mse_pooled=float(pooled), test_mse_per_chain=mse.tolist(),
                       test_mse_per_draw_mean=float(per_draw.mean()),
                       test_mse_per_draw_sd=float(per_draw.std(ddof=1) if C > 1 else 0.0))
    if post.method == "pcfg":  # exact answers over all trees, next to the draws' estimates
        exact_pred = post.predictive(X_test)
        best = post.sample_paths(X_test, best=True)[0]
        metrics.update(n_boxes=post.grammar.n_boxes, log_evidence=post.log_evidence,
                       map_tree_nodes=int(2 * post.map_tree().is_split.sum() + 1))
        if task == "classification":
            metrics["test_accuracy_exact_predictive"] = float((post.classes[exact_pred.argmax(1)] == y_true).mean())
            metrics["test_accuracy_map_tree"] = float((post.classes[best.argmax(1)] == y_true).mean())
        else:
            metrics["test_mse_exact_predictive"] = float(((exact_pred[:, 0] - y_true) ** 2).mean())
            metrics["test_mse_map_tree"] = float(((best[:, 0] - y_true) ** 2).mean())
    metrics["acceptance_rate"] = post.acceptance_rate()
    # the RJHMC paper counts accepted iterations over the whole chain, warm-up included
    metrics["acceptance_rate_all_iterations"] = float(
        np.concatenate([post.warmup_stats["accepted"], post.stats["accepted"]], axis=1).mean()
    )
    metrics["map_tree"] = post.tree_text()
    metrics["most_visited_tree"], metrics["most_visited_frequency"] = post.most_visited_tree()

    with open(out / "metrics.json", "w") as fh:
        json.dump(metrics, fh, indent=2, default=str)
    post.save(out / "posterior.pkl")
    idata = post.to_arviz(pointwise=task == "classification" or len(y_train) * C * S < 5e7)
    idata.to_netcdf(str(out / "posterior.nc"))
    _plots(post, out)
    return metrics


def _plots(post, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
    for c in range(post.num_chains):
        axes[0].plot(post.stats["log_lik"][c], lw=0.6)
        axes[1].plot(post.stats["n_leaves"][c], lw=0.6)
    axes[0].set_ylabel("log likelihood")
    axes[1].set_ylabel("leaves")
    axes[1].set_xlabel("draw (after warm-up)")
    fig.tight_layout()
    fig.savefig(out / "trace.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(10, 6))
    post.plot_tree(ax=ax)
    ax.set_title("MAP tree")
    fig.tight_layout()
    fig.savefig(out / "map_tree.png", dpi=110)
    plt.close(fig)


def _override(config: dict, item: str) -> None:
    """Apply ``--set KEY=VALUE`` (a YAML value); a key given under ``method:`` or ``tempering:``
    is replaced there."""
    import yaml

    k, sep, v = item.partition("=")
    if not sep or k not in ALLOWED_KEYS:
        raise ValueError(f"--set {item!r}: expected KEY=VALUE with KEY one of {sorted(ALLOWED_KEYS)}.")
    nested = [config[s] for s in ("method", "tempering") if isinstance(config.get(s), dict) and k in config[s]]
    (nested[0] if nested and k not in ("method", "tempering") else config)[k] = yaml.safe_load(v)


def _list_configs(names) -> int:
    """``bdtree configs``: the bundled configs' names, datasets and methods; ``bdtree configs
    NAME``: that config's YAML text (to copy and edit)."""
    import yaml

    bundled = bundled_configs()
    for name in names:
        print(find_config(name).read_text(), end="")
    if not names:
        for name, source in bundled.items():
            config = yaml.safe_load(source.read_text())
            method = config.get("method", "cgm")
            method = method.get("name") if isinstance(method, dict) else method
            print(f"{name:22s} dataset={config['dataset']:7s} method={method}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bdtree", description="Bayesian decision trees in JAX.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="run YAML configs (see bdtree_jax.cli)",
        epilog=f"bundled configs: {', '.join(bundled_configs())}",
    )
    run.add_argument("configs", nargs="+", metavar="CONFIG",
                     help="a YAML file or the name of a bundled config (`bdtree configs` lists them)")
    run.add_argument("--output", help="override the config's output folder (single config only)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key (YAML value), e.g. --set num_chains=2")
    run.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)
    show = sub.add_parser("configs", help="list the bundled configs, or print one (bdtree configs quickstart)")
    show.add_argument("names", nargs="*", metavar="NAME", help="bundled configs to print")
    args = parser.parse_args(argv)
    if args.command == "configs":
        try:
            return _list_configs(args.names)
        except ValueError as err:
            print(f"bdtree: error: {err}", file=sys.stderr)
            return 2

    for path in args.configs:
        try:
            config = load_config(path)
            for item in args.set:
                _override(config, item)
            if args.output:
                config["output"] = args.output
            metrics = run_config(config, progress=args.progress)
        except ValueError as err:
            print(f"bdtree: error: {err}", file=sys.stderr)
            return 2
        score = {k: v for k, v in metrics.items() if k.startswith("test_") and not k.endswith("per_chain")}
        print(json.dumps(dict(name=metrics["name"], leaves_mean=metrics["leaves_mean"], seconds=round(metrics["seconds"], 1), **score)))
        print(f"wrote {config['output']}/: metrics.json posterior.nc posterior.pkl trace.png map_tree.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
