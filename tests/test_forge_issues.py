"""Issues on GitHub and GitLab as octopoid reads and tells them: each pull request and each
failure said on the issue (a retry's too), the listing asked in the forge's documented
form and, unchanged, at no cost, and an intake the forge refuses never stopping the
verdicts of pull requests."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from orchestrator.forge import connect, issues, poller
from orchestrator.model.tasks import format_time, parse_time
from orchestrator.queue import machine as q
from orchestrator.review import verdicts as review

from .forge_driver import Driver, attempt
from .forge_fakes.base import SINCE_RE
from .forge_fakes.fixtures import ALICE, BOB


def imported(forge: Driver, title: str) -> tuple[int, str]:
    number = forge.server.create_issue(ALICE, title, "- [ ] done\n", ["octopoid"])
    poller.poll_once(connect())
    return number, f"{forge.prefix}-{number}"


def in_review(task_id: str) -> int:
    assert attempt(task_id) == "provisional"
    review.accept(task_id, "alice")
    return int(q.get_task(task_id).headers["PR_NUMBER"])


def markers(forge: Driver, number: int) -> list[str]:
    return [c.rsplit(":", 1)[1].removesuffix(" -->") for c in forge.comments(number)]


def test_an_issue_hears_of_every_pull_request_and_every_failure(
    forge: Driver,
    forged: Path,
) -> None:
    number, task_id = imported(forge, "tried twice")
    first = in_review(task_id)
    forge.server.close_by_hand(first, BOB)
    poller.poll_once(connect())
    review.retry(task_id)
    second = in_review(task_id)  # a new pull request for the retry
    forge.server.close_by_hand(second, BOB)
    poller.poll_once(connect())
    assert second != first
    assert markers(forge, number) == [
        "started",
        f"pull-request-{first}",
        "failed-1",
        f"pull-request-{second}",
        "failed-2",
    ]
    said = forge.comments(number)
    assert str(second) in said[3] and "failed" in said[4]


def test_the_issue_listing_asks_in_the_documented_form_and_unchanged_costs_nothing(
    forge: Driver,
    forged: Path,
) -> None:
    number, _ = imported(forge, "listed")  # the first listing: everything labelled
    client = connect()  # one client, as the scheduler's poller keeps: its HTTP cache with it
    poller.poll_once(client)
    forge.server.log.clear()
    poller.poll_once(client)  # nothing changed on the forge
    asked = [e for e in forge.server.log if e.path.split("?")[0].endswith("/issues")]
    assert len(asked) == 1
    since = "since=" if forge.kind == "github" else "updated_after="
    stamp = asked[0].path.split(since, 1)[1].split("&")[0].replace("%3A", ":")
    assert SINCE_RE.fullmatch(stamp), stamp  # YYYY-MM-DDTHH:MM:SSZ, as GitHub documents
    newest = parse_time(forge.server.issues[number].updated_at)  # the forge's time, not ours
    assert stamp == format_time(newest - timedelta(seconds=issues.SINCE_OVERLAP))
    if forge.kind == "github":
        assert asked[0].status == 304  # the same question, answered from its ETag: free
    forge.server.log.clear()
    poller.poll_once(client)
    assert [e.path for e in forge.server.log if "/issues?" in e.path] == [asked[0].path]


def test_an_intake_the_forge_refuses_does_not_stop_the_verdicts_of_pull_requests(
    forge: Driver,
    forged: Path,
) -> None:
    _, task_id = imported(forge, "judged all the same")
    in_review(task_id)
    forge.ci(forge.head(f"agent/TASK-{task_id}"), "build", passed=False, log="broke\n")
    forge.server.fail_next(1, 422)  # the issue listing, refused
    done = poller.poll_once(connect())
    assert done[0].startswith("intake failed: ") and "422" in done[0]
    assert f"TASK-{task_id}: CI failed (build)" in done[1:]


def test_which_tasks_came_from_issues_and_what_each_was_told_is_in_the_stores_records(
    forge: Driver,
    forged: Path,
) -> None:
    number, task_id = imported(forge, "remembered by the store")
    poller.poll_once(connect())  # told: started? not yet; tracked all the same
    records = q.get_store().records
    tracked = records.read(f"{issues.TRACKED}/{task_id}")
    assert tracked is not None and tracked.value["issue"] == number
    assert records.read(f"{issues.SINCE}/octopoid") is not None
    assert [p.name for p in issues.folder().iterdir()] == [".lock"]  # nothing else here
    in_review(task_id)
    poller.poll_once(connect())
    said = records.read(f"{issues.TRACKED}/{task_id}").value["said"]
    assert "started" in said and any(s.startswith("pull-request-") for s in said)


def test_an_older_octopoids_issue_registry_is_moved_into_the_records_and_says_nothing_twice(
    forge: Driver,
    forged: Path,
) -> None:
    number, task_id = imported(forge, "told before the upgrade")
    in_review(task_id)
    poller.poll_once(connect())
    told = markers(forge, number)
    records = q.get_store().records
    entry = records.read(f"{issues.TRACKED}/{task_id}").value
    since = records.read(f"{issues.SINCE}/octopoid").value["since"]
    for key in list(records.list("forge")):  # as an older octopoid left it: in a file
        records.delete(key)
    hostile = {"../x": {"issue": 1}, "GH-7": {"issue": "seven"}, "GH-8": ["said"]}
    old = {"since": {"octopoid": since, "bad": "yesterday"}, "tasks": {task_id: entry, **hostile}}
    (issues.folder() / "issues.json").write_text(json.dumps(old))
    poller.poll_once(connect())
    assert not (issues.folder() / "issues.json").exists()
    assert records.read(f"{issues.TRACKED}/{task_id}").value["said"] == entry["said"]
    assert markers(forge, number) == told  # nothing said twice
    assert list(records.list(issues.TRACKED)) == [f"{issues.TRACKED}/{task_id}"]  # the rest
    assert records.read(f"{issues.SINCE}/bad") is None  # dropped, and the poll went on
