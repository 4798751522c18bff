"""The import graph of `inspector/`: DESIGN.md's layers, imports pointing down only, no cycles.

Every `import` statement counts, those inside functions too: a local import that dodges a
cycle at load time is still a cycle in the design.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "inspector"

# DESIGN.md "Layers": a module may import its own layer and those below it, never above.
LAYERS = [
    ("errors", {"inspector.core.errors"}),
    ("core", {"inspector.core"}),
    ("io", {"inspector.io"}),
    ("public API", {"inspector", "inspector.examples"}),
    ("ui", {"inspector.ui"}),
    ("entry points", {"inspector.main", "inspector.cli", "inspector.__main__"}),
]
# The ground floor of the core: what every other core module reads leaves and devices with.
GROUND = {"inspector.core.caches": set(),
          "inspector.core.devices": {"inspector.core.errors"},
          "inspector.core.leaves": {"inspector.core.caches", "inspector.core.devices",
                                    "inspector.core.errors"}}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path, modules: dict) -> set[str]:
    """The inspector modules `path` imports (`from inspector import examples` is a module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                     else node.module for a in node.names]
        else:
            continue
        out |= {n for n in names if n == "inspector" or n.startswith("inspector.")}
    return out


def _layer(module: str) -> int:
    best = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (rank, len(prefix))
    assert best is not None, f"{module} is in no layer of DESIGN.md"
    return best[0]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        targets = {t for t in _imports(path, modules) if t != name}
        # `import inspector.core.x` also runs the packages above it; those are the lazy
        # `__init__`s of the public API and hold no edges of their own worth following.
        graph[name] = {t for t in targets if t in modules}
    return graph


def test_every_import_points_down_the_layers():
    upward = []
    for module, targets in _graph().items():
        for target in targets:
            if _layer(target) > _layer(module):
                upward.append(f"{module} ({LAYERS[_layer(module)][0]}) imports {target} "
                              f"({LAYERS[_layer(target)][0]})")
    assert not upward, "\n".join(sorted(upward))


def test_the_core_ground_floor_imports_only_what_is_below_it():
    graph = _graph()
    for module, allowed in GROUND.items():
        assert graph[module] <= allowed, (module, graph[module] - allowed)
    assert graph["inspector.core.errors"] == set()


def test_the_import_graph_has_no_cycle():
    graph = _graph()
    # Package `__init__`s re-export lazily by name and import nothing of their own at load.
    graph = {m: {t for t in ts if t not in ("inspector",)} for m, ts in graph.items()}
    cycles, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not cycles, "\n".join(cycles)


def test_the_graph_sees_real_edges():
    # The walk finds the imports it checks (a parser that found none would pass the above).
    graph = _graph()
    assert "inspector.core.leaves" in graph["inspector.core.describe"]
    assert "inspector.core.op" in graph["inspector.core.runner"]
    assert any(t.startswith("inspector.ui") for t in graph["inspector.main"])


# The entry points that serve the app; every other module outside `inspector.ui` (the core, io,
# the public API, the command line's report subcommands and the hosts' process protocol) works
# without Panel and never imports the UI.
UI_ENTRY_POINTS = {"inspector.main", "inspector.cli.serve"}
MAX_LINES = 400  # issue 27: "No file in `inspector/` over 400 lines"


def test_only_the_app_entry_points_import_the_ui():
    found = sorted(f"{module} imports {target}" for module, targets in _graph().items()
                   if not (module == "inspector.ui" or module.startswith("inspector.ui."))
                   and module not in UI_ENTRY_POINTS
                   for target in targets if target.startswith("inspector.ui"))
    assert not found, "\n".join(found)
    assert any(t.startswith("inspector.ui") for t in _graph()["inspector.cli.serve"])


def test_no_module_is_over_400_lines():
    long = sorted(f"{path.relative_to(PACKAGE.parent)}: {n} lines"
                  for path in PACKAGE.rglob("*.py")
                  if (n := len(path.read_text().splitlines())) > MAX_LINES)
    assert not long, "one concept per file, under 400 lines:\n" + "\n".join(long)
