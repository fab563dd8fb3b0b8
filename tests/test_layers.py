"""Imports point down the layers and never form a cycle.

Every module of the installed ``bdtree_jax`` package (found with :func:`pkgutil.walk_packages`) is
parsed with :mod:`ast`; every ``import`` / ``from ... import`` of a ``bdtree_jax`` module counts,
at module level and inside functions alike, relative imports resolved.  Each module belongs to a
layer (:data:`LAYERS`, the table of docs/architecture.md) and may import only the layers listed in
:data:`MAY_IMPORT`; the face may import anything.

What an import statement counts as (the edges of the graph):

* ``import a.b.c`` and ``from a.b import c`` where ``a.b.c`` is a module: an edge to ``a.b.c``;
* ``from a.b import name`` where ``name`` is not a module: an edge to ``a.b`` (the module, or the
  package's ``__init__``, that defines or re-exports ``name``).

Python also runs the ``__init__`` of every parent package first; those implicit imports are not
edges.  A package's ``__init__`` may therefore import its own submodules (that is how a package
shows its API), and that alone is no cycle; a submodule that imports a name *from its package's
``__init__``* (``from . import name``, ``from bdtree_jax.pkg import name`` with ``name`` not a
submodule) does make an edge back to the ``__init__``, which closes a cycle and fails.  Cycles
fail everywhere, the face included.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil

import bdtree_jax

#: Layer of every module: a module belongs to the first entry that is its name or a package
#: above it (``bdtree_jax.kernels`` covers ``bdtree_jax.kernels.cgm``).
LAYERS = {
    "base": ("bdtree_jax._types", "bdtree_jax._devices", "bdtree_jax._files", "bdtree_jax._renamed", "bdtree_jax._gamma",
             "bdtree_jax._validate"),
    "tree": ("bdtree_jax.tree", "bdtree_jax.soft", "bdtree_jax.plots"),
    "data": ("bdtree_jax.data", "bdtree_jax.features", "bdtree_jax.datasets"),
    "model": ("bdtree_jax.priors", "bdtree_jax.likelihoods", "bdtree_jax.problem", "bdtree_jax.exact",
              "bdtree_jax.pcfg", "bdtree_jax.soft_models"),
    "kernels": ("bdtree_jax.kernels",),
    "numpyro": ("bdtree_jax.numpyro",),
    "driver": ("bdtree_jax.driver", "bdtree_jax._checkpoint"),
    "posterior": ("bdtree_jax.posterior", "bdtree_jax._arviz", "bdtree_jax.diagnostics"),
    "face": ("bdtree_jax.methods", "bdtree_jax.api", "bdtree_jax.estimators", "bdtree_jax.cli", "bdtree_jax._cli_keys",
             "bdtree_jax._cli_data", "bdtree_jax.inspection", "bdtree_jax"),
}

_BELOW_MODEL = ("model", "data", "tree", "base")
#: The layers each layer may import (its own included).
MAY_IMPORT = {
    "base": ("base",),
    "tree": ("tree", "base"),
    "data": ("data", "tree", "base"),
    "model": _BELOW_MODEL,
    "kernels": ("kernels",) + _BELOW_MODEL,
    "numpyro": ("numpyro", "kernels") + _BELOW_MODEL,
    "driver": ("driver", "kernels") + _BELOW_MODEL,
    "posterior": ("posterior",) + _BELOW_MODEL,
    "face": tuple(LAYERS),
}


def layer_of(module: str) -> str | None:
    """The layer of ``module`` (None if the table has none)."""
    for layer, names in LAYERS.items():
        if any(module == n or (n != "bdtree_jax" and module.startswith(n + ".")) for n in names):
            return layer
    return None


def package_modules() -> dict[str, tuple[str, bool]]:
    """``{module name: (source file, is a package)}`` of every module of ``bdtree_jax``."""
    out = {"bdtree_jax": (bdtree_jax.__file__, True)}
    for info in pkgutil.walk_packages(bdtree_jax.__path__, "bdtree_jax."):
        out[info.name] = (importlib.util.find_spec(info.name).origin, info.ispkg)
    return out


def _imported(module: str, is_package: bool, source: str, modules) -> set[str]:
    """The ``bdtree_jax`` modules that ``source`` (the text of ``module``) imports anywhere."""
    package = module if is_package else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "bdtree_jax")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] != "bdtree_jax":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in modules else base)
    out.discard(module)
    return out


def import_graph() -> dict[str, set[str]]:
    """``{module: modules it imports}`` over the whole package."""
    modules = package_modules()
    graph = {}
    for name, (path, is_package) in modules.items():
        with open(path, encoding="utf-8") as f:
            graph[name] = _imported(name, is_package, f.read(), modules)
    return graph


def upward_edges(graph: dict[str, set[str]]) -> list[str]:
    """Every import that leaves its layer's :data:`MAY_IMPORT`, and every module without a layer."""
    bad = []
    for module, targets in sorted(graph.items()):
        layer = layer_of(module)
        if layer is None:
            bad.append(f"{module} has no layer (add it to LAYERS)")
            continue
        for target in sorted(targets):
            to = layer_of(target)
            if to not in MAY_IMPORT[layer]:
                bad.append(f"{module} ({layer}) imports {target} ({to})")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: one path ``[a, b, ..., a]`` per strongly connected component of more
    than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(set(component))
    return [_cycle_path(graph, c) for c in components]


