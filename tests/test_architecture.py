"""The package's import graph stays one-way: no import cycles between modules, no module reaching into another's
private names.

Every ``import`` counts, at module level or inside a function (an import inside a function dodges a cycle at import
time but keeps it in the design); imports under ``if TYPE_CHECKING:`` do not, since they never run. A package and its
own submodules are one unit here: a registry package (``gradeff.models``) imports the submodule that builds an entry
when it is asked for, and that submodule reads the package's registry.
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
    """The module ``name`` lives in (``gradeff.runner.run_cell`` → ``gradeff.runner``)."""
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
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
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


def _one_unit(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for module in MODULES:
        for target, _, _ in _imports(module):
            owner = _owner(target)
            if owner is not None and not _one_unit(module, owner):
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


def test_the_graph_sees_imports_inside_functions_and_skips_type_checking_ones():
    graph = import_graph()
    # gradeff.distributed imports gradeff.runner only for type hints; gradeff.runner imports it at run time.
    assert "gradeff.distributed" in graph["gradeff.runner"]
    assert "gradeff.runner" not in graph["gradeff.distributed"]
    # An import inside a function counts (gradeff.hparams.task_default reads gradeff.data's registry).
    assert "gradeff.data" in graph["gradeff.hparams"]


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


# Names outside gradeff.pytest that are its modules: the plugin's public name and the modules' earlier names.
PYTEST_LAYER_NAMES = {"gradeff.pytest_plugin": "gradeff.pytest.plugin",
                      **{f"gradeff.{name}": f"gradeff.pytest.{name}"
                         for name in ("options", "fixtures", "summary", "gate", "progress", "dryrun")}}


def test_the_pytest_layer_is_imported_by_nothing_below_it():
    """gradeff.pytest reads the cell and the core; the core never reads it back (only the names that are its
    modules, each importing nothing but the module it is)."""
    graph = import_graph()
    upward = sorted(f"{module} imports {target}" for module, targets in graph.items()
                    if not _one_unit(module, "gradeff.pytest") and module not in PYTEST_LAYER_NAMES
                    for target in targets if _one_unit(target, "gradeff.pytest"))
    assert upward == []
    assert {name: graph[name] for name in PYTEST_LAYER_NAMES} == {
        name: {module} for name, module in PYTEST_LAYER_NAMES.items()}


def test_an_earlier_name_of_a_pytest_layer_module_is_that_module():
    import importlib

    for name, module in PYTEST_LAYER_NAMES.items():
        assert importlib.import_module(name) is importlib.import_module(module), name
