"""Lines, modules and the import graph of serveout's packages; checks the layout rules.

    python scripts/import_graph.py            # counts, package graph, cycles
    python scripts/import_graph.py --check    # exit 1 if a rule below is broken

Every import counts, at module level or inside a function (``TYPE_CHECKING`` blocks
excepted: they never run). The rules (docs/development.md):

- no import cycle between modules;
- ``loadtest`` imports neither ``serving`` nor ``sweep`` (it stands alone);
- ``serving`` imports neither ``loadtest`` nor ``sweep`` nor ``simulator``;
- ``loadtest`` does not import ``simulator`` either (``loadtest simulate`` starts it
  as a child program);
- only ``sweep`` and ``simulator`` import both ``loadtest`` and ``serving``
  (``sweep`` may import ``simulator``; not the other way round);
- inside ``serving``, a folder imports only folders of its own layer or lower
  (:data:`SERVING_LAYERS`: typed config, then the engine, then the pure request logic
  (protocol, admission, routing), then the deployments on the request path, then what
  deploys them);
- a module has at most :data:`MAX_LINES` lines, except the few in
  :data:`LONG_MODULES`, each with its reason.

Standard library only, so it runs before any set-up.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

PACKAGES = ("serving", "loadtest", "sweep", "simulator")
FORBIDDEN = {
    "loadtest": ("serving", "sweep", "simulator"),
    "serving": ("loadtest", "sweep", "simulator"),
    "simulator": ("sweep",),
}

SERVING_LAYERS: tuple[tuple[str, ...], ...] = (
    # 0: the exception tree, the typed config, Ray's private APIs
    ("serving.errors", "serving.ray_internals", "serving.config"),
    # 1: one engine replica, its queue-depth autoscaling policy, local weights and adapters
    ("serving.engine", "serving.autoscaling", "serving.model_store", "serving.adapters"),
    # 2: the per-request decisions, pure: the OpenAI protocol, admission, routing
    ("serving.openai", "serving.admission", "serving.routing", "serving.tenancy", "serving.rollout"),
    # 3: the deployments on the request path: the default path's router and engine
    #    ingress (direct), the HTTP app (api), the service every gateway replica runs
    ("serving.direct", "serving.api", "serving.gateway"),
    # 4: what builds, runs and renders them
    ("serving.app_builder", "serving.cluster", "serving.manifests", "serving.cli", "serving.adapters_cli", "serving.admin", "serving.tenancy_cli",
     "serving.rollout_cli", "serving.run_state"),
)
"""Layers of ``serving``'s folders (and top-level modules), lowest first."""

MAX_LINES = 400
LONG_MODULES: dict[str, str] = {}
"""Modules allowed past :data:`MAX_LINES`, each with the reason (none today)."""


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_names(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module name an import in ``tree`` may load (run-time imports only)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "import_module":
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def build_graph(root: Path) -> tuple[dict[str, set[str]], dict[str, int]]:
    """Module -> the project modules it imports, and module -> line count."""
    files = {module_name(root, p): p for pkg in PACKAGES if (root / pkg).is_dir()
             for p in sorted((root / pkg).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    lines: dict[str, int] = {}
    for module, path in files.items():
        text = path.read_text()
        lines[module] = text.count("\n")
        targets = imported_names(ast.parse(text), module, path.name == "__init__.py")
        graph[module] = {t for t in targets if t in files and t != module}
    return graph, lines


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _top(module: str) -> str:
    return module.split(".")[0]


def _folder(module: str, graph: dict[str, set[str]]) -> str:
    """A module's folder (its package): ``loadtest.run.runner`` -> ``loadtest.run``."""
    is_package = any(m.startswith(module + ".") for m in graph)
    return module if is_package else module.rpartition(".")[0] or module


def serving_layer(module: str) -> int | None:
    """The layer of a ``serving`` module (``None``: the package itself, or not ``serving``)."""
    for layer, prefixes in enumerate(SERVING_LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return layer
    return None


def violations(graph: dict[str, set[str]], lines: dict[str, int] | None = None) -> list[str]:
    found = [f"import cycle: {' <-> '.join(c)}" for c in cycles(graph)]
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if _top(target) in FORBIDDEN.get(_top(module), ()):
                found.append(f"{module} imports {target} ({_top(module)} must not import {_top(target)})")
        if _top(module) == "serving" and module != "serving":
            layer = serving_layer(module)
            if layer is None:
                found.append(f"{module} is in no layer of SERVING_LAYERS (scripts/import_graph.py)")
                continue
            for target in sorted(targets):
                target_layer = serving_layer(target)
                if target_layer is not None and target_layer > layer:
                    found.append(f"{module} (layer {layer}) imports {target} (layer {target_layer}): "
                                 "serving's layers import downwards only")
    for module, count in sorted((lines or {}).items()):
        if count > MAX_LINES and module not in LONG_MODULES:
            found.append(f"{module} has {count} lines (> {MAX_LINES}): split it, or list it in "
                         "LONG_MODULES with the reason")
    return found


def report(root: Path) -> tuple[list[str], list[str]]:
    """The printed report (sizes, folder graph, verdict) and the rules it found broken."""
    graph, lines = build_graph(root)
    out = ["package    modules  lines"]
    for pkg in PACKAGES:
        mods = [m for m in lines if _top(m) == pkg]
        if mods:
            out.append(f"{pkg:<10} {len(mods):>7}  {sum(lines[m] for m in mods):>5}")
    folders: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        folders[_folder(module, graph)].update(_folder(t, graph) for t in targets)
    out.append("")
    out.append("folder -> folders it imports")
    for folder in sorted(folders):
        deps = sorted(folders[folder] - {folder})
        count = sum(1 for m in lines if _folder(m, graph) == folder)
        out.append(f"{folder} ({count} modules) -> {', '.join(deps) or '-'}")
    found = violations(graph, lines)
    out.append("")
    out.extend(found or [f"no import cycle; no forbidden import; serving's layers import downwards; "
                         f"no module over {MAX_LINES} lines"])
    return out, found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--check", action="store_true", help="exit 1 when a rule is broken")
    args = parser.parse_args(argv)
    out, found = report(args.root)
    print("\n".join(out))
    return 1 if args.check and found else 0


if __name__ == "__main__":
    sys.exit(main())
