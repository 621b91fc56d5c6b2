"""The octopoid command, through click's runner and as the installed executable."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from orchestrator import config
from orchestrator.base.processes import hostname
from orchestrator.faces.cli.main import cli
from orchestrator.git import core
from orchestrator.queue import dependencies
from orchestrator.queue import machine as q

from .support import child_env, git, invoke, octopoid


def edit_header(root: Path, task_id: str, key: str, value: str) -> None:
    """Change one header of an incoming task file by hand, as an editor saves it (a new
    file renamed over the old; an edit in place keeps the inode and is seen by a claim's
    re-check or `doctor --rebuild`, not by the claim index that `list` reads)."""
    path = root / f".octopoid/runtime/queue/incoming/TASK-{task_id}.md"
    lines = path.read_text().splitlines(keepends=True)
    lines = [f"{key}: {value}\n" if ln.startswith(f"{key}:") else ln for ln in lines]
    if not any(ln.startswith(f"{key}:") for ln in lines):
        lines.insert(2, f"{key}: {value}\n")
    saved = path.with_name(path.name + ".swp")
    saved.write_text("".join(lines))
    saved.replace(path)


def test_enqueue_prints_the_id_and_list_shows_it(git_project: Path) -> None:
    assert (
        invoke(
            "enqueue",
            "Fix login",
            "--priority",
            "P0",
            "--criterion",
            "tests pass",
            "--context",
            "see auth.py",
            code=0,
        ).output
        == "TASK-1\n"
    )
    assert invoke("enqueue", "Second", "--blocked-by", "TASK-1", code=0).output == "TASK-2\n"
    table = invoke("list", code=0).output
    assert " ".join(table.splitlines()[0].split()) == "ID STATE PRI ROLE ATT BLOCKED TITLE"
    assert "TASK-1  incoming  P0" in table
    rows = json.loads(invoke("list", "incoming", "--json", code=0).output)
    assert [r["id"] for r in rows] == ["TASK-1", "TASK-2"]
    assert json.loads(invoke("list", "--role", "review", "--json", code=0).output) == []


def test_context_file_is_read(git_project: Path, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx.md"
    ctx.write_text("Long context\nwith lines\n")
    invoke("enqueue", "T", "--context-file", str(ctx), code=0)
    assert q.get_task("1").context == "Long context\nwith lines"


def test_show_mentions_notes_and_prints_the_file(git_project: Path) -> None:
    invoke("enqueue", "T", code=0)
    assert "retry notes: none" in invoke("show", "task-1", code=0).output
    q.claim_task(None, "a")
    q.save_task_notes("1", "a", "clue", 0, 1)
    out = invoke("show", "1", code=0).output
    assert "TASK-1 is in claimed" in out and "1 attempt, 0 reviews" in out
    assert "# [TASK-1] T" in out


def test_review_commands_move_tasks(git_project: Path) -> None:
    (git_project / ".octopoid/config.yaml").write_text("merge:\n  strategy: none\n")
    for title in ("a", "b"):
        invoke("enqueue", title, code=0)
    for _ in range(2):
        q.submit_completion(q.claim_task(None, "x"), 1, 1)
    out = invoke("reject", "TASK-1", "--reason", "missing tests", code=0).output
    assert "back in incoming" in out
    assert "missing tests" in invoke("notes", "1", code=0).output
    assert invoke("notes", "1", "--path", code=0).output.strip().endswith("shared/notes/TASK-1.md")
    assert "accepted (branch left in place)" in invoke("accept", "2", code=0).output
    assert "has no retry notes" in invoke("notes", "2", code=0).output
    q.claim_task(None, "x")
    invoke("requeue", "1", code=0)
    q.fail_task(q.claim_task(None, "x"), "boom")
    invoke("retry", "1", code=0)
    counts = json.loads(invoke("status", "--json", code=0).output)["counts"]
    assert counts["incoming"] == 1 and counts["done"] == 1
    assert "incoming     1" in invoke("status", code=0).output


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["show", "99"], 3, "no task TASK-99"),
        (["show", "../../etc/passwd"], 2, "invalid task id"),
        (["accept", "1"], 1, "is in incoming, not provisional"),
        (["reject", "1", "--reason", "x"], 1, "not provisional"),
        (["retry", "1"], 1, "not failed or rejected"),
        (["notes", "a/b"], 2, "invalid task id"),
        (["list", "nowhere"], 2, "Invalid value"),
        (["enqueue", "x", "--priority", "P9"], 2, "Invalid value"),
        (["enqueue", "   "], 2, "a task needs a title"),
        (["enqueue", "x", "--role", "two words"], 2, "role must be a word"),
        (["enqueue", "x", "--blocked-by", "../1"], 2, "invalid task id"),
        (["enqueue", "x", "--context", "a", "--context-file", "f"], 2, "not both"),
        (["pause", "--agent", "nosuch"], 2, "no agent named 'nosuch'"),
        (["resume", "--agent", "nosuch"], 2, "no agent named 'nosuch'"),
    ],
)
def test_errors_are_one_line_and_exit_non_zero(git_project: Path, args, code, message) -> None:
    invoke("enqueue", "T", code=0)
    result = invoke(*args)
    assert result.exit_code == code, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # a clean exit, not a crash


def test_accept_many_reports_each_and_exits_with_the_worst(git_project: Path) -> None:
    (git_project / ".octopoid/config.yaml").write_text("merge:\n  strategy: none\n")
    invoke("enqueue", "a", code=0)
    q.submit_completion(q.claim_task(None, "x"), 1, 1)
    result = invoke("accept", "1", "2", "../x")
    assert "TASK-1 accepted" in result.output
    assert "no task TASK-2" in result.output and "invalid task id" in result.output
    assert result.exit_code == 3


def test_installed_executable_runs_outside_a_project(tmp_path: Path) -> None:
    assert shutil.which("octopoid"), "the console script is not installed (pip install -e .)"
    env = child_env(tmp_path)
    env.pop("OCTOPOID_ROOT")
    proc = octopoid(None, "list", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "octopoid init" in proc.stderr
    assert "Traceback" not in proc.stderr
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "first")
    steps = [["init"], ["enqueue", "From the shell"], ["list", "--json"], ["show", "TASK-1"]]
    outs = [octopoid(None, *s, cwd=tmp_path, env=env, check=True).stdout for s in steps]
    assert outs[1] == "TASK-1\n" and json.loads(outs[2])[0]["title"] == "From the shell"


def test_init_outside_a_git_work_tree_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    env = child_env(tmp_path)
    env.pop("OCTOPOID_ROOT")
    env["GIT_CEILING_DIRECTORIES"] = str(tmp_path.parent)  # no repository above tmp_path
    proc = octopoid(None, "init", cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "not a git work tree" in proc.stderr and "git init" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / ".octopoid").exists()


def test_init_below_the_top_of_a_repository_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    result = invoke("init")
    assert result.exit_code == 2 and "inside the git work tree" in result.output
    assert not (tmp_path / "sub" / ".octopoid").exists()


def test_init_says_whether_agents_can_be_sandboxed_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sandbox: bwrap` is the default; init says whether bubblewrap works here, and what
    to do when it does not (agents would not start)."""
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "first")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OCTOPOID_ROOT", str(tmp_path))
    monkeypatch.setenv("OCTOPOID_BWRAP", str(tmp_path / "no-bwrap-here"))
    said = invoke("init", code=0).output
    assert f"sandbox unavailable: {tmp_path / 'no-bwrap-here'} is not installed" in said
    assert "config.yaml says `sandbox: none`" in said
    assert config.load_config()["sandbox"]["mode"] == "bwrap"  # the user's choice to make


