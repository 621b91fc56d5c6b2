"""The PostgreSQL store beyond the contract: real processes racing, holds that die with
their process, the CLI's setup commands, and a password that never shows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.faces import reports
from orchestrator.model.exceptions import StorageError, TaskBusy
from orchestrator.model.tasks import TaskState, render_task
from orchestrator.pg.database import Database
from orchestrator.pg.schema import MIGRATIONS, upgrade
from orchestrator.queue import machine as q
from orchestrator.queue.store.postgres import PostgresStore

from .support import OCTOPOID, child_env, make_git_repo, race_claimers, wait_for


@pytest.fixture
def pg_project(project: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose queue is a fresh PostgreSQL database (via OCTOPOID_DATABASE_URL)."""
    monkeypatch.setenv("OCTOPOID_DATABASE_URL", pg_dsn)
    return project


def test_a_whole_lifecycle_runs_on_postgres_and_leaves_no_queue_files(pg_project: Path) -> None:
    task = q.create_task("hello", priority="P0")
    claimed = q.claim_task(None, "agent")
    assert claimed.id == task.id and claimed.attempts == 1
    q.record_usage(claimed, 3, 0.25)
    q.submit_completion(claimed, 1, 3)
    q.accept_completion(task.id)
    assert q.get_task(task.id).state is TaskState.DONE
    summary = reports.status_summary()
    assert summary["counts"]["done"] == 1 and summary["usage"]["turns"] == 3
    queue = pg_project / ".octopoid/runtime/queue"
    assert not any(p.name.startswith("TASK-") for p in queue.rglob("*"))


def test_eight_processes_claim_300_tasks_exactly_once(pg_project: Path, tmp_path: Path) -> None:
    ids = {q.create_task(f"task {i}", priority=f"P{i % 4}").id for i in range(300)}
    outputs = race_claimers(pg_project, tmp_path / "go")
    claimed = [line for out in outputs for line in out.split()]
    assert len(claimed) == len(set(claimed)) == 300 and set(claimed) == ids
    assert sum(1 for out in outputs if out.strip()) > 1  # the work really was shared
    assert q.get_store().count(TaskState.CLAIMED) == 300


