"""HTTP reaches the runtime only through its ports (``adapters/http/ports.py``).

A module of the HTTP wing never takes a connection of the log (``.log.connection()``), never
handles a command on the engine (``engine.handle``, ``handle_all``), never reaches a runtime's
engine at all, never starts a use case of the domain itself (``engine.domain.usecases``: they
start through a named service), and never imports the concrete runtime: it names the port it
needs. Where the apps are built (the HTTP wing and the programs), no runtime parameter or
variable is annotated ``Any``: a port stands there, and mypy checks the runtime against it.
Each check is shown to fail on a probe, as ``test_layers`` does for the floors.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.arch.test_layers import ROOT, imported_modules
from tests.arch.test_structure import parsed

HTTP = ROOT / "adapters" / "http"
PROGRAMS = ROOT / "adapters" / "programs"
# Modules an HTTP module may not import: the domain's use cases and the concrete runtime.
FORBIDDEN_IMPORTS = ("engine.domain.usecases", "adapters.services.runtime")
HANDLERS = frozenset({"handle", "handle_all", "handle_in"})


def _name(node: ast.expr) -> str:
    """The last name of ``node`` (``runtime`` for ``self.runtime``), "" for anything else."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _is_a_runtimes_engine(node: ast.AST) -> bool:
    """``runtime.engine``, ``self.runtime.engine``, ``read_runtime.engine``, ..."""
    if not isinstance(node, ast.Attribute) or node.attr != "engine":
        return False
    return _name(node.value).endswith("runtime")


def reaches(path: Path) -> list[str]:
    """Every place ``path`` reaches past a port, as ``file:line what``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, owner = node.func.attr, _name(node.func.value)
            if method == "connection" and owner == "log":
                found.append((node.lineno, "calls .log.connection()"))
            elif method in HANDLERS and owner == "engine":
                found.append((node.lineno, f"calls engine.{method}()"))
        if _is_a_runtimes_engine(node):
            found.append((node.lineno, "reaches the runtime's engine"))
    imported = imported_modules(path)
    for forbidden in FORBIDDEN_IMPORTS:
        if any(m == forbidden or m.startswith(f"{forbidden}.") for m in imported):
            found.append((0, f"imports {forbidden}"))
    return [f"{path.name}:{line} {what}" for line, what in sorted(found)]


def _is_any(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value in ("Any", "typing.Any")
    return _name(annotation) == "Any"


def _is_a_runtime(name: str) -> bool:
    return name in ("runtime", "rt") or name.endswith("_runtime")


def runtimes_as_any(path: Path) -> list[str]:
    """Every runtime parameter or variable of ``path`` annotated ``Any``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.arg) and _is_a_runtime(node.arg) and _is_any(node.annotation):
            found.append((node.lineno, node.arg))
        if isinstance(node, ast.AnnAssign) and _is_any(node.annotation):
            name = _name(node.target)
            if _is_a_runtime(name):
                found.append((node.lineno, name))
    return [f"{path.name}:{line} {name}: Any" for line, name in sorted(found)]


def test_ports_a_reach_past_a_port_is_caught(tmp_path: Path) -> None:
    """The checks themselves can fail: what the resources once did is reported, and what
    they do now is not."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import Any\n"
        "from engine.domain import usecases\n"
        "from adapters.services.runtime import Runtime\n"
        "def a(runtime: Any, rt: 'Any') -> None:\n"
        "    conn = runtime.engine.log.connection()\n"
        "    runtime.engine.handle(command)\n"
        "    engine = runtime.engine\n"
        "    engine.handle_all([command])\n"
        "    log.connection()\n"
        "class R:\n"
        "    def __init__(self, read_runtime: typing.Any) -> None:\n"
        "        self.runtime: Any = read_runtime\n"
        "        self.runtime.engine.settings.agent('x')\n"
        "def fine(runtime: ServerRuntime, conn: Any, value: Any) -> None:\n"
        "    runtime.reads.job('j1')\n"
        "    runtime.events.read_stream('job:j1')\n"
        "    runtime.handle(command)\n"
        "    runtime.jobs.spawn('s', [], None, None)\n"
        "    engine_name: Any = 'engine'\n"
    )
    assert reaches(probe) == [
        "probe.py:0 imports adapters.services.runtime",
        "probe.py:0 imports engine.domain.usecases",
        "probe.py:5 calls .log.connection()",
        "probe.py:5 reaches the runtime's engine",
        "probe.py:6 calls engine.handle()",
        "probe.py:6 reaches the runtime's engine",
        "probe.py:7 reaches the runtime's engine",
        "probe.py:8 calls engine.handle_all()",
        "probe.py:9 calls .log.connection()",
        "probe.py:13 reaches the runtime's engine",
    ]
    assert runtimes_as_any(probe) == [
        "probe.py:4 rt: Any",
        "probe.py:4 runtime: Any",
        "probe.py:11 read_runtime: Any",
        "probe.py:12 runtime: Any",
    ]


def test_ports_http_reaches_the_runtime_only_through_its_ports() -> None:
    modules = sorted(HTTP.rglob("*.py"))
    assert len(modules) > 20  # the whole wing, its sub-packages too
    problems = [f"{path.relative_to(HTTP)}: {where}" for path in modules for where in reaches(path)]
    assert not problems, "\n".join(problems)


def test_ports_no_runtime_is_annotated_any_where_the_apps_are_built() -> None:
    modules = sorted([*HTTP.rglob("*.py"), *PROGRAMS.rglob("*.py")])
    problems = [where for path in modules for where in runtimes_as_any(path)]
    assert not problems, "\n".join(problems)
