"""Adapters start work through the domain's use cases (ADR 0033): none holds the write
transaction or builds the rules' SQL view itself, so what a request decides, and its
idempotency, lives in ``engine.domain`` alone."""

from __future__ import annotations

from pathlib import Path

from tests.arch.test_layers import ROOT, imported_modules

# The write transaction (wherever the storage keeps it) and the SQL implementation of the
# rules' view, with the module that holds nothing else.
FORBIDDEN_NAMES = ("Transaction", "SqlDomainView")
FORBIDDEN_MODULES = ("projections.view",)


def forbidden(modules: set[str]) -> list[str]:
    """The imports in ``modules`` an adapter may not make."""
    return sorted(
        module
        for module in modules
        if module in FORBIDDEN_MODULES
        or (
            module.split(".")[0] in ("engine", "projections")
            and module.rpartition(".")[2] in FORBIDDEN_NAMES
        )
    )


def test_adapter_reach_a_forbidden_import_is_caught(tmp_path: Path) -> None:
    """The check itself can fail: what dispatch.py and http/a2a/accept.py once imported."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from engine.log import Transaction\n"
        "from engine.write.transaction import Transaction as Tx\n"
        "from projections.view import SqlDomainView\n"
        "from projections import view\n"
        "from engine.domain import usecases\n"
    )
    assert forbidden(imported_modules(probe)) == [
        "engine.log.Transaction",
        "engine.write.transaction.Transaction",
        "projections.view",
        "projections.view.SqlDomainView",
    ]


def test_adapter_reach_no_adapter_holds_the_transaction_or_the_view() -> None:
    problems = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in (ROOT / "adapters").rglob("*.py")
        for module in forbidden(imported_modules(path))
    ]
    assert not problems, "\n".join(problems)
