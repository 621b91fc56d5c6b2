"""What config.yaml's ``workspace:`` may name: caches, the cached environment's paths and
key files, the files copied from the person's checkout, the services (docs/workspace.md).

Standard-library only, below ``config`` (which checks the file with it), the sandbox's
set-up (which reads the names it knows) and redaction (which hides what copied files hold).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

#: Caches octopoid knows by name: where the tool keeps it under a home, and the variable
#: that points the tool there (set too, so a tool run with its own HOME still finds it).
KNOWN_CACHES = {
    "pip": ("~/.cache/pip", "PIP_CACHE_DIR"),
    "uv": ("~/.cache/uv", "UV_CACHE_DIR"),
    "npm": ("~/.npm", "npm_config_cache"),
    "yarn": ("~/.cache/yarn", "YARN_CACHE_FOLDER"),
}
#: Never copied in, cached as an environment or keyed on: git's and octopoid's own.
RESERVED = (".git", ".octopoid")
#: Bytes of a copied file read for its secrets (a fixtures database is not read at all).
SECRETS_FILE_BYTES = 1024 * 1024


def project_path(text: str, what: str) -> PurePosixPath:
    """``text`` as a path inside the project (relative, no ``..``, not in .git or
    .octopoid); ``ValueError`` saying why not."""
    path = PurePosixPath(text)
    if not text.strip() or path.is_absolute() or ".." in path.parts or str(path) == ".":
        raise ValueError(f"{what} {text!r} must be a path inside the project (like .env.test)")
    if path.parts[0] in RESERVED:
        raise ValueError(f"{what} {text!r} is inside {path.parts[0]}, which no box is given")
    return path


def cache_place(entry: str) -> tuple[str, str | None]:
    """(where a box sees the cache, as ``~/...`` or an absolute path; the variable that
    points its tool there) for one ``workspace.caches`` entry; ``ValueError`` if it is
    neither a known name nor such a path."""
    if entry in KNOWN_CACHES:
        return KNOWN_CACHES[entry]
    if entry.startswith("~/") or (entry.startswith("/") and entry.strip("/")):
        if ".." in PurePosixPath(entry).parts:
            raise ValueError(f"cache {entry!r} must not hold '..'")
        return entry.rstrip("/"), None
    known = ", ".join(KNOWN_CACHES)
    raise ValueError(
        f"cache {entry!r} is neither a known name ({known}) nor a path (~/.cache/tool or "
        "/abs/path); a folder inside the project is workspace.environment's (paths:)"
    )


def check(workspace: dict[str, Any]) -> None:
    """Every name of a validated ``workspace:`` section; ``ValueError`` naming the first
    that is wrong."""
    for entry in workspace["caches"]:
        cache_place(entry)
    for text in workspace["copy"]:
        project_path(text, "workspace.copy entry")
    for text in workspace["environment"]["paths"]:
        project_path(text, "workspace.environment path")
    for text in workspace["environment"]["key"]:
        project_path(text, "workspace.environment key")
    if workspace["environment"]["paths"] and not workspace["setup"]:
        raise ValueError("workspace.environment names paths but no workspace.setup builds them")
    names = [service["name"] for service in workspace["services"]]
    for name in names:
        if not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"service name {name!r}: letters, digits, - and _ only")
    if len(set(names)) != len(names):
        raise ValueError("two workspace.services have the same name")


def copied_secrets(entries: list[str], root: Path) -> dict[str, str]:
    """Every value of a ``NAME=value`` (or ``NAME: value``) line of the text files
    ``workspace.copy`` names, for redaction: a ``.env.test`` holds keys."""
    found = {}
    for entry in entries:
        path = root / entry
        try:
            if not path.is_file() or path.stat().st_size > SECRETS_FILE_BYTES:
                continue
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for line in text.splitlines():
            name, sep, value = line.strip().removeprefix("export ").partition("=")
            if not sep:
                name, sep, value = line.strip().partition(":")
            value = value.strip().strip("'\"")
            if sep and name.strip() and value:
                found[f"{entry}:{name.strip()}"] = value
    return found
