"""Optional distillation (``memory.distill: anthropic``): after an accept, ask the model
which facts belong in the project's notes, validate its JSON, then ``apply_diff`` it.

Off by default. A failure (API error, invalid reply) is logged and changes nothing; the
accept it follows has already happened.
"""

from __future__ import annotations

import json
import logging
import os
import re
from importlib import import_module
from typing import Any

from ..model.exceptions import MemoryStoreError
from ..model.tasks import Task
from .instructions import instruction_shape
from .notes import SECTIONS, NotesManager

log = logging.getLogger("octopoid.memory")
MAX_ADDITIONS = 20
MAX_ITEM_CHARS = 500
JSON_RE = re.compile(r"\{.*\}", re.S)

INSTRUCTIONS = (
    "You maintain a project's working notes for AI coding agents. Given the current notes, "
    "a task that was just accepted and what its agent recorded, reply with JSON only: "
    '{"additions": [{"section": "<one of: ' + ", ".join(SECTIONS) + '>", "item": "..."}], '
    '"removals": ["<exact text of an existing item that is now wrong or redundant>"]}. '
    "Keep items short, factual and useful to later tasks."
)


def validate_diff(reply: str, existing: list[str]) -> tuple[list[dict[str, str]], list[str]]:
    """The reply's additions and removals, or ``MemoryStoreError`` saying what is wrong."""
    match = JSON_RE.search(reply)
    try:
        data = json.loads(match.group(0) if match else reply)
    except ValueError:
        raise MemoryStoreError("the model's reply is not JSON") from None
    if not isinstance(data, dict):
        raise MemoryStoreError("the model's reply is not a JSON object")
    additions, removals = data.get("additions", []), data.get("removals", [])
    if not isinstance(additions, list) or not isinstance(removals, list):
        raise MemoryStoreError("additions and removals must be lists")
    if len(additions) > MAX_ADDITIONS:
        raise MemoryStoreError(f"more than {MAX_ADDITIONS} additions")
    for a in additions:
        if not (
            isinstance(a, dict)
            and a.get("section") in SECTIONS
            and isinstance(a.get("item"), str)
            and 0 < len(a["item"].strip()) <= MAX_ITEM_CHARS
        ):
            raise MemoryStoreError(f"invalid addition: {json.dumps(a)[:200]}")
    known = set(existing)
    for r in removals:
        if not isinstance(r, str) or r not in known:
            raise MemoryStoreError(f"removal names no existing item: {str(r)[:200]}")
    return [{"section": a["section"], "item": a["item"]} for a in additions], removals


def distill(task: Task, task_items: list[dict[str, str]], memory_cfg: dict[str, Any]) -> dict:
    """Ask the model, validate, apply to notes.md; return what changed (empty when off)."""
    if memory_cfg["distill"] != "anthropic":
        return {}
    anthropic = import_module("anthropic")  # only when enabled: the SDK takes ~1 s to import
    key = os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        log.warning("distillation after %s skipped: ANTHROPIC_API_KEY is not set", task.label)
        return {"error": "ANTHROPIC_API_KEY is not set"}
    notes = NotesManager()
    existing = [i["item"] for i in notes.get_all_items()]
    message = (
        f"Current notes:\n{notes.get_notes()}\n\nAccepted task {task.label}: "
        f"{task.title}\n{task.context}\n\nWhat its agent recorded:\n"
        + "\n".join(f"- [{i['section']}] {i['item']}" for i in task_items)
    )
    try:
        client = anthropic.Anthropic(api_key=key, base_url=memory_cfg.get("base_url"))
        response = client.messages.create(
            model=memory_cfg["distill_model"],
            max_tokens=2000,
            system=INSTRUCTIONS,
            messages=[{"role": "user", "content": message}],
        )
        reply = "".join(b.text for b in response.content if b.type == "text")
        additions, removals = validate_diff(reply, existing)
    except (anthropic.AnthropicError, MemoryStoreError) as exc:  # no key, API error, bad reply
        log.warning("distillation after %s skipped: %s", task.label, exc)
        return {"error": str(exc)}
    # notes.md is a person's file (its items reach prompts as a person's own); the model's
    # words are no person's, so an addition that reads as an instruction is left out
    additions = [a for a in additions if not instruction_shape(a["item"])]
    notes.apply_diff(additions, removals)
    return {"added": len(additions), "removed": len(removals)}
