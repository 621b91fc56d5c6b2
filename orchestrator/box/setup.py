"""An attempt's working world before its agent starts (config.yaml ``workspace:``,
docs/workspace.md): the files the person chose, copied into the clone; the project's
caches; the cached environment; the set-up commands; the attempt's ports; its services.

A ``World`` is made with the clone, before any box, so every box of the attempt (set-up,
agent, checks, preview) is made knowing what it mounts. Only a set-up of reviewed code
may write the shared caches and publish the environment it builds: the wall that keeps
one attempt from changing what later attempts run (docs/workspace.md, "Caches").
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..backends.process import run_process
from ..base import ports, usercache, workspace_rules
from ..base.fsutil import TailBuffer, remove_tree
from ..base.processes import leftovers, owner_tag
from ..model import defaults
from ..model.exceptions import OctopoidError, SetupFailed
from .box import Box
from .bwrap import HIDDEN, is_hidden

ENV_FORMAT = "1"  # part of every environment's key: a change of layout makes new ones
BUILD_PREFIX = ".build-"  # an environment being built (by a live process, or debris)
SERVICE_SCRIPT = Path(__file__).with_name("servicerun.py")
CACHES_ENV = "OCTOPOID_CACHES"


def project_cache(root: Path) -> Path:
    """``$XDG_CACHE_HOME/octopoid/projects/<key>`` (``~/.cache`` without it) for the project
    at ``root``: a folder of the user's own, never a link (``usercache.private_dir``)."""
    key = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    path = usercache.private_dir(f"projects/{key}")
    if path is None:
        raise SetupFailed(
            f"the project's cache folder projects/{key} in $XDG_CACHE_HOME/octopoid (or "
            "~/.cache/octopoid) cannot be made, or is not a folder of your own: remove it"
        )
    return path


@dataclass(frozen=True)
class Cache:
    host: Path  # the project's folder for it
    inside: Path  # where a box sees it
    var: str | None  # the variable that points its tool there


def caches(entries: list[str], root: Path, home: str, sandboxed: bool) -> list[Cache]:
    """The project's caches, made if need be. A box shows one at its place under the box's
    home (or at its absolute path, which must lie where a box has an empty folder, or
    exist); without a box, a known one is the project's folder and a path is itself."""
    out = []
    for entry in entries:
        place, var = workspace_rules.cache_place(entry)
        inside = Path(home + place[1:]) if place.startswith("~/") else Path(place)
        slug = entry if var else f"path-{hashlib.sha256(entry.encode()).hexdigest()[:12]}"
        host = project_cache(root) / "caches" / slug
        if not sandboxed and not var:
            continue  # without walls the path is the user's own folder already
        if sandboxed and not is_hidden(inside, (*HIDDEN, Path(home))) and not inside.is_dir():
            raise SetupFailed(
                f"workspace.caches: {entry} must lie under your home or /tmp, or be a folder "
                "that exists on this machine (a box cannot make a folder elsewhere)"
            )
        host.mkdir(parents=True, exist_ok=True)
        out.append(Cache(host, inside, var))
    return out


@dataclass
class Environment:
    """What set-up builds in the clone (``workspace.environment.paths``), kept by key."""

    key: str
    paths: list[str]
    source: Path  # holds a folder per path: what the boxes after set-up mount read-only
    build: Path | None  # where set-up builds it (None: ready, set-up is skipped)
    publish: bool  # the build becomes every later attempt's (reviewed code built it)


def environment_key(commands: list[str], paths: list[str], keys: list[str], clone: Path) -> str:
    """What an environment is built from: the set-up's commands, its paths, this machine's
    architecture and the files the key names, as the clone holds them (a link counts by
    where it points; nothing is followed out of the clone)."""
    digest = hashlib.sha256(json.dumps([ENV_FORMAT, commands, paths, platform.machine()]).encode())
    for pattern in keys:
        for found in sorted(clone.glob(pattern)):
            name = found.relative_to(clone)
            if ".git" in name.parts:
                continue
            digest.update(f"\0{name}\0".encode())
            if found.is_symlink():
                digest.update(b"link:" + os.fsencode(os.readlink(found)))
            elif found.is_file():
                with open(found, "rb") as f:
                    while chunk := f.read(1 << 20):
                        digest.update(chunk)
    return digest.hexdigest()[:24]


