"""The shape of the package: its layers imported in one order only, no import cycles among
synthlab modules, no module over 500 lines (a hint that a module does two things, not a rule
that splits it).

The import graph is read from the source with ``ast`` (nothing is imported): every ``import`` /
``from ... import`` of a synthlab module, at module level and inside functions alike, since a
lazy import is still a dependency. Imports under ``if TYPE_CHECKING:`` never run and are left
out; modules loaded by name (``importlib.import_module``) are not seen.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "synthlab"
# the repository's generators/ folder installs as synthlab.generators (pyproject.toml's package-dir)
GENERATORS = PACKAGE.parent / "generators"
# The layers of synthlab, lowest first (docs/architecture.md): a module may import its own layer
# and those before it, never one after. A layer is a folder of synthlab (generators/ installs as
# synthlab.generators); the modules outside the folders stand in the layer LOOSE names.
LAYERS = ("generators", "core", "model", "plan", "run", "analysis", "study", "plot", "cli")
# the package's face (__version__, the lazy public names, the checkout finder) and the commands
LOOSE = {
    "synthlab": "core",
    "synthlab._checkout": "core",
    "synthlab._version": "core",  # _version: written by the install
    "synthlab.cli": "cli",
    "synthlab.commands": "cli",
}
# a hint that a module does several things, in ruff-formatted lines (formatting spreads calls
# over lines); a module is split along its layer's concerns, never just to get under it
MAX_LINES = 750
# modules allowed over MAX_LINES for now; empty it as they are split
OVER_MAX_LINES_FOR_NOW: set[str] = set()


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package, synthlab.generators included."""
    out = {}
    for prefix, folder in (("synthlab", PACKAGE), ("synthlab.generators", GENERATORS)):
        for path in sorted(folder.rglob("*.py")):
            parts = (prefix, *path.relative_to(folder).with_suffix("").parts)
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST):
    """Every import statement that can run (module level, functions, classes, branches)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        children = list(ast.iter_child_nodes(node))
        if isinstance(node, ast.If) and _is_type_checking(node):
            children = node.orelse
        stack.extend(children)


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` loads: itself, or its longest prefix that is one of ours."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    """Module -> the synthlab modules it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [_known(a.name, modules) for a in node.names]
            else:
                if node.level:  # relative: from . / .. / .x import y
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    base_name = ".".join(base + ([node.module] if node.module else []))
                else:
                    base_name = node.module or ""
                # `from pkg import sub` imports the submodule; `from mod import name` the module
                targets = [
                    _known(f"{base_name}.{a.name}", modules)
                    if f"{base_name}.{a.name}" in modules
                    else _known(base_name, modules)
                    for a in node.names
                ]
            graph[mod] |= {t for t in targets if t is not None and t != mod}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_reader_sees_lazy_relative_and_submodule_imports():
    graph = import_graph()
    assert "synthlab.run.training" in graph["synthlab.study.scheduler"]  # inside Runner._train
    assert "synthlab.model.registry" in graph["synthlab.model"]  # from .registry import ...
    assert "synthlab.study.workers" in graph["synthlab.study.sweeping"]  # from synthlab.study import workers as ...


def layer(module: str) -> str | None:
    """The layer ``module`` stands in (one of LAYERS), None for a module placed in none."""
    if module in LOOSE:
        return LOOSE[module]
    top = ".".join(module.split(".")[:2])  # synthlab.<folder>
    return LOOSE.get(top) or (top[len("synthlab.") :] if top[len("synthlab.") :] in LAYERS else None)


def against_the_order(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a higher layer by a lower one, as 'a (layer) -> b (layer)'."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    return [
        f"{a} ({layer(a)}) -> {b} ({layer(b)})"
        for a in sorted(graph)
        for b in sorted(graph[a])
        if rank[layer(b) or ""] > rank[layer(a) or ""]
    ]


def test_every_module_stands_in_a_layer():
    unplaced = sorted(m for m in import_graph() if layer(m) is None)
    assert not unplaced, f"modules in no layer (a folder named in LAYERS, or LOOSE): {unplaced}"


