"""Steering and following from the page: the token asked for once, cancel with and without
it, and the log view resuming its events feed across a server restart."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import WAIT_MS, invoke, job_state, running
from tests.support.channel import CHANNEL_ENV, of_type, wait_for
from tests.support.console import serve_console
from tests.support.server import Server, free_port

pytestmark = [pytest.mark.browser, pytest.mark.server]

SLEEPY = "cat >/dev/null; sleep 30"
JSON = {"Content-Type": "application/json"}


def _wait_state(server: Any, job_id: str, wanted: str, limit: float = 20) -> str:
    deadline = time.monotonic() + limit
    state = job_state(server, job_id)
    while state != wanted and time.monotonic() < deadline:
        time.sleep(0.05)
        state = job_state(server, job_id)
    return state


def test_console_asks_for_the_token_once_and_controls_need_it(
    workspace: Path, console: Any
) -> None:
    from playwright.sync_api import expect

    with running(workspace, FOLDLINE_RUNNER=SLEEPY, FOLDLINE_TOKEN="s3cret") as server:
        job = invoke(server, "long", wait=False)["invocation"]
        assert _wait_state(server, job, "running") == "running"
        tab = console(server, with_token=False)
        page = tab.open(f"#/job/{job}")
        heading = page.locator("main h1")
        expect(heading).to_have_text("This server needs the operator token")
        page.locator("#token-prompt").fill("wrong")
        page.locator("#token-form button").click()
        # The wrong token's own refusal draws the prompt anew, its field empty (the text
        # "401 unauthorized" was there already, from the first load's refusal).
        expect(page.locator("#token-prompt")).to_have_value("")
        expect(page.locator("main")).to_contain_text("401 unauthorized")
        page.locator("#token-prompt").fill("s3cret")
        page.locator("#token-form button").click()
        expect(heading).to_contain_text(f"job {job}")
        expect(page.locator("#live")).to_have_text("live")  # the feed streams with the token
        # A token gone wrong behind the page's back: the control is refused, nothing changes.
        page.evaluate("sessionStorage.setItem('foldline-token', 'stale')")
        page.locator('button[data-action="cancel"]').click()
        notice = page.locator("#notice")
        expect(notice).to_contain_text("cancel refused (401 unauthorized)")
        assert job_state(server, job) == "running"
        page.evaluate("sessionStorage.setItem('foldline-token', 's3cret')")
        page.locator('button[data-action="cancel"]').click()
        expect(notice).to_contain_text("cancel: accepted")
        assert _wait_state(server, job, "cancelled") == "cancelled"
        expect(page.locator("h1 .state")).to_have_text("cancelled", timeout=WAIT_MS)
        types = page.locator("#timeline tbody tr").evaluate_all(
            "(rows) => rows.map((r) => r.dataset.type)"
        )
        assert types[-2:] == ["job.cancel_requested", "job.cancelled"]
        # A control the machine refuses is said so on the page, with the server's reason.
        page.locator('button[data-action="pause"]').click()
        expect(notice).to_contain_text("pause refused (409")
        assert job_state(server, job) == "cancelled"
        assert any("/v1/events" in url for url in tab.urls)
        assert not [url for url in tab.urls if "s3cret" in url or "stale" in url]
        assert not tab.errors


def test_console_log_view_resumes_after_the_server_restarts(workspace: Path, console: Any) -> None:
    """The feed reconnects to the new server and carries on from the last position it saw:
    every position appears once, none is missing."""
    from playwright.sync_api import expect

    port = free_port()
    with running(workspace, port=port) as server:
        invoke(server, "before the restart")
        tab = console(server)
        page = tab.open("#/log")
        before = page.locator("#log tbody tr").count()
        assert before > 0
    # The tab stays open on a stopped server; a new one comes up on the same port.
    with running(workspace, port=port) as again:
        after = invoke(again, "after the restart")
        status, _, raw = again.request("GET", "/console/api/overview")
        assert status == 200
        head = json.loads(raw)["head"]
        expect(page.locator(f'#log tbody tr[data-position="{head}"]')).to_have_count(
            1, timeout=WAIT_MS * 2
        )
        positions = page.locator("#log tbody tr").evaluate_all(
            "(rows) => rows.map((r) => Number(r.dataset.position))"
        )
        assert positions == list(range(head, 0, -1)), "a position is missing or repeated"
        assert after["status"] == "ok"
        assert page.evaluate("document.getElementById('live').className") == "on"


def test_console_entity_page_shows_output_while_the_job_runs(workspace: Path, console: Any) -> None:
    from playwright.sync_api import expect

    words = " ".join(f"w{i}" for i in range(80))
    with running(workspace, FOLDLINE_DEMO_DELAY_S="0.1") as server:
        job = invoke(server, words, wait=False)["invocation"]
        page = console(server).open(f"#/job/{job}")
        expect(page.locator("#output")).to_contain_text("echo: w0 w1 w2")
        assert job_state(server, job) == "running"  # seen live, not read back afterwards
        expect(page.locator("h1 .state")).to_have_text("ok", timeout=WAIT_MS * 2)
        expect(page.locator("#output")).to_contain_text("w79")
        assert page.locator("#result").inner_text().startswith("echo: w0")


def test_console_read_only_shows_a_log_without_any_control(workspace: Path, console: Any) -> None:
    """``foldline console DB`` over a server's log: the same pages, no buttons, no writes."""
    from playwright.sync_api import expect

    with running(workspace) as server:
        job = invoke(server, "audited")["invocation"]
    db = workspace / ".foldline" / "foldline.db"
    with serve_console(db) as port:
        # No token at all: the read-only console asks for none, and the page sends none.
        tab = console(Server(None, port, workspace, token=None))  # type: ignore[arg-type]
        page = tab.open()
        expect(page.locator("main")).to_contain_text("read-only (auditor)")
        expect(page.locator('g[data-kind="job"][data-state="ok"] .count')).to_have_text("1")
        tab.go(f"#/job/{job}")
        expect(page.locator("main")).to_contain_text("read-only console: no controls")
        assert page.locator("button[data-action]").count() == 0
        assert page.locator("#timeline tbody tr").count() >= 3
        assert not tab.errors


