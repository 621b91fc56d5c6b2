"""A stateful GitHub REST fake (GitHub Enterprise style: API under ``/api/v3``) for githubkit.

Answers are the real API's JSON: the fields a forge client reads are written here by hand, and
every other field githubkit's models require is filled with a neutral value from those models
(``_complete``), so ``parsed_data`` validates. Issues and pull requests share one number
sequence; a pull request is an issue with a ``pull`` (and is listed by ``/issues`` with a
``pull_request`` key). A pull request's head sha is read from the bare repo at request time.

Test-side methods (people and CI): ``create_issue``, ``edit_issue``, ``close_issue``,
``review(number, login, state, body, comments=[LineNote...])`` on the current head sha,
``report_ci(sha, name, conclusion, log)`` (a check run; ``conclusion=None`` is in progress),
``report_status(sha, context, state)``, ``merge_by_hand`` (``method`` merge, squash or
rebase, as the merge button and ``PUT .../merge``'s ``merge_method``), ``close_by_hand``,
``reopen_by_hand``, plus the shared ``force_push``, ``fail_next``, ``rate_limit_next``,
``log`` and ``not_modified`` (base.py). As on GitHub: a merge into ``main`` closes the
issues its description closes ("Closes #N"); a review removes its author from the
requested reviewers, ``POST .../requested_reviewers`` asks them again; the issue listing
answers 422 to a ``since`` not written ``YYYY-MM-DDTHH:MM:SSZ``.
Rate limits answer 403 with ``x-ratelimit-remaining: 0`` (githubkit raises
``PrimaryRateLimitExceeded``), or with ``secondary=True`` 429 with ``retry-after``
(``SecondaryRateLimitExceeded``).
"""

from __future__ import annotations

import itertools
import types
import typing
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from githubkit_schemas.latest import models as m
from pydantic import BaseModel

from .base import (
    SINCE_RE,
    ForgeServer,
    HTTPError,
    LineNote,
    Reply,
    Request,
    Route,
    closes,
    epoch_in,
    now_iso,
    parse_time,
    public,
)

DOCS = "https://docs.github.com/rest"


@cache
def _placeholder(tp: Any) -> Any:
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return None if type(None) in args else _placeholder(args[0])
    if origin is typing.Literal:
        return args[0]
    if origin is list:
        return []
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return _complete(tp, {})
    return {str: "", bool: False, int: 0, float: 0.0, datetime: "1970-01-01T00:00:00Z"}.get(tp)


