"""Every ``octopoid`` command: its name, its short help and the module that defines it.

The one place the CLI defers imports. ``octopoid --help`` (and a group's) lists the table
without importing a command module; a command's module is imported when that command runs
or its own ``--help`` is asked, so each command pays only for what it uses (start-up:
docs/performance.md, scripts/bench_startup.py). A command module imports what it needs at
its top, where import-linter sees it. A key with a space is a group's subcommand; an entry
without a module is a group whose subcommands are listed here too.
"""

from __future__ import annotations

import gc
import importlib
from typing import Any, NamedTuple

import click

from .render import one_line_errors


class Entry(NamedTuple):
    """A command's module (under ``orchestrator.faces.cli``), its name there, and its short
    help as ``--help`` lists it: the first paragraph of its docstring
    (tests/test_cli_registry.py holds the two equal)."""

    module: str | None
    attr: str
    help: str


def group(help: str) -> Entry:
    """A group whose subcommands are entries of their own (``"memory add"``)."""
    return Entry(None, "", help)


COMMANDS: dict[str, Entry] = {
    "init": Entry("project", "init", "Create .octopoid/ (config, agents, prompts) and the "
                  "runtime folders here."),
    "doctor": Entry("doctor", "doctor", "Repair what a crash left (interrupted writes) and "
                    "list what needs you, with the fix."),
    "export": Entry("transfer", "export_cmd", "Write the whole queue (any store) to DEST as "
                    "<state>/TASK-<id>.md files, and each task's retry notes as "
                    "notes/TASK-<id>.md."),
    "import": Entry("transfer", "import_cmd", "Load a folder queue (SOURCE/<state>/"
                    "TASK-<id>.md, notes/TASK-<id>.md) into this project's store."),
    "db": group("The PostgreSQL queue's schema (store.backend: postgres)."),
    "db upgrade": Entry("project", "db_upgrade", "Create or migrate the octopoid schema in "
                        "the configured database (idempotent)."),
    "demo": Entry("onboard", "demo", "Watch the whole loop on a scratch repo: queue, agent, "
                  "retry notes, review, merge."),
    "import-octopoid": Entry("onboard", "import_octopoid", "Import the queue of an octopoid "
                             "checkout at PATH (.orchestrator/shared/queue)."),
    "enqueue": Entry("enqueue", "enqueue", "Add a task to incoming and print its id."),
    "list": Entry("tasks", "list_cmd", "List tasks in QUEUE (default: every queue but done), "
                  "a page of each at a time."),
    "show": Entry("show", "show", "Print a task: where it is, its branch head, its notes, "
                  "usage, and its file."),
    "diff": Entry("diff", "diff", "Show what a task's branch changes against its base branch."),
    "notes": Entry("notes", "notes", "Print a task's retry notes (what earlier attempts left "
                   "for the next one)."),
    "status": Entry("status", "status", "Tasks per queue, running claims with their lease, "
                    "and the oldest waiting task."),
    "agents": Entry("status", "agents", "List agents: state (idle, running TASK-x, paused), "
                    "last outcome, turns and cost today."),
    "accept": Entry("review", "accept", "Accept provisional tasks: merge each branch into its "
                    "base, mark done, clean up."),
    "reject": Entry("review", "reject", "Send provisional tasks back to incoming, with the "
                    "reason in their retry notes."),
    "close": Entry("review", "close", "Move tasks to done without merging anything."),
    "approve": Entry("review", "approve", "Create the subtasks of a proposed breakdown "
                     "(breakdown.approve: true in config.yaml)."),
    "retry": Entry("review", "retry", "Move failed, rejected or breakdown tasks back to "
                   "incoming, with fresh attempts."),
    "requeue": Entry("review", "requeue", "Move claimed tasks back to incoming (their retry "
                     "notes are kept)."),
    "answer": Entry("review", "answer", "Answer the question an attempt of TASK_ID asked "
                    "(its agent's ask_human)."),
    "checks": Entry("checks", "checks_cmd", "Run a task's checks and merge pre-check on its "
                    "branch now (moves nothing)."),
    "worktrees": Entry("worktrees", "worktrees", "List task worktrees (or prune those of done "
                       "or gone tasks)."),
    "pause": Entry("pause", "pause", "Stop claiming new tasks (running attempts finish)."),
    "resume": Entry("pause", "resume", "Claim tasks again after `octopoid pause` (with "
                    "--agent: after a usage limit or the circuit breaker too), and say what "
                    "is still paused, if anything."),
    "scheduler": group("Run the scheduler daemon, in the foreground or in the background."),
    "scheduler run": Entry("daemon", "scheduler_run", "Run in the foreground until Ctrl-C or "
                           "SIGTERM (graceful: attempts get to finish)."),
    "scheduler start": Entry("scheduler", "scheduler_start", "Start the scheduler in the "
                             "background (logs: .octopoid/runtime/logs/)."),
    "scheduler stop": Entry("scheduler", "scheduler_stop", "Stop the background scheduler "
                            "gracefully, requeueing unfinished attempts."),
    "scheduler status": Entry("scheduler", "scheduler_status", "Is a scheduler running for "
                              "this project?"),
    "memory": group("Working notes and long-term memory (what agents learn beyond one task)."),
    "memory add": Entry("memory", "memory_add", "Record TEXT under SECTION (Key Topics, "
                        "Important Facts, People & Entities, Ongoing Threads, File "
                        "Knowledge)."),
    "memory show": Entry("working", "memory_show", "Print working notes: the main notes.md, or "
                         "the task TASK_ID's own notes."),
    "memory search": Entry("memory", "memory_search", "Search long-term memory (BM25 ranked; "
                           "punctuation in QUERY is fine)."),
    "memory remove": Entry("memory", "memory_remove", "Forget a note by its id (#12 -> 12) "
                           "or by its exact text."),
    "memory promote": Entry("learnings", "memory_promote", "Copy what an accept of TASK_ID would "
                            "keep into long-term memory now (accept does it too): the "
                            "learnings of its submitted attempt (and a person's), not those "
                            "struck."),
    "memory gc": Entry("learnings", "memory_gc", "Remove working notes of tasks that are done or "
                       "no longer exist."),
    "plan": Entry("plan", "plan_group", "Plan a goal into dependent tasks a person reviews "
                  '(`octopoid plan "goal"`).'),
    "intake": Entry("forge", "intake_command", "Turn the open issues labelled LABEL into "
                    "tasks (GH-<n> / GL-<n>), once each."),
    "forge": Entry("forge", "forge_group", "GitHub or GitLab (config.yaml's forge section): "
                   "pull requests and issues."),
    "say": Entry("steer", "say_command", "Send TEXT to TASK_ID's running attempt (or, with "
                 "none running, to its next one)."),
    "stop": Entry("steer", "stop_command", "End TASK_ID's running attempt on purpose: its "
                  "processes are stopped, the reason goes into its notes, and the task goes "
                  "back to incoming without counting the attempt (against its attempts or its "
                  "agent's circuit breaker)."),
    "attach": Entry("steer", "attach_command", "Follow TASK_ID's running attempt live (its "
                    "tool calls, output and checks, as readable lines); each line you type is "
                    "sent to it as `octopoid say`."),
    "preview": Entry("preview", "preview_command", "Serve TASK_ID's branch for its reviewer, "
                     "in a box of its own; it is opened from the task's review page "
                     "(`octopoid web`), behind its sign-in."),
    "stats": Entry("stats", "stats_command", "What works, in numbers, from the tasks' "
                   "History: attempts, accepts and rejects, the retry effect (retries after a "
                   "failed check or a rejection against first attempts), cost per accepted "
                   "task, time to review, stalls, the breaker's pauses and the forge's "
                   "verdicts; for the project and per agent, role and week. docs/stats.md "
                   "defines each."),
    "web": Entry("serve", "web", "Serve the review page: board, diffs with line comments, "
                 "accept and reject."),
    "mcp": Entry("serve", "mcp_command", "Serve octopoid's tools on stdin/stdout (Model "
                 "Context Protocol), for a session: `claude mcp add octopoid -- octopoid mcp` "
                 "in the project."),
}  # fmt: skip


