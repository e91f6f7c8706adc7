"""The commands that serve a workspace or a log: ``serve``, ``token`` and ``console``.

Each picks its backend from ``--db`` (a file path or a ``postgresql://`` URL)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.cli.exits import BIND, OK, REFUSED, refuse
from engine.errors import NotALog
from engine.storage import check_target, parse_target
from engine.storage.sqlite.schema import LATEST

if TYPE_CHECKING:
    from adapters.settings.config import ServerConfig


def _looks_like_sqlite(path: Path) -> bool:
    with open(path, "rb") as handle:
        header = handle.read(16)
    return header == b"SQLite format 3\x00" or header == b""


def _shown(url: str) -> str:
    """The URL without its password; a boot error without the extra or with a bad schema."""
    return check_target(url).shown  # checks the URL, connects to nothing


def _server_config(args: argparse.Namespace, **flags: Any) -> ServerConfig:
    """The configuration ``serve`` runs with (environment, then flags).

    Raises:
        ConfigError: a setting is invalid (the caller answers it from ``exits.EXIT_CODES``).
    """
    from adapters.settings.config import load_config

    return load_config(workspace=args.workspace, db=args.db, **flags)


def _warn_of_own_origin(public_url: str | None, bind: str) -> None:
    """One line on stderr when the card would name the container's own origin
    (``adapters.settings.public_url.origin_warning``)."""
    from adapters.settings.public_url import origin_warning

    warning = origin_warning(public_url, bind)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)


def run_front(args: argparse.Namespace) -> int:
    """Run the session-dirs front (ADR 0036): blocks until its worker ends."""
    import os

    from adapters.front import serve
    from adapters.front.settings import load_front_config
    from adapters.settings.config import ConfigError

    try:
        config, listener = serve.prepare(
            load_front_config(workspace=args.workspace, bind=args.bind)
        )
    except ConfigError as ex:
        return refuse(ex)
    # The front is what callers reach (its worker listens on loopback and says nothing).
    _warn_of_own_origin(os.environ.get("FOLDLINE_PUBLIC_URL") or None, config.bind)
    return serve.run(config, dict(os.environ), listener)


def run_serve(args: argparse.Namespace) -> int:
    """Run the HTTP server on the workspace (blocks until stopped); with
    ``FOLDLINE_SESSION_BASE`` set, the session-dirs front instead (one setting for an image)."""
    import os

    if os.environ.get("FOLDLINE_SESSION_BASE"):
        return run_front(args)
    from adapters.programs.server import FoldlineServer
    from adapters.services import sandbox, state_access
    from adapters.settings.config import ConfigError
    from adapters.system import logs

    try:
        try:  # every logger of the server, gunicorn's too, in JSON lines (ADR 0059)
            logs.configure(logs.level_name())
        except ValueError as ex:
            raise ConfigError(str(ex)) from ex
        config = _server_config(args, bind=args.bind, workers=args.workers, threads=args.threads)
        # The anchor lives there: a directory this server cannot enter would answer every
        # request 503 later; it stops the boot instead, with one line naming it.
        state_access.check(config.state_dir)
    except ConfigError as ex:
        return refuse(ex)
    # Lazy activation (design.md §4.2): nothing under the workspace is created or opened here; on
    # AgentCore the volume is mounted at the first invocation, and a log made before that
    # would live on the microVM's own disk. A file already there is checked by its header
    # only, so a wrong --db is still a boot error; on a shared volume not even that: the log is
    # read only under the lease (ADR 0035), and a file that is no log is refused when it opens.
    if (
        config.db_url is None
        and not config.shared_volume
        and config.db.is_file()
        and not _looks_like_sqlite(config.db)
    ):
        raise NotALog(f"{config.db} is not a SQLite database")  # main answers it from the table
    config = replace(config, new_log=args.new_log)
    if config.volume is not None:  # which mode, and why (ADR 0042): one line
        print(config.volume.shown(), file=sys.stderr, flush=True)
    jail = sandbox.for_server(config)
    try:
        if jail is not None:  # runs that could not be isolated are never started
            config = replace(config, run_isolation=sandbox.check(jail, config.run_isolation))
            jail = sandbox.for_server(config)
    except ConfigError as ex:
        return refuse(ex)
    if config.run_user is not None and config.run_user.is_root:
        print(
            "foldline: warning: FOLDLINE_RUN_USER=root: runs execute as root and can reach"
            " the log and the operator's token, one another, and a read-only agent's workspace",
            file=sys.stderr,
        )
    _warn_of_own_origin(config.public_url, config.bind)
    boot = json.dumps(
        {
            "db": _shown(config.db_url) if config.db_url else str(config.db),
            "log": "opened at the first request that needs it",
            "schema": LATEST,
            "bind": config.bind,
            "workers": config.workers,
            "runs_as": f"{jail.user.name} ({jail.isolation})" if jail else "the server's user",
            "state_dir": str(config.state_dir),
            # The names and patterns of the server's environment runs get (never values).
            "run_env": config.run_env.entries,
            # Where the operator token is (never the token itself): made at first activation.
            "operator_token": "FOLDLINE_TOKEN"
            if config.token is not None
            else str(config.operator_token_file),
        }
    )
    print(boot, flush=True)
    logging.getLogger("foldline.server").info("foldline serve on %s: %s", config.bind, boot)
    FoldlineServer(config).run()
    return OK


def run_token(args: argparse.Namespace) -> int:
    """Print the operator token file's path and token, or with ``--rotate`` replace it first
    (running workers pick the new one up at their next request, no restart)."""
    from adapters.settings import operator_token
    from adapters.settings.config import ConfigError

    try:
        config = _server_config(args)
    except ConfigError as ex:
        return refuse(ex)
    if config.token is not None:
        print(
            "foldline: FOLDLINE_TOKEN is set: it is the operator token and no file is used"
            " (rotate it by restarting the server with a new value)",
            file=sys.stderr,
        )
        return REFUSED
    path = config.operator_token_file
    if not path.is_file():
        print(
            f"foldline: no operator token at {path} yet: the server makes it at its first"
            " activation (the first request that opens the log)",
            file=sys.stderr,
        )
        return REFUSED
    token = operator_token.rotate(path) if args.rotate else path.read_text().strip()
    print(json.dumps({"file": str(path), "token": token}))
    return OK


def run_console(args: argparse.Namespace) -> int:
    """Serve the console read-only over a log file: no lease, no runner, no writes."""
    from adapters.programs.console_server import ConsoleServer, check_log, check_loopback
    from adapters.settings.config import ConfigError, parse_bind

    try:
        bind = check_loopback(parse_bind(args.bind))
    except ConfigError as ex:
        return refuse(ex, BIND)
    remote = parse_target(args.db).remote
    db: Path | str = args.db if remote else Path(args.db).resolve()
    head = check_log(db)
    shown = _shown(args.db) if remote else str(db)
    print(json.dumps({"db": shown, "head": head, "bind": bind, "read_only": True}), flush=True)
    ConsoleServer(db, bind).run()
    return OK
