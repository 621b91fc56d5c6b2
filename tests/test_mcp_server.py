"""`octopoid mcp` driven as a person's Claude Code drives it: the installed command started
by the SDK's own stdio client, in a real project with real attempts. Every tool once, the
resources, bad arguments answered as tool errors with the CLI's line, and a stale accept."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import git
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from orchestrator.model.exceptions import InvalidTaskId
from orchestrator.model.tasks import TaskState, normalize_task_id
from orchestrator.queue import machine as q
from orchestrator.queue import task_notes

from .support import OCTOPOID, commit_on_branch, octopoid, run_claimed, set_config, write_agents

T = TypeVar("T")
SECRET = "s3cr3t-value-for-the-mcp-test"  # a value of a secret-looking variable
TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"  # a GitHub token by its shape


def session(root: Path, steps: Callable[[Client], Awaitable[T]]) -> T:
    """Run ``steps`` against `octopoid mcp` started in ``root`` over stdio; the server is
    stopped (stdin closed) when they end."""
    params = StdioServerParameters(
        command=OCTOPOID,
        args=["mcp"],
        env={"OCTOPOID_ROOT": str(root), "OCTO_TEST_API_KEY": SECRET},
        cwd=root,
    )

    async def main() -> T:
        async with Client(params, read_timeout_seconds=120) as client:
            return await steps(client)

    return anyio.run(main)


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's answer, which must not be an error."""
    done = await client.call_tool(tool, arguments)
    assert not done.is_error, text_of(done)
    assert done.structured_content is not None
    return done.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    """A tool's error, which it must be: its one text block."""
    done = await client.call_tool(tool, arguments)
    assert done.is_error, done
    message = text_of(done)
    assert "Traceback" not in message, message
    return message


def text_of(done: CallToolResult) -> str:
    assert len(done.content) == 1
    return done.content[0].text  # type: ignore[union-attr]


def cli_error(root: Path, *args: str) -> str:
    """The one line `octopoid ARGS` prints on stderr, without its ``octopoid: ``."""
    done = octopoid(root, *args, timeout=60)
    assert done.returncode != 0
    line = done.stderr
    assert line.startswith("octopoid: ") and line.endswith("\n"), line
    return line.removeprefix("octopoid: ").removesuffix("\n")


def attempted(title: str) -> str:
    """A task made, claimed and run by the scripted agent (it commits ``TASK-<id>.txt``): it waits
    in provisional."""
    created = q.create_task(title)
    claimed = q.claim_task(None, "impl-1")
    assert claimed is not None and claimed.id == created.id
    run_claimed(claimed, "impl-1")
    assert q.get_task(created.id).state is TaskState.PROVISIONAL
    return created.id


def head(root: Path, task_id: str) -> str:
    return git.Repo(root).commit(f"agent/TASK-{task_id}").hexsha


@pytest.fixture
def project_with_agent(git_project: Path) -> Path:
    write_agents(git_project)
    set_config(git_project, sandbox="none")
    return git_project


