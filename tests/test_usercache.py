"""A YAML file's parse is kept by its path and whole text in the user's own cache: a command
whose config did not change loads no PyYAML, and an edit is never answered from the cache."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.base import usercache
from orchestrator.model.exceptions import ConfigError


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "caches"))
    return tmp_path / "caches"


class Counted:
    """A parser that counts its calls: what the cache saved is what it was not asked."""

    def __init__(self, result: object = None) -> None:
        self.calls, self.result = 0, result

    def __call__(self, text: str) -> object:
        self.calls += 1
        return {"text": text} if self.result is None else self.result


def test_the_same_text_at_the_same_path_is_parsed_once(cache_home: Path, tmp_path: Path):
    parse = Counted()
    path = tmp_path / "config.yaml"
    assert usercache.parsed(path, "a: 1\n", parse) == {"text": "a: 1\n"}
    assert usercache.parsed(path, "a: 1\n", parse) == {"text": "a: 1\n"}
    assert parse.calls == 1


def test_an_edit_of_the_same_size_is_parsed_again(cache_home: Path, tmp_path: Path):
    parse = Counted()
    path = tmp_path / "config.yaml"
    usercache.parsed(path, "a: 1\n", parse)
    assert usercache.parsed(path, "a: 2\n", parse) == {"text": "a: 2\n"}
    assert usercache.parsed(tmp_path / "other.yaml", "a: 2\n", parse) == {"text": "a: 2\n"}
    assert parse.calls == 3


def test_what_is_not_plain_data_is_parsed_every_time(cache_home: Path, tmp_path: Path):
    when = datetime.date(2026, 11, 26)  # YAML's dates: marshal keeps none
    parse = Counted({"when": when})
    for _ in range(2):
        assert usercache.parsed(tmp_path / "c.yaml", "when: 2026-11-26\n", parse) == {"when": when}
    assert parse.calls == 2


def test_a_cache_folder_that_is_a_link_is_never_read_or_written(cache_home: Path, tmp_path: Path):
    (tmp_path / "elsewhere").mkdir()
    (cache_home / "octopoid").mkdir(parents=True)
    (cache_home / "octopoid" / "parsed").symlink_to(tmp_path / "elsewhere")
    parse = Counted()
    for _ in range(2):
        usercache.parsed(tmp_path / "c.yaml", "a: 1\n", parse)
    assert parse.calls == 2
    assert os.listdir(tmp_path / "elsewhere") == []


def test_a_torn_entry_is_a_miss(cache_home: Path, tmp_path: Path):
    parse = Counted()
    usercache.parsed(tmp_path / "c.yaml", "a: 1\n", parse)
    (entry,) = (cache_home / "octopoid" / "parsed").iterdir()
    entry.write_bytes(entry.read_bytes()[:7])
    assert usercache.parsed(tmp_path / "c.yaml", "a: 1\n", parse) == {"text": "a: 1\n"}
    assert parse.calls == 2


def test_bad_yaml_is_named_though_the_good_text_before_it_was_kept(cache_home: Path, project: Path):
    path = project / ".octopoid" / "config.yaml"
    assert config.load_config()["memory"]["budget"] == 4000  # parsed and kept
    path.write_text(path.read_text() + "memory: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        config.load_config()


RACER = """
import sys
import time
from pathlib import Path
from orchestrator.base import usercache

path, me, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
(go.parent / f"ready-{me}").touch()
while not go.exists():  # all start together, so their writes overlap
    time.sleep(0.001)
for n in range(1000):
    text = f"writer: {me}\\nround: {n % 3}\\n"
    got = usercache.parsed(path, text, lambda t: {"text": t})
    if got != {"text": text}:
        sys.exit(f"{me} got {got!r} for {text!r}")
"""


def test_processes_writing_one_entry_at_once_each_get_their_own_text_s_parse(
    cache_home: Path, tmp_path: Path
):
    """Four processes parse different texts of one path at the same time, each writing the
    one entry the path has: every answer is its own text's, never a torn or another's."""
    import subprocess
    import sys

    from .support import child_env, wait_for

    env = {**child_env(tmp_path), "XDG_CACHE_HOME": str(cache_home)}
    go = tmp_path / "go"
    argv = [sys.executable, "-c", RACER, str(tmp_path / "config.yaml")]
    racers = [
        subprocess.Popen([*argv, str(n), str(go)], env=env, stderr=subprocess.PIPE, text=True)
        for n in range(4)
    ]
    wait_for("the racers to be ready", lambda: len(list(tmp_path.glob("ready-*"))) == 4, 60)
    go.touch()
    failed = [(r.wait(120), r.stderr.read()) for r in racers]
    assert [code for code, _ in failed] == [0] * 4, failed
    assert not [p for p in (cache_home / "octopoid" / "parsed").iterdir() if ".marshal." in p.name]
