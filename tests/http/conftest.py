from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import falcon.testing
import pytest

from adapters.http.a2a.push import payload_for
from adapters.http.app import create_app
from adapters.services.runtime import Runtime
from adapters.settings.config import ServerConfig, load_config
from engine.clock import Clock
from tests.support.server import OPERATOR_TOKEN

MakeClient = Callable[..., tuple[falcon.testing.TestClient, Runtime]]


def sql(runtime: Runtime, query: str, *params: Any) -> list[Any]:
    """Rows of a read-model query, for a test to check: the runtime itself holds no SQL."""
    rows: list[Any] = runtime.engine.log.connection().execute(query, params).fetchall()
    return rows


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def make_client(workspace: Path) -> Iterator[MakeClient]:
    runtimes: list[Runtime] = []

    def make(
        runner: str = "cat",
        holder: str = "test-holder",
        clock: Clock | None = None,
        **settings: object,
    ) -> tuple[falcon.testing.TestClient, Runtime]:
        config: ServerConfig = replace(
            load_config({}, workspace=str(workspace)),
            runner=runner,
            **{
                "token": OPERATOR_TOKEN,
                "sync_wait_s": 20,
                "sse_keepalive_s": 0.2,
                "output_flush_s": 0.05,
                **settings,
            },  # type: ignore[arg-type]
        )
        runtime = Runtime(config, holder, clock=clock, push_payload=payload_for(config))
        runtimes.append(runtime)
        # Every request carries the operator token unless a test sends its own Authorization.
        headers = {"Authorization": f"Bearer {config.token}"} if config.token else None
        return falcon.testing.TestClient(create_app(runtime), headers=headers), runtime

    yield make
    for runtime in runtimes:
        runtime.close()
