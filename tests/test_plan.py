"""`octopoid plan`: a scripted planner drafts a goal into dependent tasks; a person reviews,
edits and approves the plan; the scheduler runs the tasks in dependency order; a failed
blocker holds its dependants, visibly, until a retry of it succeeds."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from orchestrator import config
from orchestrator.daemon import scheduler
from orchestrator.model.exceptions import ConfigError, IllegalTransition, InvalidInput, InvalidTask
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.review import verdicts as review
from orchestrator.roles import breakdown, planner, plans

from .support import HELPERS, child_env, invoke, octopoid, set_config, wait_for

S = TaskState
GOAL = "GOAL-CLUE: let people export their data"


def write_agents(root: Path, planner_agent: bool = True) -> None:
    """The scripted implementer (one attempt per task, two at a time) and the planner."""
    command = {"backend": "command", "max_turns": 10, "timeout_seconds": 60}
    agents = [
        {"name": "impl-1", "role": "implement", "max_concurrent": 2, **command,
         "argv": [sys.executable, str(HELPERS / "agent.py")]},
    ]  # fmt: skip
    if planner_agent:
        argv = [sys.executable, str(HELPERS / "plan_agent.py")]
        agents.append({"name": "planner", "role": "plan", **command, "argv": argv})
    doc = {"lease_seconds": 30, "max_attempts": 1, "max_claimed": 2, "agents": agents}
    (root / ".octopoid/agents.yaml").write_text(yaml.safe_dump(doc))


@pytest.fixture
def planned(git_project: Path) -> Path:
    write_agents(git_project)
    return git_project


def drive(sched: scheduler.Scheduler, until: Callable[[], bool], order: list[str]) -> None:
    """Scheduler passes, accepting what reaches review (in ``order``), until ``until``."""

    def step() -> bool:
        sched.loop_once()
        for task in q.list_tasks(S.PROVISIONAL):
            review.accept(task.id)
            order.append(task.id)
        return not sched.runners and until()

    wait_for("the scheduler to get there", step, 240)


def test_a_planned_goal_runs_in_dependency_order_and_a_failed_blocker_holds_until_retried(
    planned: Path,
) -> None:
    drafted = invoke("plan", GOAL)
    assert drafted.exit_code == 0, drafted.stderr
    assert (
        "PLAN-1 (draft): GOAL-CLUE" in drafted.stdout
        and "T6 [P1] cut the release" in drafted.stdout
    )
    carrier = q.get_task("1")
    assert (carrier.state, carrier.role, carrier.headers["PLAN"]) == (S.DONE, "planning", "PLAN-1")
    assert q.get_store().count(S.INCOMING) == 0  # nothing is enqueued before approval

    approved = invoke("plan", "approve", "PLAN-1")
    assert approved.exit_code == 0, approved.stderr
    ids = plans.load("PLAN-1").created_ids
    assert approved.stdout.strip().endswith(", ".join(f"TASK-{ids[f'T{n}']}" for n in range(1, 7)))
    plan = plans.load("PLAN-1")
    for t in plan.tasks:
        task = q.get_task(ids[t.key])
        assert task.blocked_by == [ids[b] for b in t.blocked_by]
        assert (task.title, task.priority) == (t.title, t.priority)

    sched, order = scheduler.Scheduler(), []
    sched.initialize()
    try:
        api = ids["T2"]  # its title fails the first attempt; max_attempts is 1
        held = [ids["T4"], ids["T5"], ids["T6"]]
        drive(sched, lambda: q.get_task(api).state is S.FAILED and len(order) == 2, order)
        assert order == [ids["T1"], ids["T3"]]
        assert all(q.get_task(t).state is S.INCOMING for t in held)
        listing = invoke("list").stdout
        why = f"which failed: `octopoid retry TASK-{api}` releases it once TASK-{api} succeeds"
        assert f"TASK-{ids['T4']} is stuck: held by TASK-{api}, {why}" in listing
        assert f"TASK-{ids['T6']} is stuck: held by TASK-{api} (through TASK-" in listing
        status = json.loads(invoke("status", "--json").stdout)
        stuck = {s["id"]: s["why"] for s in status["blocked"]["stuck"]}
        assert set(stuck) == {f"TASK-{t}" for t in held}
        sched.loop_once()
        assert all(q.get_task(t).state is S.INCOMING for t in held)  # still held

        assert invoke("retry", f"TASK-{api}").exit_code == 0
        drive(sched, lambda: all(q.get_task(i).state is S.DONE for i in ids.values()), order)
    finally:
        sched.shutdown(grace=30)
    assert sorted(order) == sorted(ids.values())
    for t in plan.tasks:  # every task was accepted after each of its blockers
        assert all(order.index(ids[b]) < order.index(ids[t.key]) for b in t.blocked_by)


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("cycle", "the blockers form a cycle: T1 → T3 → T2 → T1"),
        ("dangling", "task 2 depends on 9: the plan has tasks 1 to 2"),
        ("many", "31 tasks; at most 30"),
        ("prose", "no ```plan block"),
    ],
)
def test_a_bad_plan_is_refused_and_nothing_is_stored(planned, monkeypatch, answer, why) -> None:
    monkeypatch.setenv("OCTO_TEST_PLAN", answer)
    with pytest.raises(InvalidTask, match="the plan was refused") as refused:
        planner.plan_goal(GOAL)
    assert why in str(refused.value) and "octopoid notes TASK-1" in str(refused.value)
    assert plans.all_plans() == []
    carrier = q.get_task("1")
    assert carrier.state is S.FAILED and why in carrier.headers["ERROR"]
    assert "here is the plan" in q.get_task_notes("1")  # the answer, for whoever asks why
    with pytest.raises(IllegalTransition, match="run `octopoid plan` again"):
        review.retry("1")  # incoming would wait for a role no agent has
    assert q.get_task("1").state is S.FAILED


def test_a_plan_is_its_answer_not_a_branch(planned, monkeypatch) -> None:
    import git

    monkeypatch.setenv("OCTO_TEST_PLAN", "commit")
    head = git.Repo(planned).heads.main.commit.hexsha
    plan = planner.plan_goal(GOAL)
    assert len(plan.tasks) == 6
    repo = git.Repo(planned)
    assert repo.heads.main.commit.hexsha == head
    assert [h.name for h in repo.heads] == ["main"]  # the carrying task's branch is gone


def test_what_a_planners_network_refused_is_in_its_log(planned, monkeypatch) -> None:
    monkeypatch.setenv("OCTO_TEST_PLAN", "reach")
    planner.plan_goal(GOAL)
    [carrier] = q.list_tasks(S.DONE)
    log = (config.get_logs_dir() / carrier.label / "attempt-1.log").read_text()
    assert "the network said HTTP/1.1 403 Forbidden" in log
    assert "[octopoid] network: refused example.com:443: not on this box's list" in log


def test_without_a_planner_the_error_says_how_to_add_one(git_project) -> None:
    write_agents(git_project, planner_agent=False)
    out = octopoid(git_project, "plan", GOAL)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "octopoid: no agent has role: plan; add one to .octopoid/agents.yaml (any backend), "
        "e.g. `- {name: planner, role: plan, backend: claude-code}`"
    ]
    with pytest.raises(ConfigError, match="no agent named 'ghost'"):
        planner.plan_goal(GOAL, "ghost")
    assert q.get_store().count(S.INCOMING) == 0  # nothing was created


def six_task_plan() -> plans.Plan:
    """The plan-building API a tool would call: six tasks, T4 after T2 and T3."""
    plan = plans.draft(GOAL)
    for n in range(1, 7):
        plans.add_task(plan, f"step {n}", criteria=[f"step {n} works"])
    for blocker, dependant in [("T1", "T2"), ("T1", "T3"), ("T2", "T4"), ("T3", "T4")]:
        plans.add_edge(plan, blocker, dependant)
    return plans.add(plan)


def test_edits_are_checked_again_and_a_bad_one_is_not_kept(planned) -> None:
    plan = six_task_plan()
    cycle = invoke("plan", "edit", plan.id, "T1", "--blocked-by", "T4")
    assert cycle.exit_code == 2 and "the blockers form a cycle: T1 → T4 → T2 → T1" in cycle.stderr
    dangling = invoke("plan", "edit", plan.id, "t5", "--blocked-by", "T9")
    assert dangling.exit_code == 2 and "T5 is blocked by T9, which the plan does not have" in (
        dangling.stderr
    )
    long = invoke("plan", "edit", plan.id, "T5", "--title", "x" * 201)
    assert long.exit_code == 2 and "T5: the title is 201 characters long" in long.stderr
    assert plans.load(plan.id) == plan  # none of them was kept
    edited = invoke("plan", "edit", plan.id, "T5", "--title", "step five",
                      "--priority", "P0", "--criterion", "a", "--criterion", "b",
                      "--blocked-by", "T1,T3")  # fmt: skip
    assert edited.exit_code == 0, edited.stderr
    five = plans.task_of(plans.load(plan.id), "T5")
    assert (five.title, five.priority, five.criteria, five.blocked_by) == (
        "step five", "P0", ["a", "b"], ["T1", "T3"]
    )  # fmt: skip
    assert invoke("plan", "drop-task", plan.id, "T3").exit_code == 0
    after = plans.load(plan.id)
    assert [t.key for t in after.tasks] == ["T1", "T2", "T4", "T5", "T6"]
    assert plans.task_of(after, "T4").blocked_by == ["T2"]
    assert plans.task_of(after, "T5").blocked_by == ["T1"]


def test_approving_twice_enqueues_once_and_a_discarded_plan_never(planned) -> None:
    plan = six_task_plan()
    first = plans.approve(plan.id)
    with pytest.raises(IllegalTransition, match=f"{plan.id} was approved already"):
        plans.approve(plan.id)
    again = invoke("plan", "approve", plan.id)
    assert again.exit_code == 1 and "approved already" in again.stderr
    assert q.get_store().count(S.INCOMING) == 6 and len(first) == 6
    other = six_task_plan()
    assert invoke("plan", "discard", other.id).exit_code == 0
    refused = invoke("plan", "approve", other.id)
    assert refused.exit_code == 1 and "is discarded, not a draft" in refused.stderr
    assert q.get_store().count(S.INCOMING) == 6
    listed = invoke("plan", "list").stdout
    assert listed.strip() == "no plans waiting for review"


KILLER = """
import os, signal, sys
from orchestrator.roles import plans; from orchestrator.queue import machine as queue_utils
create, made = queue_utils.create_task, []
def create_then_die(*args, **kwargs):
    if len(made) == 2 and sys.argv[2] == "before":
        os.kill(os.getpid(), signal.SIGKILL)  # the key is journaled, its task not made
    made.append(create(*args, **kwargs))
    if len(made) == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # made, not recorded
    return made[-1]
