"""An enqueue wakes the daemon through the kernel (inotify on incoming/), not at a poll."""

from __future__ import annotations

import queue
import re
from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.daemon import wakeup
from orchestrator.queue import machine as q

from .support import wait_for
from .support.daemon import state_of


def test_a_file_landing_in_the_folder_is_reported_by_name(tmp_path: Path) -> None:
    seen: queue.Queue[str] = queue.Queue()
    stop = wakeup.watch_folder(tmp_path, seen.put)
    assert stop is not None, "inotify is available on Linux"
    try:
        (tmp_path / ".TASK-1.md.tmp").write_text("a temp file: no task yet")
        (tmp_path / "TASK-1.md").write_text("x")
        (tmp_path / "staged").write_text("y")
        (tmp_path / "staged").rename(tmp_path / "TASK-2.md")
        assert [seen.get(timeout=10), seen.get(timeout=10), seen.get(timeout=10)] == [
            "TASK-1.md",
            "staged",
            "TASK-2.md",
        ]
    finally:
        stop()
    assert seen.empty()


def test_no_folder_no_watch(tmp_path: Path) -> None:
    assert wakeup.watch_folder(tmp_path / "missing", print) is None


@pytest.mark.slow
def test_an_enqueue_wakes_the_daemon_by_inotify(loop) -> None:
    daemon = loop()
    wait_for("the watch", lambda: "(inotify)" in _log())  # a task before it: the first pass's
    tid = q.create_task("plain work").id
    wait_for("provisional", lambda: state_of(tid) == "provisional")
    assert daemon.stop() == 0
    log = _log()
    woken = next(line for line in log.splitlines() if "woken without a poll:" in line)
    assert re.search(r"inotify [1-9]", woken), woken  # at least the task file
    assert f"claimed TASK-{tid} for impl-1" in log


def _log() -> str:
    path = config.get_logs_dir() / "scheduler.log"
    return path.read_text() if path.exists() else ""
