"""The console's pages and JSON through falcon's test client: headers, filters, paging, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters.http.console import CSP, asset_names
from engine.audit import export_line
from engine.domain.job import (
    JobAccepted,
    JobFinished,
    JobNotifyFinished,
    JobNotifyStarted,
    JobStarted,
)
from engine.domain.session import SessionCreated
from engine.log import Transaction
from projections import console_queries
from tests.http.conftest import MakeClient


def _jobs(runtime: Any, n: int, parent: str | None = None, prefix: str = "job_") -> list[str]:
    """``n`` jobs in session s<i % 3>, agent a<i % 2>; every fifth failed, every seventh
    still running. Returns their ids in acceptance order."""
    ids = [f"{prefix}{i:05}" for i in range(n)]

    def work(tx: Transaction) -> None:
        for i, job_id in enumerate(ids):
            events: list[Any] = [
                JobAccepted(session=f"s{i % 3}", agent=f"a{i % 2}", parent_job=parent),
                JobStarted(run_id=f"r{i}"),
            ]
            if i % 7:
                outcome = "error" if i % 5 == 0 else "ok"
                events.append(JobFinished(outcome=outcome, result=f"result {i}"))
            tx.append(f"job:{job_id}", 0, events)

    runtime.engine.log.write(work)
    return ids


def _all_pages(client: Any, table: str, **params: str) -> list[dict[str, Any]]:
    items, after = [], None
    for _ in range(100):  # bounded: the tests' lists are far shorter
        query = {**params, "limit": "7", **({"after": after} if after else {})}
        page = client.simulate_get(f"/console/api/lists/{table}", params=query).json
        items += page["items"]
        after = page["next"]
        if after is None:
            return items
    raise AssertionError("paging did not end")


def test_console_pages_are_served_with_a_content_security_policy(make_client: MakeClient) -> None:
    client, _ = make_client()
    assert {"index.html", "app.js", "app.css"} <= set(asset_names())
    for path in ("/console/", "/console/app.js", "/console/app.css"):
        answer = client.simulate_get(path)
        assert answer.status_code == 200, path
        assert answer.headers["Content-Security-Policy"] == CSP
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP
    assert client.simulate_get("/console").status_code == 301
    missing = client.simulate_get("/console/secrets.txt")
    assert missing.status_code == 404 and missing.json["error"]["code"] == "not_found"


def test_console_code_puts_values_in_the_page_only_as_text(make_client: MakeClient) -> None:
    """Every value is rendered with text nodes; none of the markup-parsing sinks is used."""
    client, _ = make_client()
    code = client.simulate_get("/console/app.js").text
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in code, sink
    page = client.simulate_get("/console/").text
    assert "<script>" not in page and "http://" not in page and "https://" not in page


def test_console_lists_page_newest_first_and_every_job_once(make_client: MakeClient) -> None:
    client, runtime = make_client()
    ids = _jobs(runtime, 40)
    items = _all_pages(client, "jobs")
    assert [i["id"] for i in items] == ids[::-1]  # appended in order: updated in order
    assert [(i["updated_at"], i["id"]) for i in items] == sorted(
        ((i["updated_at"], i["id"]) for i in items), reverse=True
    )


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"state": "error"}, lambda i: i % 7 != 0 and i % 5 == 0),
        ({"state": "running"}, lambda i: i % 7 == 0),
        ({"session": "s1"}, lambda i: i % 3 == 1),
        ({"agent": "a1"}, lambda i: i % 2 == 1),
        ({"agent": "a0", "state": "ok"}, lambda i: i % 2 == 0 and i % 7 != 0 and i % 5 != 0),
        ({"prefix": "job_0001"}, lambda i: 10 <= i < 20),
    ],
)
def test_console_lists_filter_on_the_server(
    make_client: MakeClient, params: dict[str, str], expected: Any
) -> None:
    client, runtime = make_client()
    ids = _jobs(runtime, 40)
    found = {i["id"] for i in _all_pages(client, "jobs", **params)}
    assert found == {job_id for n, job_id in enumerate(ids) if expected(n)}


def test_console_lists_scan_in_windows_when_no_index_serves_the_filter(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rare agent or a wide id prefix pages through bounded windows: partial pages, every
    match exactly once, in order."""
    monkeypatch.setattr(console_queries, "SCAN_BUDGET", 6)
    monkeypatch.setattr(console_queries, "SORT_LIMIT", 3)
    client, runtime = make_client()
    ids = _jobs(runtime, 40)
    agent = _all_pages(client, "jobs", agent="a1")
    assert [i["id"] for i in agent] == [j for n, j in enumerate(ids) if n % 2][::-1]
    wide = _all_pages(client, "jobs", prefix="job_")
    assert [i["id"] for i in wide] == ids[::-1]
    first = client.simulate_get(
        "/console/api/lists/jobs", params={"agent": "nobody", "limit": "5"}
    ).json
    assert first["items"] == [] and first["partial"] is True and first["next"]


