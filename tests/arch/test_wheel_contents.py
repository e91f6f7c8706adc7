"""The wheel lists every package explicitly (implicit discovery is off, see pyproject), so a
package or page file left out of the list would be missing from an install."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from adapters.http.console import asset_names

ROOT = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_wheel_lists_every_python_package() -> None:
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("engine", "adapters", "projections")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found <= set(SETUPTOOLS["packages"])


def test_wheel_carries_every_console_page_file() -> None:
    assert "adapters.http.console_pages" in SETUPTOOLS["packages"]
    patterns = SETUPTOOLS["package-data"]["adapters.http.console_pages"]
    files = sorted(
        p.name for p in (ROOT / "adapters" / "http" / "console_pages").iterdir() if p.is_file()
    )
    assert files == asset_names()  # nothing in the folder that is not served, and back
    assert all(any(fnmatch.fnmatch(name, p) for p in patterns) for name in files)
