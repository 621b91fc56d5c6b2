"""The ``octopoid`` command: parse, call one domain function, print. No queue logic here.

Its size: the click group and every command without a family module of its own, each one
parse, one call, print. Next out: the rendering helpers, into one render module the other
``cli/`` modules share.
"""

from __future__ import annotations

import contextlib
import gc
import json
import shlex
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ...base.lazy import lazy_import
from ...model.exceptions import ConfigError, InvalidInput, InvalidTaskId, OctopoidError
from ...model.tasks import (
    DEFAULT_ROLE,
    PRIORITIES,
    Task,
    TaskState,
    normalize_task_id,
    plural,
    render_task,
    task_label,
)
from .forge import forge_group, intake_command
from .mcp import mcp_command
from .memory import learning_lines, memory_group, pending_rows
from .plan import plan_group
from .preview import preview_command
from .stats import stats_command
from .steer import attach_command, say_command, stop_command

if TYPE_CHECKING:
    from ...queue.dependencies import Blockage

# Each command imports only what it uses, at its first use: `octopoid --help` or `pause` does
# not pay for the store, PyYAML, GitPython or the scheduler (docs/performance.md).
agent_status = lazy_import("orchestrator.roles.agent_status")
bounces = lazy_import("orchestrator.queue.bounces")
budgets = lazy_import("orchestrator.queue.budgets")
config = lazy_import("orchestrator.config")
demo_run = lazy_import("orchestrator.faces.demo")
dependencies = lazy_import("orchestrator.queue.dependencies")
diffs = lazy_import("orchestrator.review.diffs")
doctor_checks = lazy_import("orchestrator.faces.doctor")
importer = lazy_import("orchestrator.faces.importer")
intake = lazy_import("orchestrator.queue.intake")
listing = lazy_import("orchestrator.faces.listing")
merge_guard = lazy_import("orchestrator.git.merge_guard")
queue_utils = lazy_import("orchestrator.queue.machine")
queue_store = lazy_import("orchestrator.queue.store")
questions = lazy_import("orchestrator.queue.questions")
recovery = lazy_import("orchestrator.queue.recovery")
reports = lazy_import("orchestrator.faces.reports")
review = lazy_import("orchestrator.review.verdicts")
review_comments = lazy_import("orchestrator.review.comments")
sandbox = lazy_import("orchestrator.box")
scaffold = lazy_import("orchestrator.faces.scaffold")
scheduler = lazy_import("orchestrator.daemon.scheduler")
scheduler_control = lazy_import("orchestrator.daemon.scheduler_control")
stalls = lazy_import("orchestrator.daemon.stalls")
task_notes = lazy_import("orchestrator.queue.task_notes")

T = TypeVar("T")


class OctopoidGroup(click.Group):
    """Turns every error, octopoid's or click's own usage error, into one line on stderr
    and its exit code, for the subgroups (``memory``, ``db``, ``scheduler``) too."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with _one_line_errors():  # the top level's own options and arguments
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _one_line_errors():  # everything below: subcommands' parsing, then their work
            return super().invoke(ctx)


@contextlib.contextmanager
def _one_line_errors() -> Iterator[None]:
    try:
        yield
    except click.exceptions.NoArgsIsHelpError:
        raise  # a bare group (`octopoid memory`) prints its help, as click does
    except click.ClickException as exc:
        click.echo(f"octopoid: {_click_error_line(exc)}", err=True)
        sys.exit(exc.exit_code)
    except OctopoidError as exc:
        click.echo(f"octopoid: {exc}", err=True)
        sys.exit(exc.exit_code)


def _click_error_line(exc: click.ClickException) -> str:
    """Click's message, after the subcommand it is about and before where help is, in
    place of click's four lines (usage, hint, blank, message)."""
    message = " ".join(line.strip() for line in exc.format_message().splitlines() if line.strip())
    ctx = exc.ctx if isinstance(exc, click.UsageError) else None
    if ctx is None:
        return message
    where = ctx.command_path.partition(" ")[2]
    line = f"{where}: {message.rstrip('.')}" if where else message.rstrip(".")
    if ctx.command.get_help_option(ctx) is None:
        return line
    return f"{line} (`{ctx.command_path} --help`)"


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def _blocked_cell(blockage: Blockage | None) -> str:
    if blockage is None:
        return "-"
    labels = ",".join(label for label, _ in blockage.waiting_on)
    return f"{labels} (stuck)" if blockage.stuck else labels


def _no_longer_merges(label: str, files: list[str]) -> str:
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    return (
        f"{label} no longer merges into its base (conflicts in {shown or '?'}): "
        f"`octopoid reject {label} --reason ...` sends it back to rebase"
    )


def _refused(label: str, paths: list[str]) -> str:
    return (
        f"{label} is refused: {merge_guard.reason(paths)}: "
        f"`octopoid reject {label} --reason ...` sends it back without them"
    )


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


