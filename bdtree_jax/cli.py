"""Command line: ``bdtree run CONFIG`` runs a YAML config, a file or a bundled config by name
(``bdtree run quickstart``; ``bdtree configs`` lists the bundled ones, ``bdtree configs NAME``
prints one).  ``bdtree config-keys`` (and ``bdtree run --help``) lists every key with its default
and one line of help.  ``--set KEY=VALUE`` overrides a key (a YAML value) before the config is
checked, so it can also repair an invalid value.

A config is a YAML mapping (an unknown key is an error naming the closest known one)::

    name: iris_cgm            # run name (default: the file's stem)
    dataset: iris             # bdtree_jax.datasets name; with split: paper, a paper split
    split: paper              # "paper" (load_split), "none" (train = test = all rows), or a
                              # test fraction such as 0.3 (stratified for classification, seeded)
    task: classification      # optional; inferred from the dataset
    # or your own table in place of dataset: (split then defaults to 0.3):
    # data: my.csv            # a CSV file (or .parquet, with pyarrow installed)
    # target: label           # the column to predict
    # features: [a, b, c]     # optional: the feature columns (default: every other column)
    method: cgm               # cgm, hmc-df, hmc-dfi, pcfg, smc, pg or wu
    max_depth: 6              # prior: max_depth, alpha, beta, min_leaf_size, split_prior
    alpha: 0.95               #        (uniform | range), valid_cuts, structure (cgm | pinball),
    beta: 1.0                 #        pinball_rate, pinball_balance, pinball_max_leaves;
                              # leaves: concentration (classification), nu, lam, a, mu_bar;
                              # the method's options: the fields of bdtree_jax.methods.CGM,
                              # RJHMC, PCFG, SMC, PG, WU (proposal, move_probs, num_particles,
                              # h_init, log_phi, num_local_steps ...); tempering:
                              # num_temperatures, delta_t
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
    output: runs/iris_cgm     # folder for metrics.json, posterior.nc, posterior.npz, plots and
                              # checkpoint.npz (written as the run goes)

Resuming: a rerun of an interrupted config resumes from ``checkpoint.npz`` and gives the identical
chains; it says so on stderr (``bdtree: resuming from checkpoint runs/iris_cgm/checkpoint.npz at
iteration 2000 of 5000 (10 chains); --fresh starts over``) and ``metrics.json`` records it as
``resumed_from`` (its ``seconds`` then count only the rest of the run).  A checkpoint of another
run (other options, data or seed) is started over and overwritten, also said on stderr.
``--fresh`` deletes the checkpoint and starts over.  Ctrl-C prints ``bdtree: interrupted; rerun the
same command to resume from ...`` when there is a checkpoint to resume from (written by this run,
or the one it resumed from), else that the run was interrupted before its first checkpoint and a
rerun starts over.  ``bd.load`` reads every file the run writes (``docs/files.md``).

Errors in the config, a key, a value or a file exit with code 2 and one line on stderr
(``bdtree: error: ...``, with a "did you mean" for a misspelt key, dataset or method); a
traceback means a bug.

The method's options may also be nested under ``method`` and the tempering options under
``tempering`` (both spellings are accepted; a key may not be given in both)::

    method: {name: pg, num_particles: 10, proposal: prior}
    tempering: {num_temperatures: 4, delta_t: 0.2}

The earlier names of the counts (``n_local``, ``n_islands``, ``n_buckets``, ``n_temperatures``)
are still read, each with a deprecation warning on stderr naming its new key.

Writes ``metrics.json`` (test accuracy or MSE and leaves: mean and sd over chains, each chain's
kept draws averaged into one prediction; the pooled posterior's score; and ``*_per_draw_*``, every
draw's own prediction scored and averaged, the RJHMC paper's metric; for ``pcfg`` also the exact
posterior predictive's and the MAP tree's scores, boxes and log evidence; ``convergence``: R-hat
and ESS of every quantity the convergence check reads and whether it ``warned``, which it does on
stderr as one line, ``bdtree: warning: ...``, naming ``--set`` options to try), the ArviZ file
``posterior.nc``, the saved :class:`~bdtree_jax.posterior.Posterior`, ``trace.png`` (log
likelihood and leaves), ``map_tree.png`` and ``top_trees.png`` (single hard trees: the most
visited trees with Monte Carlo intervals).
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import json
import logging
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from ._cli_data import TABLE_KEYS, check_table
from ._cli_keys import KEY_HELP as _KEY_HELP
from ._devices import use_cpu_cores_unless_chosen
from ._renamed import RENAMED, renamed, warn_renamed
from .api import LEAF_OPTIONS, PRIOR_OPTIONS, sample, split_flat, tree_prior
from .diagnostics import ConvergenceWarning, convergence_diagnostics, convergence_message
from .methods import METHODS
from .methods.flat import TEMPERING_OPTIONS, method_from_name, method_options

__all__ = ["main", "load_config", "run_config", "bundled_configs", "find_config", "config_keys"]

#: The keys of a method's options (top level, or nested under ``method:``).
_METHOD_KEYS = set(method_options())
_MODEL_KEYS = set(PRIOR_OPTIONS) | set(LEAF_OPTIONS) | _METHOD_KEYS | set(TEMPERING_OPTIONS)
_SAMPLER_KEYS = {"num_warmup", "num_samples", "num_chains", "seed", "block_size", "thin", "data_shards", "run_until"}
#: How the table's columns are read (docs/categorical-missing.md).
_DATA_KEYS = {"categorical_features", "missing"}
_RUN_KEYS = {"name", "dataset", "split", "task", "method", "output", "tempering", *TABLE_KEYS}
ALLOWED_KEYS = _MODEL_KEYS | _SAMPLER_KEYS | _DATA_KEYS | _RUN_KEYS
#: The keys' earlier names, ``{old: new}`` (read with a ``DeprecationWarning``).
_OLD_KEYS = {old: new for old, new in RENAMED.items() if new in ALLOWED_KEYS}
#: The checkpoint's file name in the output folder.
_CHECKPOINT = "checkpoint.npz"
#: Defaults of the run keys that are not :func:`~bdtree_jax.sample`'s arguments.
_RUN_DEFAULTS = {"name": "the file's name", "dataset": "(or data)", "split": "paper (data: 0.3)",
                 "task": "from the data", "method": inspect.signature(sample).parameters["method"].default,
                 "output": "runs/NAME", "tempering": "null", "data": "(or dataset)", "target": "(with data)",
                 "features": "all but target"}


def _did_you_mean(words, choices) -> str:
    """The end of a sentence about unknown ``words`` (one or a list): ``"; did you mean 'x'?"``
    with the closest of ``choices`` (``"... 'x' for 'y', 'z' for 'w'?"`` for several), or ``"."``
    when none is close."""
    words = [words] if isinstance(words, str) or not isinstance(words, (list, tuple)) else words
    pairs = [(w, difflib.get_close_matches(str(w), [str(c) for c in choices], n=1)) for w in words]
    pairs = [(w, close[0]) for w, close in pairs if close]
    if not pairs:
        return "."
    if len(words) == 1:
        return f"; did you mean {pairs[0][1]!r}?"
    return "; did you mean " + ", ".join(f"{c!r} for {w!r}" for w, c in pairs) + "?"


def _value_text(value) -> str:
    """A default as YAML writes it (null, true, [a, b])."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    return str(value)


