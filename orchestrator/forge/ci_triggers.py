"""Which of the project's CI runs when a task's branch is pushed, as its own files say.

A project that pushes task branches to a forge (a pull request octopoid opens) runs its
CI on them; a workflow that runs on every push runs the attempt's code there with the
repository's secrets. ``on_task_push`` reads the checkout's GitHub workflows
(``.github/workflows/*.yml``: ``on: push`` without a branch filter that leaves the
branch out) and its ``.gitlab-ci.yml`` (jobs whose ``rules`` or ``only``/``except``, and
the ``workflow: rules``, do not leave it out) for ``octopoid doctor``. What cannot be
judged (a variable of the project's settings, ``changes:``, an included file) counts as
running: the warning errs towards being said. A branch can change these files itself;
docs/security.md says what protects secrets then.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ..git import branches

GITLAB_KEYWORDS = {
    "after_script", "before_script", "cache", "default", "image", "include", "services",
    "spec", "stages", "types", "variables", "workflow",
}  # fmt: skip
#: Predefined variables a push pipeline of a branch never has.
UNSET = re.compile(r"CI_COMMIT_TAG\w*|CI_MERGE_REQUEST_\w+|CI_EXTERNAL_PULL_REQUEST_\w+")
TOKEN = re.compile(
    r"""\s*(\|\||&&|==|!=|=~|!~|\(|\)|null\b|\$\{?\w+\}?|"(?:[^"\\]|\\.)*"|'[^']*'"""
    r"""|/(?:[^/\\]|\\.)*/[a-z]*)"""
)


def on_task_push(root: Path) -> list[str]:
    """The workflows and jobs that a push of a task's branch (``agent/TASK-<id>``) runs, by
    file (and job)."""
    branch, found = branches.branch_for("1"), []
    for path in sorted((root / ".github" / "workflows").glob("*.y*ml")):
        doc = _load(path)
        if isinstance(doc, dict) and _github_push_runs(doc.get("on", doc.get(True)), branch):
            found.append(str(path.relative_to(root)))
    doc = _load(root / ".gitlab-ci.yml")
    if isinstance(doc, dict):
        found += [f".gitlab-ci.yml: {name}" for name in _gitlab_jobs(doc, branch)]
    return found


class _Loader(yaml.SafeLoader):
    """YAML as CI files write it: a tag of the forge's own (GitLab's ``!reference``) is
    read as nothing, which the rules above take for "may run"."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _load(path: Path) -> Any:
    """A YAML file's data; None when it is missing or not YAML (a forge would not run it)."""
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # a SafeLoader
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


# --- GitHub Actions ------------------------------------------------------------------------


def _github_push_runs(on: Any, branch: str) -> bool:
    """Whether a workflow's ``on`` (YAML reads a bare ``on`` key as true) runs on a push
    of ``branch``: filters as GitHub applies them, negations in order."""
    if isinstance(on, str | list):
        return "push" in _strings(on)
    if not isinstance(on, dict) or "push" not in on:
        return False
    push = on["push"]
    if not isinstance(push, dict):
        return True
    if "branches" in push:
        runs = False
        for pattern in _strings(push["branches"]):
            if pattern.startswith("!"):
                runs = runs and not _github_match(pattern[1:], branch)
            else:
                runs = runs or _github_match(pattern, branch)
        return runs
    if "branches-ignore" in push:
        return not any(_github_match(p, branch) for p in _strings(push["branches-ignore"]))
    return "tags" not in push and "tags-ignore" not in push  # tags only: no branch push


def _github_match(pattern: str, name: str) -> bool:
    """GitHub's filter pattern: ``*`` within a path segment, ``**`` across them; ``?``,
    ``+`` and ``[...]`` as in a regular expression."""
    parts = re.findall(r"\*\*|\*|\[[^\]]*\]|[?+]|.", pattern)
    mapped = {"**": ".*", "*": "[^/]*", "?": "?", "+": "+"}
    regex = "".join(mapped.get(p, p if p.startswith("[") else re.escape(p)) for p in parts)
    try:
        return re.fullmatch(regex, name) is not None
    except re.error:
        return True


# --- GitLab CI -----------------------------------------------------------------------------


def _gitlab_jobs(doc: dict, branch: str) -> list[str]:
    """The jobs a push pipeline of ``branch`` would run (none if ``workflow: rules`` keeps
    the pipeline from being made)."""
    facts = {"CI_COMMIT_BRANCH": branch, "CI_COMMIT_REF_NAME": branch}
    facts |= {"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_REF_PROTECTED": "false"}
    facts["CI_DEFAULT_BRANCH"] = "main"  # whatever it is, never a task's branch
    workflow = doc.get("workflow")
    if isinstance(workflow, dict) and not _rules_run(workflow.get("rules"), facts):
        return []
    return [
        name
        for name, job in doc.items()
        if _is_job(name, job) and _job_runs(_extended(doc, job), branch, facts)
    ]