def test_a_repository_on_master_gets_tasks_based_on_master(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git(tmp_path, "init", "-q", "-b", "master")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "first")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OCTOPOID_ROOT", str(tmp_path))
    assert "(master)" in invoke("init", code=0).output
    invoke("enqueue", "Works on master", code=0)
    assert q.get_task("1").branch == "master"
    result = invoke("enqueue", "On a branch that is not there", "--branch", "main")
    assert result.exit_code == 2 and "no branch 'main'" in result.output
    assert [t.id for t in q.list_tasks("incoming")] == ["1"]


def test_agents_lists_state_and_problems(git_project: Path) -> None:
    (git_project / ".octopoid/agents.yaml").write_text(
        "agents:\n  - {name: c1, role: implement, backend: claude-code,"
        " claude_path: no-such-claude}\n  - {name: s1, role: implement, backend: command,"
        ' argv: ["true"]}\n'
    )
    invoke("enqueue", "t", code=0)
    q.claim_task(None, "s1")
    result = invoke("agents")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].split()[:5] == ["NAME", "ROLE", "BACKEND", "NETWORK", "STATE"]
    assert "sandbox: bwrap; each attempt works in its own clone" in result.output
    assert any(ln.startswith("c1") and " idle " in ln for ln in lines)
    assert any(ln.startswith("s1") and "running TASK-1" in ln for ln in lines)
    assert "agent c1: cannot run: 'no-such-claude' is not on PATH" in result.output
    assert "npm install -g @anthropic-ai/claude-code" in result.output
    invoke("pause", "--agent", "c1", code=0)
    rows = json.loads(invoke("agents", "--json", code=0).output)
    assert [r["state"] for r in rows] == ["paused", "running TASK-1"]
    assert {(r["sandbox"], r["network"]) for r in rows} == {("bwrap", "allow")}


