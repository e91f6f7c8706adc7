"""Shared-volume mode (ADRs 0035, 0042): on or off, and why, from the setting or the mount.

In the mode the server opens the log only under the lease. ``FOLDLINE_SHARED_VOLUME`` decides
when it is set, else where the log lies: unset, a SQLite log on a network file system
(``adapters.system.mounts``) turns the mode on, and anything else leaves it off; a PostgreSQL log is
never in it (its database server is what is shared). ``1`` forces it on; ``0`` forces it off,
with a warning when the log lies on a network file system all the same. Every decision comes
with the one line the boot prints.

AgentCore mounts its file system at the first invocation, after the boot: a decision the mount
made ``off`` is judged again by each process before it first opens the log (``is_pending``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from adapters.system import mounts

SETTING = "FOLDLINE_SHARED_VOLUME"


@dataclass(frozen=True)
class VolumeMode:
    """A decision: ``on`` or not, the boot line that says why, and whether it is a warning.

    ``is_pending``: decided from the mount and off, so judged again before the log first
    opens (a network file system mounted since may turn it on; nothing turns it off)."""

    on: bool
    line: str
    is_warning: bool = False
    is_pending: bool = False

    def shown(self) -> str:
        """The line as printed: ``foldline: ...`` or ``foldline: warning: ...``."""
        return f"foldline: {'warning: ' if self.is_warning else ''}{self.line}"


TableReader = Callable[[], str]


def _where(log: Path, read: TableReader) -> tuple[mounts.Mount | None, str | None]:
    """The mount the log lies on, or why that cannot be told."""
    try:
        return mounts.lies_on(log, read()), None
    except (OSError, ValueError) as ex:
        return None, f"{mounts.MOUNTINFO}: {getattr(ex, 'strerror', None) or ex}"


def decide(setting: bool | None, log: Path | None, read: TableReader | None = None) -> VolumeMode:
    """The mode for ``setting`` (None: unset) and a SQLite log at ``log`` (None: PostgreSQL),
    the mount table read through ``read`` (default: this process's). Never raises: a table
    that cannot be read leaves an unset mode off, with a warning. ``1`` with a PostgreSQL log
    is on here and refused by ``config.check_places``."""
    if log is None:
        return VolumeMode(
            setting is True,
            f"shared-volume mode {'on' if setting else 'off'}: the log is on PostgreSQL, whose"
            " database server is what is shared",
        )
    mount, unknown = _where(log, read or mounts.read_table)
    lies = f"the log {log} lies on {mount.describe()}" if mount else None
    if setting is True:
        return VolumeMode(
            True, f"shared-volume mode on: {SETTING}=1" + (f" ({lies})" if lies else "")
        )
    if setting is False:
        if mount is not None and mount.is_network:
            return VolumeMode(
                False,
                f"shared-volume mode off by {SETTING}=0, but {lies}, a network file system:"
                " a server on another host that opens it too can corrupt it (unset"
                f" {SETTING} to let the mount decide)",
                is_warning=True,
            )
        return VolumeMode(
            False, f"shared-volume mode off: {SETTING}=0" + (f" ({lies})" if lies else "")
        )
    if mount is not None and mount.is_network:
        return VolumeMode(
            True,
            f"shared-volume mode on: {lies}, a network file system; the log opens only under"
            f" the lease ({SETTING}=0 turns it off)",
        )
    if mount is None:
        return VolumeMode(
            False,
            f"shared-volume mode off: cannot tell where the log {log} lies"
            f" ({unknown or 'no mount covers it'}); set {SETTING}=1 if other hosts mount it",
            is_warning=True,
            is_pending=True,
        )
    return VolumeMode(
        False,
        f"shared-volume mode off: {lies}, a local file system; judged again before the log"
        f" first opens ({SETTING}=1 turns it on)",
        is_pending=True,
    )


def judge_again(log: Path, read: TableReader | None = None) -> VolumeMode | None:
    """A pending decision judged again: the mode now on, with its line, if the log lies on a
    network file system now (mounted since the boot); None otherwise."""
    mount, _ = _where(log, read or mounts.read_table)
    if mount is None or not mount.is_network:
        return None
    return VolumeMode(
        True,
        f"shared-volume mode on: the log {log} now lies on {mount.describe()}, a network file"
        f" system mounted since the boot; the log opens only under the lease ({SETTING}=0"
        " turns it off)",
    )