def _environment(
    spec: dict, commands: list[str], root: Path, clone: Path, trusted: bool
) -> Environment | None:
    if not spec["paths"]:
        return None
    key = environment_key(commands, spec["paths"], spec["key"], clone)
    folder = project_cache(root) / "environments"
    ready = folder / key
    if ready.is_dir():
        os.utime(ready)  # in use: not evicted
        return Environment(key, spec["paths"], ready, None, False)
    build = folder / f"{BUILD_PREFIX}{owner_tag()}-{secrets.token_hex(3)}"
    for path in spec["paths"]:
        (build / path).mkdir(parents=True)
    return Environment(key, spec["paths"], ready if trusted else build, build, trusted)


def _publish(env: Environment) -> None:
    """The build as every later attempt's environment (another attempt's publication of
    the same key first is as good); builds of dead processes and environments unused for
    ``ENVIRONMENT_UNUSED_SECONDS`` are removed meanwhile."""
    assert env.build is not None
    try:
        os.rename(env.build, env.source)
    except OSError:  # the same key published meanwhile
        remove_tree(env.build)
    env.build = None
    folder = env.source.parent
    old = time.time() - defaults.ENVIRONMENT_UNUSED_SECONDS
    for path in folder.iterdir():
        unused = not path.name.startswith(".") and path.stat().st_mtime < old
        if unused and path != env.source:
            remove_tree(path)
    for path in leftovers(folder, BUILD_PREFIX):
        remove_tree(path)


def copy_in(entries: list[str], root: Path, clone: Path) -> None:
    """``workspace.copy``: each file (or folder) of the person's checkout into the clone at
    the same place. What the branch holds there goes, and nothing the branch made (a link
    where a folder should be) is followed: the copy lands in the clone or nowhere."""
    for entry in entries:
        name = workspace_rules.project_path(entry, "workspace.copy entry")
        source = root / name
        if not source.exists():
            raise SetupFailed(f"workspace.copy: {entry} is not in {root}")
        here = clone
        for part in name.parts[:-1]:
            here = here / part
            if here.is_symlink() or (here.exists() and not here.is_dir()):
                remove_tree(here)
            here.mkdir(exist_ok=True)
        target = here / name.parts[-1]
        remove_tree(target)
        try:
            if source.is_dir():
                shutil.copytree(source, target, symlinks=True)
            else:
                shutil.copy2(source, target)
        except OSError as exc:
            raise SetupFailed(f"workspace.copy: {entry} could not be copied: {exc}") from None


