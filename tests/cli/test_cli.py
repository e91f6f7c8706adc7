from __future__ import annotations

from pathlib import Path

from tests.support.cli import foldline


def test_cli_serve_refuses_a_file_that_is_not_a_log_with_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "logs" / "bogus.db"  # the log's directory is never the workspace
    bogus.parent.mkdir()
    bogus.write_bytes(b"definitely not sqlite" * 200)
    done = foldline("serve", "--workspace", str(tmp_path), "--db", str(bogus))
    assert done.returncode == 2
    assert done.stderr.startswith("foldline: not_a_log:")
    assert len(done.stderr.strip().splitlines()) == 1


def test_cli_serve_refuses_invalid_settings_with_one_line(tmp_path: Path) -> None:
    import os

    cases = [
        (["--bind", "nowhere"], {}, "bind"),
        (["--workers", "0"], {}, "--workers"),
        ([], {"FOLDLINE_SYNC": "sometimes"}, "FOLDLINE_SYNC"),
        ([], {"FOLDLINE_LEASE_STALE_S": "soon"}, "FOLDLINE_LEASE_STALE_S"),
        ([], {"FOLDLINE_RESOURCE_GROUPS": "cpu"}, "FOLDLINE_RESOURCE_GROUPS"),
        (["--workspace", str(tmp_path / "missing")], {}, "not a directory"),
    ]
    for args, env, needle in cases:
        full = (
            ["serve", "--workspace", str(tmp_path), *args]
            if "--workspace" not in args
            else ["serve", *args]
        )
        done = foldline(*full, env={**os.environ, **env})
        assert done.returncode == 2, (args, env, done.stderr)
        assert done.stderr.startswith("foldline: invalid configuration:") and needle in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_cli_help_of_every_subcommand_ends_with_an_example() -> None:
    for command in (
        "serve",
        "machines",
        "verify",
        "diff",
        "history",
        "state",
        "export",
        "tail",
        "rebuild",
        "checkpoint",
    ):
        done = foldline(command, "--help")
        assert done.returncode == 0
        assert done.stdout.strip().splitlines()[-1].startswith(f"example: foldline {command}")
