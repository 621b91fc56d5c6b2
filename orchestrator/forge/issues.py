"""Issues in as tasks, and what became of each task said back on its issue.

An issue becomes the task ``GH-<number>`` (GitLab: ``GL-<number>``): the id is the issue's,
so importing is idempotent by construction (the store refuses an id that exists in any
folder, whoever imports it at the same instant). Until its task starts, an issue's edits
rewrite the task and its close cancels it (``close --wont-do``); after, the task is
octopoid's. The store's records remember which tasks came from issues and how far each
label's listing reached (docs/scale-out.md); a comment carries a hidden marker
(``text.marker``) looked for before posting, so a lost record or a poll killed after
posting never says a thing twice.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

from .. import config
from ..base.fsutil import read_json_object
from ..base.locks import holding
from ..base.redaction import scrub
from ..model.exceptions import IllegalTransition, InvalidTask, LostRace, TaskBusy
from ..model.tasks import Task, TaskId, TaskState, format_time, new_task, parse_time, task_label
from ..queue import adopt, intake
from ..queue import machine as queue_utils
from ..queue.store.records import Records, check_key, key_part
from ..review import verdicts as review
from . import Forge, Issue, text

log = logging.getLogger("octopoid.forge")
PREFIX = {"github": "GH", "gitlab": "GL"}
#: seconds a listing reaches back before the newest update the last one had: an update
#: in that same second, or shown late by a replica, is not missed; while nothing changes
#: the answer is the same, so the overlap costs nothing (a 304)
SINCE_OVERLAP = 60
#: blockers imported ahead of what they block, at most this deep; a longer chain's
#: further edges are left out (named in the context), not a RecursionError every poll
MAX_CHAIN = 100


TRACKED = "forge/issues"  # records: a task imported from an issue, and what it was told
SINCE = "forge/since"  # records: how far a label's last listing reached, in the forge's time


def folder() -> Path:
    """This machine's forge folder: the lock that keeps its polls one at a time."""
    return config.get_orchestrator_dir() / "forge"


def _records() -> Records:
    """The store's records, with an older octopoid's ``forge/issues.json`` moved in."""
    records = adopt.store().records
    old = folder() / "issues.json"
    if old.exists():
        _adopt_registry(records, read_json_object(old))
        old.unlink()
    return records


def _adopt_registry(records: Records, registry: dict[str, Any]) -> None:
    """What an older octopoid's registry says, as far as it reads as what octopoid wrote
    (a file edited into anything else loses only the entries that do not)."""
    since = registry.get("since")
    for label, when in since.items() if isinstance(since, dict) else ():
        with contextlib.suppress(ValueError, TypeError):  # not a time: listed from the start
            stamp = format_time(parse_time(when))
            records.update(f"{SINCE}/{key_part(label)}", lambda v, s=stamp: v or {"since": s})
    tasks = registry.get("tasks")
    for task_id, entry in tasks.items() if isinstance(tasks, dict) else ():
        issue = entry.get("issue") if isinstance(entry, dict) else None
        if not isinstance(issue, int) or entry.get("over"):
            continue
        said = [e for e in entry.get("said") or [] if isinstance(e, str)]
        tracked = {"issue": issue, "said": said}
        with contextlib.suppress(ValueError):  # not an id octopoid makes: dropped
            records.update(check_key(f"{TRACKED}/{task_id}"), lambda v, t=tracked: v or t)


def task_id_for(kind: str, number: int) -> TaskId:
    """The task an issue becomes (``GH-7``): an id made where the forge's answer enters."""
    return TaskId(f"{PREFIX[kind]}-{number}")


def intake_issues(forge: Forge, label: str) -> list[str]:
    """Import the open issues labelled ``label`` not imported yet, and apply edits and closes
    of imported ones; one line per thing done. Blockers ("blocked by #N") are imported before
    what they block; a blocker that is not imported is left out, and said in the task's context.

    Each listing asks for the issues updated since the newest one the last listing had
    (less ``SINCE_OVERLAP``), in the forge's own time (no clock of this machine is compared
    with the forge's): while nothing changes the question, and the answer, stay the same,
    so GitHub answers it from its ETag with a 304 that costs no rate limit."""
    folder().mkdir(parents=True, exist_ok=True)
    with holding(folder() / ".lock"):
        records = _records()
        reached = f"{SINCE}/{key_part(label)}"
        found = records.read(reached)
        since = found.value.get("since") if found else None
        listed = {issue.number: issue for issue in forge.issues(label, since)}
        done: list[str] = []
        making: set[int] = set()
        for number in sorted(listed):
            done += _take(forge, listed[number], listed, records, making)
        stamps = [parse_time(i.updated_at) for i in listed.values() if i.updated_at]
        if stamps:
            newest = format_time(max(stamps) - timedelta(seconds=SINCE_OVERLAP))
            records.update(reached, lambda v: {"since": max(newest, (v or {}).get("since", ""))})
    return done


