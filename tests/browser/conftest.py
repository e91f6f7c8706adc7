"""Headless Chromium from the distribution (``/usr/bin/chromium``), driven by Playwright.

Playwright is told the executable (it never downloads a browser). Without a Chromium these
tests skip with one line locally, and fail under ``CI=true``, where ``.ci/run`` installs it.
The flags keep a browser on a closed network from waiting on connections it cannot make;
Playwright gives every browser an empty profile of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import Server, serve

# FOLDLINE_CHROMIUM names another build (or a missing one, to see the skip and the CI failure).
CHROMIUM = Path(
    os.environ.get("FOLDLINE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
)
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 15_000  # the longest any page element is waited for


def _missing() -> str | None:
    if not CHROMIUM.is_file():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium chromium-driver)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One browser per module: Playwright's sync API keeps an event loop running in this
    thread while it is open, which later tests' ``asyncio.run`` would trip over."""
    why = _missing()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests must run in CI: {why}")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield launched
        launched.close()


class Console:
    """One browser tab on the console of one server, recording what must never happen and
    every URL it asks for (a token must never be in one)."""

    def __init__(self, page: Any, server: Server) -> None:
        self.page = page
        self.server = server
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.urls: list[str] = []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.urls.append(r.url))
        page.set_default_timeout(WAIT_MS)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/console/"

    def open(self, fragment: str = "") -> Any:
        self.page.goto(self.base + fragment)
        self.ready()
        return self.page

    def ready(self) -> None:
        self.page.wait_for_selector("#main[data-ready]", state="attached")

    def go(self, fragment: str) -> None:
        """Navigate inside the page (a hash change, no reload) and wait for the render."""
        self.page.evaluate("document.getElementById('main').removeAttribute('data-ready')")
        self.page.evaluate("(f) => { location.hash = f; }", fragment)
        self.ready()


@pytest.fixture
def console(browser: Any) -> Iterator[Any]:
    """``console(server)`` opens a tab on that server, with the server's operator token in the
    tab's session storage as if typed once (``with_token=False``: none); tabs close after the
    test."""
    contexts: list[Any] = []

    def make(server: Server, with_token: bool = True) -> Console:
        context = browser.new_context(viewport={"width": 1200, "height": 850})
        contexts.append(context)
        if with_token and server.token:
            context.add_init_script(
                f"sessionStorage.setItem('foldline-token', {json.dumps(server.token)})"
            )
        return Console(context.new_page(), server)

    yield make
    for context in contexts:
        with contextlib.suppress(Exception):  # a context of a crashed browser is gone already
            context.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def invoke(server: Server, prompt: str, *, wait: bool = True) -> dict[str, Any]:
    status, body = server.invoke({"prompt": prompt, "async": not wait}, timeout=60)
    assert status in (200, 202), body
    return body  # type: ignore[no-any-return]


def job_state(server: Server, job_id: str) -> str:
    status, _, raw = server.request("GET", f"/v1/jobs/{job_id}")
    assert status == 200, raw
    return str(json.loads(raw)["state"])


@contextlib.contextmanager
def running(workspace: Path, port: int | None = None, **env: str) -> Iterator[Server]:
    """A real ``foldline serve`` with the demo agent fast, one worker."""
    settings = {"FOLDLINE_DEMO_DELAY_S": "0.02", **env}
    with serve(workspace, settings, workers=1, port=port) as server:
        yield server