def test_no_layer_imports_a_higher_one():
    bad = against_the_order(import_graph())
    assert not bad, "imports against the layer order " + " < ".join(LAYERS) + ": " + "; ".join(bad)


def test_the_order_check_catches_an_import_upwards():
    graph = {
        "synthlab.core.config": {"synthlab.run.training"},
        "synthlab.run.training": {"synthlab.core.config"},
        "synthlab.commands.train": {"synthlab.run.training"},
        "synthlab.run.rundir": {"synthlab"},
    }
    assert against_the_order(graph) == ["synthlab.core.config (core) -> synthlab.run.training (run)"]


def test_no_layer_shadows_a_public_name():
    """Importing synthlab.<layer>.x sets the attribute synthlab.<layer>: a layer named like a
    lazy public function (synthlab.results, synthlab.sweep) would replace it."""
    import synthlab

    assert not set(LAYERS) & set(synthlab.__all__)


def test_no_import_cycles():
    graph = import_graph()
    cycles = find_cycles(graph)
    described = ["; ".join(f"{a} -> {b}" for a in c for b in sorted(graph[a]) if b in c) for c in cycles]
    assert not cycles, "import cycles: " + " | ".join(described)


def test_no_module_over_500_lines():
    over = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES and rel not in OVER_MAX_LINES_FOR_NOW:
            over[rel] = n
    assert not over, f"modules over {MAX_LINES} lines: {over}"


MAX_DOCSTRING_LINES = 10


def test_no_module_docstring_over_10_lines():
    """A module docstring says what the module is for and where the rest is written; protocol
    specifications, algorithms and rationale live in docs/ (house style)."""
    over = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), str(path)), clean=False)
        if doc and len(doc.splitlines()) > MAX_DOCSTRING_LINES:
            over[path.relative_to(PACKAGE.parent).as_posix()] = len(doc.splitlines())
    assert not over, f"module docstrings over {MAX_DOCSTRING_LINES} lines (move the detail to docs/): {over}"


def _top_level_imports(path: Path) -> set[str]:
    """The top-level package names a file imports (any depth of the tree)."""
    names = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_generators_import_nothing_from_synthlab_or_torch():
    """The data layer stays pure numpy: synthlab builds on it, never the other way round."""
    for path in sorted(GENERATORS.rglob("*.py")):
        bad = _top_level_imports(path) & {"torch", "lightning"}
        assert not bad, f"{path.name} imports {bad}"
    for mod, deps in import_graph().items():
        if mod == "synthlab.generators" or mod.startswith("synthlab.generators."):
            outside = {d for d in deps if not d.startswith("synthlab.generators")}
            assert not outside, f"{mod} imports {outside}"


def test_the_graph_reader_names_generators_as_installed():
    graph = import_graph()
    assert "synthlab.generators.base" in graph["synthlab.generators"]  # from .base import ...
    assert "synthlab.generators.che.base" in graph["synthlab.generators.che.cs"]
    assert "synthlab.generators.base" in graph["synthlab.core.config"]  # from synthlab.generators.base import ...
    assert "synthlab.generators" in graph["synthlab.run.configs"]  # from synthlab import generators


def test_the_model_imports_no_training_sweeping_or_plotting():
    """synthlab.model is usable alone (notebooks build models): only itself, config and the
    plugin registry both registries share (synthlab.generators.plugins, standard library only)."""
    graph = import_graph()
    for mod, deps in graph.items():
        if mod == "synthlab.model" or mod.startswith("synthlab.model."):
            outside = {d for d in deps if not (d == "synthlab.model" or d.startswith("synthlab.model."))}
            assert outside <= {"synthlab.core.config", "synthlab.generators.plugins"}, f"{mod} imports {outside}"


def test_every_environment_variable_the_code_reads_is_in_interfaces_md():
    import re

    code = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    used = set(re.findall(r"SYNTHLAB_[A-Z_]+", code))
    doc = (PACKAGE.parent / "docs" / "interfaces.md").read_text()
    section = doc.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    assert used and used <= set(re.findall(r"`(SYNTHLAB_[A-Z_]+)`", section)), used
