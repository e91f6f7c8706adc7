"""Which machines and projections the audit commands (and the server's machines) know: the
built-in domain, then every installed package's entry point in the group ``foldline.machines``,
then ``FOLDLINE_MACHINES``, then each ``--machines``. A later declaration of the same stream
kind (or projection name) replaces an earlier one, so a package may redefine a built-in machine.

Each source is ``MODULE:ATTRIBUTE`` or a plugin file ``FILE.py[:ATTRIBUTE]`` (default
``DECLARATIONS``; the environment variable may hold several, separated by commas). The
attribute is a ``MachineSpec``, a ``Projection``, a sequence mixing both, or a function of no
arguments returning one of those.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.machinery import PathFinder
from typing import Any

from engine.domain import MACHINES
from engine.errors import InvalidArgument
from engine.machines import MachineSpec
from engine.projection import Projection
from projections import default_projections

GROUP = "foldline.machines"
ENVIRONMENT = "FOLDLINE_MACHINES"
_INFO_SUFFIXES = (".dist-info", ".egg-info")  # the folders importlib.metadata reads


def _may_name(group: str) -> bool:
    """Whether an installed distribution may declare an entry point in ``group``.

    False only when each place ``importlib.metadata`` reads entry points from was read here
    and none mentions the group: every ``*.dist-info`` and ``*.egg-info`` folder in a folder
    on ``sys.path``, the finder being the standard one. A zip or egg on the path, another
    finder that lists distributions, or a file that cannot be read says True, and so
    ``importlib.metadata`` decides. Why: importing it (with ``email`` and ``zipfile``) and
    listing every distribution cost each ``foldline`` command 17-20 ms of CPU at its start
    (of about 160 ms), for a group that is usually empty; this look costs about 1 ms.
    """
    for finder in sys.meta_path:
        if finder is not PathFinder and getattr(finder, "find_distributions", None):
            return True
    needle = group.encode()
    for entry in sys.path:
        if not isinstance(entry, str) or entry.lower().endswith(".egg"):
            return True  # an egg (its EGG-INFO), or an entry only importlib.metadata reads
        try:
            with os.scandir(entry or ".") as children:
                found = [c.path for c in children if c.name.lower().endswith(_INFO_SUFFIXES)]
        except NotADirectoryError:
            return True  # a zip on the path
        except OSError:
            continue  # a path entry that is not there lists no distribution either
        for info in found:
            try:
                with open(os.path.join(info, "entry_points.txt"), "rb") as text:
                    if needle in text.read():
                        return True
            except (FileNotFoundError, NotADirectoryError):
                continue  # no entry points, or an egg-info that is a single file
            except OSError:
                return True
    return False


def _entry_points(group: str) -> Iterable[Any]:
    """The entry points in ``group``, as ``importlib.metadata.entry_points`` finds them."""
    if not _may_name(group):
        return ()
    from importlib.metadata import entry_points

    return entry_points(group=group)


@dataclass(frozen=True)
class Declarations:
    machines: list[MachineSpec]
    projections: list[Projection]
    sources: list[str]  # where the declarations beyond the built-in domain came from


def _plugin_file(target: str, path: str) -> Any:
    """A plugin given as a Python file (``foldline replay --with new_machines.py``)."""
    name = "foldline_plugin_" + hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not os.path.isfile(path):
        raise InvalidArgument(f"--machines {target!r}: no such Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and msgspec look their module up
    try:
        spec.loader.exec_module(module)
    except Exception as ex:  # the user's file: say which one failed, and how
        sys.modules.pop(name, None)
        raise InvalidArgument(f"--machines {target!r}: importing it failed: {ex!r}") from ex
    return module


def _resolve(target: str) -> Any:
    module_name, colon, attribute = target.partition(":")
    if module_name.endswith(".py"):
        # A plugin file; without an attribute, its DECLARATIONS.
        found: Any = _plugin_file(target, module_name)
        attribute = attribute or "DECLARATIONS"
    elif not colon or not module_name or not attribute:
        raise InvalidArgument(
            f"--machines {target!r}: expected MODULE:ATTRIBUTE or FILE.py[:ATTRIBUTE]"
        )
    else:
        try:
            found = importlib.import_module(module_name)
        except ImportError as ex:
            raise InvalidArgument(
                f"--machines {target!r}: cannot import {module_name}: {ex}"
            ) from ex
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise InvalidArgument(
                f"--machines {target!r}: {module_name} has no {attribute}"
            ) from None
    return found


def _items(target: str, value: Any) -> Iterable[MachineSpec | Projection]:
    if callable(value) and not isinstance(value, (MachineSpec, Projection, type)):
        try:
            value = value()
        except Exception as ex:  # the user's function: say which one failed, and how
            raise InvalidArgument(f"--machines {target!r}: calling it failed: {ex}") from ex
    if isinstance(value, type) and issubclass(value, Projection):
        value = value()
    if isinstance(value, (MachineSpec, Projection)):
        return [value]
    if not isinstance(value, Iterable) or isinstance(value, (str, bytes, Mapping)):
        raise InvalidArgument(
            f"--machines {target!r} is a {type(value).__name__}, not MachineSpecs or Projections"
        )
    items = []
    for item in value:
        if isinstance(item, type) and issubclass(item, Projection):
            item = item()
        if not isinstance(item, (MachineSpec, Projection)):
            raise InvalidArgument(
                f"--machines {target!r} holds a {type(item).__name__},"
                " not a MachineSpec or a Projection"
            )
        items.append(item)
    return items


def load_declarations(
    options: Sequence[str] = (), environ: Mapping[str, str] | None = None
) -> Declarations:
    """Raises InvalidArgument: a source that cannot be imported or holds something else."""
    environ = os.environ if environ is None else environ
    machines: dict[str, MachineSpec] = {spec.kind: spec for spec in MACHINES}
    projections: dict[str, Projection] = {p.name: p for p in default_projections()}
    sources: list[tuple[str, Any]] = []
    for point in _entry_points(GROUP):
        try:
            sources.append((f"{point.name} = {point.value}", point.load()))
        except Exception as ex:  # a broken plugin is a clear error, not a traceback
            raise InvalidArgument(f"entry point {point.name} ({point.value}): {ex}") from ex
    listed = [t.strip() for t in environ.get(ENVIRONMENT, "").split(",") if t.strip()]
    sources += [(target, _resolve(target)) for target in (*listed, *options)]
    for target, value in sources:
        for item in _items(target, value):
            if isinstance(item, MachineSpec):
                machines[item.kind] = item
            else:
                projections[item.name] = item
    return Declarations(
        list(machines.values()), list(projections.values()), [t for t, _ in sources]
    )
