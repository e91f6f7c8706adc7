"""Dependencies point one way: adapters -> projections -> engine.domain -> engine.

``engine`` is the generic core (log, machines, events, projection framework, the errors every
log user meets, clock, chain, audit, the generic command API): it knows no lease, session, job
or task. ``engine.domain`` is the built-in domain on top of it, its own layer.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tests.arch.test_structure import import_statements, imports_of, modules_of, package_of

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("engine", "engine.domain", "projections", "adapters")
EDGE_LIBRARIES = {"falcon", "gunicorn", "subprocess", "argparse"}
# Words of the built-in domain that the generic core must not know (code, strings, comments).
DOMAIN_WORDS = ("lease", "session", "job", "task", "a2a", "invocation")


def layer_of_module(module: str) -> str | None:
    """The layer a dotted module name belongs to (the longest matching prefix)."""
    found = None
    for layer in LAYERS:
        if module == layer or module.startswith(layer + "."):
            found = layer if found is None or len(layer) > len(found) else found
    return found


def layer_of_path(path: Path) -> str:
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    layer = layer_of_module(module)
    assert layer is not None, path
    return layer


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, as absolute dotted names; ``from a import b`` counts as
    ``a.b`` too, so ``from engine import domain`` is seen as ``engine.domain``."""
    package = package_of(path) if path.is_relative_to(ROOT) else ""
    names: set[str] = set()
    for module, name in import_statements(path, package):
        names.update((module,) if name is None else (module, f"{module}.{name}"))
    return names


def upward(here: str, modules: set[str]) -> list[str]:
    """The modules that sit in a layer above ``here``."""
    return sorted(
        module
        for module in modules
        if (there := layer_of_module(module)) is not None
        and LAYERS.index(there) > LAYERS.index(here)
    )


def reverse_arrows(path: Path) -> list[str]:
    here = layer_of_path(path)
    return [
        f"{path.relative_to(ROOT)} ({here}) imports {module}"
        for module in upward(here, imported_modules(path))
    ]


def domain_words(text: str) -> list[str]:
    """Domain words in ``text``, with snake_case and CamelCase split into words first, so
    ``job_id`` and ``LeaseBusy`` count while ``release`` and ``tasked`` do not."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).replace("_", " ")
    pattern = r"\b(" + "|".join(DOMAIN_WORDS) + r")s?\b"
    return sorted({m.group(1).lower() for m in re.finditer(pattern, spaced, re.IGNORECASE)})


def core_files() -> list[Path]:
    return [p for p in (ROOT / "engine").rglob("*.py") if layer_of_path(p) == "engine"]


def test_layers_the_core_and_the_domain_are_told_apart() -> None:
    assert layer_of_path(ROOT / "engine" / "engine.py") == "engine"
    assert layer_of_path(ROOT / "engine" / "domain" / "rules" / "__init__.py") == "engine.domain"
    assert layer_of_module("engine.domainish") == "engine"


def test_layers_a_reverse_arrow_and_a_domain_word_are_caught(tmp_path: Path) -> None:
    """The checks themselves can fail: what engine/engine.py once did is reported."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from engine.domain import rules\nfrom engine import domain\nimport adapters\n"
    )
    assert upward("engine", imported_modules(probe)) == [
        "adapters",
        "engine.domain",
        "engine.domain.rules",
    ]
    assert upward("engine.domain", {"engine.log", "engine.domain.rows"}) == []
    assert domain_words("lease_busy LeaseBusy release tasked jobs A2A") == ["a2a", "job", "lease"]


@pytest.mark.parametrize("package", ["engine", "projections", "adapters"])
def test_layers_never_import_upwards(package: str) -> None:
    problems = [p for path in (ROOT / package).rglob("*.py") for p in reverse_arrows(path)]
    assert not problems, "\n".join(problems)


# Names that belong to a database, not to the domain (PostgreSQL's setting for a connection
# idle inside its transaction).
FOREIGN_NAMES = ("idle_in_transaction_session_timeout",)


def test_layers_the_core_knows_no_domain_words() -> None:
    def text_of(path: Path) -> str:
        text = path.read_text()
        for name in FOREIGN_NAMES:
            text = text.replace(name, "")
        return text

    problems = [
        f"{path.relative_to(ROOT)}: {words}"
        for path in core_files()
        if (words := domain_words(text_of(path)))
    ]
    assert not problems, "\n".join(problems)


def test_layers_engine_stays_free_of_edge_libraries() -> None:
    for path in (ROOT / "engine").rglob("*.py"):
        found = {m.split(".")[0] for m in imported_modules(path)} & EDGE_LIBRARIES
        assert not found, f"{path.relative_to(ROOT)} imports {found}"


def _users_of(*libraries: str) -> set[str]:
    """The modules of ``engine`` that import any of ``libraries``, as paths under engine/."""
    return {
        p.relative_to(ROOT / "engine").as_posix()
        for p in (ROOT / "engine").rglob("*.py")
        if any(m.split(".")[0] in libraries for m in imported_modules(p))
    }


def test_layers_only_the_sqlite_backend_touches_apsw() -> None:
    """Everything above the storage seam is backend-neutral (ADR 0022); the SQLite backend is
    its own package of the storage wing (ADR 0032)."""
    assert _users_of("apsw")
    assert all(user.startswith("storage/sqlite/") for user in _users_of("apsw"))


def test_layers_only_the_postgres_backend_touches_psycopg() -> None:
    """psycopg is an optional extra: nothing but the PostgreSQL backend may import it, so a
    SQLite-only install never needs it (ADR 0026); and not its URL module, which the selector
    loads for any location (ADR 0032)."""
    users = _users_of("psycopg", "psycopg_pool")
    assert users and all(user.startswith("storage/postgres/") for user in users)
    assert "storage/postgres/url.py" not in users
    assert "storage/postgres/__init__.py" not in users


@pytest.mark.parametrize("package", ["engine", "projections", "adapters"])
def test_layers_packages_load_from_this_repository(package: str) -> None:
    """``adapters`` and ``projections`` are also PyPI names: make sure ours are the ones used."""
    module = importlib.import_module(package)
    assert Path(module.__file__ or "").resolve().parent == ROOT / package


def test_layers_recovery_talks_to_a_narrow_port() -> None:
    """Recovery and tenure never reach back into the runtime that drives them (no cycle in any
    package is held by ``test_cycles``)."""
    modules = modules_of(ROOT / "adapters")
    for name in ("adapters.services.recovery", "adapters.services.tenure"):
        assert "adapters.services.runtime" not in imports_of(modules[name], set(modules)), name


SQL = re.compile(r"\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM)\b|\.execute\(")


def test_layers_adapters_hold_no_sql() -> None:
    """Every read an adapter makes is a named function of projections.queries."""
    problems = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in (ROOT / "adapters").rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if SQL.search(line)
    ]
    assert not problems, "\n".join(problems)
