"""docs/layout.md lists every module of the tree with its docstring, and is kept current."""

from __future__ import annotations

import difflib

from tests.support import layout


def test_layout_document_matches_the_tree() -> None:
    expected = layout.render()
    current = layout.TARGET.read_text() if layout.TARGET.exists() else ""
    diff = "".join(
        difflib.unified_diff(
            current.splitlines(keepends=True),
            expected.splitlines(keepends=True),
            "docs/layout.md",
            "the tree",
        )
    )
    assert current == expected, (
        f"docs/layout.md is out of date with the tree; regenerate it with "
        f"`{layout.COMMAND}` (or `make docs-layout`) and commit it:\n{diff}"
    )


def test_every_package_and_module_is_listed() -> None:
    text = layout.render()
    for top in layout.TOP:
        for path in (layout.ROOT / top).rglob("*.py"):
            relative = path.relative_to(layout.ROOT)
            name = f"{relative.parent}/" if path.name == "__init__.py" else str(relative)
            assert f"| `{name}` |" in text, name