def test_a_command_agent_cost_shows_as_unknown_not_zero(git_project: Path) -> None:
    (git_project / ".octopoid/agents.yaml").write_text(
        "agents:\n  - {name: c1, role: implement, backend: claude-code}\n"
        '  - {name: s1, role: implement, backend: command, argv: ["true"]}\n'
    )
    rows = {r["name"]: r for r in json.loads(invoke("agents", "--json", code=0).output)}
    assert rows["s1"]["cost_today_usd"] is None and rows["c1"]["cost_today_usd"] == 0.0
    lines = invoke("agents", code=0).output.splitlines()
    assert next(ln for ln in lines if ln.startswith("s1")).endswith(" -")
    assert next(ln for ln in lines if ln.startswith("c1")).endswith("$0.00")


def test_resume_says_what_is_still_paused(git_project: Path) -> None:
    (git_project / ".octopoid/agents.yaml").write_text(
        "agents:\n  - {name: a1, role: implement, backend: command, argv: [x]}\n"
        "  - {name: a2, role: implement, backend: command, argv: [x], paused: true}\n"
    )
    assert invoke("pause", "--agent", "a1", code=0).output == "paused a1\n"
    invoke("pause", code=0)
    out = invoke("resume", code=0).output
    assert out.startswith("resumed the system, but still paused:")
    assert "a1 (`octopoid resume --agent a1`)" in out
    assert "a2 (paused: true in agents.yaml)" in out
    invoke("pause", code=0)
    out = invoke("resume", "--agent", "a1", code=0).output
    assert "the whole system (`octopoid resume`)" in out and "a1 (" not in out
    invoke("resume", code=0)
    (git_project / ".octopoid/agents.yaml").write_text(
        "agents:\n  - {name: a1, role: implement, backend: command, argv: [x]}\n"
    )
    assert invoke("resume", code=0).output == "resumed the system\n"


def test_show_and_status_report_usage(git_project: Path) -> None:
    invoke("enqueue", "t", code=0)
    task = q.claim_task(None, "a")
    q.record_usage(task, 37, 0.41)
    q.record_usage(task, 3, 0.09)
    assert "usage: 40 turns, $0.50 across 1 attempt\n" in invoke("show", "1", code=0).output
    out = invoke("status", code=0).output
    assert "usage: 40 turns, $0.50 in total" in out and "TASK-1" in out


