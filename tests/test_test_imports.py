"""No test file imports another test file: a helper that several share lives in tests/conftest.py
or a tests/helpers_<subject>.py module (docs/architecture.md, "A verb"). A test module imported
for its helpers makes a reader open two files for one test, and pulls the other's module-level
state (marks, fixtures, skips) into every file that imports it."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _imported_modules(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_no_test_file_imports_another():
    test_modules = {p.stem for p in TESTS.rglob("test_*.py")}
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        hits = sorted((_imported_modules(path) & test_modules) - {path.stem})
        if hits:
            found[str(path.relative_to(TESTS))] = hits
    assert not found, f"test files imported as helper modules (move what they share to helpers_*.py): {found}"


def test_the_rule_sees_an_import_of_a_test_module(tmp_path):
    """The check above would pass on a tree it cannot read: here it reads one it must refuse."""
    f = tmp_path / "test_a.py"
    f.write_text("import os\nfrom test_b import helper\n\ndef f():\n    import test_c\n")
    assert {"test_b", "test_c"} <= _imported_modules(f)
