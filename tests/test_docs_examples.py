"""Every ```python block of README.md and of the docs site (docs/**/*.md) runs as written.

The convention (docs/index.md's "Examples run as written" says it for readers):

* a page's python blocks run in order in one namespace, as the cells of a notebook do: a later
  block uses the names an earlier one defined (``bd``, ``X``, ``post``, ...);
* a block that is deliberately not runnable (a signature sketch, a multi-process script, a file
  the reader must already have) has the HTML comment ``<!-- no-run: why -->`` on the line before
  its fence.  It renders as nothing (on GitHub and on the mkdocs site) and must say why.

The blocks run in a temporary working directory (files they write do not litter the clone), every
warning recorded and any warning a failure of the page (reported with its block, after the page has
run), except :class:`bdtree_jax.ConvergenceWarning`:
``CONVERGENCE_WARNS`` lists the (page, block) pairs known to warn today, and a page fails both
when a block outside the list warns and when a listed block no longer does, so the list only
shrinks.  ``EXPLAINED_WARNINGS`` lists the blocks that show a warning on purpose (a deprecated
spelling) or whose page explains it; they must give it.  A ``DeprecationWarning`` raised inside
another library (not by the example's own line) is left out, as Python's default filters hide it
from the user too.

Marked ``docs_examples`` (deselected by default, as ``slow`` is): CI's docs job runs them after the
site's strict build (``pytest -m docs_examples``).  The cheap checks of the convention itself (the
markers, the lists naming real blocks) run by default.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NO_RUN = re.compile(r"^\s*<!--\s*no-run:\s*(?P<why>\S.*?)\s*-->\s*$")
NO_RUN_LOOSE = re.compile(r"^\s*<!--\s*no-?run", re.IGNORECASE)  # prose may quote the marker in backticks
FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})\s*(?P<info>[^`]*)$")

# (page, block number counted from 1 among the page's python blocks, no-run ones included):
# the blocks whose fit gives bd.ConvergenceWarning today (the chains too short for their problem).
# Remove a pair when its block stops warning (the test then asks for it).
CONVERGENCE_WARNS: frozenset[tuple[str, int]] = frozenset({
    ("README.md", 1), ("README.md", 2),
    ("docs/chains-devices.md", 1),
    ("docs/files.md", 1),
    ("docs/getting-started.md", 1), ("docs/getting-started.md", 3),
    ("docs/inspection.md", 1),  # 2 x 100 draws of 20 trees (a categorical feature), to keep the page quick
    ("docs/index.md", 1),
    ("docs/memory.md", 2),
    ("docs/methods/bart.md", 1), ("docs/methods/bart.md", 2),  # 2: DART
    ("docs/methods/bart.md", 3),  # multiclass on iris: 2 x 100 draws of 3 x 20 trees, a few seconds
    ("docs/methods/bart-counts.md", 1),  # 2 x 100 draws of 20 trees, to keep the page a few seconds
    ("docs/methods/bart-monotone.md", 1),  # 2 x 100 draws of 20 trees, to keep the page a few seconds
    # new with survival BART (#41): its imputed log times slow the log-likelihood's mixing (the
    # page gives the diagnostics and what to do)
    ("docs/methods/bart-survival.md", 1),
    # new with heteroskedastic BART (#41): the log-likelihood of a variance forest mixes slowly;
    # the page's short example says so
    ("docs/methods/bart-variance.md", 1),
    ("docs/methods/bcf.md", 1),  # 2 x 200 draws of 50 + 20 trees: a few seconds, the log-likelihood's ESS < 400
    ("docs/methods/cgm.md", 1), ("docs/methods/cgm.md", 2),
    ("docs/methods/index.md", 1), ("docs/methods/index.md", 2),
    ("docs/methods/pg.md", 1),
    ("docs/methods/rjhmc.md", 1),
    ("docs/methods/smc.md", 1),
    ("docs/methods/tempering.md", 1),
    ("docs/methods/wu.md", 1),
    ("docs/plots.md", 1), ("docs/plots.md", 3),  # a single tree on penguins; BART, 2 x 200 draws of 20 trees
    ("docs/theory/pinball.md", 1),
})

# blocks that show a warning on purpose or that the page explains: (page, block) -> the
# (class name, message regex) pairs each of which must be given (and may be given several times)
EXPLAINED_WARNINGS: dict[tuple[str, int], tuple[tuple[str, str], ...]] = {
    # the old flat keywords, next to the new spelling
    ("docs/methods/index.md", 2): (("DeprecationWarning", r"num_temperatures|proposal"),),
    # az.loo on a single tree's posterior: PSIS's Pareto k is high for some rows (the pages say so)
    ("docs/getting-started.md", 4): (("UserWarning", r"shape parameter of Pareto distribution is greater"),
                                     ("RuntimeWarning", r"overflow encountered in exp")),
    ("docs/methods/bart.md", 1): (("UserWarning", r"shape parameter of Pareto distribution is greater"),),
    ("docs/plots.md", 3): (("UserWarning", r"shape parameter of Pareto distribution is greater"),),
}


@dataclass(frozen=True)
class Block:
    page: str  # path relative to the repository root
    number: int  # 1-based among the page's python blocks
    line: int  # 1-based line of the opening fence
    source: str
    no_run: str | None  # the reason, for a block marked <!-- no-run: ... -->


def pages() -> list[str]:
    """README.md and every markdown page of the docs site, repository-relative."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p.relative_to(ROOT).as_posix() for p in found]


