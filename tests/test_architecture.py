"""The package's import graph stays one-way: packages in layers that show the pipeline, no import cycles between
modules, no module reaching into another's private names.

Every ``import`` counts, at module level, inside a function (an import inside a function dodges a cycle at import
time but keeps it in the design) and under ``if TYPE_CHECKING:`` (a type-only import is still a dependency a reader
must follow). A package and its own submodules are modules like any other: a registry package that imported a
submodule reading its registry back would be a cycle here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "gradeff"


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module ``name`` lives in (``gradeff.cell.run.run_cell`` → ``gradeff.cell.run``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> list[tuple[str, list[str], int]]:
    """(imported module, names taken from it, line) for every import of ``module`` that can run."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((alias.name, [], child.lineno) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                for alias in child.names:
                    # ``from gradeff import runner`` imports a module, not a name of gradeff.
                    if f"{base}.{alias.name}" in MODULES:
                        found.append((f"{base}.{alias.name}", [], child.lineno))
                    else:
                        found.append((base, [alias.name], child.lineno))
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return [(target, names, line) for target, names, line in found if target.split(".")[0] == "gradeff"]


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for module in MODULES:
        for target, _, _ in _imports(module):
            owner = _owner(target)
            if owner is not None and owner != module:
                graph[module].add(owner)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                strong(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strong(node)
    return found


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_graph_sees_imports_inside_functions_and_under_type_checking():
    graph = import_graph()
    # An import inside a function counts (gradeff.studies.hparams.task_default reads gradeff.axes.data's registry).
    assert "gradeff.axes.data" in graph["gradeff.studies.hparams"]
    # So does a type-only one (gradeff.axes.data names HParams for its annotations only).
    assert "gradeff.specs.profiles" in graph["gradeff.axes.data"]


def test_there_are_no_import_cycles():
    assert cycles(import_graph()) == []


def test_no_module_imports_another_modules_private_names():
    taken = [f"{module} takes {target}.{name} (line {line})" for module in MODULES
             for target, names, line in _imports(module) for name in names
             if name.startswith("_") and not name.startswith("__") and _owner(target) != module]
    assert taken == []


def test_private_names_are_seen_in_every_form_of_import():
    names = {(target, name) for target, taken, _ in _imports("gradeff.pytest.plugin") for name in taken}
    assert ("gradeff.pytest.options", "SETTINGS") in names  # a parenthesised import, over two lines
    assert any(target == "gradeff.pytest.progress" for target, _ in names)  # an import inside a function


# The floors of the house, bottom first: a package may import its own floor's packages (the cycle test keeps those
# one-way) and any floor below, never one above. The pipeline reads upwards: the specs every axis stands on, the
# meters, the axes, the studies that combine them, the records a cell leaves, the analysis of records, the gate and
# the report over them, the cell that trains and writes records, the scale-out that runs cells, the front doors.
FLOORS = (
    ("specs",),
    ("meters",),
    ("axes",),  # models, data, optim, methods, strategies
    ("studies",),
    ("records",),
    ("analysis",),
    ("gate", "report"),
    ("cell",),
    ("scale",),
    ("pytest", "cli", "__main__", "pytest_plugin"),
)
FLOOR = {name: level for level, names in enumerate(FLOORS) for name in names}


def _room(module: str) -> str | None:
    """The top-level entry of gradeff a module belongs to (``gradeff.cell.run`` → ``cell``); None for the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_top_level_entry_is_on_a_floor():
    rooms = {path.name.removesuffix(".py") for path in ROOT.iterdir()
             if path.name != "__pycache__" and (path.is_dir() or path.suffix == ".py") and path.name != "__init__.py"}
    assert rooms == set(FLOOR)


def test_imports_point_down_the_floors():
    """Type-only and in-function imports included; the package root (``__version__``, ``gradeff.load``) is the
    package's face and may be read from anywhere."""
    upward = []
    for module, targets in import_graph().items():
        here = _room(module)
        for target in targets:
            there = _room(target)
            if here is not None and there is not None and here != there and FLOOR[there] > FLOOR[here]:
                upward.append(f"{module} ({here}, floor {FLOOR[here]}) imports {target} ({there}, {FLOOR[there]})")
    assert upward == []


def test_the_floor_check_sees_an_upward_import():
    graph = {"gradeff.records.results": {"gradeff.analysis.stats"}}
    here, there = _room("gradeff.records.results"), _room(next(iter(graph["gradeff.records.results"])))
    assert FLOOR[there] > FLOOR[here]


def test_every_package_says_what_it_owns_and_what_it_may_import():
    for path in sorted(ROOT.iterdir()):
        if path.is_dir() and (path / "__init__.py").exists():
            doc = ast.get_docstring(ast.parse((path / "__init__.py").read_text(encoding="utf-8"))) or ""
            assert "May import:" in doc, f"gradeff/{path.name}/__init__.py: a docstring with 'May import:'"


def test_the_plugins_public_name_is_the_plugin_module():
    """``-p gradeff.pytest_plugin`` and the pytest11 entry point name the one plugin module, not a copy."""
    import importlib

    assert importlib.import_module("gradeff.pytest_plugin") is importlib.import_module("gradeff.pytest.plugin")
