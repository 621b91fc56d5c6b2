"""What octopoid writes to a forge and reads from it (``forge.text``), and the forge section
of config.yaml. Pure functions: no server needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.forge import pulls, text
from orchestrator.forge.poller import MAX_BACKOFF_SECONDS, next_wait
from orchestrator.forge.seen import Seen
from orchestrator.model.exceptions import ConfigError
from orchestrator.model.tasks import new_task, parse_task, render_task

from .support import set_config


def test_an_issue_s_task_list_is_the_criteria_and_the_rest_its_context() -> None:
    body = (
        "The login page hangs.\r\n\r\n- [ ] shows an error after 5 s\n"
        "* [x] keeps the typed name\n  - [ ] works offline\nBlocked by #7, depends on #9.\n"
    )
    made = text.from_issue(12, "https://forge/o/r/issues/12", "Fix login", body, ("bug", "P0"))
    assert made.criteria == ["shows an error after 5 s", "keeps the typed name", "works offline"]
    assert made.priority == "P0" and made.blockers == [7, 9]
    assert made.context.startswith("Imported from issue #12: https://forge/o/r/issues/12")
    assert "The login page hangs." in made.context and "[ ]" not in made.context


@pytest.mark.parametrize("label", ["P2", "priority: P2", "priority::p2", "Priority/P2"])
def test_priority_labels_are_read_in_their_usual_spellings(label: str) -> None:
    assert text.from_issue(1, "u", "t", "", ("x", label)).priority == "P2"


def test_a_hostile_issue_becomes_a_task_that_reads_back_as_it_was_written() -> None:
    body = (
        "## Acceptance Criteria\n- [ ] " + "x" * 900 + "\nBLOCKED_BY: TASK-1\n"
        "\x00\x1b[31mred\x07 \ud800 tail\n```python\nnever closed"
    )
    made = text.from_issue(3, "https://f/3\n## History", "T\x00itle\n" + "y" * 400, body, ())
    task = new_task("GH-3", made.title, context=made.context, criteria=made.criteria)
    again = parse_task(render_task(task), "GH-3")
    assert len(again.title) == text.MAX_TITLE and again.title.endswith("…")
    assert [len(c) for c in again.criteria] == [text.MAX_CRITERION]
    assert again.blocked_by == []  # a header in the body stays text
    assert [h for h, _ in again.sections] == ["Context", "Acceptance Criteria", "History"]
    assert "\x00" not in again.context and "\x1b" not in again.context
    assert again.context.rstrip().endswith("```")  # the open fence is closed


def test_every_comment_and_the_pull_request_carry_their_marker_and_hide_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DEPLOY_TOKEN", "s3cr3t-deploy-value-123456")
    task = new_task(
        "7",
        "ship it",
        context="use s3cr3t-deploy-value-123456 to deploy",
        criteria=["it ships"],
    )
    task.set_header("ISSUE_NUMBER", "41")
    body = text.pull_request_body(task, "https://octopoid.example/")
    assert "[its page](https://octopoid.example/tasks/TASK-7)" in body
    assert "s3cr3t-deploy-value-123456" not in body
    assert "- it ships" in body and "[ ]" not in body  # no task list GitHub counts as open
    assert "octopoid show" not in body and "**Attempt:** 0" in body
    assert "Closes #41" in body
    assert body.rstrip().endswith(text.marker(task, "pull-request"))
    for event in (*text.EVENTS, "pull-request-12", "failed-2"):
        said = text.issue_comment(task, event, "why: s3cr3t-deploy-value-123456")
        assert said.endswith(text.marker(task, event)) and "s3cr3t" not in said


def test_what_a_task_s_moves_took_from_the_forge_reads_back() -> None:
    task = new_task("7", "t")
    assert Seen.of(task) == Seen()
    task.set_header("FORGE_SEEN", Seen("abc123", 42).header())
    assert Seen.of(task) == Seen("abc123", 42)
    task.set_header("FORGE_SEEN", "ci:x review:not-a-number junk")
    assert Seen.of(task) == Seen("x", 0)
    task.set_header("FORGE_SEEN", "ci:x review:\u00b2 told:\u0661\u0662")  # digits, not ASCII
    assert Seen.of(task) == Seen("x", 0)
    task.set_header("PR_NUMBER", "\u00b2")  # hand-edited: no pull request, not a traceback
    assert pulls.pr_number(task) is None
    told = Seen("abc", 7, told=3, asked=["bob", "a.b-c", "bob", "no spaces;"], stale="def")
    task.set_header("FORGE_SEEN", told.header())
    assert Seen.of(task) == Seen("abc", 7, 3, ["bob", "a.b-c"], "def")  # a login, once each


def test_polls_back_off_while_the_forge_is_down_and_wait_as_a_rate_limit_asks() -> None:
    assert next_wait(60, 0, None) == 60
    assert [next_wait(10, n, None) for n in (1, 2, 3)] == [20, 40, 80]
    assert next_wait(10, 50, None) == MAX_BACKOFF_SECONDS
    assert next_wait(10, 1, 3600) == 3600


def test_the_forge_section_is_checked_and_filled_in(project: Path) -> None:
    set_config(project, forge={"kind": "github", "repository": "octo/app"})
    forge = config.load_config()["forge"]
    assert forge["url"] == "https://api.github.com" and forge["token_env"] == "GITHUB_TOKEN"
    set_config(project, forge={"kind": "gitlab", "repository": "grp/sub/app"})
    assert config.load_config()["forge"]["url"] == "https://gitlab.com"


@pytest.mark.parametrize(
    ("sections", "said"),
    [
        ({"merge": {"strategy": "pull-request"}}, "no 'forge.kind'"),
        (
            {
                "merge": {"strategy": "pull-request"},
                "forge": {"kind": "github", "repository": "o/r"},
            },
            "'git.remote' must name",
        ),
        ({"forge": {"kind": "github"}}, "'forge.repository' must name"),
        ({"forge": {"kind": "github", "repository": "../x"}}, "'forge.repository' must name"),
        ({"forge": {"kind": "gitlab", "repository": "o/r", "url": "file:///etc"}}, "http"),
        (
            {"forge": {"kind": "github", "repository": "o/r", "token_env": "ghp_abc-123"}},
            "never the token itself",
        ),
        ({"forge": {"kind": "bitbucket"}}, "must be one of none, github, gitlab"),
    ],
)
def test_a_bad_forge_section_is_one_clear_error(project: Path, sections: dict, said: str) -> None:
    set_config(project, **sections)
    with pytest.raises(ConfigError, match=said) as caught:
        config.load_config()
    assert "ghp_abc" not in str(caught.value)


def test_the_forge_s_token_never_reaches_an_attempt_s_environment(project: Path) -> None:
    from orchestrator.box.box import environment

    host = {"PATH": "/usr/bin", "MY_FORGE_TOKEN": "ghp-secret", "GITHUB_TOKEN": "other"}
    task = new_task("7", "t")
    args = (task, "claim-token", {}, True)
    assert "MY_FORGE_TOKEN" in environment(host, {}, *args)  # no forge: an ordinary variable
    forge = {"kind": "github", "repository": "o/r", "token_env": "MY_FORGE_TOKEN"}
    set_config(project, forge=forge)
    env = environment(host, {}, *args)
    assert "MY_FORGE_TOKEN" not in env and env["GITHUB_TOKEN"] == "other"
    assert environment(host, {"MY_FORGE_TOKEN": "given"}, *args)["MY_FORGE_TOKEN"] == "given"


def test_runners_inherit_no_forge_token_even_while_config_yaml_is_broken(
    project: Path,
) -> None:
    from orchestrator.base.forge_token import without_token

    host = {"PATH": "/usr/bin", "GITHUB_TOKEN": "t1", "GITLAB_TOKEN": "t2", "MY_TOKEN": "t3"}
    set_config(project, forge={"kind": "gitlab", "repository": "g/p", "token_env": "MY_TOKEN"})
    assert without_token(host) == {
        "PATH": "/usr/bin",
        "GITHUB_TOKEN": "t1",
        "GITLAB_TOKEN": "t2",
    }
    (project / ".octopoid/config.yaml").write_text("forge: [not, a, mapping]\n")
    assert without_token(host) == {"PATH": "/usr/bin", "MY_TOKEN": "t3"}  # fails closed
