"""The board: the counts `octopoid status` prints and the tasks grouped by what they need
from the user, with search, filters and a page of 50 per group.

The counts are ``reports.status_summary``'s own; its lists read only the small folders
(claimed, provisional, failed, rejected, breakdown), the claim index for waiting tasks and
the ledger for done ones (newest first), so a page reads at most 50 tasks of a big group.
A search or filter also needs the title, priority and role of every waiting and done task:
those are read once per process (``_SearchIndex``), since octopoid never changes them.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from functools import cached_property, lru_cache
from typing import Any, NamedTuple
from urllib.parse import urlencode

from ... import config
from ...daemon import stalls
from ...model.exceptions import OctopoidError
from ...model.tasks import (
    DEFAULT_ROLE,
    ID_RE,
    PRIORITIES,
    Task,
    TaskId,
    TaskState,
    parse_time,
    task_label,
    utcnow,
)
from ...queue import machine as queue_utils
from ...queue.store.base import QueueStore
from ...roles import plans
from .. import reports

S = TaskState
SHOWN = 50  # tasks per page of a group; the rest are counted and a link away
MAX_QUERY = 200  # characters of a search kept: a title has at most 200
#: How long a search waits for titles still being read before it answers with those known
#: (it says how many are missing; the 2 s poll shows the rest as they arrive).
READ_WAIT_SECONDS = 0.2
GROUPS = {  # key: (title, hint), in the board's order
    "review": ("Needs review", "accept or reject on the task page"),
    "attention": ("Failed / Rejected / Breakdown", "retry, or read the notes"),
    "running": ("Running", "agents at work"),
    "waiting": ("Waiting", "in claim order"),
    "blocked": ("Blocked", "waiting on other tasks"),
    "done": ("Recently done", "newest first"),
}
RETRYABLE = (S.FAILED, S.REJECTED, S.BREAKDOWN)
PLANS_SHOWN = (plans.DRAFT, plans.APPROVING)  # what waits for a person's approve


@dataclass(frozen=True)
class Filters:
    """What the query asks for. Anything unknown is dropped, never an error: the query is a
    bookmark, and a stale one should still show a board."""

    q: str = ""
    group: str = ""
    priority: str = ""
    role: str = ""
    page: int = 1  # of ``group``; without a group every group shows its first page

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> Filters:
        words = " ".join("".join(c for c in query.get("q", "") if c.isprintable()).split())
        group, priority, role = (query.get(k, "") for k in ("group", "priority", "role"))
        try:
            page = max(1, int(query.get("page") or 1))
        except ValueError:
            page = 1
        return cls(
            q=words[:MAX_QUERY],
            group=group if group in GROUPS else "",
            priority=priority if priority in PRIORITIES else "",
            role=role if ID_RE.fullmatch(role) else "",
            page=page if group in GROUPS else 1,
        )

    @property
    def narrowing(self) -> bool:
        """Whether tasks are matched one by one (else a page is a slice of a group's ids)."""
        return bool(self.q or self.priority or self.role)

    def url(self, **changes: Any) -> str:
        """The board's address with these filters, changed by ``changes``."""
        values = {**asdict(self), **changes}
        pairs = [(k, v) for k, v in values.items() if v and not (k == "page" and v == 1)]
        return "/?" + urlencode(pairs) if pairs else "/"

    def matcher(self) -> Callable[[str, Digest | None], bool]:
        """Whether a task (id, digest) matches: its id is the search (``TASK-12``, ``12``),
        or its title holds the search, case-insensitively; and priority and role agree."""
        needle = self.q.casefold()
        try:
            wanted_id = TaskId(self.q) if self.q else None
        except OctopoidError:
            wanted_id = None

        def match(task_id: str, digest: Digest | None) -> bool:
            return (
                digest is not None
                and self.priority in ("", digest.priority)
                and self.role in ("", digest.role)
                and (task_id == wanted_id or needle in digest.title)
            )

        return match


class Digest(NamedTuple):
    """What search and filters look at: set when a task is created, changed by no move."""

    title: str  # case-folded
    priority: str
    role: str

    @classmethod
    def of(cls, task: Task) -> Digest:
        return cls(task.title.casefold(), sys.intern(task.priority), sys.intern(task.role))


class _SearchIndex:
    """What a search reads, kept per store for the life of the process.

    Each task's ``Digest`` is read once (a hand edit is seen when the task is next shown on
    a page). Reading 60k tasks takes seconds, so it happens in one background thread; a
    request waits ``READ_WAIT_SECONDS`` for it, then answers with what is known. The order
    of done tasks (50k rows of the ledger) is asked again only when done has changed."""

    def __init__(self, store: QueueStore) -> None:
        self.store = store
        self.known: dict[str, Digest | None] = {}  # None: unreadable, matches nothing
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._done: tuple[tuple[int, list[str]], list[str]] = ((0, []), [])

    def done(self, count: int) -> list[str]:
        """Every done id, newest first (``count``: how many done/ holds)."""
        key = (count, self.store.recent(S.DONE, 1))
        if self._done[0] != key:
            self._done = key, self.store.recent(S.DONE, count)
        return self._done[1]

    def note(self, tasks: Iterable[Task]) -> None:
        """Tasks just read: their digests as they are now."""
        for task in tasks:
            self.known[task.id] = Digest.of(task)

    def unread(self, ids: list[str]) -> int:
        """Have ``ids`` read (those not known yet), wait a little; how many are still unread."""
        missing = [task_id for task_id in ids if task_id not in self.known]
        if not missing:
            return 0
        with self._lock:
            if self._reader is None or not self._reader.is_alive():
                self._reader = threading.Thread(
                    target=self._read, args=(missing,), name="board-digests", daemon=True
                )
                self._reader.start()
            reader = self._reader
        reader.join(READ_WAIT_SECONDS)  # one reader at a time; the next poll asks for the rest
        return sum(1 for task_id in missing if task_id not in self.known)

    def _read(self, ids: list[str]) -> None:
        for task_id in ids:
            if task_id not in self.known:
                try:
                    self.known[task_id] = Digest.of(self.store.get(task_id))
                except (OctopoidError, OSError):
                    self.known[task_id] = None


_search_index = lru_cache(maxsize=8)(_SearchIndex)  # one per store, for the process's life


@dataclass
class Card:
    id: str
    title: str
    state: str
    facts: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)  # form posts to /tasks/<id>/<action>
    pull_request: tuple[str, str] | None = None  # (number, URL) on the forge


