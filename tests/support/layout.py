"""Write docs/layout.md from the source tree: every package and module, with its docstring.

The tree is the source and the document is derived: ``python -m tests.support.layout`` (or
``make docs-layout``) rewrites the file, ``--check`` only says whether it is current, and
``tests/arch/test_docs_layout.py`` fails while it is not. Docstrings are read with ``ast``, so
nothing is imported.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "docs" / "layout.md"
COMMAND = "python -m tests.support.layout"
TOP = ("engine", "projections", "adapters")
# Folders of a package that hold data files only (no Python), described here.
DATA_DIRS = {
    "adapters/http/console_pages": "the console's page files (HTML, JavaScript, CSS): data only"
}

HEADER = f"""# Layout

Every package and module under `engine/`, `projections/` and `adapters/`, with the first line
of its docstring. Generated from the tree by `{COMMAND}` (or `make docs-layout`); do not edit
by hand: `tests/arch/test_docs_layout.py` fails when this file and the tree disagree.

Beside them: `tests/` (unit, contract, property, crash, golden, http, cli, arch, browser,
image), `bench/` (benchmarks with ratios against raw APSW and the `eventsourcing` library) and
`ADR/` (architecture decisions, indexed in `ADR/README.md`). The layers are described in
[design.md](design.md#1-layers).
"""


def first_line(path: Path) -> str:
    """The first line of the module's docstring, as Markdown (``x`` becomes `x`)."""
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path)))
    if not doc:
        return "(no docstring)"
    return doc.strip().splitlines()[0].replace("``", "`").replace("|", "\\|").strip()


def rows(top: str) -> list[tuple[str, str]]:
    """(path, description) for each package (its ``__init__.py``) and module under ``top``."""
    found: list[tuple[str, str]] = []
    for path in sorted((ROOT / top).rglob("*.py")):
        relative = path.relative_to(ROOT)
        if "__pycache__" in relative.parts:
            continue
        name = f"{relative.parent}/" if path.name == "__init__.py" else str(relative)
        found.append((name, first_line(path)))
    for folder, text in DATA_DIRS.items():
        if folder.split("/")[0] == top and (ROOT / folder).is_dir():
            found.append((f"{folder}/", text))
    return sorted(found, key=lambda row: row[0].rstrip("/").replace("/", "\0"))


def render() -> str:
    parts = [HEADER]
    for top in TOP:
        parts.append(f"\n## `{top}/`\n\n| path | what it is |\n|---|---|\n")
        parts.extend(f"| `{name}` | {text} |\n" for name, text in rows(top))
    return "".join(parts)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = TARGET.read_text() if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET.relative_to(ROOT)} is out of date: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