def _track(records: Records, task_id: str, number: int) -> None:
    """Remember that ``task_id`` came from issue ``number`` (kept if it is already)."""
    records.update(f"{TRACKED}/{task_id}", lambda v: v or {"issue": number, "said": []})


def _take(
    forge: Forge,
    issue: Issue,
    listed: dict[int, Issue],
    records: Records,
    making: set[int],
    depth: int = 0,
) -> list[str]:
    task_id = task_id_for(forge.kind, issue.number)
    store = queue_utils.get_store()
    state = store.locate(task_id)
    if state is not None:
        return _follow(forge, issue, task_id, state, records)
    if issue.state != "open" or issue.number in making:
        return []
    making.add(issue.number)
    made = text.from_issue(issue.number, issue.url, issue.title, issue.body, issue.labels)
    done, blockers, left_out = [], [], []
    for number in made.blockers:
        deep = depth >= MAX_CHAIN  # a hostile chain of issues: no deeper recursion
        if number in listed and listed[number].state == "open" and not deep:
            done += _take(forge, listed[number], listed, records, making, depth + 1)
        blocker = task_id_for(forge.kind, number)  # a cycle's last edge finds none: left out
        if store.locate(blocker) not in (None, TaskState.QUARANTINE):
            blockers.append(blocker)
        else:
            left_out.append(f"#{number}")
    context = made.context
    if left_out:
        context += f"\n\n(Blocked by {', '.join(left_out)} on the forge: not imported here.)"
    try:
        task = new_task(
            task_id,
            made.title,
            priority=made.priority,
            branch=intake.base_branch(None, config.find_project_root()),
            context=context,
            criteria=made.criteria,
            blocked_by=blockers,
            created_by=f"{forge.kind}:issue-{issue.number}",
        )
    except InvalidTask as exc:  # too big even cut: say it on the log, not as a crash
        log.error("issue #%d cannot be a task: %s", issue.number, exc)
        return done
    task.set_header("ISSUE_NUMBER", issue.number)
    task.set_header("ISSUE_URL", scrub(issue.url))
    try:
        queue_utils.add_task(task)
    except IllegalTransition:  # another intake made it a moment ago
        return done
    _track(records, task_id, issue.number)
    return [*done, f"{task_label(task_id)}: imported from issue #{issue.number}"]


def _follow(
    forge: Forge, issue: Issue, task_id: str, state: TaskState, records: Records
) -> list[str]:
    """An imported issue changed: before its task started, an edit rewrites the task and a
    close cancels it; after, the task is left alone."""
    if state in (TaskState.DONE, TaskState.QUARANTINE):
        return []
    _track(records, task_id, issue.number)
    task = queue_utils.get_task(task_id)
    if state is not TaskState.INCOMING or task.attempts > 0:
        return []
    try:
        if issue.state == "closed":
            by = issue.closed_by or "someone"
            why = f"forge: issue #{issue.number} closed by {by} before work started"
            review.close(task_id, "wont-do", why, closed_by=f"{forge.kind}:{by}")
            return [f"{task_label(task_id)}: cancelled, its issue was closed"]
        made = text.from_issue(issue.number, issue.url, issue.title, issue.body, issue.labels)
        fresh = new_task(task_id, made.title, context=made.context, criteria=made.criteria)
        if _differs(task, fresh, made.priority):  # timestamps may not tell: they are seconds
            queue_utils.rewrite_waiting(task_id, lambda t: _rewrite(t, fresh, made.priority))
            return [f"{task_label(task_id)}: rewritten from its edited issue"]
    except (IllegalTransition, LostRace, TaskBusy, InvalidTask) as exc:  # claimed meanwhile
        log.info("%s: issue #%d changed, task left as it is: %s", task_id, issue.number, exc)
    return []


