"""`octopoid memory add|search|remove`: working notes and long-term memory, without the
queue (`memory show`: notes.py; `memory promote|gc`, a task's notes after review:
learnings.py)."""

from __future__ import annotations

import click

from ...base.text import clean_text
from ...memory import lifecycle, provenance
from ...model.exceptions import OctopoidError
from ...model.tasks import plural
from . import render


@click.command("add")
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
    result = lifecycle.add_learning(section, text, tags, topic)
    state = "added to" if result["added"] else "already in"
    click.echo(f"{state} {result['file']} ({section})")


@click.command("search")
@click.argument("query")
@click.option("--tag", "tags", multiple=True, help="Only notes with this tag (repeatable).")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def memory_search(query: str, tags: tuple[str, ...], limit: int, as_json: bool) -> None:
    """Search long-term memory (BM25 ranked; punctuation in QUERY is fine)."""
    query = clean_text(query, "QUERY")
    hits = lifecycle.search(query, [clean_text(tag, "--tag") for tag in tags], limit)
    if as_json:
        render.emit_json(hits)
        return
    if not hits:
        click.echo("no matching notes")
    for hit in hits:
        tags_text = f" [{' '.join(hit['tags'])}]" if hit["tags"] else ""
        click.echo(f"#{hit['id']:<5} {hit['content']}{tags_text}")
        if said := provenance.describe(hit):
            click.echo(f"       {said}")


@click.command("remove")
@click.argument("target")
def memory_remove(target: str) -> None:
    """Forget a note by its id (#12 -> 12) or by its exact text."""
    removed = lifecycle.forget(clean_text(target, "TARGET").lstrip("#"))
    if not removed:
        raise OctopoidError(f"no note matches {target!r}")
    click.echo(f"removed {plural(removed, 'note')}")
