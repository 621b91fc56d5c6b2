"""Redaction benchmark: stream throughput before/after, and hostile text per shape.

Run by hand:  python scripts/bench_redaction.py [--mb 100] [--runs 5] [--kib 64]

Throughput: ``--mb`` MB of agent-like, code-like and secret-dense text pushed in 64 KiB
chunks through ``Redactor.stream()``, in a child process per run (peak RSS is that run's
alone): the module before the one-pass scan (imported from git, ``BEFORE_SINGLE_PASS``),
then the current one on its anchor path alone and with each installed shape-gate engine
(Hyperscan, RE2), all interleaved, so a busy neighbour slows each alike. The table prints
min/median/max MB/s, the median peak RSS, and each one's median paired ratio to before.

An agent controls what it prints, and every chunk of its output is redacted while the
runner renews its lease. A detector whose regex backtracks (a lazy gap to the end of the
line, tried at every anchor) turns one line of a repeated anchor into seconds of work. For
each anchor word below, ``--kib`` KiB of it repeated on one line is redacted whole, on the
anchor path and through each engine's gate; the table prints the median milliseconds and
the ratio to ordinary agent output of the same size (code, a diff, a traceback). It costs
only the printing agent's own attempt (the redaction runs in its runner), so the bar is: no
line quadratic in its length. Measured 2026-11-24 before the context shapes were bounded:
`mysql ` 8.7 s, `curl ` 9.7 s per 64 KiB. Still quadratic on the anchor path: `eyJ` (each
failed JWT attempt reads to the end of the run); a gate skips it (no JWT without a dot).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.base import shape_gate
from orchestrator.base.redaction import Redactor
from tests.helpers.secrets_corpus import code_like_output, corpus, ordinary_output, redaction_at

CHUNK = 1 << 16
#: A runner's environment: secrets by value (raw, URL password, encoded) are searched too.
ENV = {
    "ANTHROPIC_API_KEY": "sk-ant-api03-" + "Q7x" * 30,
    "OCTOPOID_DATABASE_URL": "postgresql://octopoid:Zq8-pw-4f1e9c@db:5432/octopoid",
    "GITHUB_TOKEN": "ghp_" + "a1B2" * 9,
}
AGENT = "tool_use: edit src/app.py -> ok ✓ 🐙 " + "x" * 60 + "\n"
TEXTS = {  # agent: no anchor; code: an anchor every ~100 bytes; secrets: the 70-shape corpus
    "agent": lambda: AGENT,
    "code": code_like_output,
    "secrets": corpus,
}

HOSTILE = [
    "mysql ", "curl ", "SECRET", "PASSWORD=", '"token": "', "AKIA", "Authorization: ",
    "aws_session_token=", "sshpass -p ", "Bearer ", "-----BEGIN RSA PRIVATE KEY-----",
    "://u:", "xoxb-", "eyJ",
]  # fmt: skip


def median_ms(
    spans: Callable[[bytes, str | None], object], data: bytes, engine: str | None, runs: int
) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        spans(data, engine)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def stream_child(impl: str, text: str, size: int) -> dict[str, float]:
    """One run: ``size`` bytes of ``text`` through a stream of ``impl``'s Redactor; the
    gate's one-off build (detect-secrets' import, the compile) is left out."""
    if impl == "before":
        redactor = redaction_at().Redactor(ENV)
        redactor("warm up AKIA0000000000000000 and detect-secrets' import")
        stream = redactor.stream()
    else:
        redactor, engine = Redactor(ENV), None if impl == "anchors" else impl
        redactor.stream(engine).push(b"warm up AKIA0000000000000000 and the gate's compile")
        stream = redactor.stream(engine)
    unit = TEXTS[text]().encode()
    block = (unit * (CHUNK // len(unit) + 2))[: CHUNK + len(unit)]
    left, offset = size, 0
    start = time.perf_counter()
    while left > 0:  # chunks cut at a different place of the text each time
        chunk = block[offset : offset + min(CHUNK, left)]
        stream.push(chunk)
        left -= len(chunk)
        offset = (offset + CHUNK) % len(unit)
    stream.close()
    elapsed = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"mb_s": size / 1e6 / elapsed, "rss_mib": rss}


def throughput(mb: float, runs: int) -> None:
    """Before and after interleaved, each run a fresh child process."""
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    impls = ["before", "anchors", *shape_gate.installed()]
    for _ in range(runs):
        for text in TEXTS:
            for impl in impls:
                argv = [sys.executable, __file__, "--child", impl, text, str(int(mb * 1e6))]
                out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
                results.setdefault((text, impl), []).append(json.loads(out))
    print(
        f"{'text':8} {'impl':10} {'MB/s min':>9} {'median':>8} {'max':>8} {'RSS MiB':>8}"
        f" {'x before':>9}"
    )
    for (text, impl), rows in results.items():
        speeds = sorted(r["mb_s"] for r in rows)
        rss = statistics.median(r["rss_mib"] for r in rows)
        ratio = statistics.median(
            a["mb_s"] / b["mb_s"] for a, b in zip(rows, results[text, "before"], strict=True)
        )
        print(
            f"{text:8} {impl:10} {speeds[0]:9.1f} {statistics.median(speeds):8.1f}"
            f" {speeds[-1]:8.1f} {rss:8.1f} {ratio:8.2f}x"
        )


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        impl, text, size = sys.argv[2:5]
        print(json.dumps(stream_child(impl, text, int(size))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100, help="MB per throughput run; 0: none")
    parser.add_argument("--kib", type=int, default=64, help="KiB per hostile line; 0: none")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if args.mb:
        throughput(args.mb, args.runs)
    if args.kib:
        hostile(args.kib, args.runs)


def hostile(kib: int, runs: int) -> None:
    """Each anchor repeated on one line against ordinary output of the same size, through
    the anchor path and each installed engine's gate (what a stream runs on its window)."""
    size = kib * 1024
    redactor = Redactor({})
    engines = [None, *shape_gate.installed()]
    for engine in engines:
        redactor.spans(b"warm up AKIA0000000000000000 and the gate's build", engine)
    plain = (ordinary_output() * (size // len(ordinary_output()) + 1))[:size].encode()
    base = {engine: median_ms(redactor.spans, plain, engine, runs) for engine in engines}
    names = [engine or "anchors" for engine in engines]
    print(
        f"{'input (one line, repeated)':34}" + "".join(f" {n + ' ms':>13} {'x':>6}" for n in names)
    )
    rows = [("ordinary agent output", plain)]
    rows += [(repr(word), (word * (size // len(word) + 1))[:size].encode()) for word in HOSTILE]
    for label, data in rows:
        cells = ""
        for engine in engines:
            ms = median_ms(redactor.spans, data, engine, runs)
            cells += f" {ms:13.1f} {ms / base[engine]:6.1f}"
        print(f"{label:34}{cells}")


if __name__ == "__main__":
    main()