@dataclass
class Group:
    key: str
    title: str
    hint: str
    cards: list[Card]
    total: int
    start: int = 0  # how many matching tasks come before this page
    filters: Filters = field(default_factory=Filters)

    @property
    def more(self) -> int:
        """Tasks after this page."""
        return self.total - self.start - len(self.cards)

    @property
    def page(self) -> int:
        return self.start // SHOWN + 1

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // SHOWN))

    def page_url(self, page: int) -> str:
        return self.filters.url(group=self.key, page=page)


@dataclass
class _Source:
    """A group before paging: its ids in order, the tasks already read, how to draw one."""

    total: int
    first: Callable[[int | None], list[str]]  # the first n ids in order (None: all)
    draw: Callable[[Task], Card]
    read: dict[str, Task] = field(default_factory=dict)

    @cached_property
    def ids(self) -> list[str]:
        return self.first(None)


def _ago(moment: str | None, now: datetime) -> str:
    if not moment:
        return "?"
    try:
        seconds = int((now - parse_time(moment)).total_seconds())
    except ValueError:
        return "?"
    if seconds < 120:
        return f"{seconds}s"
    return f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h"


def _usage_facts(task: Task) -> list[str]:
    turns, cost = reports.task_usage(task)
    facts = [f"attempt {task.attempts}"]
    if turns:
        facts.append(f"{turns} turns")
    if cost:
        facts.append(f"${cost:.2f}")
    return facts


def _actions(task: Task) -> list[str]:
    """A card's buttons. Never accept: that is judged on the task page, which names the
    branch head it showed."""
    if task.state is S.CLAIMED:
        return ["requeue"]
    if task.state is S.PROVISIONAL and "PROPOSED_SPLIT" in task.headers:
        return ["approve", "close"]
    if task.state in RETRYABLE:
        return ["retry", "close"]
    return ["close"] if task.state in (S.PROVISIONAL, S.INCOMING) else []


def _card(task: Task, *facts: str) -> Card:
    state = task.state.value if task.state else "?"
    pull = reports.pull_request_link(task)
    return Card(task.label, task.title, state, list(facts), _actions(task), pull)


def _listed(tasks: list[Task], draw: Callable[[Task], Card]) -> _Source:
    return _Source(len(tasks), lambda n: [t.id for t in tasks[:n]], draw, {t.id: t for t in tasks})


def _review_facts(task: Task, now: datetime) -> list[str]:
    facts = [*_usage_facts(task), f"submitted {_ago(task.headers.get('SUBMITTED_AT'), now)} ago"]
    if "NO_CHANGE" in task.headers:
        facts.append(f"no change needed: {task.headers['NO_CHANGE']}")
    return facts


def _running_facts(task: Task, now: datetime) -> list[str]:
    claimed = f"claimed {_ago(task.headers.get('CLAIMED_AT'), now)} ago"
    return [task.headers.get("CLAIMED_BY", "?"), *_usage_facts(task), claimed]


