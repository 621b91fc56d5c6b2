"""GitLab (gitlab.com or self-hosted) through python-gitlab.

GitLab's REST API gives no ETags on the endpoints polled here, so a poll asks only for what
can have changed (issues ``updated_after`` the last poll) and otherwise reads the open merge
requests at ``forge.poll_seconds``. python-gitlab's own waits on a 429 and its retries are
off: a rate limit or a 5xx becomes ``ForgeUnavailable`` and the poller backs off.

A merge request "requests changes" when a reviewer's state is ``requested_changes``
(GitLab 17); that review is the reviewer's notes since the last review acted on: general
notes are its body, diff notes its line comments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import gitlab
import requests
from gitlab.exceptions import GitlabError

from ..model.exceptions import ForgeError, ForgeUnavailable
from . import (
    CI,
    FAILED,
    NONE,
    PASSED,
    PENDING,
    Issue,
    Job,
    PullRequest,
    Review,
    ReviewComment,
    refusal,
    text,
)

T = TypeVar("T")
#: pipeline states that still run, and those that end it badly
RUNNING = {"created", "waiting_for_resource", "preparing", "pending", "running", "scheduled"}
BROKEN = {"failed", "canceled"}
#: every call: a 429 or 5xx is the poller's to wait out, not a sleep inside the client
NO_WAIT = {"obey_rate_limit": False, "retry_transient_errors": False}
OWN_MARK = "<!-- octopoid:"  # what octopoid writes on a merge request carries it


class GitLabForge:
    kind = "gitlab"

    def __init__(self, url: str, repository: str, token: str) -> None:
        self.api = gitlab.Gitlab(url, private_token=token, timeout=30, per_page=100)
        self.project = self.api.projects.get(repository, lazy=True)

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs, **NO_WAIT)
        except GitlabError as exc:
            status, message = exc.response_code or 0, str(exc.error_message)[:200]
            raise refusal("GitLab", what, status, message) from None
        except requests.RequestException as exc:
            raise ForgeUnavailable(f"GitLab did not answer {what}: {type(exc).__name__}") from None

    # --- merge requests ---------------------------------------------------------------

    def find_pull_request(self, branch: str) -> PullRequest | None:
        found = self._call(
            "listing merge requests",
            self.project.mergerequests.list,
            source_branch=branch,
            state="opened",
            get_all=False,
        )
        return _merge_request(found[0].attributes) if found else None

    def open_pull_request(self, branch: str, base: str, title: str, body: str) -> PullRequest:
        data = {"source_branch": branch, "target_branch": base, "title": title, "description": body}
        made = self._call("opening a merge request", self.project.mergerequests.create, data)
        return _merge_request(made.attributes)

    def pull_request(self, number: int) -> PullRequest:
        found = self._call(f"reading !{number}", self.project.mergerequests.get, number)
        return _merge_request(found.attributes)

    def reviews(self, number: int, since: int) -> list[Review]:
        """Approvals, and each note written after ``since`` (the newest review acted on)
        as a review of its own, in order: a general note's body, a diff note's line
        comment; a reviewer whose state is ``requested_changes`` asks for changes with
        them, anyone else's are comments. One who asks with no note at all is a review
        too, once (its id 1). octopoid's own notes (they carry its marker) are none."""
        what = f"reading the reviews of !{number}"
        mr = self.project.mergerequests.get(number, lazy=True)
        approved = self._call(what, mr.approvals.get).attributes.get("approved_by") or []
        found = [Review(0, _login(entry.get("user")), "approved", "") for entry in approved]
        reviewers = self._call(what, mr.reviewer_details.list, get_all=True)
        asking = {
            _login(r.attributes.get("user"))
            for r in reviewers
            if r.attributes.get("state") == "requested_changes"
        }
        heard = set()
        for discussion in self._call(what, mr.discussions.list, get_all=True):
            for note in discussion.attributes.get("notes") or []:
                who, body = _login(note.get("author")), str(note.get("body") or "")
                if note.get("system") or OWN_MARK in body or int(note["id"]) <= since:
                    continue
                heard.add(who)
                state = "changes" if who in asking else "comment"
                line = _diff_note(note)  # a diff note's words are its line comment's
                body = "" if line or note.get("type") == "DiffNote" else body
                found.append(Review(int(note["id"]), who, state, body, (line,) if line else ()))
        if not since:  # asked with no word: heard once
            found += [Review(1, who, "changes", "") for who in sorted(asking - heard)]
        return found

    def ci(self, number: int, sha: str, log_tail_chars: int) -> CI:
        what = f"reading the pipelines of {sha[:12]}"
        pipelines = self._call(what, self.project.pipelines.list, sha=sha, get_all=False)
        if not pipelines:
            return CI(NONE)
        newest = max(pipelines, key=lambda p: int(p.attributes["id"]))
        status = newest.attributes.get("status")
        if status in RUNNING:
            return CI(PENDING)
        if status not in BROKEN:
            return CI(PASSED if status == "success" else NONE)
        jobs = self._call(what, newest.jobs.list, get_all=True)
        failed = []
        for job in jobs:
            if job.attributes.get("status") in BROKEN:
                name, job_id = str(job.attributes.get("name") or "job"), int(job.attributes["id"])
                failed.append(
                    Job(name, self._trace(job_id, log_tail_chars) if log_tail_chars else "")
                )
        return CI(FAILED, tuple(failed) or (Job(f"pipeline {newest.attributes['id']}"),))

    def _trace(self, job_id: int, limit: int) -> str:
        job = self.project.jobs.get(job_id, lazy=True)
        try:
            raw = self._call(f"reading job {job_id}'s log", job.trace)
        except ForgeError:
            return ""
        return text.log_tail(bytes(raw or b""), limit)

    def merge(self, number: int, sha: str) -> None:
        self._put(f"merging !{number}", f"{number}/merge", {"sha": sha})

    def close_pull_request(self, number: int, comment: str) -> None:
        self.comment_on_pull(number, comment)
        self._put(f"closing !{number}", str(number), {"state_event": "close"})

    def describe(self, number: int, body: str) -> None:
        self._put(f"describing !{number}", str(number), {"description": body})

    def _put(self, what: str, where: str, data: dict[str, str]) -> None:
        """A change of merge request ``where`` (its iid, and an action after it)."""
        path = f"/projects/{self.project.encoded_id}/merge_requests/{where}"
        self._call(what, self.api.http_put, path, post_data=data)

    def pull_comments(self, number: int) -> list[str]:
        return self._said(f"!{number}", self.project.mergerequests.get(number, lazy=True))

    def comment_on_pull(self, number: int, body: str) -> None:
        mr = self.project.mergerequests.get(number, lazy=True)
        self._call(f"commenting on !{number}", mr.notes.create, {"body": body})

    def _said(self, what: str, noteable: Any) -> list[str]:
        """The people's notes on an issue or a merge request (not GitLab's own)."""
        notes = self._call(f"reading {what}'s notes", noteable.notes.list, get_all=True)
        return [
            str(n.attributes.get("body") or "") for n in notes if not n.attributes.get("system")
        ]

    def request_review(self, number: int, logins: list[str]) -> None:
        """Ask them to review again: GitLab's quick action, which a note carries."""
        asked = " ".join(f"@{login}" for login in logins)
        self.comment_on_pull(number, f"/request_review {asked}")

    # --- issues -----------------------------------------------------------------------

    def issues(self, label: str, since: str | None) -> list[Issue]:
        kwargs: dict[str, Any] = {"labels": [label], "get_all": True}
        if since:
            kwargs["updated_after"] = since
        listed = self._call("listing issues", self.project.issues.list, **kwargs)
        return [_issue(i.attributes) for i in listed]

    def issue(self, number: int) -> Issue:
        found = self._call(f"reading #{number}", self.project.issues.get, number)
        return _issue(found.attributes)

    def comments(self, number: int) -> list[str]:
        return self._said(f"#{number}", self.project.issues.get(number, lazy=True))

    def comment(self, number: int, body: str) -> None:
        issue = self.project.issues.get(number, lazy=True)
        self._call(f"commenting on #{number}", issue.notes.create, {"body": body})