@click.group(cls=OctopoidGroup)
@click.version_option(package_name="octopoid")
def cli() -> None:
    """octopoid: a task queue for AI coding agents, with per-task retry notes.

    Tasks are TASK-<id>.md files in .octopoid/runtime/queue/<state>/. Commands take a
    task id as TASK-12, task-12 or 12.
    """


@cli.command()
@click.option(
    "--store",
    "store_url",
    metavar="URL",
    help="Keep the queue in PostgreSQL (postgresql://user@host/db) instead of folders: "
    "creates its schema and names it in config.yaml (never the password).",
)
def init(store_url: str | None) -> None:
    """Create .octopoid/ (config, agents, prompts) and the runtime folders here.

    Run it at the top of a git work tree: every task is worked on a branch of it.
    """
    root = Path.cwd()
    created = scaffold.init_project(root, require_git=True)
    for path in created:
        click.echo(f"created {path.relative_to(root)}")
    if not created and not store_url:
        click.echo("octopoid is already set up here; nothing changed.")
    if store_url:
        for line in scaffold.use_postgres(root, store_url):
            click.echo(line)
    branch = intake.current_branch(root) or "none: HEAD is detached"
    click.echo(f"new tasks start from the branch checked out here ({branch}) unless given --branch")
    click.echo(sandbox.describe()["summary"])


@cli.command()
@click.argument("title")
@click.option("--role", default=DEFAULT_ROLE, show_default=True, help="Which agents may claim it.")
@click.option("--priority", type=click.Choice(PRIORITIES), default="P1", show_default=True)
@click.option("--branch", help="Base branch for the work.  [default: the one checked out]")
@click.option(
    "--blocked-by",
    multiple=True,
    help="A task that must be done first (repeatable; or several at once: TASK-1,TASK-2).",
)
@click.option("--context", help="What the agent needs to know.")
@click.option(
    "--context-file",
    type=click.Path(allow_dash=True, path_type=Path),
    help="Read the context from a text file (- for stdin).",
)
@click.option("--criterion", multiple=True, help="An acceptance criterion (repeatable).")
@click.option(
    "--check",
    multiple=True,
    help="A command that must pass on the work before review, besides config.yaml's checks "
    "(repeatable; runs with sh -c in the task's worktree).",
)
@click.option(
    "--budget",
    default="",
    help="This task's own budget across its attempts, e.g. 'usd=5 turns=100' (usd, tokens, "
    "turns, seconds), in place of budgets.task in config.yaml.",
)
def enqueue(
    title: str,
    role: str,
    priority: str,
    branch: str | None,
    blocked_by: tuple[str, ...],
    context: str | None,
    context_file: Path | None,
    criterion: tuple[str, ...],
    check: tuple[str, ...],
    budget: str,
) -> None:
    """Add a task to incoming and print its id."""
    if context is not None and context_file is not None:
        raise click.UsageError("give --context or --context-file, not both")
    task = intake.enqueue(
        title,
        role=role,
        priority=priority,
        branch=branch,
        blocked_by=blocked_by,
        context=context or "",
        context_file=context_file,
        criteria=criterion,
        checks=check,
        budget=budget,
    )
    click.echo(task.label)


@cli.command("list")
@click.argument("queue", required=False, type=click.Choice([s.value for s in TaskState]))
@click.option("--role", help="Only tasks of this role.")
@click.option(
    "--limit", type=click.IntRange(1, 100_000), help="Tasks shown per queue.  [default: 50]"
)
@click.option(
    "--page", "page_no", default=1, type=click.IntRange(1), help="Which page of each queue."
)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Every task of the queues listed, printed as it is read (done is listed only when "
    "named: `octopoid list done --all`).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Machine-readable: one JSON array, an object per task (with --all too).",
)
def list_cmd(
    queue: str | None,
    role: str | None,
    limit: int | None,
    page_no: int,
    show_all: bool,
    as_json: bool,
) -> None:
    """List tasks in QUEUE (default: every queue but done), a page of each at a time.

    Waiting tasks come from the claim index and done ones from the ledger, so a page costs
    the same at 50 tasks or 50,000; --all prints every task as it is read. Quarantined
    files are listed with why they could not be read.
    """
    states = [TaskState(queue)] if queue else listing.default_states()
    if show_all:
        if as_json:
            _emit_json_array(listing.stream(states, role))
            return
        _print_lines(listing.stream(states, role))
        if queue is None and (done := queue_utils.get_store().count(TaskState.DONE)):
            click.echo(f"(done is left out: {plural(done, 'task')}; `octopoid list done --all`)")
        return
    sections = listing.page(states, role, limit or listing.PAGE, page_no)
    found = [line for section in sections for line in section.lines]
    if as_json:
        _emit_json_array(iter(found))
        return
    _print_lines(iter(found), aligned=True)
    for section in sections:
        if section.more:
            nxt = f"octopoid list {section.state.value} --page {page_no + 1}"
            click.echo(f"... and {section.more:,} more in {section.state.value} ({nxt}, or --all)")
    for line in found:
        if line.blockage and line.blockage.stuck:
            click.echo(f"{line.id} is stuck: {line.blockage.stuck}")
        if line.conflicts is not None:
            click.echo(_no_longer_merges(line.id, line.conflicts))
        if line.refused:
            click.echo(_refused(line.id, line.refused))