def test_every_tool_and_the_resources(project_with_agent: Path) -> None:
    root = project_with_agent
    to_accept, to_reject = attempted("first change"), attempted("second change")
    failed = q.create_task("fails").id
    q.fail_task(q.claim_task(None, "impl-1"), "it broke")
    claimed = q.create_task("running").id
    assert q.claim_task(None, "impl-1").id == claimed
    heads = {tid: head(root, tid) for tid in (to_accept, to_reject)}
    task_notes.put_notes(failed, f"# notes\n\nthe agent printed {TOKEN} and {SECRET}\n")

    async def steps(client: Client) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        tools = (await client.list_tools()).tools
        seen["tools"] = sorted(t.name for t in tools)
        seen["read_only"] = {t.name for t in tools if t.annotations.read_only_hint}
        seen["enqueued"] = await call(
            client,
            "enqueue",
            title="follow-up",
            context="after the first",
            criteria=["it works"],
            priority="P0",
            blocked_by=[f"TASK-{to_accept}"],
            checks=["true"],
            role="implement",
            branch="main",
        )
        new = seen["enqueued"]["id"]
        seen["list"] = await call(client, "list", state="provisional", limit=1)
        seen["page2"] = await call(client, "list", state="provisional", limit=1, page=2)
        seen["show"] = await call(client, "show", task_id=new)
        seen["shown"] = await call(client, "show", task_id=to_accept)
        seen["diff"] = await call(client, "diff_summary", task_id=to_accept)
        seen["accept"] = await call(
            client, "accept", task_id=to_accept, expect=heads[to_accept][:12]
        )
        comment = {"path": f"TASK-{to_reject}.txt", "line": 1, "text": "say why"}
        seen["reject"] = await call(
            client,
            "reject",
            task_id=f"task-{to_reject}",
            reason="needs a reason",
            comments=[comment],
            expect=heads[to_reject],
        )
        seen["notes"] = await call(client, "notes", task_id=to_reject)
        seen["secret_notes"] = await call(client, "notes", task_id=failed)
        seen["retry"] = await call(client, "retry", task_id=failed)
        seen["say"] = await call(client, "say", task_id=claimed, text="use the v2 endpoint")
        seen["requeue"] = await call(client, "requeue", task_id=claimed, reason="not now")
        seen["close"] = await call(client, "close", task_id=new, reason="dup", wont_do=True)
        seen["added"] = await call(
            client, "memory_add", section="Important Facts", text="parsing lives in parse.py"
        )
        seen["hits"] = await call(client, "memory_search", query="parse.py", limit=5)
        seen["status"] = await call(client, "status")
        listed = (await client.list_resources()).resources
        seen["resources"] = {str(r.uri) for r in listed}
        tasks = await client.read_resource("octopoid://tasks")
        seen["tasks"] = json.loads(tasks.contents[0].text)  # type: ignore[union-attr]
        one = await client.read_resource(f"octopoid://tasks/TASK-{to_reject}")
        seen["file"] = one.contents[0].text  # type: ignore[union-attr]
        return seen

    seen = session(root, steps)
    assert seen["tools"] == sorted(
        [
            *("enqueue", "list", "show", "notes", "diff_summary", "accept", "reject"),
            *("requeue", "retry", "close", "memory_search", "memory_add", "status", "say"),
        ]
    )
    assert seen["say"]["running"] is True and seen["say"]["by"] == "mcp"
    assert "use the v2 endpoint" in q.get_task_notes(claimed)
    assert seen["read_only"] == {"list", "show", "notes", "diff_summary", "memory_search", "status"}
    new = seen["enqueued"]["id"]
    assert seen["enqueued"]["priority"] == "P0" and seen["enqueued"]["state"] == "incoming"
    assert [t["id"] for t in seen["list"]["tasks"]] == [f"TASK-{to_accept}"]
    assert seen["list"]["more"] == {"provisional": 1}
    assert [t["id"] for t in seen["page2"]["tasks"]] == [f"TASK-{to_reject}"]
    assert seen["show"]["blocked_by"] == [f"TASK-{to_accept}"]
    assert "- [ ] it works" in seen["show"]["file"] and "after the first" in seen["show"]["file"]
    assert seen["shown"]["head"] == heads[to_accept] and seen["shown"]["attempts"] == 1
    assert seen["diff"]["files"] == [
        {
            "path": f"TASK-{to_accept}.txt",
            "added": 1,
            "removed": 0,
            "binary": False,
            "old_path": None,
            "size": None,
        }
    ]
    assert seen["accept"]["state"] == "done" and seen["accept"]["strategy"] == "merge"
    assert seen["reject"] == {"id": f"TASK-{to_reject}", "state": "incoming", "comments": 1}
    assert "needs a reason" in seen["notes"]["notes"] and "say why" in seen["notes"]["notes"]
    secret_notes = seen["secret_notes"]["notes"]
    assert TOKEN not in secret_notes and SECRET not in secret_notes
    assert "[REDACTED:github-token]" in secret_notes
    assert "[REDACTED:OCTO_TEST_API_KEY]" in secret_notes
    assert seen["retry"]["state"] == "incoming"
    assert seen["requeue"]["state"] == "incoming" and "runner" in seen["requeue"]["how"]
    assert seen["close"]["closed_as"] == "wont-do" and seen["close"]["state"] == "done"
    assert seen["added"]["added"] is True
    assert [h["content"] for h in seen["hits"]["hits"]] == ["parsing lives in parse.py"]
    assert seen["status"]["counts"]["done"] == 2 and seen["status"]["scheduler"]["running"] is False
    assert {"octopoid://tasks", f"octopoid://tasks/TASK-{to_reject}"} <= seen["resources"]
    assert f"TASK-{to_reject}" in {t["id"] for t in seen["tasks"]["tasks"]}
    assert seen["file"].startswith(f"# [TASK-{to_reject}] second change\n")
    # what the tools did, seen from outside the server
    assert q.get_task(to_accept).state is TaskState.DONE
    assert (root / f"TASK-{to_accept}.txt").exists()  # merged into main
    assert q.get_task(new).headers["CLOSED"] == "wont-do"
    for tid in (to_reject, failed, claimed):
        assert q.get_task(tid).state is TaskState.INCOMING


