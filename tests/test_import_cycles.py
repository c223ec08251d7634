"""The house's import rules, read from the source with `ast` (issues 28 and 44; docs/contributing.md, "Layers"):
no circle among the project's modules, imports inside functions included; `export` -> `keras_vit`, never back;
inside `keras_vit`, no arrow back up to the command lines' folder. Nothing is imported: the modules are parsed as
text."""

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


# keras_vit's command lines: the modules that may import keras_vit.cli (their helpers' folder)
COMMAND_LINES = ("keras_vit.train", "keras_vit.pretrain", "keras_vit.cli")


def test_only_the_command_lines_import_their_helpers_folder():
    """What the package itself needs of a command line (quiet start-up, flag text) is in keras_vit.common: no
    module below the command lines, `keras_vit/__init__.py` included, imports keras_vit.cli (issue 44)."""
    graph = import_graph()
    up = sorted((source, target) for source, targets in graph.items() if source.startswith("keras_vit")
                and not source.startswith(COMMAND_LINES) for target in targets if target.startswith("keras_vit.cli"))
    assert up == [], up


def test_common_imports_nothing_else_of_keras_vit():
    graph = import_graph()
    out = sorted((source, target) for source, targets in graph.items() if source.startswith("keras_vit.common")
                 for target in targets if target.startswith("keras_vit") and not target.startswith("keras_vit.common"))
    assert out == [], out


def _module_level_names(path):
    """(names a module defines at module level, names it imports at module level)."""
    defined, imported = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imported |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return defined, imported - defined


def _from_imports(packages=PACKAGES + ("tests",)):
    """(importing file, module, name, line) of every `from module import name` of a project module."""
    modules = project_modules()
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module in modules and not node.level:
                    for alias in node.names:
                        yield path.relative_to(ROOT), node.module, alias.name, node.lineno


def test_one_home_per_name():
    """A name is imported from the module that defines it, not through another module that imported it ("names
    too" facades, issue 44). A package's `__init__` is its public front and may gather names; a module may not."""
    modules = project_modules()
    names = {module: _module_level_names(path) for module, path in modules.items() if path.name != "__init__.py"}
    through = sorted(f"{path}:{line}: {name} from {module}" for path, module, name, line in _from_imports()
                     if module in names and name not in names[module][0] and f"{module}.{name}" not in modules)
    assert through == [], "import these from the module that defines them:\n" + "\n".join(through)


def test_no_private_helper_is_imported_by_another_module_of_the_library():
    """A helper another module of keras_vit, export or benchmarks uses is public in its own module (issue 44)."""
    private = sorted(f"{path}:{line}: {name} from {module}" for path, module, name, line in _from_imports(PACKAGES)
                     if name.startswith("_") and not name.startswith("__")
                     and f"{module}.{name}" not in project_modules())
    assert private == [], private
