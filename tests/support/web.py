"""The review page's side of a test: a task waiting on it, the forms and drafts it sends as
a browser would, the board once read, and screenshots (`octopoid web` itself is started by
tests/web_server.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q

from ..web_server import Client
from . import run_claimed, wait_for


def provisional_task(title: str = "plain work") -> str:
    """A task that went through a real attempt (scripted agent) and waits for review."""
    task = q.create_task(title)
    claimed = q.claim_task(None, "impl-1")
    assert claimed.id == task.id
    run_claimed(claimed, "impl-1")
    assert q.get_store().locate(task.id) is TaskState.PROVISIONAL
    return task.id


def signed_in(server, name: str) -> Client:
    """A client signed in to ``server`` (a running `octopoid web`) as reviewer ``name``."""
    client = Client(server.base)
    client.login(server.token, name)
    return client


def judged(client: Client, task_id: str) -> dict[str, str]:
    """The branch head and attempt the task page's review forms carry, as a browser sends."""
    _, _, page = client.request(f"/tasks/TASK-{task_id}")
    head = re.search(r'name="head" value="([0-9a-f]*)"', page)
    attempt = re.search(r'name="attempt" value="(\d+)"', page)
    assert head and attempt, page[:500]
    return {"head": head.group(1), "attempt": attempt.group(1)}


def comment_fields(path: str, line: int, text: str, end: int = 0, side: str = "new") -> list:
    """One line comment as the page sends it: its parts as fields, never one packed string."""
    return [
        ("comment_path", path),
        ("comment_line", str(line)),
        ("comment_end", str(end or "")),
        ("comment_side", side),
        ("comment_text", text),
    ]


def board(client: Client, query: str = "", timeout: float = 60) -> str:
    """The board fragment for ``query``, once every title the search needs has been read
    (a search answers at once with what is known and says how many titles are unread)."""

    def read() -> str | None:
        status, _, page = client.request("/board" + query)
        assert status == 200, page[:500]
        return None if 'id="unread"' in page else page

    return wait_for("every title read", read, timeout)


def save(client: Client, task_id: str, draft: object, csrf: str | None = None) -> tuple:
    """POST a draft as the page's script does: JSON, with the CSRF token in a header."""
    request = urllib.request.Request(
        f"{client.base}/tasks/TASK-{task_id}/draft",
        data=json.dumps(draft).encode() if not isinstance(draft, bytes) else draft,
        headers={"content-type": "application/json", "x-csrf-token": csrf or client.csrf()},
    )
    try:
        with client.opener.open(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        body = err.read()
        return err.code, json.loads(body) if body.startswith(b"{") else body.decode()


def shoot(page, name: str, tmp_path: Path) -> None:
    """A screenshot in the test's folder; with OCTOPOID_SCREENSHOTS=DIR, also into DIR
    (`OCTOPOID_SCREENSHOTS=docs/images pytest tests/e2e/test_web.py` refreshes the README's)."""
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    assert path.stat().st_size > 10_000
    target = os.environ.get("OCTOPOID_SCREENSHOTS")
    if target:
        shutil.copy(path, Path(target) / path.name)