def _complete(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` plus every field ``model`` requires that it lacks, with a neutral value."""
    out = dict(data)
    for name, info in model.model_fields.items():
        key = info.alias or name
        if info.is_required() and key not in out:
            out[key] = _placeholder(info.annotation)
    return out


@dataclass
class Review:
    id: int
    login: str
    state: str
    body: str
    commit_id: str
    submitted_at: str
    comments: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Pull:
    head: str
    base: str
    shas: list[str] = field(default_factory=list)
    merged_at: str | None = None
    merged_by: str | None = None
    merge_sha: str | None = None
    reviews: list[Review] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)  # reviewers asked (again), not yet heard


@dataclass
class Issue:
    number: int
    id: int
    title: str
    body: str
    login: str
    labels: list[str]
    created_at: str
    updated_at: str
    state: str = "open"
    closed_at: str | None = None
    closed_by: str | None = None
    comments: list[dict[str, Any]] = field(default_factory=list)
    pull: Pull | None = None


@dataclass
class CheckRun:
    id: int
    sha: str
    name: str
    conclusion: str | None
    log: str
    started_at: str
    completed_at: str | None


class GitHubFake(ForgeServer):
    """One repository ``owner/name`` on a fake GitHub; ``api`` is githubkit's ``base_url``."""

    def __init__(self, bare: Path, users: dict[str, str], repo: str = "octo/widgets") -> None:
        self.owner, self.name = repo.split("/")
        self.issues: dict[int, Issue] = {}
        self.check_runs: list[CheckRun] = []
        self.statuses: list[dict[str, Any]] = []
        self._ids = itertools.count(1001)
        self._user_ids: dict[str, int] = {}
        super().__init__(bare, users)

    @property
    def api(self) -> str:
        return self.root + "/api/v3"

    def routes(self) -> Iterable[Route]:
        r = r"/api/v3/repos/(?P<o>[^/]+)/(?P<r>[^/]+)"
        return [
            ("GET", r, self._get_repo),
            ("GET", r + "/pulls", self._list_pulls),
            ("POST", r + "/pulls", self._create_pull),
            ("GET", r + r"/pulls/(?P<n>\d+)", self._get_pull),
            ("PATCH", r + r"/pulls/(?P<n>\d+)", self._edit_pull),
            ("PUT", r + r"/pulls/(?P<n>\d+)/merge", self._merge_pull),
            ("GET", r + r"/pulls/(?P<n>\d+)/reviews", self._list_reviews),
            ("GET", r + r"/pulls/(?P<n>\d+)/reviews/(?P<rid>\d+)/comments", self._review_comments),
            ("GET", r + r"/pulls/(?P<n>\d+)/comments", self._pull_comments),
            ("GET", r + r"/pulls/(?P<n>\d+)/requested_reviewers", self._requested),
            ("POST", r + r"/pulls/(?P<n>\d+)/requested_reviewers", self._request_reviewers),
            ("GET", r + r"/commits/(?P<ref>.+)/check-runs", self._check_runs),
            ("GET", r + r"/commits/(?P<ref>.+)/status", self._combined_status),
            ("GET", r + r"/actions/jobs/(?P<job>\d+)/logs", self._job_logs),
            ("GET", r"/_blobs/job-logs/(?P<job>\d+)\.txt", self._log_blob),
            ("GET", r + "/issues", self._list_issues),
            ("GET", r + r"/issues/(?P<n>\d+)", self._get_issue),
            ("GET", r + r"/issues/(?P<n>\d+)/comments", self._list_comments),
            ("POST", r + r"/issues/(?P<n>\d+)/comments", self._add_comment),
        ]

    # -- authentication and faults, as GitHub answers them
    def login_of(self, headers: Any) -> str | None:
        scheme, _, token = (headers.get("Authorization") or "").partition(" ")
        return self.users.get(token) if scheme.lower() in ("bearer", "token") else None

    def unauthorized(self) -> Reply:
        return Reply(
            401, {"message": "Bad credentials", "documentation_url": DOCS, "status": "401"}
        )

    def failure(self, status: int) -> Reply:
        return Reply(status, {"message": "Server Error"})

    def rate_limited(self, retry_after: int, secondary: bool = False) -> Reply:
        headers = {
            "x-ratelimit-limit": "5000",
            "x-ratelimit-remaining": "0",
            "x-ratelimit-used": "5000",
            "x-ratelimit-reset": str(epoch_in(retry_after)),
            "x-ratelimit-resource": "core",
        }
        if secondary:
            message = "You have exceeded a secondary rate limit. Please wait a few minutes."
            return Reply(
                429,
                {"message": message, "documentation_url": DOCS},
                {"retry-after": str(retry_after)},
            )
        message = "API rate limit exceeded for user ID 1."
        return Reply(403, {"message": message, "documentation_url": DOCS, "status": "403"}, headers)

    def rate_limit_next(self, n: int, retry_after: int = 1, secondary: bool = False) -> None:
        with self.lock:
            self._faults.extend([lambda: self.rate_limited(retry_after, secondary)] * n)

    def common_headers(self) -> dict[str, str]:
        # githubkit asks hishel to revalidate every time (Cache-Control: no-cache), so the
        # real max-age=60 never serves a stale answer here.
        return {
            "Cache-Control": "private, max-age=60, s-maxage=60",
            "Vary": "Accept, Authorization, Cookie",
            "X-GitHub-Media-Type": "github.v3; format=json",
            "x-ratelimit-limit": "5000",
            "x-ratelimit-remaining": "4999",
        }

    # -- test-side: people and CI
    def create_issue(
        self, login: str, title: str, body: str = "", labels: Iterable[str] = ()
    ) -> int:
        with self.lock:
            return self._new_issue(login, title, body, list(labels)).number

    def edit_issue(
        self,
        number: int,
        *,
        title: str | None = None,
        body: str | None = None,
        labels: Iterable[str] | None = None,
    ) -> None:
        with self.lock:
            issue = self.issues[number]
            issue.title = issue.title if title is None else title
            issue.body = issue.body if body is None else body
            issue.labels = issue.labels if labels is None else list(labels)
            issue.updated_at = now_iso()

    def close_issue(self, number: int, login: str | None = None) -> None:
        with self.lock:
            self._close(self.issues[number], login)

    def review(
        self, number: int, login: str, state: str, body: str = "", comments: Iterable[LineNote] = ()
    ) -> int:
        """A submitted review (APPROVED | CHANGES_REQUESTED | COMMENTED) on the head sha now."""
        with self.lock:
            issue = self.issues[number]
            sha = self._head_sha(issue)
            review = Review(next(self._ids), login, state, body, sha, now_iso())
            for note in comments:
                review.comments.append(
                    {
                        "id": next(self._ids),
                        "note": note,
                        "login": login,
                        "commit_id": sha,
                        "at": now_iso(),
                    }
                )
            issue.pull.reviews.append(review)
            if login in issue.pull.requested:  # heard: no longer asked, as on GitHub
                issue.pull.requested.remove(login)
            issue.updated_at = now_iso()
            return review.id

    def report_ci(self, sha: str, name: str, conclusion: str | None, log: str = "") -> int:
        """A check run (GitHub Actions job) on ``sha``; its id is the job id of its log."""
        with self.lock:
            done = now_iso() if conclusion else None
            run = CheckRun(next(self._ids), sha, name, conclusion, log, now_iso(), done)
            self.check_runs.append(run)
            return run.id

    def report_status(self, sha: str, context: str, state: str, description: str = "") -> None:
        with self.lock:
            self.statuses.append(
                {
                    "id": next(self._ids),
                    "sha": sha,
                    "context": context,
                    "state": state,
                    "description": description,
                    "at": now_iso(),
                }
            )

    def merge_by_hand(self, number: int, login: str, method: str = "merge") -> str:
        """The merge button: ``merge``, ``squash`` or ``rebase`` (a repository's setting)."""
        with self.lock:
            return self._merge(self.issues[number], login, method)

    def close_by_hand(self, number: int, login: str) -> None:
        with self.lock:
            self._close(self.issues[number], login)

    def reopen_by_hand(self, number: int) -> None:
        with self.lock:
            issue = self.issues[number]
            assert issue.pull is None or not issue.pull.merge_sha, "a merged PR stays closed"
            issue.state, issue.closed_at, issue.closed_by = "open", None, None
            issue.updated_at = now_iso()

    # -- state
    def _new_issue(self, login: str, title: str, body: str, labels: list[str]) -> Issue:
        number = len(self.issues) + 1
        at = now_iso()
        self.issues[number] = Issue(
            number, next(self._ids), title, body or "", login, labels, at, at
        )
        return self.issues[number]

    def _close(self, issue: Issue, login: str | None = None) -> None:
        issue.state, issue.closed_at = "closed", now_iso()
        issue.updated_at, issue.closed_by = issue.closed_at, login

    def _issue(self, n: str, pull: bool = False) -> Issue:
        issue = self.issues.get(int(n))
        if issue is None or (pull and issue.pull is None):
            raise HTTPError(
                404, {"message": "Not Found", "documentation_url": DOCS, "status": "404"}
            )
        return issue

    def _head_sha(self, issue: Issue) -> str:
        pull = issue.pull
        # A closed or merged PR keeps the head it had; an open one follows its branch.
        sha = (issue.state == "open" and self.remote.sha(pull.head)) or pull.shas[-1]
        if not pull.shas or pull.shas[-1] != sha:
            pull.shas.append(sha)
        return sha

    def _merge(self, issue: Issue, login: str, method: str = "merge") -> str:
        pull = issue.pull
        head = self._head_sha(issue)
        title = f"Merge pull request #{issue.number}"
        if method == "squash":
            title = f"{issue.title} (#{issue.number})"
        if issue.state != "open" or not (
            sha := self.remote.land(pull.base, head, method, title, login)
        ):
            raise HTTPError(
                405,
                {
                    "message": "Pull Request is not mergeable",
                    "documentation_url": DOCS,
                    "status": "405",
                },
            )
        pull.merge_sha, pull.merged_by, pull.merged_at = sha, login, now_iso()
        self._close(issue, login)
        if pull.base == "main":  # the default branch: "Closes #N" closes the issue
            for number in closes(issue.body) & set(self.issues):
                if self.issues[number].state == "open" and not self.issues[number].pull:
                    self._close(self.issues[number], login)
        return sha

    # -- JSON
    def _url(self, path: str = "") -> str:
        return f"{self.api}/repos/{self.owner}/{self.name}{path}"

    def _html(self, path: str = "") -> str:
        return f"{self.root}/{self.owner}/{self.name}{path}"

    def _user(self, login: str | None) -> dict[str, Any] | None:
        if login is None:
            return None
        uid = self._user_ids.setdefault(login, len(self._user_ids) + 1)
        return _complete(
            m.SimpleUser,
            {
                "login": login,
                "id": uid,
                "type": "User",
                "html_url": f"{self.root}/{login}",
                "url": f"{self.api}/users/{login}",
            },
        )

    def _repo_json(self, model: type[BaseModel] = m.FullRepository) -> dict[str, Any]:
        return _complete(
            model,
            {
                "id": 1,
                "name": self.name,
                "full_name": f"{self.owner}/{self.name}",
                "private": True,
                "owner": self._user(self.owner),
                "html_url": self._html(),
                "url": self._url(),
                "default_branch": "main",
                "clone_url": str(self.remote.path),
                "pushed_at": "2026-01-01T00:00:00Z",
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
                "permissions": {
                    "admin": True,
                    "maintain": True,
                    "push": True,
                    "triage": True,
                    "pull": True,
                },
            },
        )

    def _labels(self, issue: Issue) -> list[dict[str, Any]]:
        return [
            {
                "id": zlib.crc32(name.encode()),
                "node_id": f"LA_{name}",
                "url": self._url(f"/labels/{name}"),
                "name": name,
                "description": None,
                "color": "ededed",
                "default": False,
            }
            for name in issue.labels
        ]

    def _pull_json(self, issue: Issue, full: bool = True) -> dict[str, Any]:
        pull = issue.pull
        head = self._head_sha(issue)
        repo = self._repo_json(m.Repository)
        data = {
            "url": self._url(f"/pulls/{issue.number}"),
            "id": issue.id,
            "number": issue.number,
            "html_url": self._html(f"/pull/{issue.number}"),
            "issue_url": self._url(f"/issues/{issue.number}"),
            "state": issue.state,
            "title": issue.title,
            "body": issue.body,
            "user": self._user(issue.login),
            "labels": self._labels(issue),
            "created_at": issue.created_at,
            "updated_at": issue.updated_at,
            "closed_at": issue.closed_at,
            "merged_at": pull.merged_at,
            "merge_commit_sha": pull.merge_sha,
            "draft": False,
            "author_association": "MEMBER",
            "head": _complete(
                m.PullRequestPropHead,
                {
                    "label": f"{self.owner}:{pull.head}",
                    "ref": pull.head,
                    "sha": head,
                    "repo": repo,
                    "user": self._user(self.owner),
                },
            ),
            "base": _complete(
                m.PullRequestPropBase,
                {
                    "label": f"{self.owner}:{pull.base}",
                    "ref": pull.base,
                    "sha": self.remote.sha(pull.base),
                    "repo": repo,
                    "user": self._user(self.owner),
                },
            ),
        }
        if not full:
            return _complete(m.PullRequestSimple, data)
        mergeable = None if issue.state != "open" else self.remote.mergeable(pull.base, head)
        return _complete(
            m.PullRequest,
            data
            | {
                "merged": pull.merge_sha is not None,
                "merged_by": self._user(pull.merged_by),
                "requested_reviewers": [self._user(login) for login in pull.requested],
                "mergeable": mergeable,
                "mergeable_state": {True: "clean", False: "dirty"}.get(mergeable, "unknown"),
                "comments": len(issue.comments),
                "review_comments": sum(len(r.comments) for r in pull.reviews),
                "commits": len(pull.shas),
            },
        )

    def _issue_json(self, issue: Issue) -> dict[str, Any]:
        data = {
            "id": issue.id,
            "number": issue.number,
            "url": self._url(f"/issues/{issue.number}"),
            "html_url": self._html(f"/{'pull' if issue.pull else 'issues'}/{issue.number}"),
            "repository_url": self._url(),
            "state": issue.state,
            "title": issue.title,
            "body": issue.body,
            "user": self._user(issue.login),
            "labels": self._labels(issue),
            "comments": len(issue.comments),
            "created_at": issue.created_at,
            "updated_at": issue.updated_at,
            "closed_at": issue.closed_at,
            "closed_by": self._user(issue.closed_by) if issue.closed_by else None,
            "author_association": "MEMBER",
            "state_reason": "completed" if issue.closed_at else None,
        }
        if issue.pull:
            data["pull_request"] = {
                "url": self._url(f"/pulls/{issue.number}"),
                "html_url": data["html_url"],
                "diff_url": None,
                "patch_url": None,
                "merged_at": issue.pull.merged_at,
            }
        return _complete(m.Issue, data)

    def _comment_json(self, issue: Issue, c: dict[str, Any]) -> dict[str, Any]:
        return _complete(
            m.IssueComment,
            {
                "id": c["id"],
                "body": c["body"],
                "user": self._user(c["login"]),
                "created_at": c["at"],
                "updated_at": c["at"],
                "issue_url": self._url(f"/issues/{issue.number}"),
                "url": self._url(f"/issues/comments/{c['id']}"),
                "author_association": "MEMBER",
                "html_url": self._html(f"/issues/{issue.number}#issuecomment-{c['id']}"),
            },
        )

    def _line_json(self, issue: Issue, review: Review, c: dict[str, Any]) -> dict[str, Any]:
        note: LineNote = c["note"]
        return _complete(
            m.PullRequestReviewComment,
            {
                "id": c["id"],
                "pull_request_review_id": review.id,
                "path": note.path,
                "body": note.body,
                "line": note.line,
                "original_line": note.line,
                "side": note.side,
                "start_line": note.start_line,
                "start_side": note.side if note.start_line else None,
                "original_start_line": note.start_line,
                "commit_id": c["commit_id"],
                "original_commit_id": c["commit_id"],
                "user": self._user(c["login"]),
                "created_at": c["at"],
                "updated_at": c["at"],
                "subject_type": "line",
                "position": 1,
                "original_position": 1,
                "url": self._url(f"/pulls/comments/{c['id']}"),
                "author_association": "MEMBER",
                "pull_request_url": self._url(f"/pulls/{issue.number}"),
                "html_url": self._html(f"/pull/{issue.number}#discussion_r{c['id']}"),
            },
        )

    # -- routes
    def _get_repo(self, req: Request, o: str, r: str) -> Any:
        return self._repo_json()

    def _list_pulls(self, req: Request, o: str, r: str) -> Reply:
        state, head, base = (
            req.query.get("state", "open"),
            req.query.get("head"),
            req.query.get("base"),
        )
        pulls = [
            i
            for i in reversed(self.issues.values())
            if i.pull
            and state in ("all", i.state)
            and (head is None or head in (f"{self.owner}:{i.pull.head}", i.pull.head))
            and (base is None or base == i.pull.base)
        ]
        return self.paginate(req, [self._pull_json(i, full=False) for i in pulls])

    def _create_pull(self, req: Request, o: str, r: str) -> Reply:
        head = req.body.get("head", "").split(":")[-1]
        base = req.body.get("base", "main")
        errors = []
        if self.remote.sha(head) is None:
            errors = [{"resource": "PullRequest", "field": "head", "code": "invalid"}]
        elif any(
            i.pull and i.state == "open" and i.pull.head == head for i in self.issues.values()
        ):
            errors = [
                {
                    "resource": "PullRequest",
                    "code": "custom",
                    "message": f"A pull request already exists for {self.owner}:{head}.",
                }
            ]
        if errors:
            raise HTTPError(
                422,
                {
                    "message": "Validation Failed",
                    "errors": errors,
                    "documentation_url": DOCS,
                    "status": "422",
                },
            )
        issue = self._new_issue(
            req.login, req.body.get("title", ""), req.body.get("body") or "", []
        )
        issue.pull = Pull(head, base)
        return Reply(201, self._pull_json(issue), {"Location": self._url(f"/pulls/{issue.number}")})

    def _get_pull(self, req: Request, o: str, r: str, n: str) -> Any:
        return self._pull_json(self._issue(n, pull=True))

    def _edit_pull(self, req: Request, o: str, r: str, n: str) -> Any:
        issue = self._issue(n, pull=True)
        issue.title = req.body.get("title", issue.title)
        issue.body = req.body.get("body", issue.body)
        if req.body.get("state") == "closed" and issue.state == "open":
            self._close(issue, req.login)
        elif (
            req.body.get("state") == "open" and issue.state == "closed" and not issue.pull.merge_sha
        ):
            issue.state, issue.closed_at = "open", None
        issue.updated_at = now_iso()
        return self._pull_json(issue)

    def _merge_pull(self, req: Request, o: str, r: str, n: str) -> Any:
        issue = self._issue(n, pull=True)
        wanted = req.body.get("sha")
        if wanted and issue.state == "open" and wanted != self._head_sha(issue):
            raise HTTPError(
                409,
                {
                    "message": "Head branch was modified. Review and try the merge again.",
                    "documentation_url": DOCS,
                    "status": "409",
                },
            )
        method = req.body.get("merge_method") or "merge"
        sha = self._merge(issue, req.login, method)
        return {"sha": sha, "merged": True, "message": "Pull Request successfully merged"}

    def _list_reviews(self, req: Request, o: str, r: str, n: str) -> Reply:
        issue = self._issue(n, pull=True)
        reviews = [
            _complete(
                m.PullRequestReview,
                {
                    "id": v.id,
                    "user": self._user(v.login),
                    "body": v.body,
                    "state": v.state,
                    "commit_id": v.commit_id,
                    "submitted_at": v.submitted_at,
                    "author_association": "MEMBER",
                    "html_url": self._html(f"/pull/{issue.number}#pullrequestreview-{v.id}"),
                    "pull_request_url": self._url(f"/pulls/{issue.number}"),
                },
            )
            for v in issue.pull.reviews
        ]
        return self.paginate(req, reviews)

    def _requested(self, req: Request, o: str, r: str, n: str) -> Any:
        pull = self._issue(n, pull=True).pull
        return {"users": [self._user(login) for login in pull.requested], "teams": []}

    def _request_reviewers(self, req: Request, o: str, r: str, n: str) -> Any:
        """Ask reviewers (again): one who reviewed already is asked anew, as GitHub's
        "re-request review"; the PR's author cannot be asked (422, as on GitHub)."""
        issue = self._issue(n, pull=True)
        wanted = list(req.body.get("reviewers") or [])
        if issue.login in wanted or any(w not in self.users.values() for w in wanted):
            raise HTTPError(
                422,
                {
                    "message": "Reviews may only be requested from collaborators.",
                    "documentation_url": DOCS,
                    "status": "422",
                },
            )
        issue.pull.requested += [w for w in wanted if w not in issue.pull.requested]
        issue.updated_at = now_iso()
        return Reply(201, _complete(m.PullRequestSimple, self._pull_json(issue, full=False)))

    def _review_comments(self, req: Request, o: str, r: str, n: str, rid: str) -> Reply:
        issue = self._issue(n, pull=True)
        found = [v for v in issue.pull.reviews if v.id == int(rid)]
        if not found:
            raise HTTPError(
                404, {"message": "Not Found", "documentation_url": DOCS, "status": "404"}
            )
        return self.paginate(
            req,
            [
                _complete(m.ReviewComment, self._line_json(issue, found[0], c))
                for c in found[0].comments
            ],
        )

    def _pull_comments(self, req: Request, o: str, r: str, n: str) -> Reply:
        issue = self._issue(n, pull=True)
        return self.paginate(
            req, [self._line_json(issue, v, c) for v in issue.pull.reviews for c in v.comments]
        )

    def _check_runs(self, req: Request, o: str, r: str, ref: str) -> Reply:
        sha = self.remote.resolve(ref)
        runs = [c for c in reversed(self.check_runs) if c.sha == sha]
        if req.query.get("filter", "latest") == "latest":
            runs = list({c.name: c for c in reversed(runs)}.values())[::-1]
        if "check_name" in req.query:
            runs = [c for c in runs if c.name == req.query["check_name"]]
        page = self.paginate(req, [self._run_json(c) for c in runs])
        page.body = {"total_count": len(runs), "check_runs": page.body}
        return page

    def _run_json(self, c: CheckRun) -> dict[str, Any]:
        html = self._html(f"/actions/runs/{c.id}/job/{c.id}")
        return _complete(
            m.CheckRun,
            {
                "id": c.id,
                "name": c.name,
                "head_sha": c.sha,
                "status": "completed" if c.conclusion else "in_progress",
                "conclusion": c.conclusion,
                "started_at": c.started_at,
                "completed_at": c.completed_at,
                "html_url": html,
                "details_url": html,
                "url": self._url(f"/check-runs/{c.id}"),
                "output": {
                    "title": f"{c.name}: {c.conclusion or 'running'}",
                    "summary": c.log[-200:],
                    "text": c.log,
                    "annotations_count": 0,
                    "annotations_url": self._url(f"/check-runs/{c.id}/annotations"),
                },
                "check_suite": {"id": c.id},
                "pull_requests": [],
            },
        )

    def _combined_status(self, req: Request, o: str, r: str, ref: str) -> Any:
        sha = self.remote.resolve(ref)
        latest = {s["context"]: s for s in self.statuses if s["sha"] == sha}
        states = {s["state"] for s in latest.values()}
        state = (
            "failure"
            if states & {"failure", "error"}
            else "pending"
            if not states or "pending" in states
            else "success"
        )
        return _complete(
            m.CombinedCommitStatus,
            {
                "state": state,
                "sha": sha,
                "total_count": len(latest),
                "repository": self._repo_json(m.MinimalRepository),
                "commit_url": self._url(f"/commits/{sha}"),
                "url": self._url(f"/commits/{sha}/status"),
                "statuses": [
                    _complete(
                        m.SimpleCommitStatus,
                        {
                            "id": s["id"],
                            "context": s["context"],
                            "state": s["state"],
                            "description": s["description"],
                            "target_url": None,
                            "created_at": s["at"],
                            "updated_at": s["at"],
                            "url": self._url(f"/statuses/{sha}"),
                        },
                    )
                    for s in latest.values()
                ],
            },
        )

    def _job(self, job: str) -> CheckRun:
        for run in self.check_runs:
            if run.id == int(job):
                return run
        raise HTTPError(404, {"message": "Not Found", "documentation_url": DOCS, "status": "404"})

    def _job_logs(self, req: Request, o: str, r: str, job: str) -> Reply:
        self._job(job)
        return Reply(302, None, {"Location": f"{req.base}/_blobs/job-logs/{job}.txt"})

    @public
    def _log_blob(self, req: Request, job: str) -> str:
        return self._job(job).log

    def _list_issues(self, req: Request, o: str, r: str) -> Reply:
        state = req.query.get("state", "open")
        labels = {x for x in req.query.get("labels", "").split(",") if x}
        if req.query.get("since") and not SINCE_RE.fullmatch(req.query["since"]):
            raise HTTPError(  # as GitHub answers a time it does not document
                422,
                {
                    "message": "Validation Failed",
                    "errors": [{"resource": "Issue", "field": "since", "code": "invalid"}],
                    "documentation_url": DOCS,
                    "status": "422",
                },
            )
        since = parse_time(req.query["since"]) if req.query.get("since") else None
        found = [
            i
            for i in reversed(self.issues.values())
            if state in ("all", i.state)
            and labels <= set(i.labels)
            and (since is None or parse_time(i.updated_at) >= since)
        ]
        return self.paginate(req, [self._issue_json(i) for i in found])

    def _get_issue(self, req: Request, o: str, r: str, n: str) -> Any:
        return self._issue_json(self._issue(n))

    def _list_comments(self, req: Request, o: str, r: str, n: str) -> Reply:
        issue = self._issue(n)
        return self.paginate(req, [self._comment_json(issue, c) for c in issue.comments])

    def _add_comment(self, req: Request, o: str, r: str, n: str) -> Any:
        issue = self._issue(n)
        if not req.body.get("body"):
            raise HTTPError(
                422, {"message": "Validation Failed", "documentation_url": DOCS, "status": "422"}
            )
        comment = {
            "id": next(self._ids),
            "body": req.body["body"],
            "login": req.login,
            "at": now_iso(),
        }
        issue.comments.append(comment)
        issue.updated_at = comment["at"]
        return self._comment_json(issue, comment)