def _login(user: dict[str, Any] | None) -> str:
    return (user or {}).get("username") or ""


def _merge_request(raw: dict[str, Any]) -> PullRequest:
    return PullRequest(
        number=int(raw["iid"]),
        url=raw.get("web_url") or "",
        state={"opened": "open", "merged": "merged"}.get(raw.get("state", ""), "closed"),
        head_sha=raw.get("sha") or "",
        merged_by=_login(raw.get("merge_user")) or _login(raw.get("merged_by")),
        closed_by=_login(raw.get("closed_by")),
        merge_sha=raw.get("merge_commit_sha") or raw.get("squash_commit_sha") or "",
    )


def _diff_note(note: dict[str, Any]) -> ReviewComment | None:
    position = note.get("position") or {}
    side = "new" if position.get("new_line") else "old"  # a removed line has only an old one
    line = position.get(f"{side}_line")
    if note.get("type") != "DiffNote" or not line:
        return None
    path = position.get(f"{side}_path") or ""
    return ReviewComment(path, int(line), note.get("body") or "", side=side)


def _issue(raw: dict[str, Any]) -> Issue:
    return Issue(
        number=int(raw["iid"]),
        url=raw.get("web_url") or "",
        title=raw.get("title") or "",
        body=raw.get("description") or "",
        state="closed" if raw.get("state") == "closed" else "open",
        labels=tuple(raw.get("labels") or ()),
        closed_by=_login(raw.get("closed_by")),
        updated_at=str(raw.get("updated_at") or ""),
    )
