"""GitHub and GitLab: pull requests out, CI and reviews back as retry notes, issues in.

One ``Forge`` interface and what it answers, in octopoid's words; ``github`` and ``gitlab``
speak it through each forge's own client library (githubkit, python-gitlab: the
``octopoid[forge]`` extra), imported only when a forge is configured. ``pulls`` opens
pull requests and turns their verdicts into moves, ``issues`` imports issues and tells them
what became of their task, ``poller`` runs both from the scheduler. docs/forge.md.

The token is read from the variable ``forge.token_env`` names, here and nowhere else: it is
never written to a file, a log, a note or a prompt, and neither runners, the fork server
nor an attempt's box inherit it (``base.forge_token.without_token``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol

from .. import config
from ..model.exceptions import ConfigError, ForgeError, ForgeUnavailable

#: CI states, worst first: one failed job fails the head
FAILED, PENDING, PASSED, NONE = "failed", "pending", "passed", "none"


@dataclass(frozen=True)
class PullRequest:
    number: int
    url: str
    state: str  # open | merged | closed
    head_sha: str
    merged_by: str = ""
    closed_by: str = ""
    merge_sha: str = ""


@dataclass(frozen=True)
class ReviewComment:
    path: str
    line: int
    text: str
    end: int = 0
    side: str = "new"  # "old": a line the branch removed, numbered as in the base


@dataclass(frozen=True)
class Review:
    """One reviewer's verdict: ``state`` approved, changes or comment. ``id`` grows with
    time on both forges, so "newer than the last one acted on" is a comparison."""

    id: int
    author: str
    state: str
    body: str
    comments: tuple[ReviewComment, ...] = ()
    commit: str = ""  # the head it judged, where the forge says (GitHub)


@dataclass(frozen=True)
class Job:
    name: str
    log_tail: str = ""


@dataclass(frozen=True)
class CI:
    state: str  # FAILED, PENDING, PASSED or NONE
    failed: tuple[Job, ...] = ()


@dataclass(frozen=True)
class Issue:
    number: int
    url: str
    title: str
    body: str
    state: str  # open | closed
    labels: tuple[str, ...] = ()
    closed_by: str = ""
    updated_at: str = ""  # as the forge wrote it: the next listing asks for what is newer


class Forge(Protocol):
    """What octopoid asks of a forge. Every method raises ``ForgeUnavailable`` when the
    forge cannot answer now and ``ForgeError`` when it refuses."""

    kind: str

    def find_pull_request(self, branch: str) -> PullRequest | None: ...
    def open_pull_request(self, branch: str, base: str, title: str, body: str) -> PullRequest: ...
    def pull_request(self, number: int) -> PullRequest: ...
    def reviews(self, number: int, since: int) -> list[Review]: ...
    def ci(self, number: int, sha: str, log_tail_chars: int) -> CI: ...
    def merge(self, number: int, sha: str) -> None: ...
    def close_pull_request(self, number: int, comment: str) -> None: ...
    def describe(self, number: int, body: str) -> None: ...
    def pull_comments(self, number: int) -> list[str]: ...
    def comment_on_pull(self, number: int, body: str) -> None: ...
    def request_review(self, number: int, logins: list[str]) -> None: ...
    def issues(self, label: str, since: str | None) -> list[Issue]: ...
    def issue(self, number: int) -> Issue: ...
    def comments(self, number: int) -> list[str]: ...
    def comment(self, number: int, body: str) -> None: ...


def refusal(forge: str, what: str, status: int, message: str) -> ForgeError:
    """A forge's error answer in octopoid's words: a 5xx or a 429 is the poller's to wait
    out, anything else a refusal."""
    if status >= 500 or status == 429:
        return ForgeUnavailable(f"{forge} answered {status} to {what}: {message}")
    return ForgeError(f"{forge} refused {what} ({status}): {message}")


def settings() -> dict[str, Any] | None:
    """config.yaml's ``forge`` section, or None when no forge is configured."""
    forge = config.load_config()["forge"]
    return None if forge["kind"] == "none" else forge


def connect(forge: dict[str, Any] | None = None) -> Forge:
    """A client for the configured forge, its token from ``forge.token_env``."""
    forge = forge or settings()
    if forge is None:
        raise ConfigError("no forge is configured: set forge.kind in .octopoid/config.yaml")
    token = os.environ.get(forge["token_env"], "").strip()
    if not token:
        raise ConfigError(
            f"forge: the variable {forge['token_env']} (forge.token_env) holds no token; "
            "set it in the environment octopoid runs in (docs/forge.md says which scopes)"
        )
    if forge["kind"] == "github":
        from .github import GitHubForge

        return GitHubForge(forge["url"], forge["repository"], token)
    from .gitlab import GitLabForge

    return GitLabForge(forge["url"], forge["repository"], token)
