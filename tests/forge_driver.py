"""A project whose forge is a local fake (tests/forge_fakes), for the forge tests: the
``forge`` fixture runs a test once on GitHub and once on GitLab, ``forged`` is a project
cloned from that forge's repository with ``merge.strategy: pull-request``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import git
import pytest

from orchestrator.faces.scaffold import init_project
from orchestrator.queue import machine as q
from orchestrator.review import verdicts as review

from .forge_fakes.fixtures import REPO
from .support import run_claimed, set_config, write_agents

TOKEN_ENV = "OCTO_TEST_FORGE_TOKEN"


class Driver:
    """One forge's people and CI, in the same words for both fakes."""

    def __init__(self, kind: str, server: Any) -> None:
        self.kind, self.server = kind, server
        self.prefix = "GH" if kind == "github" else "GL"

    @property
    def url(self) -> str:
        return self.server.api if self.kind == "github" else self.server.root

    def ci(self, sha: str, name: str, passed: bool, log: str = "") -> None:
        if self.kind == "github":
            self.server.report_ci(sha, name, "success" if passed else "failure", log)
        else:
            self.server.report_ci(sha, name, "success" if passed else "failed", log)

    def review(self, number: int, login: str, verdict: str, body: str = "", notes=()) -> None:
        """``verdict``: changes, approve, or comment (a review that only comments)."""
        states = {
            "github": {
                "changes": "CHANGES_REQUESTED",
                "approve": "APPROVED",
                "comment": "COMMENTED",
            },
            "gitlab": {
                "changes": "requested_changes",
                "approve": "approved",
                "comment": "reviewed",
            },
        }
        self.server.review(number, login, states[self.kind][verdict], body, list(notes))

    def squash_by_hand(self, number: int, login: str) -> None:
        """The merge button set to squash (GitLab: a squash commit, then the merge commit)."""
        if self.kind == "github":
            self.server.merge_by_hand(number, login, "squash")
        else:
            self.server.merge_by_hand(number, login, squash=True)

    def pr_comments(self, number: int) -> list[str]:
        """What was said on pull request ``number`` (GitHub: its issue comments; GitLab: the
        merge request's notes)."""
        if self.kind == "github":
            return [c["body"] for c in self.server.issues[number].comments]
        return [n.body for n in self.server.mrs[number].notes]

    def pr_body(self, number: int) -> str:
        if self.kind == "github":
            return self.server.issues[number].body
        return self.server.mrs[number].description

    def asked_to_review(self, number: int) -> list[str]:
        """Reviewers the pull request asks (again) and who have not answered since."""
        if self.kind == "github":
            return list(self.server.issues[number].pull.requested)
        reviewers = self.server.mrs[number].reviewers
        return [login for login, state in reviewers.items() if state == "unreviewed"]

    def issue_closed(self, number: int) -> bool:
        return self.server.issues[number].state == "closed"

    def comments(self, number: int) -> list[str]:
        issue = self.server.issues[number]
        if self.kind == "github":
            return [c["body"] for c in issue.comments]
        return [n.body for n in issue.notes]

    def head(self, branch: str) -> str | None:
        return self.server.remote.sha(branch)


@pytest.fixture(params=["github", "gitlab"])
def forge(request: pytest.FixtureRequest) -> Driver:
    server = request.getfixturevalue(f"{request.param}_forge")
    return Driver(request.param, server)


@pytest.fixture
def forged(forge: Driver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project cloned from the forge's repository, with merge.strategy pull-request."""
    root = tmp_path / "project"
    git.Repo.clone_from(forge.server.remote.path, root)
    for key, value in {
        "GIT_AUTHOR_NAME": "Test User",
        "GIT_AUTHOR_EMAIL": "test@example.invalid",
        "GIT_COMMITTER_NAME": "Test User",
        "GIT_COMMITTER_EMAIL": "test@example.invalid",
        "OCTOPOID_ROOT": str(root),
        TOKEN_ENV: "tok-bot",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(root)
    init_project(root)
    write_agents(root)
    set_config(
        root,
        git={"remote": "origin"},
        merge={"strategy": "pull-request"},
        forge={
            "kind": forge.kind,
            "url": forge.url,
            "repository": REPO,
            "token_env": TOKEN_ENV,
            "intake_label": "octopoid",
            "merge_when_approved": True,
        },
    )
    return root


def attempt(task_id: str) -> str:
    claimed = q.claim_task(None, "impl-1")
    assert claimed is not None and claimed.id == task_id
    return run_claimed(claimed, "impl-1").next_state


def in_review(title: str) -> tuple[str, int, str]:
    """A task whose attempt is in review with its pull request open: (id, number, head)."""
    task = q.create_task(title)
    assert attempt(task.id) == "provisional"
    review.accept(task.id, "alice")
    return task.id, int(q.get_task(task.id).headers["PR_NUMBER"]), task.label


def prompt_of(root: Path, attempt_number: int) -> str:
    found = list((root / ".octopoid/runtime/logs").rglob(f"attempt-{attempt_number}.prompt.md"))
    assert len(found) == 1
    return found[0].read_text()
