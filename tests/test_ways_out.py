"""Every state a task can reach has a way out through the CLI (and the review page): retry
from failed, rejected and breakdown; close without a merge as done or won't do; several ids
at once for retry, requeue, reject and close, each failing alone. The commands run in this
process (click's runner: the same code, exit code, stdout and stderr) but for the race of two
installed ones."""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
import pytest

from orchestrator.memory.notes import NotesManager
from orchestrator.memory.store import MemoryStore
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.review import finishing

from .support import (
    OCTOPOID,
    child_env,
    invoke,
    provisional_with_commit,
    remembered,
    write_agents,
)

S = TaskState


def task_in(state: TaskState, title: str = "work") -> str:
    """A task put in ``state`` by octopoid's own moves."""
    if state is S.PROVISIONAL:
        return provisional_with_commit(Path.cwd(), f"{title}.txt")
    tid = q.create_task(title).id
    if state is S.INCOMING:
        return tid
    claimed = q.claim_task(None, "agent")
    assert claimed.id == tid
    if state is S.FAILED:
        q.fail_task(claimed, "it broke")
    elif state is S.REJECTED:
        q.reject_task(claimed, "duplicate", "same as TASK-0")
    elif state is S.BREAKDOWN:
        q.recycle_to_breakdown(claimed, "burned out twice")
    return tid


WAYS_OUT = {
    S.INCOMING: ["close", "--wont-do", "--reason", "not needed"],
    S.CLAIMED: ["requeue"],
    S.PROVISIONAL: ["accept"],
    S.FAILED: ["retry"],
    S.REJECTED: ["retry"],
    S.BREAKDOWN: ["retry"],
}


def test_every_state_but_done_has_a_cli_way_out_and_close_ends_any_unclaimed_one(git_project):
    write_agents(git_project)
    for state in (S.INCOMING, S.PROVISIONAL, S.FAILED, S.REJECTED, S.BREAKDOWN):
        tid = task_in(state, state.value)
        assert q.get_task(tid).state is state
        done = invoke("close", tid, "--reason", "done by hand in the release branch")
        assert done.exit_code == 0, done.stderr
        task = q.get_task(tid)
        assert task.state is S.DONE and task.headers["CLOSED"] == "done"
        assert task.moves()[-1] == (state.value, "done")
    for state, command in WAYS_OUT.items():
        tid = task_in(state, f"again-{state.value}")
        assert invoke(command[0], tid, *command[1:]).exit_code == 0, state
        assert q.get_task(tid).state is not state
        if q.get_task(tid).state is S.INCOMING:  # out of the next task_in's claim
            q.close_task(tid, "wont-do", "test over")


def test_a_breakdown_task_is_retried_whole_with_fresh_attempts_and_its_notes(git_project):
    tid = task_in(S.BREAKDOWN)
    q.save_task_notes(tid, "agent", "ran out of turns in the parser", 1, 1)
    done = invoke("retry", f"task-{tid}")
    assert done.exit_code == 0 and done.stdout == f"TASK-{tid} back in incoming\n"
    task = q.get_task(tid)
    assert task.state is S.INCOMING and "PHASE" not in task.headers
    assert q.claim_task(None, "agent").id == tid  # claimable by an implementer again
    assert "ran out of turns" in (q.get_task_notes(tid) or "")


def test_several_ids_each_succeed_or_fail_alone_with_the_worst_exit_code(git_project):
    failed = [task_in(S.FAILED, f"f{i}") for i in range(3)]
    done = invoke("retry", failed[0], "TASK-999", failed[1], "../x", failed[2])
    assert done.exit_code == 3  # not found (3) is worse than a bad id (2)
    assert all(q.get_task(t).state is S.INCOMING for t in failed)
    assert done.stdout.count("back in incoming") == 3
    assert "no task TASK-999" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 2


def test_reject_and_requeue_take_several_ids(git_project):
    write_agents(git_project)
    tids = [provisional_with_commit(git_project, f"r{i}.txt") for i in range(2)]
    done = invoke("reject", *tids, "--reason", "needs tests")
    assert done.exit_code == 0, done.stderr
    assert all(q.get_task(t).state is S.INCOMING for t in tids)
    for tid in tids:
        assert "needs tests" in (q.get_task_notes(tid) or "")
    claimed = [q.claim_task(None, "agent").id for _ in tids]
    done = invoke("requeue", *claimed, "--reason", "machine reboot")
    assert done.exit_code == 0, done.stderr
    assert all(q.get_task(t).state is S.INCOMING for t in claimed)


