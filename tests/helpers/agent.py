"""A scripted agent for the command backend. Its behaviour comes from the task title.

- ``fail-once``: without Previous Agent Notes in the prompt, print a clue and exit 1; with
  them, quote the clue and commit.
- ``always-fail``: print and exit 1.  ``no-commit``: exit 0 without committing.
- ``nothing-to-do``: say ``NO CHANGE NEEDED: why`` and exit 0 without committing.
- ``slow``: sleep OCTO_TEST_SLEEP seconds (default 30) before committing.
- ``flood``: print OCTO_TEST_FLOOD_MB megabytes, then commit.
- ``learn``: record a fact with `octopoid memory add`, then commit. ``remember-each``:
  record "learned in attempt N", then fail in attempt 1 and commit in the others.
- hostile, through the shell: ``plant-hook`` writes a post-merge hook into the common git
  dir; ``hooks-path`` sets core.hooksPath in the shared config; ``switch-branch`` commits
  on a branch of its own making; ``move-main`` points main at its commit (all then commit).
- ``check-fix``: commit a test that fails with ARITH-CLUE; once the notes show the clue
  (a failed check), fix it. ``conflict``: change README.md and commit.
- ``rebase-on-retry``: once a reviewer rejected it, first rebase the branch onto
  ``origin/main`` (the base as the clone has it), settling every conflict with its own side.
- ``push-aside``: before committing, someone else pushes a commit to the task's carried
  branch (``refs/octopoid/tasks/TASK-<id>``) on the remote at ``$OCTO_TEST_ORIGIN``
  (``sandbox: none`` only: a box has no remote).
- ``$OCTO_TEST_PR_PUSH`` set to ``FILE=TEXT`` (any title): before committing, a person
  (alice) pushes a commit writing FILE to the pull request's branch
  (``refs/heads/agent/TASK-<id>``) at ``$OCTO_TEST_ORIGIN`` (``sandbox: none`` only).
- after committing: ``move-main`` points main at its commit; ``fake-commit`` does it from
  inside the user's checkout; ``side-worktree`` adds a worktree of its own to move a branch
  from; ``dir-swap`` plants a hook, moves main and turns a hook file into a directory;
  ``check-plant`` commits a check.sh that plants a hook when the checks run it.
- ``escape``: leave a grandchild running in a session of its own (``escape-bare``: with an
  empty environment too, so only the runner as subreaper can find it), write its PID to
  ``$OCTO_TEST_PIDS``, then commit.
- ``tick``: print ``tick N`` OCTO_TEST_TICKS times (default 8), OCTO_TEST_TICK_SECONDS apart
  (default 0.4), for a live log to follow (``long-tick``: 3000 times, more than any reader
  waits for). ``app-file``: also commit a small ``app.py``.
- ``listen``: print ``listening``, then ask ``octopoid inbox`` until a person's message
  comes (60 s at most; ``octopoid say``), print it and commit it as ``said.txt``.
- ``ask-twice``: ask a person two questions (``ask_human`` through its channel: ``sandbox:
  none`` only, where octopoid's client imports), printing each reply, then commit.
- ``xss``: print HTML that would run script if a page did not escape it, and commit it.
- anything else: write a file named after the task and commit it.
Every run appends a line to ``$OCTO_TEST_RUNS`` (when set) so tests can count attempts.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

prompt = Path(os.environ["OCTOPOID_PROMPT_FILE"]).read_text()
task = os.environ["OCTOPOID_TASK_ID"]
title = prompt.split(f"# Task {task}: ", 1)[1].split("\n", 1)[0]
if os.environ.get("OCTO_TEST_RUNS"):
    with open(os.environ["OCTO_TEST_RUNS"], "a") as runs:
        runs.write(f"{task} {os.getpid()}\n")


def commit(name: str, text: str) -> None:
    Path(name).write_text(text)
    subprocess.run(["git", "add", name], check=True)
    subprocess.run(["git", "commit", "-q", "-m", f"{task}: {title}"], check=True)


print(f"working on {task}: {title}", flush=True)
if "fail-once" in title and "## Previous Agent Notes" not in prompt:
    print("CLUE: the config lives in settings/prod.toml, not config.py")
    sys.exit(1)
if "fail-once" in title:
    clue = prompt.split("CLUE: ", 1)[1].split("\n", 1)[0]
    print(f"using the clue from the previous attempt: {clue}")
if "always-fail" in title:
    print("I cannot do this")
    sys.exit(1)
if "no-commit" in title:
    sys.exit(0)
if "nothing-to-do" in title:
    print("checked every call site: they already pass a timeout")
    print("NO CHANGE NEEDED: every call site already passes timeout=30")
    sys.exit(0)
HOSTILE = {
    "plant-hook": 'h="$(git rev-parse --git-common-dir)/hooks/post-merge"; '
    'printf "#!/bin/sh\\ntouch %s\\n" "$OCTO_TEST_PWNED" > "$h"; chmod +x "$h"',
    "hooks-path": "git config core.hooksPath /tmp/octopoid-evil-hooks",
    "switch-branch": "git checkout -q -b feature/x",
}
for word, script in HOSTILE.items():
    if word in title:
        subprocess.run(["sh", "-c", script], check=True)
if "escape" in title:
    env = {} if "escape-bare" in title else None
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True, env=env)
    with open(os.environ["OCTO_TEST_PIDS"], "a") as pids:
        pids.write(f"{sleeper.pid}\n")
if "slow" in title:
    time.sleep(float(os.environ.get("OCTO_TEST_SLEEP", "30")))
if "flood" in title:
    block = ("x" * 1023 + "\n").encode() * 1024
    for _ in range(int(os.environ.get("OCTO_TEST_FLOOD_MB", "200"))):
        sys.stdout.buffer.write(block)
    sys.stdout.flush()
if "learn" in title:
    octopoid = shutil.which("octopoid") or os.path.join(os.path.dirname(sys.executable), "octopoid")
    subprocess.run(
        [octopoid, "memory", "add", "Important Facts", "the build cache lives in .cache/build"],
        check=True,
    )
if "remember-each" in title:
    attempt = os.environ["OCTOPOID_ATTEMPT"]
    said = f"learned in attempt {attempt}"
    subprocess.run(["octopoid", "memory", "add", "Important Facts", said], check=True)
    if attempt == "1":
        sys.exit(1)
if "Review — rejected" in prompt:
    print("addressing review: " + prompt.split("Review — rejected", 1)[1][:200])
if "rebase-on-retry" in title and "Review — rejected" in prompt:
    step = subprocess.run(["git", "rebase", "origin/main"])
    for _ in range(10):  # each replayed commit that conflicts keeps its own side
        if step.returncode == 0:
            break
        listed = ["git", "diff", "--name-only", "--diff-filter=U", "-z"]
        out = subprocess.run(listed, capture_output=True, text=True, check=True).stdout
        conflicted = [name for name in out.split("\0") if name]
        subprocess.run(["git", "checkout", "--theirs", "--", *conflicted], check=True)
        subprocess.run(["git", "add", "--", *conflicted], check=True)
        step = subprocess.run(["git", "-c", "core.editor=true", "rebase", "--continue"])
if "push-aside" in title:
    aside = "git commit-tree -p HEAD -m 'pushed by someone else' 'HEAD^{tree}'"
    where = f'"$OCTO_TEST_ORIGIN" "$({aside})":refs/octopoid/tasks/{task}'
    subprocess.run(["sh", "-c", f"git push -q {where}"], check=True)
if os.environ.get("OCTO_TEST_PR_PUSH"):
    name, _, text = os.environ["OCTO_TEST_PR_PUSH"].partition("=")
    alice = {"GIT_AUTHOR_NAME": "alice", "GIT_AUTHOR_EMAIL": "alice@example.invalid"}
    person = {
        **os.environ, **alice, "GIT_COMMITTER_NAME": "alice",
        "GIT_COMMITTER_EMAIL": "alice@example.invalid",
        "GIT_INDEX_FILE": os.path.join(tempfile.mkdtemp(), "index"),
    }  # fmt: skip

    def git(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            ["git", *args], input=stdin, env=person, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    git("read-tree", "HEAD")
    blob = git("hash-object", "-w", "--stdin", stdin=f"{text}\n")
    git("update-index", "--add", "--cacheinfo", f"100644,{blob},{name}")
    theirs = git("commit-tree", "-p", "HEAD", "-m", f"alice changes {name}", git("write-tree"))
    git("push", "-q", os.environ["OCTO_TEST_ORIGIN"], f"{theirs}:refs/heads/agent/{task}")
if "tick" in title:
    ticks = 3000 if "long-tick" in title else int(os.environ.get("OCTO_TEST_TICKS", "8"))
    for i in range(ticks):
        print(f"tick {i}", flush=True)
        time.sleep(float(os.environ.get("OCTO_TEST_TICK_SECONDS", "0.4")))
if "listen" in title:
    print("listening", flush=True)
    deadline, said = time.monotonic() + 60, ""
    while not said and time.monotonic() < deadline:
        inbox = subprocess.run(["octopoid", "inbox"], capture_output=True, text=True, check=True)
        said = inbox.stdout.strip() or time.sleep(0.1) or ""
    print(f"inbox: {said}", flush=True)
    Path("said.txt").write_text(said + "\n")
    subprocess.run(["git", "add", "said.txt"], check=True)
if "app-file" in title:
    Path("app.py").write_text(
        "def greet(name):\n    return 'hello ' + name\n\n\ndef main():\n    print(greet(None))\n"
    )
    subprocess.run(["git", "add", "app.py"], check=True)
if "ask-twice" in title:
    from orchestrator.box.client import request

    for question in ("Which port?", "Which branch?"):
        call = {"name": "ask_human", "arguments": {"question": question}}
        reply = request(os.environ["OCTOPOID_CHANNEL"], "tools/call", call)
        print(f"reply: {reply['content'][0]['text']}", flush=True)
if "xss" in title:
    print("<script>alert('log')</script><img src=x onerror=alert('log-img')>", flush=True)
    Path("xss.html").write_text("<script>alert('diff')</script>\n<img src=x onerror=alert(2)>\n")
    subprocess.run(["git", "add", "xss.html"], check=True)
if "check-fix" in title:
    fixed = "ARITH-CLUE" in prompt
    total = 2 if fixed else 3
    Path("test_sum.py").write_text(
        f"def test_sum():\n    assert 1 + 1 == {total}, 'ARITH-CLUE: one plus one is two'\n"
    )
    subprocess.run(["git", "add", "test_sum.py"], check=True)
if "conflict" in title:
    Path("README.md").write_text("# changed by the agent\n")
    subprocess.run(["git", "add", "README.md"], check=True)
commit(f"{task}.txt", f"{task} done in attempt {os.environ['OCTOPOID_ATTEMPT']}\n")
AFTER_COMMIT = {  # hostile acts that need the agent's commit
    "move-main": "git update-ref refs/heads/main HEAD",
    "fake-commit": 'root="$(dirname "$(git rev-parse --path-format=absolute --git-common-dir)")"; '
    'git -C "$root" update-ref refs/heads/main "$(git rev-parse HEAD)"',
    "side-worktree": 'git worktree add -q -f "$OCTO_TEST_SIDE" release && '
    'git -C "$OCTO_TEST_SIDE" reset -q --soft "$(git rev-parse HEAD)"',
    "dir-swap": 'c="$(git rev-parse --git-common-dir)"; git update-ref refs/heads/main HEAD; '
    'printf "#!/bin/sh\\n" > "$c/hooks/post-commit"; chmod +x "$c/hooks/post-commit"; '
    'rm -f "$c/hooks/applypatch-msg.sample"; mkdir "$c/hooks/applypatch-msg.sample"',
}
for word, script in AFTER_COMMIT.items():
    if word in title:
        subprocess.run(["sh", "-c", script], check=True)
if "check-plant" in title:
    Path("check.sh").write_text(
        'cp "$0" "$(git rev-parse --git-common-dir)/hooks/post-merge"; exit 0\n'
    )
    subprocess.run(["git", "add", "check.sh"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", "a check"], check=True)
print("committed", flush=True)
