"""Secrets are redacted by environment value and by shape, whole or streamed in pieces."""

from __future__ import annotations

import base64
import importlib
import itertools
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.base import redaction
from orchestrator.base.fsutil import TailBuffer
from orchestrator.base.redaction import PEM_HOLD_BYTES, Redactor, redact
from tests.helpers.secrets_corpus import (
    PRIVATE,
    FakeSecret,
    corpus,
    fake_secrets,
    ordinary_output,
)

SECRETS = fake_secrets()
NO_ENV: dict[str, str] = {}


def leaks(secret: FakeSecret, *outputs: str) -> list[str]:
    """The secret, or any 12 characters of it, found in ``outputs``."""
    pieces = {secret.secret[i : i + 12] for i in range(len(secret.secret) - 11)}
    return [piece for piece in pieces | {secret.secret} if any(piece in out for out in outputs)]


def stream(data: bytes, sizes: list[int], tmp_path: Path, redactor: Redactor) -> tuple[str, str]:
    """Feed ``data`` through a TailBuffer in chunks of ``sizes`` (cycled); (tail, log)."""
    log = tmp_path / "out.log"
    buf = TailBuffer(10**7, log_path=log, redact=redactor)
    pos = 0
    for size in itertools.cycle(sizes):
        if pos >= len(data):
            break
        buf.feed(data[pos : pos + size])
        pos += size
    buf.close()
    return buf.text(), log.read_text(encoding="utf-8")


@pytest.mark.parametrize("secret", SECRETS, ids=[s.name for s in SECRETS])
def test_every_fake_secret_shape_is_redacted_and_named(secret: FakeSecret) -> None:
    out = Redactor(NO_ENV)(secret.text)
    assert not leaks(secret, out) and f"[REDACTED:{secret.kind}]" in out


def test_the_corpus_has_fifty_shapes_or_more() -> None:
    assert len(SECRETS) >= 50 and len({s.secret for s in SECRETS}) == len(SECRETS)


@pytest.mark.parametrize("prefix", [b"", b"x", b"xy", b"user:"])
def test_a_known_value_is_hidden_base64_or_hex_encoded_wherever_it_sits(prefix: bytes) -> None:
    value = "svc-7f3a9c2e5b1d4f608a2c"
    redactor = Redactor({"MY_SERVICE_TOKEN": value})
    data = prefix + value.encode() + b"\n"
    for encoded in (
        base64.b64encode(data),
        base64.urlsafe_b64encode(data),
        data.hex().encode(),
        data.hex().upper().encode(),
    ):
        out = redactor(f"header {encoded.decode()} trailer")
        assert "[REDACTED:MY_SERVICE_TOKEN:encoded]" in out, (prefix, out)
        assert encoded[len(prefix) * 2 + 4 : -8].decode() not in out


def test_a_secret_whose_context_precedes_an_earlier_secret_is_held_with_it() -> None:
    """An AWS secret is recognised by the key id before it. Here the id is glued to a
    known password, so the secret's context begins inside that earlier secret: streamed a
    byte at a time, neither the password nor the id is let go before the secret settles
    (released alone, the password's first half would go out unredacted)."""
    (secret,) = [s for s in SECRETS if s.name == "aws id then secret"]
    aws_id, password = secret.text.split()[1], "Tr0ub4dor-and-3-horses"
    data = f"aws {password}{aws_id} secret {secret.secret} ✓\n{'x' * 200}\n".encode()
    stream = Redactor({"DEPLOY_PASSWORD": password}).stream()
    out = b"".join(stream.push(data[i : i + 1]) for i in range(len(data))) + stream.close()
    assert out.decode().startswith("aws [REDACTED:DEPLOY_PASSWORD] secret [REDACTED:aws-")


def test_ordinary_output_passes_unchanged() -> None:
    text = ordinary_output()
    assert Redactor(NO_ENV)(text) == text


def test_commit_shas_uuids_and_base64_images_survive() -> None:
    rng = random.Random(3)
    shas = [rng.randbytes(20).hex() for _ in range(50)]
    uuids = [f"{rng.getrandbits(128):032x}" for _ in range(50)]
    uuids = [f"{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:]}" for u in uuids]
    image = base64.b64encode(rng.randbytes(60_000)).decode()
    text = " ".join(shas + uuids) + "\n" + image
    assert Redactor(NO_ENV)(text) == text


