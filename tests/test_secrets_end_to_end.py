"""Secrets an agent prints end up in no file octopoid writes, nor in the next prompt."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path

import yaml

from orchestrator import config
from orchestrator.base.redaction import hide_also, redact
from orchestrator.memory.notes import NotesManager
from orchestrator.memory.store import MemoryStore
from orchestrator.queue import machine as q

from .helpers.secrets_corpus import fake_secrets
from .support import HELPERS, OCTOPOID, child_env, run_claimed
from .support.walls import leaked
from .web_server import Client, start_web

SERVICE_TOKEN = "svc-7f3a9c2e5b1d4f608a2c"
DEPLOY_KEY = "dk-4e9b2a7c1f"  # every agents.yaml env value is hidden, whatever its name
#: What no file or page keeps of an agent's terminal escapes and control characters
UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]")


def test_no_secret_an_agent_meets_leaks_anywhere_octopoid_writes_or_shows(git_project: Path):
    """The corpus, an agents.yaml secret (plain, base64, hex) and an agents.yaml value of any
    name, in output (among terminal escapes), memory and commit messages: none reaches
    notes, logs, task files, the next prompt, the review page
    (served by a process whose environment never had the agent's secret), or memory."""
    agent = {
        "name": "leaky",
        "role": "implement",
        "backend": "command",
        "argv": [sys.executable, str(HELPERS / "secret_printer.py")],
        "env": {"MY_SERVICE_TOKEN": SERVICE_TOKEN, "DEPLOY_KEY": DEPLOY_KEY},
    }
    (git_project / ".octopoid/agents.yaml").write_text(yaml.safe_dump({"agents": [agent]}))
    tid = q.create_task("print everything").id
    assert run_claimed(q.claim_task(None, "leaky"), "leaky").next_state == "incoming"
    assert run_claimed(q.claim_task(None, "leaky"), "leaky").next_state == "provisional"
    server = start_web(git_project)
    try:
        client = Client(server.base)
        client.login(server.token)
        pages = {f"page {tab}": client.request(f"/tasks/TASK-{tid}?tab={tab}")[2]
                 for tab in ("diff", "notes", "attempt-1", "attempt-2", "history")}  # fmt: skip
        pages["board"] = client.request("/")[2]
    finally:
        server.stop()
    assert "add the feature" in pages["page diff"]  # the commit list is shown
    working = NotesManager(notes_id=f"TASK-{tid}").notes_file.read_text()
    accepted = subprocess.run(  # as a person does: a process that never ran the agent
        [OCTOPOID, "accept", tid], cwd=git_project, env=child_env(git_project), check=True
    )
    assert accepted.returncode == 0
    written = [
        *config.get_logs_dir().rglob("*"),
        *config.get_notes_dir().rglob("*"),
        *config.get_memory_dir().rglob("*.md"),
        git_project / f".octopoid/runtime/queue/done/TASK-{tid}.md",
    ]
    texts = {str(p): p.read_text(errors="replace") for p in written if p.is_file()}
    texts |= pages | {"working notes": working}
    texts["memory"] = "\n".join(n["content"] for n in MemoryStore().search_notes("deploys"))
    assert "deploys use [REDACTED:" in texts["memory"]
    assert any("## Previous Agent Notes" in t for t in texts.values())  # the next prompt
    assert any("[REDACTED:MY_SERVICE_TOKEN:encoded]" in t for t in texts.values())
    logs = "".join(t for where, t in texts.items() if where.endswith("attempt-1.log"))
    assert "the deploy key is [REDACTED:DEPLOY_KEY]\ufffd in colour" in logs  # NUL: U+FFFD
    assert not [(w, m.group()) for w, t in texts.items() for m in UNSHOWN.finditer(t)]
    secrets = [s.secret for s in fake_secrets()] + [SERVICE_TOKEN, DEPLOY_KEY]
    secrets += [SERVICE_TOKEN.encode().hex(), base64.b64encode(SERVICE_TOKEN.encode()).decode()]
    assert not leaked(texts, secrets)


def test_an_agents_own_env_secret_is_hidden_in_errors_and_history(project):
    hide_also({"DEPLOY_TOKEN": "dpl-9e8d7c6b5a4f3e2d"})
    task = q.fail_task(q.claim_task(None, "x") if q.create_task("t") else None,
                       "deploy failed with dpl-9e8d7c6b5a4f3e2d")  # fmt: skip
    assert "dpl-9e8d7c6b5a4f3e2d" not in task.path.read_text()
    assert "[REDACTED:DEPLOY_TOKEN]" in task.headers["ERROR"]
    assert redact("x dpl-9e8d7c6b5a4f3e2d") == "x [REDACTED:DEPLOY_TOKEN]"
