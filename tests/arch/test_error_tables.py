"""An HTTP module maps no error by hand: every error class an ``adapters/http`` module catches
is answered through its surface's table in ``adapters/http/errors.py``.

Outside that module an ``except`` (or ``contextlib.suppress``) of an engine error, a
``DispatchFailed``, a ``RecoveryFailed`` or a console ``QueryError`` may re-raise it as it is,
pass it to the JSON-RPC table (``rpc_error``, ``as_rpc``), or be control flow named in
``ALLOWED`` with its reason; none of them builds an ``ApiError``, an ``RpcError``, a falcon
``HTTPError`` or sets a response's ``status`` or ``media``.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from adapters.services import dispatch, recovery
from engine import errors as engine_errors
from engine.domain import errors as domain_errors
from projections import console_queries
from tests.arch.test_structure import parsed

ROOT = Path(__file__).resolve().parents[2]
HTTP = ROOT / "adapters" / "http"
TABLES = "errors.py"

ERRORS = frozenset(
    name
    for module in (engine_errors, domain_errors)
    for name, value in vars(module).items()
    if inspect.isclass(value) and issubclass(value, engine_errors.EngineError)
) | {dispatch.DispatchFailed.__name__, recovery.RecoveryFailed.__name__}
ERRORS |= {console_queries.QueryError.__name__}

THE_TABLE = {"rpc_error", "as_rpc"}
BUILDERS = {"ApiError", "RpcError", "HTTPError"}

# (module, the classes caught): why it is control flow and no answer. A module is named by
# its path under adapters/http/.
JSONRPC = "a2a/jsonrpc.py"
ALLOWED: dict[tuple[str, tuple[str, ...]], str] = {
    (JSONRPC, ("LeaseBusy",)): "a read wakes the lease takeover; a busy lease does not stop it",
    (JSONRPC, ("EngineError",)): "the wake inside an open stream must not cut it mid-frame",
    ("agentcore.py", ("LeaseBusy",)): "a get wakes recovery but is only a read",
    ("coordination.py", ("InvalidTransition", "ConcurrencyError")): "the first read wins",
    ("metrics.py", ("LogMissing",)): "a gauge of the log's absence, not an answer",
    ("a2a/push.py", ("NotFound",)): "a config deleted meanwhile is deleted: delete is idempotent",
}


def _names(node: ast.expr | None) -> tuple[str, ...]:
    """The error classes an ``except`` clause or a ``suppress`` call names."""
    if node is None:
        return ()
    items = node.elts if isinstance(node, ast.Tuple) else [node]
    found = []
    for item in items:
        name = item.attr if isinstance(item, ast.Attribute) else getattr(item, "id", None)
        if name in ERRORS:
            found.append(name)
    return tuple(found)


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _builds_an_answer(body: list[ast.stmt]) -> bool:
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.Call):
            name = _callee(node)
            if name in BUILDERS or (name.startswith("HTTP") and name.endswith("Error")):
                return True
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        if any(isinstance(t, ast.Attribute) and t.attr in {"status", "media"} for t in targets):
            return True
    return False


def _through_the_table(body: list[ast.stmt]) -> bool:
    if len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is None:
        return True  # re-raised as it is: the surface's handler answers it
    calls = (n for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Call))
    return any(_callee(call) in THE_TABLE for call in calls)


def _module(path: Path) -> str:
    """How ``ALLOWED`` and the findings name ``path``: its path under adapters/http/ (a probe
    elsewhere by its file name)."""
    return path.relative_to(HTTP).as_posix() if path.is_relative_to(HTTP) else path.name


def hand_mappings(path: Path) -> list[str]:
    """Every place in ``path`` that catches an error class outside the tables, as
    ``file:line caught``, unless it goes through the table or ``ALLOWED`` names it (and it
    still builds no answer)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.ExceptHandler):
            caught, body = _names(node.type), node.body
        elif isinstance(node, ast.With):
            calls = [i.context_expr for i in node.items if isinstance(i.context_expr, ast.Call)]
            suppressed = [c for c in calls if _callee(c) == "suppress"]
            caught = tuple(n for c in suppressed for a in c.args for n in _names(a))
            body = []
        else:
            continue
        if not caught:
            continue
        allowed = (_module(path), caught) in ALLOWED and not _builds_an_answer(body)
        if not allowed and (_builds_an_answer(body) or not _through_the_table(body)):
            found.append((node.lineno, f"{_module(path)}:{node.lineno} {', '.join(caught)}"))
    return [where for _, where in sorted(found)]


def test_no_http_module_but_the_tables_maps_an_error_by_hand() -> None:
    modules = [p for p in sorted(HTTP.rglob("*.py")) if _module(p) != TABLES]
    assert modules
    assert [where for path in modules for where in hand_mappings(path)] == []


def test_every_allowance_is_still_needed() -> None:
    seen = set()
    for path in HTTP.rglob("*.py"):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ExceptHandler):
                seen.add((_module(path), _names(node.type)))
            if isinstance(node, ast.Call) and _callee(node) == "suppress":
                seen.add((_module(path), tuple(n for a in node.args for n in _names(a))))
    assert set(ALLOWED) - seen == set()


def test_the_check_itself_can_fail(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import contextlib\n"
        "def a(runtime, resp):\n"
        "    try:\n"
        "        runtime.ensure_lease()\n"
        "    except LeaseBusy:\n"
        "        raise ApiError('503', 'lease_busy', 'busy') from None\n"
        "def b(runtime, resp):\n"
        "    try:\n"
        "        runtime.jobs.spawn()\n"
        "    except (errors.DispatchFailed, KeyError) as ex:\n"
        "        resp.status = '500'\n"
        "def c(runtime):\n"
        "    try:\n"
        "        runtime.accept()\n"
        "    except d.TaskEnded:\n"
        "        return None\n"
        "def d(runtime):\n"
        "    with contextlib.suppress(LeaseBusy):\n"
        "        runtime.ensure_lease()\n"
        "def fine(runtime):\n"
        "    try:\n"
        "        runtime.accept()\n"
        "    except TaskEnded as ex:\n"
        "        raise as_rpc(ex, 'message') from None\n"
        "    except StorageError:\n"
        "        raise\n"
        "    except ValueError:\n"
        "        raise ApiError('400', 'invalid_argument', 'no') from None\n"
    )
    assert hand_mappings(probe) == [
        "probe.py:5 LeaseBusy",
        "probe.py:10 DispatchFailed",
        "probe.py:15 TaskEnded",
        "probe.py:18 LeaseBusy",
    ]