HOLDER = r"""
import sys, time
from orchestrator.queue import machine as q
with q.get_store().hold(sys.argv[1], "accepted"):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_hold_is_busy_for_others_and_dies_with_its_process(pg_project: Path) -> None:
    task = q.create_task("held")
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, task.id],
        env=child_env(pg_project),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "held"
        busy = rf"being accepted \(pid {child.pid}\)"
        with pytest.raises(TaskBusy, match=busy), q.get_store().hold(task.id, "rejected"):
            pytest.fail("two processes held one task")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    for _ in range(100):  # the server notices the dead session at once, or nearly
        try:
            with q.get_store().hold(task.id, "rejected"):
                break  # the hold is ours now
        except TaskBusy:
            time.sleep(0.05)
    else:
        pytest.fail("the dead process's hold was never released")


def test_a_hold_may_be_taken_again_by_its_holder(pg_project: Path) -> None:
    task = q.create_task("nested")
    store = q.get_store()
    with store.hold(task.id, "accepted"), store.hold(task.id, "rejected"):
        assert store.locate(task.id) is TaskState.INCOMING


def test_init_store_keeps_the_password_out_of_config_and_db_upgrade_is_idempotent(
    pg_server, tmp_path: Path
) -> None:
    dsn = pg_server.create_database("initstore")
    root = tmp_path / "repo"
    root.mkdir()
    make_git_repo(root)
    url = dsn.replace("postgresql://octopoid@", "postgresql://octopoid:hunter2-sekrit@")
    env = {k: v for k, v in os.environ.items() if k not in ("OCTOPOID_ROOT",)}
    env.pop("OCTOPOID_DATABASE_URL", None)
    done = subprocess.run(
        [OCTOPOID, "init", "--store", url], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "hunter2-sekrit" not in done.stdout + done.stderr
    latest = len(MIGRATIONS)
    assert (
        f"applied migration(s) {', '.join(map(str, range(1, latest + 1)))}: now version {latest}"
        in done.stdout
    )
    assert "password was not written" in done.stdout
    config_text = (root / ".octopoid/config.yaml").read_text()
    assert "hunter2-sekrit" not in config_text and "backend: postgres" in config_text
    again = subprocess.run(
        [OCTOPOID, "db", "upgrade"], cwd=root, env=env, capture_output=True, text=True
    )
    assert again.returncode == 0 and f"up to date (version {latest})" in again.stdout
    made = subprocess.run(
        [OCTOPOID, "enqueue", "from the CLI"], cwd=root, env=env, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    assert PostgresStore(Database(dsn)).count(TaskState.INCOMING) == 1  # it went to the database


def test_init_store_again_on_a_machine_whose_config_names_it_is_idempotent(
    pg_server, tmp_path: Path
) -> None:
    dsn, other = pg_server.create_database("shared"), pg_server.create_database("another")
    root = tmp_path / "second-machine"
    root.mkdir()
    make_git_repo(root)
    env = {k: v for k, v in os.environ.items() if k not in ("OCTOPOID_ROOT",)}
    env.pop("OCTOPOID_DATABASE_URL", None)

    def init(url: str) -> subprocess.CompletedProcess[str]:
        argv = [OCTOPOID, "init", "--store", url]
        return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)

    assert init(dsn).returncode == 0  # the first machine, whose config.yaml is checked in
    config_text = (root / ".octopoid/config.yaml").read_text()
    again = init(dsn)
    assert again.returncode == 0, again.stderr
    assert "config.yaml already names this store" in again.stdout
    assert (root / ".octopoid/config.yaml").read_text() == config_text
    moved = init(other)
    assert moved.returncode == 2 and "already names another PostgreSQL store" in moved.stderr
    assert "edit store.dsn there by hand" in moved.stderr and "Traceback" not in moved.stderr
    assert (root / ".octopoid/config.yaml").read_text() == config_text


def test_an_unreachable_database_is_one_line_without_the_password(project: Path) -> None:
    env = child_env(project)
    env["OCTOPOID_DATABASE_URL"] = "postgresql://me:hunter2-sekrit@/nodb?host=/nonexistent"
    done = subprocess.run([OCTOPOID, "list"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "hunter2-sekrit" not in done.stderr + done.stdout
    assert "PostgreSQL" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_row_edited_into_nonsense_is_quarantined_not_lost(pg_project: Path) -> None:
    import psycopg

    task = q.create_task("to be broken")
    with psycopg.connect(os.environ["OCTOPOID_DATABASE_URL"]) as conn:
        conn.execute("UPDATE octopoid.tasks SET body = 'junk' WHERE id = %s", (task.id,))
    assert q.claim_task(None, "agent") is None  # skipped and quarantined, not a crash
    ((name, reason),) = q.get_store().list_quarantine()
    assert name == f"TASK-{task.id}.md" and "from incoming" in reason
    with pytest.raises(StorageError, match="newer than this octopoid knows"):
        with psycopg.connect(os.environ["OCTOPOID_DATABASE_URL"]) as conn:
            conn.execute("INSERT INTO octopoid.migrations (version) VALUES (99)")
        upgrade(Database(os.environ["OCTOPOID_DATABASE_URL"]))


APPENDER = r"""
import sys
from orchestrator.queue import machine as q
for i in range(5):
    q.save_task_notes(sys.argv[1], f"agent-{sys.argv[2]}", f"output {sys.argv[2]}.{i}", 0, 1)
