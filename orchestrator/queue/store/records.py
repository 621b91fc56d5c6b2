"""Records and journals: what the store keeps besides tasks, and what both stores share.

Everything octopoid remembers belongs to the store, so that a team of machines on
PostgreSQL shares it and a crash never leaves it half-written (docs/architecture.md,
"Records and journals"). The folder store keeps them as files (``folder_records``),
PostgreSQL as rows (``pg_records``). This module is what both share: the interfaces, the
key rules, the versions, the update loop and the one runner of journals.
"""

from __future__ import annotations

import copy
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, NamedTuple
from urllib.parse import quote

from ...base.patterns import LazyPattern
from ...model import defaults
from ...model.exceptions import JournalBusy, OctopoidError, RecordChanged, TaskBusy

#: One part of a key: no leading dot (the folder store's own files start with one), no
#: slash; `key_part` makes any text into one.
_PART = r"[A-Za-z0-9_%~-][A-Za-z0-9._%~-]{0,199}"
KEY_RE = LazyPattern(rf"{_PART}(?:/{_PART})*")
KIND_RE = LazyPattern(r"[a-z][a-z0-9-]{0,63}")
MAX_KEY = 500

Value = dict[str, Any]
Change = Callable[[Value | None], Value | None]


def check_key(key: str) -> str:
    """``key`` if it is one (parts joined by ``/``, each as `key_part` makes them); keys are
    built by octopoid's code, so anything else is a bug: ``ValueError``."""
    if len(key) > MAX_KEY or not KEY_RE.fullmatch(key):
        raise ValueError(f"not a record key: {key!r}")
    return key


def key_part(text: str) -> str:
    """Any text (an agent's name) as one part of a key: percent-quoted, a leading dot too."""
    part = quote(text, safe="")
    return "%2E" + part[1:] if part.startswith(".") else part


def encode(value: Value) -> str:
    """A record's value as JSON text (a dict of JSON values; anything else is a bug)."""
    if not isinstance(value, dict):
        raise TypeError(f"a record's value is a dict, not {type(value).__name__}")
    return json.dumps(value, sort_keys=True, allow_nan=False)


def next_version(previous: int | None) -> int:
    """A version no earlier write of the key had: the clock in nanoseconds, or one past
    the last version if the clock is behind it. A record deleted and made again never
    takes back an old version, so a writer that read the old one cannot overwrite it."""
    return max(time.time_ns(), (previous or 0) + 1)


def changed(key: str, expected: int | None, found: int | None) -> RecordChanged:
    if expected is None:
        return RecordChanged(f"record {key} exists already (version {found}): read it first")
    now = "is gone" if found is None else f"is at version {found}"
    return RecordChanged(f"record {key} changed since version {expected}: it {now}")


class Record(NamedTuple):
    value: Value
    version: int


class Records(ABC):
    """Keyed documents with a compare-and-swap write. Keys are ``/``-separated parts
    (`check_key`); a value is a dict of JSON values; versions are opaque numbers, equal
    only for the same write."""

    @abstractmethod
    def read(self, key: str) -> Record | None:
        """The record at ``key`` with its version, or None."""

    @abstractmethod
    def write(self, key: str, value: Value, expected_version: int | None) -> int:
        """Replace the record if it is still at ``expected_version`` (None: it must not
        exist); return the new version. ``RecordChanged`` (and nothing written) when
        someone else wrote or deleted it first."""

    @abstractmethod
    def delete(self, key: str, expected_version: int | None = None) -> bool:
        """Remove the record (only if still at ``expected_version``, when given:
        ``RecordChanged`` otherwise); whether there was one."""

    @abstractmethod
    def list(self, prefix: str = "") -> dict[str, Record]:
        """Every record at ``prefix`` or beneath it (``agents`` gives ``agents`` and
        ``agents/impl-1``, never ``agents-old``), by key, in key order; all of them for
        "". One query on PostgreSQL: a pass reads a whole family at once."""

    def update(self, key: str, change: Change) -> Record | None:
        """Read, ``change``, write, again until no one else wrote in between; return what
        was written (None: deleted, or still missing). ``change`` gets a copy of the value
        (None if there is none) and returns the new one (None deletes); it may run more
        than once, so it must not act outside the value. Unchanged writes nothing."""
        for attempt in range(defaults.RECORD_UPDATE_TRIES):
            found = self.read(key)
            before = None if found is None else found.value
            after = change(copy.deepcopy(before))
            if after == before:
                return found
            version = None if found is None else found.version
            try:
                if after is None:
                    self.delete(key, version)
                    return None
                return Record(after, self.write(key, after, version))
            except RecordChanged:
                import random  # ~2 M instructions of every reader's start, for a lost race

                time.sleep(random.uniform(0, min(0.05, 0.0005 * 2**attempt)))
        raise RecordChanged(
            f"record {key} kept changing under {defaults.RECORD_UPDATE_TRIES} tries to update it"
        )