def _emit_json_array(lines: Iterator[listing.Line]) -> None:
    """One JSON array written as it is read, an object a line: a page and --all alike."""
    click.echo("[")
    previous = None
    for line in lines:
        if previous is not None:
            click.echo(f"{previous},")
        previous = json.dumps(line.as_json(), sort_keys=True)
    if previous is not None:
        click.echo(previous)
    click.echo("]")


LIST_HEADER = ["ID", "STATE", "PRI", "ROLE", "ATT", "BLOCKED", "TITLE"]


def _print_lines(lines: Iterator[listing.Line], aligned: bool = False) -> None:
    """Lines as a table (aligned: a page, held whole) or as they come (--all: fixed widths)."""
    rows = (
        [
            line.id,
            line.state
            + (" (refused)" if line.refused else "")
            + (" (conflicts)" if line.conflicts is not None else ""),
            line.priority or "-",
            line.role or "-",
            "-" if line.attempts is None else str(line.attempts),
            _blocked_cell(line.blockage),
            _title_cell(line),
        ]
        for line in lines
    )
    if aligned:
        found = list(rows)
        click.echo(_table([LIST_HEADER, *found]) if found else "no tasks")
        return
    widths = [10, 12, 3, 10, 3, 14]
    shown = 0
    for row in ([*LIST_HEADER], *rows):
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        click.echo("  ".join([*cells, row[-1]]))
        shown += 1
    if shown == 1:
        click.echo("no tasks")


def _title_cell(line: listing.Line) -> str:
    if line.error is not None:
        return f"unreadable: {line.error}"
    return f"{line.title} (PR #{line.pull_request})" if line.pull_request else line.title


@cli.command()
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show(task_id: str, as_json: bool) -> None:
    """Print a task: where it is, its branch head, its notes, usage, and its file."""
    task = queue_utils.get_task(task_id)
    learnings = pending_rows(task)
    if as_json:
        _emit_json(reports.task_details(task) | {"learnings": learnings})
        return
    summary = task_notes.notes_summary(task.id)
    blockage = dependencies.blockage_of(task)
    head = None
    with contextlib.suppress(OctopoidError):  # no repository: no branch to name
        head = review.head_of(task)
    turns, cost = reports.task_usage(task)
    where = task.path or "a row in PostgreSQL"
    click.echo(f"{task.label} is in {task.state.value} ({where})")
    if blockage:
        click.echo(blockage.describe())
    if head:
        click.echo(f"branch: agent/{task.label} at {head} (`accept --expect {head[:12]}`)")
    if "PR_NUMBER" in task.headers:
        click.echo(f"pull request: #{task.headers['PR_NUMBER']} {task.headers.get('PR_URL', '')}")
    if "ISSUE_NUMBER" in task.headers:
        click.echo(f"issue: #{task.headers['ISSUE_NUMBER']} {task.headers.get('ISSUE_URL', '')}")
    if task.attempts:
        click.echo(f"attempt: {reports.attempt_of(task)}")
    if summary["attempts"] or summary["reviews"]:
        click.echo(
            f"retry notes: {plural(summary['attempts'], 'attempt')}, "
            f"{plural(summary['reviews'], 'review')} - `octopoid notes {task.label}`"
        )
    else:
        click.echo("retry notes: none")
    for line in learning_lines(learnings):
        click.echo(line)
    if turns or cost:
        click.echo(
            f"usage: {plural(turns, 'turn')}, ${cost:.2f} across {plural(task.attempts, 'attempt')}"
        )
    click.echo()
    click.echo(render_task(task), nl=False)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json: bool) -> None:
    """Tasks per queue, running claims with their lease, and the oldest waiting task."""
    summary = reports.status_summary()
    summary["scheduler"] = scheduler_control.scheduler_status()
    if as_json:
        _emit_json(summary)
        return
    daemon = summary["scheduler"]
    click.echo(
        f"scheduler: running (pid {daemon['pid']})"
        if daemon["running"]
        else "scheduler: not running (`octopoid scheduler start`)"
    )
    if summary["sandbox"]:
        click.echo(summary["sandbox"]["summary"])
    if summary["refused_today"]:
        click.echo(
            f"network: {plural(summary['refused_today'], 'destination')} refused today "
            "(`octopoid agents` says whose; each attempt's notes say which)"
        )
    click.echo(_table([[k, str(v)] for k, v in summary["counts"].items()]))
    for c in summary["claimed"]:
        left = c["lease_seconds_left"]
        lease = "no lease" if left is None else f"lease {left}s left"
        host = f" on {c['host']}" if c["host"] else ""
        click.echo(f"claimed {c['id']} by {c['agent']}{host} since {c['claimed_at']} ({lease})")
    oldest = summary["oldest_incoming"]
    if oldest:
        click.echo(f"oldest waiting: {oldest['id']}, {oldest['age_seconds']}s old")
    blocked = summary["blocked"]
    if blocked["count"]:
        stuck = len(blocked["stuck"])
        click.echo(f"blocked: {blocked['count']} waiting on other tasks, {stuck} stuck")
        for t in blocked["stuck"]:
            click.echo(f"  {t['id']} is stuck: {t['why']}")
    for t in summary["unmergeable"]:
        if t["conflicts"] is not None:
            click.echo(_no_longer_merges(t["id"], t["conflicts"]))
        if t["refused"]:
            click.echo(_refused(t["id"], t["refused"]))
    for t in summary["bouncing"]:
        click.echo(bounces.line(t))
    for asked in summary["questions"]:
        click.echo(f"{asked['task']} asks: {asked['question'][:200]} (`octopoid answer`)")
    for t in summary["pull_requests"]:
        click.echo(f"in review on the forge: {t['id']}, pull request #{t['number']} {t['url']}")
    if not summary["config_problem"]:  # that one is said last, on stderr
        for line in stalls.lines(summary["stalls"]):
            click.echo(line)
    usage = summary["usage"]
    if usage["tasks"]:
        click.echo(f"usage: {usage['turns']} turns, ${usage['cost_usd']:.2f} in total; most:")
        for t in usage["tasks"]:
            click.echo(
                f"  {t['id']:<10} {t['state']:<12} {t['turns']:>5} turns  ${t['cost_usd']:.2f}"
            )
    if summary["config_problem"]:
        click.echo(f"octopoid: {summary['config_problem']}", err=True)
        sys.exit(ConfigError.exit_code)