def test_diff_and_worktrees_commands(git_project: Path) -> None:
    from .support import provisional_with_commit

    tid = provisional_with_commit(git_project)
    assert "+new" in invoke("diff", tid, code=0).output
    listed = invoke("worktrees", code=0).output
    assert listed.splitlines()[1].split() == [f"TASK-{tid}", "provisional"]
    assert "nothing to prune" in invoke("worktrees", "--prune", code=0).output
    (git_project / ".octopoid/config.yaml").write_text("merge:\n  strategy: none\n")
    invoke("accept", tid, code=0)
    pruned = invoke("worktrees", "--prune", code=0).output
    assert f"removed TASK-{tid}; kept agent/TASK-{tid}" in pruned
    assert "no worktrees" in invoke("worktrees", code=0).output
    assert "+new" in invoke("diff", tid, code=0).output  # the branch stays for its pull request
    core.open_repo().git.branch("-D", f"agent/TASK-{tid}")
    result = invoke("diff", tid)
    assert result.exit_code == 1
    assert result.output == f"octopoid: TASK-{tid} is done; its branch was merged and removed\n"


def test_diff_of_a_task_never_attempted_says_so(git_project: Path) -> None:
    invoke("enqueue", "t", code=0)
    result = invoke("diff", "1")
    assert result.exit_code == 1 and "TASK-1 has no branch yet (it is in incoming)" in result.output


def test_list_and_show_name_what_blocks_a_task(git_project: Path) -> None:
    invoke("enqueue", "first", code=0)
    invoke("enqueue", "second", "--blocked-by", "1", code=0)
    invoke("enqueue", "third", "--blocked-by", "TASK-2", "--blocked-by", "task-1", code=0)
    q.claim_task(None, "a")
    lines = invoke("list", code=0).output.splitlines()
    assert next(ln for ln in lines if ln.startswith("TASK-2")).split()[5] == "TASK-1"
    assert next(ln for ln in lines if ln.startswith("TASK-3")).split()[5] == "TASK-2,TASK-1"
    assert next(ln for ln in lines if ln.startswith("TASK-1")).split()[5] == "-"
    assert "stuck" not in "\n".join(lines)
    assert "blocked by TASK-1 (in claimed)\n" in invoke("show", "2", code=0).output
    rows = {r["id"]: r for r in json.loads(invoke("list", "--json", code=0).output)}
    assert rows["TASK-3"]["blocked_by"] == ["TASK-2", "TASK-1"] and rows["TASK-3"]["stuck"] is None


def test_a_task_whose_blocker_failed_is_stuck_and_so_is_what_waits_on_it(
    git_project: Path,
) -> None:
    invoke("enqueue", "first", code=0)
    invoke("enqueue", "second", "--blocked-by", "1", code=0)
    invoke("enqueue", "third", "--blocked-by", "2", code=0)
    q.fail_task(q.claim_task(None, "a"), "boom")
    out = invoke("list", code=0).output
    held = "which failed: `octopoid retry TASK-1` releases it once TASK-1 succeeds"
    assert f"TASK-2 is stuck: held by TASK-1, {held}" in out
    assert f"TASK-3 is stuck: held by TASK-1 (through TASK-2), {held}" in out
    assert "TASK-1 (in failed); stuck:" in invoke("show", "2", code=0).output
    assert dependencies.blocked_summary() == {
        "count": 2,
        "waiting": ["TASK-2", "TASK-3"],
        "stuck": [
            {"id": "TASK-2", "why": f"held by TASK-1, {held}"},
            {"id": "TASK-3", "why": f"held by TASK-1 (through TASK-2), {held}"},
        ],
    }
    invoke("retry", "1", code=0)
    assert "stuck" not in invoke("list", code=0).output


