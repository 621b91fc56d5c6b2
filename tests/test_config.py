"""Project discovery, config validation, and `octopoid init`."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.faces.scaffold import init_project
from orchestrator.model.exceptions import ConfigError


def test_root_is_found_by_walking_up(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("OCTOPOID_ROOT", raising=False)
    (tmp_path / ".octopoid").mkdir()
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert config.find_project_root() == tmp_path.resolve()
    assert config.get_notes_dir() == tmp_path.resolve() / ".octopoid/runtime/shared/notes"
    assert config.get_notes_dir().is_dir()


def test_no_project_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("OCTOPOID_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="octopoid init"):
        config.find_project_root()


def test_generated_config_is_valid_and_matches_the_defaults(project: Path) -> None:
    cfg = config.load_config()
    assert cfg["notes"] == {"stdout_limit": 3000, "prompt_budget": 12000, "log_cap_bytes": 10485760}
    agents = config.load_agents()
    assert agents["max_attempts"] == 3 and agents["agents"][0]["name"] == "impl-agent-1"


@pytest.mark.parametrize(
    ("file", "text", "message"),
    [
        ("config.yaml", "notes:\n  stdout_limt: 10\n", "unknown key 'notes.stdout_limt'"),
        ("config.yaml", "notes:\n  stdout_limit: lots\n", "'notes.stdout_limit' should be a whole"),
        ("config.yaml", "notes:\n  stdout_limit: true\n", "should be a whole number"),
        ("config.yaml", "notes:\n  stdout_limit: 5\n", "at least 100"),
        ("config.yaml", "merge:\n  strategy: rebase\n", "must be one of merge"),
        ("config.yaml", "- a\n- b\n", "must be a mapping"),
        ("config.yaml", "notes: [\n", "invalid YAML at line"),
        ("config.yaml", "a: !!python/object:os.system x\n", "invalid YAML"),
        ("agents.yaml", "agents:\n  - role: implement\n    backend: command\n", "missing key"),
        ("agents.yaml", "agents:\n  - name: a\n    role: r\n    backend: gpt\n", "backend"),
        ("agents.yaml", "agents:\n  - name: a\n    role: r\n    backend: command\n", "argv"),
        (
            "agents.yaml",
            "agents:\n  - name: a\n    role: r\n    backend: command\n    argv: [1]\n",
            "argv[0]' should be a string",
        ),
        (
            "agents.yaml",
            "agents:\n  - {name: a, role: r, backend: claude-code}\n"
            "  - {name: a, role: r, backend: claude-code}\n",
            "used twice",
        ),
        ("agents.yaml", "max_attempts: 0\n", "at least 1"),
        ("agents.yaml", "agents:\n  - {name: a, role: r, backend: anthropic}\n", "model' is req"),
        (
            "agents.yaml",
            "agents:\n  - {name: a, role: r, backend: claude-code, max_budget_usd: x}\n",
            "should be a number",
        ),
        (
            "agents.yaml",
            "agents:\n  - {name: a, role: r, backend: claude-code, env: {A: 1}}\n",
            "env[A]' should be a string",
        ),
        ("config.yaml", "prices:\n  m1: {input_per_mtok: 3}\n", "prices.m1.output_per_mtok"),
        ("agents.yaml", "agents: 3\n", "should be a list"),
    ],
)
def test_bad_config_names_file_key_and_expectation(project: Path, file, text, message) -> None:
    path = project / ".octopoid" / file
    path.write_text(text)
    loader = config.load_config if file == "config.yaml" else config.load_agents
    with pytest.raises(ConfigError) as err:
        loader()
    assert message in str(err.value) and str(path) in str(err.value)


def test_init_twice_changes_nothing(tmp_path: Path) -> None:
    first = init_project(tmp_path)
    assert tmp_path / ".octopoid/config.yaml" in first
    (tmp_path / ".octopoid/config.yaml").write_text("# mine\n")
    assert init_project(tmp_path) == []
    assert (tmp_path / ".octopoid/config.yaml").read_text() == "# mine\n"
    assert (tmp_path / ".octopoid/.gitignore").read_text() == "runtime/\n"
