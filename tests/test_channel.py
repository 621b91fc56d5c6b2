"""The channel: the one way from a box to octopoid, scoped to its task and hostile-proof."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orchestrator.box import channel
from orchestrator.box.box import write_client
from orchestrator.box.client import ChannelFailure, request
from orchestrator.memory import lifecycle
from orchestrator.memory.notes import NotesManager
from orchestrator.roles import tools as attempt_tools

from .support import wait_for


def raw(path: str, data: bytes) -> list[dict]:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        return [json.loads(line) for line in sock.makefile("rb") if line.strip()]


def test_an_agent_remembers_reads_and_reports_for_its_own_task_only(served) -> None:
    path, mine, other, server = served
    done = request(
        path, "remember", {"section": "Important Facts", "text": "token: ghp_" + "a" * 36}
    )
    assert done == {"added": True, "file": f"notes.{mine.label}.md"}
    (item,) = NotesManager(notes_id=mine.label).get_section_items("Important Facts")
    assert "ghp_" not in item and "REDACTED" in item  # redacted before it is stored
    text = request(path, "read_task")
    assert "my context" in text and "OTHER-SECRET" not in text
    assert "CLAIM_TOKEN" not in text and mine.headers["CLAIM_TOKEN"] not in text
    assert request(path, "read_notes") == ""
    request(path, "report_progress", {"text": "running the tests\nand more"})
    assert server.attempt_tools.take_progress() == "running the tests and more"
    lifecycle.add_learning("Important Facts", "the cache lives in .cache", [], None)
    (hit,) = request(path, "search_memory", {"query": "cache"})
    assert hit["content"] == "the cache lives in .cache"
    with pytest.raises(ChannelFailure, match="bad params for read_notes"):
        request(path, "read_notes", {"task_id": other.id})  # no method names another task
    assert "OTHER-NOTES" not in request(path, "read_notes")


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"not json\n", channel.PARSE_ERROR),
        (b"[1, 2]\n", channel.INVALID_REQUEST),
        (b'{"id": 1, "method": "accept", "params": {"task": "1"}}\n', channel.NO_METHOD),
        (b'{"id": 1, "method": "remember", "params": ["x"]}\n', channel.INVALID_PARAMS),
        (b'{"id": 1, "method": "remember", "params": {"section": 7, "text": "x"}}\n',
         channel.INVALID_PARAMS),
        (b'{"id": 1, "method": "remember", '
         b'"params": {"section": "Key\\u0000Topics", "text": "a"}}\n',
         channel.INVALID_PARAMS),
        (b'{"id": 1, "method": "remember", "params": {"section": "Gossip", "text": "x"}}\n',
         channel.REFUSED),
        (b'{"id": 1, "method": "search_memory", "params": {"query": "x", "limit": 10000}}\n',
         channel.INVALID_PARAMS),
        (b"[" * 100_000 + b"\n", channel.INVALID_REQUEST),  # too long a line
    ],
    ids=["not-json", "not-object", "no-method", "list-params", "wrong-type", "nul",
         "unknown-section", "limit", "too-long"],
)  # fmt: skip
def test_bad_requests_are_errors_and_the_channel_keeps_serving(served, payload, code) -> None:
    path = served[0]
    (answer,) = raw(path, payload)
    assert answer["error"]["code"] == code
    assert request(path, "read_notes") == ""  # still serving


def test_a_flood_of_connections_is_refused_beyond_the_limit_not_served_forever(served) -> None:
    path = served[0]
    idle = []
    for _ in range(channel.MAX_CONNECTIONS):
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(path)
        idle.append(sock)
    with socket.socket(socket.AF_UNIX) as extra:
        extra.connect(path)
        answer = json.loads(extra.makefile("rb").readline())
    assert answer["error"]["message"] == "too many connections to the channel"
    for sock in idle:
        sock.close()

    def served_again() -> bool:  # the server lets go of a closed connection in its own time
        try:
            return bool(request(path, "read_task"))
        except ChannelFailure as exc:
            assert "too many connections" in str(exc)
            return False

    wait_for("the idle connections let go", served_again)
    results: list[object] = []
    threads = [
        threading.Thread(target=lambda: results.append(request(path, "read_task")))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 4  # served again once the idle ones went


def test_remembering_is_bounded_per_attempt(served, monkeypatch: pytest.MonkeyPatch) -> None:
    path = served[0]
    monkeypatch.setattr(attempt_tools, "MAX_REMEMBERED", 2)
    for n in range(2):
        request(path, "remember", {"section": "Key Topics", "text": f"fact {n}"})
    with pytest.raises(ChannelFailure, match="already remembered 2 items"):
        request(path, "remember", {"section": "Key Topics", "text": "one too many"})


def test_agents_remembering_at_the_same_instant_lose_nothing_and_keep_the_bound(
    served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six of the agent's processes remember at once: every item lands or is refused, and
    the attempt's bound (three here) holds exactly."""
    path, mine, _, _ = served
    monkeypatch.setattr(attempt_tools, "MAX_REMEMBERED", 3)
    folder = Path(path).parent
    write_client(folder)
    env = {"PATH": f"{folder / 'bin'}:{os.environ['PATH']}", "OCTOPOID_CHANNEL": path}
    clients = [
        subprocess.Popen(
            ["octopoid", "memory", "add", "Key Topics", f"fact number {n}"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(6)
    ]
    outcomes = [(c.wait(60), *c.communicate()) for c in clients]
    assert sorted(code for code, _, _ in outcomes) == [0, 0, 0, 1, 1, 1], outcomes
    assert sum("already remembered 3 items" in err for _, _, err in outcomes) == 3
    items = NotesManager(notes_id=mine.label).get_section_items("Key Topics")
    assert sorted(items) == sorted(
        f"fact number {n}" for n, (code, _, _) in enumerate(outcomes) if code == 0
    )


def test_the_client_is_octopoid_inside_an_attempt(served, tmp_path: Path) -> None:
    path, mine, _, _ = served
    folder = Path(path).parent
    write_client(folder)
    env = {"PATH": f"{folder / 'bin'}:{os.environ['PATH']}", "OCTOPOID_CHANNEL": path}

    def octopoid(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["octopoid", *args], env=env, capture_output=True, text=True)

    added = octopoid("memory", "add", "File Knowledge", "app.py holds the routes", "--tag", "x")
    assert (
        added.returncode == 0
        and added.stdout == f"added to notes.{mine.label}.md (File Knowledge)\n"
    )
    assert "my context" in octopoid("task").stdout
    assert octopoid("notes").stdout == "no retry notes yet\n"
    assert octopoid("progress", "halfway").returncode == 0
    refused = octopoid("accept", mine.label)
    assert refused.returncode == 2 and "invalid choice: 'accept'" in refused.stderr
    bad = octopoid("memory", "add", "Gossip", "x")
    assert (
        bad.returncode == 1
        and bad.stderr.startswith("octopoid: ")
        and "Traceback" not in bad.stderr
    )
    gone = subprocess.run(
        ["octopoid", "task"], env={**env, "OCTOPOID_CHANNEL": str(tmp_path / "nope.sock")},
        capture_output=True, text=True,
    )  # fmt: skip
    assert gone.returncode == 1 and "cannot reach octopoid's channel" in gone.stderr
    assert sys.executable in (folder / "bin" / "octopoid").read_text()
