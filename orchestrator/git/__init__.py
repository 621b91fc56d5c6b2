"""Every git call octopoid makes (GitPython or the git command, hooks off), by idea:

- ``core``: the repository opened, git run as a plain process, git's errors, the admin lock;
- ``branches``: a task's branch and worktree, made, read, set aside and removed;
- ``history``: what a branch holds against its base (ahead, behind, merged, a file's text);
- ``remote``: branches through ``git.remote`` (fetch, adopt, push with a lease, delete);
- ``merges``: a branch merged into its base, here or onto the remote's; would it conflict;
- ``diffs``: a branch's diff, whole or within a byte budget;
- ``merge_guard``: what a merge would replace in the person's checkout;
- ``task_tips``: the tip a task's last attempt left, where the next one starts;
- ``catch_up``: an attempt's work put on top of a person's push to its branch.
"""