def config_keys() -> list:
    """Every config key, ``[(group, key, default, help)]``: the keys are :data:`ALLOWED_KEYS`, the
    defaults those of :func:`~bdtree_jax.sample`, :class:`~bdtree_jax.TreePrior`, the leaf models,
    the method classes (by method when they differ) and :class:`~bdtree_jax.methods.Tempering`."""
    import dataclasses

    from .likelihoods import DirichletMultinomial
    from .methods import Tempering
    from .priors import TreePrior

    arguments = inspect.signature(sample).parameters
    leaf = {f.name: f.default for f in dataclasses.fields(DirichletMultinomial)}
    rows = [("run", k, _RUN_DEFAULTS[k]) for k in ("name", "dataset", *TABLE_KEYS, "split", "task", "method", "output",
                                                   "tempering")]
    rows += [("data", k, arguments[k].default) for k in sorted(_DATA_KEYS)]
    rows += [("prior", k, getattr(TreePrior(), k)) for k in PRIOR_OPTIONS]
    rows += [("leaves", k, leaf.get(k)) for k in LEAF_OPTIONS]
    rows += [("sampler", k, arguments[k].default) for k in sorted(_SAMPLER_KEYS, key=list(arguments).index)]
    for key, owners in method_options().items():
        by_value: dict = {}
        for name in owners:
            by_value.setdefault(_value_text(getattr(method_from_name(name), key)), []).append(name)
        default = next(iter(by_value)) if len(by_value) == 1 else "; ".join(
            f"{', '.join(names)}: {value}" for value, names in by_value.items())
        rows.append((f"method ({', '.join(owners)})", key, default))
    rows += [("tempering", k, getattr(Tempering(), k)) for k in TEMPERING_OPTIONS]
    return [(group, key, _value_text(default), _KEY_HELP[key]) for group, key, default in rows]