"""


def test_notes_saved_on_one_machine_are_read_on_another(
    pg_project: Path, tmp_path: Path, pg_dsn: str
) -> None:
    from orchestrator.faces.scaffold import init_project

    task = q.create_task("shared")
    q.claim_task(None, "agent-a")
    q.save_task_notes(task.id, "agent-a", "tried the parser; the bug is in lexer.py", 2, 9)
    other = tmp_path / "machine-b"
    other.mkdir()
    init_project(other)  # a second checkout with its own (empty) notes folder
    env = child_env(other) | {"OCTOPOID_DATABASE_URL": pg_dsn}
    out = subprocess.run(
        [OCTOPOID, "notes", task.id], env=env, capture_output=True, text=True, cwd=other
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip("\n") == q.get_task_notes(task.id).rstrip("\n")
    assert "the bug is in lexer.py" in out.stdout and "## Attempt 1 — agent-a" in out.stdout
    assert not any((other / ".octopoid/runtime/shared/notes").glob("TASK-*"))
    assert not any((pg_project / ".octopoid/runtime/shared/notes").glob("TASK-*.md"))


def test_six_processes_appending_notes_at_once_lose_none(pg_project: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", APPENDER, "notes-race", str(n)],
                         env=child_env(pg_project))
        for n in range(6)
    ]  # fmt: skip
    assert all(proc.wait(timeout=120) == 0 for proc in procs)
    from orchestrator.queue.task_notes import split_notes

    head, sections = split_notes(q.get_task_notes("notes-race"))
    assert head == "# Agent Notes: TASK-notes-race\n\n"
    assert sorted(s.attempt for s in sections) == list(range(1, 31))  # numbered, none twice
    bodies = "".join(s.body for s in sections)
    assert all(f"output {n}.{i}" in bodies for n in range(6) for i in range(5))


def test_export_import_export_round_trips_byte_for_byte_between_stores(
    project: Path, pg_dsn: str, tmp_path: Path
) -> None:
    made = [q.create_task(f"task {i}", priority=f"P{i % 4}") for i in range(6)]
    claimed = q.claim_task(None, "agent")
    q.submit_completion(claimed, 1, 1)
    q.accept_completion(claimed.id)
    left = q.claim_task(None, "agent")  # one left claimed, with its lease headers
    q.save_task_notes(left.id, "agent", "half done; ```` a fence in the output", 0, 2)
    env = child_env(project)
    first, second = tmp_path / "from-folders", tmp_path / "from-postgres"
    out = subprocess.run([OCTOPOID, "export", str(first)], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and "exported 6 task(s)" in out.stdout, out.stderr
    env["OCTOPOID_DATABASE_URL"] = pg_dsn
    for argv in (["import", str(first)], ["export", str(second)]):
        out = subprocess.run([OCTOPOID, *argv], env=env, capture_output=True, text=True)
        assert out.returncode == 0 and "6 task(s)" in out.stdout, out.stderr
    files = sorted(p.relative_to(first) for p in first.rglob("TASK-*.md"))
    assert files == sorted(p.relative_to(second) for p in second.rglob("TASK-*.md"))
    assert len(files) == len(made) + 1 and Path(f"notes/TASK-{left.id}.md") in files
    for rel in files:
        assert (first / rel).read_bytes() == (second / rel).read_bytes()
    again = subprocess.run(
        [OCTOPOID, "import", str(first)], env=env, capture_output=True, text=True
    )
    assert again.returncode == 0 and "imported 0 task(s)" in again.stdout
    assert again.stdout.count("already exists") == 6  # named and skipped, not duplicated
    store = PostgresStore(Database(pg_dsn))
    assert store.allocate_id() == "7"  # ids allocated after an import skip the imported ones
    store.close()


def test_import_names_and_skips_an_unreadable_file_and_refuses_a_non_queue(
    pg_project: Path, tmp_path: Path
) -> None:
    from orchestrator.model.exceptions import InvalidInput
    from orchestrator.queue.store.transfer import import_queue

    source = tmp_path / "queue"
    (source / "incoming").mkdir(parents=True)
    (source / "incoming" / "TASK-5.md").write_bytes(b"\x00binary")
    (source / "incoming" / "TASK-6.md").write_text("# [TASK-6] fine\n\nPRIORITY: P1\n")
    report = import_queue(q.get_store(), source, q.task_notes.put_notes)
    assert report.counts["incoming"] == 1 and q.get_task("6").title == "fine"
    assert report.skipped == [
        "skipped incoming/TASK-5.md: file contains NUL bytes (binary data, not a task)"
    ]
    with pytest.raises(InvalidInput, match="has no queue folders"):
        import_queue(q.get_store(), tmp_path / "nothing-here", q.task_notes.put_notes)


def test_the_scheduler_runs_attempts_from_postgres_to_review(
    git_project: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.daemon import scheduler

    from .support import write_agents

    monkeypatch.setenv("OCTOPOID_DATABASE_URL", pg_dsn)  # runners inherit it
    write_agents(git_project, max_concurrent=2, max_claimed=3)
    ids = [q.create_task(f"t{i}").id for i in range(3)]
    sched = scheduler.Scheduler()
    sched.initialize()
    try:

        def reviewed() -> bool:
            sched.loop_once()
            return all(q.get_store().locate(t) is TaskState.PROVISIONAL for t in ids)

        wait_for("the three in review", reviewed, 60)
    finally:
        sched.shutdown(grace=10)
    assert [q.get_store().locate(t) for t in ids] == [TaskState.PROVISIONAL] * 3
    assert q.get_task(ids[0]).headers.get("COMMITS") is not None


def test_quarantine_into_postgres_never_reads_a_fifo_and_never_drops_a_big_file(
    pg_project: Path, tmp_path: Path
) -> None:
    from orchestrator.model import defaults

    store = q.get_store()
    fifo = tmp_path / "TASK-7.md"
    os.mkfifo(fifo)  # opening it for reading would block for ever
    big = tmp_path / "TASK-8.md"
    big.write_bytes(b"x" * (defaults.MAX_TASK_FILE_BYTES + 1))
    small = tmp_path / "TASK-9.md"
    small.write_bytes(b"junk \xff")
    for path in (fifo, big, small):
        store.quarantine(path, "unreadable")
    assert not fifo.exists() and not small.exists()
    assert big.stat().st_size == defaults.MAX_TASK_FILE_BYTES + 1  # left where it was
    reasons = dict(store.list_quarantine())
    assert "FIFO" in reasons["TASK-7.md"] and "limited to" in reasons["TASK-8.md"]
    assert reasons["TASK-9.md"].startswith("unreadable\n")
    import psycopg

    with psycopg.connect(os.environ["OCTOPOID_DATABASE_URL"]) as conn:
        kept = conn.execute("SELECT body FROM octopoid.quarantine WHERE name = 'TASK-9.md'")
        assert bytes(kept.fetchone()[0]) == b"junk \xff"


LEAKY_AGENT = (
    "import os, socket, sys\n"
    "print('the database is', os.environ.get('OCTOPOID_DATABASE_URL', 'not mine to know'))\n"
    "print('the password is', os.environ.get('PGPASSWORD', 'not mine either'))\n"
    "try:\n"
    "    socket.socket(socket.AF_UNIX).connect(sys.argv[1])\n"
    "    print('the server answered')\n"
    "except OSError as exc:\n"
    "    print('the server is out of reach:', type(exc).__name__)\n"
    "sys.exit(1)\n"
)


def test_an_agent_never_gets_the_database_url_or_password(
    git_project: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.daemon import scheduler

    from .support import write_agents

    url = pg_dsn.replace("postgresql://octopoid@", "postgresql://octopoid:hunter2-sekrit@")
    monkeypatch.setenv("OCTOPOID_DATABASE_URL", url)  # trust auth: the password is unused
    monkeypatch.setenv("PGPASSWORD", "hunter2-sekrit")
    server_socket = next(Path(pg_dsn.split("host=", 1)[1]).glob(".s.PGSQL.*[0-9]"))  # known to all
    write_agents(git_project, argv=[sys.executable, "-c", LEAKY_AGENT, str(server_socket)])
    task = q.create_task("print what you know")
    sched = scheduler.Scheduler()
    sched.initialize()
    try:

        def noted() -> str:
            sched.loop_once()
            return q.get_task_notes(task.id)

        wait_for("the notes", noted, 60)
    finally:
        sched.shutdown(grace=10)
    notes = q.get_task_notes(task.id)
    assert "the database is not mine to know" in notes
    assert "the password is not mine either" in notes
    assert "the server is out of reach: FileNotFoundError" in notes  # its socket is hidden
    logs = git_project / ".octopoid/runtime/logs"
    written = [p.read_text(errors="replace") for p in logs.rglob("*") if p.is_file()]
    assert written and not any("hunter2-sekrit" in text for text in [notes, *written])
    store = PostgresStore(Database(pg_dsn))
    assert "hunter2-sekrit" not in render_task(store.get(task.id))  # the row's text
    store.close()


def test_an_idle_scheduler_is_woken_by_an_enqueue_from_another_machine(
    git_project: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With housekeeping passes an hour apart and no file changing here, only PostgreSQL's
    NOTIFY can make this scheduler look: the task must still start."""
    import threading

    from orchestrator.daemon import scheduler

    from .support import write_agents

    monkeypatch.setenv("OCTOPOID_DATABASE_URL", pg_dsn)
    monkeypatch.setattr(scheduler, "HOUSEKEEPING_SECONDS", 3600.0)
    write_agents(git_project)
    sched = scheduler.Scheduler()
    daemon = threading.Thread(target=sched.run)
    daemon.start()
    try:
        time.sleep(1.0)  # its first pass has found nothing to do
        elsewhere = subprocess.run(  # another process; only the database changes
            [sys.executable, "-c", "from orchestrator.queue import machine as q; "
             "print(q.create_task('from elsewhere').id)"],
            env=child_env(git_project) | {"OCTOPOID_ROOT": str(git_project)},
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        task_id = elsewhere.stdout.strip()
        woke = lambda: q.get_store().locate(task_id) is not TaskState.INCOMING  # noqa: E731
        wait_for("the scheduler to wake up", woke, 60)
    finally:
        sched.stop()
        daemon.join(60)
    assert q.get_store().locate(task_id) in (TaskState.CLAIMED, TaskState.PROVISIONAL)


def test_an_attempt_outlives_a_database_restart_and_keeps_its_notes_and_move(
    git_project: Path, pg_server, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server goes down while the agent works and comes back after the agent has
    finished: the runner's notes and its move to review wait for it, nothing is lost."""
    from orchestrator.daemon import scheduler

    from .support import write_agents
    from .support.daemon import agents_per_task

    monkeypatch.setenv("OCTOPOID_DATABASE_URL", pg_dsn)
    monkeypatch.setenv("OCTO_TEST_SLEEP", "2")
    write_agents(git_project, lease_seconds=60)
    task = q.create_task("slow")
    agents = lambda: agents_per_task()[f"TASK-{task.id}"]  # noqa: E731
    sched = scheduler.Scheduler()
    sched.initialize()
    try:
        sched.loop_once()
        assert q.get_store().locate(task.id) is TaskState.CLAIMED
        wait_for("the agent to start", agents)
        pg_server.pause()
        try:
            wait_for("the agent to finish while the server is down", lambda: not agents())
            runner = next(iter(sched.runners.values()))
            assert runner.proc.poll() is None  # its runner waits for the database
        finally:
            pg_server.resume()
        done = lambda: q.get_store().locate(task.id) is TaskState.PROVISIONAL  # noqa: E731
        wait_for("the task in review", done, 60)
    finally:
        sched.shutdown(grace=10)
    notes = q.get_task_notes(task.id)
    assert "## Attempt 1" in notes and "committed" in notes


CORPUS = [
    "The login flow lives in auth.py and calls token_refresh when the session expires",
    "Deploys run from the release branch after the changelog is updated",
    "Database migrations are applied with alembic upgrade head in CI",
    "The payment webhook handler is in billing/webhooks.py and retries three times",
    "Use UTC everywhere; the scheduler compares timestamps across machines",
    "Tests that touch the network are marked slow and skipped locally",
    "The cache layer wraps redis; keys expire after ten minutes",
    "Front-end assets are built with vite into static/dist",
    "Logging goes through structlog with JSON output in production",
    "The CLI entry point is orchestrator/cli.py built on click",
    "Billing invoices are generated nightly by a cron job",
    "Auth tokens are signed with the key in the secrets manager, never in the repo",
    "Retry notes keep the last 3000 characters of an attempt's output",
    "The webhook signature is checked before the payload is parsed",
    "Docker images are pinned by digest in the deploy manifests",
    "Search results are ranked by BM25 in SQLite's FTS5",
    "Rate limits on the API are 100 requests per minute per token",
    "The session cookie is HttpOnly and SameSite strict",
    "Feature flags live in config/flags.yaml and are read at start-up",
    "Email sending goes through a queue so requests never wait on SMTP",
    "Image uploads are resized by a worker before they are stored",
    "The admin dashboard needs the staff role",
    "Timezone bugs came from naive datetimes; always pass tzinfo",
    "Migrations must be backwards compatible for one release",
    "Payments are idempotent by the request key the client sends",
    "The refresh token rotates on every use",
    "Static files are served by the CDN, not the app",
    "Profiling showed JSON parsing dominates the webhook handler",
    "Cron jobs log their start and end to the ops channel",
    "The README's test command is what CI runs",
]
QUERIES = [
    "fix the payment webhook retries in billing/webhooks.py",
    "token refresh fails when the session expires",
    "database migration broke the release",
    "timestamps wrong across timezones",
    "deploy pinned docker images",
    "cache keys expire too early",
]


def test_memory_search_ranks_like_the_sqlite_store(project: Path, pg_dsn: str) -> None:
    """The same notes in both memories: for every query the same notes, in the same order
    (both rank by the same BM25 over the store)."""
    from orchestrator.memory.postgres import PostgresMemoryStore
    from orchestrator.memory.store import MemoryStore
    from orchestrator.pg.schema import shared, upgrade_database

    upgrade_database(pg_dsn)
    sqlite, pg = MemoryStore(project / "memory.db"), PostgresMemoryStore(shared(pg_dsn))
    for note in CORPUS:
        sqlite.write_note(note, scope="notes:x:p")
        pg.write_note(note, scope="notes:x:p")
    for query in QUERIES:
        ours = [h["content"] for h in pg.search_notes(query, limit=3)]
        theirs = [h["content"] for h in sqlite.search_notes(query, limit=3)]
        assert ours == theirs and ours, query
    sqlite.close()


def test_what_one_machine_learned_is_found_by_another(
    pg_project: Path, tmp_path: Path, pg_dsn: str
) -> None:
    """`octopoid memory add` in one clone, `octopoid memory search` in another clone with a
    different folder name: one memory, in the database."""
    from orchestrator.faces.scaffold import init_project

    other = tmp_path / "elsewhere"
    other.mkdir()
    init_project(other)
    env = {
        root: child_env(root) | {"OCTOPOID_DATABASE_URL": pg_dsn} for root in (pg_project, other)
    }
    added = subprocess.run(
        [OCTOPOID, "memory", "add", "Important Facts", "The flaky test needs TZ=UTC set"],
        env=env[pg_project], cwd=pg_project, capture_output=True, text=True,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    found = subprocess.run(
        [OCTOPOID, "memory", "search", "flaky test timezone UTC", "--json"],
        env=env[other], cwd=other, capture_output=True, text=True,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert "The flaky test needs TZ=UTC set" in found.stdout


WRITER = r"""
import sys
from orchestrator.memory.open import open_memory
memory = open_memory()
for _ in range(5):
    memory.write_note("Run the linter before pushing", tags=[f"w{sys.argv[1]}"], scope="s")
"""


def test_processes_writing_the_same_note_at_once_reinforce_one_note(pg_project: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(n)], env=child_env(pg_project))
        for n in range(6)
    ]
    assert all(proc.wait(timeout=120) == 0 for proc in procs)
    from orchestrator.memory.open import open_memory

    memory = open_memory()
    assert memory.count() == 1
    (note,) = memory.get_recent_notes()
    assert sorted(note["tags"]) == [f"w{n}" for n in range(6)]
    assert note["importance"] == pytest.approx(1.0)  # 0.5 + 29 reinforcements, capped


def test_the_queue_its_notes_and_the_memory_share_one_pool_per_process(pg_project: Path) -> None:
    """The memory, the retry notes and the queue below them all ask ``pg.schema.shared``
    for their connections: one pool per process and database, however many parts use it."""
    from orchestrator.memory.open import open_memory
    from orchestrator.queue.task_notes import notes_book

    pool = q.get_store().db
    assert open_memory().db is pool and notes_book().db is pool


def test_patience_is_one_wait_per_outage_not_one_per_operation() -> None:
    from orchestrator.pg.database import Patience

    now = [100.0]
    patience = Patience(30.0, clock=lambda: now[0])
    assert patience.left() == 30.0
    patience.failed()
    now[0] += 20
    patience.failed()  # a second operation failing in the same outage
    assert patience.left() == 10.0
    now[0] += 15
    assert patience.left() == Patience.MOMENT  # spent: each try is a moment, not a wait
    patience.reconnected()
    assert patience.left() == 30.0


def test_a_runner_whose_database_is_gone_gives_up_and_leaves_the_claim_to_the_reaper(
    git_project: Path, pg_server, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server goes away for good while the agent works: the runner waits its patience
    once (not once per renewal, notes write and move) and exits; once a database is back,
    the reaper finds the claim's owner gone and requeues it."""
    import subprocess
    import sys
    from datetime import timedelta

    from orchestrator.base.processes import TOKEN_ENV
    from orchestrator.model.tasks import utcnow
    from orchestrator.queue import recovery

    from .support import child_env, write_agents

    monkeypatch.setenv("OCTOPOID_DATABASE_URL", pg_dsn)
    write_agents(git_project, lease_seconds=4)
    task = q.create_task("slow")
    claimed = q.claim_task(None, "impl-1")
    env = child_env(git_project) | {
        TOKEN_ENV: claimed.headers["CLAIM_TOKEN"],
        "OCTOPOID_DATABASE_WAIT_SECONDS": "3",
        "OCTO_TEST_SLEEP": "1",
    }
    runner = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.roles.implementer", task.id, "impl-1"],
        cwd=git_project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:

        def started() -> bool:
            assert runner.poll() is None
            return "STARTED_AT" in q.get_task(task.id).headers

        wait_for("the attempt to start", started, 60)
        q.get_store().close()
        pg_server.pause()
        try:
            runner.wait(timeout=240)  # a bound for a hung runner, not a measure of speed
        finally:
            pg_server.resume()
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode != 0 and "Traceback" not in runner.stderr.read()
    assert q.get_store().locate(task.id) is TaskState.CLAIMED  # nothing could be written
    moved = recovery.reap_expired_claims(utcnow() + timedelta(seconds=60))
    assert [t.id for t, _ in moved] == [task.id]
    assert q.get_store().locate(task.id) is TaskState.INCOMING


def test_pinned_notes_and_blocked_tasks_are_read_through_indexes(pg_dsn: str) -> None:
    """Migration 4: what every prompt (pinned notes) and every status (blocked tasks) reads
    has a partial index, so neither scans its table."""
    import psycopg

    PostgresStore(Database(pg_dsn)).initialize()
    with psycopg.connect(pg_dsn) as conn:
        names = {row[0] for row in conn.execute("SELECT indexname FROM pg_indexes")}
    assert {"memory_pinned", "tasks_blocked"} <= names


def test_a_fork_server_preloads_the_driver_only_for_postgres_and_connects_to_nothing(
    git_project: Path, pg_server, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Importing psycopg was a third of a PostgreSQL runner's start, so the fork server
    imports it first; but a libpq connection must never be shared across fork, so the
    server holds none (each runner connects after its fork), and a folder store's server
    does not load the driver at all."""
    import psutil

    from orchestrator.daemon.forkserver import ForkServer

    def loaded_and_connected() -> tuple[bool, bool]:
        server = ForkServer()
        try:
            proc = psutil.Process(server.proc.pid)
            maps = Path(f"/proc/{proc.pid}/maps").read_text()
            to_pg = [c for c in proc.net_connections("unix") if str(pg_server.sock) in c.raddr]
            return "libpq" in maps, bool(to_pg)
        finally:
            server.close()

    assert loaded_and_connected() == (False, False)
    monkeypatch.setenv("OCTOPOID_DATABASE_URL", pg_dsn)
    q.create_task("a queue that exists")
    assert loaded_and_connected() == (True, False)


def _backend(store: PostgresStore) -> int:
    with store.db.tx() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


def test_a_forked_child_connects_for_itself_and_leaves_its_parents_connection_working(
    pg_dsn: str,
) -> None:
    store = PostgresStore(Database(pg_dsn))
    upgrade(store.db)
    mine = _backend(store)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # a runner forked by the fork server, or a bench's claimer
        code = 1
        try:
            os.write(write, str(_backend(store)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    theirs = int(os.read(read, 64) or 0)
    os.close(read)
    assert os.waitpid(child, 0)[1] == 0
    assert theirs not in (0, mine)  # a connection of its own, not the parent's socket
    assert _backend(store) == mine  # and the parent's session is still there, unharmed
    store.close()


def test_a_connection_the_server_ended_while_idle_is_replaced_not_an_error(pg_dsn: str) -> None:
    """An idle connection is not checked with a round trip before use: one the server has
    ended (a restart, an administrator) has its goodbye to read, and is replaced."""
    import psycopg

    store = PostgresStore(Database(pg_dsn))
    upgrade(store.db)
    first = _backend(store)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (first,))
        sql = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
        wait_for("the backend gone", lambda: not admin.execute(sql, (first,)).fetchone())
    assert _backend(store) not in (first, None)
    assert store.count(TaskState.INCOMING) == 0
    store.close()


def test_a_batched_move_keeps_odd_text_exactly_and_rolls_back_when_its_change_raises(
    pg_project: Path,
) -> None:
    """Moves send their statements with values quoted client-side, several in one message:
    quotes, percent signs, backslashes and NULs' neighbours arrive byte for byte, and a
    change that raises after the locking read leaves the row as it was."""
    odd = "it's 100% \\done\\ %s %(x)s $1 ;COMMIT; -- é"
    task = q.create_task(odd, context=odd)
    store = q.get_store()

    def boom(t) -> None:
        t.set_header("SEEN", "yes")
        raise RuntimeError("the change failed")

    with pytest.raises(RuntimeError, match="the change failed"):
        store.move(task.id, TaskState.INCOMING, TaskState.CLAIMED, boom)
    again = q.get_task(task.id)
    assert again.state is TaskState.INCOMING and "SEEN" not in again.headers
    claimed = q.claim_task(None, "agent")
    assert claimed.id == task.id and render_task(q.get_task(task.id)) == render_task(claimed)
    assert claimed.title == odd and odd in render_task(claimed)


def test_a_task_made_claimed_and_done_is_six_round_trips_each_statement_planned_once(
    pg_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One claimer is bound by round trips, not CPU: a new task is its id, then its row
    with the notice and COMMIT; a claim and the move to done are the locking read, then the
    write with its COMMIT, the notes' deletion in it. The statements of an add, a claim and
    a move are prepared once per connection (planning a claim took 3x its execution)."""
    import psycopg

    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(cur, query, *args, **kwargs):
        sent.append(str(query))
        return execute(cur, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    for n in range(2):
        sent.clear()
        task = q.create_task(f"task {n}")
        q.save_task_notes(task.id, "agent", "what it did", 1, 1)
        sent.clear()  # the notes' own round trips are not the lifecycle's
        q.complete_task(q.claim_task(None, "agent"))
        assert len(sent) == 4, sent
        planned = ["PREPARE" in text for text in sent]
        assert all("EXECUTE" in text for text in sent) and any(planned) == (n == 0), sent
        assert q.get_task_notes(task.id) is None
    sent.clear()
    q.create_task("one more")
    assert len(sent) == 2 and "EXECUTE" in sent[1] and "PREPARE" not in sent[1], sent


def test_a_message_that_failed_with_its_prepare_leaves_no_connection_that_refuses_it(
    pg_dsn: str,
) -> None:
    """A PREPARE outlives the failed transaction it was sent in (a rollback does not undo
    it): the connection is closed, not handed out again to fail with "already exists"."""
    db = Database(pg_dsn)
    for divisor, fails in ((0, True), (1, False), (2, False)):
        try:
            with db.tx(batch=True) as cur:
                cur.prepared("SELECT 2 / $1::int", (divisor,))
                assert cur.fetchone() == (2 // divisor,)
        except StorageError as exc:
            assert fails and "division by zero" in str(exc)
        else:
            assert not fails
    db.close()


def test_a_connection_whose_prepared_statement_is_gone_is_not_handed_out_again(
    pg_dsn: str,
) -> None:
    """A statement the server no longer has (``DEALLOCATE``, a pooler that moved the
    session) fails the one transaction that used it; the connection is closed, so the next
    one prepares it again instead of failing the same way for the process's life."""
    db = Database(pg_dsn)
    try:
        for _ in range(2):  # the second run only executes what the first prepared
            with db.tx(batch=True) as cur:
                cur.prepared("SELECT 2 * $1::int", (3,))
                assert cur.fetchone() == (6,)
        with db.tx() as cur:  # the same connection: the one idle
            cur.execute("DEALLOCATE ALL")
        with pytest.raises(StorageError, match="does not exist"), db.tx(batch=True) as cur:
            cur.prepared("SELECT 2 * $1::int", (3,))
            cur.fetchone()
        for _ in range(2):
            with db.tx(batch=True) as cur:
                cur.prepared("SELECT 2 * $1::int", (4,))
                assert cur.fetchone() == (8,)
    finally:
        db.close()


def test_a_rolled_back_transaction_leaves_the_connections_prepared_statements_working(
    pg_dsn: str,
) -> None:
    """A refused move rolls back; the statements its connection prepared stay usable. (The
    driver, left to prepare a statement it ran five times, answered any rollback with
    ``DEALLOCATE ALL``, octopoid's statements too: the next move on it failed.)"""
    db = Database(pg_dsn)
    try:
        with db.tx(batch=True) as cur:
            cur.prepared("SELECT 2 * $1::int", (3,))
            assert cur.fetchone() == (6,)
        for n in range(6):  # a plain read run often, on the same (the one idle) connection
            assert db.one("SELECT %s::int + 1", (n,)) == (n + 1,)
        with pytest.raises(TaskBusy), db.tx(batch=True) as cur:
            cur.prepared("SELECT 2 * $1::int", (3,))
            cur.fetchone()
            raise TaskBusy("a move refused under its lock")
        with db.tx(batch=True) as cur:
            cur.prepared("SELECT 2 * $1::int", (4,))
            assert cur.fetchone() == (8,)
    finally:
        db.close()


def test_only_moves_that_may_make_work_claimable_wake_a_watcher(pg_project: Path) -> None:
    """An enqueue and a task done wake schedulers (with the state); a claim, a submit and a
    failure wake nobody: with many machines, each wake is a pass on each of them."""

    heard: list[str] = []
    stop = q.get_store().watch(heard.append)
    try:
        wait_for("the watcher listening", lambda: heard == [""])  # on connecting
        first = q.create_task("one")
        q.submit_completion(q.claim_task(None, "agent"), 1, 1)
        q.create_task("two")
        q.fail_task(q.claim_task(None, "agent"), "broke")
        q.accept_completion(first.id)
        wait_for("the accept's notice", lambda: heard[-1:] == ["done"])
    finally:
        stop()
    assert heard == ["", "incoming", "incoming", "done"]


def test_a_task_done_outside_review_wakes_watchers_only_when_a_waiting_task_needs_it(
    pg_project: Path,
) -> None:
    """Done from a claim frees nothing to claim unless a waiting task is blocked on it:
    with eight claimers, a notice per task done woke eight server processes and claimers."""
    from .support import wait_for

    heard: list[str] = []
    stop = q.get_store().watch(heard.append)
    try:
        wait_for("the watcher listening", lambda: heard == [""])
        q.create_task("alone")
        q.complete_task(q.claim_task(None, "agent"))  # nobody waits on it: no notice
        blocker = q.create_task("blocker")
        q.create_task("after it", blocked_by=[blocker.id])
        assert q.claim_task(None, "agent").id == blocker.id
        q.complete_task(blocker.id)
        wait_for("the blocker's notice", lambda: heard[-1:] == ["done"])
    finally:
        stop()
    assert heard == ["", "incoming", "incoming", "incoming", "done"]  # in commit order
