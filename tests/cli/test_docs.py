"""The README's and docs/'s examples and diagrams are checked, so they cannot rot.

Every ```python block of README.md and docs/*.md runs (those that need a running server are run
by the server tests instead: tests/http/test_a2a_sdk.py drives the same client calls, and
tests/http/test_coordination_server.py runs docs/agents-and-workers.md's root runner as
written); the README's first calls run with curl against a real server; the machine diagrams
are compared with the code's; every CLI subcommand is documented.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.server import serve

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
TEXT = {page: page.read_text() for page in PAGES}


def _needs_a_server(block: str) -> bool:
    return "127.0.0.1" in block or "FOLDLINE_URL" in block


EXAMPLES = [
    (page.relative_to(ROOT).as_posix(), block)
    for page in PAGES
    for block in re.findall(r"```python\n(.*?)```", TEXT[page], flags=re.S)
    if not _needs_a_server(block)
]
# What each example that runs must print, keyed by a word only that example uses.
EXPECTED = {
    "open_engine": ["conflict", "capacity"],
    "DoorInstalled": [
        "version_conflict 0 2",
        "('door:back',) 3 4",
        "door_stuck",
        "[('back', 'bo'), ('front', 'ana')]",
    ],
}


@pytest.mark.parametrize(
    "page, block", EXAMPLES, ids=[f"{page}-{n}" for n, (page, _) in enumerate(EXAMPLES)]
)
def test_python_example_runs(tmp_path: Path, page: str, block: str) -> None:
    script = tmp_path / "example.py"
    script.write_text(block)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, f"{page}: {done.stderr}"
    for key, lines in EXPECTED.items():
        if key in block:
            for line in lines:
                assert line in done.stdout, f"{page}: {line!r} not printed"


def test_every_example_that_ran_before_still_runs() -> None:
    """The engine and door examples (once the README's two) are among those run above."""
    for key in EXPECTED:
        assert [page for page, block in EXAMPLES if key in block] == ["docs/embedding.md"], key


def test_readme_is_short_and_shows_the_commands() -> None:
    text = TEXT[README]
    assert len(text.splitlines()) < 250, "README.md is a front page: move detail into docs/"
    for command in ("make serve", "make test", "make test-fast", "make lint"):
        assert command in text, command


def _first_calls() -> str:
    """The README's block of first curl calls."""
    blocks = re.findall(r"```sh\n(.*?)```", TEXT[README], flags=re.S)
    calls = [block for block in blocks if "curl" in block and "/invocations" in block]
    assert len(calls) == 1, "README.md should have one block of first curl calls"
    return calls[0]


@pytest.mark.server
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_readme_first_calls_run_against_a_real_server(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with serve(workspace, {"FOLDLINE_DEMO_DELAY_S": "0.01"}) as server:
        script = _first_calls().replace("127.0.0.1:8080", f"127.0.0.1:{server.port}")
        lines = [line for line in script.splitlines() if not line.lstrip().startswith("#")]
        done = subprocess.run(
            ["sh", "-ec", "\n".join(lines)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    out = re.sub(r'":\s+', '":', done.stdout)  # the comments show spaced JSON, the server not
    assert '"result":"echo: hello\\n"' in out, out  # the sync call
    assert "event: accepted" in out and "event: delta" in out and "event: result" in out, out
    assert '"status":"accepted"' in out and '"id":"call-8"' in out, out  # async and its get
    assert '"status":"Healthy' in out, out  # /ping


def test_machine_diagrams_are_drawn_by_the_code() -> None:
    golden = (ROOT / "tests" / "golden" / "machines.mmd").read_text()
    page = TEXT[ROOT / "docs" / "machines.md"]
    for block in golden.split("%% ")[1:]:
        kind, _, body = block.partition("\n")
        assert f"```mermaid\n{body.rstrip()}\n```" in page, f"docs/machines.md: {kind} is stale"


def test_every_cli_subcommand_is_documented() -> None:
    from adapters.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in commands:
        assert f"foldline {name}" in TEXT[README], f"README.md does not name foldline {name}"
        documented = [p for p in PAGES if p != README and f"foldline {name}" in TEXT[p]]
        assert documented, f"no page of docs/ documents foldline {name}"


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading (GitHub's rule)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_links_between_pages_resolve() -> None:
    for page in PAGES:
        text = re.sub(r"```.*?```", "", TEXT[page], flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            assert resolved.exists(), f"{page.name}: link to {target} is broken"
            if anchor and resolved.suffix == ".md":
                assert anchor in _anchors(resolved), f"{page.name}: no anchor #{anchor}"