class World:
    """What every box of one attempt shares beside its clone. ``trusted``: the clone holds
    reviewed code only (its branch has nothing beyond its base), so its set-up may write
    the shared caches and publish what it builds."""

    def __init__(
        self, cfg: dict, commands: list[str], root: Path, clone: Path, *,
        sandboxed: bool, trusted: bool, home: str, held: ports.PortRange | None = None,
    ) -> None:  # fmt: skip
        spec = cfg["workspace"]
        self.commands, self.timeout, self.services = commands, spec["timeout_seconds"], []
        self.sandboxed, self.trusted = sandboxed, trusted
        self.worktree = root if sandboxed else clone  # where its boxes see their workspace
        self.environment: Environment | None = None
        self.caches: list[Cache] = []
        self.own_ports = held is None
        try:
            self.ports = held or ports.reserve(spec["ports"])
        except OctopoidError as exc:
            raise SetupFailed(str(exc)) from None
        try:
            copy_in(spec["copy"], root, clone)
            self.caches = caches(spec["caches"], root, home, sandboxed)
            if sandboxed:
                self.environment = _environment(spec["environment"], commands, root, clone, trusted)
            self.services = spec["services"]
        except BaseException:
            self.close()
            raise

    @property
    def builds(self) -> bool:
        """Whether set-up runs: it has commands and no environment of its key is ready."""
        env = self.environment
        return bool(self.commands) and (env is None or env.build is not None)

    def env(self, setup: bool = False) -> dict[str, str]:
        """The workspace's path, the ports, what points each known cache's tool at it, and
        whether the caches may be written there (``OCTOPOID_CACHES``: a set-up's command can
        give a tool that must write its cache, npm or uv, a scratch one where they are
        read-only)."""
        values = {"OCTOPOID_WORKTREE": str(self.worktree), **self.ports.env()}
        for cache in self.caches:
            if cache.var:
                values[cache.var] = str(cache.inside if self.sandboxed else cache.host)
        if self.caches:
            writable = (setup and self.trusted) or not self.sandboxed
            values[CACHES_ENV] = "writable" if writable else "read-only"
        return values

    def read_only(self, inside: Path) -> tuple[tuple[Path, Path], ...]:
        """What every box after set-up shows read-only: the caches and the environment."""
        shown = [(cache.host, cache.inside) for cache in self.caches if self.sandboxed]
        env = self.environment
        if env is not None:
            shown += [(env.source / path, inside / path) for path in env.paths]
        return tuple(shown)

    def setup_mounts(self, inside: Path) -> tuple[tuple, tuple]:
        """(read-only, writable) mounts of the set-up's box: the caches writable when
        trusted, the environment's build always (it is the set-up's to make)."""
        caches = tuple((c.host, c.inside) for c in self.caches if self.sandboxed)
        env = self.environment
        built = () if env is None or env.build is None else env.paths
        building = tuple((env.build / path, inside / path) for path in built)  # type: ignore[union-attr]
        if self.trusted:
            return (), (*caches, *building)
        return caches, building

    def built(self, ok: bool) -> None:
        """After set-up: a trusted build is published; a failed one goes."""
        env = self.environment
        if env is None or env.build is None:
            return
        if ok and env.publish:
            _publish(env)
        elif not ok:
            remove_tree(env.build)

    def service_argv(
        self, folder: Path | None, inside: Path | None, check: bool = False
    ) -> list[str]:
        """The launcher (``servicerun.py``, put in ``folder``, which the box sees at
        ``inside``; without a box, where it is) that starts the services before a box's
        program; none without any."""
        if not self.services:
            return []
        script = SERVICE_SCRIPT
        if folder is not None and inside is not None:
            (folder / "lib").mkdir(exist_ok=True)
            shutil.copyfile(SERVICE_SCRIPT, folder / "lib" / SERVICE_SCRIPT.name)
            script = inside / "lib" / SERVICE_SCRIPT.name
        flag = ["--check"] if check else []
        return [sys.executable, "-I", "-S", str(script), *flag, json.dumps(self.services), "--"]

    def close(self) -> None:
        """Release the ports it reserved; remove an environment built for it alone."""
        if self.own_ports and getattr(self, "ports", None) is not None:
            self.ports.release()
        env = self.environment
        if env is not None and env.build is not None and not env.publish:
            remove_tree(env.build)


def run_commands(world: World, box: Box, output: TailBuffer, on_tick: Callable[[], None]) -> None:
    """The set-up's commands in ``box``, in order, their output into ``output`` (the
    attempt's log and notes, redacted as the agent's); ``SetupFailed`` at the first that
    fails, or when they take longer than ``workspace.timeout_seconds`` together."""
    started = time.monotonic()
    ok = False
    try:
        for command in world.commands:
            output.feed(f"[octopoid] set-up $ {command}\n".encode())
            left = max(1.0, world.timeout - (time.monotonic() - started))
            done = run_process(box.wrap(["sh", "-c", command]), box.cwd, box.env, output, left,
                               on_tick=on_tick)  # fmt: skip
            seconds = time.monotonic() - started
            if done.start_error or done.timed_out or done.exit_code != 0:
                why = done.start_error or (
                    f"timed out ({world.timeout}s for the whole set-up)"
                    if done.timed_out
                    else f"exited with status {done.exit_code} after {seconds:.1f}s"
                )
                raise SetupFailed(f"set-up failed: `{command}` {why}", output.text())
        ok = True
    finally:
        world.built(ok)
    output.feed(f"[octopoid] set-up: done in {time.monotonic() - started:.1f}s\n".encode())