class LazyGroup(click.Group):
    """A group whose commands are the registry's entries under ``prefix``, each imported
    when it is run or its help is asked. It turns every error, octopoid's or click's own
    usage error, into one line on stderr and its exit code, for the subcommands too."""

    def __init__(self, *args: Any, prefix: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefix = prefix
        self.loaded: dict[str, click.Command] = {}

    def entries(self) -> dict[str, Entry]:
        """This group's own commands (not their subcommands), by name."""
        found = {}
        for key, entry in COMMANDS.items():
            name = key.removeprefix(self.prefix)
            if key.startswith(self.prefix) and " " not in name:
                found[name] = entry
        return found

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.entries())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = self.entries().get(cmd_name)
        if entry is None:
            return None
        if cmd_name not in self.loaded:
            self.loaded[cmd_name] = load(entry, cmd_name, self.prefix)
        return self.loaded[cmd_name]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click lists commands, from the table: no command module is imported."""
        entries = self.entries()
        limit = formatter.width - 6 - max(map(len, entries))
        rows = [
            (name, click.Command(name, help=entries[name].help).get_short_help_str(limit))
            for name in sorted(entries)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with one_line_errors():  # the top level's own options and arguments
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with one_line_errors():  # below: subcommands' parsing, their work
            return super().invoke(ctx)


def load(entry: Entry, name: str, prefix: str = "") -> click.Command:
    """The command an entry names: its module imported now, or a group of the entries
    under it."""
    if entry.module is None:
        return LazyGroup(name, help=entry.help, prefix=f"{prefix}{name} ")
    module = importlib.import_module(f"{__package__}.{entry.module}")
    if not gc.isenabled():  # main() turned it off for the imports (a library's caller not)
        gc.freeze()  # the command's imports live as long as the process: never walked again
        gc.enable()  # the command's own work is collected as ever
    return getattr(module, entry.attr)
