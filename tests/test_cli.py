import functools
import json
import os
import re
import subprocess
import sys
import warnings

import pytest

from bdtree_jax import Converged, cli, driver
from bdtree_jax.diagnostics import ConvergenceWarning
from bdtree_jax.cli import ALLOWED_KEYS, _override, bundled_configs, config_keys, load_config, main

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bdtree_jax", "configs")


#: a short quickstart run (both quickstart tests: one compiled block program)
QUICK = ["--set", "num_warmup=100", "--set", "num_samples=200", "--set", "num_chains=2", "--set", "max_depth=3",
         "--set", "run_until=null"]


def test_run_config_writes_metrics_and_arviz(tmp_path, capsys):
    code = main(["run", os.path.join(CONFIGS, "quickstart.yaml"), "--output", str(tmp_path), *QUICK])
    assert code == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["n_test"] == 45 and metrics["test_accuracy_pooled"] > 0.85
    assert len(metrics["test_accuracy_per_chain"]) == 2
    convergence = metrics["convergence"]  # every quantity the convergence check read, and its verdict
    assert set(convergence) == {"log_lik", "n_leaves", "predictive_mean", "warned"}
    assert isinstance(convergence["warned"], bool)
    for name in ("log_lik", "n_leaves", "predictive_mean"):
        assert {"rhat", "ess_bulk", "ess_tail"} <= set(convergence[name])
    assert convergence["predictive_mean"]["num_rows"] == 20
    for name in ("posterior.nc", "posterior.npz", "trace.png", "map_tree.png", "top_trees.png"):
        assert (tmp_path / name).stat().st_size > 0
    import arviz as az

    idata = az.from_netcdf(str(tmp_path / "posterior.nc"))
    assert "n_leaves" in idata["posterior"]
    assert '"test_accuracy_mean"' in capsys.readouterr().out
    # bd.load reads every file of the run and says what a file is when another reader is asked
    import bdtree_jax as bd

    loaded = bd.load(tmp_path / "posterior.nc")
    assert isinstance(loaded, az.InferenceData) and "n_leaves" in loaded["posterior"]
    assert type(bd.load(tmp_path / "posterior.npz")) is bd.Posterior
    checkpoint = bd.load(tmp_path / "checkpoint.npz")
    assert isinstance(checkpoint, dict) and {"ident", "start", "chunks", "states"} <= set(checkpoint)
    with pytest.raises(bd.BdtreeFileError, match=r"posterior.nc: cannot read this posterior file: it is a netCDF "
                                                 r"file .*read it with bd.load\(path\) or arviz.from_netcdf"):
        bd.Posterior.load(tmp_path / "posterior.nc")
    with pytest.raises(bd.BdtreeFileError, match=r"it holds a checkpoint \(dict\), not a posterior: read it with "
                                                 r"bd.load\(path\)"):
        bd.Posterior.load(tmp_path / "checkpoint.npz")


