"""The one-pass redaction hides at least every byte the redaction before it hid, and its
shape gate (Hyperscan or RE2, where installed) changes nothing.

The old module is imported from git (``BEFORE_SINGLE_PASS``) beside the current one and both
run on the same text: the secrets corpus, hypothesis-built text dense with anchors, and each
corpus secret streamed in two pieces cut at every byte. Each installed engine's gate must
give exactly the spans of the anchor path alone, and name every detector whose regex matches.
"""

from __future__ import annotations

import base64
import re
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.base import redaction, shape_gate
from tests.helpers.secrets_corpus import (
    FakeSecret,
    code_like_output,
    corpus,
    fake_secrets,
    ordinary_output,
    redaction_at,
)

OLD = redaction_at()
before = pytest.mark.skipif(OLD is None, reason="the commit before is not in this clone")
#: The anchor path alone (None) and every shape-gate engine on this machine.
ENGINES = [None, *shape_gate.installed()]

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


@before
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


@before
@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(PIECES, FILLER), max_size=25))
def test_text_dense_with_anchors_loses_no_redaction(parts: list[str]) -> None:
    assert_hides_as_much("".join(parts).encode())


@before
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("secret", SECRETS, ids=[s.name for s in SECRETS])
def test_a_secret_split_at_every_byte_streams_as_before(
    secret: FakeSecret, engine: str | None
) -> None:
    line = f"TASK-42 sk-x 🐙 {secret.text} ✓\nafter\n".encode()
    new, old = redaction.Redactor(ENV), OLD.Redactor(ENV)
    for cut in range(1, len(line)):
        outs = []
        for stream in (new.stream(engine), old.stream()):
            outs.append(stream.push(line[:cut]) + stream.push(line[cut:]) + stream.close())
        assert outs[0] == outs[1], cut


@before
@pytest.mark.parametrize(
    "line",
    [
        "AKIA" * 60 + " ok AKIA0123456789ABCDEF.x AKIA" + "B" * 30,
        ("x ghp_" + "a1B2" * 9) * 5 + "ghp_" + "a1B2" * 9 + "+/=tail end",
        ENV["MY_SERVICE_TOKEN"] * 4 + " " + ENV["MY_SERVICE_TOKEN"] + "-x " + ENCODED[0] * 3,
    ],
)
def test_a_line_of_overlapping_matches_is_redacted_exactly_as_before(line: str) -> None:
    """Ends inside a token run already extended share its end (``TokenEnds``)."""
    env = {**ENV, "GH_TOKEN": "ghp_" + "a1B2" * 9}
    assert redaction.Redactor(env)(line) == OLD.Redactor(env)(line)


#: Bytes mapped onto token bytes and the ones that end a token.
TOKENISH = bytes.maketrans(bytes(range(256)), (b"aZ9_-+/=. !@\n" * 20)[:256])


@given(st.binary(min_size=1, max_size=60).map(lambda b: b.translate(TOKENISH)), st.data())
def test_token_ends_shared_along_a_run_are_each_ends_own(data: bytes, draw: st.DataObject) -> None:
    ends = draw.draw(st.lists(st.integers(1, len(data)), max_size=20))
    shared = redaction.TokenEnds(data)
    assert [shared(end) for end in ends] == [redaction.TokenEnds(data)(end) for end in ends]


# --- the shape gate -------------------------------------------------------------------------

needs_engine = pytest.mark.skipif(not ENGINES[1:], reason="neither hyperscan nor google-re2")
DETECTORS = redaction.shape_scanner().detectors
WIDENED = [re.compile(shape_gate.superset(d.regex)) for d in DETECTORS]


def assert_gate_changes_nothing(data: bytes) -> None:
    """Each engine: the same spans as the anchor path, and every matching detector named."""
    redactor = redaction.Redactor(ENV)
    expected = redactor.spans(data, engine=None)
    matching = {i for i, d in enumerate(DETECTORS) if d.regex.search(data)}
    assert matching <= {i for i, w in enumerate(WIDENED) if w.search(data)}  # as Python reads it
    for engine in ENGINES[1:]:
        assert matching <= redaction.compiled_gate(engine)(data), engine
        assert redactor.spans(data, engine=engine) == expected, engine


@needs_engine
def test_the_gate_changes_nothing_on_the_corpus_and_code() -> None:
    text = corpus() + "".join(f"x {form} y\n" for form in ENCODED) + code_like_output()
    assert_gate_changes_nothing(text.encode())
    for secret in SECRETS:  # alone, so no other secret's detector is run by chance
        assert_gate_changes_nothing(secret.text.encode())