def _keys_table() -> str:
    """The text of ``bdtree config-keys``: every key under its group, its default, its help."""
    lines, group = [], None
    for row_group, key, default, text in config_keys():
        if row_group.split(" ")[0] != group:
            group = row_group.split(" ")[0]
            lines.append(f"{group}:")
        owners = row_group[len(group) + 1:]
        text = f"{owners} {text}" if owners else text
        if len(default) > 17:
            lines += [f"  {key:20} {default}", f"  {'':20} {'':17} {text}"]
        else:
            lines.append(f"  {key:20} {default:17} {text}")
    return "\n".join(lines)


def bundled_configs() -> dict:
    """``{name: file}`` of the configs shipped in ``bdtree_jax/configs`` (``bdtree run NAME``)."""
    from importlib.resources import files

    folder = files("bdtree_jax") / "configs"
    return {f.name[: -len(".yaml")]: f for f in sorted(folder.iterdir(), key=lambda f: f.name)
            if f.name.endswith(".yaml")}


def find_config(config):
    """The file of ``config``: an existing YAML file, else a bundled config's name (with or
    without ``.yaml``); raises ``ValueError`` naming the missing file (or the unknown name) and
    suggesting ``bdtree configs``."""
    if os.path.isfile(config):
        return Path(config)
    bundled = bundled_configs()
    name = str(config).removesuffix(".yaml")
    if name in bundled:
        return bundled[name]
    hint = f"{_did_you_mean(name, bundled)} `bdtree configs` lists the bundled configs."
    if os.path.isdir(config):
        raise ValueError(f"config {str(config)!r} is a folder, not a YAML file{hint}")
    if os.sep in str(config) or str(config).endswith((".yaml", ".yml")):
        raise ValueError(f"config file {str(config)!r} not found (no file {os.path.abspath(config)}){hint}")
    raise ValueError(f"{str(config)!r} is neither a YAML file nor a bundled config{hint}")


