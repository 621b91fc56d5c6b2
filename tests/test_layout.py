"""The suite's own layout: helpers live in tests/support and the fixtures in conftest.py
(or a plugin it names), so no file of the suite imports a test module or a fixture. A test
module that did would couple two files of tests, and pytest would collect the donor's
fixtures into the taker."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(node: ast.AST, package: list[str]) -> Iterator[list[str]]:
    """The dotted paths an import statement in ``package`` may name (for ``from m import x``
    m first, then m.x: x may be a module), relative imports resolved."""
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


def statements(body: list[ast.AST]) -> Iterator[ast.AST]:
    """Every statement of ``body`` and of the blocks inside it (an import is one; walking
    only statements, not every expression, keeps a scan of the suite cheap)."""
    for node in body:
        yield node
        for block in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = getattr(node, block, None)
            if isinstance(inner, list):
                yield from statements(inner)


def suite_imports(tests: Path) -> Iterator[tuple[str, ast.AST, list[list[str]]]]:
    """(``file:line``, the statement, what it may name inside the suite) for every import
    of the suite at ``tests``, at the top of a file or inside a function."""
    for path in sorted(tests.rglob("*.py")):
        package = [tests.name, *path.parent.relative_to(tests).parts]
        for node in statements(ast.parse(path.read_text(encoding="utf-8")).body):
            named = [m for m in imported_modules(node, package) if m[:1] == [tests.name]]
            if named:
                yield f"{path.relative_to(tests.parent)}:{node.lineno}", node, named


def imports_of_test_modules(tests: Path) -> list[str]:
    """``file:line module`` for every import of a test module (``test_*``)."""
    return [
        f"{where} {'.'.join(next(m for m in named if any(p.startswith('test_') for p in m)))}"
        for where, _, named in suite_imports(tests)
        if any(p.startswith("test_") for m in named for p in m)
    ]


@functools.cache
def fixtures_of(module: Path) -> set[str]:
    """The names of the pytest fixtures ``module`` defines."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any("fixture" in ast.unparse(d) for d in node.decorator_list)
    }


def imports_of_fixtures(tests: Path) -> list[str]:
    """``file:line name`` for every fixture imported from a module of the suite."""
    found = []
    for where, node, named in suite_imports(tests):
        source = tests.parent.joinpath(*named[0]).with_suffix(".py")
        if isinstance(node, ast.ImportFrom) and source.is_file():
            fixtures = fixtures_of(source)
            found += [f"{where} {a.name}" for a in node.names if a.name in fixtures]
    return found


def test_no_file_of_the_suite_imports_a_test_module() -> None:
    assert imports_of_test_modules(TESTS) == []


def test_no_file_of_the_suite_imports_a_fixture() -> None:
    assert imports_of_fixtures(TESTS) == []


def test_every_way_of_importing_a_test_module_or_a_fixture_is_found(tmp_path: Path) -> None:
    """Relative from the same folder, from a parent and into a subfolder, absolute, a
    module named in ``from . import``, an import inside a function, and a fixture taken
    from a support module."""
    tests = tmp_path / "tests"
    (tests / "e2e").mkdir(parents=True)
    (tests / "support.py").write_text(
        "import pytest\nHELPER = 1\n@pytest.fixture\ndef served():\n    return 1\n"
    )
    (tests / "test_a.py").write_text(
        "from .support import HELPER\n"  # a helper: allowed
        "from .test_b import helper\n"
        "from .e2e.test_c import Daemon\n"
        "import tests.test_b\n"
        "def test_x():\n"
        "    from tests.e2e import test_c\n"
    )
    (tests / "e2e" / "test_c.py").write_text(
        "from ..test_b import helper\nfrom . import test_d\nfrom ..support import served\n"
    )
    assert imports_of_test_modules(tests) == [
        "tests/e2e/test_c.py:1 tests.test_b",
        "tests/e2e/test_c.py:2 tests.e2e.test_d",
        "tests/test_a.py:2 tests.test_b",
        "tests/test_a.py:3 tests.e2e.test_c",
        "tests/test_a.py:4 tests.test_b",
        "tests/test_a.py:6 tests.e2e.test_c",
    ]
    assert imports_of_fixtures(tests) == ["tests/e2e/test_c.py:3 served"]