def _each(
    task_ids: tuple[str, ...],
    act: Callable[[str], T],
    line: Callable[[T], str] = str,
    row: Callable[[T], dict[str, Any]] | None = None,
) -> None:
    """``act`` on every id in turn, printing ``line`` of what it returns (with ``row``: one
    JSON list at the end, a row per id, failures too); one that fails is named on stderr
    and the others go on; exit with the worst failure's code (0 if none)."""
    failures, rows = 0, []
    for raw in task_ids:
        try:
            done = act(raw)
        except OctopoidError as exc:
            click.echo(f"octopoid: {exc}", err=True)
            failures = max(failures, exc.exit_code)
            rows.append(_failed_row(raw, exc))
            continue
        if row is None:
            click.echo(line(done))
        else:
            rows.append({"ok": True, "error": None} | row(done))
    if row is not None:
        _emit_json(rows)
    sys.exit(failures)


def _failed_row(raw: str, exc: OctopoidError) -> dict[str, Any]:
    """The JSON row of an id whose move failed: named as given when it is no task id."""
    try:
        label = task_label(normalize_task_id(raw))
    except InvalidTaskId:
        label = raw
    return {"id": label, "ok": False, "error": str(exc), "exit_code": exc.exit_code}


@cli.command()
@click.argument("task_ids", nargs=-1, required=True)
@click.option("--by", "actor", default="human", show_default=True, help="Who accepts.")
@click.option(
    "--expect",
    metavar="SHA",
    help="Accept only if the branch is still at this commit (the head `show` printed when "
    "you judged it); with several tasks, it applies to each.",
)
@click.option(
    "--forget",
    multiple=True,
    type=click.IntRange(1),
    metavar="N",
    help="Strike learning N (as `show` numbers them): it is not kept in memory (repeatable).",
)
@click.option(
    "--edit",
    "edits",
    multiple=True,
    type=(click.IntRange(1), str),
    metavar="N TEXT",
    help="Keep learning N as TEXT instead (repeatable).",
)
@click.option(
    "--keep",
    multiple=True,
    type=click.IntRange(1),
    metavar="N",
    help="Keep learning N though it reads as an instruction: prompts may then carry it "
    "(repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: one list.")
def accept(
    task_ids: tuple[str, ...],
    actor: str,
    expect: str | None,
    forget: tuple[int, ...],
    edits: tuple[tuple[int, str], ...],
    keep: tuple[int, ...],
    as_json: bool,
) -> None:
    """Accept provisional tasks: merge each branch into its base, mark done, clean up.

    The merge follows merge.strategy in config.yaml (merge, squash, ff-only, or none to
    leave the branch for a pull request). A conflict or a dirty checkout changes nothing.
    What the accepted attempt learned is kept in project memory, as `show` lists it.
    """
    actor = intake.clean_text(actor, "--by")
    if (forget or edits or keep) and len(task_ids) > 1:
        raise click.UsageError(
            "--forget, --edit and --keep take one task (their numbers are its own)"
        )
    rewritten = {n: intake.clean_text(text, "--edit") for n, text in edits}

    def one(raw: str) -> review.Accepted:
        done = review.accept(raw, actor, expect, forget=forget, edits=rewritten, keep=keep)
        if done.cleanup_error:
            click.echo(f"octopoid: cleanup: {done.cleanup_error}", err=True)
        return done

    _each(task_ids, one, _accepted_line, review.accepted_row if as_json else None)


