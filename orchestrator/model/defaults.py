"""Every tunable in one place, each with its default and the reason for it."""

from __future__ import annotations

#: Characters of agent output kept per attempt in the retry notes (the seed's "~3000").
NOTES_STDOUT_LIMIT = 3000

#: Characters of retry notes a prompt may carry; keeps ten attempts from making a prompt 10x.
NOTES_PROMPT_BUDGET = 12_000

#: Bytes of an attempt's full output kept in TASK-<id>.stdout.log (the tail is kept).
STDOUT_LOG_CAP_BYTES = 10 * 1024 * 1024

#: Attempts a task gets before it goes to failed.
MAX_ATTEMPTS = 3

#: Seconds a claim stays valid without renewal; the runner renews well before this.
LEASE_SECONDS = 600

#: Seconds running attempts get to finish when the scheduler shuts down, before SIGTERM.
SHUTDOWN_GRACE_SECONDS = 30

#: Seconds a runner may take beyond its agent's timeout (worktree, waiting for an earlier
#: attempt to stop, notes) before its hard DEADLINE passes and it is killed as hung.
RUNNER_DEADLINE_GRACE_SECONDS = 300
#: How often a runner asks the store whether a person stopped its attempt (`octopoid stop`):
#: one small record read a second keeps a stop prompt on any machine.
STOP_CHECK_SECONDS = 1.0
#: How long `octopoid stop` waits for the runner to end the attempt before saying it has not.
STOP_WAIT_SECONDS = 60

#: Largest task file octopoid reads; bigger ones are quarantined rather than loaded.
MAX_TASK_FILE_BYTES = 1024 * 1024

#: Characters of an error kept in a task's ERROR header; the rest belongs in logs.
MAX_ERROR_CHARS = 500

#: Characters of a reason kept in one History line.
MAX_HISTORY_REASON_CHARS = 200

#: Seconds between full rescans of incoming/ that catch files dropped in by hand.
INDEX_RECONCILE_SECONDS = 60

#: Seconds a claim waits for writes in flight to record incoming/'s mtime before it rescans
#: anyway (a writer holds the gate for a millisecond; a stopped or hostile holder of the
#: gate file must not stall every claim).
WRITER_GATE_WAIT_SECONDS = 2.0

#: Seconds after which a leftover temp file in a queue folder is a crash's debris.
STALE_TEMP_SECONDS = 3600

#: Candidates read from the claim index per query; a few spare for lost races.
CLAIM_BATCH = 32

#: Seconds a rate-limited or overloaded task waits before it may be claimed again.
RATE_LIMIT_BACKOFF_SECONDS = 300

#: Attempts of one agent in a row failing for one cause no task can fix (its program cannot
#: start, its key is refused, the API is overloaded or unreachable, no box) before the
#: circuit breaker pauses it: one is an accident, two can be a bad minute, three is the agent.
BREAKER_THRESHOLD = 3

#: Seconds the breaker's pause lasts for a cause that passes by itself (an overloaded or
#: unreachable API); the others wait for a person (`octopoid resume --agent`).
BREAKER_RETRY_SECONDS = 3600

#: Breaker pauses an agent's record keeps for `octopoid stats` (about a year's at one a day).
BREAKER_PAUSES_KEPT = 400

#: Tries of a record's read-change-write before giving up: each lost try means another
#: writer succeeded, so many in a row only happen under a storm of writers to one key.
RECORD_UPDATE_TRIES = 200

