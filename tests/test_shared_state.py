"""What octopoid remembers is the store's: on one PostgreSQL two machines (two clones, each
its own project folder) share questions, reviewers' drafts and plans, merge checks and
steering. Pages and CLI commands are real processes of their machine; attempts run in
this process. What two running schedulers do with the shared state (pauses, limits,
budgets, an attempt's questions, the sweep of a killed accept or split) is proved in
test_two_schedulers.py."""

from __future__ import annotations

import git
import pytest

from orchestrator.git import merges
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.queue import questions
from orchestrator.review import mergeable
from orchestrator.roles import plans

from .support import Machines, attempt, wait_for, write_agents
from .support import octopoid as cli
from .support.daemon import ended, running, said_in_log
from .support.web import save, signed_in
from .web_server import start_web


def test_a_task_held_for_its_question_on_b_is_released_by_an_answer_on_a_s_page(
    machines: Machines,
) -> None:
    machines.on("b")
    q.create_task("asks which branch")
    mine = q.claim_task(None, "impl-1")
    questions.ask(mine.id, mine.attempts, "Which branch?")  # nobody answers in time:
    questions.hold_for_answer(q.get_task(mine.id), "Which branch?", "success: asked")
    assert q.get_task(mine.id).headers["NOT_BEFORE"] == q.NEVER
    page_a = start_web(machines.roots["a"])
    try:
        web = signed_in(page_a, "erin")
        _, _, page = web.request(f"/tasks/{mine.label}")
        assert "Which branch?" in page and 'id="answer-form"' in page
        form = {"csrf": web.csrf(), "answer": "release/2.0"}
        assert web.request(f"/tasks/{mine.label}/answer", form)[0] == 303
    finally:
        page_a.stop()
    released = q.get_task(mine.id)  # as b reads it: free, and the answer in its notes
    assert "QUESTION" not in released.headers and "NOT_BEFORE" not in released.headers
    assert "A: release/2.0" in (q.get_task_notes(mine.id) or "")  # the next prompt's
    assert q.claim_task(None, "impl-1").id == mine.id


def test_a_reviewer_s_draft_on_a_is_on_b_s_page(machines: Machines) -> None:
    machines.on("a")
    tid = q.create_task("reviewed on two machines").id
    assert attempt(machines, "a", tid) == "provisional"
    page_a, page_b = start_web(machines.roots["a"]), start_web(machines.roots["b"])
    try:
        status, _ = save(signed_in(page_a, "alice"), tid, {"reason": "DRAFTED-ON-A"})
        assert status == 200
        _, _, page = signed_in(page_b, "alice").request(f"/tasks/TASK-{tid}")
        _, _, theirs = signed_in(page_b, "bob").request(f"/tasks/TASK-{tid}")
    finally:
        page_a.stop()
        page_b.stop()
    assert "DRAFTED-ON-A" in page and "DRAFTED-ON-A" not in theirs


def test_a_plan_drafted_on_a_is_approved_on_b_and_enqueued_once(machines: Machines) -> None:
    machines.on("a")
    plan = plans.draft("ship the importer", planned_by="a person on a")
    first = plans.add_task(plan, "read the old format", criteria=["reads it"])
    second = plans.add_task(plan, "write the new one", criteria=["writes it"])
    plans.add_edge(plan, first, second)
    plan = plans.add(plan)
    approved = cli(machines.roots["b"], "plan", "approve", plan.id)
    assert approved.returncode == 0, approved.stderr
    again = cli(machines.roots["a"], "plan", "approve", plan.id)
    assert again.returncode == 1 and "approved already" in again.stderr
    made = {t.title: t for t in q.list_tasks(TaskState.INCOMING)}
    assert sorted(made) == ["read the old format", "write the new one"]
    assert made["write the new one"].blocked_by == [made["read the old format"].id]
    assert plans.load(plan.id).state == plans.APPROVED


def test_a_merge_check_judged_on_a_is_not_judged_again_on_b(
    machines: Machines, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merge-check cache is the store's: a pair of tips one machine judged (conflicts
    are a fact about two commits) is read, not judged, by another that has them too."""
    machines.on("a")
    tid = q.create_task("judged once").id
    assert attempt(machines, "a", tid) == "provisional"
    in_review = q.list_tasks(TaskState.PROVISIONAL)
    assert mergeable.unmergeable(in_review) == {}  # judged on a: merges cleanly
    machines.on("b")
    ref = f"refs/octopoid/tasks/TASK-{tid}"
    git.Repo(machines.roots["b"]).git.fetch("origin", f"{ref}:refs/heads/agent/TASK-{tid}")
    judged: list[str] = []
    monkeypatch.setattr(merges, "merge_conflicts", lambda *a: judged.append("git") or None)
    assert mergeable.unmergeable(in_review) == {} and judged == []


def test_a_message_and_a_stop_said_on_a_reach_the_attempt_running_on_b(machines: Machines) -> None:
    """`say` and `stop` are the store's (the steering record): said on machine a, the
    attempt on b reads the message in its inbox, and b's runner ends the next on a stop."""
    root = machines.on("b")
    write_agents(root, env={"OCTO_TEST_SLEEP": "600"})
    listening, slow = q.create_task("listen for a message").id, q.create_task("slow").id
    with running(root, q.claim_task(None, "impl-1")) as runner:
        wait_for("b's agent to listen", lambda: said_in_log(listening, "listening"), 60)
        said = cli(machines.roots["a"], "say", listening, "use the v2 endpoint")
        assert said.returncode == 0 and "for its running attempt" in said.stdout, said.stderr
        ended(runner)
    with running(root, q.claim_task(None, "impl-1")) as runner:
        wait_for("b's agent to work", lambda: said_in_log(slow, "working on"), 60)
        stopped = cli(machines.roots["a"], "stop", slow, "--reason", "not this way")
        assert stopped.returncode == 0, stopped.stderr
        ended(runner)
    assert q.get_task(listening).state is TaskState.PROVISIONAL
    assert "inbox: Message from human" in (q.get_task_notes(listening) or "")
    task = q.get_task(slow)
    assert task.state is TaskState.INCOMING and task.headers["INTERRUPTED"] == "1"
    assert "stopped by human: not this way" in (q.get_task_notes(slow) or "")
