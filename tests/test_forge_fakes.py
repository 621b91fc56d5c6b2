"""The forge fakes driven by the real clients (githubkit, python-gitlab) over HTTP, with real
pushes to the bare remote: what octopoid's forge tests rely on them to do, faults included."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import gitlab
import pytest
from githubkit import GitHub
from githubkit.cache import MemCacheStrategy
from githubkit.exception import (
    PrimaryRateLimitExceeded,
    RequestFailed,
    SecondaryRateLimitExceeded,
)

from tests.forge_fakes import GitHubFake, GitLabFake, LineNote
from tests.forge_fakes.fixtures import ALICE, BOB, BOT

OWNER, R = "octo", "widgets"
BRANCH = "agent/TASK-1"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def push_branch(bare: Path, work: Path, files: dict[str, str], branch: str = BRANCH) -> str:
    """What octopoid does: commit in a clone and ``git push`` the branch to the remote."""
    if not work.exists():
        git(bare.parent, "clone", "--quiet", str(bare), str(work))
        git(work, "checkout", "--quiet", "-b", branch)
    for name, text in files.items():
        (work / name).write_text(text)
    git(work, "add", ".")
    git(work, "-c", "user.name=bot", "-c", "user.email=bot@x", "commit", "--quiet", "-m", "work")
    git(work, "push", "--quiet", "origin", f"HEAD:refs/heads/{branch}")
    return git(work, "rev-parse", "HEAD")


def hub(forge: GitHubFake, token: str = "tok-bot", **options: object) -> GitHub:
    """A client with its own HTTP cache: githubkit's default one is process-wide, and a later
    test's server may get an earlier one's port (then its first GET could already be a 304)."""
    return GitHub(token, base_url=forge.api, cache_strategy=MemCacheStrategy(), **options)


def lab(forge: GitLabFake, token: str = "tok-bot", **options: object) -> gitlab.Gitlab:
    return gitlab.Gitlab(forge.root, private_token=token, **options)


# -- GitHub


def test_github_pull_request_follows_pushes_and_refuses_a_second_open_one(
    github_forge: GitHubFake, tmp_path: Path
) -> None:
    gh, bare = hub(github_forge), github_forge.remote.path
    first = push_branch(bare, tmp_path / "w", {"a.txt": "one\n"})
    pr = gh.rest.pulls.create(
        OWNER, R, title="Task 1", head=BRANCH, base="main", body="ctx"
    ).parsed_data
    assert (pr.number, pr.head.sha, pr.user.login, pr.state) == (1, first, BOT, "open")
    with pytest.raises(RequestFailed) as refused:
        gh.rest.pulls.create(OWNER, R, title="again", head=BRANCH, base="main")
    assert refused.value.response.status_code == 422

    second = push_branch(bare, tmp_path / "w", {"a.txt": "two\n"})
    found = gh.rest.pulls.list(OWNER, R, head=f"{OWNER}:{BRANCH}", state="all").parsed_data
    assert [(p.number, p.head.sha) for p in found] == [(1, second)]
    assert github_forge.issues[1].pull.shas == [first, second]

    gh.rest.pulls.update(OWNER, R, 1, body="new body", state="closed")
    closed = gh.rest.pulls.get(OWNER, R, 1).parsed_data
    assert (closed.state, closed.body, closed.merged) == ("closed", "new body", False)
    assert gh.rest.pulls.list(OWNER, R, head=f"{OWNER}:{BRANCH}").parsed_data == []


def test_github_answers_a_repeated_get_with_304_until_the_state_changes(
    github_forge: GitHubFake,
) -> None:
    gh = hub(github_forge)
    number = github_forge.create_issue(ALICE, "Do X")
    assert gh.rest.issues.get(OWNER, R, number).parsed_data.title == "Do X"
    assert gh.rest.issues.get(OWNER, R, number).parsed_data.title == "Do X"  # from hishel's cache
    assert github_forge.not_modified == 1
    assert github_forge.log[-1].status == 304

    github_forge.edit_issue(number, title="Do Y")
    assert gh.rest.issues.get(OWNER, R, number).parsed_data.title == "Do Y"
    assert github_forge.not_modified == 1


def test_github_reviews_and_line_comments_are_on_the_head_of_their_time(
    github_forge: GitHubFake, tmp_path: Path
) -> None:
    gh, bare = hub(github_forge), github_forge.remote.path
    first = push_branch(bare, tmp_path / "w", {"a.py": "x = 1\ny = 2\n"})
    number = gh.rest.pulls.create(OWNER, R, title="T", head=BRANCH, base="main").parsed_data.number
    notes = [LineNote("a.py", 2, "why 2?", start_line=1), LineNote("a.py", 1, "old", side="LEFT")]
    rid = github_forge.review(number, ALICE, "CHANGES_REQUESTED", "Please fix", notes)
    later = github_forge.force_push(BOB, BRANCH, {"a.py": "x = 3\n"}, "Bob's fix")
    github_forge.review(number, BOB, "APPROVED")

    reviews = gh.rest.pulls.list_reviews(OWNER, R, number).parsed_data
    assert [(r.id, r.user.login, r.state, r.commit_id) for r in reviews] == [
        (rid, ALICE, "CHANGES_REQUESTED", first),
        (reviews[1].id, BOB, "APPROVED", later),
    ]
    assert reviews[0].body == "Please fix" and reviews[1].id > rid
    lines = gh.rest.pulls.list_comments_for_review(OWNER, R, number, rid).parsed_data
    assert [(c.path, c.line, c.side, c.start_line, c.body) for c in lines] == [
        ("a.py", 2, "RIGHT", 1, "why 2?"),
        ("a.py", 1, "LEFT", None, "old"),
    ]
    every = gh.rest.pulls.list_review_comments(OWNER, R, number).parsed_data
    assert {(c.pull_request_review_id, c.commit_id, c.user.login) for c in every} == {
        (rid, first, ALICE)
    }
    assert git(bare, "log", "-1", "--format=%an %s", BRANCH) == "bob Bob's fix"


def test_github_check_runs_statuses_and_job_logs_through_the_redirect(
    github_forge: GitHubFake, tmp_path: Path
) -> None:
    gh = hub(github_forge)
    sha = push_branch(github_forge.remote.path, tmp_path / "w", {"a.txt": "1\n"})
    github_forge.report_ci(sha, "tests", "failure", "first try\n")
    job = github_forge.report_ci(sha, "tests", "failure", "collected 3\nFAILED test_a\n")
    github_forge.report_ci(sha, "lint", None)
    github_forge.report_status(sha, "ci/legacy", "success")

    runs = gh.rest.checks.list_for_ref(OWNER, R, BRANCH).parsed_data  # by branch: its head
    assert runs.total_count == 2
    assert {(c.name, c.status, c.conclusion, c.head_sha) for c in runs.check_runs} == {
        ("tests", "completed", "failure", sha),
        ("lint", "in_progress", None, sha),
    }
    tests = next(c for c in runs.check_runs if c.name == "tests")
    assert tests.id == job and tests.output.text.endswith("FAILED test_a\n")
    log = gh.rest.actions.download_job_logs_for_workflow_run(OWNER, R, job)
    assert log.text == "collected 3\nFAILED test_a\n"
    assert [e.status for e in github_forge.log[-2:]] == [302, 200]
    assert github_forge.log[-1].path == f"/_blobs/job-logs/{job}.txt"

    combined = gh.rest.repos.get_combined_status_for_ref(OWNER, R, sha).parsed_data
    assert (combined.state, [s.context for s in combined.statuses]) == ("success", ["ci/legacy"])
    github_forge.report_status(sha, "ci/legacy", "failure")
    assert gh.rest.repos.get_combined_status_for_ref(OWNER, R, sha).parsed_data.state == "failure"


def test_github_merge_moves_main_in_the_bare_repo_and_refuses_twice_or_on_conflict(
    github_forge: GitHubFake, tmp_path: Path
) -> None:
    gh, bare = hub(github_forge), github_forge.remote.path
    main_before = github_forge.remote.sha("main")
    head = push_branch(bare, tmp_path / "w", {"a.txt": "1\n"})
    number = gh.rest.pulls.create(OWNER, R, title="T", head=BRANCH, base="main").parsed_data.number
    result = gh.rest.pulls.merge(OWNER, R, number, merge_method="merge").parsed_data
    assert result.merged and github_forge.remote.sha("main") == result.sha
    assert git(bare, "rev-parse", f"{result.sha}^1", f"{result.sha}^2").split() == [
        main_before,
        head,
    ]
    answer = gh.rest.pulls.get(OWNER, R, number)
    pr = answer.parsed_data
    assert (pr.state, pr.merged, pr.merged_by.login, answer.json()["merge_commit_sha"]) == (
        "closed",
        True,
        BOT,
        result.sha,
    )
    with pytest.raises(RequestFailed) as twice:
        gh.rest.pulls.merge(OWNER, R, number)
    assert twice.value.response.status_code == 405

    push_branch(bare, tmp_path / "c", {"README.md": "theirs\n"}, branch="agent/TASK-2")
    github_forge.force_push(ALICE, "main", {"README.md": "ours\n"})
    clash = gh.rest.pulls.create(OWNER, R, title="C", head="agent/TASK-2", base="main").parsed_data
    assert gh.rest.pulls.get(OWNER, R, clash.number).parsed_data.mergeable is False
    with pytest.raises(RequestFailed) as conflict:
        gh.rest.pulls.merge(OWNER, R, clash.number)
    assert conflict.value.response.status_code == 405
    assert conflict.value.response.json()["message"] == "Pull Request is not mergeable"


def test_github_a_person_merges_or_closes_by_hand(github_forge: GitHubFake, tmp_path: Path) -> None:
    gh, bare = hub(github_forge), github_forge.remote.path
    push_branch(bare, tmp_path / "a", {"a.txt": "1\n"})
    push_branch(bare, tmp_path / "b", {"b.txt": "1\n"}, branch="agent/TASK-2")
    one = gh.rest.pulls.create(OWNER, R, title="1", head=BRANCH, base="main").parsed_data.number
    two = gh.rest.pulls.create(
        OWNER, R, title="2", head="agent/TASK-2", base="main"
    ).parsed_data.number
    sha = github_forge.merge_by_hand(one, ALICE)
    github_forge.close_by_hand(two, BOB)
    merged, closed = (gh.rest.pulls.get(OWNER, R, n).parsed_data for n in (one, two))
    assert (merged.merged, merged.merged_by.login, github_forge.remote.sha("main")) == (
        True,
        ALICE,
        sha,
    )
    assert (closed.state, closed.merged, closed.merged_by) == ("closed", False, None)


def test_github_squash_and_rebase_merges_reopen_and_closing_keywords_as_on_github(
    github_forge: GitHubFake, tmp_path: Path
) -> None:
    gh, bare = hub(github_forge), github_forge.remote.path
    issue = github_forge.create_issue(ALICE, "the bug")
    heads = {}
    for n, branch in enumerate(("agent/TASK-1", "agent/TASK-2")):
        push_branch(bare, tmp_path / branch[-1], {f"f{n}.txt": "1\n"}, branch=branch)
        heads[branch] = push_branch(bare, tmp_path / branch[-1], {f"g{n}.txt": "2\n"}, branch)
    body = f"Fixes the bug.\n\nCloses #{issue}"
    squashed = gh.rest.pulls.create(
        OWNER, R, title="S", head="agent/TASK-1", base="main", body=body
    ).parsed_data.number
    rebased = gh.rest.pulls.create(
        OWNER, R, title="R", head="agent/TASK-2", base="main"
    ).parsed_data.number
    gh.rest.pulls.update(OWNER, R, squashed, state="closed")  # closed by mistake,
    assert gh.rest.pulls.update(OWNER, R, squashed, state="open").parsed_data.state == "open"
    gh.rest.pulls.merge(OWNER, R, squashed, merge_method="squash")
    main = github_forge.remote.sha("main")
    assert git(bare, "log", "-1", "--format=%s", "main").startswith("S (#")
    assert len(git(bare, "log", "-1", "--format=%P", "main").split()) == 1  # not a merge
    assert not git(bare, "branch", "--contains", heads["agent/TASK-1"], "main")  # no ancestry
    assert gh.rest.pulls.get(OWNER, R, squashed).json()["merge_commit_sha"] == main
    assert gh.rest.issues.get(OWNER, R, issue).parsed_data.state == "closed"  # "Closes #1"
    github_forge.merge_by_hand(rebased, BOB, "rebase")
    assert git(bare, "log", "--format=%an %s", "-2", "main").splitlines() == ["bot work"] * 2
    assert git(bare, "show", "main:g1.txt") == "2" and git(bare, "show", "main:f0.txt") == "1"


def test_github_reviewers_asked_again_after_they_reviewed(
    github_forge: GitHubFake, tmp_path: Path
) -> None:
    gh = hub(github_forge)
    push_branch(github_forge.remote.path, tmp_path / "w", {"a.txt": "1\n"})
    number = gh.rest.pulls.create(OWNER, R, title="T", head=BRANCH, base="main").parsed_data.number
    github_forge.review(number, ALICE, "CHANGES_REQUESTED", "no")
    assert gh.rest.pulls.list_requested_reviewers(OWNER, R, number).parsed_data.users == []
    gh.rest.pulls.request_reviewers(OWNER, R, number, reviewers=[ALICE])
    asked = gh.rest.pulls.get(OWNER, R, number).parsed_data.requested_reviewers
    assert [u.login for u in asked] == [ALICE]
    with pytest.raises(RequestFailed) as author:  # the PR's own author cannot be asked
        gh.rest.pulls.request_reviewers(OWNER, R, number, reviewers=[BOT])
    assert author.value.response.status_code == 422
    github_forge.review(number, ALICE, "APPROVED")  # heard: no longer asked
    assert github_forge.issues[number].pull.requested == []


def test_github_issues_share_numbers_with_pulls_and_take_comments(
    github_forge: GitHubFake, tmp_path: Path
) -> None:
    gh = hub(github_forge)
    first = github_forge.create_issue(ALICE, "Do X", "- [ ] a\n- [ ] b\n", ["octopoid", "P1"])
    github_forge.create_issue(ALICE, "Other", labels=["octopoid"])
    push_branch(github_forge.remote.path, tmp_path / "w", {"a.txt": "1\n"})
    pr = gh.rest.pulls.create(OWNER, R, title="T", head=BRANCH, base="main").parsed_data
    assert pr.number == 3

    both = gh.rest.issues.list_for_repo(OWNER, R, labels="octopoid,P1").parsed_data
    assert [(i.number, i.body, [x.name for x in i.labels]) for i in both] == [
        (first, "- [ ] a\n- [ ] b\n", ["octopoid", "P1"])
    ]
    listed = gh.rest.issues.list_for_repo(OWNER, R, state="all").parsed_data
    assert [(i.number, bool(i.pull_request)) for i in listed] == [
        (3, True),
        (2, False),
        (1, False),
    ]
    since = gh.rest.issues.get(OWNER, R, 2).parsed_data.updated_at
    github_forge.edit_issue(first, body="- [ ] a only\n")
    github_forge.close_issue(2)
    assert [
        i.number for i in gh.rest.issues.list_for_repo(OWNER, R, labels="octopoid").parsed_data
    ] == [first]
    with pytest.raises(RequestFailed) as spaced:  # a datetime: httpx writes it with a space
        gh.rest.issues.list_for_repo(OWNER, R, state="all", since=since)
    assert spaced.value.response.status_code == 422  # as GitHub answers an undocumented form
    stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    changed = gh.rest.issues.list_for_repo(OWNER, R, state="all", since=stamp).parsed_data
    assert first in {i.number for i in changed}

    comment = gh.rest.issues.create_comment(OWNER, R, first, body="Task started").parsed_data
    assert (comment.user.login, comment.body) == (BOT, "Task started")
    alice = hub(github_forge, "tok-alice")
    alice.rest.issues.create_comment(OWNER, R, first, body="thanks")
    said = gh.rest.issues.list_comments(OWNER, R, first).parsed_data
    assert [(c.user.login, c.body) for c in said] == [(BOT, "Task started"), (ALICE, "thanks")]


def test_github_pages_with_link_headers(github_forge: GitHubFake) -> None:
    gh = hub(github_forge)
    for n in range(5):
        github_forge.create_issue(ALICE, f"issue {n}")
    page = gh.rest.issues.list_for_repo(OWNER, R, per_page=2, page=3)
    assert [i.title for i in page.parsed_data] == ["issue 0"]
    assert 'rel="prev"' in page.headers["link"] and 'rel="next"' not in page.headers["link"]
    every = gh.rest.paginate(gh.rest.issues.list_for_repo, owner=OWNER, repo=R, per_page=2)
    assert [i.title for i in every] == [f"issue {n}" for n in range(4, -1, -1)]


def test_github_faults_are_answered_as_github_does(github_forge: GitHubFake) -> None:
    nobody = hub(github_forge, "tok-nobody")
    with pytest.raises(RequestFailed) as unknown:
        nobody.rest.repos.get(OWNER, R)
    assert unknown.value.response.status_code == 401
    assert github_forge.log[-1][2:] == (401, None)

    bare = hub(github_forge, auto_retry=False, http_cache=False)
    github_forge.fail_next(1)
    with pytest.raises(RequestFailed) as failed:
        bare.rest.repos.get(OWNER, R)
    assert failed.value.response.status_code == 502
    github_forge.rate_limit_next(1)
    with pytest.raises(PrimaryRateLimitExceeded) as limited:
        bare.rest.repos.get(OWNER, R)
    assert limited.value.response.headers["x-ratelimit-remaining"] == "0"
    github_forge.rate_limit_next(1, secondary=True)
    with pytest.raises(SecondaryRateLimitExceeded) as secondary:
        bare.rest.repos.get(OWNER, R)
    assert secondary.value.response.status_code == 429
    assert bare.rest.repos.get(OWNER, R).parsed_data.full_name == f"{OWNER}/{R}"

    retrying = hub(github_forge)  # githubkit's default: a 5xx up to 3 times, a rate limit once
    github_forge.fail_next(1)
    assert retrying.rest.repos.get(OWNER, R).parsed_data.name == R
    github_forge.rate_limit_next(1)
    assert retrying.rest.repos.get(OWNER, R).parsed_data.name == R
    statuses = [e.status for e in github_forge.log[-4:]]
    # the retry is a 304 when hishel still holds the first answer, which it may have dropped
    assert statuses[:3] == [502, 200, 403] and statuses[3] in (200, 304)


def test_a_bug_in_the_fake_is_a_500_kept_for_the_fixture_to_report(
    github_forge: GitHubFake,
) -> None:
    gh = hub(github_forge, auto_retry=False)
    with pytest.raises(RequestFailed) as broken:
        gh.request("GET", f"/repos/{OWNER}/{R}/issues", params={"per_page": "many"})
    assert broken.value.response.status_code == 500
    assert len(github_forge.errors) == 1 and "ValueError" in github_forge.errors[0]
    github_forge.errors.clear()  # the fixture would fail this test otherwise


def test_github_state_holds_under_concurrent_writers(github_forge: GitHubFake) -> None:
    number = github_forge.create_issue(ALICE, "busy")
    gh = hub(github_forge)

    def post(i: int) -> None:
        gh.rest.issues.create_comment(OWNER, R, number, body=f"c{i}")

    threads = [threading.Thread(target=post, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    comments = github_forge.issues[number].comments
    assert sorted(c["body"] for c in comments) == sorted(f"c{i}" for i in range(8))
    assert len({c["id"] for c in comments}) == 8


# -- GitLab


def test_gitlab_merge_request_follows_pushes_and_refuses_a_second_open_one(
    gitlab_forge: GitLabFake, tmp_path: Path
) -> None:
    project = lab(gitlab_forge).projects.get(f"{OWNER}/{R}")
    first = push_branch(gitlab_forge.remote.path, tmp_path / "w", {"a.txt": "1\n"})
    mr = project.mergerequests.create(
        {"source_branch": BRANCH, "target_branch": "main", "title": "T", "description": "ctx"}
    )
    assert (mr.iid, mr.sha, mr.state, mr.author["username"]) == (1, first, "opened", BOT)
    with pytest.raises(gitlab.GitlabCreateError) as refused:
        project.mergerequests.create(
            {"source_branch": BRANCH, "target_branch": "main", "title": "X"}
        )
    assert refused.value.response_code == 409

    second = push_branch(gitlab_forge.remote.path, tmp_path / "w", {"a.txt": "2\n"})
    found = project.mergerequests.list(source_branch=BRANCH, state="opened")
    assert [(m.iid, m.sha) for m in found] == [(1, second)]
    mr = project.mergerequests.get(1)
    mr.description = "new"
    mr.state_event = "close"
    mr.save()
    again = project.mergerequests.get(1)
    assert (again.state, again.description, again.closed_by["username"]) == ("closed", "new", BOT)
    assert project.mergerequests.list(source_branch=BRANCH, state="opened") == []


def test_gitlab_answers_if_none_match_with_304(gitlab_forge: GitLabFake) -> None:
    gl = lab(gitlab_forge)
    iid = gitlab_forge.create_issue(ALICE, "Do X")
    path = f"/projects/{OWNER}%2F{R}/issues/{iid}"
    etag = gl.http_request("get", path).headers["ETag"]
    with pytest.raises(gitlab.GitlabHttpError) as unchanged:  # python-gitlab raises on a 304
        gl.http_request("get", path, extra_headers={"If-None-Match": etag})
    assert unchanged.value.response_code == 304 and gitlab_forge.not_modified == 1
    gitlab_forge.edit_issue(iid, body="more")
    assert gl.http_request("get", path, extra_headers={"If-None-Match": etag}).status_code == 200


def test_gitlab_review_sets_reviewer_state_notes_and_diff_notes(
    gitlab_forge: GitLabFake, tmp_path: Path
) -> None:
    gl = lab(gitlab_forge)
    project = gl.projects.get(7)
    head = push_branch(gitlab_forge.remote.path, tmp_path / "w", {"a.py": "x = 1\n"})
    mr = project.mergerequests.create(
        {"source_branch": BRANCH, "target_branch": "main", "title": "T"}
    )
    notes = [LineNote("a.py", 1, "why?"), LineNote("a.py", 3, "gone", side="LEFT", start_line=2)]
    gitlab_forge.review(mr.iid, ALICE, "requested_changes", "Please fix", notes)

    reviewers = gl.http_get(f"/projects/7/merge_requests/{mr.iid}/reviewers")
    assert [(r["user"]["username"], r["state"]) for r in reviewers] == [
        (ALICE, "requested_changes")
    ]
    said = [d.attributes["notes"][0] for d in mr.discussions.list(get_all=True)]
    assert [(n["type"], n["body"], n["author"]["username"]) for n in said] == [
        (None, "Please fix", ALICE),
        ("DiffNote", "why?", ALICE),
        ("DiffNote", "gone", ALICE),
    ]
    new, old = said[1]["position"], said[2]["position"]
    assert (new["head_sha"], new["new_path"], new["new_line"], new["old_line"]) == (
        head,
        "a.py",
        1,
        None,
    )
    assert (old["old_line"], old["line_range"]["start"]["old_line"]) == (3, 2)
    assert mr.approvals.get().approved_by == []
    gitlab_forge.review(mr.iid, BOB, "approved")
    assert [a["user"]["username"] for a in mr.approvals.get().approved_by] == [BOB]


def test_gitlab_pipelines_jobs_and_traces(gitlab_forge: GitLabFake, tmp_path: Path) -> None:
    project = lab(gitlab_forge).projects.get(f"{OWNER}/{R}")
    sha = push_branch(gitlab_forge.remote.path, tmp_path / "w", {"a.txt": "1\n"})
    mr = project.mergerequests.create(
        {"source_branch": BRANCH, "target_branch": "main", "title": "T"}
    )
    assert mr.head_pipeline is None
    job = gitlab_forge.report_ci(sha, "tests", "failed", "collected 3\nFAILED test_a\n")
    gitlab_forge.report_ci(sha, "lint", "success")

    pipelines = project.pipelines.list(sha=sha)
    assert [(p.status, p.ref) for p in pipelines] == [("failed", BRANCH)]
    assert [p.id for p in mr.pipelines.list()] == [pipelines[0].id]
    assert project.mergerequests.get(mr.iid).head_pipeline["id"] == pipelines[0].id
    jobs = project.pipelines.get(pipelines[0].id).jobs.list()
    assert {(j.name, j.status, j.stage) for j in jobs} == {
        ("tests", "failed", "test"),
        ("lint", "success", "test"),
    }
    assert project.jobs.get(job, lazy=True).trace() == b"collected 3\nFAILED test_a\n"
    gitlab_forge.report_ci(sha, "tests", "success")
    assert project.pipelines.list(ref=BRANCH)[0].status == "success"


def test_gitlab_merge_moves_main_and_refuses_twice_or_on_conflict(
    gitlab_forge: GitLabFake, tmp_path: Path
) -> None:
    project = lab(gitlab_forge).projects.get(f"{OWNER}/{R}")
    bare = gitlab_forge.remote.path
    head = push_branch(bare, tmp_path / "w", {"a.txt": "1\n"})
    mr = project.mergerequests.create(
        {"source_branch": BRANCH, "target_branch": "main", "title": "T"}
    )
    mr.merge()
    merged = project.mergerequests.get(mr.iid)
    assert (merged.state, merged.merged_by["username"], merged.merge_user["username"]) == (
        "merged",
        BOT,
        BOT,
    )
    assert gitlab_forge.remote.sha("main") == merged.merge_commit_sha
    assert git(bare, "rev-parse", "main^2") == head
    with pytest.raises(gitlab.GitlabMRClosedError) as twice:
        merged.merge()
    assert twice.value.response_code == 405

    push_branch(bare, tmp_path / "c", {"README.md": "theirs\n"}, branch="agent/TASK-2")
    gitlab_forge.force_push(ALICE, "main", {"README.md": "ours\n"})
    clash = project.mergerequests.create(
        {"source_branch": "agent/TASK-2", "target_branch": "main", "title": "C"}
    )
    assert clash.has_conflicts
    with pytest.raises(gitlab.GitlabMRClosedError) as conflict:
        clash.merge()
    assert conflict.value.response_code == 406

    gitlab_forge.close_by_hand(clash.iid, BOB)
    assert project.mergerequests.get(clash.iid).closed_by["username"] == BOB


def test_gitlab_squash_merge_reopen_quick_actions_and_closing_keywords_as_on_gitlab(
    gitlab_forge: GitLabFake, tmp_path: Path
) -> None:
    project = lab(gitlab_forge).projects.get(f"{OWNER}/{R}")
    bare = gitlab_forge.remote.path
    issue = gitlab_forge.create_issue(ALICE, "the bug")
    push_branch(bare, tmp_path / "w", {"a.txt": "1\n"})
    head = push_branch(bare, tmp_path / "w", {"b.txt": "2\n"})
    mr = project.mergerequests.create(
        {"source_branch": BRANCH, "target_branch": "main", "title": "T",
         "description": f"Closes #{issue}"}
    )  # fmt: skip
    gitlab_forge.review(mr.iid, BOB, "requested_changes", "fix it")
    mr.notes.create({"body": f"/request_review @{BOB}"})  # only a command: no note is kept
    assert gitlab_forge.mrs[mr.iid].reviewers[BOB] == "unreviewed"
    assert [n.body for n in mr.notes.list(get_all=True)] == ["fix it"]
    gitlab_forge.close_by_hand(mr.iid, BOB)
    gitlab_forge.reopen_by_hand(mr.iid)
    assert project.mergerequests.get(mr.iid).state == "opened"
    mr.merge(squash=True)
    merged = project.mergerequests.get(mr.iid)
    assert gitlab_forge.remote.sha("main") == merged.merge_commit_sha
    assert git(bare, "rev-parse", "main^2") == merged.squash_commit_sha != head
    assert not git(bare, "branch", "--contains", head, "main")  # the head is not merged in
    assert project.issues.get(issue).state == "closed"  # "Closes #1" into main


def test_gitlab_issues_notes_and_pages(gitlab_forge: GitLabFake) -> None:
    project = lab(gitlab_forge).projects.get(7)
    for n in range(4):
        gitlab_forge.create_issue(ALICE, f"issue {n}", labels=["octopoid"] if n % 2 else [])
    assert [i.iid for i in project.issues.list(labels=["octopoid"], state="opened")] == [4, 2]
    since = project.issues.get(1).updated_at
    gitlab_forge.edit_issue(2, title="renamed")
    gitlab_forge.close_issue(4)
    assert [i.title for i in project.issues.list(labels=["octopoid"], state="opened")] == [
        "renamed"
    ]
    assert 2 in {i.iid for i in project.issues.list(updated_after=since)}

    assert [i.iid for i in project.issues.list(per_page=3, page=2)] == [1]
    every = project.issues.list(per_page=3, get_all=True)
    assert [i.iid for i in every] == [4, 3, 2, 1]
    pages = project.issues.list(per_page=3, iterator=True)
    assert (pages.total, pages.total_pages, len(list(pages))) == (4, 2, 4)

    issue = project.issues.get(2)
    issue.notes.create({"body": "Task started"})
    lab(gitlab_forge, "tok-alice").projects.get(7).issues.get(2).notes.create({"body": "thanks"})
    assert {(n.author["username"], n.body) for n in issue.notes.list()} == {
        (BOT, "Task started"),
        (ALICE, "thanks"),
    }


def test_gitlab_faults_are_answered_as_gitlab_does(gitlab_forge: GitLabFake) -> None:
    with pytest.raises(gitlab.GitlabAuthenticationError):
        lab(gitlab_forge, "tok-nobody").projects.get(7)
    bearer = gitlab.Gitlab(gitlab_forge.root, oauth_token="tok-alice")
    assert bearer.projects.get(7).id == 7 and gitlab_forge.log[-1].login == ALICE
    gl = lab(gitlab_forge)
    gitlab_forge.fail_next(1)
    with pytest.raises(gitlab.GitlabGetError) as failed:
        gl.projects.get(7)
    assert failed.value.response_code == 502
    gitlab_forge.fail_next(1)
    assert gl.projects.get(7, retry_transient_errors=True).id == 7

    gitlab_forge.rate_limit_next(1)
    with pytest.raises(gitlab.GitlabGetError) as limited:
        gl.projects.get(7, obey_rate_limit=False)
    assert limited.value.response_code == 429
    gitlab_forge.rate_limit_next(1)
    assert gl.projects.get(7).id == 7  # python-gitlab waits Retry-After and retries
    statuses = [(e.status, e.login) for e in gitlab_forge.log[-2:]]
    assert statuses == [(429, BOT), (200, BOT)]
