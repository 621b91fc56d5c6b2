"""Every string an attempt, a check or a forge sends passes one redact-and-clean function
(``redaction.scrub``) where it enters: no secret, terminal escape or other control
character reaches a file, a screen (CLI, board, task page) or an alert."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from orchestrator.base.redaction import redact, scrub
from orchestrator.box.client import request
from orchestrator.daemon import notify
from orchestrator.forge import connect, poller
from orchestrator.memory.notes import NotesManager
from orchestrator.queue import machine as q
from orchestrator.queue import questions
from orchestrator.review import verdicts as review

from .forge_driver import Driver, attempt
from .forge_fakes.base import LineNote
from .forge_fakes.fixtures import BOB
from .helpers.secrets_corpus import corpus, fake_secrets
from .support import invoke, set_config, write_agents
from .support.walls import leaked
from .web_server import start_web

#: Terminal escapes (clear screen, set the title, colours), BEL, NUL, backspace, C1's CSI,
#: a bidi override, a lone CR: what a hostile agent, check or forge puts in its words.
CONTROLS = "\x1b[2J\x1b]0;owned\x07\x1b[31mred\x1b[0m\x07\x00\x08\x9b\u202eevil\u202c\rend"
UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
TOKEN = "ghp_" + "Zq7Lm2Vx9Kp4Rt8Wn3Hs6Jd1Fg5Bc0Ay2UeX"  # a GitHub token's shape
DEPLOY = "dk-7Hq2Lx9Vw4Pc"  # an agents.yaml env value whose name does not look secret


def hostile(what: str) -> str:
    return f"{what}: {CONTROLS} token {TOKEN} and key {DEPLOY} {CONTROLS}"


def faults(texts: dict[str, str], secrets: tuple[str, ...] = (TOKEN, DEPLOY)) -> list:
    """(where, what) of every control character and every secret found."""
    found = [(where, repr(m.group())) for where, t in texts.items() for m in UNSHOWN.finditer(t)]
    return found + leaked(texts, list(secrets))


def cli_out(*args: str) -> str:
    result = invoke(*args)
    assert result.exit_code in (0, 1), result.output
    return result.output


def test_scrub_leaves_no_secret_and_no_control_character() -> None:
    text = f"{CONTROLS}\n{corpus()}{CONTROLS}"
    for multiline in (True, False):
        clean = scrub(text, multiline)
        assert not faults({"scrubbed": clean}, tuple(s.secret for s in fake_secrets()))
        assert ("\n" in clean) is multiline and "red" in clean and "[2J" not in clean
    assert scrub("a\tb\r\nc") == "a\tb\nc" and scrub("a\tb\r\nc", multiline=False) == "a b c"
    assert scrub(f"ghp_{TOKEN[4:10]}\x07{TOKEN[10:]}") == "[REDACTED:github-token]"  # rejoined


def test_every_agents_yaml_env_value_is_hidden_whatever_its_name(project: Path) -> None:
    """Value by value: each fake secret of the corpus as the value of a name that looks
    like nothing, and short everyday values, which are left alone."""
    secrets = [s.secret for s in fake_secrets()]
    env = {f"SETTING_{n}": value for n, value in enumerate(secrets)}
    env |= {"DEPLOY_KEY": DEPLOY, "VERBOSE": "1", "MODE": "true", "LEVEL": "debug"}
    agents = [{"name": "a", "role": "implement", "backend": "command", "argv": ["x"], "env": env}]
    (project / ".octopoid/agents.yaml").write_text(yaml.safe_dump({"agents": agents}))
    for name, value in env.items():
        said = redact(f"{name} is {value} here")
        if len(value) >= 6:
            assert value not in said and "[REDACTED:" in said, name
        else:
            assert said == f"{name} is {value} here"


def test_what_an_agent_says_through_its_channel_reaches_no_face_in_clear(
    served,
    project: Path,
) -> None:
    """remember, report_progress, ask_human and propose_split, with a token, an agents.yaml
    value and control characters: the files they write, `show`, `status`, `list`, `notes`,
    `memory show`, the board, the task page and the alert carry none of it."""
    path, mine, _, server = served
    write_agents(project, env={"DEPLOY_KEY": DEPLOY})
    set_config(project, questions={"wait_seconds": 0})
    request(path, "remember", {"section": "Important Facts", "text": hostile("learned")})
    request(path, "report_progress", {"text": hostile("progress")})
    q.report_progress(mine, server.attempt_tools.take_progress(), token=mine.headers["CLAIM_TOKEN"])
    split = [{"title": hostile("part"), "context": hostile("ctx"), "criteria": [hostile("c")]}]
    request(path, "tools/call", {"name": "propose_split", "arguments": {"subtasks": split}})
    asked = request(path, "tools/call", {"name": "ask_human", "arguments": {
        "question": hostile("may I use the deploy key?")}})  # fmt: skip
    assert not asked["isError"], asked
    texts = {"progress header": q.get_task(mine.id).headers["PROGRESS"]}
    texts["proposed split"] = repr(server.toolbox.proposed)
    held = q.get_task(mine.id)  # the runner ends the attempt "needs input"
    questions.hold_for_answer(held, questions.unanswered(held), "the agent asked")
    label = mine.label
    texts |= {
        "question record": json.dumps(questions.read(mine.id)),
        "task file": q.get_task(mine.id).path.read_text(),
        "working notes": NotesManager(notes_id=label).notes_file.read_text(),
        "retry notes": q.get_task_notes(mine.id) or "",
        "alert": "\n".join(notify._message("question", mine.id)),
    }
    for argv in (["show", mine.id], ["status"], ["list"], ["notes", mine.id]):
        texts[" ".join(argv)] = cli_out(*argv)
    texts["memory show"] = cli_out("memory", "show", mine.id)
    texts |= pages(project, mine.id)
    assert "may I use the deploy key?" in texts["status"] and "[REDACTED:" in texts["alert"]
    assert "learned: red" in texts["working notes"] and "progress: red" in texts["progress header"]
    assert not faults(texts)


def test_the_secrets_corpus_through_progress_questions_and_memory_is_redacted(
    served,
) -> None:
    """Each fake secret of the corpus, in context, as a progress line, a question (each
    answered before the next, as one attempt may ask one at a time) and a remembered item:
    none is kept in clear."""
    path, mine, _, server = served
    set_config(Path.cwd(), questions={"wait_seconds": 0})
    kept = {}
    for n, secret in enumerate(fake_secrets()):
        said = f"{CONTROLS} {secret.text} {CONTROLS}"
        request(path, "report_progress", {"text": said})
        kept[f"progress {secret.name}"] = server.attempt_tools.take_progress()
        call = {"name": "ask_human", "arguments": {"question": said}}
        assert not request(path, "tools/call", call)["isError"], secret.name
        kept[f"question {secret.name}"] = questions.read(mine.id)["question"]
        questions.answer(mine.id, f"answer {n}")
        request(path, "remember", {"section": "Key Topics", "text": said})
    kept["working notes"] = NotesManager(notes_id=mine.label).notes_file.read_text()
    kept["retry notes"] = q.get_task_notes(mine.id) or ""
    assert len(questions.read(mine.id)) and "[REDACTED:private-key]" in kept["working notes"]
    assert not faults(kept, tuple(s.secret for s in fake_secrets()))


def pages(root: Path, task_id: str) -> dict[str, str]:
    """The board and the task page's tabs, as a signed-in reviewer gets them."""
    server = start_web(root)
    try:
        client = server.client()
        found = {"board": client.request("/")[2]}
        for tab in ("diff", "notes", "history", "attempt-1"):
            found[f"page {tab}"] = client.request(f"/tasks/TASK-{task_id}?tab={tab}")[2]
    finally:
        server.stop()
    return found