def test_context_around_a_secret_stays_readable() -> None:
    out = Redactor(NO_ENV)(
        "postgres://app:hunter2hunter2@db:5432/app\n"
        "curl -H 'Authorization: Bearer abcdefghijklmnop0123456789'\n"
        "aws_secret_access_key = " + "A1b2" * 10
    )
    assert out.splitlines() == [
        "postgres://app:[REDACTED:url-password]@db:5432/app",
        "curl -H 'Authorization: Bearer [REDACTED:bearer-token]'",
        "aws_secret_access_key = [REDACTED:aws-secret-key]",
    ]


def test_placeholders_in_code_are_not_taken_for_passwords() -> None:
    code = 'url = f"postgres://{user}:{password}@{host}/app"; "redis://:$PASS@h"'
    assert Redactor(NO_ENV)(code) == code


def test_an_env_value_is_named_by_its_variable_even_where_a_shape_matches() -> None:
    key = "sk-ant-api03-" + "Q" * 40
    out = redact(f"key={key} other=sk-ant-admin01-ZZZZZZZZZZZZ", {"ANTHROPIC_API_KEY": key})
    assert out == "key=[REDACTED:ANTHROPIC_API_KEY] other=[REDACTED:anthropic-key]"


def test_a_multiline_env_value_is_redacted_line_by_line() -> None:
    env = {"SERVICE_SECRET": "first-line-of-it\nsecond-line-of-it"}
    out = redact("a first-line-of-it b\nsecond-line-of-it c", env)
    assert out == "a [REDACTED:SERVICE_SECRET] b\n[REDACTED:SERVICE_SECRET] c"


