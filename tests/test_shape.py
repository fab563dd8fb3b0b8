"""The package's shape stays within the limits a maintainer can hold in mind: no module over 700
lines, no function with more than 20 parameters (the scikit-learn estimators' ``__init__`` must
spell every parameter out, and ``sample`` spells out every run option of ``RunOptions`` as they do,
so these count only their other parameters), and ``sample`` short enough to read at a glance."""

from __future__ import annotations

import ast
import pathlib

import bdtree_jax

PACKAGE = pathlib.Path(bdtree_jax.__file__).parent
MAX_MODULE_LINES = 700
MAX_PARAMETERS = 20
MAX_SAMPLE_LINES = 60


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py"))


def _functions(tree):
    """(qualified name, node) of every function and method, nested ones included."""

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    yield name, child
                yield from visit(child, name + ".")
            else:
                yield from visit(child, prefix)

    yield from visit(tree, "")


def _n_parameters(fn) -> int:
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    return len([n for n in names if n not in ("self", "cls")])


def _is_estimator_init(path: pathlib.Path, qualname: str) -> bool:
    return path.parent.name == "estimators" and qualname.endswith(".__init__")


def test_no_module_over_the_line_limit():
    long = {str(p.relative_to(PACKAGE)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def _n_own_parameters(path: pathlib.Path, qualname: str, fn) -> int:
    """Parameters but, for ``api.sample``, those that mirror a ``RunOptions`` field."""
    if path.name == "api.py" and qualname == "sample":
        import dataclasses

        run_options = {f.name for f in dataclasses.fields(bdtree_jax.RunOptions)}
        a = fn.args
        return len([p for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in run_options])
    return _n_parameters(fn)


def test_no_function_with_too_many_parameters():
    wide = []
    for path in _modules():
        for qualname, fn in _functions(ast.parse(path.read_text())):
            n = _n_own_parameters(path, qualname, fn)
            if n > MAX_PARAMETERS and not _is_estimator_init(path, qualname):
                wide.append(f"{path.relative_to(PACKAGE)}:{qualname} ({n})")
    assert not wide, f"functions with more than {MAX_PARAMETERS} parameters: {wide}"


def test_sample_is_short():
    import inspect

    source = inspect.getsource(bdtree_jax.sample)
    assert len(source.splitlines()) < MAX_SAMPLE_LINES, f"sample has {len(source.splitlines())} lines"


def test_the_checks_can_fail(tmp_path):
    """The counting above sees a wide function and a long module when there is one."""
    wide = ast.parse("def f(" + ", ".join(f"a{i}" for i in range(MAX_PARAMETERS + 1)) + "): pass")
    (name, fn), = list(_functions(wide))
    assert _n_parameters(fn) == MAX_PARAMETERS + 1
    method = ast.parse("class C:\n    def m(self, a, *, b): pass")
    assert [_n_parameters(f) for _, f in _functions(method)] == [2]
