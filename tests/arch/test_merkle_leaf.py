"""The Merkle tree is one leaf package with the one hashing of leaves and nodes (ADR 0040).

``engine/merkle/`` holds the RFC 9162 hashes and proofs, the tree over a log, its stored nodes
and the proofs' JSON shapes. It imports nothing of foldline but the engine's errors and the
chain, so the audits, the log's copy and the server can all stand on it; and RFC 9162's two
hashes (``0x00`` before a leaf, ``0x01`` before two nodes) are written in one module, so that a
faster loop elsewhere cannot drift from them. Each check is shown to fail on a probe.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from tests.arch.test_structure import imports_of, module_name, modules_of, parsed

ROOT = Path(__file__).resolve().parents[2]
LEAF = ROOT / "engine" / "merkle"
# What the leaf may import besides itself: the root of the error tree and the chain's Violation.
LEAF_MAY_IMPORT = {"engine.errors", "engine.chain"}
HASHING = "engine/merkle/rfc9162.py"
PREFIXES = (b"\x00", b"\x01")


def foreign_imports(package: Path, allowed: Iterable[str], root: Path = ROOT) -> list[str]:
    """The imports of ``package``'s modules that reach into foldline outside it and outside
    the modules ``allowed``."""
    known = {
        name
        for top in ("engine", "projections", "adapters")
        if (root / top).is_dir()
        for name in modules_of(root / top, root)
    }
    inside = module_name(package / "__init__.py", root)
    return sorted(
        f"{name} imports {target}"
        for name, path in modules_of(package, root).items()
        for target in imports_of(path, known, root)
        if target != inside and not target.startswith(inside + ".") and target not in allowed
    )


def prefixed_hashes(path: Path) -> list[str]:
    """Every ``b"\\x00" + ...`` or ``b"\\x01" + ...`` in ``path``: RFC 9162's leaf or node hash."""
    tree = parsed(path)
    return [
        f"{path}:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Add)
        and isinstance(node.left, ast.Constant)
        and node.left.value in PREFIXES
    ]


def test_merkle_leaf_imports_only_errors_and_the_chain() -> None:
    assert modules_of(LEAF)  # (the check sees the package)
    found = foreign_imports(LEAF, LEAF_MAY_IMPORT)
    assert not found, "\n".join(found)


def test_merkle_leaf_import_check_can_fail(tmp_path: Path) -> None:
    """What engine/audit/tree.py once imported (the audit's reader, over the log) is caught."""
    for name in ("engine/__init__.py", "engine/errors.py", "engine/audit/__init__.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "engine" / "audit" / "source.py").write_text("from engine import log\n")
    (tmp_path / "engine" / "log.py").write_text("")
    leaf = tmp_path / "engine" / "merkle"
    leaf.mkdir()
    (leaf / "__init__.py").write_text("from engine.merkle.rfc9162 import leaf_hash\n")
    (leaf / "rfc9162.py").write_text("import hashlib\n")
    (leaf / "tree.py").write_text(
        "from engine.audit.source import Reader\n"
        "from engine.errors import InvalidArgument\n"
        "from engine.merkle import rfc9162\n"
        "def later():\n    from engine.log import Log\n"
    )
    assert foreign_imports(leaf, LEAF_MAY_IMPORT, tmp_path) == [
        "engine.merkle.tree imports engine.audit.source",
        "engine.merkle.tree imports engine.log",
    ]


def test_merkle_hashes_leaves_and_nodes_in_one_module() -> None:
    assert prefixed_hashes(ROOT / HASHING)  # (the check sees the owner's hashing)
    found = [
        problem
        for package in ("engine", "adapters", "projections", "bench")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.relative_to(ROOT).as_posix() != HASHING
        for problem in prefixed_hashes(path)
    ]
    assert not found, "hash with engine.merkle.rfc9162 instead:\n" + "\n".join(found)


def test_merkle_hashing_check_can_fail(tmp_path: Path) -> None:
    """What engine/tree_nodes.py once did inline is caught; other byte strings are not."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "leaves = [_sha256(b'\\x00' + data).digest() for data in leaf_data]\n"
        "node = _sha256(b'\\x01' + left + right).digest()\n"
        "other = hashlib.sha256(b'\\x02' + left).digest()\n"
        "genesis = hashlib.sha256(b'foldline genesis v1').digest()\n"
    )
    assert [line.split(": ", 1)[1] for line in prefixed_hashes(probe)] == [
        "b'\\x00' + data",
        "b'\\x01' + left",
    ]
