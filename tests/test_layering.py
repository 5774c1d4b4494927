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


def test_the_library_never_imports_storage_the_ui_or_their_frameworks():
    allowed = {
        ("evaluate.py", "storage", "main"),  # the commands' composition roots
        ("bench.py", "storage", "_stored_runs"),
    }
    offending = [
        (path.name, module, owner)
        for path in sorted((REPO / "specsteer").glob("*.py"))
        for module, owner in _imports(path)
        if module.split(".")[0] in ("storage", "ui", "app", "sqlalchemy", "gradio")
        and (path.name, module, owner) not in allowed
    ]
    assert offending == []


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
    pure = ("storage.judgements", "storage.exports", "storage.values")
    for name in pure:
        modules = [module for module, _ in _imports(REPO / (name.replace(".", "/") + ".py"))]
        database = [
            m for m in modules if m.split(".")[0] == "sqlalchemy" or (m.startswith("storage.") and m not in pure)
        ]
        assert database == [], name


def _library_imports(name: str) -> set[str]:
    """The specsteer modules that specsteer/<name>.py imports, relatively or absolutely, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse((REPO / "specsteer" / f"{name}.py").read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module} if node.module else {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("specsteer."):
            found.add(node.module.split(".")[1])
    return found


def test_the_edge_and_the_cloud_meet_only_in_the_wire_format():
    cloud_side = {"cloud", "cloud_service", "cloud_api", "cloud_server", "cloud_client", "cloud_process"}
    assert _library_imports("wire") & (cloud_side | {"edge", "link", "link_emulation", "engine"}) == set()
    assert _library_imports("edge") & (cloud_side | {"link", "engine"}) == set()
    assert _library_imports("cloud") & {"edge", "link", "engine", "cloud_server", "cloud_client"} == set()
    assert _library_imports("cloud_service") & {"edge", "link", "engine", "cloud_server", "cloud_client"} == set()
    # The HTTP server and its client share only the API's contract.
    assert "cloud_server" not in _library_imports("cloud_client")
    assert "cloud_client" not in _library_imports("cloud_server")


def test_the_wire_format_loads_without_torch():
    probe = "import sys, specsteer.protocol.wire; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