def test_a_cycle_made_by_hand_is_named_with_its_members(git_project: Path) -> None:
    for title in ("a", "b", "c", "d"):
        invoke("enqueue", title, code=0)
    edit_header(git_project, "1", "BLOCKED_BY", "TASK-2")
    edit_header(git_project, "2", "BLOCKED_BY", "TASK-3")
    edit_header(git_project, "3", "BLOCKED_BY", "TASK-1")
    edit_header(git_project, "4", "BLOCKED_BY", "TASK-3, TASK-99")
    out = invoke("list", code=0).output
    assert "TASK-1 is stuck: its blockers form a cycle, TASK-1 → TASK-2 → TASK-3 → TASK-1" in out
    assert "TASK-2 is stuck: its blockers form a cycle, TASK-2 → TASK-3 → TASK-1 → TASK-2" in out
    assert "TASK-4 is stuck: TASK-99 does not exist (edit BLOCKED_BY)" in out
    assert "TASK-3,TASK-99 (stuck)" in out
    assert q.claim_task(None, "a") is None  # nothing runnable: the report is right to warn


def test_enqueue_refuses_blockers_that_could_never_finish(git_project: Path) -> None:
    invoke("enqueue", "first", code=0)
    incoming = git_project / ".octopoid/runtime/queue/incoming"
    (incoming / "TASK-7.md").write_text("not a task\n")
    q.list_tasks("incoming")  # finds TASK-7 unreadable: quarantined
    for blocker, message in [
        ("TASK-2", "--blocked-by TASK-2: no such task"),
        ("7", "--blocked-by TASK-7: that task is quarantined"),
        ("-x", "invalid task id"),
    ]:
        result = invoke("enqueue", "later", "--blocked-by", blocker)
        assert result.exit_code == 2 and message in result.output, result.output
    assert [t.id for t in q.list_tasks("incoming")] == ["1"]


def test_memory_show_takes_a_task_id(git_project: Path) -> None:
    invoke("enqueue", "t", code=0)
    assert invoke("memory", "show", "TASK-1", code=0).output == "no notes.TASK-1.md yet\n"
    env = {"OCTOPOID_NOTES_ID": "TASK-1"}
    invoke("memory", "add", "File Knowledge", "auth lives in a.py", env=env)
    assert "- [TASK-1 by human] auth lives in a.py" in invoke("memory", "show", "1", code=0).output
    result = invoke("memory", "show", "1", "--notes-id", "TASK-1")
    assert result.exit_code == 2 and "not both" in result.output


def test_every_face_says_whether_agents_are_sandboxed(git_project: Path) -> None:
    walled = json.loads(invoke("status", "--json", code=0).output)["sandbox"]
    assert walled == {
        "mode": "bwrap",
        "usable": walled["usable"],
        "summary": walled["summary"],
        "open": [],
    } and walled["summary"].startswith(("sandbox: bwrap;", "sandbox unavailable:"))
    (git_project / ".octopoid/config.yaml").write_text("sandbox: none\n")
    for command in ("status", "agents"):
        assert "sandbox: none; agents are NOT sandboxed" in invoke(command, code=0).output
    assert json.loads(invoke("status", "--json", code=0).output)["sandbox"]["mode"] == "none"
    assert "NOT sandboxed" in invoke("doctor", code=0).output
    (git_project / ".octopoid/config.yaml").write_text("sandbox: maybe\n")
    result = invoke("status")
    assert result.exit_code == 2 and "'sandbox.mode' must be one of bwrap, none" in result.output


#: The arguments each command that takes a task id needs besides it (a new such command
#: must be added here, so it is walked too).
NEEDS_ALSO = {
    "show": [],
    "notes": [],
    "diff": [],
    "checks": [],
    "accept": [],
    "reject": ["--reason", "x"],
    "close": ["--reason", "x"],
    "retry": [],
    "requeue": [],
    "approve": [],
    "answer": ["the answer"],
    "preview": [],
    "say": ["a message"],
    "stop": ["--reason", "x"],
    "attach": [],
    "memory show": [],
    "memory promote": [],
}


def _commands_taking_a_task_id(group: click.Group, prefix: str = "") -> Iterator[str]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # lazy groups too: each command is imported here
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _commands_taking_a_task_id(command, f"{prefix}{name} ")
        elif any(p.name in ("task_id", "task_ids") for p in command.params):
            yield f"{prefix}{name}"


