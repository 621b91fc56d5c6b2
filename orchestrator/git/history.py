"""What a task's branch holds against its base: commits ahead and behind, whether an
accept merged it, a file's text at a ref."""

from __future__ import annotations

from ..model.tasks import task_label
from .branches import branch_exists, branch_for
from .core import full_ref, git, git_errors


def already_merged(repo: git.Repo, task_id: str, base: str, base_before: str) -> bool:
    """Did an accept merge the task into ``base`` since ``base_before``?

    True when the task branch's tip is in ``base`` (merge, fast-forward) or a commit on
    ``base`` since ``base_before`` carries the accept's message (squash).
    """
    branch = branch_for(task_id)
    with git_errors(f"git log {base}"):
        if branch_exists(repo, branch) and repo.is_ancestor(branch, base):
            return True
        subjects = repo.git.log("--format=%s", f"{base_before}..{full_ref(base)}").splitlines()
    return any(s.startswith(f"Merge {task_label(task_id)}: ") for s in subjects)


def commits_on_branch(repo: git.Repo, task_id: str, since: str, base: str | None = None) -> int:
    """Commits on the task's branch that ``since`` does not have (wherever HEAD went), nor
    ``base``: a merge of the base into the branch brings the base's commits, not new work."""
    exclude = [f"^{since}"] + ([f"^{full_ref(base)}"] if base else [])
    with git_errors(f"git rev-list {since}..{branch_for(task_id)}"):
        return int(repo.git.rev_list("--count", f"refs/heads/{branch_for(task_id)}", *exclude))


def branch_history(
    repo: git.Repo, task_id: str, base: str, most: int = 20
) -> tuple[list[str], int]:
    """What the task's branch holds beyond ``base`` (``short-sha subject``, newest first, at
    most ``most``) and how many of ``base``'s commits it lacks; ([], 0) without a branch."""
    branch = f"refs/heads/{branch_for(task_id)}"
    if not branch_exists(repo, branch_for(task_id)):
        return [], 0
    with git_errors(f"git log {base}..{branch}"):
        held = repo.git.log(f"-n{most}", "--format=%h %s", f"{full_ref(base)}..{branch}")
        behind = int(repo.git.rev_list("--count", f"{branch}..{full_ref(base)}"))
    return held.splitlines(), behind


def commits_ahead(repo: git.Repo, task_id: str, base: str) -> int:
    """Commits on the task's branch that its base does not have."""
    return commits_on_branch(repo, task_id, full_ref(base))


def merge_base(repo: git.Repo, base: str, branch: str) -> str:
    """Where ``branch`` left ``base``: the commit ``git diff base...branch`` compares with."""
    with git_errors(f"git merge-base {base} {branch}"):
        return repo.git.merge_base(full_ref(base), full_ref(branch))


def file_text(repo: git.Repo, ref: str, path: str, limit: int = -1) -> str | None:
    """``path``'s text at ``ref``, only its first ``limit`` bytes when given: a file of
    gigabytes in a branch or a base costs no more memory than that. None: no such file
    there, or not a file."""
    cat = repo.git.execute(["git", "cat-file", "blob", f"{ref}:{path}"], as_process=True)
    with cat.proc as blob:
        data = blob.stdout.read(limit)
        if 0 < limit == len(data):
            blob.kill()  # the rest is not wanted: the blob is there
        elif blob.wait() != 0:
            return None
    return data.decode("utf-8", errors="replace")