def _folder_sources(store: QueueStore, keys: list[str], now: datetime) -> dict[str, _Source]:
    """The groups of the small folders (provisional, failed, ..., claimed), read whole."""
    sources = {}
    if "review" in keys or "attention" in keys:
        review, proposals = [], []
        for task in store.list(S.PROVISIONAL):
            chosen = proposals if "PROPOSED_SPLIT" in task.headers else review
            chosen.append(task)
        sources["review"] = _listed(review, lambda t: _card(t, *_review_facts(t, now)))
        split = "proposed split: approve or reject"
        sources["attention"] = _listed(
            proposals + [t for state in RETRYABLE for t in store.list(state)],
            lambda t: _card(t, *_usage_facts(t), *([split] if t.state is S.PROVISIONAL else [])),
        )
    if "running" in keys:
        running = store.list(S.CLAIMED)
        sources["running"] = _listed(running, lambda t: _card(t, *_running_facts(t, now)))
    return sources


def _indexed_sources(index: _SearchIndex, summary: dict[str, Any]) -> dict[str, _Source]:
    """Waiting, blocked and done: ids from the claim index and the ledger, in order; their
    tasks are read a page at a time."""
    blocked_ids = set(summary["blocked"]["waiting"])
    stuck = {s["id"]: s["why"] for s in summary["blocked"]["stuck"]}
    ready = [w.id for w in summary["waiting"] if task_label(w.id) not in blocked_ids]
    blockers = {w.id: w.blocked_by for w in summary["waiting"] if task_label(w.id) in blocked_ids}
    blocked = list(blockers)

    def blocked_card(task: Task) -> Card:
        on = ", ".join(map(task_label, blockers.get(task.id, task.blocked_by)))
        return _card(task, stuck.get(task.label) or f"blocked by {on}")

    done = summary["counts"][S.DONE.value]
    return {
        "waiting": _Source(len(ready), lambda n: ready[:n], lambda t: _card(t, t.priority)),
        "blocked": _Source(len(blocked), lambda n: blocked[:n], blocked_card),
        "done": _Source(
            done,
            lambda n: index.done(done) if n is None else index.store.recent(S.DONE, n),
            lambda t: _card(t, *_usage_facts(t)),
        ),
    }


def _group(key: str, source: _Source, filters: Filters, index: _SearchIndex) -> Group:
    """One group's page: the matching tasks (all of them when nothing narrows), 50 a page."""
    first, total = source.first, source.total
    if filters.narrowing:
        match, known = filters.matcher(), index.known
        ids = [task_id for task_id in source.ids if match(task_id, known.get(task_id))]
        first, total = (lambda n: ids[:n]), len(ids)
    last = max(0, (total - 1) // SHOWN * SHOWN)
    start = min((filters.page - 1) * SHOWN, last) if filters.group == key else 0
    shown = first(start + SHOWN)[start:]
    fresh = queue_utils.readable_tasks(t for t in shown if t not in source.read)
    index.note(fresh)
    tasks = {t.id: t for t in fresh} | source.read
    cards = [source.draw(tasks[task_id]) for task_id in shown if task_id in tasks]
    title, hint = GROUPS[key]
    return Group(key, title, hint, cards, total, start, filters)


def _roles(chosen: str) -> list[str]:
    """The roles the role filter offers: the agents' own, the default, and the chosen one
    (a bookmark may name a role no agent has any more)."""
    try:
        roles = {agent["role"] for agent in config.load_agents()["agents"]}
    except OctopoidError:
        roles = set()
    return sorted(roles | {DEFAULT_ROLE, stalls.BREAKDOWN_ROLE, chosen} - {""})


def board(query: Mapping[str, str] | None = None, now: datetime | None = None) -> dict[str, Any]:
    """The board: counts as `octopoid status` prints them, and tasks grouped by what they
    need from the user, narrowed and paged by ``query`` (the page's query string)."""
    now = now or utcnow()
    filters = Filters.parse(query or {})
    store = queue_utils.get_store()
    waiting = store.waiting(titled=False)  # ids and edges: cards read their own
    summary = reports.status_summary(now, waiting) | {"waiting": waiting}
    keys = [filters.group] if filters.group else list(GROUPS)
    index = _search_index(store)
    found = _folder_sources(store, keys, now) | _indexed_sources(index, summary)
    sources = {key: found[key] for key in keys}
    unread = 0
    if filters.narrowing:
        for source in sources.values():
            index.note(source.read.values())
        unread = index.unread([i for s in sources.values() for i in s.ids if i not in s.read])
    groups = [_group(key, source, filters, index) for key, source in sources.items()]
    return {
        "counts": summary["counts"],
        "groups": groups,
        "filters": filters,
        "unread": unread,
        "roles": _roles(filters.role),
        "group_names": {key: title for key, (title, _) in GROUPS.items()},
        "problem": summary["config_problem"],
        "stalls": [] if summary["config_problem"] else stalls.lines(summary["stalls"]),
        "sandbox": summary["sandbox"],
        "plans": [
            {"id": p.id, "goal": p.goal, "state": p.state, "tasks": [asdict(t) for t in p.tasks]}
            for p in plans.all_plans()
            if p.state in PLANS_SHOWN
        ],
        "questions": summary["questions"],
    }