queue_utils.create_task = create_then_die
plans.approve(sys.argv[1])
"""


@pytest.mark.parametrize(("when", "who"), [("before", "approve"), ("after", "doctor")])
def test_an_approve_killed_half_way_and_run_again_enqueues_each_task_once(
    planned, when, who
) -> None:
    """The next approve, or the sweep (`doctor --repair`, as a scheduler's housekeeping),
    finishes the approval's journal: each task enqueued once."""
    plan = six_task_plan()
    argv = [sys.executable, "-c", KILLER, plan.id, when]
    killed = subprocess.run(argv, env=child_env(planned), capture_output=True, timeout=120)
    assert killed.returncode == -9
    assert plans.load(plan.id).state == "approving"
    journal = q.get_store().journals.get(plans.APPROVAL, plan.id)
    assert journal is not None and len(journal.left) == 5  # tasks 3 to 6, then approved
    assert q.get_store().count(S.INCOMING) == (2 if when == "before" else 3)
    argv = ["plan", "approve", plan.id] if who == "approve" else ["doctor", "--repair"]
    done = octopoid(planned, *argv)
    assert done.returncode == 0, done.stderr
    assert plans.load(plan.id).state == plans.APPROVED
    tasks = q.list_tasks(S.INCOMING)
    assert len(tasks) == 6 and sorted(t.title for t in tasks) == [f"step {n}" for n in range(1, 7)]
    ids = plans.load(plan.id).created_ids
    for t in plans.load(plan.id).tasks:
        assert q.get_task(ids[t.key]).blocked_by == [ids[b] for b in t.blocked_by]


def test_the_plan_building_api_refuses_what_a_tool_could_hand_it(planned) -> None:
    plan = plans.draft(GOAL)
    key = plans.add_task(plan, "step", criteria=[1])  # type: ignore[list-item]
    with pytest.raises(InvalidTask, match="criteria and blocked_by lists of text"):
        plans.validate(plan)
    plans.edit_task(plan, key, criteria=["works"])
    with pytest.raises(InvalidInput, match="has no task 'T7'; its tasks are T1"):
        plans.add_edge(plan, "T7", key)
    with pytest.raises(InvalidInput, match="no field 'owner'"):
        plans.edit_task(plan, key, owner="me")
    with pytest.raises(InvalidTask, match="priority must be one of"):
        plans.edit_task(plan, key, priority="P9")
        plans.add(plan)
    assert plans.all_plans() == []  # nothing invalid is stored
    plans.edit_task(plan, key, priority="P3")
    assert plans.load(plans.add(plan).id).tasks[0].priority == "P3"
    with pytest.raises(InvalidInput, match="is not a plan id"):
        plans.load("../../etc/passwd")


def test_a_planner_drafts_through_its_mcp_tools_each_checked_as_it_comes(
    git_project: Path, monkeypatch
) -> None:
    """An Anthropic API planner (the scripted Messages API) drafts with draft_task and
    draft_dependency; a dependency closing a cycle is refused as a tool error and not kept."""
    from .helpers.fake_messages_api import FakeMessagesAPI, tool_use

    script = [
        tool_use("draft_task", {"title": "schema", "criteria": ["tables exist"]}, tool_id="a"),
        tool_use("draft_task", {"title": "API", "priority": "P0"}, tool_id="b"),
        tool_use("draft_dependency", {"task": "T2", "blocked_by": "T1"}, tool_id="c"),
        tool_use("draft_dependency", {"task": "T1", "blocked_by": "T2"}, tool_id="d"),
        tool_use("finish", {"summary": "planned"}, tool_id="e"),
    ]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-dummy-33333333")
    with FakeMessagesAPI(script) as api:
        doc = {"agents": [{"name": "planner", "role": "plan", "backend": "anthropic",
                           "model": "claude-haiku-4-5", "base_url": api.base_url}]}  # fmt: skip
        (git_project / ".octopoid/agents.yaml").write_text(yaml.safe_dump(doc))
        plan = planner.plan_goal(GOAL)
    assert [(t.key, t.title, t.blocked_by) for t in plan.tasks] == [
        ("T1", "schema", []),
        ("T2", "API", ["T1"]),
    ]
    from orchestrator import config
    from orchestrator.queue import agent_records

    record = agent_records.day_records(config.load_agents())["planner"]
    assert record["attempts_today"] == 1 and record["turns_today"] == 5  # counted in its day
    offered = {tool["name"] for tool in api.requests[0]["tools"]}
    assert {"draft_task", "draft_dependency", "ask_human"} <= offered
    refused = api.requests[4]["messages"][-1]["content"][0]
    assert refused["is_error"] and "cycle" in refused["content"]


@pytest.mark.parametrize(
    "fields",
    [
        {"title": "red \x1b]52;c;aGk=\x07 title"},
        {"title": "ok", "context": "a NUL \x00 inside"},
        {"title": "ok", "criteria": ["fine", "bell \x07"]},
    ],
    ids=["escape-in-title", "nul-in-context", "bell-in-criterion"],
)
def test_an_agent_s_control_characters_never_reach_a_plan_or_a_split(planned, fields) -> None:
    """A planner's (or a breakdown's) text is checked as a person's enqueue is: a task file
    with a NUL would be quarantined at creation, an escape would reach terminals."""
    plan = plans.draft(GOAL)
    plans.add_task(plan, **fields)
    with pytest.raises(InvalidTask, match=r"NUL byte|control character"):
        plans.validate(plan)
    task = q.create_task("too big")
    subtasks = [breakdown.Subtask(**fields)]
    with pytest.raises(InvalidTask, match=r"NUL byte|control character"):
        breakdown.check(task, subtasks)


def test_an_unknown_plan_is_one_line_and_leaves_no_file(git_project: Path) -> None:
    for action in ("approve", "discard", "show"):
        done = invoke("plan", action, "PLAN-99")
        assert done.exit_code == 2 and done.stderr.startswith("octopoid: no plan PLAN-99"), done
    folder = git_project / ".octopoid/runtime/plans"
    assert not folder.exists() or list(folder.iterdir()) == []


def test_plans_stored_at_the_same_instant_get_ids_of_their_own(planned) -> None:
    import threading

    made: list[str] = []

    def store(n: int) -> None:
        plan = plans.draft(f"goal {n}")
        plans.add_task(plan, f"step {n}")
        made.append(plans.add(plan).id)

    threads = [threading.Thread(target=store, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(made) == sorted(f"PLAN-{n}" for n in range(1, 9))
    assert sorted(p.goal for p in plans.all_plans()) == sorted(f"goal {n}" for n in range(8))


def test_a_running_planner_s_task_is_not_requeued_into_a_dead_end(git_project: Path) -> None:
    from orchestrator.model.tasks import PLANNING_ROLE
    from orchestrator.queue import recovery

    carrier = q.create_task("Plan: a goal", role=PLANNING_ROLE)
    assert q.claim_task(PLANNING_ROLE, "planner").id == carrier.id
    with pytest.raises(IllegalTransition, match="run `octopoid plan` again"):
        recovery.requeue_running(carrier.id, "by hand")
    assert q.get_task(carrier.id).state is S.CLAIMED


def test_a_planner_runs_as_every_attempt_does_with_its_memory_and_its_budget(planned) -> None:
    """The one attempt runner runs the planner: its prompt carries the project's memory, and
    an agent whose day's budget is spent starts no attempt (the carrying task says why)."""
    from orchestrator.memory.open import open_memory
    from orchestrator.queue import agent_records

    memory = open_memory()
    memory.write_note("MEMORY-CLUE: exports are written by src/export.py", pinned=True)
    memory.close()
    planner.plan_goal(GOAL)
    [carrier] = q.list_tasks(S.DONE)
    prompt = (config.get_logs_dir() / carrier.label / "attempt-1.prompt.md").read_text()
    assert "## Relevant Memory" in prompt and "MEMORY-CLUE" in prompt
    assert agent_records.day_records(config.load_agents())["planner"]["attempts_today"] == 1

    set_config(planned, budgets={"agent_daily": {"seconds": 0}})
    with pytest.raises(InvalidTask, match="no attempt started") as refused:
        planner.plan_goal(GOAL)
    carrier = q.get_task(str(refused.value).split("octopoid notes TASK-")[1].split("`")[0])
    assert carrier.state is S.FAILED and "spent its budget today" in carrier.headers["ERROR"]
