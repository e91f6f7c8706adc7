"""A stateful fuzz of every API on a real server (ADR 0056): schemathesis reads the served
``/openapi.json`` (plus the console's JSON routes, described here), fuzzes each operation
alone and then chains them through the document's links (a spawn, then the reads, controls
and judgements of what it made), as the operator, as a live run (its ``FOLDLINE_RUN_TOKEN``,
written to a file by a run that stays live) and with no token.

Every answer must match the document (status, content type, body, headers: schemathesis's
checks); no answer is a 5xx; a call without a token to what needs one is refused (401); and
``foldline verify`` passes on the log afterwards.

Both phases run in ``make test`` within a bounded budget: hypothesis is derandomized (the
same choices each run, given the same answers) and keeps no database; a scenario has at most
``Budget.steps`` calls, and no call waits long (``WAIT_CAP_S``). The chained phase only
generates (a shrunk scenario would meet a server that has moved on), and keeps each answer
under the scenario's requests so far, to give it again when hypothesis replays that prefix
(``_chained``): which link rule may run, how many values a bundle holds and what a link fills
in all follow the answers, and a server asked again answers from a log that has moved on,
which hypothesis rightly called inconsistent data generation (``FlakyStrategyDefinition``).
The server's stderr is read as it is written (``Said``): left unread, it blocked the server
once a long run's warnings filled the pipe. ``test_fuzz_every_api_at_length`` runs about ten
times as much, by hand (``FOLDLINE_FUZZ_AT_LENGTH=1``).
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from hypothesis.stateful import run_state_machine_as_test
from schemathesis import GenerationMode
from schemathesis.specs.openapi import checks

from adapters.http import openapi_parts as doc
from adapters.http import schemas as s
from adapters.http.auth import Access
from adapters.http.coordination import MAX_WAIT_S
from adapters.http.errors import CONSOLE
from adapters.http.openapi import FIELD
from adapters.http.routes import ROUTES
from tests.support.cli import foldline
from tests.support.server import Server, serve

pytestmark = pytest.mark.server

# A run that stays live and writes its token where the test reads it, when its prompt says
# ``hold``; any other prompt (the fuzzer's) ends it at once.
HOLDER = (
    'read -r line; if [ "$line" = "hold" ]; then printf %s "$FOLDLINE_RUN_TOKEN" > {path}.new'
    " && mv {path}.new {path}; exec sleep 300; fi"
)
HOLDER_SESSION = "zz-holder"  # last by id: a listing's first session is seldom the holder's
LOCAL = "http://127.0.0.1:9/fuzz"  # every URL the fuzzer sends: nothing leaves the machine
MODES = ("none", "run", "operator")
JSON = {"Content-Type": "application/json"}

# The console's JSON (``Unlisted`` in the document: shaped for its page): described here so the
# fuzzer reaches it too, with the query parameters each reads.
CONSOLE_QUERIES = {
    "/console/api/overview": (),
    "/console/api/lists/{table}": ("state", "session", "agent", "prefix", "after", "limit"),
    "/console/api/entities/{kind}/{entity_id}": (),
    "/console/api/log": ("before", "kind", "type", "limit"),
    "/console/api/export": ("from", "to"),
}

# Where a request of a valid shape may still be refused for what no schema can say: a
# ``promptFile`` must name a file in the workspace; the console's filters must name a state of
# the table and a cursor it issued (its routes are described here, loosely).
LOOSE = frozenset({"/invocations", *CONSOLE_QUERIES})
# One body shape serves every action of a control route; a field only some actions take
# (a stop's or a pause's ``grace``, a pause's ``mode``) is refused, named, on the others (400):
# no schema of one shape says that, so such a case is no valid one (``misplaced``).
TAKES = {"grace": ("stop", "pause"), "mode": ("pause",)}

# A valid If-Match that names another version is refused (412) by a precondition no schema can
# predict: an accepted answer for a valid request, as schemathesis's defaults say of 404 and 409.
# An invalid body past the size limit is refused whole (413) before its fields are read: a
# rejection, as the document lists it.
# The chains follow the document's links only (no inferred ones): their roots are then what
# makes or lists jobs, sessions and tasks, not a control of a job that does not exist.
CONFIG = schemathesis.Config.from_dict(
    {
        "checks": {
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "3xx", "401", "403", "404", "409", "412", "429"]
            },
            "negative_data_rejection": {
                "expected-statuses": [
                    *("400", "401", "403", "404", "405", "406", "409", "412", "413", "415"),
                    *("422", "428", "429"),
                ]
            },
        },
        "phases": {"stateful": {"inference": {"algorithms": []}}},
    }
)


# The fuzzer's waits are short: a wait on a job that never changes (paused, or its run held)
# takes its whole timeout, 60 s when it names none. The long poll is test_coordination_server's.
WAIT_CAP_S = 1.0


def misplaced(case: Any) -> bool:
    """Whether ``case`` is a control whose body has a field its action does not take."""
    action = (case.path_parameters or {}).get("action")
    body = case.body if isinstance(case.body, dict) else {}
    return action is not None and any(
        body.get(name) is not None and action not in actions for name, actions in TAKES.items()
    )


@dataclass(frozen=True)
class Budget:
    """Examples per operation alone, and scenarios (of at most ``steps`` calls) chained, by
    auth mode."""

    alone: dict[str, int]
    chained: dict[str, int]
    steps: int


# Both phases run in ``make test`` (about 650 calls, 170 of them chained, ~30 s); with no
# token nothing succeeds, so nothing can be chained. ``AT_LENGTH`` runs by hand (2 to 5 min).
BOUNDED = Budget({"none": 2, "run": 3, "operator": 4}, {"none": 0, "run": 8, "operator": 15}, 8)
AT_LENGTH = Budget(
    {"none": 10, "run": 20, "operator": 40}, {"none": 0, "run": 60, "operator": 120}, 10
)


@dataclass
class Tally:
    """What the fuzzer did: calls and operations by auth mode, statuses, and the answers a
    scenario's replay was given again (not sent)."""

    calls: Counter[str] = field(default_factory=Counter)
    chained: Counter[str] = field(default_factory=Counter)
    replayed: Counter[str] = field(default_factory=Counter)
    operations: dict[str, set[str]] = field(default_factory=dict)
    statuses: dict[str, Counter[int]] = field(default_factory=dict)

    def record(self, mode: str, label: str, status: int, chained: bool) -> None:
        self.calls[mode] += 1
        self.chained[mode] += chained
        self.operations.setdefault(mode, set()).add(label)
        self.statuses.setdefault(mode, Counter())[status] += 1

    def summary(self) -> str:
        return "; ".join(
            f"{mode}: {len(self.operations.get(mode, ()))} operations, {self.calls[mode]} calls"
            f" ({self.chained[mode]} chained, {self.replayed[mode]} answers replayed),"
            f" statuses {dict(sorted(self.statuses.get(mode, Counter()).items()))}"
            for mode in MODES
        )


