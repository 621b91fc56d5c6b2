"""Secrets an agent prints end up in no file octopoid writes, nor in the next prompt."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from orchestrator import config
from orchestrator import queue_utils as q
from orchestrator.redaction import hide_also, redact

from .conftest import HELPERS, run_claimed
from .helpers.secrets_corpus import fake_secrets

SERVICE_TOKEN = "svc-7f3a9c2e5b1d4f608a2c"


def test_an_agent_printing_35_secret_shapes_leaks_none(git_project: Path):
    agent = {
        "name": "leaky",
        "role": "implement",
        "backend": "command",
        "argv": [sys.executable, str(HELPERS / "secret_printer.py")],
        "env": {"MY_SERVICE_TOKEN": SERVICE_TOKEN},
    }
    (git_project / ".octopoid/agents.yaml").write_text(yaml.safe_dump({"agents": [agent]}))
    tid = q.create_task("print everything").id
    for _ in range(2):
        assert run_claimed(q.claim_task(None, "leaky"), "leaky").next_state in (
            "incoming",
            "failed",
        )
    written = [
        *config.get_logs_dir().rglob("*"),
        *config.get_notes_dir().rglob("*"),
        git_project / f".octopoid/runtime/queue/incoming/TASK-{tid}.md",
    ]
    texts = {p: p.read_text(errors="replace") for p in written if p.is_file()}
    assert any("## Previous Agent Notes" in t for t in texts.values())  # the next prompt
    assert any("[REDACTED:" in t for t in texts.values())
    secrets = [s.secret for s in fake_secrets()] + [SERVICE_TOKEN]
    for path, text in texts.items():
        for secret in secrets:
            for i in range(0, max(1, len(secret) - 11), 4):  # no 12 characters of any
                assert secret[i : i + 12] not in text, (path.name, secret[:12])


def test_an_agents_own_env_secret_is_hidden_in_errors_and_history(project):
    hide_also({"DEPLOY_TOKEN": "dpl-9e8d7c6b5a4f3e2d"})
    task = q.fail_task(q.claim_task(None, "x") if q.create_task("t") else None,
                       "deploy failed with dpl-9e8d7c6b5a4f3e2d")  # fmt: skip
    assert "dpl-9e8d7c6b5a4f3e2d" not in task.path.read_text()
    assert "[REDACTED:DEPLOY_TOKEN]" in task.headers["ERROR"]
    assert redact("x dpl-9e8d7c6b5a4f3e2d") == "x [REDACTED:DEPLOY_TOKEN]"