@needs_engine
@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(PIECES, FILLER, st.binary(max_size=8)), max_size=25))
def test_the_gate_changes_nothing_on_text_dense_with_anchors(parts: list[str | bytes]) -> None:
    data = b"".join(p if isinstance(p, bytes) else p.encode() for p in parts)
    assert_gate_changes_nothing(data)


@needs_engine
@pytest.mark.parametrize("engine", ENGINES[1:])
def test_the_corpus_streams_the_same_through_every_gate(engine: str) -> None:
    data = corpus().encode() * 3
    outs = []
    for stream in (redaction.Redactor(ENV).stream(engine), redaction.Redactor(ENV).stream(None)):
        outs.append(b"".join(stream.push(data[i : i + 4000]) for i in range(0, len(data), 4000)))
        outs[-1] += stream.close()
    assert outs[0] == outs[1]
    assert b"[REDACTED:" in outs[0]


@needs_engine
@pytest.mark.parametrize("engine", ENGINES[1:])
def test_a_regex_the_gate_cannot_widen_runs_on_every_chunk(engine: str) -> None:
    backreference = re.compile(rb"(['\"])hunter2\1")
    gate = shape_gate.ENGINES[engine]([backreference, re.compile(rb"sk-[a-z]{40}")])
    assert gate(b"nothing here") == {0}


@needs_engine
@pytest.mark.parametrize("engine", ENGINES[1:])
def test_streams_in_threads_share_one_gate(engine: str) -> None:
    """Streams may be redacted in several threads at once: Hyperscan's scratch space is
    one per thread, or a scan fails while another runs."""
    data = (code_like_output() + corpus()).encode() * 40
    outs: list[bytes | Exception] = []

    def redact(engine: str | None) -> None:
        stream = redaction.Redactor(ENV).stream(engine)
        try:
            pushed = [stream.push(data[i : i + 65536]) for i in range(0, len(data), 65536)]
            outs.append(b"".join(pushed) + stream.close())
        except Exception as exc:  # the assertion below shows it
            outs.append(exc)

    redact(None)
    threads = [threading.Thread(target=redact, args=(engine,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outs[1:] == outs[:1] * 4


@pytest.mark.parametrize(
    ("pattern", "flags", "text"),
    [
        (rb"(?i:secret)_KEY=[^\s]{4}", 0, b"SeCrEt_KEY=abcd"),
        (rb"token", re.I, b"TOKEN"),
        (rb"[^a]B", re.I, b"bb"),
        (rb" a b  # a comment", re.X, b"ab"),
        (rb"x.y", re.S, b"x\ny"),
        (rb"(?<![a-z])hf_[A-Za-z]{34}(?=\s|$)", 0, b"hf_" + b"a" * 34),
        (rb"[A-Za-z0-9]{14}\.atlasv1\.[\w=-]{60,}", 0, b"a" * 14 + b".atlasv1." + b"b" * 61),
        (
            rb"(?:(?<=[\s;])|^)mysql[^\r\n]{0,200}?-p([^\s'\"$-][^\s'\"]{5,}+)",
            0,
            b"mysql -pS3cret1",
        ),
    ],
)
def test_a_widened_regex_matches_wherever_its_regex_does(
    pattern: bytes, flags: int, text: bytes
) -> None:
    regex = re.compile(pattern, flags)
    assert regex.search(text)
    assert re.search(shape_gate.superset(regex), text)
    for engine in ENGINES[1:]:
        assert shape_gate.ENGINES[engine]([regex])(b"x " + text + b" y") == {0}, engine


def test_an_engine_that_cannot_build_gives_way_and_output_is_still_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An installed engine whose compile fails here (Hyperscan on a CPU without SSSE3):
    the next engine, then the anchor path, takes over; nothing goes out raw."""
    from orchestrator.base import redaction, shape_gate

    def broken(regexes):
        raise RuntimeError("this CPU lacks an instruction the engine needs")

    secret = b"key: AKIA" + b"Q" * 16 + b"\n"
    for engine in list(shape_gate.ENGINES):
        monkeypatch.setitem(shape_gate.ENGINES, engine, broken)
        redaction.compiled_gate.cache_clear()
        stream = redaction.Redactor({}).stream(engine)
        out = stream.push(secret) + stream.close()
        assert b"AKIA" + b"Q" * 16 not in out and b"REDACTED" in out, engine
    redaction.compiled_gate.cache_clear()
