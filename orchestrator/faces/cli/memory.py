"""`octopoid memory ...`: working notes and long-term memory. Parse, call, print."""

from __future__ import annotations

import json

import click

from ...base.lazy import lazy_import
from ...model.exceptions import OctopoidError
from ...model.tasks import normalize_task_id, plural, task_label

# Imported at first use: `octopoid --help` and every other command load this module too.
finishing = lazy_import("orchestrator.review.finishing")
intake = lazy_import("orchestrator.queue.intake")
lifecycle = lazy_import("orchestrator.memory.lifecycle")
notes = lazy_import("orchestrator.memory.notes")
provenance = lazy_import("orchestrator.memory.provenance")
queue_utils = lazy_import("orchestrator.queue.machine")


@click.group("memory")
def memory_group() -> None:
    """Working notes and long-term memory (what agents learn beyond one task)."""


@memory_group.command("add")
@click.argument("section")
@click.argument("text")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.option("--topic", help="A topic for long-term memory.")
def memory_add(section: str, text: str, tags: tuple[str, ...], topic: str | None) -> None:
    """Record TEXT under SECTION (Key Topics, Important Facts, People & Entities,
    Ongoing Threads, File Knowledge).

    Inside an attempt (OCTOPOID_NOTES_ID set) it goes to the task's notes, which become
    project memory when the task is accepted; otherwise to notes.md and long-term memory.
    """
    result = lifecycle.add_learning(
        section,
        intake.clean_text(text, "TEXT"),
        [intake.clean_text(tag, "--tag") for tag in tags],
        None if topic is None else intake.clean_text(topic, "--topic"),
    )
    state = "added to" if result["added"] else "already in"
    click.echo(f"{state} {result['file']} ({section})")


@memory_group.command("show")
@click.argument("task_id", required=False)
@click.option("--notes-id", help="Any ephemeral notes id (a task's is TASK-<id>).")
def memory_show(task_id: str | None, notes_id: str | None) -> None:
    """Print working notes: the main notes.md, or the task TASK_ID's own notes."""
    if task_id is not None and notes_id is not None:
        raise click.UsageError("give TASK_ID or --notes-id, not both")
    if task_id is not None:
        notes_id = task_label(normalize_task_id(task_id))
    manager = notes.NotesManager(notes_id=notes_id)
    if not manager.notes_file.exists():
        if task_id is not None:  # none: is it a task at all (exit 3)? Found notes need no store
            queue_utils.known_task_id(task_id)
        click.echo(f"no {manager.notes_file.name} yet")
        return
    click.echo(manager.load_notes(), nl=False)


@memory_group.command("search")
@click.argument("query")
@click.option("--tag", "tags", multiple=True, help="Only notes with this tag (repeatable).")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def memory_search(query: str, tags: tuple[str, ...], limit: int, as_json: bool) -> None:
    """Search long-term memory (BM25 ranked; punctuation in QUERY is fine)."""
    query = intake.clean_text(query, "QUERY")
    hits = lifecycle.search(query, [intake.clean_text(tag, "--tag") for tag in tags], limit)
    if as_json:
        click.echo(json.dumps(hits, indent=2, sort_keys=True))
        return
    if not hits:
        click.echo("no matching notes")
    for hit in hits:
        tags_text = f" [{' '.join(hit['tags'])}]" if hit["tags"] else ""
        click.echo(f"#{hit['id']:<5} {hit['content']}{tags_text}")
        if said := provenance.describe(hit):
            click.echo(f"       {said}")


@memory_group.command("remove")
@click.argument("target")
def memory_remove(target: str) -> None:
    """Forget a note by its id (#12 -> 12) or by its exact text."""
    removed = lifecycle.forget(intake.clean_text(target, "TARGET").lstrip("#"))
    if not removed:
        raise OctopoidError(f"no note matches {target!r}")
    click.echo(f"removed {plural(removed, 'note')}")


@memory_group.command("promote")
@click.argument("task_id")
def memory_promote(task_id: str) -> None:
    """Copy what an accept of TASK_ID would keep into long-term memory now (accept does it
    too): the learnings of its submitted attempt (and a person's), not those struck."""
    count = lifecycle.promote_task_notes(queue_utils.get_task(task_id), "human")
    click.echo(f"{plural(count, 'new note')} in long-term memory")


@memory_group.command("gc")
def memory_gc() -> None:
    """Remove working notes of tasks that are done or no longer exist.

    An accept that was interrupted before promoting the task's learnings is finished first.
    """
    for line in finishing.finish_interrupted():
        click.echo(line)
    removed = lifecycle.gc_ephemeral(finishing.is_over)
    click.echo("\n".join(f"removed {name}" for name in removed) or "nothing to remove")


SHOW_HEADING = (
    "learnings an accept keeps (`accept --forget N` strikes one, `--edit N TEXT`, `--keep N` "
    "lets one that reads as an instruction reach prompts)"
)


def learning_lines(rows: list[dict], heading: str = "") -> list[str]:
    """Learnings numbered as `accept --forget N` takes them, under ``heading`` (`show`'s
    by default); none: no lines."""
    if not rows:
        return []
    lines = [f"{heading or SHOW_HEADING}:"]
    for row in rows:
        struck = " - struck: not kept" if row["struck"] else ""
        lines.append(f"  {row['number']}. [{row['section']}] {row['text']} ({row['from']}){struck}")
        if row.get("instruction") and not row["struck"]:
            lines.append(f"     reads as an instruction ({row['instruction']}): " + (
                "kept by a person, prompts carry it" if row.get("kept") else
                f"no prompt carries it unless kept (`--keep {row['number']}`)"))  # fmt: skip
    return lines


def pending_rows(task: object) -> list[dict]:
    """A task's pending learnings as rows (``lifecycle.learning_rows``)."""
    return lifecycle.learning_rows(lifecycle.pending_learnings(task))