def test_a_stale_head_is_refused_as_accept_expect_refuses_it(project_with_agent: Path) -> None:
    root = project_with_agent
    tid = attempted("judged once")
    seen = head(root, tid)
    commit_on_branch(root, tid, {"later.txt": b"more\n"}, "a later attempt's commit")

    async def steps(client: Client) -> tuple[str, str]:
        return (
            await refused(client, "accept", task_id=tid, expect=seen),
            await refused(client, "reject", task_id=tid, reason="no", expect=seen[:7]),
        )

    accept_error, reject_error = session(root, steps)
    assert accept_error == cli_error(root, "accept", tid, "--expect", seen)
    assert "branch moved" in accept_error
    assert reject_error == cli_error(root, "reject", tid, "--reason", "no", "--expect", seen[:7])
    assert q.get_task(tid).state is TaskState.PROVISIONAL
    assert not (root / "later.txt").exists()


HOSTILE_IDS = ["../x", "TASK-1/../../etc", "-1", "1/2", "TASK-", "９", "%2e%2e"]


def test_bad_arguments_are_tool_errors(git_project: Path) -> None:
    root = git_project
    tid = q.create_task("exists").id

    async def steps(client: Client) -> dict[str, Any]:
        seen: dict[str, Any] = {"unknown": await refused(client, "show", task_id="999")}
        seen["hostile"] = [await refused(client, "show", task_id=raw) for raw in HOSTILE_IDS]
        seen["nul"] = await refused(client, "notes", task_id="1\x00")
        seen["long_title"] = await refused(client, "enqueue", title="x" * 300)
        seen["nul_context"] = await refused(client, "enqueue", title="t", context="a\x00b")
        seen["huge_context"] = await refused(client, "enqueue", title="t", context="y" * 1_100_000)
        seen["no_blocker"] = await refused(client, "enqueue", title="t", blocked_by=["TASK-77"])
        seen["not_provisional"] = await refused(client, "accept", task_id=tid)
        seen["bad_expect"] = await refused(client, "accept", task_id=tid, expect="zzz")
        seen["blank_reason"] = await refused(client, "reject", task_id=tid, reason="  ")
        seen["types"] = [
            await refused(client, "enqueue", title=5),
            await refused(client, "list", page="second"),
            await refused(client, "list", state="nowhere"),
            await refused(client, "show", task_id=["1"]),
            await refused(client, "show"),
            await refused(client, "reject", task_id=tid, reason="r", comments=[{"line": 1}]),
            await refused(client, "close", task_id=tid, reason="r", wont_do="perhaps"),
        ]
        seen["resources"] = []
        for uri in ("octopoid://tasks/999", "octopoid://tasks/-1", "octopoid://tasks/a/../b"):
            with pytest.raises(MCPError) as err:
                await client.read_resource(uri)
            seen["resources"].append(err.value.error.message)
        seen["still_serving"] = await call(client, "show", task_id=tid)
        return seen

    seen = session(root, steps)
    assert seen["unknown"] == cli_error(root, "show", "999")
    for raw, message in zip(HOSTILE_IDS, seen["hostile"], strict=True):
        assert message == cli_error(root, "show", "--", raw), raw
    with pytest.raises(InvalidTaskId) as nul:
        normalize_task_id("1\x00")  # argv cannot carry a NUL: the CLI's own function says it
    assert seen["nul"] == str(nul.value)
    assert seen["long_title"] == cli_error(root, "enqueue", "x" * 300)
    assert seen["nul_context"].startswith("--context contains a NUL byte at character 2")
    assert seen["huge_context"].startswith("the task would be 1100")
    assert "a new task may be at most" in seen["huge_context"]
    assert seen["no_blocker"] == cli_error(root, "enqueue", "t", "--blocked-by", "TASK-77")
    assert seen["not_provisional"] == cli_error(root, "accept", tid)
    assert seen["bad_expect"] == cli_error(root, "accept", tid, "--expect", "zzz")
    assert seen["blank_reason"] == cli_error(root, "reject", tid, "--reason", "  ")
    for message in seen["types"]:  # the SDK's own words for arguments its schema refuses
        assert message.startswith("Error executing tool ") and "validation error" in message
    unknown, hostile, unmatched = seen["resources"]
    assert (unknown, hostile) == (seen["unknown"], cli_error(root, "show", "--", "-1"))
    assert "octopoid://tasks/a/../b" in unmatched  # no task's URI: the SDK's "unknown resource"
    assert seen["still_serving"]["id"] == f"TASK-{tid}"
    assert [t.title for t in q.list_tasks("incoming")] == ["exists"]  # nothing was made


def test_other_commands_do_not_import_the_sdk(git_project: Path) -> None:
    """`octopoid mcp` alone pays for the SDK: the CLI module does not load it."""
    code = (
        "import sys, orchestrator.faces.cli.main\n"
        "print(sorted(m for m in sys.modules if 'mcp' in m))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"  # nor the module of `octopoid mcp`: the registry names it