def test_every_command_that_takes_a_task_id_exits_3_for_an_unknown_one(
    git_project: Path,
) -> None:
    assert sorted(_commands_taking_a_task_id(cli)) == sorted(NEEDS_ALSO)
    variants = [[*name.split(), "TASK-999", *also] for name, also in NEEDS_ALSO.items()]
    variants += [["notes", "999", "--json"], ["notes", "999", "--path"], ["diff", "999", "--stat"]]
    variants += [["preview", "999", "--stop"]]
    for args in variants:
        result = invoke(*args)
        assert result.exit_code == 3, (args, result.output)
        assert result.output == "octopoid: no task TASK-999 in any queue\n", args


def test_blocked_by_takes_commas_as_the_header_does_and_repeats(git_project: Path) -> None:
    for title in ("a", "b", "c"):
        invoke("enqueue", title, code=0)
    invoke("enqueue", "both", "--blocked-by", "TASK-1,TASK-2", code=0)
    invoke("enqueue", "all", "--blocked-by", "1", "--blocked-by", "TASK-2, task-3", code=0)
    assert q.get_task("4").blocked_by == ["1", "2"]
    assert q.get_task("5").blocked_by == ["1", "2", "3"]
    result = invoke("enqueue", "no", "--blocked-by", "1,TASK-9")
    assert result.exit_code == 2 and "--blocked-by TASK-9: no such task" in result.output


def test_doctor_exits_2_while_the_config_is_invalid(git_project: Path) -> None:
    assert invoke("doctor", code=0).exit_code == 0
    (git_project / ".octopoid/agents.yaml").write_text("max_attempts: many\n")
    result = invoke("doctor")
    assert result.exit_code == 2 and "config invalid:" in result.output


def test_close_says_how_the_task_was_closed_once(git_project: Path) -> None:
    invoke("enqueue", "a", code=0)
    invoke("enqueue", "b", code=0)
    assert invoke("close", "1", "--reason", "done elsewhere", code=0).output == (
        "TASK-1 closed as done (nothing merged)\n"
    )
    assert invoke("close", "2", "--wont-do", "--reason", "no", code=0).output == (
        "TASK-2 closed as wont-do (nothing merged)\n"
    )


def test_status_names_the_machine_that_holds_each_claim(project: Path) -> None:
    tid = q.create_task("held").id
    q.claim_task(None, "impl-1")
    host = hostname()
    assert f"claimed TASK-{tid} by impl-1 on {host} since" in invoke("status", code=0).output
    (claim,) = json.loads(invoke("status", "--json", code=0).output)["claimed"]
    assert claim["host"] == host


def test_every_face_says_whose_network_is_open_and_host_still_means_it(git_project: Path) -> None:
    """``host`` (what config.yaml said before the proxy) keeps its meaning, ``open``, and
    every face says so plainly, as it says ``sandbox: none``; doctor says how to move on."""
    (git_project / ".octopoid/agents.yaml").write_text(
        "agents:\n  - {name: c1, role: implement, backend: claude-code}\n"
        '  - {name: s1, role: implement, backend: command, argv: ["true"],'
        " sandbox: {network: none}}\n"
    )
    assert "OPEN" not in invoke("status", code=0).output + invoke("doctor", code=0).output
    (git_project / ".octopoid/config.yaml").write_text("sandbox: {network: host}\n")
    for command in ("status", "agents", "doctor"):
        said = invoke(command, code=0).output
        assert "network OPEN for c1, the checks: they reach this machine's own" in said, said
    rows = {r["name"]: r["network"] for r in json.loads(invoke("agents", "--json", code=0).output)}
    assert rows == {"c1": "open", "s1": "none"}
    doctor = invoke("doctor", code=0).output
    assert "`network: host` is the old name of `open`" in doctor
    assert "network of s1 (command): none" in doctor