def _console_operations() -> dict[str, dict[str, Any]]:
    """The console's JSON routes as operations: the operator's, an object or NDJSON, and the
    v1 error body (an engine failure keeps AgentCore's, as the console's surface says)."""
    paths: dict[str, dict[str, Any]] = {}
    for path, queries in CONSOLE_QUERIES.items():
        route = ROUTES[path]
        assert route.errors is CONSOLE and route.access is Access.OPERATOR, path
        ok: dict[str, Any] = {"description": "OK"}
        if path.endswith("/export"):
            ok["content"] = {"application/x-ndjson": {"schema": {"type": "string"}}}
        else:
            ok["content"] = {"application/json": {"schema": doc.ANY_OBJECT}}
        failure = {"schema": {"oneOf": [doc.ref(s.ErrorOut), doc.ref(s.AgentErrorOut)]}}
        parameters = [doc.in_path(name) for name in FIELD.findall(path)]
        paths[path] = {
            "get": {
                "operationId": f"console_{path.rsplit('/', 1)[-1].strip('{}')}",
                "parameters": [*parameters, *(doc.param(name) for name in queries)],
                "security": [{"bearer": []}],
                "responses": {
                    "200": ok,
                    **doc.error_bodies("400", "401", "403", "404"),
                    "503": {"description": "storage", "content": {"application/json": failure}},
                },
            }
        }
    return paths


