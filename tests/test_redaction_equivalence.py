"""The one-pass redaction hides at least every byte the redaction before it hid.

The old module is imported from git (``BEFORE_SINGLE_PASS``) beside the current one and both
run on the same text: the secrets corpus, hypothesis-built text dense with anchors, and each
corpus secret streamed in two pieces cut at every byte.
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import redaction
from tests.helpers.secrets_corpus import (
    FakeSecret,
    corpus,
    fake_secrets,
    ordinary_output,
    redaction_at,
)

OLD = redaction_at()
pytestmark = pytest.mark.skipif(OLD is None, reason="the commit before is not in this clone")

ENV = {"MY_SERVICE_TOKEN": "svc-7f3a9c2e5b1d4f608a2c", "DB_URL": "postgres://app:pw-9f8e7d6c@db/x"}
SECRETS = fake_secrets()
ENCODED = [
    base64.b64encode(b"id " + ENV["MY_SERVICE_TOKEN"].encode()).decode(),
    ENV["MY_SERVICE_TOKEN"].encode().hex().upper(),
]


def hidden(spans: list[redaction.Span]) -> set[int]:
    return {i for span in spans for i in range(span.start, span.end)}


def assert_hides_as_much(data: bytes) -> None:
    old = hidden(OLD.Redactor(ENV).spans(data))
    new = hidden(redaction.Redactor(ENV).spans(data))
    lost = sorted(old - new)
    assert not lost, data[max(0, lost[0] - 40) : lost[0] + 40] if lost else None


def test_the_corpus_is_redacted_exactly_as_before() -> None:
    text = corpus() + "".join(f"x {form} y\n" for form in ENCODED)
    assert redaction.Redactor(ENV)(text) == OLD.Redactor(ENV)(text)


#: Pieces that make text dense with near-secrets: every anchor, the corpus' secrets and their
#: contexts, separators, and ordinary output.
PIECES = st.sampled_from(
    [a.decode() for a in redaction.ANCHORS]
    + [s.text for s in SECRETS]
    + [s.secret[: len(s.secret) // 2] for s in SECRETS]
    + ordinary_output().splitlines()[:20]
    + [ENV["MY_SERVICE_TOKEN"], *ENCODED, "=", ":", '"', "@", "-", "\n"]
)
FILLER = st.text(alphabet="aAsSkK019_-+/=.:@\"' \n", max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(PIECES, FILLER), max_size=25))
def test_text_dense_with_anchors_loses_no_redaction(parts: list[str]) -> None:
    assert_hides_as_much("".join(parts).encode())


@pytest.mark.parametrize("secret", SECRETS, ids=[s.name for s in SECRETS])
def test_a_secret_split_at_every_byte_streams_as_before(secret: FakeSecret) -> None:
    line = f"TASK-42 sk-x 🐙 {secret.text} ✓\nafter\n".encode()
    new, old = redaction.Redactor(ENV), OLD.Redactor(ENV)
    for cut in range(1, len(line)):
        outs = []
        for redactor in (new, old):
            stream = redactor.stream()
            outs.append(stream.push(line[:cut]) + stream.push(line[cut:]) + stream.close())
        assert outs[0] == outs[1], cut