def _accepted_line(done: review.Accepted) -> str:
    if done.strategy == "finished":
        return f"{done.task.label} was done already: finished what its accept left"
    if done.strategy == "pull-request" and done.task.state is TaskState.PROVISIONAL:
        pull = f"#{done.task.headers.get('PR_NUMBER', '?')} {done.task.headers.get('PR_URL', '')}"
        return (
            f"{done.task.label}: pull request {pull.strip()} is open; the task waits in review "
            "until it is merged there (then it is done) or closed"
        )
    how = {
        "merge": "merged",
        "squash": "squashed",
        "ff-only": "fast-forwarded",
        "no-change": "no change needed, nothing merged",
    }.get(done.strategy, "branch left in place")
    when = "when its pull request merges" if done.strategy == "pull-request" else "now"
    kept = learning_lines(done.learnings, f"learnings kept in project memory {when}")
    return "\n".join([f"{done.task.label} accepted ({how}): done", *kept])


@cli.command()
@click.argument("task_id")
@click.argument("text")
@click.option("--by", "actor", default="human", show_default=True, help="Who answers.")
def answer(task_id: str, text: str, actor: str) -> None:
    """Answer the question an attempt of TASK_ID asked (its agent's ask_human).

    The answer goes into the task's notes, so the next attempt's prompt carries it; a task
    waiting for it ("needs input") may be claimed again at once. An attempt still waiting
    for the answer gets it as its tool's reply.
    """
    asked = questions.answer(task_id, text, intake.clean_text(actor, "--by"))
    click.echo(f"{asked['task']}: answered ({asked['question'][:60]})")


@cli.command()
@click.argument("task_ids", nargs=-1, required=True)
@click.option("--reason", required=True, help="What to fix; the next attempt reads it.")
@click.option(
    "--comment",
    "comments",
    multiple=True,
    metavar="PATH:LINE:TEXT",
    help="A comment on a line of a file on the task's branch (agent/TASK-<id>), e.g. "
    "'src/a.py:42:handle None', or on a range, 'src/a.py:42-45:...': PATH relative to the "
    "repository (it ends at the first ':<number>:', so it may hold colons), LINE numbered "
    "from 1 as in the file on the branch, then the text (colons too). Repeatable. Each goes "
    "into the notes with the lines it is about. Only with a single task. (Comments on "
    "removed lines: the review page.)",
)
@click.option("--by", "actor", default="human", show_default=True, help="Who rejects.")
@click.option("--expect", metavar="SHA", help="Reject only if the branch is still at this commit.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: one list.")
def reject(
    task_ids: tuple[str, ...],
    reason: str,
    comments: tuple[str, ...],
    actor: str,
    expect: str | None,
    as_json: bool,
) -> None:
    """Send provisional tasks back to incoming, with the reason in their retry notes.

    A bad --comment (no such file or line on the branch) rejects nothing.
    """
    reason = queue_utils.rejection_reason(intake.clean_text(reason, "--reason"))
    actor = intake.clean_text(actor, "--by")
    if comments and len(task_ids) > 1:
        raise InvalidInput("--comment names lines of one task's branch: reject one task with it")
    parsed = [review_comments.parse_line_comment(spec) for spec in comments]
    noted = (
        f"the reason and {plural(len(parsed), 'line comment')} are" if parsed else "the reason is"
    )

    def line(task: Task) -> str:
        return f"{task.label} rejected: back in {task.state.value}; {noted} in its notes"

    def row(task: Task) -> dict[str, Any]:
        return {"id": task.label, "state": task.state.value, "comments": len(parsed)}

    def one(raw: str) -> Task:
        return review.reject(raw, reason, actor, parsed, expect)

    _each(task_ids, one, line, row if as_json else None)


@cli.command()
@click.argument("task_id")
@click.option("--by", "actor", default="human", show_default=True, help="Who approves.")
def approve(task_id: str, actor: str) -> None:
    """Create the subtasks of a proposed breakdown (breakdown.approve: true in config.yaml).

    `octopoid reject TASK-N --reason ...` sends the proposal back to breakdown instead.
    """
    created = review.approve(task_id, intake.clean_text(actor, "--by"))
    click.echo(f"created {', '.join(t.label for t in created)}; they run in order")


@cli.command()
@click.argument("task_ids", nargs=-1, required=True)
@click.option(
    "--budget",
    default="",
    help="Give the tasks this budget from now on, e.g. 'usd=10 turns=200' (one a budget "
    "stopped waits in failed/ for this).",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Start again from the base branch: earlier attempts' commits are set aside "
    "(kept as refs/octopoid/replaced/agent/TASK-<id>-<sha>), not built on.",
)
def retry(task_ids: tuple[str, ...], fresh: bool, budget: str) -> None:
    """Move failed, rejected or breakdown tasks back to incoming, with fresh attempts.

    Their retry notes are kept, so the next attempt reads what the last ones found, and
    its prompt lists the commits the branch already holds. From breakdown/, the task is
    tried whole again instead of being split.
    """
    how = " (from its base)" if fresh else ""
    limits = budgets.parse(intake.clean_text(budget, "--budget"), "--budget") if budget else None
    _each(
        task_ids,
        lambda raw: f"{review.retry(raw, fresh, budget=limits).label} back in incoming{how}",
    )