def _document(server: Server) -> dict[str, Any]:
    status, _, raw = server.request("GET", "/openapi.json")
    assert status == 200, raw
    document = dict(json.loads(raw))
    document["paths"].update(_console_operations())
    return document


def _keep_local(value: Any) -> Any:
    """``value`` with every ``url`` field (push configs, file parts) on a closed local port."""
    if isinstance(value, dict):
        return {k: LOCAL if k == "url" else _keep_local(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_keep_local(v) for v in value]
    return value


def _short_wait(query: dict[str, Any] | None) -> dict[str, Any]:
    """``query`` with a ``timeout`` the server would take but wait longer than ``WAIT_CAP_S``
    for (or none) set to it; one it would refuse is kept, to be refused."""
    query = dict(query or {})
    raw = query.get("timeout")
    try:
        value = float(raw) if raw is not None else MAX_WAIT_S
    except (TypeError, ValueError):
        return query
    if WAIT_CAP_S < value <= MAX_WAIT_S:
        query["timeout"] = WAIT_CAP_S
    return query


def _is_guarded(case: Any) -> bool:
    return any(
        scheme.get("bearer") is not None
        for scheme in case.operation.definition.raw.get("security", [])
    )


class Caller:
    """Makes the fuzzer's calls in one auth mode: the token set (or removed), URLs kept local,
    each call counted, and a guarded call without a token refused."""

    def __init__(self, server: Server, mode: str, token: str | None, tally: Tally) -> None:
        self.base = f"http://127.0.0.1:{server.port}"
        self.mode, self.token, self.tally = mode, token, tally
        self.chaining = False  # set while scenarios run: their calls are counted apart

    def prepare(self, case: Any) -> None:
        if case.body is not None and case.path == "/" and isinstance(case.body, dict):
            case.body = _keep_local(case.body)
        if case.path == "/v1/jobs/wait":
            case.query = _short_wait(case.query)
        headers = dict(case.headers or {})
        headers.pop("Authorization", None)
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        case.headers = headers

    def excluded(self, case: Any) -> list[Any]:
        """The checks that do not apply to ``case``: ``ignored_auth`` where this caller sends
        a valid token on purpose (the ``none`` mode is where refusals are checked);
        ``negative_data_rejection`` on ``POST /``, whose JSON-RPC errors are HTTP 200 by A2A's
        design; ``positive_data_acceptance`` where a valid shape can still be refused for what
        no schema says (``LOOSE``)."""
        out = [] if self.token is None else [checks.ignored_auth]
        if case.path == "/":
            out.append(checks.negative_data_rejection)
        if case.path in LOOSE or misplaced(case):
            out.append(checks.positive_data_acceptance)
        return out

    def call_and_validate(self, case: Any) -> None:
        self.prepare(case)
        response = case.call(base_url=self.base, timeout=30)
        self.checked(response, case)
        case.validate_response(
            response, excluded_checks=self.excluded(case), transport_kwargs={"timeout": 30}
        )

    def checked(self, response: Any, case: Any, counted: bool = True) -> None:
        """``response`` is no 5xx, and a guarded call without a token was refused (401); a
        call sent (``counted``, not an answer replayed) is tallied."""
        if counted:
            self.tally.record(self.mode, case.operation.label, response.status_code, self.chaining)
        else:
            self.tally.replayed[self.mode] += 1
        assert response.status_code < 500 or response.status_code in (503, 507), (
            f"{case.operation.label}: {response.status_code} {response.text[:500]}"
        )
        if self.mode == "none" and _is_guarded(case):
            assert response.status_code == 401, (case.operation.label, response.status_code)


def _alone(schema: Any, caller: Caller, examples: int) -> None:
    """Each operation alone: ``examples`` valid cases and half as many invalid ones."""
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode, count in (
            (GenerationMode.POSITIVE, examples),
            (GenerationMode.NEGATIVE, examples // 2),
        ):
            if count == 0:
                continue

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=count,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def check(case: Any) -> None:
                caller.call_and_validate(case)

            try:
                check()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE  # nothing invalid to send (no inputs)


def _request(case: Any) -> tuple[Any, ...]:
    """What ``case`` sends (after ``Caller.prepare``), as a key: its method, path, query,
    headers, cookies and body; never its random id."""
    headers = sorted((k.lower(), str(v)) for k, v in (case.headers or {}).items())
    return (
        case.method,
        case.formatted_path,
        repr(case.query),
        repr(headers),
        repr(case.cookies),
        case.media_type,
        repr(case.body),
    )


def _chained(schema: Any, caller: Caller, scenarios: int, steps: int) -> None:
    """Scenarios of calls chained through the document's links.

    Each answer is kept under the scenario's requests so far (``answers``): hypothesis runs
    a scenario's prefix again (to extend it with its simplest continuation, to mutate it, to
    replay a failure), and a link rule's precondition, a bundle's size and what a link fills
    in all follow the answers; asked again, the server (whose log has moved on) may answer
    otherwise, and hypothesis would find its data generation inconsistent
    (``FlakyStrategyDefinition``). Kept answers make a scenario's draws a function of its
    choices, as hypothesis requires: every new request still reaches the server once, and a
    replayed answer is checked again as it was (so a failure replays exactly)."""
    base = schema.as_state_machine()
    answers: dict[tuple[Any, ...], Any] = {}

    class Workflow(base):  # type: ignore[misc, valid-type]
        def setup(self) -> None:
            self.sent: tuple[Any, ...] = ()
            self.replayed = False

        def before_call(self, case: Any) -> None:
            caller.prepare(case)

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": caller.base, "timeout": 30}

        def call(self, case: Any, **kwargs: Any) -> Any:
            self.sent = (*self.sent, _request(case))
            answer = answers.get(self.sent)
            self.replayed = answer is not None
            if answer is None:
                answer = answers[self.sent] = super().call(case, **kwargs)
            return answer

        def after_call(self, response: Any, case: Any) -> None:
            super().after_call(response, case)
            caller.checked(response, case, counted=not self.replayed)

        def validate_response(
            self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any
        ) -> None:
            case.validate_response(
                response,
                excluded_checks=caller.excluded(case),
                transport_kwargs=kwargs or None,
                recorder=self.recorder,
            )

    caller.chaining = True
    run_state_machine_as_test(
        Workflow,
        settings=settings(
            max_examples=scenarios,
            stateful_step_count=steps,
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        ),
    )


class Said:
    """The server's stderr, read as it is written, its last ``limit`` bytes kept: a pipe left
    unread fills (64 KiB on Linux) and blocks the server's next log line, and with it the
    request that logs it (the fuzz's writer spawns each log one, ``gets no worktree``)."""

    def __init__(self, server: Server, limit: int = 1 << 16) -> None:
        assert server.process.stderr is not None
        self.fd, self.limit, self.total = server.process.stderr.fileno(), limit, 0
        self.tail = bytearray()
        self.lock = threading.Lock()
        # Ends when the server's stderr closes, as the fixture stops it.
        threading.Thread(target=self._drain, name="server-stderr", daemon=True).start()

    def _drain(self) -> None:
        for chunk in iter(lambda: os.read(self.fd, 1 << 16), b""):
            with self.lock:
                self.total += len(chunk)
                self.tail += chunk
                del self.tail[: -self.limit]

    def text(self, last: int = 8000) -> str:
        with self.lock:
            return self.tail.decode(errors="replace")[-last:]


@dataclass
class Fuzzed:
    server: Server
    run_token: str
    tally: Tally
    said: Said


@pytest.fixture
def fuzzed(tmp_path: Path) -> Iterator[Fuzzed]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    token_file = tmp_path / "run-token"
    agents = tmp_path / "agents.toml"
    holder = HOLDER.format(path=token_file)
    agents.write_text(f"[agents.holder]\ncommand = {json.dumps(holder)}\n")
    env = {"FOLDLINE_RUNNER": "cat", "FOLDLINE_AGENTS_FILE": str(agents)}
    with serve(workspace, env) as server:
        said = Said(server)
        body = {"prompt": "hold", "agent": "holder", "session": HOLDER_SESSION, "async": True}
        status, answer = server.invoke(body)
        assert status in (200, 202), answer
        deadline = time.monotonic() + 30
        while not token_file.exists():
            assert time.monotonic() < deadline, "the holder never wrote its run token"
            time.sleep(0.05)
        yield Fuzzed(server, token_file.read_text().strip(), Tally(), said)


def _fuzz(fuzzed: Fuzzed, budget: Budget) -> None:
    server = fuzzed.server
    document = _document(server)
    tokens = {"none": None, "run": fuzzed.run_token, "operator": server.token}
    try:
        for mode in MODES:  # the operator last: its controls may end the holder's run
            schema = schemathesis.openapi.from_dict(copy.deepcopy(document), config=CONFIG)
            caller = Caller(server, mode, tokens[mode], fuzzed.tally)
            _alone(schema, caller, budget.alone[mode])
            if budget.chained[mode]:
                _chained(schema, caller, budget.chained[mode], budget.steps)
    except BaseException:
        print(f"fuzz: {fuzzed.tally.summary()}\nthe server said:\n{fuzzed.said.text()}")
        raise
    print(f"fuzz: {fuzzed.tally.summary()}")
    verified = foldline("verify", str(server.workspace / ".foldline" / "foldline.db"))
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.slow
def test_fuzz_every_api_answers_as_documented_under_each_token(fuzzed: Fuzzed) -> None:
    _fuzz(fuzzed, BOUNDED)
    tally = fuzzed.tally
    assert all(tally.calls[mode] > 0 for mode in MODES), tally.summary()
    assert tally.statuses["run"].total() > tally.statuses["run"][401], "the run token never worked"
    assert tally.chained["run"] > 0 and tally.chained["operator"] > 0, tally.summary()


@pytest.mark.slow
def test_fuzz_server_answers_every_writer_spawn_when_its_warnings_outgrow_a_pipe(
    fuzzed: Fuzzed,
) -> None:
    """The fuzz at length's case: a ``POST /v1/jobs`` with a ``write_scope`` hung past its
    client's 30 s. Each writer spawned in a workspace that is no git work tree logs a
    warning; the server's stderr was a pipe the test read only on failure, and once 64 KiB
    had gone unread the warning's write blocked the request (the 192nd in a row). ``Said``
    now reads it as it comes."""
    server = fuzzed.server
    assert server.invoke({"prompt": "x", "session": "writers"})[0] == 200
    spawn = {"session": "writers", "prompt": "x", "write_scope": ["src"]}
    for _ in range(300):  # about 100 KiB of warnings: more than a pipe holds
        status, _, raw = server.request("POST", "/v1/jobs", spawn, JSON, timeout=10)
        assert status == 429 and b"admission_rejected" in raw, (status, raw)
    assert fuzzed.said.total > 1 << 16, fuzzed.said.total
    assert "gets no worktree" in fuzzed.said.text()


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("FOLDLINE_FUZZ_AT_LENGTH") != "1",
    reason="minutes long: run by hand with FOLDLINE_FUZZ_AT_LENGTH=1",
)
def test_fuzz_every_api_at_length(fuzzed: Fuzzed) -> None:
    _fuzz(fuzzed, AT_LENGTH)
    assert all(fuzzed.tally.calls[mode] > 0 for mode in MODES), fuzzed.tally.summary()
