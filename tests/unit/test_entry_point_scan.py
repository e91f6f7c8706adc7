"""The quick look for ``foldline.machines`` entry points finds what ``importlib.metadata`` finds,
on every kind of path entry, so that skipping ``importlib.metadata`` when the look finds
nothing changes no answer (adapters/settings/declarations.py)."""

from __future__ import annotations

import sys
import zipfile
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from adapters.settings.declarations import GROUP, _entry_points, _may_name

NAMING = f"[{GROUP}]\ndoors = doors:DECLARATIONS\n"
OTHER = "[console_scripts]\ndoors = doors:main\n"


def _distribution(folder: Path, name: str, entry_points_text: str | None) -> None:
    info = folder / f"{name}-1.0.{'egg-info' if name.endswith('egg') else 'dist-info'}"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if entry_points_text is not None:
        (info / "entry_points.txt").write_text(entry_points_text)


def _found(path: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[bool, list[str]]:
    monkeypatch.setattr(sys, "path", path)
    quick = sorted(f"{p.name} = {p.value}" for p in _entry_points(GROUP))
    assert quick == sorted(f"{p.name} = {p.value}" for p in entry_points(group=GROUP))
    return _may_name(GROUP), quick


def test_entry_point_scan_says_none_only_when_no_distribution_names_the_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _distribution(tmp_path, "plain", None)
    _distribution(tmp_path, "scripts", OTHER)
    (tmp_path / "flat-1.0.egg-info").write_text("Metadata-Version: 1.0\nName: flat\n")
    missing = str(tmp_path / "not-there")
    assert _found([*sys.path, str(tmp_path), missing], monkeypatch) == (False, [])


@pytest.mark.parametrize("name", ["doors_plugin", "doors_egg"])
def test_entry_point_scan_finds_a_folder_distribution_naming_the_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    _distribution(tmp_path, "scripts", OTHER)
    _distribution(tmp_path, name, NAMING)
    assert _found([*sys.path, str(tmp_path)], monkeypatch) == (
        True,
        ["doors = doors:DECLARATIONS"],
    )


def test_entry_point_scan_leaves_a_zip_on_the_path_to_importlib_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("doors_plugin-1.0.dist-info/METADATA", "Name: doors-plugin\n")
        zipped.writestr("doors_plugin-1.0.dist-info/entry_points.txt", NAMING)
    assert _found([*sys.path, str(archive)], monkeypatch) == (
        True,
        ["doors = doors:DECLARATIONS"],
    )


def test_entry_point_scan_leaves_another_distribution_finder_to_importlib_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Finder:
        @staticmethod
        def find_distributions(*_: object, **__: object) -> list[object]:
            return []

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder()])
    assert _may_name(GROUP)


def test_entry_point_scan_leaves_an_egg_on_the_path_to_importlib_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    egg = tmp_path / "doors_plugin-1.0.egg"
    (egg / "EGG-INFO").mkdir(parents=True)
    (egg / "EGG-INFO" / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: doors-plugin\n")
    (egg / "EGG-INFO" / "entry_points.txt").write_text(NAMING)
    assert _found([*sys.path, str(egg)], monkeypatch) == (True, ["doors = doors:DECLARATIONS"])
