"""Where octopoid's files live, and the two YAML files that configure it.

Every path is computed at call time from the project root, so tests (and users with
``OCTOPOID_ROOT``) can point octopoid anywhere. The YAML files are checked against small
schemas: an unknown key, a wrong type or a missing field names the file, the key and what
was expected.

Its size: every path and both YAML schemas with their validation, the one place that says
what the configuration may hold.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from .base import netmodes, usercache, workspace_rules
from .base.lazy import lazy_import
from .base.patterns import LazyPattern
from .model import defaults
from .model.exceptions import ConfigError

yaml = lazy_import("yaml")  # ~15 ms: paid by the commands that read a YAML file, only

OCTOPOID_DIR = ".octopoid"
ROOT_ENV = "OCTOPOID_ROOT"


def find_project_root() -> Path:
    """The nearest directory at or above the cwd holding ``.octopoid/``."""
    env = os.environ.get(ROOT_ENV)
    if env:
        return _resolved(env)
    return _root_above(os.getcwd())


@lru_cache(maxsize=64)
def _root_above(start: str) -> Path:
    """Cached per directory (a failure is not cached): every redaction asks for agents.yaml."""
    here = Path(start).resolve()
    for candidate in (here, *here.parents):
        if (candidate / OCTOPOID_DIR).is_dir():
            return candidate
    raise ConfigError(
        f"no {OCTOPOID_DIR}/ directory in {here} or any parent; run `octopoid init` first"
    )


@lru_cache(maxsize=8)
def _resolved(path: str) -> Path:
    return Path(path).resolve()


def get_octopoid_dir() -> Path:
    return find_project_root() / OCTOPOID_DIR


def get_orchestrator_dir() -> Path:
    """``.octopoid/runtime``: everything octopoid writes while it runs (git-ignored)."""
    return get_octopoid_dir() / "runtime"


def get_queue_dir() -> Path:
    return get_orchestrator_dir() / "queue"


def get_notes_dir() -> Path:
    """``.octopoid/runtime/shared/notes/``, created if needed (the seed's retry-notes home)."""
    notes_dir = get_orchestrator_dir() / "shared" / "notes"
    notes_dir.mkdir(parents=True, exist_ok=True)
    return notes_dir


def get_memory_dir() -> Path:
    return get_orchestrator_dir() / "memory"


def get_worktrees_dir() -> Path:
    return get_orchestrator_dir() / "worktrees"


def get_logs_dir() -> Path:
    return get_orchestrator_dir() / "logs"


def get_prompts_dir() -> Path:
    return get_octopoid_dir() / "prompts"


# --- schemas -------------------------------------------------------------------------------

_REQUIRED = object()
MAX_SECONDS = 30 * 24 * 3600  # a month: longer leases and timeouts are typos (and overflow)


class Field(NamedTuple):
    """One key of a YAML schema: its type, default, allowed values and bounds. A NamedTuple,
    not a frozen dataclass (~4 M instructions to build at import, for every command); only
    its attributes are read."""

    type: type
    default: Any = _REQUIRED
    choices: tuple[str, ...] | None = None
    minimum: int | None = None
    items: type | None = None
    maximum: int | None = None


_TYPE_WORDS = {
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "a mapping",
}

DATABASE_URL_ENV = "OCTOPOID_DATABASE_URL"
#: Seconds a process waits for an unreachable PostgreSQL before failing (runners get it)
DATABASE_WAIT_ENV = "OCTOPOID_DATABASE_WAIT_SECONDS"
# a git remote's name (never an option: it is passed to git as an argument)
REMOTE_RE = LazyPattern(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def network_schema(mode: str | None) -> dict[str, Field]:
    """``network: {mode, allow}`` (netpolicy.py); ``network: none`` is short for that."""
    modes = (*netmodes.MODES, *netmodes.OLD_NAMES)
    return {"mode": Field(str, mode, choices=modes), "allow": Field(list, [], items=str)}


NOTIFY_EVENTS = (
    "needs_review", "failed", "breakdown", "question", "scheduler_stopped", "budget",
    "agent_paused",
)  # fmt: skip
#: One budget's limits (budgets.py): each unlimited unless set
BUDGET_LIMITS = {
    name: Field(float, None, minimum=0) for name in ("usd", "tokens", "turns", "seconds")
}
CONFIG_SCHEMA: dict[str, Any] = {
    "durability": Field(str, "durable", choices=("durable", "relaxed")),
    "store": {
        "backend": Field(str, "folder", choices=("folder", "postgres")),
        "dsn": Field(str, None),  # without its password: that comes from the environment
    },
    "notes": {
        "stdout_limit": Field(int, defaults.NOTES_STDOUT_LIMIT, minimum=100),
        "prompt_budget": Field(int, defaults.NOTES_PROMPT_BUDGET, minimum=1000),
        "log_cap_bytes": Field(int, defaults.STDOUT_LOG_CAP_BYTES, minimum=4096),
    },
    "merge": {
        "strategy": Field(
            str, "merge", choices=("merge", "squash", "ff-only", "none", "pull-request")
        ),
        "run_hooks": Field(bool, False),
    },
    "git": {
        "remote": Field(str, None),  # branches travel through it (several machines)
    },
    "forge": {  # docs/forge.md: pull requests out, CI and reviews back, issues in
        "kind": Field(str, "none", choices=("none", "github", "gitlab")),
        "url": Field(str, None),  # the API: GitHub Enterprise, self-hosted GitLab
        "repository": Field(str, None),  # owner/name (GitLab: group/project)
        "token_env": Field(str, None),  # the variable holding the token (never the token)
        "open_on": Field(str, "accept", choices=("accept", "provisional")),
        "poll_seconds": Field(int, 60, minimum=1),
        "merge_when_approved": Field(bool, False),
        "intake_label": Field(str, None),  # the scheduler imports open issues with it
        "log_tail_chars": Field(int, 3000, minimum=200, maximum=50_000),
        "web_url": Field(str, None),  # `octopoid web` as reviewers reach it: linked from PRs
    },
    "questions": {  # an attempt's ask_human (questions.py)
        "wait_seconds": Field(int, 300, minimum=0, maximum=3000),  # under the relay's hour
    },
    "prices": Field(dict, {}, items=dict),
    "breakdown": {
        "approve": Field(bool, False),
    },
    "checks": {
        "commands": Field(list, [], items=str),
        "timeout_seconds": Field(int, 600, minimum=1, maximum=MAX_SECONDS),
        "network": network_schema(None),  # netpolicy.checks_network: none unless it says
    },
    "notify": {
        "urls": Field(list, [], items=str),
        "events": Field(list, list(NOTIFY_EVENTS), items=str),
    },
    "workspace": {  # docs/workspace.md: each attempt's set-up, caches, ports, services
        "setup": Field(list, [], items=str),  # run in the task's box before the agent
        "timeout_seconds": Field(
            int, defaults.SETUP_TIMEOUT_SECONDS, minimum=1, maximum=MAX_SECONDS
        ),
        "network": network_schema(None),  # netpolicy.setup_network: allow unless it says
        "caches": Field(list, [], items=str),  # pip, npm, uv, yarn, or ~/path, /path
        "environment": {  # what set-up builds in the clone, kept while its key files hold
            "paths": Field(list, [], items=str),
            "key": Field(list, [], items=str),
        },
        "copy": Field(list, [], items=str),  # files of the person's checkout, into the clone
        "ports": Field(int, defaults.PORTS_PER_ATTEMPT, minimum=1, maximum=1000),
        "services": Field(list, [], items=dict),  # SERVICE_SCHEMA each
    },
    "preview": {  # docs/workspace.md: the branch under review, served for its reviewer
        "command": Field(str, None),
        "network": network_schema(None),  # netpolicy.preview_network: none unless it says
        "idle_seconds": Field(int, defaults.PREVIEW_IDLE_SECONDS, minimum=1, maximum=MAX_SECONDS),
        "start_seconds": Field(int, defaults.PREVIEW_START_SECONDS, minimum=1, maximum=3600),
    },
    "sandbox": {  # docs/security.md; `sandbox: none` is short for `sandbox: {mode: none}`
        "mode": Field(str, "bwrap", choices=("bwrap", "none")),
        "network": network_schema("allow"),  # every agent's box, unless its own says
        "expose": Field(list, [], items=str),  # host paths every box sees read-only
        # what a read-back may bring and a clone may use (sandbox/bounds.py)
        "max_pack_bytes": Field(int, defaults.MAX_PACK_BYTES, minimum=1024),
        "max_objects": Field(int, defaults.MAX_OBJECTS, minimum=1),
        "max_branch_bytes": Field(int, defaults.MAX_BRANCH_BYTES, minimum=1024),
        "max_clone_bytes": Field(int, defaults.MAX_CLONE_BYTES, minimum=1024),
    },
    "budgets": {  # budgets.py: per task (its BUDGET header wins), per agent and project a day
        "alert_at": Field(float, 0.8, minimum=0),
        "task": dict(BUDGET_LIMITS),
        "agent_daily": dict(BUDGET_LIMITS),
        "project_daily": dict(BUDGET_LIMITS),
    },
    "memory": {
        "budget": Field(int, 4000, minimum=0),
        "distill": Field(str, "none", choices=("none", "anthropic")),
        "distill_model": Field(str, None),
        "base_url": Field(str, None),
    },
}
PRICE_KEYS = ("input_per_mtok", "output_per_mtok")
SERVICE_SCHEMA = {
    "name": Field(str),
    "command": Field(str),  # started with sh -c in the attempt's box, stopped with it
    "ready": Field(str, None),  # a command that succeeds once the service answers
    "ready_seconds": Field(int, defaults.SERVICE_READY_SECONDS, minimum=1, maximum=3600),
}
#: The sections whose ``network`` may be written as a mode alone (``network: none``).
NETWORKED = ("sandbox", "checks", "workspace", "preview")
#: How to get ``claude`` (backend claude-code) when it is not found: what a failed attempt
#: says, and `status`, `agents` and `doctor` without importing the backend that runs it.
CLAUDE_INSTALL_HINT = "install it with `npm install -g @anthropic-ai/claude-code`"

AGENT_SCHEMA: dict[str, Any] = {
    "name": Field(str),
    "role": Field(str),
    "backend": Field(str, choices=("command", "claude-code", "anthropic")),
    "max_concurrent": Field(int, 1, minimum=1),
    "max_turns": Field(int, 50, minimum=1),
    "timeout_seconds": Field(int, 1800, minimum=1, maximum=MAX_SECONDS),
    "max_budget_usd": Field(float, None),
    "paused": Field(bool, False),
    "env": Field(dict, None, items=str),
    "model": Field(str, None),
    "sandbox": {  # the project's sandbox.network and .expose, for this agent
        "network": network_schema(None),
        "expose": Field(list, [], items=str),
    },
    "workspace": {"setup": Field(list, None, items=str)},  # instead of the project's
    # command
    "argv": Field(list, None, items=str),
    # claude-code
    "claude_path": Field(str, None),
    "allowed_tools": Field(list, None, items=str),
    "disallowed_tools": Field(list, None, items=str),
    "permission_mode": Field(str, None),
    "extra_args": Field(list, None, items=str),
    # anthropic
    "base_url": Field(str, None),
    "max_tokens": Field(int, 8192, minimum=1),
    "command_timeout_seconds": Field(int, 120, minimum=1),
}

AGENTS_FILE_SCHEMA: dict[str, Any] = {
    "max_attempts": Field(int, defaults.MAX_ATTEMPTS, minimum=1),
    "lease_seconds": Field(int, defaults.LEASE_SECONDS, minimum=2, maximum=MAX_SECONDS),
    "shutdown_grace_seconds": Field(
        int, defaults.SHUTDOWN_GRACE_SECONDS, minimum=0, maximum=MAX_SECONDS
    ),
    "rate_limit_backoff_seconds": Field(int, defaults.RATE_LIMIT_BACKOFF_SECONDS, minimum=0),
    "max_claimed": Field(int, 4, minimum=1),
    "max_provisional": Field(int, 20, minimum=1),
    "paused": Field(bool, False),
    "agents": Field(list, [], items=dict),
}


def validate(data: Any, schema: dict[str, Any], file: str, prefix: str = "") -> dict[str, Any]:
    """Check ``data`` against ``schema`` and return it with defaults filled in."""
    where = prefix.rstrip(".") or "the top level"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: {where} must be a mapping of keys to values")
    for key in data:
        if key not in schema:
            known = ", ".join(sorted(schema))
            raise ConfigError(f"{file}: unknown key '{prefix}{key}' (expected one of: {known})")
    out: dict[str, Any] = {}
    for key, spec in schema.items():
        if isinstance(spec, dict):
            out[key] = validate(data.get(key), spec, file, f"{prefix}{key}.")
        else:
            out[key] = _check_field(data, key, spec, file, prefix)
    return out


def _check_field(data: dict[str, Any], key: str, spec: Field, file: str, prefix: str) -> Any:
    name = f"{prefix}{key}"
    if key not in data:
        if spec.default is _REQUIRED:
            raise ConfigError(f"{file}: missing key '{name}' ({_TYPE_WORDS[spec.type]})")
        return spec.default
    value = data[key]
    if value is None and spec.default is None:
        return None
    wanted = (int, float) if spec.type is float else spec.type
    ok = isinstance(value, wanted) and not (spec.type in (int, float) and isinstance(value, bool))
    if not ok:
        raise ConfigError(f"{file}: '{name}' should be {_TYPE_WORDS[spec.type]}, got {value!r}")
    if spec.choices and value not in spec.choices:
        raise ConfigError(
            f"{file}: '{name}' must be one of {', '.join(spec.choices)}; got {value!r}"
        )
    if spec.minimum is not None and value < spec.minimum:
        raise ConfigError(f"{file}: '{name}' must be at least {spec.minimum}; got {value}")
    if spec.maximum is not None and value > spec.maximum:
        raise ConfigError(f"{file}: '{name}' must be at most {spec.maximum}; got {value}")
    if spec.items is not None:
        entries = value.items() if isinstance(value, dict) else enumerate(value)
        for i, item in entries:
            if not isinstance(item, spec.items):
                raise ConfigError(
                    f"{file}: '{name}[{i}]' should be {_TYPE_WORDS[spec.items]}, got {item!r}"
                )
    return float(value) if spec.type is float else value


def _stamp(path: Path) -> tuple[int, int]:
    """(mtime_ns, size) of a config file, (0, -1) when it is missing: the cache key."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return 0, -1
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    return stat.st_mtime_ns, stat.st_size


def _yaml_of(text: str) -> Any:
    """libyaml when present: ~10x faster."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _parse_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    try:
        return usercache.parsed(path, text, _yaml_of)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: invalid YAML{at}: {problem}") from None


def load_config() -> dict[str, Any]:
    """``.octopoid/config.yaml``, validated, defaults filled in (a missing file is all defaults).

    Parsed and validated again only when the file's size or mtime changed (claims ask
    often); the result is shared between callers, so treat it as read-only.
    """
    path = get_octopoid_dir() / "config.yaml"
    return _load_config(path, *_stamp(path))


@lru_cache(maxsize=8)
def _load_config(path: Path, mtime_ns: int, size: int) -> dict[str, Any]:
    data = _parse_yaml(path)
    if isinstance(data, dict) and isinstance(data.get("sandbox"), str):
        data["sandbox"] = {"mode": data["sandbox"]}
    for section in NETWORKED:
        _network_shorthand(data.get(section) if isinstance(data, dict) else None)
    cfg = validate(data, CONFIG_SCHEMA, str(path))
    for section in NETWORKED:
        _check_allow(cfg[section]["network"]["allow"], path, f"{section}.network.allow")
    _check_workspace(cfg, path)
    for model, price in cfg["prices"].items():
        price_schema = {key: Field(float) for key in PRICE_KEYS}
        cfg["prices"][model] = validate(price, price_schema, str(path), f"prices.{model}.")
    unknown = [e for e in cfg["notify"]["events"] if e not in NOTIFY_EVENTS]
    if unknown:
        raise ConfigError(
            f"{path}: 'notify.events' has {unknown[0]!r}; choose from {', '.join(NOTIFY_EVENTS)}"
        )
    if cfg["store"]["backend"] == "postgres" and not (
        cfg["store"]["dsn"] or os.environ.get(DATABASE_URL_ENV)
    ):
        raise ConfigError(
            f"{path}: 'store.backend' is postgres but neither 'store.dsn' nor "
            f"{DATABASE_URL_ENV} names the database"
        )
    remote = cfg["git"]["remote"]
    if remote is not None and not REMOTE_RE.fullmatch(remote):
        raise ConfigError(f"{path}: 'git.remote' is {remote!r}, not a remote's name (like origin)")
    _check_forge(cfg, path)
    if cfg["memory"]["distill"] == "anthropic" and not cfg["memory"]["distill_model"]:
        raise ConfigError(
            f"{path}: 'memory.distill_model' is required when memory.distill is anthropic"
        )
    return cfg


def _check_workspace(cfg: dict[str, Any], path: Path) -> None:
    """Each service against SERVICE_SCHEMA, and every name ``workspace:`` holds."""
    services = cfg["workspace"]["services"]
    for i, service in enumerate(services):
        services[i] = validate(service, SERVICE_SCHEMA, str(path), f"workspace.services[{i}].")
    try:
        workspace_rules.check(cfg["workspace"])
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _network_shorthand(section: Any) -> None:
    """``network: none`` in ``section`` (a mapping read from YAML) as ``{mode: none}``."""
    if isinstance(section, dict) and isinstance(section.get("network"), str):
        section["network"] = {"mode": section["network"]}


def _check_allow(entries: list[str], path: Path, key: str) -> None:
    if not entries:
        return  # most configs: the policy's patterns and dataclasses stay unloaded
    from .base import netpolicy  # ~2 ms of every command's start, for entries only

    for entry in entries:
        try:
            netpolicy.parse_entry(entry)
        except ValueError as exc:
            raise ConfigError(f"{path}: '{key}' has {exc}") from None


FORGE_DEFAULTS = {  # kind: (API URL, token variable)
    "github": ("https://api.github.com", "GITHUB_TOKEN"),
    "gitlab": ("https://gitlab.com", "GITLAB_TOKEN"),
}
REPOSITORY_RE = LazyPattern(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+")
ENV_NAME_RE = LazyPattern(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_forge(cfg: dict[str, Any], path: Path) -> None:
    """A forge names its repository; ``merge.strategy: pull-request`` needs a forge and a
    ``git.remote`` to push to. Fills in the kind's URL and token variable."""
    forge = cfg["forge"]
    if cfg["merge"]["strategy"] == "pull-request":
        if forge["kind"] == "none":
            raise ConfigError(
                f"{path}: 'merge.strategy' is pull-request but no 'forge.kind' (github or gitlab) "
                "says where to open them"
            )
        if cfg["git"]["remote"] is None:
            raise ConfigError(
                f"{path}: 'merge.strategy' is pull-request: 'git.remote' must name the remote "
                "branches are pushed to (like origin)"
            )
    if forge["kind"] == "none":
        return
    url, token_env = FORGE_DEFAULTS[forge["kind"]]
    forge["url"] = (forge["url"] or url).rstrip("/")
    forge["token_env"] = forge["token_env"] or token_env
    for key in ("url", "web_url"):
        if forge[key] is not None and not forge[key].startswith(("https://", "http://")):
            raise ConfigError(f"{path}: 'forge.{key}' must be an http(s) URL, not {forge[key]!r}")
    from urllib.parse import urlsplit  # here: every command reads config.yaml, few a forge

    host = urlsplit(forge["url"]).hostname or ""
    if forge["url"].startswith("http://") and host not in ("127.0.0.1", "::1", "localhost"):
        raise ConfigError(
            f"{path}: 'forge.url' must be https: the token would cross the network in clear "
            "(plain http is only for a server on this machine)"
        )
    repository = forge["repository"] or ""
    parts = repository.split("/")
    if not REPOSITORY_RE.fullmatch(repository) or {".", ".."} & set(parts):
        raise ConfigError(
            f"{path}: 'forge.repository' must name the repository as owner/name "
            f"(GitLab: group/project), got {forge['repository']!r}"
        )
    if not ENV_NAME_RE.fullmatch(forge["token_env"]):
        raise ConfigError(
            f"{path}: 'forge.token_env' must be the NAME of the variable holding the token "
            "(like GITHUB_TOKEN), never the token itself"
        )


def store_choice() -> tuple[str, str | None]:
    """("folder", None) or ("postgres", DSN). ``OCTOPOID_DATABASE_URL`` wins over config.yaml
    (so a password need never be written there); a broken config.yaml falls back to the
    environment alone, and then to the folder store, so the queue stays readable."""
    url = os.environ.get(DATABASE_URL_ENV)
    try:
        store = load_config()["store"]
    except ConfigError:
        return ("postgres", url) if url else ("folder", None)
    if url:
        return "postgres", url
    return store["backend"], store["dsn"]


def problem() -> str | None:
    """Why the configuration cannot be used now (``config invalid: ...``), or None.

    The scheduler asks at every pass and claims nothing while there is a problem; `status`
    and `agents` show it.
    """
    try:
        load_config()
        load_agents()
    except ConfigError as exc:
        return f"config invalid: {exc}"
    return None


def load_agents() -> dict[str, Any]:
    """``.octopoid/agents.yaml``, validated; each agent gets its defaults; names are unique.

    Cached like ``load_config``: read-only.
    """
    path = get_octopoid_dir() / "agents.yaml"
    return _load_agents(path, *_stamp(path))


def agent_env(agent: dict[str, Any]) -> dict[str, str]:
    """Ours plus the agent's own ``env`` from agents.yaml: what its program is looked up
    with, and what redaction must hide (the box's environment is ``sandbox.box.environment``)."""
    return {**os.environ, **(agent.get("env") or {})}


@lru_cache(maxsize=8)
def _load_agents(path: Path, mtime_ns: int, size: int) -> dict[str, Any]:
    data = validate(_parse_yaml(path), AGENTS_FILE_SCHEMA, str(path))
    agents, seen = [], set()
    for i, raw in enumerate(data["agents"]):
        _network_shorthand(raw.get("sandbox") if isinstance(raw, dict) else None)
        agent = validate(raw, AGENT_SCHEMA, str(path), f"agents[{i}].")
        _check_allow(
            agent["sandbox"]["network"]["allow"], path, f"agents[{i}].sandbox.network.allow"
        )
        if agent["name"] in seen:
            raise ConfigError(f"{path}: agent name '{agent['name']}' is used twice")
        seen.add(agent["name"])
        needs = {"command": "argv", "anthropic": "model"}.get(agent["backend"])
        if needs and not agent[needs]:
            raise ConfigError(
                f"{path}: 'agents[{i}].{needs}' is required for the {agent['backend']} backend"
            )
        agents.append(agent)
    data["agents"] = agents
    return data
