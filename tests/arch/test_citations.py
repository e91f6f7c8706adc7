"""Committed files cite only documents in the repository.

The design notes the code relies on are docs/design.md, cited by section number
(``design.md §4.2``); a cited number must be one of its sections. Documents that were never
in the repository (a "SPEC", reference notes, seeds) may not be cited. ADRs cite each other
freely. ``python fix_citations.py`` (kept outside the repository) rewrites old citations.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"

# "SPEC §4.2", "SPEC.md", "SPEC tables"; not an identifier named SPEC.
OUTSIDE = re.compile(
    r"\bSPEC(?:\.md|\s*§|\s+tables?\b)"
    r"|\breference/[\w-]+\.md"
    r"|\b(?:halo-semantics|mmo-semantics|library-facts|a2a-agentcore-wire)\b"
    r"|\bseeds/"
)
DESIGN_CITATION = re.compile(r"design\.md (§\s?\d+(?:\.\d+)*(?:\s?[-\u2013]\s?§?\d+(?:\.\d+)*)*)")


def _committed() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.toml", "Makefile", "Dockerfile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    this = Path(__file__).resolve()
    return [ROOT / p for p in listed if (ROOT / p).resolve() != this and (ROOT / p).exists()]


def _sections() -> set[str]:
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)*)\.? ", DESIGN.read_text(), flags=re.M))


def test_no_file_cites_a_document_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()[:90]}"
        for path in _committed()
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, (
        "these lines cite documents that are not in the repository; cite docs/design.md "
        "(or an ADR) instead, e.g. by running `python fix_citations.py` and then "
        "`python -m tests.support.layout`:\n" + "\n".join(found)
    )


def test_every_design_citation_names_a_section_of_design_md() -> None:
    sections = _sections()
    assert {"3.2", "4.2", "4.7", "13.4"} <= sections
    missing = [
        f"{path.relative_to(ROOT)}: §{number}"
        for path in _committed()
        for cited in DESIGN_CITATION.findall(path.read_text(errors="replace"))
        for number in re.findall(r"\d+(?:\.\d+)*", cited)
        if number not in sections
    ]
    assert not missing, "citations of sections docs/design.md does not have:\n" + "\n".join(missing)