def _cycle_path(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A closed path through ``component`` (breadth first from its first module back to it)."""
    start = min(component)
    parent, frontier = {}, [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, node, start]
                if child not in parent:
                    parent[child] = node
                    nxt.append(child)
        frontier = nxt
    return sorted(component)


def test_checks_catch_an_upward_import_and_a_cycle():
    """The two checks on a made-up graph: a kernel importing the driver, and a three-module cycle
    (including a package's ``__init__`` that a submodule imports back)."""
    graph = {
        "bdtree_jax.tree": set(),
        "bdtree_jax.kernels.cgm": {"bdtree_jax.driver", "bdtree_jax.tree"},
        "bdtree_jax.driver": {"bdtree_jax.kernels.cgm"},
        "bdtree_jax.posterior": {"bdtree_jax.posterior.hard"},
        "bdtree_jax.posterior.hard": {"bdtree_jax.posterior.soft"},
        "bdtree_jax.posterior.soft": {"bdtree_jax.posterior"},
    }
    assert upward_edges(graph) == ["bdtree_jax.kernels.cgm (kernels) imports bdtree_jax.driver (driver)"]
    found = sorted(tuple(c) for c in cycles(graph))
    assert found == [
        ("bdtree_jax.driver", "bdtree_jax.kernels.cgm", "bdtree_jax.driver"),
        ("bdtree_jax.posterior", "bdtree_jax.posterior.hard", "bdtree_jax.posterior.soft", "bdtree_jax.posterior"),
    ]


def test_relative_imports_are_resolved():
    """``from . import x`` names the submodule ``x``; ``from . import name`` the package itself;
    function-level imports count."""
    modules = {"bdtree_jax.kernels": None, "bdtree_jax.kernels.cgm": None, "bdtree_jax.kernels.pg": None,
               "bdtree_jax.priors": None, "bdtree_jax.tree": None}
    source = (
        "from . import cgm\n"
        "from . import something_in_init\n"
        "from ..priors import TreePrior\n"
        "def f():\n"
        "    from ..tree import Tree\n"
        "    import bdtree_jax.kernels.cgm\n"
    )
    assert _imported("bdtree_jax.kernels.pg", False, source, modules) == {
        "bdtree_jax.kernels.cgm", "bdtree_jax.kernels", "bdtree_jax.priors", "bdtree_jax.tree"}
    assert _imported("bdtree_jax.kernels", True, "from .cgm import step\n", modules) == {"bdtree_jax.kernels.cgm"}


def test_imports_point_down():
    bad = upward_edges(import_graph())
    assert not bad, "imports against the layers:\n  " + "\n  ".join(bad)


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles:\n  " + "\n  ".join(" -> ".join(c) for c in found)
