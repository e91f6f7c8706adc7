"""``adapters/`` stands in named wings, each importing only the wings below it (ADR 0045).

From the top: the command line; the programs it starts (the server, the console server, the
example agent) beside the front, a program with a package of its own; HTTP; the runtime's
services; the operator's settings; the OS and file primitives. A wing may import its own
modules and any wing of a lower tier, never one above it nor a peer of its own tier. The
root holds ``__init__.py`` only, and every folder of ``adapters/`` is a wing of the order, so
a new module has to be placed. That no package of ``adapters/`` has a folder cycle (so that
``http/a2a/`` may use ``http/errors.py``, which never imports it back) is
``tests/arch/test_cycles.py``'s, for every tree. Each check is shown to fail on a probe, as
``test_layers`` does for the floors.
"""

from __future__ import annotations

from pathlib import Path

from tests.arch.test_structure import imports_of, modules_of

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "adapters"
# The wings from the top down; the wings of one tier are peers and do not import each other.
WINGS: tuple[tuple[str, ...], ...] = (
    ("cli",),  # the foldline command
    ("programs", "front"),  # a process's main: server, console server, example agent; the front
    ("http",),  # falcon resources, A2A in http/a2a/
    ("services",),  # the runtime and the parts it drives
    ("settings",),  # what the operator decides, resolved at boot
    ("system",),  # processes, files, mounts, outbound HTTP, git
)
# What may stand in the adapters root beside the wings: the package's own __init__.
ROOT_FILES = {"__init__.py"}


def tier_of(wing: str) -> int:
    return next(n for n, tier in enumerate(WINGS) if wing in tier)


def wing_of(module: str) -> str | None:
    """The wing a dotted module of ``adapters`` is in; None for the root package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def graph_of(root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of ``adapters`` and the modules of ``adapters`` it imports."""
    modules = modules_of(root / PACKAGE, root)
    known = set(modules)
    return {name: imports_of(path, known, root) - {name} for name, path in modules.items()}


def wrong_way(graph: dict[str, set[str]]) -> list[str]:
    """Every import that crosses wings upwards or sideways, or touches the root package."""
    found = []
    for module, targets in sorted(graph.items()):
        here = wing_of(module)
        for target in sorted(targets):
            there = wing_of(target)
            if here == there:
                continue
            if here is None or there is None:
                found.append(f"{module} imports {target}: the root imports no wing, and back")
            elif tier_of(there) <= tier_of(here):
                found.append(f"{module} ({here}) imports {target} ({there})")
    return found


def unplaced(root: Path = ROOT) -> list[str]:
    """Folders of ``adapters/`` that are no wing of the order, wings that are missing, and
    modules in the root beyond ``ROOT_FILES``."""
    top = root / PACKAGE
    # A folder that holds no source (the bytecode a moved package left behind) is no folder of
    # the tree: git does not know it, and a fresh checkout does not have it.
    folders = {p.name for p in top.iterdir() if p.is_dir() and any(p.rglob("*.py"))}
    wings = {wing for tier in WINGS for wing in tier}
    files = {p.name for p in top.glob("*.py")}
    return sorted(
        [f"{PACKAGE}/{name}/ is no wing of WINGS" for name in folders - wings]
        + [f"{PACKAGE}/{name}/ is missing" for name in wings - folders]
        + [f"{PACKAGE}/{name} stands in the root" for name in files - ROOT_FILES]
    )


# -- the order of the wings -------------------------------------------------------------------


def test_wings_every_folder_is_a_wing_and_the_root_holds_only_its_init() -> None:
    assert not unplaced(), "\n".join(unplaced())


def test_wings_import_only_the_wings_below() -> None:
    problems = wrong_way(graph_of())
    assert not problems, "\n".join(problems)


def test_wings_the_order_is_the_one_recorded() -> None:
    """What ADR 0045 decides, read back: a change to the order is a change to the ADR."""
    assert [wing for tier in WINGS for wing in tier] == [
        "cli",
        "programs",
        "front",
        "http",
        "services",
        "settings",
        "system",
    ]
    assert tier_of("programs") == tier_of("front") < tier_of("http")


# -- the checks can fail ----------------------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_wings_a_reverse_arrow_is_caught(tmp_path: Path) -> None:
    """What dispatch once did (a service importing the front's hand-off), a primitive reaching
    for a setting, a peer importing a peer and the root importing a wing are all reported;
    arrows down the order, and within a wing, are not."""
    root = _tree(
        tmp_path,
        {
            "__init__.py": "from adapters.settings import config\n",
            "cli/__init__.py": "def main():\n    from adapters.programs import server\n",
            "programs/__init__.py": "",
            "programs/server.py": "from adapters.http import app\n"
            "from adapters.front import lifecycle\n",
            "front/__init__.py": "",
            "front/lifecycle.py": "from adapters.services import sandbox\n",
            "http/__init__.py": "",
            "http/app.py": "from adapters.services.runtime import Runtime\n",
            "services/__init__.py": "",
            "services/runtime.py": "from adapters.services import dispatch\n",
            "services/dispatch.py": "from adapters.front import handoff\n",
            "services/sandbox.py": "from adapters.settings.config import ServerConfig\n",
            "front/handoff.py": "",
            "settings/__init__.py": "",
            "settings/config.py": "from adapters.system import processes\n",
            "system/__init__.py": "",
            "system/processes.py": "import typing\nif typing.TYPE_CHECKING:\n"
            "    from adapters.settings.config import ServerConfig\n",
        },
    )
    assert wrong_way(graph_of(root)) == [
        "adapters imports adapters.settings.config: the root imports no wing, and back",
        "adapters.programs.server (programs) imports adapters.front.lifecycle (front)",
        "adapters.services.dispatch (services) imports adapters.front.handoff (front)",
        "adapters.system.processes (system) imports adapters.settings.config (settings)",
    ]


def test_wings_an_unplaced_folder_or_root_module_is_caught(tmp_path: Path) -> None:
    wings = {f"{wing}/__init__.py": "" for tier in WINGS for wing in tier if wing != "front"}
    root = _tree(tmp_path, {"__init__.py": "", "runtime.py": "", "helpers/x.py": "", **wings})
    assert unplaced(root) == [
        "adapters/front/ is missing",
        "adapters/helpers/ is no wing of WINGS",
        "adapters/runtime.py stands in the root",
    ]
