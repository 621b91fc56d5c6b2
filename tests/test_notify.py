"""Alerts through apprise to a real loopback HTTP endpoint (apprise's JSON webhook), sent
by a real scheduler as tasks arrive where a person is needed."""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from orchestrator import config
from orchestrator.daemon import notify, scheduler
from orchestrator.model.exceptions import ConfigError
from orchestrator.queue import machine as q

from .support import serve_in_thread, settle, wait_for, write_agents


class Hook:
    """A webhook on 127.0.0.1 that records every POST; ``hold`` makes it stall first."""

    def __init__(self) -> None:
        self.posts: list[dict] = []
        self.hold = threading.Event()
        self.hold.set()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                hook.hold.wait(120)  # a stalled endpoint: longer than any pass here takes
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.posts.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # read timeout (rto) past the stall: a slow pass on a loaded machine must not turn
        # the stalled endpoint into a failing one (apprise gives up after 4 s by default)
        self.url = f"json://127.0.0.1:{self.server.server_address[1]}/hook?rto=150"
        serve_in_thread(self.server)

    def wait_for(self, count: int, timeout: float = 20) -> list[dict]:
        wait_for(f"{count} posts", lambda: len(self.posts) >= count, timeout)
        return self.posts


@pytest.fixture
def hook():
    hook = Hook()
    yield hook
    hook.hold.set()
    hook.server.shutdown()


def set_notify(root: Path, **notify_cfg) -> None:
    path = root / ".octopoid/config.yaml"
    cfg = yaml.safe_load(path.read_text()) or {}
    cfg["notify"] = notify_cfg
    path.write_text(yaml.safe_dump(cfg))


@pytest.fixture
def sched(git_project: Path):
    write_agents(git_project, max_concurrent=2)
    made = []

    def start() -> scheduler.Scheduler:
        made.append(scheduler.Scheduler())
        made[-1].initialize()
        return made[-1]

    yield start
    for s in made:
        if s._lock_fd is not None:
            s.shutdown(grace=5)


def test_a_task_needing_review_is_alerted_once(git_project, hook, sched) -> None:
    set_notify(git_project, urls=[hook.url])
    daemon = sched()
    task = q.create_task("add a greeting")
    settle(daemon)
    daemon.loop_once()
    (post,) = hook.wait_for(1)
    assert post["title"] == f"octopoid: TASK-{task.id} needs review"
    assert "add a greeting" in post["message"]
    assert f"octopoid accept TASK-{task.id}" in post["message"]
    daemon.shutdown(grace=5)
    posts = hook.wait_for(2)
    assert posts[1]["title"] == "octopoid: the scheduler stopped"
    again = sched()  # a restart: TASK-1 is old news
    again.loop_once()
    again.loop_once()
    time.sleep(0.3)
    assert len(hook.posts) == 2


def test_a_failed_task_and_chosen_events_only(git_project, hook, sched) -> None:
    set_notify(git_project, urls=[hook.url], events=["failed"])
    daemon = sched()
    q.create_task("always-fail at everything")
    q.create_task("works fine")
    for _ in range(4):  # three attempts, then failed
        settle(daemon)
    daemon.loop_once()
    posts = hook.wait_for(1)
    assert [p["title"] for p in posts] == ["octopoid: TASK-1 failed"]
    daemon.shutdown(grace=5)
    time.sleep(0.3)
    assert len(hook.posts) == 1  # scheduler_stopped was not chosen


def test_a_dead_or_stalled_notifier_never_holds_up_a_pass(git_project, hook, sched, caplog):
    dead = "json://127.0.0.1:9/nobody-listens"
    set_notify(git_project, urls=[dead, hook.url])
    hook.hold.clear()  # the live endpoint stalls until told
    daemon = sched()
    ids = [q.create_task(f"task {i}").id for i in range(3)]
    with caplog.at_level(logging.WARNING, logger="octopoid.notify"):
        settle(daemon)
        settle(daemon)
        found = daemon._alerts.look()  # (the passes above already noticed them)
        assert found == []
        assert all(q.get_task(t).state.value == "provisional" for t in ids)
        assert hook.posts == []  # still stalled, yet every pass came back
        hook.hold.set()
        hook.wait_for(3)
    cannot = [r for r in caplog.records if "cannot alert" in r.getMessage()]
    assert len(cannot) == 1 and "json://127.0.0.1" in cannot[0].getMessage()
    assert "nobody-listens" not in cannot[0].getMessage()


def test_a_secret_in_a_title_never_reaches_the_notifier(git_project, hook, sched) -> None:
    secret = "sk-test-" + "Q7v" * 12
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OCTOPOID_TEST_API_KEY", secret)
        set_notify(git_project, urls=[hook.url])
        daemon = sched()
        q.create_task(f"use key {secret} to deploy")
        settle(daemon)
        daemon.loop_once()
        (post,) = hook.wait_for(1)
    assert secret not in json.dumps(post)
    assert post["title"] == "octopoid: TASK-1 needs review"
    said = post["message"].splitlines()[0]  # the title is said, with the key hidden
    assert said.startswith("TASK-1: use key [REDACTED:") and said.endswith("] to deploy")


def test_unknown_events_are_a_clear_config_error(git_project) -> None:
    set_notify(git_project, urls=[], events=["needs_review", "nope"])
    with pytest.raises(ConfigError, match=r"notify\.events.*'nope'"):
        config.load_config()


def test_a_log_line_never_shows_a_notifier_s_credentials() -> None:
    assert notify.where("slack://T1/B2/secret-token") == "slack://t1"
    assert notify.where("json://user:pass@hooks.example.com/x?key=1") == "json://hooks.example.com"


def test_a_question_an_attempt_asks_is_alerted_once_with_its_text(git_project, hook, sched) -> None:
    from orchestrator.queue import questions

    set_notify(git_project, urls=[hook.url])
    daemon = sched()
    task = q.create_task("paint the widget")
    questions.ask(task.id, 1, "Blue or red?")
    daemon.loop_once()
    (post,) = hook.wait_for(1)
    assert post["title"] == f"octopoid: TASK-{task.id} asks a question"
    assert (
        "Blue or red?" in post["message"] and f"octopoid answer TASK-{task.id}" in post["message"]
    )
    daemon.loop_once()  # the same question is not news twice
    questions.answer(task.id, "red", "alice")
    daemon.shutdown(grace=5)
    posts = hook.wait_for(2)
    assert [p["title"] for p in posts] == [post["title"], "octopoid: the scheduler stopped"]