def test_console_session_taint_needs_a_reason_and_the_page_says_why(
    workspace: Path, console: Any
) -> None:
    from playwright.sync_api import expect

    with running(workspace, FOLDLINE_RUNNER=SLEEPY) as server:
        session = invoke(server, "long", wait=False)["session"]
        page = console(server).open(f"#/session/{session}")
        page.locator('button[data-action="taint"]').click()
        notice = page.locator("#notice")
        expect(notice).to_contain_text("taint refused (400 invalid_argument)")
        expect(notice).to_contain_text("reason")
        page.locator("#reason").fill("prompt injection suspected")
        page.locator('button[data-action="taint"]').click()
        expect(notice).to_contain_text("taint: accepted")
        status, _, raw = server.request("GET", f"/v1/sessions/{session}")
        assert status == 200
        assert json.loads(raw)["taint_reasons"] == ["prompt injection suspected"]
        expect(page.locator("#row")).to_contain_text("prompt injection suspected")


def test_console_job_page_shows_the_live_channel_and_steers_it(
    workspace: Path, console: Any
) -> None:
    """A run that takes input: its turn and its question are on the page, and a steer and a
    response sent from it are recorded and delivered into the run."""
    from playwright.sync_api import expect

    with running(workspace, **CHANNEL_ENV) as server:
        job = invoke(server, "wait for the page", wait=False)["invocation"]
        wait_for(server, job, "job.turn_started")
        tab = console(server)
        page = tab.open(f"#/job/{job}")
        expect(page.locator("#channel-input")).to_have_text("lines")
        expect(page.locator("#channel-turn")).to_have_text("t1")
        expect(page.locator("#steer-turn")).to_have_value("t1")  # prefilled with the turn
        page.locator("#steer-text").fill("from the page")
        page.locator('button[data-action="steer"]').click()
        expect(page.locator("#notice")).to_contain_text("steer: recorded as control")
        events = wait_for(server, job, "job.control_delivered")
        [sent] = of_type(events, "job.control")
        assert sent["event"]["text"] == "from the page" and sent["event"]["turn"] == "t1"
        row = page.locator(f'#channel-controls tr[data-control="{sent["position"]}"]')
        expect(row).to_contain_text("delivered")
        asking = invoke(server, "ask: which way?", wait=False)["invocation"]
        wait_for(server, asking, "job.input_requested")
        tab.go(f"#/job/{asking}")
        expect(page.locator('#channel-requests li[data-request="q1"]')).to_contain_text(
            "which way?"
        )
        expect(page.locator("#respond-request")).to_have_value("q1")
        page.locator("#respond-text").fill("north")
        page.locator('button[data-action="respond"]').click()
        wait_for(server, asking, "job.finished")
        status, _, raw = server.request("GET", f"/v1/jobs/{asking}")
        assert status == 200 and "answer to q1: north" in json.loads(raw)["result"]
        status, _, raw = server.request("GET", f"/v1/jobs/{job}")
        revision = str(json.loads(raw)["control_revision"])  # a channel control names it
        server.request("POST", f"/v1/jobs/{job}/finalize", b"{}", {**JSON, "If-Match": revision})
        wait_for(server, job, "job.finished")
        assert not tab.errors