@cli.command()
@click.argument("task_ids", nargs=-1, required=True)
@click.option("--reason", default="requeued by hand", show_default=True)
def requeue(task_ids: tuple[str, ...], reason: str) -> None:
    """Move claimed tasks back to incoming (their retry notes are kept).

    The claim is taken back at once; a running attempt is told to stop, gets the shutdown
    grace to stop its agent and save its notes, and whatever is left of it is killed. The
    attempt counts.
    """
    reason = intake.clean_text(reason, "--reason")

    def one(raw: str) -> str:
        task, how = recovery.requeue_running(raw, reason)
        return f"{task.label} back in incoming; {how}"

    _each(task_ids, one)


@cli.command()
@click.argument("task_ids", nargs=-1, required=True)
@click.option("--reason", required=True, help="Why; kept in the task's History.")
@click.option(
    "--wont-do",
    "wont_do",
    is_flag=True,
    help="Close as won't do (its learnings are dropped) instead of as done.",
)
@click.option("--by", "actor", default="human", show_default=True, help="Who closes.")
def close(task_ids: tuple[str, ...], reason: str, wont_do: bool, actor: str) -> None:
    """Move tasks to done without merging anything.

    As done (the default): nothing needed changing, or it was done elsewhere; the task's
    learnings go into memory as at accept. With --wont-do: it will not be done. Works from
    incoming, provisional, failed, rejected and breakdown; a claimed task is requeued
    first. The branch is kept; `octopoid worktrees --prune` deletes it once merged.
    """
    reason, actor = intake.clean_text(reason, "--reason"), intake.clean_text(actor, "--by")
    kind = "wont-do" if wont_do else "done"

    _each(
        task_ids,
        lambda raw: (
            f"{review.close(raw, kind, reason, actor).task.label} closed as {kind} (nothing merged)"
        ),
    )


@cli.command()
@click.argument("task_id")
@click.option("--path", "show_path", is_flag=True, help="Print where the notes live instead.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable: id, notes, path.")
def notes(task_id: str, show_path: bool, as_json: bool) -> None:
    """Print a task's retry notes (what earlier attempts left for the next one)."""
    if as_json:
        _emit_json(reports.notes_details(task_id))
        return
    task_id = normalize_task_id(task_id)
    text = task_notes.get_task_notes(task_id)
    if text is None:  # none: is it a task at all (exit 3)? Found notes need no store
        queue_utils.known_task_id(task_id)
    if show_path:
        click.echo(task_notes.notes_location(task_id))
        return
    if text is None:
        click.echo(f"TASK-{task_id} has no retry notes")
        return
    click.echo(text, nl=False)


@cli.command("checks")
@click.argument("task_id")
def checks_cmd(task_id: str) -> None:
    """Run a task's checks and merge pre-check on its branch now (moves nothing)."""
    verdict = review.recheck(task_id)
    for result in verdict.results:
        click.echo(result.line())
        if not result.passed and result.output.strip():
            click.echo(result.output.rstrip())
    for line in verdict.unreached:
        click.echo(line)
    if verdict.conflicts is not None:
        click.echo(f"merge pre-check: conflicts in {', '.join(verdict.conflicts) or '?'}")
    if verdict.refused:
        click.echo(f"merge pre-check: refused: {merge_guard.reason(verdict.refused)}")
    if verdict.conflicts is None and not verdict.refused:
        click.echo("merge pre-check: merges cleanly into its base")
    sys.exit(0 if verdict.passed else 1)


@cli.command()
@click.argument("task_id")
@click.option("--stat", is_flag=True, help="Lines added and removed per file instead.")
@click.option("--json", "as_json", is_flag=True, help="With --stat: machine-readable output.")
def diff(task_id: str, stat: bool, as_json: bool) -> None:
    """Show what a task's branch changes against its base branch."""
    if as_json and not stat:
        raise click.UsageError("--json goes with --stat (the diff itself is text)")
    if not stat:  # git's bytes as they are, whatever the locale says: `git diff` prints them so
        diffs.write_diff(task_id, sys.stdout.buffer)
        return
    summary = diffs.stat_summary(task_id)
    if as_json:
        _emit_json(summary)
        return
    files, totals = summary["files"], summary["totals"]
    if not files:
        click.echo("no changes against its base")
        return
    click.echo(_stat_table(files))
    click.echo(f"{plural(len(files), 'file')} changed, +{totals['added']} -{totals['removed']}")


def _stat_table(files: list[dict[str, Any]]) -> str:
    """As ``git diff --numstat`` reads, with a header: ``-`` counts for a binary file."""
    rows = [["ADDED", "REMOVED", "FILE"]]
    for f in files:
        counts = ["-", "-"] if f["binary"] else [str(f["added"]), str(f["removed"])]
        rows.append([*counts, f"{f['old_path']} -> {f['path']}" if f["old_path"] else f["path"]])
    return _table(rows)


