"""The import contracts (pyproject's [tool.importlinter], run by `lint-imports` in CI) hold
on this tree, and they catch an import that runs up the layers or through a wall."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the orchestrator package found in ``tree`` (never the installed one)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True
    )


def test_the_contracts_hold_on_this_tree() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


#: (module, the import planted in it, the contract it breaks)
PLANTS = [
    ("model/defaults.py", "from orchestrator.faces.cli import main", "imports run down the layers"),
    ("box/bwrap.py", "from orchestrator.queue import machine", "the box never moves tasks"),
    ("faces/listing.py", "from orchestrator.git import branches", "faces never call git"),
    ("memory/terms.py", "from orchestrator.queue import store", "memory never imports the queue"),
    ("queue/adopt.py", "from orchestrator.queue import machine", "a pause is a record, not a move"),
]


def test_planted_imports_break_their_contracts(tmp_path: Path) -> None:
    """One copy of the tree with an upward import, a box that moves tasks, a face that
    calls git, a memory that imports the queue and an agent's record that reaches the
    moves: each contract fails and names the import (one run: lint-imports takes
    seconds)."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "orchestrator", tmp_path / "orchestrator", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for module, planted, _ in PLANTS:
        target = tmp_path / "orchestrator" / module
        target.write_text(target.read_text(encoding="utf-8") + f"\n{planted}  # planted\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    broken = done.stdout.split("Broken contracts", 1)[1]
    sections = re.split(r"\n(?=[^\n]+\n-{8,}\n)", broken)  # each opens with a title
    for module, _, contract in PLANTS:
        importer = "orchestrator." + module.removesuffix(".py").replace("/", ".")
        (section,) = [s for s in sections if s.startswith(contract)]
        assert f"{importer} -> " in section, (contract, broken)


LAZY_RE = re.compile(r"""lazy_import\(["']([\w.]+)["']\)""")


def test_the_contracts_count_deferred_imports(tmp_path: Path) -> None:
    """A ``lazy_import("x")`` proxy is an arrow import-linter cannot read, so a copy of the
    tree states each one as ``import x``: the contracts hold on every deferred arrow, and a
    planted deferred upward import (the daemon reaching a face) is the one thing broken."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "orchestrator", tmp_path / "orchestrator", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    planted = tmp_path / "orchestrator" / "daemon" / "notify.py"
    planted.write_text(planted.read_text() + '\nup = lazy_import("orchestrator.faces.reports")\n')
    stated = 0
    for module in (tmp_path / "orchestrator").rglob("*.py"):
        text = module.read_text(encoding="utf-8")
        targets = sorted(set(LAZY_RE.findall(text)))
        if module.name != "lazy.py" and targets:
            module.write_text(text + "".join(f"\nimport {t}  # deferred\n" for t in targets))
            stated += len(targets)
    assert stated > 10  # the proxies were found (a pattern that matches none proves nothing)
    broken = lint_imports(tmp_path).stdout.split("Broken contracts", 1)[-1]
    first_links = re.findall(r"^- *(\S+ -> \S+)", broken, flags=re.M)
    assert first_links == ["orchestrator.daemon.notify -> orchestrator.faces.reports"], broken
