"""Alerts: tell people when a task needs them, through apprise, as config.yaml's ``notify:``
says (docs/operations.md, "Alerts": the events, what is news, what is said once).

Runners move tasks in their own processes, so the scheduler notices arrivals itself by
comparing each pass's listing with the last; sending happens on one background thread, so
a slow or dead notifier never holds up a pass or a move.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
from urllib.parse import urlsplit

from .. import config
from ..base.redaction import redact
from ..model.exceptions import ConfigError, OctopoidError
from ..model.tasks import FILE_RE, TaskId, TaskState, task_label
from ..queue import agent_records
from ..queue import machine as queue_utils

log = logging.getLogger("octopoid.notify")

ARRIVALS = {
    TaskState.PROVISIONAL: "needs_review",
    TaskState.FAILED: "failed",
    TaskState.BREAKDOWN: "breakdown",
}
BACKLOG = 1000  # alerts waiting to be sent; past it new ones are dropped (and logged once)
_STOP = None


def where(url: str) -> str:
    """A notifier URL fit for a log line: scheme and host, never credentials, path or query."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}"


class Alerts:
    """What the scheduler owns: the arrival watch and the sending thread."""

    def __init__(self) -> None:
        self._seen: dict[TaskState, set[str]] = {state: self._names(state) for state in ARRIVALS}
        self._asked = self._questions()  # open questions: those of before the start are old
        self._outbox: queue.Queue = queue.Queue(BACKLOG)
        self._thread: threading.Thread | None = None
        self._failing: set[str] = set()
        self._warned: set[str] = set()
        self._budget_keys: set[str] = set()  # crossings alerted (their keys carry the day)

    @staticmethod
    def _names(state: TaskState) -> set[str]:
        try:
            with os.scandir(config.get_queue_dir() / state.value) as entries:
                return {m[1] for e in entries if (m := FILE_RE.fullmatch(e.name))}
        except OSError:
            return set()

    @staticmethod
    def _questions() -> set[tuple[str, str]]:
        """(task id, when asked) of every open question (``questions``): one listing."""
        from ..queue import questions  # at first use: the scheduler's passes, not its start

        found = set()
        for asked in questions.open_questions():
            with contextlib.suppress(OctopoidError, KeyError):
                found.add((TaskId(asked["task"]), asked.get("asked_at", "")))
        return found

    @staticmethod
    def _settings() -> tuple[list[str], set[str]]:
        try:
            notify = config.load_config()["notify"]
        except ConfigError:
            return [], set()
        return list(notify["urls"]), set(notify["events"])

    def look(self) -> list[tuple[str, str]]:
        """Queue an alert for each task that arrived where a person is needed; return them
        as (event, task id)."""
        urls, events = self._settings()
        found = []
        for state, event in ARRIVALS.items():
            now = self._names(state)
            found += [(event, task_id) for task_id in sorted(now - self._seen[state])]
            self._seen[state] = now
        asked = self._questions()
        found += [("question", task_id) for task_id, _ in sorted(asked - self._asked)]
        self._asked = asked
        if urls:
            for event, task_id in found:
                if event in events:
                    self._send(urls, *_message(event, task_id))
        return found

    def budgets(self, found: list[tuple[str, str]]) -> list[str]:
        """Alert (and log) each budget crossing once: ``found`` is ``budgets.alerts``'s
        (key, message); return the messages sent now."""
        new = [(key, message) for key, message in found if key not in self._budget_keys]
        for key, message in new:
            self._budget_keys.add(key)
            log.warning("budget: %s", message)
            self._tell("budget", "octopoid: a budget is running out", message)
        return [message for _, message in new]

    def tripped(self, records: agent_records.AgentRecords) -> list[str]:
        """Alert (and log) each circuit breaker that paused an agent of ``records`` (a
        pass's read), once: the pause remembers it was said, so a restarted (or
        ``--once``) scheduler, or another machine's, does not say it again. Return the
        agents said now."""
        said = []
        for name in records:
            hold = agent_records.held(name, records=records)
            if hold is None or hold.kind != agent_records.BREAKER or hold.alerted:
                continue
            if not agent_records.mark_alerted(name, hold.since):
                continue
            said.append(name)
            log.warning("circuit breaker tripped for agent %s: %s", name, hold.why)
            body = f"{hold.why}\nnext: fix it, then octopoid resume --agent {name}"
            self._tell("agent_paused", f"octopoid: agent {name} is paused", body)
        return said

    def stopped(self, why: str, wait: float = 5.0) -> None:
        """Say the scheduler stopped, then give the sender up to ``wait`` s to finish."""
        self._tell("scheduler_stopped", "octopoid: the scheduler stopped", why)
        if self._thread is not None:
            self._outbox.put(_STOP)
            self._thread.join(wait)

    def _tell(self, event: str, title: str, body: str) -> None:
        """Send ``body``, after the project it is about, where config.yaml asks for ``event``."""
        urls, events = self._settings()
        if urls and event in events:
            self._send(urls, title, redact(f"{config.find_project_root()}: {body}"))

    def _send(self, urls: list[str], title: str, body: str) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="notify", daemon=True)
            self._thread.start()
        try:
            self._outbox.put_nowait((urls, title, body))
        except queue.Full:
            self._warn_once("backlog", f"notify: {BACKLOG} alerts waiting; dropping new ones")

    def _work(self) -> None:
        while (item := self._outbox.get()) is not _STOP:
            urls, title, body = item
            for url in urls:
                self._deliver(url, title, body)

    def _deliver(self, url: str, title: str, body: str) -> None:
        try:
            import apprise
        except ModuleNotFoundError:
            self._warn_once(
                "apprise", "notify: apprise is not installed; pip install 'octopoid[web]'"
            )
            return
        try:
            sender = apprise.Apprise()
            ok = sender.add(url) and sender.notify(title=title, body=body)
        except Exception as exc:  # a notifier's bug must not end the sending thread
            ok, reason = False, type(exc).__name__
        else:
            reason = "it did not accept the alert"
        if ok:
            if url in self._failing:
                log.info("notify: %s works again", where(url))
            self._failing.discard(url)
        elif url not in self._failing:
            self._failing.add(url)
            log.warning(
                "notify: cannot alert %s (%s); said once until it works", where(url), reason
            )

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message)


def _message(event: str, task_id: str) -> tuple[str, str]:
    label = task_label(task_id)
    try:
        title = queue_utils.get_task(task_id).title
    except OctopoidError:
        title = "(moved on since)"
    what = {
        "needs_review": ("needs review", f"octopoid accept {label} / octopoid reject {label} "
                         '--reason "..."'),
        "failed": ("failed", f"octopoid notes {label}, then octopoid retry {label}"),
        "breakdown": ("needs a breakdown", f"octopoid show {label}"),
        "question": ("asks a question", f'octopoid answer {label} "..." (or its page)'),
    }[event]  # fmt: skip
    root = config.find_project_root()
    body = f"{label}: {title}\nproject: {root}\nnext: {what[1]}\nsee: octopoid show {label}"
    if event == "question":
        from ..queue import questions

        body += f"\nquestion: {questions.read(task_id).get('question', '?')[:500]}"
    return f"octopoid: {label} {what[0]}", redact(body)
