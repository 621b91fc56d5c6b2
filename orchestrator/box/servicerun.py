"""A box's declared services (config.yaml ``workspace.services``), around its program.

Run in the box on the runner's Python with ``-I -S`` (the standard library only), after
the network's bridge; what it does: docs/workspace.md, "Services". With ``--check`` a
service that is not ready fails the run (exit 3, before the program): set-up's test of the
services; otherwise the program runs anyway and the log says which service failed.

    python -I -S servicerun.py [--check] SPEC_JSON -- PROGRAM [ARG ...]
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

STOP_SECONDS = 5.0
READY_POLL_SECONDS = 0.2
NOT_READY = 3


def start(service, folder):
    log = open(os.path.join(folder, f"{service['name']}.log"), "ab")  # noqa: SIM115
    with log:
        return subprocess.Popen(
            ["sh", "-c", service["command"]],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_ready(service, proc):
    """None once ``ready`` succeeds (or there is none), else why not."""
    if not service.get("ready"):
        return None
    deadline = time.monotonic() + service.get("ready_seconds", 60)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"it exited with status {proc.returncode}"
        try:
            done = subprocess.run(["sh", "-c", service["ready"]], capture_output=True, timeout=10)
        except subprocess.TimeoutExpired:
            done = None
        if done is not None and done.returncode == 0:
            return None
        time.sleep(READY_POLL_SECONDS)
    return f"its ready command did not succeed within {service.get('ready_seconds', 60)}s"


def tail(path, size=2000):
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def stop(procs):
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)  # what it left in its group too
        proc.wait()


def main(argv):
    check = argv[1:2] == ["--check"]
    args = argv[2:] if check else argv[1:]
    if len(args) < 3 or args[1] != "--":
        print("usage: servicerun.py [--check] SPEC_JSON -- PROGRAM [ARG ...]", file=sys.stderr)
        return 2
    services, program = json.loads(args[0]), args[2:]
    folder = os.path.join(os.environ.get("TMPDIR") or "/tmp", "octopoid-services")
    os.makedirs(folder, exist_ok=True)
    procs = []
    stopping = []

    def on_signal(signum, frame):
        stopping.append(signum)
        raise KeyboardInterrupt

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    try:
        for service in services:
            procs.append(start(service, folder))
            why = wait_ready(service, procs[-1])
            if why is not None:
                log = os.path.join(folder, f"{service['name']}.log")
                print(f"[octopoid] service {service['name']} is not ready: {why}; the end of "
                      f"its log ({log}):\n{tail(log)}", file=sys.stderr, flush=True)  # fmt: skip
                if check:
                    return NOT_READY
        program_proc = subprocess.Popen(program)
        try:
            return program_proc.wait()
        except KeyboardInterrupt:
            program_proc.send_signal(stopping[-1] if stopping else signal.SIGTERM)
            return program_proc.wait()
    except KeyboardInterrupt:
        return 128 + (stopping[-1] if stopping else signal.SIGINT)
    except OSError as exc:
        # netbridge.CANNOT_RUN_SAYS and _STATUS: what backends.process reads as cannot-start
        print(f"[octopoid] cannot run {program[0]}: {exc}", file=sys.stderr)
        return 127
    finally:
        stop(procs)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
