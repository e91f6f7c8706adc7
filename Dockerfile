# foldline as a container: `foldline serve` on 0.0.0.0:8080, the workspace a volume.
#
#   docker build -t foldline .                                  # linux/amd64 or the host's
#   docker buildx build --platform linux/arm64 -t foldline .    # AgentCore runs arm64
#   docker run -d --cap-add SYS_ADMIN -p 8080:8080 -v foldline-ws:/workspace foldline
#
# Build arguments:
#   BASE          any Debian-like image with Python 3.11+ and python3 -m venv
#                 (default: the official slim Python image)
#   APT_PACKAGES  Debian packages the agents need, e.g. "git" (about 95 MB with perl and
#                 libcurl, so not installed by default)
#
# A build context holding a `wheels/` directory installs every Python package from it with
# --no-index (a build with no package index, or one behind a proxy the build cannot trust);
# without one, pip installs from the index as usual. Only pyproject.toml (and the wheelhouse)
# decide the dependency layer, so editing the code rebuilds only the last layers.
#
# The address and the workspace are environment variables, not flags: AgentCore runs the
# image's own command and changes only the environment (FOLDLINE_BIND=0.0.0.0:9000 for A2A,
# FOLDLINE_WORKSPACE=/mnt/<name> where its file system is mounted). `docker run IMAGE
# foldline serve --bind ...` works as well; flags win over the environment.
#
# On EFS (AgentCore's file system; FOLDLINE_WORKSPACE=/mnt/<name>) the server turns its
# shared-volume mode on by itself: the mount table lists the log's file system as nfs4, so the
# log is opened only under the workspace lease, reads included (ADR 0042; one line on stderr at
# boot, or at the first request when the mount comes later, says which mode and why).
# FOLDLINE_SHARED_VOLUME is deliberately not set here: on a Docker volume the mode stays off.
#
# Session dirs (docs/agentcore.md "Session dirs"): set FOLDLINE_SESSION_BASE=/mnt/<name> and
# the same command runs `foldline front` instead: each runtime session id gets its own
# <base>/<sid>, bound at /workspace for a worker `foldline serve` as uid 1000 (needs SYS_ADMIN).
#
# The server runs as root, PID 1, and handles SIGTERM itself (gunicorn's master): a graceful
# stop finishes open requests, releases the workspace lease and exits 0. Runs execute as the
# run user 1000:1000 (FOLDLINE_RUN_USER) through util-linux's unshare, mount and setpriv;
# hiding the log's directory in a mount namespace needs CAP_SYS_ADMIN
# (docs/agentcore.md).
ARG BASE=python:3.11-slim
FROM ${BASE}

ARG APT_PACKAGES=""
# The sandbox's tools (in every Debian image; installed only where a base lacks them) and the
# run user, who owns the workspace's files and never the log.
RUN set -eu; \
    need=""; \
    for tool in unshare mount setpriv; do \
        command -v "$tool" >/dev/null || need="util-linux mount"; \
    done; \
    if [ -n "$need$APT_PACKAGES" ]; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            $need $APT_PACKAGES; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    groupadd --gid 1000 agent; \
    useradd --uid 1000 --gid 1000 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin agent; \
    mkdir -p /workspace; \
    chown 1000:1000 /workspace

ENV VIRTUAL_ENV=/opt/foldline \
    PATH=/opt/foldline/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python3 -m venv /opt/foldline

# The dependencies (and the build backend) alone: `wheel[s]` matches the wheelhouse if the
# context has one and nothing otherwise, and its wheels land beside pyproject.toml.
COPY pyproject.toml wheel[s] /build/
RUN set -eu; \
    cd /build; \
    python3 -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb')); \
print('\n'.join(p['build-system']['requires'] + p['project']['dependencies']))" \
        > requirements.txt; \
    if ls ./*.whl >/dev/null 2>&1; then \
        pip install --no-index --find-links /build -r requirements.txt; \
    else \
        pip install -r requirements.txt; \
    fi

# foldline itself, built with the backend installed above: no index needed here.
COPY README.md pyproject.toml /build/src/
COPY engine /build/src/engine
COPY projections /build/src/projections
COPY adapters /build/src/adapters
RUN pip install --no-deps --no-build-isolation /build/src \
    && rm -rf /build/src \
    && foldline machines >/dev/null

ENV FOLDLINE_WORKSPACE=/workspace \
    FOLDLINE_BIND=0.0.0.0:8080
# What runs get of the runtime's environment: its role's AWS and OTEL variables.
ENV FOLDLINE_RUN_ENV="AWS_REGION,AWS_DEFAULT_REGION,AWS_ACCESS_KEY_ID,AWS_SECRET_ACCESS_KEY,AWS_SESSION_TOKEN,AWS_CONTAINER_*,OTEL_*,AGENT_OBSERVABILITY_*"
VOLUME /workspace
WORKDIR /workspace
EXPOSE 8080
# /ping answers from memory (nothing under the workspace is opened for it). The port is the
# one `--bind` names on PID 1's command line (9000 for A2A), else FOLDLINE_BIND's.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 CMD ["python3", "-c", "\
import os, urllib.request; \
argv = open('/proc/1/cmdline', 'rb').read().decode().split('\\0'); \
bind = argv[argv.index('--bind') + 1] if '--bind' in argv else os.environ.get('FOLDLINE_BIND', ':8080'); \
urllib.request.urlopen('http://127.0.0.1:%s/ping' % bind.rpartition(':')[2], timeout=4)"]
STOPSIGNAL SIGTERM
CMD ["foldline", "serve"]
