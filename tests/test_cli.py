import json
import os
import warnings

import pytest

from bdtree_jax.cli import _override, bundled_configs, load_config, main

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bdtree_jax", "configs")


def test_run_config_writes_metrics_and_arviz(tmp_path, capsys):
    code = main([
        "run", os.path.join(CONFIGS, "quickstart.yaml"), "--output", str(tmp_path),
        "--set", "num_warmup=100", "--set", "num_samples=200", "--set", "num_chains=2", "--set", "max_depth=3",
    ])
    assert code == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["n_test"] == 45 and metrics["test_accuracy_pooled"] > 0.85
    assert len(metrics["test_accuracy_per_chain"]) == 2
    for name in ("posterior.nc", "posterior.pkl", "trace.png", "map_tree.png"):
        assert (tmp_path / name).stat().st_size > 0
    import arviz as az

    idata = az.from_netcdf(str(tmp_path / "posterior.nc"))
    assert "n_leaves" in idata["posterior"]
    assert '"test_accuracy_mean"' in capsys.readouterr().out


def test_run_a_bundled_config_by_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # outside the checkout: the name is found in the installed package
    assert main(["run", "quickstart", "--set", "num_warmup=50", "--set", "num_samples=20",
                 "--set", "num_chains=2"]) == 0
    metrics = json.loads((tmp_path / "runs" / "quickstart" / "metrics.json").read_text())
    assert metrics["name"] == "quickstart" and metrics["num_draws_per_chain"] == 20
    assert "wrote runs/quickstart/" in capsys.readouterr().out
    assert load_config("quickstart.yaml") == load_config(os.path.join(CONFIGS, "quickstart.yaml"))


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
    assert main(["configs", "no_such_config"]) == 2
    assert "bundled configs: [" in capsys.readouterr().err


def test_bad_config_keys(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: iris\nnum_chain: 3\n")
    with pytest.raises(ValueError, match="unknown config keys \\['num_chain'\\]"):
        load_config(bad)
    assert main(["run", str(bad)]) == 2
    assert "num_chain" in capsys.readouterr().err
    bad.write_text("dataset: iris\nmethod: magic\n")
    with pytest.raises(ValueError, match="unknown method"):
        load_config(bad)
    assert main(["run", os.path.join(CONFIGS, "quickstart.yaml"), "--set", "chains=2"]) == 2
    assert main(["run", "no_such_config"]) == 2
    assert "neither a YAML file nor a bundled config" in capsys.readouterr().err


@pytest.mark.parametrize("text, match", [
    ("method: {name: pg, num_particle: 5}", "unknown method keys \\['num_particle'\\]"),
    ("method: {name: magic}", "unknown method 'magic'"),
    ("method: {num_particles: 5}", "unknown method None"),
    ("method: {name: pg, num_particles: 5}\nnum_particles: 5", "\\['num_particles'\\] given both"),
    ("tempering: 4", "tempering must be a mapping"),
    ("tempering: {n_temperatures: 4, delta: 0.2}", "unknown tempering keys \\['delta'\\]"),
])
def test_bad_nested_config(tmp_path, text, match):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"dataset: iris\n{text}\n")
    with pytest.raises(ValueError, match=match):
        load_config(bad)


def test_set_overrides_a_nested_key(tmp_path):
    path = tmp_path / "nested.yaml"
    path.write_text("dataset: iris\nmethod: {name: pg, num_particles: 5}\ntempering: {n_temperatures: 2}\n")
    config = load_config(path)
    for item in ("num_particles=7", "delta_t=0.3", "n_temperatures=3", "seed=4"):
        _override(config, item)
    assert config["method"] == {"name": "pg", "num_particles": 7}
    assert config["tempering"] == {"n_temperatures": 3} and config["delta_t"] == 0.3 and config["seed"] == 4
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
    flat = _short_pg(tmp_path, "flat", "method: pg\nnum_particles: 5\nproposal: prior\nn_temperatures: 2\ndelta_t: 0.3\n")
    nested = _short_pg(tmp_path, "nested", "method: {name: pg, num_particles: 5, proposal: prior}\n"
                                           "tempering: {n_temperatures: 2, delta_t: 0.3}\n")
    assert nested["method"] == flat["method"] == "pg"
    for key in ("test_accuracy_per_chain", "leaves_mean", "map_tree", "acceptance_rate", "most_visited_tree"):
        assert nested[key] == flat[key]
