"""`octopoid doctor`: repair what crashes left behind, and say what needs a person.

Repairs are the ones every reader would make anyway (interrupted writes rolled forward);
``rebuild`` also rebuilds the claim index and the usage ledger from the task files.
Everything else is reported with the command that fixes it: nothing is moved here.
"""

from __future__ import annotations

from datetime import datetime

from .. import box as sandbox
from .. import config
from ..base import netpolicy
from ..base.lazy import lazy_import
from ..daemon import stalls
from ..model.defaults import BOUNCE_REPEATS
from ..model.tasks import TaskState, utcnow
from ..queue import adopt, bounces
from ..queue import machine as queue_utils
from ..queue.dependencies import blocked_summary
from ..queue.leases import dead_since
from ..queue.machine import get_store, readable_tasks, unfenced_submit
from ..queue.store import QueueStore
from ..review import finishing

S = TaskState
# PyYAML, for a project's CI files: read only where octopoid pushes task branches to a forge.
ci_triggers = lazy_import("orchestrator.forge.ci_triggers")


def _sandbox() -> list[str]:
    """The walls: unusable (no agent starts), absent (agents are trusted) or open to the
    network is reported."""
    walls = sandbox.describe()
    if not walls["usable"] or walls["mode"] == "none" or walls["open"]:
        return [walls["summary"]]
    return []


def _ci_on_push() -> list[str]:
    """A project whose pull requests put task branches on a forge, where CI runs on every
    push: each such push runs an attempt's code with the repository's secrets."""
    cfg = config.load_config()
    forge = cfg["forge"]
    provisional = forge["kind"] != "none" and forge["open_on"] == "provisional"
    if cfg["merge"]["strategy"] != "pull-request" and not provisional:
        return []
    found = ci_triggers.on_task_push(config.find_project_root())
    if not found:
        return []
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return [
        f"CI runs on every push of a task's branch ({', '.join(found[:5])}{more}): the "
        "pull requests octopoid opens push agent/TASK-<id>, and attempts push to them, so "
        "that code runs with the repository's secrets before anyone reviews it; leave "
        "agent/** out of `on: push` (or out of the job's rules) and keep secrets behind "
        "a person's approval (docs/security.md)"
    ]


def _bouncing(store: QueueStore) -> list[dict]:
    """Tasks in flight or waiting that keep coming back with the same refusal (only those
    with enough attempts to have bounced are read)."""
    again = [w.id for w in store.waiting() if w.attempts >= BOUNCE_REPEATS]
    tasks = [*store.list(S.PROVISIONAL), *store.list(S.CLAIMED), *readable_tasks(again)]
    return [found for task in tasks if (found := bounces.bouncing(task)) is not None]


def _unfinished() -> list[str]:
    """Journals still open (an accept, close, split or plan approval a dead process left),
    each with what finishes it."""
    lines = []
    for journal in adopt.store().journals.pending():
        how = f"`octopoid accept {journal.key}` finishes it (never merging twice)"
        if not finishing.awaits_accept(journal):
            how = "`octopoid doctor --repair` finishes it, as any scheduler does"
        left = ", ".join(journal.left)
        lines.append(f"{journal.key}: its {journal.kind} stopped half-way ({left} left); {how}")
    return lines


def network() -> list[str]:
    """Each agent's network and the checks', as their boxes get it: what ``allow`` lets
    through (with this shell's environment, where an agent's API address may be named)."""
    if config.problem() is not None or sandbox.mode() == "none":
        return []
    cfg, agents = config.load_config(), config.load_agents()["agents"]
    lines = [
        f"network of {agent['name']} ({agent['backend']}): "
        + netpolicy.describe(*netpolicy.agent_network(agent, cfg, config.agent_env(agent)))
        for agent in agents
    ]
    lines.append(f"network of the checks: {netpolicy.describe(*netpolicy.checks_network(cfg))}")
    if cfg["workspace"]["setup"] or any((a.get("workspace") or {}).get("setup") for a in agents):
        said = netpolicy.describe(*netpolicy.setup_network(cfg))
        lines.append(f"network of the set-up: {said}")
    if cfg["preview"]["command"]:
        lines.append(f"network of a preview: {netpolicy.describe(*netpolicy.preview_network(cfg))}")
    modes = [cfg["sandbox"]["network"]["mode"], *(a["sandbox"]["network"]["mode"] for a in agents)]
    if any(mode in netpolicy.OLD_NAMES for mode in modes):
        lines.append(
            "`network: host` is the old name of `open` (the host's network, as before); "
            "write `open` to keep it, or `allow` with the hosts the agents need"
        )
    return lines


def examine(rebuild: bool = False, now: datetime | None = None, repair: bool = False) -> list[str]:
    """One line per repair made or problem found; empty when all is well. ``repair`` also
    finishes what dead processes' journals left (the scheduler's sweep does it too)."""
    now = now or utcnow()
    sandbox.probe_ahead()  # its box starts while the store is read and repaired
    store = get_store()
    repaired, rebuilt = queue_utils.repair_store(rebuild)
    lines = [f"repaired {done}" for done in repaired]
    if repair:
        lines += [f"repaired {done}" for done in finishing.finish_interrupted()]
    lines += _unfinished()
    if rebuilt is not None:
        lines.append(f"rebuilt the claim index and usage ledger from {rebuilt} tasks")
    problem = config.problem()
    if problem:
        lines.append(f"{problem} (nothing is claimed until it is fixed)")
    else:
        lines += _sandbox() + _ci_on_push()
        found = stalls.report()  # the sandbox's own stall is said just above
        found["system"] = [s for s in found["system"] if s["code"] != "sandbox"]
        lines += stalls.lines(found)
    for task in store.list(S.PROVISIONAL):
        merging = "MERGING" in task.headers or "MERGED" in task.headers
        if merging and finishing.open_journal(task.id) is None:  # an older octopoid's
            lines.append(
                f"{task.label}: an accept stopped half-way; `octopoid accept {task.label}` "
                "finishes it (it never merges twice)"
            )
        elif "PROPOSED_SPLIT" not in task.headers and (why := unfenced_submit(task)):
            lines.append(
                f"{task.label} is in provisional/ but {why}: accept refuses it; "
                f"`octopoid reject {task.label} --reason ...` sends it back for an attempt"
            )
    lease = None if problem else config.load_agents()["lease_seconds"]
    for task in store.list(S.CLAIMED) if lease else []:
        if dead_since(task, now, lease) is not None:
            lines.append(
                f"{task.label}: its runner is gone; a running scheduler requeues it, or "
                f"`octopoid requeue {task.label}`"
            )
    lines += [bounces.line(found) for found in _bouncing(store)]
    lines += [f"{stuck['id']} is stuck: {stuck['why']}" for stuck in blocked_summary()["stuck"]]
    quarantined = store.list_quarantine()
    if quarantined:
        names = ", ".join(name for name, _ in quarantined[:5])
        more = f" and {len(quarantined) - 5} more" if len(quarantined) > 5 else ""
        lines.append(
            f"{len(quarantined)} unreadable file(s) in quarantine/: {names}{more} "
            "(each with a .error saying why)"
        )
    return lines
