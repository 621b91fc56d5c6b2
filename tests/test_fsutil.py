"""Atomic writes, durable renames, and the streaming tail buffer."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from orchestrator.base.fsutil import (
    TailBuffer,
    atomic_write,
    durable_rename,
    is_temp_name,
    remove_tree,
)
from orchestrator.base.redaction import Redactor, redact


def test_atomic_write_replaces_and_keeps_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")
    target.chmod(0o600)
    atomic_write(target, "new")
    assert target.read_text() == "new" and (target.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]  # no temp left behind


def test_durable_rename_moves_and_reports_a_lost_race(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x").write_text("1")
    durable_rename(tmp_path / "a" / "x", tmp_path / "b" / "x")
    assert (tmp_path / "b" / "x").read_text() == "1"
    with pytest.raises(FileNotFoundError):
        durable_rename(tmp_path / "a" / "x", tmp_path / "b" / "y")


def _remove_when_both_are_ready(root: Path, ready, errors) -> None:
    ready.wait()
    try:
        remove_tree(root)
    except OSError as exc:
        errors.put(repr(exc))


def test_two_processes_removing_one_tree_at_once_both_succeed(tmp_path: Path) -> None:
    """A runner's cleanup and the scheduler's sweep may remove the same clone together."""
    fork = multiprocessing.get_context("fork")
    for round in range(3):
        root = tmp_path / f"tree-{round}"
        for i in range(300):
            (root / f"d{i % 30}" / f"e{i}").mkdir(parents=True)
            (root / f"d{i % 30}" / f"e{i}" / "f").write_text("x")
        ready, errors = fork.Barrier(2), fork.SimpleQueue()
        both = [fork.Process(target=_remove_when_both_are_ready, args=(root, ready, errors))]
        both.append(fork.Process(target=_remove_when_both_are_ready, args=(root, ready, errors)))
        for proc in both:
            proc.start()
        for proc in both:
            proc.join()
        assert [proc.exitcode for proc in both] == [0, 0]
        assert errors.empty(), errors.get()
        assert not root.exists()


def test_temp_names_are_recognised() -> None:
    assert is_temp_name(".TASK-1.md.ab12cd34.tmp") and not is_temp_name("TASK-1.md")


def test_tail_keeps_the_last_characters_and_counts_the_rest() -> None:
    buf = TailBuffer(10)
    for chunk in (b"0123456789", b"abcdefghij", b"KLMNO"):
        buf.feed(chunk)
    buf.close()
    assert buf.text() == "fghijKLMNO" and buf.dropped_chars == 15 and buf.total_bytes == 25


def test_tail_never_splits_a_multibyte_character_across_chunks() -> None:
    data = ("aé🐙z" * 1000).encode()
    buf = TailBuffer(7)
    for i in range(0, len(data), 3):  # chunk edges land inside characters
        buf.feed(data[i : i + 3])
    buf.close()
    assert buf.text() == ("aé🐙z" * 1000)[-7:]
    assert "\ufffd" not in buf.text()


def test_invalid_utf8_and_nul_bytes_become_replacement_characters() -> None:
    buf = TailBuffer(100)
    buf.feed(b"ok \xff\xfe \x00 end")
    buf.close()
    assert buf.text() == "ok \ufffd\ufffd \ufffd end"


def test_log_is_capped_and_keeps_its_tail(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    buf = TailBuffer(100, log_path=log, log_cap_bytes=10_000)
    for i in range(2000):
        buf.feed(f"line {i:05d} ✓\n".encode())
    buf.close()
    size = log.stat().st_size
    text = log.read_text(encoding="utf-8")  # still valid UTF-8 after every cut
    assert size <= 10_000 + 200
    assert text.startswith("[...octopoid dropped the first ")
    assert text.endswith("line 01999 ✓\n") and buf.log_dropped_bytes > 0
    dropped = int(text.split("first ")[1].split(" ")[0])
    assert dropped + len(text.split("\n", 1)[1].encode()) == buf.total_bytes


def test_secrets_split_across_chunks_are_redacted_in_tail_and_log(tmp_path: Path) -> None:
    secret = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"
    redactor = Redactor({"ANTHROPIC_API_KEY": secret})
    log = tmp_path / "out.log"
    buf = TailBuffer(1000, log_path=log, redact=redactor)
    data = f"before {secret} after\n".encode()
    for i in range(0, len(data), 5):
        buf.feed(data[i : i + 5])
    buf.close()
    assert secret not in buf.text() and secret not in log.read_text()
    assert "[REDACTED:ANTHROPIC_API_KEY]" in buf.text()


def test_without_redaction_output_reaches_the_tail_at_once() -> None:
    buf = TailBuffer(100)
    buf.feed(b"no newline yet")
    assert buf.text() == "no newline yet"


def test_with_redaction_an_unfinished_line_waits_until_close(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    buf = TailBuffer(100, log_path=log, redact=Redactor({}))
    buf.feed(b"done\ntoken ghp_")
    assert buf.text() == "done\n"  # the rest could be the start of a secret
    buf.feed(b"A1b2" * 9 + b" ok")
    buf.close()
    assert buf.text() == log.read_text() == "done\ntoken [REDACTED:github-token] ok"


def test_a_secret_split_inside_a_multibyte_character_is_redacted(tmp_path: Path) -> None:
    secret = "ghp_" + "Zz9" * 12
    data = f"é🐙{secret}🐙é\n".encode()
    for cut in range(1, len(data)):
        log = tmp_path / f"{cut}.log"
        buf = TailBuffer(1000, log_path=log, redact=Redactor({}))
        buf.feed(data[:cut])
        buf.feed(data[cut:])
        buf.close()
        assert buf.text() == log.read_text() == "é🐙[REDACTED:github-token]🐙é\n", cut


def test_redaction_leaves_short_and_innocent_values() -> None:
    env = {"SOME_TOKEN": "1", "PATH": "/usr/bin", "MY_SECRET_THING": "correcthorse"}
    assert redact("1 /usr/bin correcthorse", env) == "1 /usr/bin [REDACTED:MY_SECRET_THING]"


def test_memory_stays_flat_for_a_large_stream() -> None:
    buf = TailBuffer(3000)
    chunk = os.urandom(64 * 1024)
    for _ in range(200):  # 12.5 MiB of binary junk
        buf.feed(chunk)
        assert buf._held <= 2 * 3000 + 2 * 64 * 1024
    buf.close()
    assert len(buf.text()) == 3000