@cli.command()
@click.option("--prune", is_flag=True, help="Remove worktrees of tasks that are done or gone.")
def worktrees(prune: bool) -> None:
    """List task worktrees (or prune those of done or gone tasks).

    Pruning deletes a task's branch only when its base has all of it; a branch left for a
    pull request is kept, and the output says so.
    """
    if prune:
        click.echo("\n".join(review.prune_worktrees()) or "nothing to prune")
        return
    rows = review.list_worktrees()
    click.echo(_table([["WORKTREE", "TASK STATE"], *map(list, rows)]) if rows else "no worktrees")


@cli.command()
@click.option(
    "--rebuild", is_flag=True, help="Also rebuild the claim index and usage ledger from the files."
)
@click.option(
    "--repair",
    is_flag=True,
    help="Also finish what dead accepts, closes, splits and plan approvals left (their journals).",
)
def doctor(rebuild: bool, repair: bool) -> None:
    """Repair what a crash left (interrupted writes) and list what needs you, with the fix.

    Exits 2 while the configuration is invalid (it says why), as `status` does.
    """
    lines = doctor_checks.examine(rebuild, repair=repair)
    click.echo("\n".join(lines) if lines else "all is well: nothing to repair")
    for line in doctor_checks.network():
        click.echo(line)
    if config.problem():
        sys.exit(ConfigError.exit_code)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def agents(as_json: bool) -> None:
    """List agents: state (idle, running TASK-x, paused), last outcome, turns and cost today."""
    found = stalls.report()
    rows = reports.agents_overview(found=found)
    if as_json:
        _emit_json(rows)
        return
    if not rows:
        click.echo("no agents in .octopoid/agents.yaml")
        return
    table = [["NAME", "ROLE", "BACKEND", "NETWORK", "STATE", "LAST", "TURNS", "COST TODAY"]]
    for r in rows:
        last = f"{r['last_task']} {r['last_outcome']}" if r["last_task"] else "-"
        refused = f", {r['refused_today']} refused" if r["refused_today"] else ""
        table.append(
            [
                r["name"],
                r["role"],
                r["backend"],
                r["network"] + refused,
                r["state"],
                last,
                str(r["turns_today"]),
                "-" if r["cost_today_usd"] is None else f"${r['cost_today_usd']:.2f}",
            ]
        )
    click.echo(_table(table))
    click.echo(sandbox.describe()["summary"])
    for line in stalls.lines(found):
        click.echo(line)


@cli.command()
@click.option("--agent", help="Pause one agent instead of the whole system.")
def pause(agent: str | None) -> None:
    """Stop claiming new tasks (running attempts finish)."""
    agent_status.set_paused(True, agent)
    click.echo(f"paused {agent or 'all agents'}")


@cli.command()
@click.option("--agent", help="Resume one agent instead of the whole system.")
def resume(agent: str | None) -> None:
    """Claim tasks again after `octopoid pause` (with --agent: after a usage limit or the
    circuit breaker too), and say what is still paused, if anything."""
    hold = agent_status.held(agent) if agent else None
    still = _paused_list(agent_status.set_paused(False, agent))
    resumed = f"resumed {agent or 'the system'}"
    if hold is not None and hold.kind == agent_status.BREAKER:
        resumed += " (its circuit breaker is reset)"
    click.echo(f"{resumed}, but still paused: {', '.join(still)}" if still else resumed)


def _paused_list(state: dict[str, Any]) -> list[str]:
    """What is paused, each with how to lift it."""
    how = agent_status.how_to_resume
    paused = [f"the whole system ({how(state['system'])})"] if state["system"] else []
    return paused + [f"{name} ({how(by, name)})" for name, by in state["agents"].items()]


@cli.command("export")
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
def export_cmd(dest: Path) -> None:
    """Write the whole queue (any store) to DEST as <state>/TASK-<id>.md files, and each
    task's retry notes as notes/TASK-<id>.md.

    DEST must be new or empty. With `octopoid import` it moves a queue between the folder
    store and PostgreSQL; quarantined entries stay behind.
    """
    from ...queue.store.transfer import export_queue

    report = export_queue(queue_utils.get_store(), dest, task_notes.get_task_notes)
    click.echo("\n".join(report.lines("exported")))


@cli.command("import")
@click.argument("source", type=click.Path(exists=True, file_okay=False, path_type=Path))
def import_cmd(source: Path) -> None:
    """Load a folder queue (SOURCE/<state>/TASK-<id>.md, notes/TASK-<id>.md) into this
    project's store.

    Ids and states are kept; a task whose id already exists here, or a file that does not
    parse, is named and skipped.
    """
    from ...queue.store.transfer import import_queue

    report = import_queue(queue_utils.get_store(), source, task_notes.put_notes)
    click.echo("\n".join(report.lines("imported")))


@cli.group("db")
def db_group() -> None:
    """The PostgreSQL queue's schema (store.backend: postgres)."""