@pytest.mark.parametrize(
    ("path", "params", "message"),
    [
        ("/console/api/lists/jobs", {"state": "done"}, "state 'done' is not one of"),
        ("/console/api/lists/jobs", {"limit": "0"}, "limit must be 1..200"),
        ("/console/api/lists/jobs", {"limit": "x"}, "limit must be a whole number"),
        ("/console/api/lists/jobs", {"after": "garbage"}, "after must be the 'next' cursor"),
        ("/console/api/lists/runs", {}, "no list 'runs'"),
        ("/console/api/log", {"kind": "job,blob"}, "stream kind 'blob' is not one of"),
        ("/console/api/log", {"before": "-1"}, "before must be a whole number"),
        ("/console/api/export", {"from": "1"}, "to is required"),
        ("/console/api/export", {"from": "5", "to": "2"}, "1 <= from <= to"),
        ("/console/api/export", {"from": "1", "to": "200001"}, "at most 100000 events"),
        ("/console/api/entities/lease/workspace", {}, "no entity kind 'lease'"),
    ],
)
def test_console_refuses_bad_input_with_a_400_and_changes_nothing(
    make_client: MakeClient, path: str, params: dict[str, str], message: str
) -> None:
    client, runtime = make_client()
    _jobs(runtime, 3)
    head = runtime.engine.log.head()
    answer = client.simulate_get(path, params=params)
    assert answer.status_code == 400, answer.text
    assert answer.json["error"]["code"] == "invalid_argument"
    assert message in answer.json["error"]["message"]
    assert runtime.engine.log.head() == head


def test_console_entity_has_its_row_and_lineage(make_client: MakeClient) -> None:
    client, runtime = make_client()
    runtime.engine.log.write(
        lambda tx: tx.append(
            "session:s0", 0, [SessionCreated(agent="a0", origin="v1", has_controller=False)]
        )
    )
    parent = _jobs(runtime, 1, prefix="parent_")[0]
    children = _jobs(runtime, 2, parent=parent, prefix="child_")
    answer = client.simulate_get(f"/console/api/entities/job/{parent}").json
    assert answer["stream_id"] == f"job:{parent}" and answer["row"]["state"] == "running"
    assert "start_token" not in answer["row"]
    links = {(link["relation"], link["id"]) for link in answer["lineage"]}
    assert links == {("child", children[0]), ("child", children[1]), ("session", "s0")}
    child = client.simulate_get(f"/console/api/entities/job/{children[1]}").json
    assert ("parent", parent) in {(link["relation"], link["id"]) for link in child["lineage"]}
    session = client.simulate_get("/console/api/entities/session/s0").json
    assert {link["id"] for link in session["lineage"]} == {parent, children[0]}
    missing = client.simulate_get("/console/api/entities/job/nope")
    assert missing.status_code == 404 and missing.json["error"]["code"] == "not_found"


def test_console_log_filters_by_kind_and_type_and_pages_back(make_client: MakeClient) -> None:
    client, runtime = make_client()
    _jobs(runtime, 10)
    runtime.engine.log.write(
        lambda tx: tx.append(
            "session:s9", 0, [SessionCreated(agent="a0", origin="v1", has_controller=False)]
        )
    )
    head = runtime.engine.log.head()
    everything = client.simulate_get("/console/api/log", params={"limit": "200"}).json
    assert [e["position"] for e in everything["events"]] == list(range(head, 0, -1))
    assert everything["next"] is None
    sessions = client.simulate_get("/console/api/log", params={"kind": "session"}).json
    assert [e["stream_id"] for e in sessions["events"]] == ["session:s9"]
    finished = client.simulate_get(
        "/console/api/log", params={"type": "job.finished", "limit": "3"}
    ).json
    older = client.simulate_get(
        "/console/api/log", params={"type": "job.finished", "before": str(finished["next"])}
    ).json
    found = finished["events"] + older["events"]
    assert len(found) == 8 and {e["event_type"] for e in found} == {"job.finished"}
    assert found[0]["event"]["outcome"] in ("ok", "error")


def test_console_export_is_foldline_export_of_the_range(make_client: MakeClient) -> None:
    client, runtime = make_client()
    _jobs(runtime, 5)
    answer = client.simulate_get("/console/api/export", params={"from": "3", "to": "8"})
    assert answer.status_code == 200
    assert answer.headers["Content-Disposition"] == 'attachment; filename="foldline-3-8.jsonl"'
    expected = b"".join(
        export_line(row) + b"\n" for row in runtime.engine.log.iter_rows(2) if row[0] <= 8
    )
    assert answer.content == expected
    assert [json.loads(line)["position"] for line in answer.text.splitlines()] == list(range(3, 9))


def test_console_overview_counts_every_state_of_every_machine(make_client: MakeClient) -> None:
    client, runtime = make_client()
    _jobs(runtime, 14)
    view = client.simulate_get("/console/api/overview").json
    assert view["counts"]["job"]["running"] == 2  # jobs 0 and 7
    assert view["counts"]["job"]["error"] == 2  # jobs 5 and 10
    assert view["counts"]["job"]["ok"] == 10
    assert view["counts"]["task"] == dict.fromkeys(view["counts"]["task"], 0)
    assert {p["id"] for p in view["errors"]} == {"job_00005", "job_00010"}
    assert view["head"] == runtime.engine.log.head()
    assert view["read_only"] is False and view["token_required"] is True


def test_console_overview_lists_notify_hooks_started_and_never_finished(
    make_client: MakeClient,
) -> None:
    client, runtime = make_client()
    ids = _jobs(runtime, 3)  # job_00001 and job_00002 finished ok
    runtime.engine.log.write(lambda tx: tx.append(f"job:{ids[1]}", 3, [JobNotifyStarted(pid=77)]))
    runtime.engine.log.write(
        lambda tx: tx.append(
            f"job:{ids[2]}", 3, [JobNotifyStarted(pid=78), JobNotifyFinished(exit_code=0, ms=5)]
        )
    )
    view = client.simulate_get("/console/api/overview").json
    assert [(p["id"], p["detail"]) for p in view["unfinished_notifications"]] == [
        (ids[1], "notify hook pid 77")
    ]
