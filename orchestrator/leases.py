"""Claim leases and attempt accounting: when a claim is dead, how many attempts are left.

Pure checks over a task's headers (plus "is that PID alive here?"); ``queue_utils`` makes
the moves they call for.
"""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime, timedelta

from .tasks import Task, format_time

LEASE_HEADERS = ("CLAIMED_BY", "PID", "HOST", "LEASE_EXPIRES", "CLAIMED_AT", "STARTED_AT")


def lease_headers(agent_name: str, pid: int, now: datetime, seconds: int) -> dict[str, object]:
    """The headers a claim carries: who holds it, where, and until when."""
    return {
        "CLAIMED_BY": agent_name,
        "PID": pid,
        "HOST": socket.gethostname(),
        "CLAIMED_AT": format_time(now),
        "LEASE_EXPIRES": format_time(now + timedelta(seconds=seconds)),
    }


def ever_started(task: Task) -> bool:
    """Did a runner take this claim over? (A claim whose runner never started ran nothing.)"""
    return "STARTED_AT" in task.headers


def dead_since(task: Task, now: datetime, lease_seconds: int) -> datetime | None:
    """When a claim's lease ran out, if it has and its owner is gone; else None.

    A claim without a lease (a crash between the claim's rename and its header rewrite)
    counts as expiring one lease after its file was written.
    """
    expires = task.lease_expires or file_time(task) + timedelta(seconds=lease_seconds)
    if expires > now or owner_alive(task):
        return None
    return expires


def file_time(task: Task) -> datetime:
    return datetime.fromtimestamp(task.path.stat().st_mtime, tz=UTC)


def owner_alive(task: Task) -> bool:
    """True when the claiming process still runs on this host (other hosts: trust the lease)."""
    pid = task.headers.get("PID", "")
    if task.headers.get("HOST") != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def attempts_left(task: Task, max_attempts: int) -> int:
    """Attempts a task has before failing, counting from its last human retry.

    Attempts given back (``INTERRUPTED``: shutdown, rate limits) do not count.
    """
    h = task.headers
    used = task.attempts - int(h.get("ATTEMPTS_AT_RETRY") or 0) - int(h.get("INTERRUPTED") or 0)
    return max(0, max_attempts - used)