class Journal(NamedTuple):
    """A workflow of ``steps`` for ``key`` (a task, a plan), of a ``kind`` (accept, split),
    with what its steps need (``data``) and which are ``done``, in the order they were."""

    kind: str
    key: str
    steps: tuple[str, ...]
    done: tuple[str, ...]
    data: Value
    begun: str  # UTC time it was written

    @property
    def left(self) -> tuple[str, ...]:
        """The steps still to run, in order."""
        return tuple(step for step in self.steps if step not in self.done)

    @property
    def name(self) -> str:
        return f"{self.kind} {self.key}"


#: What a journal's step returns to stay in the journal, not done and not failed (it waits
#: for an earlier step that failed: a branch whose pull request is not closed yet).
LATER = "later"
Step = Callable[[Journal, str], object]


class JournalKind(NamedTuple):
    """A kind of journal as its owner describes it to the runner (``Journals.run``).

    ``steps`` maps a step's name to a function of the journal (as it is now) and the
    step's name, safe to repeat; a step named ``family-arg`` that the table lacks runs
    ``family`` (a split's ``create-3`` runs ``create``). A step in ``tolerant`` that fails
    is reported and stays for the next finisher while the others go on; any other failure
    stops the run. For the sweep: ``hold`` is what it holds besides the journal (an
    accept's task), ``gone`` says why nothing is left to finish (the journal is dropped),
    ``waits`` leaves a journal for its owner (an accept's unrecorded merge), and a failure
    in ``dropped_on`` drops the journal (its move was refused).
    """

    name: str
    steps: Mapping[str, Step]
    tolerant: frozenset[str] = frozenset()
    hold: Callable[[str], AbstractContextManager[object]] = lambda key: nullcontext()
    gone: Callable[[Journal], str | None] = lambda journal: None
    waits: Callable[[Journal], bool] = lambda journal: False
    dropped_on: tuple[type[Exception], ...] = ()

    def step(self, name: str) -> Step:
        return self.steps.get(name) or self.steps[name.split("-", 1)[0]]

    def but(self, steps: Mapping[str, Step]) -> JournalKind:
        """This kind with some steps done another way (an accept's own merge)."""
        return self._replace(steps={**self.steps, **steps})


class Ran:
    """What a run did: the journal after, each step's result, the steps that failed."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.results: dict[str, object] = {}
        self.errors: list[str] = []


def check_kind(kind: str) -> str:
    """``kind`` if it is a journal's kind (``accept``, ``plan-approval``); else a bug."""
    if not KIND_RE.fullmatch(kind):
        raise ValueError(f"not a journal kind: {kind!r}")
    return kind


def check_journal(kind: str, key: str, steps: Iterable[str] | None = None) -> tuple[str, ...]:
    """A journal's kind and key checked, and its ``steps`` when given: one or more distinct
    names (a bug if not)."""
    check_kind(kind)
    check_key(key)
    if steps is None:
        return ()
    found = tuple(steps)
    if (
        not found
        or len(set(found)) != len(found)
        or not all(isinstance(s, str) and s for s in found)
    ):
        raise ValueError(f"a journal's steps are distinct names: {found!r}")
    return found


def check_step(journal: Journal, step: str) -> None:
    if step not in journal.steps:
        raise ValueError(f"the {journal.name} journal has no step {step!r}")


def taken(kind: str, key: str) -> JournalBusy:
    return JournalBusy(
        f"the {kind} journal of {key} is being run by another process; "
        "it finishes it, or the next sweep does if that process dies"
    )