def test_what_a_forge_sends_reaches_no_face_in_clear(forge: Driver, forged: Path) -> None:
    """An issue's title and body, a CI log, a review's body and its line comment, each with
    a token, an agents.yaml value and control characters (the logs and comments with the
    whole secrets corpus too): the task, its notes, `show`, `list`, `status`, `notes` and
    its page carry none of it."""
    write_agents(forged, env={"DEPLOY_KEY": DEPLOY})
    client = connect()
    number = forge.server.create_issue(BOB, hostile("title"), hostile("body"), ["octopoid"])
    poller.poll_once(client)
    task_id = f"{forge.prefix}-{number}"
    assert attempt(task_id) == "provisional"
    review.accept(task_id, "alice")  # opens the pull request
    pr = int(q.get_task(task_id).headers["PR_NUMBER"])
    head = forge.head(f"agent/TASK-{task_id}")
    everything = "\n".join(s.text for s in fake_secrets())  # the whole corpus, in context
    forge.ci(head, hostile("job"), passed=False, log=f"{everything}\n{hostile('log')}")
    note = LineNote(f"TASK-{task_id}.txt", 1, f"{hostile('line comment')} {everything}")
    forge.review(pr, BOB, "changes", f"{hostile('review')}\n{everything}", [note])
    poller.poll_once(client)
    task = q.get_task(task_id)
    assert task.state is q.TaskState.INCOMING
    texts = {"task file": task.path.read_text(), "retry notes": q.get_task_notes(task_id)}
    for argv in (["show", task_id], ["status"], ["list"], ["notes", task_id]):
        texts[" ".join(argv)] = cli_out(*argv)
    texts |= pages(forged, task_id)
    assert "log: red" in texts["retry notes"] and "title: " in texts["list"]
    assert not faults(texts, (TOKEN, DEPLOY, *(s.secret for s in fake_secrets())))
