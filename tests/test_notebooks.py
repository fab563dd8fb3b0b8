"""The notebooks are saved executed, install the way Colab can, and the quickstart's run converged.

Executing them is CI's notebook job (``pytest --nbmake notebooks/``); these checks read the saved
files only (JSON, no code runs), so they stay in the default test run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bdtree_jax.diagnostics import ESS_MIN, RHAT_MAX

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _text(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _output_text(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append("".join(out.get("text", "")))
        for mime in ("text/plain", "text/html"):
            parts.append("".join(out.get("data", {}).get(mime, "")))
        parts.append("".join(out.get("traceback", [])))
    return "\n".join(parts)


def test_there_are_notebooks():
    assert {p.name for p in NOTEBOOKS} >= {"quickstart.ipynb", "soft_tree_user_model.ipynb",
                                           "random_intercept_bart.ipynb", "heteroskedastic_bart.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_saved_executed_in_order_without_errors(path):
    code = [c for c in _cells(path) if c["cell_type"] == "code"]
    counts = [c.get("execution_count") for c in code]
    assert all(isinstance(n, int) for n in counts), f"{path.name}: a code cell was not executed: {counts}"
    assert counts == sorted(counts) and len(set(counts)) == len(counts), f"{path.name}: run out of order: {counts}"
    for c in code:
        assert not any(o.get("output_type") == "error" for o in c.get("outputs", [])), _text(c)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_colab_badge_and_guarded_install_by_name(path):
    cells = _cells(path)
    assert cells[0]["cell_type"] == "markdown"
    assert "colab-badge.svg" in _text(cells[0]) and "Upload notebook" in _text(cells[0])
    install = _text(cells[1])
    assert cells[1]["cell_type"] == "code"
    assert 'if importlib.util.find_spec("bdtree_jax") is None:' in install  # CI does not reinstall
    assert re.search(r"^\s+%pip install -q bdtree_jax$", install, re.M)  # from the package index, by name
    assert "bdtree_jax-0.1.0-py3-none-any.whl" in install  # the wheel-upload alternative
    assert "<this repository>" not in json.dumps(cells)


def test_quickstart_shows_its_diagnostics_and_explains_the_warning():
    cells = _cells(next(p for p in NOTEBOOKS if p.name == "quickstart.ipynb"))
    fit = next(i for i, c in enumerate(cells) if c["cell_type"] == "code" and "clf.fit(" in _text(c))
    outputs = "\n".join(_output_text(c) for c in cells if c["cell_type"] == "code")
    assert "RuntimeWarning" not in outputs and "TqdmWarning" not in outputs
    rhat = [float(v) for v in re.findall(r"R-hat (\d+\.\d+)", outputs)]
    ess = [float(v) for v in re.findall(r"bulk ESS (\d+)", outputs)]
    # log_lik and n_leaves, as the fit checked them (and predictive_mean, when saved by a newer version)
    assert len(rhat) == len(ess) in (2, 3)
    converged = max(rhat) <= RHAT_MAX and min(ess) >= ESS_MIN
    warned = "ConvergenceWarning" in _output_text(cells[fit])
    assert warned == (not converged)  # the saved run's warning matches its numbers
    if not converged:  # then the next markdown cell explains R-hat, ESS and the warning
        explanation = _text(next(c for c in cells[fit + 1:] if c["cell_type"] == "markdown"))
        assert "R̂" in explanation and "ESS" in explanation and "ConvergenceWarning" in explanation


def _saved_outputs(name: str) -> str:
    cells = _cells(next(p for p in NOTEBOOKS if p.name == name))
    return "\n".join(_output_text(c) for c in cells if c["cell_type"] == "code")


def test_random_intercept_bart_saved_run_covers_the_sd_and_matches_the_reference():
    outputs = _saved_outputs("random_intercept_bart.ipynb")
    assert "full settings" in outputs  # saved from the full settings, not CI's small ones
    lo, hi = map(float, re.search(r"sd: posterior mean \d+\.\d+, 90% interval \[(\d+\.\d+), (\d+\.\d+)\]",
                                  outputs).groups())
    assert lo <= 0.5 <= hi
    ratio = float(re.search(r"given the true intercepts \d+\.\d+; ratio (\d+\.\d+)", outputs).group(1))
    assert ratio <= 1.10  # the "RMSE of f within 10 % of BARTRegressor given the true intercepts"


def test_heteroskedastic_bart_saved_run_beats_constant_sigma_on_held_out_rows():
    outputs = _saved_outputs("heteroskedastic_bart.ipynb")
    assert "full settings" in outputs
    assert "tree updates {'f': 'mh', 'log_sd': 'mh'}" in outputs  # the general Metropolis–Hastings path ran
    het, const = map(float, re.search(r"per row: heteroskedastic (-?\d+\.\d+), constant sigma (-?\d+\.\d+)",
                                      outputs).groups())
    assert het > const