def _differs(task: Task, fresh: Task, priority: str) -> bool:
    now = (task.title, task.context, task.criteria, task.priority)
    return now != (fresh.title, fresh.context, fresh.criteria, priority)


def _rewrite(task: Task, fresh: Task, priority: str) -> None:
    if task.attempts > 0:  # claimed and given back in between: the task is octopoid's now
        return
    task.title = fresh.title
    task.set_header("PRIORITY", priority)
    replaced = {h: c for h, c in fresh.sections if h in ("Context", "Acceptance Criteria")}
    task.sections = [(h, replaced.get(h, c)) for h, c in task.sections]


def tell_issues(forge: Forge) -> list[str]:
    """Say on each imported issue what became of its task: started, pull request opened,
    done, failed. One line per comment posted."""
    folder().mkdir(parents=True, exist_ok=True)
    with holding(folder() / ".lock"):
        records = _records()
        done = []
        for key, found in records.list(TRACKED).items():
            task_id, entry = key.rpartition("/")[2], dict(found.value)
            try:
                done += _tell(forge, task_id, entry)
            finally:  # what was posted is remembered even if a later comment failed
                records.update(key, lambda v, e=entry: _told(v, e))
    return done


def _told(found: dict[str, Any] | None, entry: dict[str, Any]) -> dict[str, Any] | None:
    """The record after a tell: what any machine has said, together; gone once it is over."""
    if found is None or entry.get("over"):
        return None
    return {**found, "said": sorted(set(found.get("said", [])) | set(entry.get("said", [])))}


def _tell(forge: Forge, task_id: str, entry: dict[str, Any]) -> list[str]:
    store = queue_utils.get_store()
    state = store.locate(task_id)
    if state is None or state is TaskState.QUARANTINE:
        entry["over"] = True
        return []
    task = queue_utils.get_task(task_id)
    number = int(entry["issue"])
    due = _due(task, state)
    said = set(entry.get("said", []))
    posted: set[str] | None = None  # the markers on the issue, read once if needed
    done = []
    for event, detail in due:
        if event in said:
            continue
        if event == "done" and _closed_by_its_merge(forge, task, number):
            said.add(event)  # the forge said it: "closed this in #<pull request>"
            entry["said"] = sorted(said)
            continue
        if posted is None:
            posted = set(forge.comments(number))
        mark = text.marker(task, event)
        if not any(mark in body for body in posted):
            forge.comment(number, text.issue_comment(task, event, detail))
            done.append(f"{task.label}: said '{event}' on issue #{number}")
        said.add(event)
        entry["said"] = sorted(said)
    if state is TaskState.DONE and {e for e, _ in due} <= said:
        entry["over"] = True
    return done


def _closed_by_its_merge(forge: Forge, task: Task, number: int) -> bool:
    """The task's pull request was merged and its "Closes #N" closed the issue already."""
    merged = "PR_NUMBER" in task.headers and not task.headers.get("CLOSED")
    return merged and forge.issue(number).state == "closed"


def _due(task: Task, state: TaskState) -> list[tuple[str, str]]:
    """What the issue should have been told by now, in the order it happened: each pull
    request and each failure once (a retry's new pull request, a second failure, too)."""
    closed = task.headers.get("CLOSED")
    due = []
    if task.attempts > 0:
        due.append(("started", ""))
    pr = task.headers.get("PR_NUMBER") or task.headers.get("PR_CLOSED")  # or closed since
    if (url := task.headers.get("PR_URL")) and pr:
        due.append((f"pull-request-{pr}", url))
    if state is TaskState.DONE:
        if closed == "wont-do" and task.attempts == 0:
            due.append(("cancelled", ""))
        elif closed:
            why = task.headers.get("CLOSE_REASON", "")
            due.append(("done", f"closed without a merge ({closed}){': ' + why if why else ''}"))
        else:
            merged = task.headers.get("PR_URL")
            due.append(("done", f"merged in {merged}" if merged else task.history[-1]))
    elif state in (TaskState.FAILED, TaskState.REJECTED):
        why = task.headers.get("ERROR") or task.headers.get("REJECT_DETAILS") or ""
        failures = sum(dst in ("failed", "rejected") for _, dst in task.moves())
        due.append((f"failed-{failures}", why))
    return due