def python_blocks(page: str) -> list[Block]:
    """The page's fenced ```python blocks, dedented by their fence's indentation."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if m is None or not m["ticks"]:
            i += 1
            continue
        indent, ticks, info = m["indent"], m["ticks"], m["info"].strip()
        close = re.compile(rf"^[ \t]*{re.escape(ticks[0])}{{{len(ticks)},}}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        if info.split(" ")[0] == "python":
            body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:j]]
            prev = next((ln for ln in reversed(lines[:i]) if ln.strip()), "")
            marker = NO_RUN.match(prev)
            blocks.append(Block(page, len(blocks) + 1, i + 1, "\n".join(body) + "\n",
                                marker["why"] if marker else None))
        i = j + 1
    return blocks


def runnable_pages() -> list[str]:
    return [p for p in pages() if any(b.no_run is None for b in python_blocks(p))]


# ---------------------------------------------------------------- the convention (default run)


def test_there_are_examples_and_few_exemptions():
    blocks = [b for p in pages() for b in python_blocks(p)]
    assert len(blocks) >= 30
    exempt = [b for b in blocks if b.no_run is not None]
    assert len(exempt) <= 5, [(b.page, b.number) for b in exempt]


@pytest.mark.parametrize("page", pages())
def test_every_no_run_marker_says_why_and_precedes_a_python_block(page):
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    marked = {b.line for b in python_blocks(page) if b.no_run is not None}
    for k, line in enumerate(lines):
        if not NO_RUN_LOOSE.search(line):
            continue
        assert NO_RUN.match(line), f"{page}:{k + 1}: write `<!-- no-run: why -->` alone on its line"
        nxt = next(n for n in range(k + 1, len(lines)) if lines[n].strip())
        assert nxt + 1 in marked, f"{page}:{k + 1}: the marker is not right before a ```python fence"


def test_the_warning_lists_name_runnable_blocks():
    for page, number in [*CONVERGENCE_WARNS, *EXPLAINED_WARNINGS]:
        blocks = python_blocks(page)
        assert 1 <= number <= len(blocks), (page, number)
        assert blocks[number - 1].no_run is None, (page, number)
    for explained in EXPLAINED_WARNINGS.values():
        for category, pattern in explained:
            assert category.endswith("Warning") and re.compile(pattern), (category, pattern)


# ---------------------------------------------------------------- the examples (docs_examples)


@pytest.mark.docs_examples
@pytest.mark.xla_optimized
@pytest.mark.parametrize("page", runnable_pages())
def test_page_examples_run_as_written(page, tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    import bdtree_jax as bd
    from bdtree_jax.posterior import streaming

    monkeypatch.chdir(tmp_path)
    # what the examples may change globally (docs/memory.md sets both): restored afterwards
    monkeypatch.setattr(streaming, "PREDICT_BUDGET_BYTES", streaming.PREDICT_BUDGET_BYTES)
    environ = dict(os.environ)
    namespace: dict = {"__name__": "__main__"}
    problems: list[str] = []
    try:
        with warnings.catch_warnings(record=True) as log:
            # every warning recorded (and any but ConvergenceWarning a failure), so that one run
            # reports every block's warnings
            warnings.simplefilter("always")
            for block in python_blocks(page):
                if block.no_run is not None:
                    continue
                where = (page, block.number)
                start = len(log)
                code = compile(block.source, f"{page}:{block.line} (block {block.number})", "exec")
                exec(code, namespace)  # noqa: S102  (the docs' own examples)
                got = [w for w in log[start:] if w.filename == code.co_filename
                       or not issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning))]
                convergence = [w for w in got if issubclass(w.category, bd.ConvergenceWarning)]
                others = [w for w in got if not issubclass(w.category, bd.ConvergenceWarning)]
                for category, pattern in EXPLAINED_WARNINGS.get(where, ()):
                    ours = [w for w in others if w.category.__name__ == category and re.search(pattern, str(w.message))]
                    if not ours:
                        problems.append(f"block {block.number} (line {block.line}) no longer gives a {category} "
                                        f"matching {pattern!r}: update EXPLAINED_WARNINGS")
                    others = [w for w in others if w not in ours]
                seen = set()
                for w in others:
                    text = (f"block {block.number} (line {block.line}) warns: {w.category.__name__}: "
                            f"{w.message} ({w.filename}:{w.lineno})")
                    if text not in seen:
                        seen.add(text)
                        problems.append(text)
                if convergence and where not in CONVERGENCE_WARNS:
                    problems.append(f"block {block.number} (line {block.line}) gives a ConvergenceWarning "
                                    f"(add {where!r} to CONVERGENCE_WARNS, or make it converge): "
                                    f"{convergence[0].message}")
                if not convergence and where in CONVERGENCE_WARNS:
                    problems.append(f"block {block.number} (line {block.line}) no longer gives a "
                                    f"ConvergenceWarning: remove {where!r} from CONVERGENCE_WARNS")
    finally:
        plt.close("all")
        os.environ.clear()
        os.environ.update(environ)
    assert not problems, f"{page}:\n" + "\n".join(problems)
