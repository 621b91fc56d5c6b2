"""``octopoid init``: lay out ``.octopoid/`` and the runtime folders, idempotently."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import config
from ..base.fsutil import atomic_write
from ..config import OCTOPOID_DIR
from ..model.exceptions import ConfigError, InvalidInput
from ..model.tasks import TaskState
from ..queue.store import FolderStore

TEMPLATE_FILES = ("config.yaml", "agents.yaml", "prompts/implement.md", "prompts/breakdown.md")
RUNTIME_DIRS = ("shared/notes", "memory", "worktrees", "logs")
#: The package's own files, as pip (and ``pip install -e``) lays them out, as the web face
#: and the box find theirs: ``importlib.resources`` (with ``zipfile``, ``tempfile``) was
#: ~9 ms of ``init``'s start for the same path.
TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def init_project(root: Path) -> list[Path]:
    """Create what is missing under ``root/.octopoid``; return what was created.

    Existing files are never overwritten, so running it twice changes nothing. The CLI
    first refuses a ``root`` that is not the top of a git work tree, where every attempt
    would fail (``checkout.work_tree_branch``); Python callers (tests) may use a plain
    folder.
    """
    base = root / OCTOPOID_DIR
    created: list[Path] = []
    for name in TEMPLATE_FILES:
        target = base / name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, (TEMPLATES / name).read_text(encoding="utf-8"))
            created.append(target)
    ignore = base / ".gitignore"
    if not ignore.exists():
        atomic_write(ignore, "runtime/\n")
        created.append(ignore)
    runtime = base / "runtime"
    for sub in ("queue", *RUNTIME_DIRS):
        if not (runtime / sub).is_dir():
            (runtime / sub).mkdir(parents=True)
            created.append(runtime / sub)
    queue = FolderStore(runtime / "queue")
    missing = [queue.dir(s) for s in TaskState if not queue.dir(s).is_dir()]
    queue.initialize()
    created.extend(missing)
    return created


def use_postgres(root: Path, url: str) -> list[str]:
    """Point the project at a PostgreSQL queue: create or migrate its schema, then add a
    ``store:`` section to config.yaml naming the database *without* its password (which
    belongs in ``OCTOPOID_DATABASE_URL``, ``PGPASSWORD`` or ``~/.pgpass``). Returns what
    was done, one line each. Idempotent: a config.yaml that names this database already
    (the second machine's checked-in one) is left as it is; one naming another is refused."""
    from psycopg.conninfo import make_conninfo

    from ..pg.schema import upgrade_database

    parts = _conninfo(url, "--store")
    path = root / OCTOPOID_DIR / "config.yaml"
    password = parts.pop("password", None)
    dsn = make_conninfo("", **parts)  # key=value form: every part but the password
    try:
        store = config.load_config()["store"]
    except ConfigError as exc:
        raise InvalidInput(str(exc)) from None
    if store["backend"] == "postgres":
        named = _conninfo(store["dsn"] or os.environ.get(config.DATABASE_URL_ENV, ""), str(path))
        named.pop("password", None)
        if named != parts:
            raise InvalidInput(
                f"{path} already names another PostgreSQL store ({make_conninfo('', **named)}),"
                f" not {dsn}: edit store.dsn there by hand to move this project"
            )
        return [upgrade_database(url), f"config.yaml already names this store ({dsn})"]
    done = [upgrade_database(url)]
    block = f"store:\n  backend: postgres\n  dsn: {json.dumps(dsn)}\n"
    atomic_write(path, f"{path.read_text(encoding='utf-8').rstrip()}\n\n{block}")
    done.append(f"config.yaml: store.backend postgres, dsn {dsn}")
    if password:
        done.append(
            "the password was not written to config.yaml: set OCTOPOID_DATABASE_URL (or "
            "PGPASSWORD, or ~/.pgpass) on every machine"
        )
    return done


def _conninfo(url: str, what: str) -> dict[str, str]:
    """A PostgreSQL URL or key=value DSN as its parts; ``InvalidInput`` naming ``what``."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        return conninfo_to_dict(url)
    except Exception:
        raise InvalidInput(f"{what}: not a PostgreSQL URL (postgresql://user@host/db)") from None
