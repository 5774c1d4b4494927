"""The layering ARCHITECTURE.md promises, read from the source: what each package may import."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> list[tuple[str, str | None]]:
    """(module imported, name of the enclosing top-level function or None) per absolute import."""
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for top in tree.body:
        owner = top.name if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        for node in ast.walk(top):
            if isinstance(node, ast.Import):
                found += [(alias.name, owner) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((node.module, owner))
    return found


def test_storage_and_the_background_helper_run_without_gradio_or_torch():
    # storage implements the grid's store protocol without loading the decoding library's models.
    probe = (
        "import sys, storage, specsteer.util.background; "
        "print(sorted(m for m in ('gradio', 'torch', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_pure_storage_modules_never_touch_the_database():
    pure = ("storage.exports", "storage.values")
    for name in pure:
        modules = [module for module, _ in _imports(REPO / (name.replace(".", "/") + ".py"))]
        database = [
            m for m in modules if m.split(".")[0] == "sqlalchemy" or (m.startswith("storage.") and m not in pure)
        ]
        assert database == [], name


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _project_imports() -> dict[str, set[str]]:
    """Every project module and the project modules it imports anywhere (function-level imports included:
    an import that only dodges a cycle at load time is still a cycle)."""
    paths = [p for root in ("specsteer", "storage", "ui") for p in sorted((REPO / root).rglob("*.py"))]
    modules = {_module_name(p): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules}
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        graph[name] = {m for m in found if m in modules and m != name and m not in ("specsteer", "storage", "ui")}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
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
            visit(node)
    return found


def test_no_module_imports_itself_through_others():
    graph = _project_imports()
    assert "specsteer.engine.generate" in graph and graph["specsteer.engine.generate"]  # the reader works
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_library_module_lives_in_a_role_package():
    flat = sorted(p.name for p in (REPO / "specsteer").glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert flat == []
    for package in (REPO / "specsteer").iterdir():
        if package.is_dir() and package.name != "__pycache__":
            assert (package / "__init__.py").read_text().startswith('"""'), f"{package.name} says what it holds"


def test_the_wire_format_loads_without_torch():
    probe = "import sys, specsteer.protocol.wire; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_every_tab_only_lays_out_and_stays_short():
    tabs = sorted((REPO / "ui").glob("*_tab.py"))
    assert tabs, "the tab modules are ui/*_tab.py"
    for tab in tabs:
        lines = tab.read_text(encoding="utf-8").count("\n")
        assert lines <= 300, (
            f"{tab.name} has {lines} lines: move decisions to the service, handlers to ui/*_handlers.py"
        )