def _is_job(name: Any, job: Any) -> bool:
    keys = ("script", "trigger", "extends", "run")
    return (
        isinstance(name, str)
        and not name.startswith(".")
        and name not in GITLAB_KEYWORDS
        and isinstance(job, dict)
        and any(key in job for key in keys)
    )


def _extended(doc: dict, job: dict, depth: int = 0) -> dict:
    """The job with what it ``extends`` (templates in this file) under its own keys."""
    merged: dict = {}
    for base in _strings(job.get("extends", [])) if depth < 10 else []:
        if isinstance(doc.get(base), dict):
            merged |= _extended(doc, doc[base], depth + 1)
    return merged | job


def _job_runs(job: dict, branch: str, facts: dict) -> bool:
    if "rules" in job:
        return _rules_run(job["rules"], facts)
    only, never = job.get("only"), job.get("except")
    if isinstance(only, dict):
        only = only.get("refs")
    if isinstance(never, dict):
        never = never.get("refs")
    if only is not None and not any(_ref_matches(r, branch) for r in _strings(only)):
        return False
    return never is None or not any(_ref_matches(r, branch) for r in _strings(never))


def _ref_matches(ref: str, branch: str) -> bool:
    """An ``only``/``except`` entry: a keyword, a branch name or a ``/regex/``."""
    if ref in ("branches", "pushes"):
        return True
    if len(ref) > 1 and ref.startswith("/") and ref.rstrip("i").endswith("/"):
        return _regex_search(ref, branch) is not False
    return ref == branch


def _rules_run(rules: Any, facts: dict) -> bool:
    """Whether the first rule that holds lets the job (or pipeline) run. A rule that may
    or may not hold decides only if it runs it; one that may keep it out is passed over."""
    if not isinstance(rules, list):
        return True
    for rule in rules:
        if not isinstance(rule, dict):
            return True  # a rule not read here (a ``!reference``): it may run it
        holds = True if "if" not in rule else _judge(str(rule["if"]), facts)
        if holds is True and ("changes" in rule or "exists" in rule):
            holds = None  # which files a push changes is not known here
        runs = rule.get("when", "on_success") != "never"
        if holds is True or (holds is None and runs):
            return runs
    return False


def _judge(expression: str, facts: dict) -> bool | None:
    """A rule's ``if``: True or False where it is sure, None where it cannot tell (a
    variable of the project's settings, an expression it does not read)."""
    tokens, at = [], 0
    while at < len(expression.rstrip()):
        found = TOKEN.match(expression, at)
        if found is None:
            return None
        tokens.append(found.group(1))
        at = found.end()
    try:
        value, rest = _joined(tokens, facts)
    except (IndexError, ValueError):
        return None
    return value if rest == [] else None


def _joined(tokens: list[str], facts: dict, op: str = "||") -> tuple[bool | None, list[str]]:
    """Operands joined by ``op`` (``&&`` binds tighter than ``||``), in three values: one
    operand that is sure decides (true for ``||``, false for ``&&``); None where none is
    and one cannot be judged."""
    decides = op == "||"

    def operand(rest: list[str]) -> tuple[bool | None, list[str]]:
        return _joined(rest, facts, "&&") if decides else _compared(rest, facts)

    left, tokens = operand(tokens)
    while tokens[:1] == [op]:
        right, tokens = operand(tokens[1:])
        sure = decides in (left, right)
        left = decides if sure else None if None in (left, right) else not decides
    return left, tokens


def _compared(tokens: list[str], facts: dict) -> tuple[bool | None, list[str]]:
    """A comparison, a bracketed expression or a bare variable (true when set, not empty);
    None: it cannot be judged here."""
    if tokens[0] == "(":
        value, rest = _joined(tokens[1:], facts)
        if rest[:1] != [")"]:
            raise ValueError("unbalanced")
        return value, rest[1:]
    left, rest = _operand(tokens[0], facts), tokens[1:]
    if rest[:1] not in (["=="], ["!="], ["=~"], ["!~"]):
        return (None if left is ... else bool(left)), rest
    op, right, rest = rest[0], rest[1], rest[2:]
    if op in ("=~", "!~"):
        if left is ... or not right.startswith("/"):
            return None, rest
        matched = _regex_search(right, left or "")
        return (None if matched is None else matched == (op == "=~")), rest
    other = _operand(right, facts)
    if ... in (left, other):
        return None, rest
    return (left == other) == (op == "=="), rest


def _operand(token: str, facts: dict) -> Any:
    """A token's value: a string, None (unset, ``null``), or ``...`` (not known here)."""
    if token.startswith("$"):
        name = token.strip("${}")
        return facts[name] if name in facts else None if UNSET.fullmatch(name) else ...
    if token == "null":
        return None
    if token[:1] in "\"'":
        return token[1:-1]
    return ...


def _regex_search(literal: str, text: str) -> bool | None:
    """``/regex/flags`` searched in ``text`` (None: not a regex Python reads)."""
    body, _, flags = literal[1:].rpartition("/")
    try:
        return re.search(body, text, re.IGNORECASE if "i" in flags else 0) is not None
    except re.error:
        return None
