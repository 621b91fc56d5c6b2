"""What a task's pull request has had from octopoid and given to it (``FORGE_SEEN``).

One header of the task, written in the same move or update as what it records, so both
stores share it and a poll that dies anywhere never acts twice on one verdict nor says one
thing twice: the head whose failed CI sent the task back, the newest review taken, the
attempt the pull request was last told of, the reviewers to ask again once an attempt has
answered them, and the head whose stale approvals were pointed out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..base.text import ascii_int
from ..model.tasks import Task

HEADER = "FORGE_SEEN"
LOGIN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")  # GitHub's and GitLab's logins


@dataclass
class Seen:
    ci: str = ""  # the head whose failed CI sent it back
    review: int = 0  # the newest review acted on
    told: int | None = None  # the attempt the pull request was last told of (None: unknown)
    asked: list[str] = field(default_factory=list)  # reviewers to ask again after an attempt
    stale: str = ""  # the head whose approvals of earlier heads were pointed out

    @classmethod
    def of(cls, task: Task) -> Seen:
        seen = cls()
        for part in task.headers.get(HEADER, "").split():
            key, _, value = part.partition(":")
            if key == "ci":
                seen.ci = value
            elif key == "review" and (number := ascii_int(value)) is not None:
                seen.review = number
            elif key == "told" and (number := ascii_int(value)) is not None:
                seen.told = number
            elif key == "asked":
                seen.asked = [login for login in value.split(",") if LOGIN_RE.fullmatch(login)]
            elif key == "stale":
                seen.stale = value
        return seen

    def header(self) -> str:
        parts = [f"ci:{self.ci}", f"review:{self.review}"]
        if self.told is not None:
            parts.append(f"told:{self.told}")
        if asked := [login for login in self.asked if LOGIN_RE.fullmatch(login)]:
            parts.append(f"asked:{','.join(dict.fromkeys(asked))}")
        if self.stale:
            parts.append(f"stale:{self.stale}")
        return " ".join(parts)

    def mark(self) -> dict[str, str]:
        """The header as a move's ``mark`` (set in the same move)."""
        return {HEADER: self.header()}

    def write(self, task: Task) -> None:
        """Set on ``task`` (inside a store's update)."""
        task.set_header(HEADER, self.header())
