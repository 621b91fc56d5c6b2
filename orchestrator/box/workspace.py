"""What both kinds of workspace share: the task's branch, the channel, the remote.

A ``Workspace`` is made by ``sandbox.prepare`` for one attempt and lives until ``close``.
``walled.py`` (``sandbox: bwrap``) and ``trusted.py`` (``sandbox: none``) differ in where
the agent works and how its work comes back; the channel folder (socket, client, prompt)
and the branch's trip through ``git.remote`` are the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .. import config
from ..backends.process import run_process
from ..base.fsutil import TailBuffer, remove_tree
from ..base.processes import leftovers, owner_tag
from ..git import branches, catch_up, core, task_tips
from ..git import remote as git_remote
from ..git.catch_up import CaughtUp
from ..model import defaults
from ..model.exceptions import GitError, PushRefused, RemoteMoved, SetupFailed
from ..model.tasks import Task
from .box import Box, write_client
from .channel import ChannelServer, Tools
from .setup import World, run_commands

if TYPE_CHECKING:
    from collections.abc import Callable

    from .proxy import NetworkProxy

PROMPT_FILE = "prompt.md"


@dataclass
class BroughtBack:
    """The attempt's work as octopoid found it once every process of it was dead."""

    commits: int
    breaches: list[str] = field(default_factory=list)  # it reached outside: the attempt fails
    remarks: list[str] = field(default_factory=list)  # worth the notes, not a failure
    refused: list[str] = field(default_factory=list)  # beyond a sandbox bound: it fails
    unreached: int = 0  # destinations its network refused (`agents` counts them)


def base_for(task: Task) -> tuple[str | None, task_tips.Start]:
    """git.remote and where the attempt starts: the base a new branch starts from, why it
    does not start from the task's recorded tip, the lease its push will use.

    With ``git.remote`` the task's branch is first set to the tip its last attempt left
    (``task_tips.start``, fetched from the remote if need be) and a new branch starts
    from the remote's base.
    """
    remote, base = git_remote.remote_name(), task.branch
    if remote is None:
        return None, task_tips.Start(base, None)
    try:
        return remote, task_tips.start(core.open_repo(), remote, task)
    except GitError as exc:
        why = f"could not fetch from {remote}; this attempt starts from here: {exc}"
        return remote, task_tips.Start(base, None, why)