def test_an_env_value_starting_inside_another_is_still_found() -> None:
    env = {"A_TOKEN": "abcdef123456", "B_TOKEN": "3456@@uvwxyz"}
    assert redact("abcdef123456@@uvwxyz", env) == "[REDACTED:A_TOKEN]"


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=40))
def test_streamed_in_any_chunks_no_secret_survives_in_tail_or_log(
    sizes: list[int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    text = corpus()
    redactor = Redactor(NO_ENV)
    tail, log = stream(text.encode(), sizes, tmp_path_factory.mktemp("s"), redactor)
    assert not [s.name for s in SECRETS if leaks(s, tail, log)]
    assert tail == log == redactor(text)  # the same as redacting it whole


@settings(max_examples=20, deadline=None)
@given(sizes=st.lists(st.integers(50, 9000), min_size=1, max_size=20))
def test_no_secret_on_one_endless_line_leaks_however_it_is_chunked(
    sizes: list[int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """No newline at all: the stream lets go of all but its last bytes, never mid-secret."""
    rng = random.Random(12)
    one_line = [s for s in SECRETS if "\n" not in s.text]
    filler = [rng.randbytes(rng.randrange(600)).hex() + " é🐙 " for _ in one_line]
    text = "".join(f"{f}{s.text} " for f, s in zip(filler, one_line, strict=True))
    tail, log = stream(text.encode(), sizes, tmp_path_factory.mktemp("s"), Redactor(NO_ENV))
    assert not [s.name for s in one_line if leaks(s, tail, log)]


def test_two_tokens_of_a_kind_on_one_line_are_both_redacted() -> None:
    rng = random.Random(2)
    tokens = [f"{rng.getrandbits(128):032x}" for _ in range(2)]
    line = " ".join(f"//registry.npmjs.org/:_authToken={t}" for t in tokens)
    assert Redactor(NO_ENV)(line).count("[REDACTED:npm-token]") == 2


@pytest.mark.parametrize("name", ["github classic", "postgres", "opaque bearer", "anthropic"])
def test_a_secret_split_at_any_byte_is_redacted(name: str) -> None:
    secret = next(s for s in SECRETS if s.name == name)
    line = f"🐙 é {secret.text} ✓\n".encode()  # cuts land inside characters too
    redactor = Redactor(NO_ENV)
    for cut in range(1, len(line)):
        buf = TailBuffer(10_000, redact=redactor)
        buf.feed(line[:cut])
        buf.feed(line[cut:])
        buf.close()
        assert buf.text() == redactor(line.decode()), cut


def test_a_key_block_arriving_line_by_line_is_redacted_whole() -> None:
    block = next(s for s in SECRETS if s.name == "pem rsa").secret
    buf = TailBuffer(10_000, redact=Redactor(NO_ENV))
    for line in f"before\n{block}\nafter\n".splitlines(keepends=True):
        buf.feed(line.encode())
    buf.close()
    assert buf.text() == "before\n[REDACTED:private-key]\nafter\n"


def key_block(size: int, seed: int) -> list[str]:
    """The lines of a PGP-style private key block with about ``size`` bytes of base64."""
    body = base64.b64encode(random.Random(seed).randbytes(size * 3 // 4)).decode()
    tag = f"PGP {PRIVATE} KEY BLOCK-----"
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return [
        f"-----BEGIN {tag}",
        "Version: GnuPG v2",
        "Comment: a b c",
        "",
        *lines,
        f"-----END {tag}",
    ]


def test_a_key_block_is_held_until_its_end_line() -> None:
    lines = key_block(8000, seed=4)
    buf = TailBuffer(100_000, redact=Redactor(NO_ENV))
    buf.feed(b"before\n")
    for line in lines[:-1]:
        buf.feed(f"{line}\n".encode())
        assert buf.text() == "before\n"
    buf.feed(f"{lines[-1]}\nafter\n{'more output ' * 10}\n".encode())
    assert buf.text().startswith("before\n[REDACTED:private-key]\nafter\nmore output ")


@pytest.mark.parametrize("chunk", [7, 500, 4093, 65536])
def test_a_key_block_past_its_hold_is_redacted_wholesale_in_bounded_memory(chunk: int) -> None:
    data = "\n".join([*key_block(40_000, seed=5), "after\n"]).encode()
    buf = TailBuffer(100_000, redact=Redactor(NO_ENV))
    for i in range(0, len(data), chunk):
        buf.feed(data[i : i + chunk])
        assert buf._stream.held <= PEM_HOLD_BYTES
    buf.close()
    assert buf.text() == "[REDACTED:private-key]\nafter\n"


@pytest.mark.parametrize("newline", ["\r\n", "\\n", "\\r\\n"])  # CRLF, or escaped in JSON
@pytest.mark.parametrize("size", [3000, 20_000])
def test_a_key_block_with_other_newlines_is_redacted_wherever_chunks_cut(
    newline: str, size: int
) -> None:
    lines = key_block(size, seed=8)
    data = f'"{newline.join(lines)}{newline}"\nafter\n'.encode()
    for chunk in (7, 65, 66, 67, 4096):  # cuts between CR and LF, or inside an escape
        buf = TailBuffer(100_000, redact=Redactor(NO_ENV))
        for i in range(0, len(data), chunk):
            buf.feed(data[i : i + chunk])
        buf.close()
        kept = "\n" if newline == "\r\n" else newline  # output keeps a CR LF as LF
        assert buf.text() == f'"[REDACTED:private-key]{kept}"\nafter\n', chunk


def test_a_stream_without_newlines_holds_only_its_last_bytes() -> None:
    redactor = Redactor(NO_ENV)
    buf = TailBuffer(3000, redact=redactor)
    rng = random.Random(9)
    for _ in range(300):  # ~20 MB on one line
        buf.feed(rng.randbytes(65536).replace(b"\n", b" "))
        assert buf._stream.held <= redactor.hold
    buf.close()


def test_a_secret_longer_than_the_hold_is_redacted_and_its_tail_swallowed() -> None:
    buf = TailBuffer(3000, redact=Redactor(NO_ENV))
    buf.feed(b"token ghp_")
    for _ in range(100):  # a 6.5 MB token
        buf.feed(b"A1b2" * 16384)
        assert buf._stream.held <= redaction.HOLD_BYTES
    buf.feed(b" done\n")
    buf.close()
    assert buf.text() == "token [REDACTED:github-token] done\n"


def test_a_jwt_longer_than_the_hold_is_redacted_through_its_signature() -> None:
    payload = base64.urlsafe_b64encode(random.Random(6).randbytes(9000)).decode().rstrip("=")
    token = f"eyJhbGciOiJIUzI1NiJ9.{payload}.{'Sig0' * 10}"
    data = f"tok {token} end\n".encode()
    buf = TailBuffer(3000, redact=Redactor(NO_ENV))
    for i in range(0, len(data), 100):
        buf.feed(data[i : i + 100])
    buf.close()
    assert buf.text() == "tok [REDACTED:jwt] end\n"


def test_every_upstream_regex_has_anchors() -> None:
    """A new detect-secrets regex would run on every chunk: give it anchors here."""
    for module, name, _, rules in redaction.UPSTREAM:
        plugin = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)
        assert len(plugin.denylist) == len(rules), name


def test_an_anchor_hidden_by_another_still_runs_its_detectors() -> None:
    """The gate reports hits without overlap: ``://`` inside ``https://hooks.slack.com``, or
    ``AKIA`` starting on the last letter of ``ACCA``, must still run their detectors, and
    one run at its anchors must be tried where the hidden anchor starts."""
    detectors = redaction.upstream_detectors() + redaction.own_detectors()
    scanner = redaction.Scanner(detectors)
    owners: dict[bytes, set[int]] = {}
    for index, detector in enumerate(detectors):
        for anchor in detector.rule.anchors:
            owners.setdefault(anchor, set()).add(index)
    for outer in owners:
        for inner in owners:
            at = [i for i in range(len(outer)) if inner.startswith(outer[i:])]
            cases = [(outer[:i] + inner, i) for i in at] + (
                [(outer, outer.find(inner))] if inner in outer else []
            )
            for text, start in cases:
                run, starts = scanner._plan(text)
                assert owners[inner] <= run, (outer, inner)
                placed = [i for i in owners[inner] if detectors[i].rule.at_anchor]
                assert all(start in starts[i] for i in placed), (outer, inner)


def test_only_text_with_a_secrets_anchor_imports_detect_secrets() -> None:
    code = (
        "import sys\n"
        "import orchestrator.faces.cli.main\n"
        "from orchestrator.base.redaction import Redactor, redact\n"
        "Redactor({'A_TOKEN': 'abcdefgh'}); redact('')\n"
        "print('detect_secrets' in sys.modules)\n"
        "redact('incoming -> claimed (impl-1: attempt 1)')\n"  # a History line: no anchor
        "print('detect_secrets' in sys.modules)\n"
        "redact('id AKIA0123456789ABCDEF')\n"
        "print('detect_secrets' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["False", "False", "True"], out.stderr


@pytest.mark.parametrize(
    "text",
    [
        "NEXT_TOKEN=self._advance()",
        "DB_PASSWORD_FILE=/run/secrets/db",
        "curl -u admin:${PASSWORD} https://example.com",
        "python -m pytest tests/mysql.py -pno:cacheprovider",
        '{"token": "tokenizer_name", "password": "<your password>"}',
    ],
)
def test_code_that_only_names_a_secret_is_left_alone(text: str) -> None:
    assert Redactor(NO_ENV)(text) == text


@pytest.mark.parametrize(
    "text",
    ["SECRET_KEY=django-insecure-9x8c7v6b5n", "PASSWORD=hunter2hunter2", "mysql -pS3cretPass"],
)
def test_a_secret_assigned_or_passed_plainly_is_redacted(text: str) -> None:
    out = Redactor(NO_ENV)(text)
    assert "[REDACTED:" in out and text.split("=")[-1][-8:] not in out


ESCAPED = (
    "line \x1b[1;31mbold\x1b[0m \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x07bell\r\n"
    "next\rover \u202eflip\u2069 \x9bhidden \x00nul ✓ — “fine”\n"
)


def test_output_loses_escapes_and_control_characters_wherever_chunks_cut() -> None:
    """Terminal escapes as a whole, C0 but tab and newline, C1 and bidi characters: gone
    from the tail and the log, however the output is cut (even inside a sequence or a
    character); CR LF and CR end lines; a NUL is U+FFFD; other characters stay."""
    data = (ESCAPED * 40).encode()
    for seed in range(30):
        rng, buf, at = random.Random(seed), TailBuffer(100_000, redact=Redactor(NO_ENV)), 0
        while at < len(data):
            step = rng.randint(1, 9)
            buf.feed(data[at : at + step])
            at += step
        buf.close()
        expected = "line bold link bell\nnext\nover flip hidden \ufffdnul ✓ — “fine”\n" * 40
        assert buf.text() == expected, seed
