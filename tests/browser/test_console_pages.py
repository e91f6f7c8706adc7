"""The console in headless Chromium against a real ``foldline serve``: live counts, timelines,
markup shown as text, keyboard-only use, and the screenshot in docs/console.md."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import WAIT_MS, invoke, running
from tests.support.writers import agents_file, repository

pytestmark = [pytest.mark.browser, pytest.mark.server]

# Runs until the test creates ``release`` in the workspace (at most 30 s).
HELD = "cat >/dev/null; for i in $(seq 300); do [ -f release ] && break; sleep 0.1; done; echo ok"
SCREENSHOT = "FOLDLINE_CONSOLE_SCREENSHOT"  # where to keep the overview's screenshot, if set


def _count(page: Any, kind: str, state: str) -> Any:
    return page.locator(f'g[data-kind="{kind}"][data-state="{state}"] .count')


def test_console_overview_counts_change_when_a_job_finishes_without_reload(
    workspace: Path, console: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from playwright.sync_api import expect

    with running(workspace, FOLDLINE_RUNNER=HELD) as server:
        tab = console(server)
        page = tab.open()
        first_render = page.evaluate(
            "Number(document.getElementById('main').dataset.ready)"
            " - performance.getEntriesByType('navigation')[0].startTime"
        )
        with capsys.disabled():
            print(f"\nconsole.first_render_ms: {first_render:.0f}")
        expect(_count(page, "job", "ok")).to_have_text("0")
        page.evaluate("window.sameDocument = true")  # gone if the page reloads
        job = invoke(server, "held", wait=False)
        expect(_count(page, "job", "running")).to_have_text("1")
        (workspace / "release").touch()
        expect(_count(page, "job", "ok")).to_have_text("1", timeout=WAIT_MS * 2)
        expect(_count(page, "job", "running")).to_have_text("0")
        assert page.evaluate("window.sameDocument") is True
        assert job["invocation"]
        assert not tab.errors and not tab.dialogs


def test_console_timeline_lists_a_jobs_events_in_order(workspace: Path, console: Any) -> None:
    with running(workspace) as server:
        job = invoke(server, "three little words")
        status, _, raw = server.request("GET", f"/v1/streams/job:{job['invocation']}/events")
        assert status == 200
        recorded = [(e["position"], e["event_type"]) for e in json.loads(raw)["events"]]
        page = console(server).open(f"#/job/{job['invocation']}")
        rows = page.locator("#timeline tbody tr")
        shown = [
            (int(r.get_attribute("data-position")), r.get_attribute("data-type"))
            for r in rows.all()
        ]
        assert shown == recorded
        assert [p for p, _ in shown] == sorted(p for p, _ in shown)
        assert shown[0][1] == "job.accepted" and shown[-1][1] == "job.finished"
        assert "job.output" in {t for _, t in shown}
        page.locator("#timeline summary").first.click()  # each payload expands to its JSON
        assert '"session"' in page.locator("#timeline pre").first.inner_text()
        assert page.locator("#result").inner_text().startswith("echo: three little words")


def test_console_renders_markup_in_a_prompt_as_text(workspace: Path, console: Any) -> None:
    markup = "<img src=x onerror=alert(1)>"
    with running(workspace) as server:
        job = invoke(server, markup)
        tab = console(server)
        for fragment in (f"#/job/{job['invocation']}", "#/jobs", "#/log"):
            page = tab.open(fragment)
            page.evaluate("document.querySelectorAll('main details').forEach((d) => d.open = true)")
            assert markup in page.locator("main").inner_text(), fragment
            assert page.locator("main img").count() == 0, fragment
        assert tab.dialogs == [] and tab.errors == []


def _focusables(page: Any) -> int:
    """Number every control the keyboard should reach; returns how many there are."""
    return int(
        page.evaluate(
            """() => {
              const all = [...document.querySelectorAll(
                'a[href], button, input, select, summary, [tabindex="0"]')]
                .filter((el) => !el.disabled && el.getClientRects().length);
              all.forEach((el, i) => el.setAttribute('data-kbd', String(i)));
              return all.length;
            }"""
        )
    )


def _tab_through(page: Any, total: int) -> set[str]:
    page.locator("body").focus()
    page.evaluate("document.activeElement && document.activeElement.blur()")
    reached: set[str] = set()
    for _ in range(total + 10):  # bounded: every stop once, plus the browser's own
        page.keyboard.press("Tab")
        index = page.evaluate("document.activeElement.getAttribute('data-kbd')")
        if index is not None:
            reached.add(index)
        if len(reached) == total:
            break
    return reached


def test_console_keyboard_alone_reaches_every_control(workspace: Path, console: Any) -> None:
    with running(workspace, FOLDLINE_RUNNER=HELD) as server:
        job = invoke(server, "held", wait=False)
        tab = console(server)
        for fragment in ("", "#/jobs", f"#/job/{job['invocation']}", "#/log?kind=job"):
            page = tab.open(fragment)
            total = _focusables(page)
            assert total > 5, fragment
            reached = _tab_through(page, total)
            missed = page.evaluate(
                "(r) => [...document.querySelectorAll('[data-kbd]')]"
                ".filter((el) => !r.includes(el.dataset.kbd)).map((el) => el.outerHTML)",
                sorted(reached),
            )
            assert not missed, f"{fragment or 'overview'}: not reached by Tab: {missed}"
        # And the keyboard works them: the skip link moves the focus to the content without
        # changing the page, and Enter follows a link.
        page = tab.open("")
        page.locator("#skip").focus()
        page.keyboard.press("Enter")
        assert page.evaluate("[document.activeElement.id, location.hash]") == ["main", ""]
        page.locator('header a[href="#/jobs"]').focus()
        page.keyboard.press("Enter")
        tab.ready()
        assert page.evaluate("location.hash") == "#/jobs"
        (workspace / "release").touch()


def test_console_screenshot_of_the_overview(workspace: Path, console: Any) -> None:
    """The picture in docs/console.md; kept when FOLDLINE_CONSOLE_SCREENSHOT names a file."""
    from playwright.sync_api import expect

    with running(workspace) as server:
        for prompt in ("write the release notes", "summarise the incident", "tidy the docs"):
            invoke(server, prompt)
        tab = console(server)
        tab.page.set_viewport_size({"width": 1100, "height": 760})
        page = tab.open()
        expect(page.locator('g[data-kind="job"][data-state="ok"] .count')).to_have_text("3")
        shot = workspace.parent / "console-overview.png"
        page.screenshot(path=str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if os.environ.get(SCREENSHOT):
            shutil.copyfile(shot, os.environ[SCREENSHOT])


def test_console_job_page_shows_a_writers_changed_paths_and_patch(
    tmp_path: Path, console: Any
) -> None:
    from playwright.sync_api import expect

    workspace = tmp_path / "repo"
    repository(workspace, {"a/one.txt": "alpha\n"})
    agents = agents_file(tmp_path, tmp_path / "scripts")
    with running(workspace, FOLDLINE_AGENTS_FILE=str(agents)) as server:
        server.invoke({"prompt": "hello", "session": "s1"})  # the session to spawn in
        order = {"write": {"a/one.txt": "ALPHA\n", "a/two.txt": "two\n"}}
        spawn = {"session": "s1", "agent": "writer", "prompt": json.dumps(order)}
        status, _, raw = server.request(
            "POST",
            "/v1/jobs",
            {**spawn, "write_scope": ["a"]},
            {"Content-Type": "application/json"},
        )
        assert status == 201, raw
        job_id = json.loads(raw)["jobs"][0]["job_id"]
        page = console(server).open(f"#/job/{job_id}")
        expect(page.locator("#patch-paths li")).to_have_text(["a/one.txt", "a/two.txt"])
        expect(page.locator("#patch")).to_contain_text("+ALPHA")
        expect(page.locator("#patch")).to_contain_text("+two")


def test_console_session_page_lists_its_refusals(workspace: Path, console: Any) -> None:
    """Issue 44, goal 6: a refused control is on its session's audit stream, and the session's
    page shows it in its Refusals table (code, control, target)."""
    with running(workspace, FOLDLINE_RUNNER=HELD) as server:
        job = invoke(server, "held", wait=False)
        job_id, session = job["invocation"], job["session"]
        stale = {"If-Match": "7", "Content-Type": "application/json"}  # it is at 0
        status, _, raw = server.request("POST", f"/v1/jobs/{job_id}/pause", {}, stale)
        assert status == 412, raw
        page = console(server).open(f"#/session/{session}")
        row = page.locator("#refusals tbody tr").first
        row.wait_for(timeout=WAIT_MS)
        cells = row.locator("td").all_inner_texts()
        assert cells[1:4] == ["control", "pause", "stale_revision"], cells
        assert cells[5] == job_id, cells
        (workspace / "release").touch()
