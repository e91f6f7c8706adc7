"""A real Docker engine (Debian's docker.io) and a base image made without any image registry.

The engine is ``/usr/bin/docker`` by its full path: a client earlier on ``PATH`` may talk to no
daemon. When no daemon answers, the session starts ``dockerd`` itself and stops it at the end.
The base image is Debian bookworm from the host's own apt mirror (``debootstrap
--variant=minbase`` with Python and venv, then ``docker import``), made once and kept under its
tag for later runs. The build gets its Python packages from a wheelhouse the host's pip makes,
because inside a container the package index may not be reachable or trusted.

Without root, docker or debootstrap these tests skip with one line locally and fail under
``CI=true``, where ``.ci/run`` installs them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER = "/usr/bin/docker"
DOCKERD = "/usr/sbin/dockerd"
DEBOOTSTRAP = "/usr/sbin/debootstrap"
BASE_TAG = "foldline-test-base:bookworm"
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
# What the Dockerfile copies; the rest of the checkout stays out of the build context.
CONTEXT = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md")
PACKAGES = ("engine", "projections", "adapters")


def docker(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``/usr/bin/docker ARGS``; the exit code is the caller's to check."""
    return subprocess.run(
        [DOCKER, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def must(answer: subprocess.CompletedProcess[str]) -> str:
    """The command's stdout; a failure with the tail of what it said."""
    assert answer.returncode == 0, (
        f"{' '.join(answer.args)} exited {answer.returncode}:\n"
        f"{(answer.stdout + answer.stderr)[-3000:]}"
    )
    return answer.stdout


def missing_tools() -> str | None:
    if os.geteuid() != 0:
        return "the image tests run a Docker engine and debootstrap as root"
    absent = [tool for tool in (DOCKER, DOCKERD, DEBOOTSTRAP) if not os.access(tool, os.X_OK)]
    if absent:
        return f"no {', '.join(absent)} (apt-get install docker.io debootstrap)"
    return None


def is_answering() -> bool:
    try:
        return docker("info", "--format", "{{.ServerVersion}}", timeout=20).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture(scope="session")
def docker_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A Docker daemon that answers: the running one, or one started here (at most 60 s)
    and stopped after the session."""
    why = missing_tools()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"image tests must run in CI: {why}")
        pytest.skip(why)
    if is_answering():
        yield
        return
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    with open(log, "wb") as out:
        daemon = subprocess.Popen(
            [DOCKERD], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 60
        while not is_answering():
            assert daemon.poll() is None, f"dockerd exited: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, (
                f"dockerd silent for 60 s: {log.read_text()[-2000:]}"
            )
            time.sleep(0.2)
        yield
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(timeout=10)


def debian_mirror() -> str:
    """The host's own Debian mirror: the first ``deb`` source (one-line or deb822) whose suites
    include bookworm or the host's own codename. Read at run time, never written down."""
    codenames = {"bookworm"}
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                codenames.add(line.split("=", 1)[1].strip('"'))
    sources: list[tuple[str, list[str]]] = []
    apt = Path("/etc/apt")
    for path in [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]:
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                fields = line.split("#", 1)[0].split()
                if fields[:1] != ["deb"]:
                    continue
                fields = fields[1:]
                if fields and fields[0].startswith("["):  # [arch=... signed-by=...]
                    while fields and not fields[0].endswith("]"):
                        fields = fields[1:]
                    fields = fields[1:]
                if len(fields) >= 2:
                    sources.append((fields[0], [fields[1]]))
    for path in sorted((apt / "sources.list.d").glob("*.sources")):
        with contextlib.suppress(OSError):
            for stanza in path.read_text().split("\n\n"):
                keys: dict[str, str] = {}
                for line in stanza.splitlines():
                    name, colon, value = line.partition(":")
                    if colon and not line.startswith(("#", " ")):
                        keys[name.strip().lower()] = value.strip()
                if "deb" in keys.get("types", "").split() and keys.get("enabled") != "no":
                    uris = keys.get("uris", "").split()
                    if uris:
                        sources.append((uris[0], keys.get("suites", "").split()))
    for uri, suites in sources:
        if codenames & set(suites):
            return uri
    raise AssertionError(f"no Debian mirror for {sorted(codenames)} in the host's apt sources")


def unmount_under(root: Path) -> None:
    """Unmount what debootstrap left mounted under ``root`` (its /proc, /sys, a bind of the
    host's /dev) when it was cut off: removing the tree must never reach through a mount.

    Raises:
        AssertionError: something is still mounted there.
    """

    def mounted() -> list[str]:
        points = [
            line.split()[4].encode().decode("unicode_escape")
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
        ]
        return sorted((p for p in points if p.startswith(f"{root}/")), key=len, reverse=True)

    for point in mounted():
        subprocess.run(["umount", "--lazy", point], capture_output=True, timeout=30, check=False)
    left = mounted()
    assert not left, f"still mounted under {root}: {left}"


def make_base(tag: str, workdir: Path, arch: str | None = None, timeout: float = 600) -> float:
    """Debootstrap bookworm into ``workdir`` and import it as ``tag``, unless ``tag`` exists.
    Returns the seconds it took (0 when cached)."""
    if docker("image", "inspect", tag, timeout=30).returncode == 0:
        return 0.0
    started = time.monotonic()
    rootfs = workdir / "rootfs"
    arch_flag = [f"--arch={arch}"] if arch else []
    try:
        answer = subprocess.run(
            [
                DEBOOTSTRAP,
                *arch_flag,
                "--variant=minbase",
                f"--include={BASE_PACKAGES}",
                "bookworm",
                str(rootfs),
                debian_mirror(),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    finally:
        unmount_under(rootfs)
    must(answer)
    # Nothing of the host's apt cache or lists needs to travel into the image.
    for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for item in (rootfs / leftover).glob("*"):
            if item.is_file():
                item.unlink()
    if arch is None:
        with subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE) as tar:
            imported = subprocess.run(
                [DOCKER, "import", "-", tag],
                stdin=tar.stdout,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert tar.stdout is not None
            tar.stdout.close()
            assert tar.wait(timeout=60) == 0
        must(imported)
    else:
        # docker import labels every image with the daemon's own architecture (its --platform
        # needs an experimental daemon), and a build for another platform would then try to
        # pull the base: an image FROM scratch built for that platform carries the label.
        must(
            subprocess.run(
                ["tar", "-C", str(rootfs), "-cf", str(workdir / "rootfs.tar"), "."],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
        )
        (workdir / "Dockerfile").write_text("FROM scratch\nADD rootfs.tar /\n")
        shutil.rmtree(rootfs, ignore_errors=True)
        build(workdir, tag, None, platform=f"linux/{arch}")
        (workdir / "rootfs.tar").unlink()
        labelled = must(docker("image", "inspect", "--format={{.Architecture}}", tag)).strip()
        assert labelled == arch, f"{tag} is labelled {labelled}, not {arch}"
    shutil.rmtree(rootfs, ignore_errors=True)
    return time.monotonic() - started


@pytest.fixture(scope="session")
def base_image(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The amd64 (host) base image, made once and kept for later runs."""
    make_base(BASE_TAG, tmp_path_factory.mktemp("base"))
    return BASE_TAG


def requirements() -> list[str]:
    """What the Dockerfile's dependency layer installs: the build backend and the dependencies."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [*project["build-system"]["requires"], *project["project"]["dependencies"]]


def build_context(where: Path, pip_args: tuple[str, ...] = ()) -> Path:
    """The Dockerfile's context in ``where``: the sources and a wheelhouse (``wheels/``) the
    host's pip made (``pip wheel``, or ``pip download`` with ``pip_args`` for another
    platform)."""
    context = where / "context"
    context.mkdir()
    for name in CONTEXT:
        shutil.copy2(ROOT / name, context / name)
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, context / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    verb = ["download", *pip_args, "--dest"] if pip_args else ["wheel", "--wheel-dir"]
    must(
        subprocess.run(
            [sys.executable, "-m", "pip", *verb, str(context / "wheels"), *requirements()],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    )
    return context


def build(context: Path, tag: str, base: str | None, platform: str | None = None) -> None:
    """``docker build`` with BuildKit and no network: everything comes from the context.
    BuildKit keeps its layer cache apart from images, so removing ``tag`` keeps the cache."""
    flags = [f"--platform={platform}"] if platform else []
    must(
        docker(
            "build",
            *flags,
            "--network=none",
            "--progress=plain",
            *([f"--build-arg=BASE={base}"] if base else []),
            f"--tag={tag}",
            str(context),
            timeout=1200,
            env={**os.environ, "DOCKER_BUILDKIT": "1"},
        )
    )