@db_group.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the octopoid schema in the configured database (idempotent)."""
    click.echo(queue_store.upgrade_store())


@cli.group("scheduler")
def scheduler_group() -> None:
    """Run the scheduler daemon, in the foreground or in the background."""


@scheduler_group.command("run")
@click.option("--once", is_flag=True, help="One pass (reap, claim, start attempts), then exit.")
def scheduler_run(once: bool) -> None:
    """Run in the foreground until Ctrl-C or SIGTERM (graceful: attempts get to finish)."""
    daemon = scheduler.Scheduler(own_process=True)
    scheduler_control.setup_logging(console=True)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: daemon.stop())
    daemon.run(once=once)


@scheduler_group.command("start")
def scheduler_start() -> None:
    """Start the scheduler in the background (logs: .octopoid/runtime/logs/)."""
    click.echo(f"scheduler started (pid {scheduler_control.start_background()})")


@scheduler_group.command("stop")
def scheduler_stop() -> None:
    """Stop the background scheduler gracefully, requeueing unfinished attempts."""
    click.echo(f"scheduler {scheduler_control.stop_background()} stopped")


@scheduler_group.command("status")
def scheduler_status() -> None:
    """Is a scheduler running for this project?"""
    status = scheduler_control.scheduler_status()
    if status["running"]:
        click.echo(f"running (pid {status['pid']})")
    elif status["stale_pid_file"]:
        click.echo(f"not running (stale pid file for pid {status['pid']})")
    else:
        click.echo("not running")


@cli.command()
@click.option(
    "--dir",
    "workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to make the demo project (default: a new temp directory).",
)
def demo(workdir: Path | None) -> None:
    """Watch the whole loop on a scratch repo: queue, agent, retry notes, review, merge.

    Needs no API key: the agent is a scripted command shipped with octopoid. Exits 0
    only if every step really happened.
    """
    root, problems = demo_run.run_demo(workdir, click.echo)
    for problem in problems:
        click.echo(f"octopoid demo: {problem}", err=True)
    if not problems:
        click.echo("\nThe loop worked: every task is done, and the retry started from the notes.")
    click.echo(
        f"\nThe demo project stays in {root}; remove it with: rm -rf {shlex.quote(str(root))}"
    )
    sys.exit(1 if problems else 0)


@cli.command("import-octopoid")
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
def import_octopoid(path: Path) -> None:
    """Import the queue of an octopoid checkout at PATH (.orchestrator/shared/queue).

    Ids, headers, History and retry notes are kept; claimed tasks wait in incoming again
    and escalated ones go to breakdown. PATH is only read; running it again changes nothing.
    """
    report = importer.import_octopoid(path)
    for line in report.imported:
        click.echo(f"imported {line}")
    imported = plural(len(report.imported), "task")
    click.echo(f"{imported} imported, {len(report.already)} already here")
    if report.problems:
        click.echo(f"could not map {plural(len(report.problems), 'thing')}:")
        click.echo("\n".join(f"  {problem}" for problem in report.problems))


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0: any free one).")  # fmt: skip
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read the access token from this file (refused if other users may read it).",
)
@click.option(
    "--token",
    help="Access token. Every local user sees it in `ps`: prefer --token-file or "
    "OCTOPOID_WEB_TOKEN.",
)
def web(host: str, port: int, token_file: Path | None, token: str | None) -> None:
    """Serve the review page: board, diffs with line comments, accept and reject.

    Prints a sign-in link that works once, within minutes; after that, the form at /login
    takes the access token: --token-file, OCTOPOID_WEB_TOKEN or --token (required for a
    --host that is not loopback), else a new one in .octopoid/runtime/web-token. Sessions
    end after 8 idle hours, 7 days, Sign out, or a restart. Ctrl-C stops it. Needs the web
    extra: pip install 'octopoid[web]'.
    """
    config.get_queue_dir()  # no project here: one clear line, before anything starts
    try:
        from ..web import server
    except ModuleNotFoundError as exc:
        if (exc.name or "orchestrator").startswith("orchestrator"):
            raise
        click.echo(
            f"octopoid: octopoid web needs the web extra: pip install 'octopoid[web]' "
            f"(missing: {exc.name})",
            err=True,
        )
        sys.exit(2)
    chosen = server.chosen_token(token, token_file)
    server.serve(host, port, chosen, lambda line: click.echo(f"octopoid web: {line}"))


cli.add_command(memory_group)
cli.add_command(forge_group)
cli.add_command(intake_command)
cli.add_command(mcp_command)
cli.add_command(plan_group)
cli.add_command(preview_command)
cli.add_command(stats_command)
cli.add_command(say_command)
cli.add_command(stop_command)
cli.add_command(attach_command)


def main() -> None:
    """Console-script entry point."""
    # What lives now (the interpreter's start, click, this module) lives as long as the
    # process: frozen, the collector's passes over a command's imports no longer walk it
    # again and again (about 6% of most commands: scripts/bench_startup.py). What is made
    # from here on is collected as ever, so a long command (scheduler, web) is unchanged.
    gc.freeze()
    cli(prog_name="octopoid")


__all__ = ["cli", "main"]


if __name__ == "__main__":
    main()