def test_line_comments_with_several_ids_reject_nothing(git_project):
    tids = [provisional_with_commit(git_project, f"c{i}.txt") for i in range(2)]
    done = invoke("reject", *tids, "--reason", "x", "--comment", "c0.txt:1:why")
    assert done.exit_code == 2 and "one task" in done.stderr
    assert all(q.get_task(t).state is S.PROVISIONAL for t in tids)


def test_closing_as_done_keeps_the_learnings_and_won_t_do_drops_them(git_project):
    tids = {kind: provisional_with_commit(git_project, f"{kind}.txt") for kind in ("done", "no")}
    for kind, tid in tids.items():
        remembered(tid, f"fact from the {kind} task")
    assert invoke("close", tids["done"], "--reason", "nothing to change").exit_code == 0
    wont = invoke("close", tids["no"], "--wont-do", "--reason", "out of scope")
    assert wont.exit_code == 0 and "closed as wont-do" in wont.stdout
    assert [n["content"] for n in MemoryStore().search_notes("fact")] == ["fact from the done task"]
    heads = [h.name for h in git.Repo(git_project).heads]
    for kind, tid in tids.items():
        task = q.get_task(tid)
        assert task.headers["CLOSED"] == ("done" if kind == "done" else "wont-do")
        assert (
            "MERGED" not in task.headers
            and not NotesManager(notes_id=f"TASK-{tid}").notes_file.exists()
        )
        assert f"agent/TASK-{tid}" in heads  # kept: nothing was merged
        assert not (git_project / ".octopoid/runtime/worktrees" / f"TASK-{tid}").exists()
    assert f"{'done'}.txt" not in git.Repo(git_project).head.commit.tree


@pytest.mark.parametrize("why", ["claimed", "no reason", "half accepted", "closed already"])
def test_close_refuses_what_it_must_not_end(git_project, why):
    tid = task_in(S.CLAIMED if why == "claimed" else S.PROVISIONAL, "w")
    reason = "  " if why == "no reason" else "not needed"
    if why == "half accepted":
        steps = [finishing.MERGE, finishing.MOVE]  # an accept killed during its merge
        finishing.begin(finishing.ACCEPT, tid, steps, {"by": "alice", "before": "abc"})
    if why == "closed already":
        assert invoke("close", tid, "--reason", "first").exit_code == 0
    done = invoke("close", tid, "--reason", reason)
    assert done.exit_code in (1, 2) and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1
    needle = {"claimed": "octopoid requeue", "no reason": "needs a reason"}
    assert needle.get(why, "in done" if why == "closed already" else "accept") in done.stderr
    if why == "closed already":  # ended once: one History line says so
        assert sum("closed as" in line for line in q.get_task(tid).history) == 1
    else:
        assert q.get_task(tid).state is not S.DONE


def test_two_closes_of_one_task_at_the_same_instant_end_it_once(git_project, tmp_path):
    """Both start together through the installed CLI: one closes (its learnings promoted
    once), the other is refused in one line, and no journal is left."""
    tid = provisional_with_commit(git_project)
    remembered(tid, "learned once, kept once")
    go = tmp_path / "go"
    wait = f"while [ ! -e {go} ]; do :; done; exec {OCTOPOID} close {tid} --reason race"
    procs = [
        subprocess.Popen(
            ["sh", "-c", wait], cwd=git_project, env=child_env(git_project),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(2)
    ]  # fmt: skip
    go.touch()
    results = [(p.wait(60), *p.communicate()) for p in procs]
    assert sorted(code for code, _, _ in results) == [0, 1], results
    (refused,) = [err for code, _, err in results if code]
    assert refused.count("\n") == 1 and "Traceback" not in refused
    assert "is being closed" in refused or "is in done" in refused, refused
    assert q.get_task(tid).state is S.DONE
    assert [n["content"] for n in MemoryStore().search_notes("learned")] == [
        "learned once, kept once"
    ]
    assert not finishing.pending(tid) and not q.get_store().journals.pending()