def _read_config(source: Path) -> dict:
    """The YAML mapping in ``source`` (a ``ValueError`` naming the file if it is not one)."""
    import yaml

    try:
        config = yaml.safe_load(source.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise ValueError(f"{source}: not valid YAML{at}: {getattr(err, 'problem', None) or err}.") from None
    if not isinstance(config if config is not None else {}, dict):
        raise ValueError(f"{source}: a config must be a YAML mapping of keys to values.")
    return config or {}


def load_config(config, overrides=()) -> dict:
    """Read a YAML run config (a file or a bundled config's name), apply ``overrides``
    (``"KEY=VALUE"`` strings, as ``--set``), then validate it; raises ``ValueError`` naming bad
    keys or values."""
    source = find_config(config)
    path = str(source)
    config = _renamed_keys(_read_config(source), where=f"{path}: ")
    for item in overrides:
        _override(config, item)
    unknown = sorted(set(config) - ALLOWED_KEYS)
    if unknown:
        raise ValueError(f"{path}: unknown config keys {unknown}{_did_you_mean(unknown, ALLOWED_KEYS)} "
                         "`bdtree config-keys` lists the keys.")
    if "dataset" not in config and "data" not in config:
        raise ValueError(f"{path}: the config needs a 'dataset' key (a bundled dataset) or a 'data' key (a CSV or "
                         "parquet file, with target:).")
    config.setdefault("name", source.name.removesuffix(".yaml"))
    config.setdefault("method", _RUN_DEFAULTS["method"])
    config.setdefault("split", 0.3 if "data" in config else "paper")
    config.setdefault("output", os.path.join("runs", config["name"]))
    _check_data_keys(config, where=f"{path}: ")
    _flat_options(config, where=f"{path}: ")
    return config


def _renamed_keys(config: dict, *, where: str) -> dict:
    """``config`` with the earlier names of its keys (top level, under ``method:`` or
    ``tempering:``) replaced by the new ones, each with a ``DeprecationWarning``."""
    config = renamed(config, _OLD_KEYS, where=where, stacklevel=1, suffix="")
    for section in ("method", "tempering"):
        if isinstance(config.get(section), dict):
            config[section] = renamed(config[section], _OLD_KEYS, where=f"{where}{section}: ", stacklevel=1,
                                      suffix="")
    return config


def _datasets() -> tuple:
    """The datasets a config may name: the bundled ones and ``cgm`` (simulated)."""
    from . import datasets

    return tuple(dict.fromkeys(datasets.DATASETS + ("cgm",)))


def _check_data_keys(config: dict, *, where: str) -> None:
    """``dataset`` (or the user table's ``data``, ``target``, ``features``), ``split`` and
    ``task``: a ``ValueError`` with a "did you mean" for a typo.  A table's task, inferred when
    absent, is written to ``config["task"]``."""
    from . import datasets

    name, split = config.get("dataset"), config["split"]
    if config.get("task") not in (None, "classification", "regression"):
        raise ValueError(f"{where}task must be classification or regression; got {config['task']!r}"
                         f"{_did_you_mean(config['task'], ('classification', 'regression'))}")
    if "data" in config:
        if split == "paper":
            raise ValueError(f"{where}split: paper is for the bundled datasets; give a test fraction such as 0.3, "
                             "or none.")
        config["task"] = check_table(config, where=where, did_you_mean=_did_you_mean)[0]
    elif "target" in config or "features" in config:
        raise ValueError(f"{where}{'target' if 'target' in config else 'features'}: is for your own table; give it "
                         "with data: path.csv (a bundled dataset knows its target and features).")
    elif name not in _datasets():
        raise ValueError(f"{where}unknown dataset {name!r}{_did_you_mean(name, _datasets())} Available datasets: "
                         f"{', '.join(_datasets())}.")
    if split == "paper" and name not in datasets.SPLITS:
        raise ValueError(f"{where}dataset {name!r} has no paper split (those with one: {', '.join(datasets.SPLITS)}); "
                         "give split: a test fraction such as 0.3, or none.")
    if split not in ("paper", "none") and (isinstance(split, bool) or not isinstance(split, (int, float))
                                           or not 0 < split < 1):
        raise ValueError(f"{where}split must be paper, none or a test fraction in (0, 1); got {split!r}"
                         f"{_did_you_mean(split, ('paper', 'none'))}")


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
            raise ValueError(f"{where}unknown {section} keys {unknown}{_did_you_mean(unknown, allowed)} "
                             f"Allowed: {', '.join(sorted(allowed))}.")
        twice = sorted(set(nested) & set(flat))
        if twice:
            raise ValueError(f"{where}{twice} given both at the top level and under {section}:; give each once.")
        flat.update({k: v for k, v in nested.items() if k != "name"})
    if _method_name(config) not in METHODS:
        raise ValueError(f"{where}unknown method {_method_name(config)!r}{_did_you_mean(_method_name(config), METHODS)} "
                         f"Available: {', '.join(METHODS)}.")
    return flat


def _load_data(config):
    """``(task, X_train, y_train, X_test, y_test)`` of a checked config: a bundled dataset or the
    user's table (``data``), split as ``split`` says."""
    from . import datasets

    name, split = config.get("dataset"), config["split"]
    task = config.get("task") or ("regression" if name in datasets.REGRESSION + ("cgm",) else "classification")
    if "data" in config:
        task, X, y = check_table(config)
    elif name == "cgm" and split != "paper":
        X, y = datasets.make_cgm(800, seed=int(config.get("seed", 0)))
    elif split != "paper":
        X, y = datasets.load(name)
    if split == "paper":
        X_train, y_train, X_test, y_test = datasets.load_split(name)
    else:
        if split == "none":
            X_train, y_train, X_test, y_test = X, y, X, y
        else:
            from sklearn.model_selection import train_test_split

            X_train, X_test, y_train, y_test = train_test_split(
                X, y, test_size=float(split), random_state=int(config.get("seed", 0)),
                stratify=y if task == "classification" else None,
            )
    return task, X_train, y_train, X_test, y_test


def _sample_arguments(method: str, flat: dict, *, where: str) -> dict:
    """:func:`~bdtree_jax.sample`'s ``method``, ``tempering``, ``prior``, ``likelihood`` and run
    options from a config's flat options.  Flat keys are one of the YAML's two spellings, so no
    ``DeprecationWarning`` here."""
    method, tempering, prior_options, likelihood, rest, _moved = split_flat(method, flat, where=where)
    prior = tree_prior(prior_options, where) if prior_options else None
    if rest.get("run_until") is not None:
        rest["run_until"] = _converged(rest["run_until"], where)
    return dict(method=method, tempering=tempering, prior=prior, likelihood=likelihood or None, **rest)


def _converged(value, where: str):
    """The config's ``run_until`` mapping as a :class:`~bdtree_jax.Converged`."""
    from .methods import Converged

    if not isinstance(value, dict):
        raise ValueError(f"{where}run_until must be null or a mapping {{rhat: ..., ess: ..., max_iterations: ..., "
                         f"max_seconds: ...}} (each optional); got {value!r}.")
    try:
        return Converged(**value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}run_until: {str(e).removeprefix('Converged: ').removeprefix('Converged.__init__() ')}") \
            from None


#: The checkpoint of the config being run: its ``(mtime_ns, size)`` when the run began (None: no
#: file) and whether the run resumed from it (what an interruption may promise: :func:`_resume_note`).
_RESUMABLE = dict(before=None, resumed=False)


def _stamp(path: Path):
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _resume_note(out) -> str:
    """What an interrupted run tells about resuming: a rerun resumes only from a checkpoint this
    run wrote, or the one it resumed from; with no checkpoint (interrupted before the first one,
    written every ``block_size`` iterations), or another run's left as it was, it starts over."""
    if not out:
        return ""
    checkpoint = Path(out) / _CHECKPOINT
    now = _stamp(checkpoint)
    if now is not None and (now != _RESUMABLE["before"] or _RESUMABLE["resumed"]):
        return f"; rerun the same command to resume from {checkpoint}"
    return (" before its first checkpoint (one is written every block_size iterations); rerunning the same "
            "command starts over")


class _Resumed(logging.Handler):
    """Prints the driver's messages about the checkpoint to stderr and keeps where it resumed."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.resumed_from = None

    def emit(self, record):
        resumed = getattr(record, "resumed_from", None)
        self.resumed_from = resumed or self.resumed_from
        _RESUMABLE["resumed"] = _RESUMABLE["resumed"] or bool(resumed)
        print(f"bdtree: {record.getMessage()}" + ("; --fresh starts over" if resumed else ""), file=sys.stderr)


def _sample_reporting_resume(*args, **kwargs):
    """:func:`~bdtree_jax.sample` with the driver's INFO messages (a resumed checkpoint) on
    stderr; returns ``(posterior, resumed_from)``, the latter the driver's dict or None."""
    logger, handler = logging.getLogger("bdtree_jax.driver"), _Resumed()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        return sample(*args, **kwargs), handler.resumed_from
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def run_config(config: dict, *, progress: bool | None = None, fresh: bool = False) -> dict:
    """Run one config; returns the metrics dict (also written to ``output/metrics.json``).

    The run writes a checkpoint in the output folder as it goes; a rerun of the same config
    resumes from it, says so on stderr and records ``resumed_from`` (the checkpoint, the
    iterations or chains it held) in the metrics.  ``fresh``: delete that checkpoint first.
    """
    task, X_train, y_train, X_test, y_test = _load_data(config)
    kwargs = _flat_options(config, where="")
    for key in ("move_probs", "warmup_move_probs"):
        if kwargs.get(key) is not None:
            kwargs[key] = tuple(kwargs[key])
    if kwargs.get("initial_tree") == "cart":
        from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

        cart = DecisionTreeClassifier if task == "classification" else DecisionTreeRegressor
        kwargs["initial_tree"] = cart(
            max_depth=kwargs.get("max_depth", 6), min_samples_leaf=kwargs.get("min_leaf_size", 1), random_state=0,
        ).fit(X_train, y_train)
    out = Path(config["output"])
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / _CHECKPOINT
    if fresh and checkpoint.exists():
        checkpoint.unlink()
        print(f"bdtree: --fresh: deleted the checkpoint {checkpoint}", file=sys.stderr)
    t0 = time.perf_counter()
    with warnings.catch_warnings():  # the fit's ConvergenceWarning speaks Python; ours names --set options
        warnings.filterwarnings("ignore", category=ConvergenceWarning)
        # written after every block_size iterations; rerunning the same config resumes from it
        post, resumed_from = _sample_reporting_resume(
            X_train, y_train, task=task, progress=progress, checkpoint=str(checkpoint),
            **_sample_arguments(_method_name(config), kwargs, where=f"{config['name']}: "))
    seconds = time.perf_counter() - t0
    convergence = convergence_diagnostics(post)
    advice = convergence_message(post, convergence, syntax="cli")
    if advice is not None:
        warnings.warn(advice, ConvergenceWarning, stacklevel=2)
    draws = post.predict_draws(X_test)  # (chains*draws, n, P)
    C, S = post.num_chains, post.num_draws
    per_chain = draws.reshape(C, S, *draws.shape[1:]).mean(1)
    y_true = np.asarray(y_test)
    metrics = dict(
        name=config["name"], dataset=config.get("dataset", config.get("data")), method=_method_name(config), task=task,
        n_train=int(len(y_train)), n_test=int(len(y_test)), num_chains=C, num_draws_per_chain=S,
        seconds=seconds, resumed_from=resumed_from, config={k: v for k, v in config.items()},
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
    metrics["convergence"] = dict(convergence, warned=advice is not None)
    if "run_until" in post.info:  # {converged, rounds, thin, iterations, missed}
        metrics["run_until"] = post.info["run_until"]
    metrics["acceptance_rate"] = post.acceptance_rate()
    # the RJHMC paper counts accepted iterations over the whole chain, warm-up included
    metrics["acceptance_rate_all_iterations"] = float(
        np.concatenate([post.warmup_stats["accepted"], post.stats["accepted"]], axis=1).mean()
    )
    metrics["map_tree"] = post.tree_text()
    metrics["most_visited_tree"], metrics["most_visited_frequency"] = post.most_visited_tree()

    with open(out / "metrics.json", "w") as fh:
        json.dump(metrics, fh, indent=2, default=str)
    post.save(out / "posterior.npz")
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
    if hasattr(post, "plot_top_trees") and post.num_draws:  # the tree-space summary (docs/plots.md)
        ax = post.plot_top_trees(k=10)
        ax.figure.tight_layout()
        ax.figure.savefig(out / "top_trees.png", dpi=110)
        plt.close(ax.figure)


def _override(config: dict, item: str) -> None:
    """Apply ``--set KEY=VALUE`` (a YAML value) to a config as read (before it is validated); a
    key given under ``method:`` or ``tempering:`` is replaced there."""
    import yaml

    k, sep, v = item.partition("=")
    if not sep:
        raise ValueError(f"--set {item!r}: expected KEY=VALUE.")
    if k in _OLD_KEYS:
        warn_renamed(k, _OLD_KEYS[k], "--set: ", stacklevel=1)
        k = _OLD_KEYS[k]
    if k not in ALLOWED_KEYS:
        raise ValueError(f"--set {item!r}: unknown key {k!r}{_did_you_mean(k, ALLOWED_KEYS)} "
                         "`bdtree config-keys` lists the keys.")
    try:
        value = yaml.safe_load(v)
    except yaml.YAMLError as err:
        raise ValueError(f"--set {item!r}: the value is not valid YAML ({getattr(err, 'problem', None) or err}).") \
            from None
    nested = [config[s] for s in ("method", "tempering") if isinstance(config.get(s), dict) and k in config[s]]
    (nested[0] if nested and k not in ("method", "tempering") else config)[k] = value


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
    """The ``bdtree`` command; returns the exit code: 0, 2 for a user error (a bad config, key,
    value or file: one line on stderr, no traceback), 130 when interrupted."""
    use_cpu_cores_unless_chosen()  # this process is ours: chains in parallel over the CPU's cores
    with warnings.catch_warnings():
        # a config's deprecated keys are shown (Python hides DeprecationWarnings outside __main__)
        warnings.filterwarnings("default", category=DeprecationWarning, module=r"bdtree_jax\.cli$")
        warnings.showwarning = _one_line(warnings.showwarning)
        return _main(argv)


def _one_line(show):
    """``warnings.showwarning`` for the command: a ConvergenceWarning as one line on stderr,
    ``bdtree: warning: ...`` (no file, line number or source line); other warnings as ``show``."""
    def showwarning(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, ConvergenceWarning):
            return show(message, category, filename, lineno, file, line)
        print(f"bdtree: warning: {message}", file=sys.stderr if file is None else file)
    return showwarning


def _main(argv) -> int:
    parser = argparse.ArgumentParser(prog="bdtree", description="Bayesian decision trees in JAX.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="run YAML configs (see bdtree_jax.cli)", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run YAML configs. A rerun of an interrupted config resumes from the checkpoint in its output "
                    "folder (and says so); --fresh starts over.",
        epilog=f"config keys (KEY  DEFAULT  HELP; `bdtree config-keys` prints this table):\n{_keys_table()}\n\n"
               f"bundled configs: {', '.join(bundled_configs())}",
    )
    run.add_argument("configs", nargs="+", metavar="CONFIG",
                     help="a YAML file or the name of a bundled config (`bdtree configs` lists them)")
    run.add_argument("--output", help="override the config's output folder (single config only)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key (YAML value), e.g. --set num_chains=2; applied before the "
                          "config is checked")
    run.add_argument("--fresh", action="store_true",
                     help=f"delete the output folder's {_CHECKPOINT} and start over instead of resuming")
    run.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)
    show = sub.add_parser("configs", help="list the bundled configs, or print one (bdtree configs quickstart)")
    show.add_argument("names", nargs="*", metavar="NAME", help="bundled configs to print")
    sub.add_parser("config-keys", help="list every config key with its default and one line of help")
    args = parser.parse_args(argv)
    out = None
    try:
        if args.command == "configs":
            return _list_configs(args.names)
        if args.command == "config-keys":
            print(_keys_table())
            return 0
        if args.output and len(args.configs) > 1:
            raise ValueError("--output takes a single config; give each config its own output: key.")
        for path in args.configs:
            config = load_config(path, overrides=args.set)
            if args.output:
                config["output"] = args.output
            out = config["output"]
            _RESUMABLE.update(before=_stamp(Path(out) / _CHECKPOINT), resumed=False)
            metrics = run_config(config, progress=args.progress, fresh=args.fresh)
            score = {k: v for k, v in metrics.items() if k.startswith("test_") and not k.endswith("per_chain")}
            print(json.dumps(dict(name=metrics["name"], leaves_mean=metrics["leaves_mean"],
                                  seconds=round(metrics["seconds"], 1), **score)))
            print(f"wrote {out}/: metrics.json posterior.nc posterior.npz trace.png map_tree.png top_trees.png {_CHECKPOINT} "
                  "(a rerun resumes from the checkpoint; --fresh starts over)")
    except (ValueError, OSError) as err:
        print(f"bdtree: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"bdtree: interrupted{_resume_note(out)}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