class Workspace(ABC):
    """One attempt's place to work; subclasses make ``box`` and bring the work back."""

    task: Task
    token: str  # the claim's: its digest marks the attempt's processes
    box: Box
    start: str  # the task branch's tip before the agent ran
    base: str  # the ref the branch is judged against (the remote's base with git.remote)
    remote: str | None
    started: task_tips.Start  # the base, the lease the push uses, what the remote held
    banner: str  # the first line of the attempt's log: what walls there are
    at_base: bool = False  # the branch is its base's tip: nothing on it, nothing behind
    proxy: NetworkProxy | None = None  # the box's way out with ``network: allow``
    caught_up: CaughtUp | None = None  # the branch was pushed to meanwhile: what was done
    world: World | None = None  # its set-up, caches, ports and services (setup.py)
    services_at: tuple[Path | None, Path | None]  # where their launcher goes; in the box

    def __init__(
        self,
        task: Task,
        agent: dict,
        cfg: dict,
        token: str,
        needs: list[str],
        tools: Tools | None = None,
    ) -> None:
        self.task, self.token = task, token
        self.channel_host = private_folder()
        self.channel = ChannelServer(self.channel_host, tools or Tools()).start()
        self.tick: Callable[[], None] = lambda: None  # the attempt's, once its set-up runs
        try:
            self._make(agent, cfg, needs)
        except BaseException:
            self.close()
            raise

    @abstractmethod
    def _make(self, agent: dict, cfg: dict, needs: list[str]) -> None:
        """Make the place to work and its ``box`` (and ``start``, ``base``, ``remote``,
        ``banner``)."""

    @abstractmethod
    def setup_box(self) -> contextlib.AbstractContextManager[Box]:
        """The box the set-up's commands run in: the workspace, the set-up's network."""

    def set_up(self, output: TailBuffer, on_tick: Callable[[], None]) -> None:
        """Before the agent: the set-up's commands (unless their environment is cached),
        then a test that the declared services start in the agent's box, once, before anything
        relies on them; their words go to ``output`` (the attempt's log and notes), and
        ``SetupFailed`` says what failed (a service never ready, with its log)."""
        world, self.tick = self.world, on_tick  # the checks' set-up renews the claim too
        assert world is not None
        if world.builds:
            with self.setup_box() as box:
                try:
                    run_commands(world, box, output, on_tick)
                finally:
                    for line in box.refusals():
                        output.feed(f"[octopoid] set-up {line}\n".encode())
        elif world.commands:
            key = world.environment.key if world.environment else "?"
            output.feed(f"[octopoid] set-up skipped: its environment {key} is cached\n".encode())
        if not world.services:
            return
        argv = [*self.box.prefix, *world.service_argv(*self.services_at, check=True), "true"]
        done = run_process(argv, self.box.cwd, self.box.env, output, world.timeout, on_tick=on_tick)
        if done.exit_code != 0 or done.timed_out:
            why = done.start_error or f"exit status {done.exit_code}"
            raise SetupFailed(f"set-up failed: a service did not start ({why})", output.text())
        names = ", ".join(service["name"] for service in world.services)
        output.feed(f"[octopoid] services ready: {names}\n".encode())

    def write_prompt(self, text: str) -> Path:
        """Put the prompt where the box reads it; its path there."""
        (self.channel_host / PROMPT_FILE).write_text(text, encoding="utf-8")
        assert self.box.channel is not None
        return self.box.channel / PROMPT_FILE

    @abstractmethod
    def bring_back(self) -> BroughtBack:
        """The attempt's commits on its branch (and what went wrong), its processes gone."""

    @abstractmethod
    def check_box(self) -> contextlib.AbstractContextManager[Box]:
        """A box in which the checks run the attempt's work."""

    def over_bounds(self) -> str | None:
        """While the agent runs: why its workspace is beyond a ``sandbox`` bound (the
        attempt is stopped), or None."""
        return None

    def recheck(self) -> list[str]:
        """After the checks: what they changed outside the workspace (``sandbox: none``)."""
        return []

    def tip(self) -> str | None:
        """The commit the task's branch points at now (after ``bring_back``: the attempt's)."""
        return branches.ref_tip(core.open_repo(), branches.branch_for(self.task.id))

    def publish(self, commits: int) -> str | None:
        """Push the branch to ``git.remote`` when the attempt added to it, with a lease on
        the remote's tip it started from (``git_remote.push_task_branch``), retrying with
        backoff while the remote cannot be reached; None when pushed (or nothing to do),
        else why not, for the notes. The work stays on the local branch either way. It
        goes where no forge runs CI on it, unless the task's pull request is open
        (``task_tips.on_forge``): then to the branch the pull request shows, where a
        person's push meanwhile is built on (``catch_up``: ``caught_up`` says how)."""
        if self.remote is None or commits == 0:
            return None
        error, review = "", task_tips.on_forge(self.task)
        for delay in (*defaults.PUSH_BACKOFF_SECONDS, None):
            try:
                git_remote.push_task_branch(
                    core.open_repo(), self.remote, self.task.id, self.started.lease, review
                )
                return None
            except RemoteMoved as exc:
                if not review:  # refs/octopoid/tasks/ is octopoid's: a late push stays out
                    return f"the branch was not pushed to {self.remote}: {exc}"
                return self._catch_up()
            except PushRefused as exc:  # the remote answered: asking again changes nothing
                return f"the branch was not pushed to {self.remote}: {exc}"
            except GitError as exc:
                error = str(exc)
            if delay is not None:
                time.sleep(delay)
        return f"the branch was not pushed to {self.remote}: {error}"

    def _catch_up(self) -> str | None:
        """A person pushed to the pull request's branch while the attempt ran: its commits
        go on top of theirs (None), or why they could not (the notes say it)."""
        assert self.remote is not None
        repo = core.open_repo()
        try:
            self.caught_up = catch_up.onto_remote(
                repo, self.remote, self.task.id, self.started.carried
            )
        except GitError as exc:
            return f"the branch was not pushed to {self.remote}: {exc}"
        return None

    def close(self) -> None:
        """Stop the channel and the network's proxy and remove what the attempt used; a
        leftover the sweep can still remove is said on stderr (the runner's log), never
        raised."""
        self.channel.close()
        if self.proxy is not None:
            self.proxy.close()
        if self.world is not None:
            self.world.close()
        self._remove(self.channel_host)

    @staticmethod
    def _remove(path: Path) -> None:
        try:
            remove_tree(path)
        except OSError as exc:
            print(f"octopoid runner: could not remove {path}: {exc}", file=sys.stderr)


def setup_commands(agent: dict | None, cfg: dict) -> list[str]:
    """The set-up an attempt of ``agent`` runs: its own ``workspace.setup``, else the
    project's."""
    own = ((agent or {}).get("workspace") or {}).get("setup")
    return list(own if own is not None else cfg["workspace"]["setup"])


def private_folder() -> Path:
    """A new private folder for a box's sockets (the channel's, the network proxy's), the
    client and the prompt, named for this process (``owner_tag``): no sweep takes it for a
    leftover while the runner lives."""
    folder = Path(tempfile.mkdtemp(prefix=f"{_prefix(config.find_project_root())}{owner_tag()}-"))
    write_client(folder)
    return folder


def _prefix(root: Path) -> str:
    """This project's channel folders' names start so (short: a socket's path is limited
    to 108 bytes)."""
    return f"octopoid-{hashlib.sha256(str(root).encode()).hexdigest()[:8]}-"


def stale_channel_folders(root: Path) -> list[Path]:
    """Channel folders of this project whose runner is gone (``sandbox.sweep``); never a
    link or file another user put in the shared temp folder."""
    found = leftovers(Path(tempfile.gettempdir()), _prefix(root))
    return [path for path in found if path.is_dir() and not path.is_symlink()]