def not_held(journal: Journal) -> JournalBusy:
    return JournalBusy(f"the {journal.name} journal is not held here: take it first")


class Journals(ABC):
    """Workflows of several steps that survive their runner. The pattern::

        with journals.take("accept", key) as journal:      # JournalBusy if someone has it
            journal = journal or journals.begin("accept", key, STEPS, data)
            for step in journal.left:
                run(step, journal.data)                     # each step safe to repeat
                journal = journals.mark_done(journal, step)
            journals.finish(journal)

    and a sweep runs the same loop over ``pending()``. A runner killed between steps
    leaves its journal pending; whoever takes it next runs what is left.
    """

    @abstractmethod
    def begin(
        self, kind: str, key: str, steps: Iterable[str], data: Value | None = None
    ) -> Journal:
        """Write a journal of ``steps`` before running them. If one of this kind and key is
        open already, that one is returned as it is (its steps, data and what is done):
        beginning again continues it, never starts a second."""

    @abstractmethod
    def get(self, kind: str, key: str) -> Journal | None:
        """The open journal of this kind and key, or None."""

    @abstractmethod
    def take(self, kind: str, key: str) -> AbstractContextManager[Journal | None]:
        """Hold the journal of this kind and key while running its steps, yielding it as it
        is now (None: none is open; begin one inside). Another process's take fails at once
        with ``JournalBusy``; this process may take it again. A dead holder's hold ends
        with it (its process, or its database session)."""

    @abstractmethod
    def mark_done(self, journal: Journal, step: str) -> Journal:
        """Record that ``step`` is done (once; again changes nothing); the journal after.
        Only its holder may (``JournalBusy`` otherwise)."""

    @abstractmethod
    def finish(self, journal: Journal) -> None:
        """The workflow is over (whatever is left): remove the journal. Holder only."""

    @abstractmethod
    def pending(self, kind: str | None = None) -> list[Journal]:
        """Every open journal (of ``kind``), oldest first, each with what is ``left``."""

    def run(self, journal: Journal, kind: JournalKind) -> Ran:
        """Run what is left of a held journal, in order, each step marked done as it ends;
        finish the journal when nothing is left. The one runner of every kind."""
        ran = Ran(journal)
        for name in journal.left:
            try:
                result = kind.step(name)(ran.journal, name)
            except Exception as exc:  # git, the memory store, a model: it stays journaled
                if name not in kind.tolerant:
                    raise
                ran.errors.append(f"{name}: {exc}")
                import logging  # ~9 ms with traceback and string: every reader imports this module

                logging.getLogger("octopoid.journals").error(
                    "%s: could not finish %s: %s", journal.key, name, exc
                )
                continue
            if result == LATER:
                continue
            ran.results[name] = result
            ran.journal = self.mark_done(ran.journal, name)
        if not ran.journal.left:
            self.finish(ran.journal)
        return ran

    def sweep(self, kinds: Iterable[JournalKind]) -> list[str]:
        """Finish every journal of ``kinds`` a dead process left, on this machine or
        another; one line per journal finished or dropped. One held by a live process
        (``JournalBusy``, ``TaskBusy``) is its own."""
        known = {kind.name: kind for kind in kinds}
        lines = []
        for journal in self.pending():
            if journal.kind not in known:
                continue
            try:
                line = self._resume(known[journal.kind], journal.key)
            except (JournalBusy, TaskBusy):
                continue
            except OctopoidError as exc:
                line = f"{journal.key}: could not finish its {journal.kind}: {exc}"
            if line:
                lines.append(line)
        return lines

    def _resume(self, kind: JournalKind, key: str) -> str | None:
        with kind.hold(key), self.take(kind.name, key) as journal:
            if journal is None:
                return None  # finished meanwhile
            if (why := kind.gone(journal)) is not None:
                self.finish(journal)
                return f"{key}: {why}; its {kind.name} journal is dropped"
            if kind.waits(journal):
                return None
            steps = ", ".join(journal.left)
            try:
                errors = self.run(journal, kind).errors
            except kind.dropped_on as exc:
                self.finish(journal)
                return f"{key}: its {kind.name} could not go on ({exc}); the journal is dropped"
        still = f"; still to do: {'; '.join(errors)}" if errors else ""
        return f"{key}: finished what its {kind.name} left ({steps}){still}"
