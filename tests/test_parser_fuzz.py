"""Each backend's parser reads whatever its agent sends: arbitrary JSON (hypothesis) never
raises, an event it cannot read is noted and skipped, and the attempt's result survives."""

from __future__ import annotations

import json

from anthropic._models import construct_type
from anthropic.types import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.backends.anthropic_api import read_blocks
from orchestrator.backends.base import AgentResult
from orchestrator.backends.claude_code import StreamJsonParser
from orchestrator.base.fsutil import TailBuffer
from orchestrator.base.redaction import Redactor

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = ["type", "subtype", "message", "content", "text", "name", "input", "id", "result",
        "usage", "num_turns", "total_cost_usd", "is_error", "session_id", "permission_denials",
        "input_tokens", "output_tokens", "tool_use_id", "model"]  # fmt: skip
TYPES = st.sampled_from(["system", "assistant", "user", "result", "text", "tool_use", "x"])
# Events shaped like claude's, with any value where a field is expected.
EVENTS = st.recursive(
    st.fixed_dictionaries({"type": TYPES}) | SCALARS,
    lambda inner: (
        st.dictionaries(st.sampled_from(KEYS), inner | TYPES, max_size=6)
        | st.lists(inner, max_size=3)
    ),
    max_leaves=25,
)


def parsed(lines: list[bytes]) -> tuple[StreamJsonParser, AgentResult, str]:
    out = TailBuffer(100_000, redact=Redactor({}))
    parser = StreamJsonParser(out)
    for line in lines:
        parser.feed(line + b"\n")
    parser.finish()
    result = parser.to_result(0, False)
    out.close()
    return parser, result, out.text()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(EVENTS | JSON, max_size=8))
def test_claude_s_parser_reads_any_json_lines_without_raising(events: list) -> None:
    parser, result, _ = parsed([json.dumps(e).encode() for e in events])
    assert isinstance(result.summary, str) and result.turns >= 0 and result.tokens_in >= 0
    assert parser.session_id is None or isinstance(parser.session_id, str)


def test_a_message_whose_content_is_a_string_is_read_as_its_text() -> None:
    tool = {"type": "tool_use", "name": "Edit", "input": "x"}
    lines = [
        {"type": "assistant", "message": {"id": "m1", "content": "plain text answer"}},
        {"type": "assistant", "message": {"id": "m2", "content": [tool, "stray"]}},
        {"type": "result", "subtype": "success", "num_turns": 2, "result": "done", "usage": "n/a"},
    ]
    _, result, text = parsed([json.dumps(e).encode() for e in lines])
    assert result.outcome == "success" and result.summary == "done" and result.tokens_in == 0
    assert "plain text answer" in text and "→ Edit: " in text


def test_an_event_it_cannot_read_is_noted_and_the_attempt_goes_on() -> None:
    lines = [
        {"type": "assistant", "message": {"id": ["not", "hashable"], "content": []}},
        {"type": "result", "subtype": "success", "num_turns": 1, "result": "done"},
    ]
    _, result, text = parsed([json.dumps(e).encode() for e in lines])
    assert "[octopoid: skipped a stream event it could not read (TypeError)" in text
    assert result.outcome == "success"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reply=st.dictionaries(st.sampled_from(KEYS), EVENTS | JSON, max_size=6))
def test_anthropic_replies_of_any_shape_are_read_without_raising(reply: dict) -> None:
    """As the SDK builds a Message from whatever the server sent (it does not validate)."""
    message = construct_type(type_=Message, value=reply)
    out = TailBuffer(100_000, redact=Redactor({}))
    blocks = read_blocks(getattr(message, "content", None), out)
    for block in blocks:
        assert block["type"] in ("text", "tool_use")
        if block["type"] == "tool_use":
            assert isinstance(block["name"], str) and isinstance(block["input"], dict)


def test_an_anthropic_block_without_its_fields_is_noted() -> None:
    message = construct_type(
        type_=Message,
        value={"content": [{"type": "text"}, {"type": "text", "text": "kept"}, "odd"]},
    )
    out = TailBuffer(100_000, redact=Redactor({}))
    assert read_blocks(message.content, out) == [{"type": "text", "text": "kept"}]
    out.close()
    assert out.text().count("[octopoid: skipped a content block") == 2
