"""The agent's environment through ``foldline front`` (issue 40): the front forwards
``FOLDLINE_RUN_ENV`` and the variables it names to its worker, whose runs then get exactly
those, and none of the front's secrets."""

from __future__ import annotations

import os

import pytest

from adapters.settings.run_env import SOURCE_LIST
from adapters.system.processes import ENV_ALLOWLIST
from tests.support import runners
from tests.support.front import front, place

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0, reason="the front needs root (mounts)"),
]

# A shell one (the run user's sandbox need not reach this checkout's interpreter).
PRINTER = "cat >/dev/null; env"
RUN_OWN = runners.RUN_OWN | runners.SHELL_OWN
NAMED = {
    "AWS_REGION": "eu-central-1",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://169.254.170.2/v2/credentials/front-test",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
    "AGENT_MODEL": "a name the front does not forward by itself",
}
KEPT_OUT = {
    "UNRELATED_SETTING": "not for the agent",
    "SLACK_BOT_TOKEN": "xoxb-channel-secret",
    "FOLDLINE_NOTIFY": "cat >/dev/null",
}


def test_front_runs_get_exactly_the_named_variables_and_no_secret() -> None:
    env = {
        **NAMED,
        **KEPT_OUT,
        "FOLDLINE_RUNNER": PRINTER,
        "FOLDLINE_RUN_ENV": ",".join((*SOURCE_LIST, "AGENT_MODEL")),
    }
    with place() as where:
        where.mount()
        with front(where, env) as served:
            status, answer = served.invoke({"prompt": "print it"})
            assert status == 200 and answer["status"] == "ok", (answer, served.output())
    printed = dict(line.split("=", 1) for line in answer["result"].splitlines() if "=" in line)
    for name, value in NAMED.items():
        assert printed[name] == value, name
    # What is left once the run's own, the allowlist and who it runs as are set aside.
    rest = set(printed) - RUN_OWN - set(ENV_ALLOWLIST)
    assert rest == set(NAMED), rest
    for name in (*KEPT_OUT, "FOLDLINE_TOKEN", "FOLDLINE_FRONT_TOKEN", "FOLDLINE_FRONT_URL"):
        assert name not in printed, name
