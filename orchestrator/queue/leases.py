"""Claim leases and attempt accounting: who owns a claim, when it is dead, attempts left.

A claim carries a lease: the agent's name, a fresh random ``CLAIM_TOKEN`` (whoever holds
it owns the attempt; every write an owner makes checks it), the exact owning process
(HOST, BOOT_ID, PID, PID_START) and ``LEASE_EXPIRES``. Once a runner starts the attempt it
adds ``STARTED_AT`` and a hard ``DEADLINE``. Pure checks over a task's headers (plus "is
that exact process alive here?"); ``queue_utils`` and ``recovery`` make the moves.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ..base.processes import ProcessId
from ..model.tasks import Task, format_time, parse_time

LEASE_HEADERS = (
    "CLAIMED_BY",
    "CLAIM_TOKEN",
    "HOST",
    "BOOT_ID",
    "PID",
    "PID_START",
    "CLAIMED_AT",
    "LEASE_EXPIRES",
    "STARTED_AT",
    "DEADLINE",
    "PROGRESS",
)


def new_token() -> str:
    import secrets  # ~4 ms: paid by a claim, not by every reader of leases

    return secrets.token_hex(8)


def lease_headers(
    agent_name: str, owner: ProcessId, now: datetime, seconds: int, token: str
) -> dict[str, object]:
    """The headers a fresh claim carries: who holds it, its token, where, and until when."""
    return {
        "CLAIMED_BY": agent_name,
        "CLAIM_TOKEN": token,
        **owner.headers(),
        "CLAIMED_AT": format_time(now),
        "LEASE_EXPIRES": format_time(now + timedelta(seconds=seconds)),
    }


def claim_token(task: Task) -> str:
    return task.headers.get("CLAIM_TOKEN", "")


LEASE_FENCE = "@"  # never in a token (hex)


def reaper_fence(task: Task) -> str | None:
    """The claim's token and the lease the reaper saw run out. A move made with it fails
    if the claim was renewed since: its runner came back (a database outage, a machine
    that was suspended) between the reaper's look and its move."""
    token = claim_token(task)
    return f"{token}{LEASE_FENCE}{task.headers.get('LEASE_EXPIRES', '')}" if token else None


def fence_holds(task: Task, fence: str) -> bool:
    """Whether ``fence`` (a claim token, or a ``reaper_fence``) still names the task's claim."""
    token, fenced, lease = fence.partition(LEASE_FENCE)
    if claim_token(task) != token:
        return False
    return not fenced or task.headers.get("LEASE_EXPIRES", "") == lease


def owner(task: Task) -> ProcessId | None:
    return ProcessId.from_headers(task.headers)


def ever_started(task: Task) -> bool:
    """Did a runner take this claim over? (A claim whose runner never started ran nothing.)"""
    return "STARTED_AT" in task.headers


def dead_since(task: Task, now: datetime, lease_seconds: int) -> datetime | None:
    """When a claim's lease ran out, if it has and its exact owner process is gone; else None.

    A claim without a lease (written by hand, or by an older octopoid) counts as expiring
    one lease after its file was written.
    """
    expires = task.lease_expires or file_time(task) + timedelta(seconds=lease_seconds)
    # a claim from another host (or another boot of this one) is alive only by its lease
    if expires > now or ((who := owner(task)) is not None and who.alive()):
        return None
    return expires


def overdue(task: Task, now: datetime) -> bool:
    """Past its hard deadline: the owner is hung (or its agent ignores its timeout)."""
    limit = task.headers.get("DEADLINE")
    return bool(limit) and now > parse_time(limit)


def file_time(task: Task) -> datetime:
    """When the task was last written: its file's mtime, or (PostgreSQL keeps no file) its
    CREATED time, which is earlier and so never keeps a dead claim longer."""
    if task.path is None:
        created = task.headers.get("CREATED")
        return parse_time(created) if created else datetime.now(UTC)
    return datetime.fromtimestamp(task.path.stat().st_mtime, tz=UTC)


def attempts_left(task: Task, max_attempts: int) -> int:
    """Attempts a task has before failing, counting from its last human retry.

    Attempts given back (``INTERRUPTED``: shutdown, rate limits, a runner that never
    started) do not count.
    """
    return max(0, max_attempts - counted_attempts(task))


def counted_attempts(task: Task) -> int:
    """Attempts that count against ``max_attempts``: since the last retry, less those given back."""
    h = task.headers
    since_retry = task.attempts - int(h.get("ATTEMPTS_AT_RETRY") or 0)
    return max(0, since_retry - int(h.get("INTERRUPTED") or 0))


def attempt_text(task: Task, max_attempts: int | None) -> str:
    """The attempt as every face says it: ``2 of 3``; after a retry (fresh attempts) or an
    attempt given back, ``ATTEMPTS`` numbers more than the budget counts, and both are
    said: ``4 (2 of 2 since the retry)``, ``3 (2 of 3; 1 given back)``."""
    if max_attempts is None:
        return str(task.attempts)
    counted, h = counted_attempts(task), task.headers
    if counted == task.attempts:
        return f"{task.attempts} of {max_attempts}"
    since = " since the retry" if int(h.get("ATTEMPTS_AT_RETRY") or 0) else ""
    back = int(h.get("INTERRUPTED") or 0)
    given = f"; {back} given back" if back else ""
    return f"{task.attempts} ({counted} of {max_attempts}{since}{given})"
