"""``GET /metrics`` in the Prometheus text format (0.0.4).

Entity counts and the lease come from the read models (the same in every worker); append,
commit and batch figures are this worker process's own (label ``pid``), as Prometheus expects
from a multi-process server scraped through one port.
"""

from __future__ import annotations

import os

import falcon

from adapters.http.ports import ServerRuntime
from adapters.services.tenure import LEASE
from engine.domain.lease import LeaseState
from engine.errors import LogMissing

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def render(runtime: ServerRuntime) -> str:
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {value:g}" for labels, value in samples)

    # First, and alone while it is 1: a log that is gone has nothing else worth reading.
    try:
        reads = runtime.reads
        missing = runtime.log_missing()
    except LogMissing as ex:  # refused at open: the anchor saw a log that is not there
        missing = ex.message
    metric(
        "foldline_log_missing",
        "gauge",
        "1 when the log file was deleted, moved or replaced, or does not extend its anchor.",
        [(f'{{pid="{os.getpid()}"}}', 1 if missing is not None else 0)],
    )
    if missing is not None:
        return "\n".join(lines) + "\n"
    counts = reads.stream_counts()
    metric(
        "foldline_entities",
        "gauge",
        "Entities per machine and state.",
        [(f'{{kind="{c.kind}",state="{c.state}"}}', c.count) for c in counts],
    )
    head = reads.log_head()
    metric("foldline_log_head", "gauge", "Position of the last committed event.", [("", head)])
    stats, pid = runtime.log_stats, f'pid="{os.getpid()}"'
    metric(
        "foldline_appended_events_total",
        "counter",
        "Events appended by this process.",
        [(f"{{{pid}}}", stats.events)],
    )
    metric(
        "foldline_commits_total",
        "counter",
        "Commits that appended events, this process.",
        [(f"{{{pid}}}", stats.commits)],
    )
    metric(
        "foldline_commit_seconds_total",
        "counter",
        "Time spent in those commits.",
        [(f"{{{pid}}}", stats.commit_seconds)],
    )
    sizes = dict(stats.batch_sizes)
    buckets = [
        (f'{{{pid},le="{bound}"}}', sum(n for size, n in sizes.items() if size <= bound))
        for bound in BATCH_BUCKETS
    ]
    total_batches = sum(sizes.values())
    buckets.append((f'{{{pid},le="+Inf"}}', total_batches))
    lines.append("# HELP foldline_group_commit_batch_size Requests per shared transaction.")
    lines.append("# TYPE foldline_group_commit_batch_size histogram")
    lines.extend(
        f"foldline_group_commit_batch_size_bucket{labels} {value:g}" for labels, value in buckets
    )
    lines.append(
        f"foldline_group_commit_batch_size_sum{{{pid}}} "
        f"{sum(size * n for size, n in sizes.items()):g}"
    )
    lines.append(f"foldline_group_commit_batch_size_count{{{pid}}} {total_batches:g}")
    metric(
        "foldline_open_streams",
        "gauge",
        "SSE streams open in this process.",
        [(f"{{{pid}}}", runtime.open_streams)],
    )
    metric(
        "foldline_notify_lost_total",
        "counter",
        "Notify hooks cut off by a crash (recorded job.notify_lost), never run again.",
        [("", reads.lost_notifies())],
    )
    metric(
        "foldline_controls",
        "gauge",
        "Controls sent into runs, by what became of them.",
        [(f'{{state="{state}"}}', n) for state, n in reads.control_counts().items()],
    )
    metric(
        "foldline_push_deliveries",
        "gauge",
        "A2A push notifications owed or settled, by how far their delivery got (ADR 0039).",
        [(f'{{progress="{p}"}}', n) for p, n in reads.delivery_counts().items()],
    )
    lease = reads.lease(LEASE)
    if lease is not None:
        mine = 1 if lease.holder == runtime.holder and lease.state == LeaseState.HELD else 0
        metric(
            "foldline_lease_epoch", "gauge", "Epoch of the workspace lease.", [("", lease.epoch)]
        )
        metric(
            "foldline_lease_held",
            "gauge",
            "1 if this server instance holds the lease.",
            [(f'{{holder="{lease.holder}"}}', mine)],
        )
    return "\n".join(lines) + "\n"


class Metrics:
    def __init__(self, runtime: ServerRuntime) -> None:
        self.runtime = runtime

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = "text/plain; version=0.0.4; charset=utf-8"
        resp.text = render(self.runtime)
