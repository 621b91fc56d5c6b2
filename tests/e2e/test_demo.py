"""`octopoid demo`, the README's first command, run as a user would."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from ..support import child_env, octopoid

pytestmark = pytest.mark.slow


def test_demo_runs_the_whole_loop(tmp_path: Path, bwrap_ok: None) -> None:
    env = child_env(tmp_path)
    env.pop("OCTOPOID_ROOT")
    target = tmp_path / "the demo"  # a space: the rm line must quote it
    proc = octopoid(None, "demo", "--dir", str(target), env=env, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    last = out.strip().splitlines()[-1]  # it says where it left its project, and how to go
    assert (
        last
        == f"The demo project stays in {target}; remove it with: rm -rf {shlex.quote(str(target))}"
    )
    assert "TASK-3  claimed → incoming" in out and "retry notes saved" in out
    assert "second prompt carried the first attempt's notes" in out
    assert "Merge TASK-3: Make the clock use UTC" in out
    assert "timezone.utc" in (target / "clock.py").read_text()
    assert "sandbox: bwrap; each attempt works in its own clone behind bubblewrap" in out
    logs = sorted((target / ".octopoid/runtime/logs").glob("TASK-*/attempt-*.log"))
    assert len(logs) == 5 and all(
        log.read_text().startswith("[octopoid] sandbox: bwrap;") for log in logs
    )  # and it checked each attempt really ran in a box (else it exits 1)


def test_demo_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    proc = octopoid(None, "demo", "--dir", str(tmp_path))
    assert proc.returncode == 1 and "not empty" in proc.stderr
    assert (tmp_path / "keep.txt").read_text() == "mine"
