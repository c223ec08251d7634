"""The house's import rules, read from the source with `ast` (issue 28; ../shared/STYLE.md, "The house
as it stands"): no circle among the project's modules, imports inside functions included, and `export`
-> `keras_vit`, never back. Nothing is imported: the modules are parsed as text."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("keras_vit", "export", "benchmarks")


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def project_modules():
    """{module name: path} of every Python module of the project's packages."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            modules[_module_name(path)] = path
    return modules


def _resolve(name, modules):
    """The project module that `import name` loads (a name inside a module resolves to that module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module, path, modules):
    """The project modules `module` imports anywhere in its source (module level and inside functions),
    each with the line of its first import. `from package import name` counts `package.name` where that
    is a module, else `package` (its `__init__`)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found = {}

    def add(name, line):
        target = _resolve(name, modules)
        if target and target != module:
            found.setdefault(target, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            for alias in node.names:
                full = f"{prefix}.{alias.name}"
                add(full if full in modules else prefix, node.lineno)
    return found


def import_graph():
    modules = project_modules()
    return {module: imports_of(module, path, modules) for module, path in modules.items()}


def _ancestors(module):
    """A package's `__init__` runs before any module inside it: `a.b.c` imports `a.b` and `a` first."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan), each sorted. Edges from a
    package's `__init__` to its own submodules are kept; the implicit edge from a submodule to its
    parent packages is not (Python runs the parent first, so that is not a circle in itself)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def strongconnect(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target in _ancestors(node):
                continue
            if target not in index:
                strongconnect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strongconnect(node)
    return found


def _describe(component, graph):
    members = set(component)
    lines = [
        f"  {source} -> {target} (line {line})"
        for source in component
        for target, line in sorted(graph[source].items())
        if target in members
    ]
    return "\n".join(lines)


def test_the_parser_sees_imports_inside_functions_and_relative_ones(tmp_path):
    source = "import os\nfrom . import b\n\ndef f():\n    from keras_vit.models import vit\n    import export.tflite\n"
    path = tmp_path / "a.py"
    path.write_text(source)
    modules = {"keras_vit.a": path, "keras_vit.b": path, "keras_vit.models": path,
               "keras_vit.models.vit": path, "export.tflite": path, "export": path}
    found = imports_of("keras_vit.a", path, modules)
    assert found == {"keras_vit.b": 2, "keras_vit.models.vit": 5, "export.tflite": 6}


def test_the_cycle_finder_finds_a_circle_and_not_a_chain():
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {}}) == []
    # a submodule naming its parent package is no circle; the package's __init__ naming it is an edge
    assert cycles({"p": {"p.m": 1}, "p.m": {"p": 1}}) == []


def test_the_graph_holds_the_projects_modules():
    graph = import_graph()
    assert {"keras_vit", "keras_vit.models.vit", "export.tflite", "export.verify"} <= set(graph)
    assert "keras_vit.layers" in graph["keras_vit"]


def test_no_import_cycle_among_project_modules():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import circles (imports inside functions count):\n" + "\n\n".join(
        _describe(component, graph) for component in found)


@pytest.mark.parametrize("package", ["keras_vit"])
def test_keras_vit_never_names_export_or_benchmarks(package):
    graph = import_graph()
    back = {(source, target) for source, targets in graph.items() if source.split(".")[0] == package
            for target in targets if target.split(".")[0] in ("export", "benchmarks")}
    assert not back, back
