"""A stateful GitLab REST fake (API under ``/api/v4``) for python-gitlab.

One project, addressed by id (7) or URL-encoded path (``octo%2Fwidgets``). Merge requests and
issues have their own iid sequences, as on GitLab. A merge request's ``sha`` is read from the
bare repo at request time while it is open.

Test-side methods (people and CI): ``create_issue``, ``edit_issue``, ``close_issue``,
``review(iid, login, state, body, comments=[LineNote...])`` with state ``approved`` |
``requested_changes`` | ``reviewed`` (the body becomes a general note, each line comment a
DiffNote on the current head, ``approved`` adds to ``approved_by``), ``report_ci(sha, name,
status, log)`` (a job in the sha's pipeline; status success|failed|running|pending|canceled),
``merge_by_hand`` (``squash=True``: a squash commit, then the merge commit, as GitLab
does), ``close_by_hand``, ``reopen_by_hand``, plus the shared ``force_push``, ``fail_next``,
``rate_limit_next``, ``log`` and ``not_modified`` (base.py). As on GitLab: a merge into
``main`` closes the issues its description closes ("Closes #N"); a note's quick action
``/request_review @login`` asks that reviewer again (their state ``unreviewed``). A rate
limit answers 429 with ``Retry-After`` and ``RateLimit-*`` (python-gitlab sleeps and
retries, up to ``max_retries``, then raises ``GitlabHttpError`` subclasses; 5xx raise at
once unless ``retry_transient_errors``).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from typing import Any

from .base import (
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
)

PROJECT_ID = 7


@dataclass
class Note:
    id: int
    login: str
    body: str
    created_at: str
    position: dict[str, Any] | None = None


@dataclass
class Issue:
    iid: int
    id: int
    title: str
    description: str
    login: str
    labels: list[str]
    created_at: str
    updated_at: str
    state: str = "opened"
    closed_at: str | None = None
    notes: list[Note] = field(default_factory=list)


@dataclass
class MergeRequest(Issue):
    source: str = ""
    target: str = "main"
    shas: list[str] = field(default_factory=list)
    merged_by: str | None = None
    merged_at: str | None = None
    closed_by: str | None = None
    merge_sha: str | None = None
    squash_sha: str | None = None
    reviewers: dict[str, str] = field(default_factory=dict)  # login -> state
    approved_by: list[str] = field(default_factory=list)


@dataclass
class Job:
    id: int
    name: str
    stage: str
    status: str
    log: str
    created_at: str


@dataclass
class Pipeline:
    id: int
    iid: int
    sha: str
    ref: str
    created_at: str
    jobs: list[Job] = field(default_factory=list)

    @property
    def status(self) -> str:
        states = [j.status for j in self.jobs]
        for state in ("failed", "running", "pending"):
            if state in states:
                return state
        return "canceled" if states and set(states) == {"canceled"} else "success"


class GitLabFake(ForgeServer):
    """One project on a fake GitLab; ``root`` is python-gitlab's ``url``."""

    default_per_page = 20
    gitlab_page_headers = True

    def __init__(self, bare: Path, users: dict[str, str], repo: str = "octo/widgets") -> None:
        self.path = repo
        self.issues: dict[int, Issue] = {}
        self.mrs: dict[int, MergeRequest] = {}
        self.pipelines: list[Pipeline] = []
        self._ids = itertools.count(2001)
        self._user_ids: dict[str, int] = {}
        super().__init__(bare, users)

    def routes(self) -> Iterable[Route]:
        p = r"/api/v4/projects/(?P<p>[^/]+)"
        mr = p + r"/merge_requests/(?P<iid>\d+)"
        return [
            ("GET", p, self._get_project),
            ("GET", p + "/merge_requests", self._list_mrs),
            ("POST", p + "/merge_requests", self._create_mr),
            ("GET", mr, self._get_mr),
            ("PUT", mr, self._edit_mr),
            ("PUT", mr + "/merge", self._merge_mr),
            ("GET", mr + "/approvals", self._approvals),
            ("GET", mr + "/reviewers", self._reviewers),
            ("GET", mr + "/discussions", self._discussions),
            ("GET", mr + "/notes", self._list_mr_notes),
            ("POST", mr + "/notes", self._add_mr_note),
            ("GET", mr + "/pipelines", self._mr_pipelines),
            ("GET", p + "/pipelines", self._list_pipelines),
            ("GET", p + r"/pipelines/(?P<pid>\d+)", self._get_pipeline),
            ("GET", p + r"/pipelines/(?P<pid>\d+)/jobs", self._pipeline_jobs),
            ("GET", p + r"/jobs/(?P<job>\d+)", self._get_job),
            ("GET", p + r"/jobs/(?P<job>\d+)/trace", self._trace),
            ("GET", p + "/issues", self._list_issues),
            ("GET", p + r"/issues/(?P<iid>\d+)", self._get_issue),
            ("GET", p + r"/issues/(?P<iid>\d+)/notes", self._list_notes),
            ("POST", p + r"/issues/(?P<iid>\d+)/notes", self._add_note),
        ]

    # -- authentication and faults, as GitLab answers them
    def login_of(self, headers: Any) -> str | None:
        token = headers.get("PRIVATE-TOKEN") or ""
        scheme, _, bearer = (headers.get("Authorization") or "").partition(" ")
        return self.users.get(token) or (
            self.users.get(bearer) if scheme.lower() == "bearer" else None
        )

    def unauthorized(self) -> Reply:
        return Reply(401, {"message": "401 Unauthorized"})

    def failure(self, status: int) -> Reply:
        return Reply(status, f"{status} Bad Gateway\n" if status == 502 else f"{status} Error\n")

    def rate_limited(self, retry_after: int) -> Reply:
        reset = epoch_in(retry_after)
        return Reply(
            429,
            "Retry later\n",
            {
                "Retry-After": str(retry_after),
                "RateLimit-Name": "throttle_authenticated_api",
                "RateLimit-Limit": "60",
                "RateLimit-Observed": "61",
                "RateLimit-Remaining": "0",
                "RateLimit-Reset": str(reset),
                "RateLimit-ResetTime": formatdate(reset, usegmt=True),
            },
        )

    # -- test-side: people and CI
    def create_issue(
        self, login: str, title: str, body: str = "", labels: Iterable[str] = ()
    ) -> int:
        with self.lock:
            at = now_iso()
            iid = len(self.issues) + 1
            self.issues[iid] = Issue(iid, next(self._ids), title, body, login, list(labels), at, at)
            return iid

    def edit_issue(
        self,
        iid: int,
        *,
        title: str | None = None,
        body: str | None = None,
        labels: Iterable[str] | None = None,
    ) -> None:
        with self.lock:
            issue = self.issues[iid]
            issue.title = issue.title if title is None else title
            issue.description = issue.description if body is None else body
            issue.labels = issue.labels if labels is None else list(labels)
            issue.updated_at = now_iso()

    def close_issue(self, iid: int) -> None:
        with self.lock:
            self._close(self.issues[iid], None)

    def review(
        self, iid: int, login: str, state: str, body: str = "", comments: Iterable[LineNote] = ()
    ) -> None:
        with self.lock:
            mr = self.mrs[iid]
            head, base = self._head_sha(mr), self.remote.sha(mr.target)
            mr.reviewers[login] = state
            if state == "approved" and login not in mr.approved_by:
                mr.approved_by.append(login)
            if body:
                mr.notes.append(Note(next(self._ids), login, body, now_iso()))
            for c in comments:
                mr.notes.append(
                    Note(next(self._ids), login, c.body, now_iso(), _position(c, base, head))
                )
            mr.updated_at = now_iso()

    def report_ci(
        self, sha: str, name: str, status: str, log: str = "", stage: str = "test"
    ) -> int:
        """A job ``name`` in ``sha``'s pipeline (one pipeline per sha); returns the job id."""
        with self.lock:
            pipeline = next((p for p in self.pipelines if p.sha == sha), None)
            if pipeline is None:
                branches = self.remote.git(
                    "for-each-ref", "--points-at", sha, "--format=%(refname:short)"
                )
                ref = branches.split("\n")[0] or "main"
                pipeline = Pipeline(next(self._ids), len(self.pipelines) + 1, sha, ref, now_iso())
                self.pipelines.append(pipeline)
            job = Job(next(self._ids), name, stage, status, log, now_iso())
            pipeline.jobs = [j for j in pipeline.jobs if j.name != name] + [job]
            return job.id

    def merge_by_hand(self, iid: int, login: str, squash: bool = False) -> str:
        with self.lock:
            return self._merge(self.mrs[iid], login, squash)

    def close_by_hand(self, iid: int, login: str) -> None:
        with self.lock:
            self._close(self.mrs[iid], login)

    def reopen_by_hand(self, iid: int) -> None:
        with self.lock:
            mr = self.mrs[iid]
            assert mr.state == "closed", "only a closed merge request reopens"
            mr.state, mr.closed_at, mr.closed_by, mr.updated_at = "opened", None, None, now_iso()

    # -- state
    def _project(self, p: str) -> None:
        if p not in (str(PROJECT_ID), self.path):
            raise HTTPError(404, {"message": "404 Project Not Found"})

    def _find(self, table: dict[int, Any], p: str, iid: str, kind: str) -> Any:
        self._project(p)
        if int(iid) not in table:
            raise HTTPError(404, {"message": f"404 {kind} Not Found"})
        return table[int(iid)]

    def _close(self, issue: Issue, login: str | None) -> None:
        issue.state, issue.closed_at = "closed", now_iso()
        issue.updated_at = issue.closed_at
        if isinstance(issue, MergeRequest):
            issue.closed_by = login

    def _head_sha(self, mr: MergeRequest) -> str:
        sha = (mr.state == "opened" and self.remote.sha(mr.source)) or mr.shas[-1]
        if not mr.shas or mr.shas[-1] != sha:
            mr.shas.append(sha)
        return sha

    def _merge(self, mr: MergeRequest, login: str, squash: bool = False) -> str:
        """A merge commit, of the source's head or (``squash``) of one commit holding its
        changes, made on the merge base, as GitLab squashes."""
        if mr.state != "opened":
            raise HTTPError(405, {"message": "405 Method Not Allowed"})
        head = self._head_sha(mr)
        if squash:
            base = self.remote.git("merge-base", mr.target, head)
            tree = self.remote.git("rev-parse", f"{head}^{{tree}}")
            head = self.remote.git("commit-tree", tree, "-p", base, "-m", mr.title)
            mr.squash_sha = head
        sha = self.remote.merge(
            mr.target, head, f"Merge branch '{mr.source}' into '{mr.target}'", login
        )
        if sha is None:
            raise HTTPError(406, {"message": "Branch cannot be merged"})
        mr.state, mr.merged_by, mr.merged_at, mr.merge_sha = "merged", login, now_iso(), sha
        mr.updated_at = mr.merged_at
        if mr.target == "main":  # the default branch: "Closes #N" closes the issue
            for iid in closes(mr.description) & set(self.issues):
                if self.issues[iid].state == "opened":
                    self._close(self.issues[iid], login)
        return sha

    # -- JSON
    def _web(self, path: str = "") -> str:
        return f"{self.root}/{self.path}{path}"

    def _user(self, login: str | None) -> dict[str, Any] | None:
        if login is None:
            return None
        uid = self._user_ids.setdefault(login, len(self._user_ids) + 1)
        return {
            "id": uid,
            "username": login,
            "name": login.title(),
            "state": "active",
            "avatar_url": None,
            "web_url": f"{self.root}/{login}",
        }

    def _pipeline_json(self, p: Pipeline) -> dict[str, Any]:
        updated = max([j.created_at for j in p.jobs], default=p.created_at)
        return {
            "id": p.id,
            "iid": p.iid,
            "project_id": PROJECT_ID,
            "sha": p.sha,
            "ref": p.ref,
            "status": p.status,
            "source": "push",
            "created_at": p.created_at,
            "updated_at": updated,
            "web_url": self._web(f"/-/pipelines/{p.id}"),
        }

    def _job_json(self, p: Pipeline, j: Job) -> dict[str, Any]:
        return {
            "id": j.id,
            "name": j.name,
            "stage": j.stage,
            "status": j.status,
            "ref": p.ref,
            "created_at": j.created_at,
            "started_at": j.created_at,
            "finished_at": j.created_at if j.status in ("success", "failed", "canceled") else None,
            "allow_failure": False,
            "pipeline": self._pipeline_json(p),
            "commit": {"id": p.sha, "short_id": p.sha[:8]},
            "web_url": self._web(f"/-/jobs/{j.id}"),
        }

    def _issue_json(self, i: Issue) -> dict[str, Any]:
        return {
            "id": i.id,
            "iid": i.iid,
            "project_id": PROJECT_ID,
            "title": i.title,
            "description": i.description,
            "state": i.state,
            "labels": i.labels,
            "author": self._user(i.login),
            "created_at": i.created_at,
            "updated_at": i.updated_at,
            "closed_at": i.closed_at,
            "user_notes_count": len(i.notes),
            "web_url": self._web(f"/-/issues/{i.iid}"),
            "references": {"short": f"#{i.iid}"},
        }

    def _mr_json(self, mr: MergeRequest) -> dict[str, Any]:
        head, base = self._head_sha(mr), self.remote.sha(mr.target)
        pipelines = [p for p in self.pipelines if p.sha == head]
        clean = mr.state != "opened" or self.remote.mergeable(mr.target, head)
        return self._issue_json(mr) | {
            "state": mr.state,
            "source_branch": mr.source,
            "target_branch": mr.target,
            "sha": head,
            "merged_by": self._user(mr.merged_by),
            "merge_user": self._user(mr.merged_by),
            "merged_at": mr.merged_at,
            "closed_by": self._user(mr.closed_by),
            "merge_commit_sha": mr.merge_sha,
            "squash_commit_sha": mr.squash_sha,
            "squash": mr.squash_sha is not None,
            "draft": False,
            "has_conflicts": not clean,
            "detailed_merge_status": "mergeable" if clean else "conflict",
            "diff_refs": {"base_sha": base, "head_sha": head, "start_sha": base},
            "reviewers": [self._user(login) for login in mr.reviewers],
            "head_pipeline": self._pipeline_json(pipelines[-1]) if pipelines else None,
            "web_url": self._web(f"/-/merge_requests/{mr.iid}"),
            "references": {"short": f"!{mr.iid}"},
        }

    def _note_json(self, i: Issue, n: Note) -> dict[str, Any]:
        return {
            "id": n.id,
            "type": "DiffNote" if n.position else None,
            "body": n.body,
            "author": self._user(n.login),
            "created_at": n.created_at,
            "updated_at": n.created_at,
            "system": False,
            "noteable_id": i.id,
            "noteable_iid": i.iid,
            "attachment": None,
            "noteable_type": "MergeRequest" if isinstance(i, MergeRequest) else "Issue",
            "resolvable": n.position is not None,
            "resolved": False,
            "position": n.position,
        }

    # -- routes
    def _get_project(self, req: Request, p: str) -> Any:
        self._project(p)
        namespace = self.path.rsplit("/", 1)[0]
        return {
            "id": PROJECT_ID,
            "name": self.path.rsplit("/", 1)[-1],
            "path_with_namespace": self.path,
            "default_branch": "main",
            "web_url": self._web(),
            "http_url_to_repo": str(self.remote.path),
            "namespace": {"id": 1, "path": namespace, "full_path": namespace, "kind": "group"},
        }

    def _list_mrs(self, req: Request, p: str) -> Reply:
        self._project(p)
        state, source = req.query.get("state", "all"), req.query.get("source_branch")
        found = [
            mr
            for mr in reversed(self.mrs.values())
            if state in ("all", mr.state) and source in (None, mr.source)
        ]
        return self.paginate(req, [self._mr_json(mr) for mr in found])

    def _create_mr(self, req: Request, p: str) -> Any:
        self._project(p)
        source, target = req.body.get("source_branch", ""), req.body.get("target_branch", "main")
        if self.remote.sha(source) is None:
            raise HTTPError(400, {"message": {"source_branch": ["is invalid"]}})
        for mr in self.mrs.values():
            if mr.state == "opened" and mr.source == source:
                raise HTTPError(
                    409,
                    {
                        "message": [
                            "Another open merge request already exists for this source branch: "
                            f"!{mr.iid}"
                        ]
                    },
                )
        at, iid = now_iso(), len(self.mrs) + 1
        self.mrs[iid] = MergeRequest(
            iid,
            next(self._ids),
            req.body.get("title", ""),
            req.body.get("description") or "",
            req.login,
            [],
            at,
            at,
            source=source,
            target=target,
        )
        return self._mr_json(self.mrs[iid])

    def _get_mr(self, req: Request, p: str, iid: str) -> Any:
        return self._mr_json(self._find(self.mrs, p, iid, "Merge Request"))

    def _edit_mr(self, req: Request, p: str, iid: str) -> Any:
        mr = self._find(self.mrs, p, iid, "Merge Request")
        mr.title = req.body.get("title", mr.title)
        mr.description = req.body.get("description", mr.description)
        event = req.body.get("state_event")
        if event == "close" and mr.state == "opened":
            self._close(mr, req.login)
        elif event == "reopen" and mr.state == "closed":
            mr.state, mr.closed_at, mr.closed_by = "opened", None, None
        mr.updated_at = now_iso()
        return self._mr_json(mr)

    def _merge_mr(self, req: Request, p: str, iid: str) -> Any:
        mr = self._find(self.mrs, p, iid, "Merge Request")
        wanted = req.body.get("sha")
        if wanted and mr.state == "opened" and wanted != (head := self._head_sha(mr)):
            raise HTTPError(409, {"message": f"SHA does not match HEAD of source branch: {head}"})
        squash = req.body.get("squash", req.query.get("squash"))  # either, as GitLab reads
        self._merge(mr, req.login, str(squash).lower() in ("true", "1"))
        return self._mr_json(mr)

    def _approvals(self, req: Request, p: str, iid: str) -> Any:
        mr = self._find(self.mrs, p, iid, "Merge Request")
        return {
            "id": mr.id,
            "iid": mr.iid,
            "project_id": PROJECT_ID,
            "approved": bool(mr.approved_by),
            "approvals_required": 0,
            "approvals_left": 0,
            "approved_by": [{"user": self._user(login)} for login in mr.approved_by],
        }

    def _reviewers(self, req: Request, p: str, iid: str) -> Any:
        mr = self._find(self.mrs, p, iid, "Merge Request")
        return [
            {"user": self._user(login), "state": state, "created_at": mr.created_at}
            for login, state in mr.reviewers.items()
        ]

    def _discussions(self, req: Request, p: str, iid: str) -> Reply:
        mr = self._find(self.mrs, p, iid, "Merge Request")
        threads = [
            {
                "id": hashlib.sha1(str(n.id).encode()).hexdigest(),
                "individual_note": n.position is None,
                "notes": [self._note_json(mr, n)],
            }
            for n in mr.notes
        ]
        return self.paginate(req, threads)

    def _mr_pipelines(self, req: Request, p: str, iid: str) -> Reply:
        mr = self._find(self.mrs, p, iid, "Merge Request")
        self._head_sha(mr)
        found = [x for x in reversed(self.pipelines) if x.sha in mr.shas]
        return self.paginate(req, [self._pipeline_json(x) for x in found])

    def _list_pipelines(self, req: Request, p: str) -> Reply:
        self._project(p)
        q = req.query
        found = [
            x
            for x in reversed(self.pipelines)
            if q.get("sha") in (None, x.sha)
            and q.get("ref") in (None, x.ref)
            and q.get("status") in (None, x.status)
        ]
        return self.paginate(req, [self._pipeline_json(x) for x in found])

    def _pipeline(self, p: str, pid: str) -> Pipeline:
        self._project(p)
        for x in self.pipelines:
            if x.id == int(pid):
                return x
        raise HTTPError(404, {"message": "404 Not found"})

    def _get_pipeline(self, req: Request, p: str, pid: str) -> Any:
        return self._pipeline_json(self._pipeline(p, pid))

    def _pipeline_jobs(self, req: Request, p: str, pid: str) -> Reply:
        pipeline = self._pipeline(p, pid)
        return self.paginate(req, [self._job_json(pipeline, j) for j in reversed(pipeline.jobs)])

    def _job(self, p: str, job: str) -> tuple[Pipeline, Job]:
        self._project(p)
        for x in self.pipelines:
            for j in x.jobs:
                if j.id == int(job):
                    return x, j
        raise HTTPError(404, {"message": "404 Job Not Found"})

    def _get_job(self, req: Request, p: str, job: str) -> Any:
        return self._job_json(*self._job(p, job))

    def _trace(self, req: Request, p: str, job: str) -> str:
        return self._job(p, job)[1].log

    def _list_issues(self, req: Request, p: str) -> Reply:
        self._project(p)
        state = req.query.get("state", "all")
        labels = {x for x in req.query.get("labels", "").split(",") if x}
        after = parse_time(req.query["updated_after"]) if req.query.get("updated_after") else None
        found = [
            i
            for i in reversed(self.issues.values())
            if state in ("all", i.state)
            and labels <= set(i.labels)
            and (after is None or parse_time(i.updated_at) >= after)
        ]
        return self.paginate(req, [self._issue_json(i) for i in found])

    def _get_issue(self, req: Request, p: str, iid: str) -> Any:
        return self._issue_json(self._find(self.issues, p, iid, "Issue"))

    def _list_notes(self, req: Request, p: str, iid: str) -> Reply:
        issue = self._find(self.issues, p, iid, "Issue")
        return self.paginate(req, [self._note_json(issue, n) for n in reversed(issue.notes)])

    def _list_mr_notes(self, req: Request, p: str, iid: str) -> Reply:
        mr = self._find(self.mrs, p, iid, "Merge Request")
        return self.paginate(req, [self._note_json(mr, n) for n in reversed(mr.notes)])

    def _add_mr_note(self, req: Request, p: str, iid: str) -> Any:
        """A note; its quick action ``/request_review @a @b`` asks those reviewers (again):
        their state goes back to ``unreviewed`` and the line is not kept, as on GitLab."""
        mr = self._find(self.mrs, p, iid, "Merge Request")
        kept = []
        for line in str(req.body.get("body") or "").split("\n"):
            if line.startswith("/request_review "):
                for name in line.split()[1:]:
                    mr.reviewers[name.removeprefix("@")] = "unreviewed"
            else:
                kept.append(line)
        req.body["body"] = "\n".join(kept).strip()
        if not req.body["body"]:  # only commands: GitLab saves no note
            return Reply(202, {"commands_changes": {}, "summary": ["Requested a review."]})
        return self._note_on(mr, req)

    def _add_note(self, req: Request, p: str, iid: str) -> Any:
        return self._note_on(self._find(self.issues, p, iid, "Issue"), req)

    def _note_on(self, issue: Issue, req: Request) -> Any:
        if not req.body.get("body"):
            raise HTTPError(400, {"message": '400 (Bad request) "body" not given'})
        note = Note(next(self._ids), req.login, req.body["body"], now_iso())
        issue.notes.append(note)
        issue.updated_at = note.created_at
        return self._note_json(issue, note)


def _position(c: LineNote, base: str | None, head: str) -> dict[str, Any]:
    """GitLab's DiffNote position: a LEFT line is an old_line, a RIGHT one a new_line."""
    key = "old_line" if c.side == "LEFT" else "new_line"
    position = {
        "base_sha": base,
        "start_sha": base,
        "head_sha": head,
        "old_path": c.path,
        "new_path": c.path,
        "position_type": "text",
        "old_line": None,
        "new_line": None,
        key: c.line,
    }
    if c.start_line is not None:
        kind = "old" if c.side == "LEFT" else "new"
        position["line_range"] = {
            "start": {"type": kind, key: c.start_line},
            "end": {"type": kind, key: c.line},
        }
    return position
