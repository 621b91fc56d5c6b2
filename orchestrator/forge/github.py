"""GitHub (and GitHub Enterprise) through githubkit.

githubkit keeps an HTTP cache (hishel) in the client: a poll of a pull request that has
not changed is a conditional request answered ``304``, which GitHub does not count against
the rate limit, so one client lives as long as the poller. Its own retries are off: a
rate limit or a 5xx becomes ``ForgeUnavailable`` and the poller's backoff decides when to
ask again. githubkit makes an HTTP client for every request, and httpx a TLS context for
each unless given one (~55 ms of CPU: it loads the whole CA bundle): the forge gives it one
made once, as httpx would make it (``SSL_CERT_FILE``, ``SSL_CERT_DIR``, else certifi's).
Answers are read as JSON, not through githubkit's models, so a field GitHub adds
or leaves out never stops a poll.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx
from githubkit import GitHub
from githubkit.cache import MemCacheStrategy
from githubkit.exception import GitHubException, RateLimitExceeded, RequestFailed

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

PAGE = 100
FAILED_CONCLUSIONS = {"failure", "timed_out", "cancelled", "startup_failure", "action_required"}
REVIEW_STATES = {"APPROVED": "approved", "CHANGES_REQUESTED": "changes"}


class GitHubForge:
    kind = "github"

    def __init__(self, url: str, repository: str, token: str) -> None:
        self.owner, self.repo = repository.split("/", 1)
        self.api = GitHub(  # a cache of its own: githubkit's default is the process's
            token,
            base_url=url,
            auto_retry=False,
            timeout=30.0,
            cache_strategy=MemCacheStrategy(),
            ssl_verify=httpx.create_ssl_context(),
        )
        self.rest = self.api.rest

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One request; its answer's JSON (or the response for ``stream``), errors in
        octopoid's words. The token never reaches a message: githubkit's don't hold it."""
        raw = kwargs.pop("raw", False)
        try:
            response = fn(self.owner, self.repo, *args, **kwargs)
        except RateLimitExceeded as exc:
            raise ForgeUnavailable(
                f"GitHub: rate limited ({what})", exc.retry_after.total_seconds()
            ) from None
        except RequestFailed as exc:
            status, message = exc.response.status_code, _message(exc.response)
            raise refusal("GitHub", what, status, message) from None
        except GitHubException as exc:  # no answer: connection refused, timeout
            raise ForgeUnavailable(f"GitHub did not answer {what}: {exc}") from None
        return response if raw else response.json()

    def _pages(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator:
        page = 1
        while True:
            batch = self._call(what, fn, *args, per_page=PAGE, page=page, **kwargs)
            items = batch if isinstance(batch, list) else batch.get("check_runs", [])
            yield from items
            if len(items) < PAGE:
                return
            page += 1

    # --- pull requests ----------------------------------------------------------------

    def find_pull_request(self, branch: str) -> PullRequest | None:
        head = f"{self.owner}:{branch}"
        found = self._call("listing pull requests", self.rest.pulls.list, head=head, state="open")
        return _pull(found[0]) if found else None

    def open_pull_request(self, branch: str, base: str, title: str, body: str) -> PullRequest:
        data = {"title": title, "head": branch, "base": base, "body": body}
        return _pull(self._call("opening a pull request", self.rest.pulls.create, data=data))

    def pull_request(self, number: int) -> PullRequest:
        data = self._call(f"reading pull request #{number}", self.rest.pulls.get, number)
        pull = _pull(data)
        if pull.state == "closed":  # who closed it is the issue's to say
            issue = self._call(f"reading #{number}", self.rest.issues.get, number)
            pull = replace(pull, closed_by=_login(issue.get("closed_by")))
        return pull

    def reviews(self, number: int, since: int) -> list[Review]:
        """Every submitted review; the line comments of those after ``since`` (a review
        that only comments has them too). A dismissed review is none."""
        what = f"reading the reviews of #{number}"
        found = []
        for raw in self._pages(what, self.rest.pulls.list_reviews, number):
            if raw.get("state") in ("DISMISSED", "PENDING"):
                continue
            state = REVIEW_STATES.get(raw.get("state", ""), "comment")
            comments: tuple[ReviewComment, ...] = ()
            if int(raw["id"]) > since:
                listed = self._pages(
                    what, self.rest.pulls.list_comments_for_review, number, raw["id"]
                )
                comments = tuple(c for c in map(_review_comment, listed) if c is not None)
            author, body = _login(raw.get("user")), str(raw.get("body") or "")
            commit = str(raw.get("commit_id") or "")
            found.append(Review(int(raw["id"]), author, state, body, comments, commit))
        return found

    def ci(self, number: int, sha: str, log_tail_chars: int) -> CI:
        """The head's CI; failed jobs' log tails only with ``log_tail_chars`` (a head
        acted on already needs none, and a log may be large)."""
        what = f"reading the checks of {sha[:12]}"
        runs = list(self._pages(what, self.rest.checks.list_for_ref, sha))
        status = self._call(what, self.rest.repos.get_combined_status_for_ref, sha)
        failed, pending = [], False
        for run in runs:
            if run.get("status") != "completed":
                pending = True
            elif run.get("conclusion") in FAILED_CONCLUSIONS:
                log = self._run_log(run, log_tail_chars) if log_tail_chars else ""
                failed.append(Job(str(run.get("name") or "check"), log))
        for one in status.get("statuses") or []:
            if one.get("state") in ("failure", "error"):
                said = " ".join(filter(None, [one.get("description"), one.get("target_url")]))
                failed.append(Job(one.get("context") or "status", said))
            elif one.get("state") == "pending":
                pending = True
        if failed:
            return CI(FAILED, tuple(failed))
        if pending:
            return CI(PENDING)
        return CI(PASSED if runs or status.get("statuses") else NONE)

    def _run_log(self, run: dict[str, Any], limit: int) -> str:
        """The tail of a failed check run's log: GitHub Actions' job log (a check run's id
        is its job's), else what the check said in its output."""
        output = run.get("output") or {}
        said = "\n".join(filter(None, [output.get("summary"), output.get("text")]))
        try:
            log = self._call(
                f"reading the log of {run.get('name')}",
                self.rest.actions.download_job_logs_for_workflow_run,
                run["id"],
                raw=True,
            )
        except ForgeError:  # not an Actions job, or its log expired
            return text.log_tail(said, limit)
        # githubkit reads the whole log (its streamed answers close before they are read)
        return text.log_tail(log.content, limit) or text.log_tail(said, limit)

    def merge(self, number: int, sha: str) -> None:
        self._call(f"merging #{number}", self.rest.pulls.merge, number, data={"sha": sha})

    def close_pull_request(self, number: int, comment: str) -> None:
        self.comment(number, comment)
        self._call(f"closing #{number}", self.rest.pulls.update, number, data={"state": "closed"})

    def describe(self, number: int, body: str) -> None:
        self._call(f"describing #{number}", self.rest.pulls.update, number, data={"body": body})

    def request_review(self, number: int, logins: list[str]) -> None:
        """Ask them to review again (GitHub's "re-request review")."""
        data = {"reviewers": logins}
        self._call(
            f"asking for reviews of #{number}", self.rest.pulls.request_reviewers, number, data=data
        )

    # --- issues -----------------------------------------------------------------------

    def issues(self, label: str, since: str | None) -> list[Issue]:
        """The issues with ``label`` updated at or after ``since``. The same question asked
        again is a conditional request (the listing's URL does not change while ``since``
        does not): an unchanged answer is a free 304."""
        kwargs: dict[str, Any] = {"labels": label, "state": "all"}
        if since:  # the one form GitHub documents; a datetime would be sent with a space
            stamp = datetime.fromisoformat(since.replace("Z", "+00:00")).astimezone(UTC)
            kwargs["since"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        listed = self._pages("listing issues", self.rest.issues.list_for_repo, **kwargs)
        return [_issue(raw) for raw in listed if "pull_request" not in raw]

    def issue(self, number: int) -> Issue:
        return _issue(self._call(f"reading #{number}", self.rest.issues.get, number))

    def comments(self, number: int) -> list[str]:
        listed = self._pages(
            f"reading #{number}'s comments", self.rest.issues.list_comments, number
        )
        return [str(raw.get("body") or "") for raw in listed]

    def comment(self, number: int, body: str) -> None:
        self._call(
            f"commenting on #{number}",
            self.rest.issues.create_comment,
            number,
            data={"body": body},
        )

    pull_comments = comments  # a pull request is an issue: its comments are
    comment_on_pull = comment


def _message(response: Any) -> str:
    try:
        return str(response.json().get("message", ""))[:200]
    except ValueError:
        return response.text[:200]


def _login(user: dict[str, Any] | None) -> str:
    return (user or {}).get("login") or ""


def _pull(raw: dict[str, Any]) -> PullRequest:
    state = "merged" if raw.get("merged") or raw.get("merged_at") else raw.get("state", "open")
    return PullRequest(
        number=int(raw["number"]),
        url=raw.get("html_url") or "",
        state=state,
        head_sha=(raw.get("head") or {}).get("sha") or "",
        merged_by=_login(raw.get("merged_by")),
        merge_sha=raw.get("merge_commit_sha") or "",
    )


def _review_comment(raw: dict[str, Any]) -> ReviewComment | None:
    line = raw.get("line") or raw.get("original_line")
    if not raw.get("path") or not line:  # a comment on the whole file
        return None
    start = int(raw.get("start_line") or raw.get("original_start_line") or 0)
    side = "old" if raw.get("side") == "LEFT" else "new"
    first, end = (start, int(line)) if 0 < start < int(line) else (int(line), 0)
    return ReviewComment(raw["path"], first, raw.get("body") or "", end, side)


def _issue(raw: dict[str, Any]) -> Issue:
    labels = tuple(
        label if isinstance(label, str) else label.get("name", "")
        for label in raw.get("labels") or []
    )
    return Issue(
        number=int(raw["number"]),
        url=raw.get("html_url") or "",
        title=raw.get("title") or "",
        body=raw.get("body") or "",
        state="closed" if raw.get("state") == "closed" else "open",
        labels=labels,
        closed_by=_login(raw.get("closed_by")),
        updated_at=str(raw.get("updated_at") or ""),
    )
