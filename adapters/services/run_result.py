"""What a run's result says beyond its text: its warnings and the files it names.

Read from the final stdout when the run's finish is recorded (``adapters.services.run``);
nothing here records or runs anything.
"""

from __future__ import annotations

from pathlib import Path

from engine.domain.job import FileEntry

WARNING = "WARNING: "
MAX_WARNINGS = 100


def warnings_of(result: str) -> tuple[str, ...]:
    """``WARNING: <text>`` lines of the output: an ``ok`` run that has them "completed with
    warnings" (design.md §4.4). At most 100, each at most 1000 characters."""
    texts = (
        line[len(WARNING) :].strip()[:1000]
        for line in result.splitlines()
        if line.startswith(WARNING)
    )
    return tuple(text for text in texts if text)[:MAX_WARNINGS]


def files_manifest(result: str, workspace: Path) -> tuple[FileEntry, ...]:
    """``MEDIA:<path>`` lines naming regular files inside the workspace, with their sizes: the
    path as printed, and the same file relative to the workspace."""
    files = []
    root = workspace.resolve()
    for line in result.splitlines():
        if not line.startswith("MEDIA:"):
            continue
        name = line[len("MEDIA:") :].strip()
        target = (root / name).resolve()
        if target.is_file() and target.is_relative_to(root) and ".foldline" not in target.parts:
            files.append(
                FileEntry(
                    path=name,
                    size=target.stat().st_size,
                    workspace_path=str(target.relative_to(root)),
                )
            )
    return tuple(files)
