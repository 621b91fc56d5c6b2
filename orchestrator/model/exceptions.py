"""Every error octopoid raises on purpose.

Each subclass carries the exit code the CLI uses (the base's 1 unless it names another), so the
CLI catches ``OctopoidError`` once, prints one line and exits with that code. Anything else is
a bug and keeps its traceback.
"""

from __future__ import annotations


class OctopoidError(Exception):
    """Base of all expected errors; ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class BadInput(OctopoidError):
    """Bad input or config: the README promises exit code 2 for it."""

    exit_code = 2


class ConfigError(BadInput):
    """A config file is missing, unreadable, or does not match its schema."""


class InvalidTaskId(BadInput):
    """A task id from a user or a file name does not match the id pattern."""


class InvalidTask(BadInput):
    """A new task's fields are unusable (no title, unknown priority, bad role)."""


class TaskParseError(BadInput):
    """A task file cannot be read as an octopoid task (it goes to quarantine)."""


class TaskNotFound(OctopoidError):
    """No queue folder holds a task with this id."""

    exit_code = 3


class IllegalTransition(OctopoidError):
    """The task is not in a state that allows the requested move."""


class BranchMoved(IllegalTransition):
    """A review named the branch head it judged, and the branch is elsewhere now."""


class LostRace(OctopoidError):
    """Another process moved the task first; the caller should move on."""


class LostClaim(IllegalTransition):
    """The claim's token is not ours any more: requeued, reaped or claimed again meanwhile.

    The runner that gets it stops its agent, saves its notes and touches nothing else.
    """


class TaskBusy(IllegalTransition):
    """Another process holds the task for a workflow (an accept in progress)."""


class StorageError(OctopoidError):
    """The queue's files cannot be written (permissions, a full disk); nothing was moved."""


class RecordChanged(OctopoidError):
    """A record's compare-and-swap write lost: someone else wrote it first. Read it again."""


class JournalBusy(OctopoidError):
    """Another process holds the journal (runs its steps), or this one does not hold it."""


class GitError(OctopoidError):
    """A git operation failed; the message carries git's own words."""


class MergeRefused(GitError):
    """Accept could not merge (conflict, dirty checkout, not fast-forward); nothing changed."""


class PushRefused(GitError):
    """The remote refused a push (it holds work the push would overwrite); trying again
    cannot help."""


class RemoteMoved(PushRefused):
    """The remote's copy of a branch moved since it was read (someone else pushed to it):
    the push would have overwritten their commits, so it was refused."""


class SchedulerError(OctopoidError):
    """The scheduler cannot start, stop or be reached."""


class InvalidNotesId(BadInput):
    """A notes id that could reach outside the memory folder, or is otherwise unusable."""


class MemoryStoreError(OctopoidError):
    """Working notes or long-term memory refused an operation (unknown section, bad id...)."""


class InvalidMemoryInput(MemoryStoreError, BadInput):
    """What someone asked memory to store is unusable (empty, an unknown section)."""


class InvalidInput(BadInput):
    """Text from a user octopoid cannot store or act on (not UTF-8, control bytes, too long,
    an unknown agent): refused before anything is written."""


class NothingToShow(OctopoidError):
    """A task has nothing to show for the request (never attempted, or done and cleaned up)."""


class SandboxError(OctopoidError):
    """An attempt's sandbox cannot be made here (bubblewrap missing or refused); no agent
    runs unsandboxed unless config.yaml says `sandbox: none`."""


class SetupFailed(OctopoidError):
    """An attempt's set-up (config.yaml ``workspace:``: its commands, a file to copy, a
    service) failed before the agent started: no task's fault, so the attempt is given
    back and the circuit breaker counts it (``backends.base.CAUSES["setup"]``)."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output  # the set-up's own words, redacted (for a check's notes)


class PreviewFailed(OctopoidError):
    """A task's preview stopped before its server answered: its set-up or its server failed
    (the end of its log says why)."""


class ForgeError(OctopoidError):
    """GitHub or GitLab refused a request octopoid cannot retry its way past (a bad token,
    a repository that is not there, a pull request that cannot be merged)."""


class ForgeUnavailable(ForgeError):
    """The forge cannot answer now (5xx, rate limited, unreachable): ask again later.
    ``retry_after`` is the seconds it asked for, when it said."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
