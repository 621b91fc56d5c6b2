"""`octopoid doctor` and the project's CI: a project whose pull requests put task branches
on a forge hears when a workflow (GitHub) or a job (GitLab) runs on every push, since that
runs an attempt's code with the repository's secrets; one filtered to its base hears
nothing."""

from __future__ import annotations

from pathlib import Path

from orchestrator.faces import doctor

from .support import set_config, write_agents

EVERY_PUSH = "on: push\njobs: {test: {runs-on: ubuntu-latest, steps: [{run: make test}]}}\n"
MAIN_ONLY = "on:\n  push:\n    branches: [main]\n  pull_request:\njobs: {}\n"
GITLAB_CI = r"""
stages: [test, deploy]
.only-main: {rules: [{if: '$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH'}]}
test: {script: [make test]}
lint: {script: [make lint], except: ['/^agent\//']}
deploy: {extends: .only-main, script: [make deploy]}
docs: {script: [make docs], rules: [{if: '$CI_PIPELINE_SOURCE == "merge_request_event"'}]}
nightly:
  script: [make all]
  rules: [{if: '$CI_COMMIT_TAG || $NIGHTLY', when: never}, {when: always}]
"""


def warned(root: Path) -> list[str]:
    return [line for line in doctor.examine() if line.startswith("CI runs on every push")]


def opt_in(root: Path, **forge: str) -> None:
    """Pull requests on a forge: each puts a task's branch there."""
    forge = {"kind": "github", "repository": "octo/widgets", **forge}
    set_config(root, git={"remote": "origin"}, merge={"strategy": "pull-request"}, forge=forge)


def test_doctor_warns_of_a_workflow_on_every_push_and_not_of_one_filtered_to_main(
    git_project: Path,
) -> None:
    write_agents(git_project)
    workflows = git_project / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "ci.yml").write_text(EVERY_PUSH)
    (workflows / "release.yml").write_text(MAIN_ONLY)
    assert warned(git_project) == []  # no branch of an attempt is ever pushed to a forge
    opt_in(git_project)
    [line] = warned(git_project)
    assert "(.github/workflows/ci.yml)" in line and "docs/security.md" in line
    (workflows / "ci.yml").write_text(
        EVERY_PUSH.replace("on: push", "on: {push: {branches: [main]}}")
    )
    assert warned(git_project) == []
    ignored = "on:\n  push:\n    branches-ignore: ['agent/**']\njobs: {}\n"
    (workflows / "ci.yml").write_text(ignored)
    assert warned(git_project) == []


def test_doctor_names_the_gitlab_jobs_a_task_s_push_would_run(git_project: Path) -> None:
    write_agents(git_project)
    (git_project / ".gitlab-ci.yml").write_text(GITLAB_CI)
    set_config(git_project, forge={"kind": "gitlab", "repository": "g/p", "open_on": "provisional"})
    [line] = warned(git_project)
    assert "(.gitlab-ci.yml: test, .gitlab-ci.yml: nightly)" in line
    workflow = "workflow: {rules: [{if: '$CI_COMMIT_BRANCH =~ /^agent\\//', when: never}, {}]}\n"
    (git_project / ".gitlab-ci.yml").write_text(workflow + GITLAB_CI)
    assert warned(git_project) == []