def test_run_a_bundled_config_by_name_without_warnings(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # outside the checkout: the name is found in the installed package
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean run warns about nothing (pyproject lets Future/Deprecation pass)
        warnings.simplefilter("ignore", ConvergenceWarning)  # short chains may not have converged, rightly
        # the options of test_run_config_writes_metrics_and_arviz: the same compiled programs
        assert main(["run", "quickstart", *QUICK]) == 0
    metrics = json.loads((tmp_path / "runs" / "quickstart" / "metrics.json").read_text())
    assert metrics["name"] == "quickstart" and metrics["num_draws_per_chain"] == 200
    assert metrics["resumed_from"] is None
    out, err = capsys.readouterr()
    assert "wrote runs/quickstart/" in out and "checkpoint.npz" in out.splitlines()[-1]
    assert err == ""
    assert load_config("quickstart.yaml") == load_config(os.path.join(CONFIGS, "quickstart.yaml"))


def test_convergence_warning_is_one_line_of_set_options(tmp_path, monkeypatch, capsys):
    """The run of the test above, its warning shown: one line on stderr naming ``--set`` options
    of the config's keys (not Python, no file name or source line), only those the config has not
    tried (quickstart tempers and regrows already), and metrics.json records that it warned."""
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("always", ConvergenceWarning)  # pyproject ignores it in the tests
        assert main(["run", "quickstart", "--set", "num_warmup=50", "--set", "num_samples=20",
                     "--set", "num_chains=2", "--set", "run_until=null"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bdtree: warning: the chains (2 x 20 draws) may not have "
                                                    "converged: "), err
    assert "--set num_warmup=" in err and "--set num_samples=" in err and "--set num_chains=4 (now 2)" in err
    assert "num_temperatures" not in err and "proposal" not in err  # the config's tempering and regrow
    keys = re.findall(r"--set '?(\w+)=", err)
    assert "run_until" in keys and set(keys) <= ALLOWED_KEYS
    assert "bd." not in err and "warnings." not in err and ".py" not in err and "Warning:" not in err
    convergence = json.loads((tmp_path / "runs" / "quickstart" / "metrics.json").read_text())["convergence"]
    assert convergence["warned"] is True and convergence["log_lik"]["ess_bulk"] < 400


def test_run_until_rounds_go_to_metrics_json(tmp_path, monkeypatch, capsys):
    """The bundled quickstart samples until converged (its ``run_until``); metrics.json reports the
    rounds, and the rounds going on over their own checkpoint print nothing on stderr."""
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        assert main(["run", "quickstart", *QUICK[:-2], "--set", "run_until={max_iterations: 400, ess: 1000000000}"]) == 0
    metrics = json.loads((tmp_path / "runs" / "quickstart" / "metrics.json").read_text())
    assert metrics["run_until"] == dict(converged=False, rounds=2, thin=2, iterations=400, missed=["log_lik", "n_leaves",
                                                                                                   "predictive_mean"])
    assert capsys.readouterr().err == ""
    assert load_config("quickstart.yaml")["run_until"] == {"max_iterations": 32000}


def test_run_until_is_a_config_key(tmp_path, monkeypatch, capsys):
    """``run_until`` takes :class:`~bdtree_jax.Converged`'s options as a mapping (the warning's
    advice above names it so); a bad one is refused before anything compiles, naming the key."""
    monkeypatch.chdir(tmp_path)
    sampled = {}

    @functools.wraps(cli.sample)  # the help table reads sample's signature
    def sample(*args, **kwargs):  # records what bdtree run asks for, and stops it there
        sampled.update(kwargs)
        raise OSError("stopped by the test")

    monkeypatch.setattr(cli, "sample", sample)
    assert main(["run", "quickstart", "--set", "run_until={max_iterations: 4000, max_seconds: 30}"]) == 2
    assert sampled["run_until"] == Converged(max_iterations=4000, max_seconds=30)
    capsys.readouterr()
    for value, says in (("{max_iteration: 10}", "unexpected keyword argument 'max_iteration'"),
                        ("{rhat: 0.5}", "rhat must be a finite number > 1"), ("100", "must be null or a mapping")):
        sampled.clear()
        assert main(["run", "quickstart", "--set", f"run_until={value}"]) == 2
        err = capsys.readouterr().err
        assert not sampled and "run_until" in err and says in err, err


def test_every_shipped_config_is_valid():
    names = set(bundled_configs())
    assert names == {f[: -len(".yaml")] for f in os.listdir(CONFIGS) if f.endswith(".yaml")}
    for data in ("iris", "bcw", "wine", "raisin", "cgm"):
        assert {f"{data}_cgm", f"{data}_hmc-df", f"{data}_hmc-dfi"} <= names
    for name in names:
        assert load_config(name)["name"] == name


def test_configs_command_lists_and_prints(capsys):
    assert main(["configs"]) == 0
    listing = capsys.readouterr().out
    assert "quickstart" in listing and "method=pcfg" in listing
    assert main(["configs", "quickstart"]) == 0
    assert "dataset: iris" in capsys.readouterr().out
    assert main(["configs", "quikstart"]) == 2
    assert "did you mean 'quickstart'? `bdtree configs` lists" in capsys.readouterr().err


def test_bad_config_keys(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: iris\nnum_chain: 3\n")
    with pytest.raises(ValueError, match="unknown config keys \\['num_chain'\\]; did you mean 'num_chains'\\?"):
        load_config(bad)
    assert main(["run", str(bad)]) == 2
    assert "num_chain" in capsys.readouterr().err
    bad.write_text("dataset: iris\nnum_chain: 3\nsed: 1\nzzzzzz: 2\n")
    with pytest.raises(ValueError, match="did you mean 'num_chains' for 'num_chain', 'seed' for 'sed'\\?"):
        load_config(bad)
    bad.write_text("dataset: iris\nmethod: magic\n")
    with pytest.raises(ValueError, match="unknown method"):
        load_config(bad)
    bad.write_text("dataset: iris\nmethod: hmc-fd\n")
    with pytest.raises(ValueError, match="unknown method 'hmc-fd'; did you mean 'hmc-df'\\?"):
        load_config(bad)
    assert main(["run", os.path.join(CONFIGS, "quickstart.yaml"), "--set", "num_chain=2"]) == 2
    assert "unknown key 'num_chain'; did you mean 'num_chains'?" in capsys.readouterr().err
    assert main(["run", "no_such_config"]) == 2
    assert "neither a YAML file nor a bundled config" in capsys.readouterr().err


def _one_line_error(capsys) -> str:
    """The stderr of a failed command: exactly one line, ``bdtree: error: ...``, no traceback."""
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("bdtree: error: "), err
    assert "Traceback" not in err
    return err


def test_missing_config_file_is_one_line_naming_it(tmp_path, capsys):
    missing = tmp_path / "configs" / "mine.yaml"
    assert main(["run", str(missing)]) == 2
    err = _one_line_error(capsys)
    assert f"config file {str(missing)!r} not found" in err and "`bdtree configs` lists the bundled configs" in err
    assert main(["run", str(tmp_path)]) == 2
    assert "is a folder, not a YAML file" in _one_line_error(capsys)
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: [iris\n")
    assert main(["run", str(bad)]) == 2
    assert f"{bad}: not valid YAML (line 2)" in _one_line_error(capsys)


@pytest.mark.parametrize("text, match", [
    ("dataset: irsi\nsplit: 0.3", "unknown dataset 'irsi'; did you mean 'iris'\\? Available datasets: iris, "),
    ("dataset: penguins", "dataset 'penguins' has no paper split"),
    ("dataset: iris\nsplit: papr", "split must be paper, none or a test fraction in \\(0, 1\\); got 'papr'; did "
                                   "you mean 'paper'\\?"),
    ("dataset: iris\nsplit: 1.5", "split must be .* got 1.5."),
    ("dataset: iris\ntask: clasification", "did you mean 'classification'\\?"),
])
def test_dataset_split_and_task_typos(tmp_path, capsys, text, match):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text + "\n")
    with pytest.raises(ValueError, match=match):
        load_config(bad)
    assert main(["run", str(bad)]) == 2
    _one_line_error(capsys)


def test_set_is_applied_before_the_config_is_checked(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: irsi\nmethod: magic\nsplit: 0.3\n")
    with pytest.raises(ValueError, match="unknown dataset"):
        load_config(bad)
    config = load_config(bad, overrides=["method=cgm", "dataset=iris"])
    assert config["method"] == "cgm" and config["dataset"] == "iris"
    good = tmp_path / "good.yaml"
    good.write_text("dataset: iris\nsplit: 0.3\n")
    assert main(["run", str(good), "--set", "method=magic"]) == 2
    assert "unknown method 'magic'" in _one_line_error(capsys)
    for item, match in (("method", "expected KEY=VALUE"), ("num_chains=[1", "the value is not valid YAML")):
        assert main(["run", str(good), "--set", item]) == 2
        assert match in _one_line_error(capsys)


def test_config_keys_and_run_help_list_every_key(capsys):
    from bdtree_jax.methods import RunOptions
    from bdtree_jax.priors import TreePrior

    rows = config_keys()
    assert sorted(key for _, key, _, _ in rows) == sorted(ALLOWED_KEYS)  # every key, once
    assert all(text and "\n" not in text for _, _, _, text in rows)
    defaults = {key: default for _, key, default, _ in rows}
    # the defaults are the code's: sample's arguments agree with RunOptions, the prior's with TreePrior
    for key in ("num_warmup", "num_samples", "num_chains", "seed", "thin", "data_shards"):
        assert defaults[key] == str(getattr(RunOptions(), key))
    assert defaults["max_depth"] == str(TreePrior().max_depth) and defaults["num_particles"] == "smc: 100; pg: 10"
    assert main(["config-keys"]) == 0
    table = capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--help"])
    assert exit_.value.code == 0
    help_text = capsys.readouterr().out
    for text in (table, help_text):
        listed = {line.split()[0] for line in text.splitlines() if line.startswith("  ") and line.strip()}
        assert ALLOWED_KEYS <= listed, sorted(ALLOWED_KEYS - listed)
    assert table in help_text and "--fresh" in help_text
    assert "  max_depth            6                 deepest level a tree may reach" in table


def test_importing_arviz_through_us_does_not_warn(tmp_path):
    # ArviZ 0.2x warns (FutureWarning) on its first import of a day, kept in its cache folder:
    # an empty cache folder makes it warn; our import ignores that one message only
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    code = "from bdtree_jax._arviz import arviz_major_version; arviz_major_version()"
    ours = subprocess.run([sys.executable, "-W", "error", "-c", code], env=env, capture_output=True, text=True)
    assert ours.returncode == 0 and ours.stderr == "", ours.stderr
    import arviz

    env["XDG_CACHE_HOME"] = str(tmp_path / "other")
    plain = subprocess.run([sys.executable, "-W", "error", "-c", "import arviz"], env=env, capture_output=True, text=True)
    if int(arviz.__version__.split(".")[0]) < 1 and plain.returncode:  # the notice this filter is for
        assert "ArviZ is undergoing a major refactor" in plain.stderr


def _tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("dataset: iris\nsplit: 0.3\nmax_depth: 2\nnum_warmup: 20\nnum_samples: 20\nnum_chains: 1\n"
                    "block_size: 10\n")
    return ["run", str(path), "--output", str(tmp_path / "out")]


def test_resuming_says_so_and_fresh_starts_over(tmp_path, monkeypatch, capsys):
    checkpoint = tmp_path / "out" / "checkpoint.npz"
    write = driver._write_checkpoint

    def write_then_interrupt(*args, **kwargs):  # Ctrl-C right after the first checkpoint
        write(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(driver, "_write_checkpoint", write_then_interrupt)
    assert main(_tiny(tmp_path)) == 130
    out, err = capsys.readouterr()
    assert err == f"bdtree: interrupted; rerun the same command to resume from {tmp_path / 'out'}/checkpoint.npz\n"
    monkeypatch.setattr(driver, "_write_checkpoint", write)

    assert main(_tiny(tmp_path)) == 0
    out, err = capsys.readouterr()
    assert err == (f"bdtree: resuming from checkpoint {checkpoint} at iteration 10 of 40 (1 chains); "
                   "--fresh starts over\n")
    assert "checkpoint.npz (a rerun resumes from the checkpoint; --fresh starts over)" in out.splitlines()[-1]
    resumed = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert resumed["resumed_from"] == dict(checkpoint=str(checkpoint), done=10, total=40, unit="iteration",
                                           num_chains=1)

    assert main(_tiny(tmp_path) + ["--fresh"]) == 0
    out, err = capsys.readouterr()
    assert err == f"bdtree: --fresh: deleted the checkpoint {checkpoint}\n"
    fresh = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert fresh["resumed_from"] is None
    for key in ("test_accuracy_per_chain", "leaves_mean", "map_tree", "acceptance_rate", "most_visited_tree"):
        assert resumed[key] == fresh[key]  # the resumed run is the uninterrupted one

    assert main(_tiny(tmp_path) + ["--set", "seed=1"]) == 0
    err = capsys.readouterr().err
    assert err == f"bdtree: checkpoint {checkpoint} belongs to another run (other options, data or seed); " \
                  "starting over and overwriting it\n"
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["resumed_from"] is None


def test_interrupted_before_the_first_checkpoint_promises_no_resume(tmp_path, monkeypatch, capsys):
    """Ctrl-C before any checkpoint exists: 6c1851c said "rerun the same command to resume from
    .../checkpoint.npz" with no such file."""
    def interrupt(*args, **kwargs):  # Ctrl-C just before the first checkpoint would be written
        raise KeyboardInterrupt

    monkeypatch.setattr(driver, "_write_checkpoint", interrupt)
    assert main(_tiny(tmp_path)) == 130
    err = capsys.readouterr().err
    assert not (tmp_path / "out" / "checkpoint.npz").exists()
    assert err == ("bdtree: interrupted before its first checkpoint (one is written every block_size iterations); "
                   "rerunning the same command starts over\n")


@pytest.mark.parametrize("text, match", [
    ("method: {name: pg, num_particle: 5}", "unknown method keys \\['num_particle'\\]"),
    ("method: {name: magic}", "unknown method 'magic'"),
    ("method: {num_particles: 5}", "unknown method None"),
    ("method: {name: pg, num_particles: 5}\nnum_particles: 5", "\\['num_particles'\\] given both"),
    ("tempering: 4", "tempering must be a mapping"),
    ("tempering: {num_temperatures: 4, delta: 0.2}", "unknown tempering keys \\['delta'\\]"),
])
def test_bad_nested_config(tmp_path, text, match):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"dataset: iris\n{text}\n")
    with pytest.raises(ValueError, match=match):
        load_config(bad)


def test_set_overrides_a_nested_key(tmp_path):
    path = tmp_path / "nested.yaml"
    path.write_text("dataset: iris\nmethod: {name: pg, num_particles: 5}\ntempering: {num_temperatures: 2}\n")
    config = load_config(path)
    for item in ("num_particles=7", "delta_t=0.3", "num_temperatures=3", "seed=4"):
        _override(config, item)
    assert config["method"] == {"name": "pg", "num_particles": 7}
    assert config["tempering"] == {"num_temperatures": 3} and config["delta_t"] == 0.3 and config["seed"] == 4
    _override(config, "method=cgm")
    assert config["method"] == "cgm"


def _short_pg(tmp_path, name, text):
    path = tmp_path / f"{name}.yaml"
    path.write_text("dataset: iris\nsplit: 0.3\nmax_depth: 3\nnum_warmup: 20\nnum_samples: 20\nnum_chains: 1\n" + text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["run", str(path), "--output", str(tmp_path / name)]) == 0
    moved = [w for w in caught if issubclass(w.category, DeprecationWarning) and "is deprecated; use" in str(w.message)]
    assert not moved, [str(w.message) for w in moved]  # both spellings are accepted in YAML
    return json.loads((tmp_path / name / "metrics.json").read_text())


def test_nested_method_and_tempering_equal_the_flat_keys(tmp_path):
    flat = _short_pg(tmp_path, "flat", "method: pg\nnum_particles: 5\nproposal: prior\nnum_temperatures: 2\ndelta_t: 0.3\n")
    nested = _short_pg(tmp_path, "nested", "method: {name: pg, num_particles: 5, proposal: prior}\n"
                                           "tempering: {num_temperatures: 2, delta_t: 0.3}\n")
    assert nested["method"] == flat["method"] == "pg"
    for key in ("test_accuracy_per_chain", "leaves_mean", "map_tree", "acceptance_rate", "most_visited_tree"):
        assert nested[key] == flat[key]
