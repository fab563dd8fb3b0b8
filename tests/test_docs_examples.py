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
shrinks.  ``DELIBERATE_WARNINGS`` lists the blocks that show a warning on purpose (a deprecated
spelling); they must give it.

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
NO_RUN_LOOSE = re.compile(r"<!--\s*no-?run", re.IGNORECASE)
FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})\s*(?P<info>[^`]*)$")

# (page, block number counted from 1 among the page's python blocks, no-run ones included):
# the blocks whose fit gives bd.ConvergenceWarning today (the chains too short for their problem).
# Remove a pair when its block stops warning (the test then asks for it).
CONVERGENCE_WARNS: frozenset[tuple[str, int]] = frozenset({
})

# blocks that show a warning on purpose: (page, block) -> the warning's class name
DELIBERATE_WARNINGS: dict[tuple[str, int], str] = {
    ("docs/methods/index.md", 2): "DeprecationWarning",  # the old flat keywords, next to the new spelling
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
    for page, number in [*CONVERGENCE_WARNS, *DELIBERATE_WARNINGS]:
        blocks = python_blocks(page)
        assert 1 <= number <= len(blocks), (page, number)
        assert blocks[number - 1].no_run is None, (page, number)
    assert not set(CONVERGENCE_WARNS) & set(DELIBERATE_WARNINGS)


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
                deliberate = DELIBERATE_WARNINGS.get(where)
                start = len(log)
                code = compile(block.source, f"{page}:{block.line} (block {block.number})", "exec")
                exec(code, namespace)  # noqa: S102  (the docs' own examples)
                got = log[start:]
                convergence = [w for w in got if issubclass(w.category, bd.ConvergenceWarning)]
                others = [w for w in got if not issubclass(w.category, bd.ConvergenceWarning)]
                if deliberate is not None:
                    if not any(w.category.__name__ == deliberate for w in others):
                        problems.append(f"block {block.number} (line {block.line}) no longer gives its "
                                        f"{deliberate}: update DELIBERATE_WARNINGS")
                    others = [w for w in others if w.category.__name__ != deliberate]
                problems += [f"block {block.number} (line {block.line}) warns: {w.category.__name__}: "
                             f"{w.message}" for w in others]
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
