"""The suite's own layout: helpers live in tests/support (and the fixtures in conftest.py),
so no file of the suite imports a test module. A test module that did would couple two
files of tests, and pytest would collect the donor's fixtures into the taker."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(node: ast.AST, package: list[str]) -> Iterator[list[str]]:
    """The dotted paths an import statement in ``package`` may name (for ``from m import x``
    both m and m.x: x may be a module), relative imports resolved."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name.split(".")
    elif isinstance(node, ast.ImportFrom):
        base = node.module.split(".") if node.module else []
        if node.level:
            base = package[: len(package) - node.level + 1] + base
        yield base
        for alias in node.names:
            yield [*base, alias.name]


def imports_of_test_modules(tests: Path) -> list[str]:
    """``file:line module`` for every import of a test module (``test_*``) in a file of the
    suite at ``tests``, at the top of the file or inside a function."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        package = [tests.name, *path.parent.relative_to(tests).parts]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for module in imported_modules(node, package):
                if module[:1] == [tests.name] and any(p.startswith("test_") for p in module):
                    where = path.relative_to(tests.parent)
                    found.append(f"{where}:{node.lineno} {'.'.join(module)}")
                    break
    return found


def test_no_file_of_the_suite_imports_a_test_module() -> None:
    assert imports_of_test_modules(TESTS) == []


def test_every_way_of_importing_a_test_module_is_found(tmp_path: Path) -> None:
    """Relative from the same folder, from a parent and into a subfolder, absolute, a
    module named in ``from . import``, and an import inside a function."""
    tests = tmp_path / "tests"
    (tests / "e2e").mkdir(parents=True)
    (tests / "support.py").write_text("from orchestrator import config\n")
    (tests / "test_a.py").write_text(
        "from .support import wait_for\n"  # a helper: allowed
        "from .test_b import helper\n"
        "from .e2e.test_c import Daemon\n"
        "import tests.test_b\n"
        "def test_x():\n"
        "    from tests.e2e import test_c\n"
    )
    (tests / "e2e" / "test_c.py").write_text("from ..test_b import helper\nfrom . import test_d\n")
    assert imports_of_test_modules(tests) == [
        "tests/e2e/test_c.py:1 tests.test_b",
        "tests/e2e/test_c.py:2 tests.e2e.test_d",
        "tests/test_a.py:2 tests.test_b",
        "tests/test_a.py:3 tests.e2e.test_c",
        "tests/test_a.py:4 tests.test_b",
        "tests/test_a.py:6 tests.e2e.test_c",
    ]