#: USD per million tokens (input, output) for the anthropic backend's cost, matched by
#: prefix. Only published prices octopoid's authors checked; config.yaml ``prices`` adds or
#: overrides models, and a model priced nowhere has an unknown cost (never a guess).
MODEL_PRICES = {
    "claude-opus-4-1": (15.0, 75.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
}

#: Waits between tries of an attempt's push of its branch to ``git.remote`` (a remote
#: that is down for a few seconds should not strand the work on one machine).
PUSH_BACKOFF_SECONDS = (1.0, 3.0)

#: Seconds a person's accept, reject or close waits for a forge's poll that holds the task
#: (a verdict is a few requests) before saying the task is busy: not sent away for a poll.
FORGE_HOLD_WAIT_SECONDS = 60.0

#: Seconds a PostgreSQL store waits for its pool to reconnect when the server is down
#: (a restart, a failover) before a move fails with a StorageError.
DATABASE_WAIT_SECONDS = 30.0
#: What a runner waits (``OCTOPOID_DATABASE_WAIT_SECONDS``, set by the scheduler), its first
#: connection included: its agent's work and notes should survive an outage of minutes,
#: while an interactive command says at once that the database is down.
RUNNER_DATABASE_WAIT_SECONDS = 300.0

#: Refusals in a row that say the same (a reject, failing checks) before `status` and
#: `doctor` call a task bouncing: at two the loop has come round once without settling it.
BOUNCE_REPEATS = 2

#: What one attempt's read-back may bring, and its clone may use (config.yaml ``sandbox``,
#: sandbox/bounds.py). A task's branch usually brings kilobytes to a few megabytes; these
#: leave room for a vendored dependency or generated data, and stop bombs (a blob of
#: gigabytes of zeros packs into megabytes; a million objects cost memory in every walk).
#: The pack upload-pack sends (compressed): a few hundred MB is already a huge commit.
MAX_PACK_BYTES = 256 * 1024 * 1024
#: New objects in it: a vendored node_modules is tens of thousands; a bomb is millions.
MAX_OBJECTS = 200_000
#: Their size unpacked: what a checkout of them writes (the checks' clone, the merge).
MAX_BRANCH_BYTES = 1024 * 1024 * 1024
#: What the agent may add to its clone's disk use while it runs (builds, caches and
#: dependencies included: a Rust target/ or a node_modules take gigabytes).
MAX_CLONE_BYTES = 10 * 1024 * 1024 * 1024
#: Seconds between measurements of a running attempt's clone (a walk of its files).
CLONE_CHECK_SECONDS = 10.0

#: Bytes past which a file is a binary file to every diff octopoid reads (the review page,
#: `diff`, `diff --stat`): git does not load it. git's diff of a file holds ~40 bytes a
#: line, so 30 MB of empty lines cost it 1.2 GB and half a minute; source files are far
#: smaller than this.
DIFF_TEXT_BYTES = 8 * 1024 * 1024
#: Seconds the review page gives git to count a diff's lines before it says the diff is
#: too big to draw there (`octopoid diff` streams it whatever its size).
DIFF_STAT_SECONDS = 20.0

#: Connections one attempt's network proxy serves at once (``network: allow``): a package
#: manager's parallel downloads fit; beyond it a connection is refused (503), not queued.
PROXY_MAX_CONNECTIONS = 64
#: Bytes one attempt may move through its proxy, both ways together: a large dependency
#: install fits; an attempt that would stream without end is cut off.
PROXY_MAX_BYTES = 8 * 1024**3
#: Seconds a client has to send a request's whole head: a connection held open by a
#: trickle of bytes (slowloris) gives its slot back this soon.
PROXY_HEAD_SECONDS = 10.0
#: Bytes of one request's head (a real one is a few hundred; a longer one is refused).
PROXY_MAX_HEAD_BYTES = 16 * 1024
#: Seconds a tunnel may carry nothing either way before it is closed (a streamed model
#: answer sends pings well within this).
PROXY_IDLE_SECONDS = 600.0
#: Seconds to connect to a destination once it is judged.
PROXY_CONNECT_SECONDS = 15.0

#: Seconds one attempt's set-up (config.yaml ``workspace.setup``, every command together)
#: may take: a cold dependency install of a large project fits; a hung one is stopped and
#: given back as a set-up failure.
SETUP_TIMEOUT_SECONDS = 900
#: Ports each running attempt (and each preview) gets to itself (``OCTOPOID_PORT`` is the
#: first): a dev server, a database and a few test servers fit.
PORTS_PER_ATTEMPT = 10
#: Where those ranges are taken from: below Linux's ephemeral ports (32768-60999), so a
#: reserved range is not taken meanwhile by some program's outgoing connection.
PORTS_LOW, PORTS_HIGH = 20000, 32767
#: Seconds a declared service (``workspace.services``) has to answer its ``ready`` command.
SERVICE_READY_SECONDS = 60
#: Seconds a cached environment may go unused before a newer one's publication removes it.
ENVIRONMENT_UNUSED_SECONDS = 7 * 24 * 3600
#: Seconds a preview may serve nothing before it stops itself (a reviewer who went home).
PREVIEW_IDLE_SECONDS = 1800
#: Seconds `octopoid preview` and the task page wait for a preview to answer (its set-up
#: and its server's start) before they say it is still starting.
PREVIEW_START_SECONDS = 120
#: Seconds between a preview's looks at its task: it stops once the task left review.
PREVIEW_WATCH_SECONDS = 2.0
