import json
import os

import pytest

from bdtree_jax.cli import load_config, main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_run_config_writes_metrics_and_arviz(tmp_path, capsys):
    code = main([
        "run", os.path.join(ROOT, "configs", "quickstart.yaml"), "--output", str(tmp_path),
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


def test_every_shipped_config_is_valid():
    folder = os.path.join(ROOT, "configs")
    names = sorted(f for f in os.listdir(folder) if f.endswith(".yaml"))
    for data in ("iris", "bcw", "wine", "raisin", "cgm"):
        assert {f"{data}_cgm.yaml", f"{data}_hmc-df.yaml", f"{data}_hmc-dfi.yaml"} <= set(names)
    for name in names:
        load_config(os.path.join(folder, name))


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
    assert main(["run", os.path.join(ROOT, "configs", "quickstart.yaml"), "--set", "chains=2"]) == 2
