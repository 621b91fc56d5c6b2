"""A preview for the reviewer (config.yaml ``preview:``): the branch under review served in
a box of its own, reached through its daemon's socket, gone once the task leaves review.
(The review page's side, its sign-in and the browser: tests/e2e/test_web_preview.py.)"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from orchestrator.base.processes import start_ticks
from orchestrator.faces import preview
from orchestrator.model.exceptions import InvalidInput, PreviewFailed
from orchestrator.queue import machine as q

from .support import run_claimed, set_config, wait_for, write_agents

SERVE = f"{sys.executable} -m http.server --bind 127.0.0.1 $OCTOPOID_PORT"


def get(path: Path, what: str) -> bytes:
    """An HTTP GET of ``what`` through a preview's socket, as the review page sends it."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))
        sock.sendall(f"GET {what} HTTP/1.1\r\nHost: preview\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


@pytest.fixture
def reviewed(git_project: Path, bwrap_ok: None) -> str:
    """A task in review, its branch holding TASK-<id>.txt."""
    write_agents(git_project)
    set_config(git_project, preview={"command": SERVE})
    tid = q.create_task("a page to preview").id
    assert run_claimed(q.claim_task(None, "impl-1"), "impl-1").next_state == "provisional"
    return tid


def test_a_preview_serves_the_branch_until_its_task_leaves_review(reviewed: str) -> None:
    found = preview.start(reviewed)
    try:
        assert found.ready and preview.running(reviewed) == found
        assert preview.start(reviewed).pid == found.pid  # one preview per task
        answer = get(found.socket, f"/TASK-{reviewed}.txt")
        assert answer.startswith(b"HTTP/1.0 200") and b"done in attempt 1" in answer
        q.reject_completion(reviewed, "not yet", "reviewer")
        wait_for("the preview to stop", lambda: preview.running(reviewed) is None)
    finally:
        preview.stop(reviewed)
    wait_for("its daemon to be gone", lambda: start_ticks(found.pid) is None)
    assert not found.folder.exists()
    assert "left review (incoming)" in preview.log_path(reviewed).read_text()


def test_a_preview_that_cannot_serve_says_why(reviewed: str, git_project: Path) -> None:
    set_config(git_project, preview={"command": "echo 'no server here' >&2; exit 4"})
    with pytest.raises(PreviewFailed, match="exited with status 4"):
        preview.start(reviewed)
    assert "no server here" in preview.log_tail(reviewed)
    set_config(git_project, preview={})
    with pytest.raises(InvalidInput, match=r"no preview\.command"):
        preview.start(reviewed)
