"""The table layer's fast paths on local disk and on an object store: what each costs.

The API and the jobs ask the Delta log small questions many times a second (is there a
newer version, which files were appended since a version, when was a version committed)
without loading the table's state (``kafka_audit/store.py``); they go through
``pyarrow.fs`` so that the same code reads a folder and a bucket. This times each on a
table of ``--commits`` appends, on disk and in a bucket of the tests' S3-compatible server
(s3proxy over a local folder, started here): the median of ``--rounds`` calls each.

    .venv/bin/python bench/table_paths.py [--commits 200] [--rounds 50] [--where local s3]

It also times the audit's commit point read (``committed_progress``) and the two ways to read
one generation's state over ``audit_hot`` of 10 generations, the table's snapshot loaded once
as inside a pass; and an idempotent append after another writer's commit, the table loaded
anew or kept from the last append and brought up to date (``store._kept``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _timed(fn, rounds: int) -> float:
    took = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        took.append(time.perf_counter() - t)
    return statistics.median(took)


def _loaded(fn, rounds: int) -> float:
    """:func:`_timed` with each table's snapshot loaded once, as inside an audit pass."""
    from kafka_audit import store

    with store.one_snapshot_each():
        fn()
        return _timed(fn, rounds)


def _generations(settings, n: int, rows: int = 2000) -> None:
    """``n`` generations of ``audit_hot`` as passes append them: ``rows`` state rows and
    the progress row each."""
    import pyarrow as pa

    from kafka_audit import store
    from kafka_audit.schemas.tables import arrow_schema

    for g in range(1, n + 1):
        t = pa.Table.from_pylist(
            [{"kind": "ack", "topic": "t", "partition": r % 6, "offset": r, "pass_id": g}
             for r in range(rows)]
            + [{"kind": "progress", "topic": "", "partition": -1, "pass_id": g, "progress":
                f'{{"pass_id": {g}, "acks_version": 1, "consumed_version": 2}}'}],
            schema=arrow_schema("audit_hot"))
        store.write_arrow(settings.table_path("audit_hot"), "audit_hot", t)


def _appends(path: str, rounds: int, kept: bool, start: int) -> float:
    """An idempotent append each round, in a context of its own as a pass or a ledger commit
    makes one, after another writer's commit (not timed): the table kept from the last
    round and brought up to date, or (``kept`` False) loaded anew, once (before 2026-11-30
    an append loaded it twice: for its transaction, then to write)."""
    from kafka_audit import store
    from tests.support.rows import ledger_row

    idle = store.KEPT_IDLE_SECONDS
    store.KEPT_IDLE_SECONDS = idle if kept else -1.0
    app = f"bench-{'kept' if kept else 'anew'}"
    took = []
    try:
        for n in range(start, start + rounds):
            store.append_once(path, "acks", [ledger_row(n)], "other", n)  # outside: not kept
            t = time.perf_counter()
            with store.one_snapshot_each():
                store.append_once(path, "acks", [ledger_row(n)], app, n)
            took.append(time.perf_counter() - t)
    finally:
        store.KEPT_IDLE_SECONDS = idle
    return statistics.median(took)


def one(where: str, commits: int, rounds: int, port: int) -> dict[str, float]:
    from kafka_audit import store
    from kafka_audit.settings import Settings
    from tests.support.rows import ledger_row

    base = Path(tempfile.mkdtemp(prefix="table-paths-"))
    server = None
    try:
        if where == "s3":
            from kafka_audit.scenarios.object_store import S3Server

            server = S3Server(base / "s3", port, heap_mb=512).start()
            s = Settings(home=base, warehouse=f"{server.bucket('paths')}/w",
                         storage=server.storage())
        else:
            s = Settings(home=base)
        path = s.table_path("acks")
        for v in range(commits):
            store.append_once(path, "acks", [ledger_row(v)], "bench", v)
        last = store.latest_version(path)
        _generations(s, 10)
        hot = s.table_path("audit_hot")
        one, state = pc.field("pass_id") == 10, pc.field("kind") != "progress"
        near, far = max(0, last - 5), max(0, last - 30)
        return {
            "latest_version (from the last checkpoint)": _timed(
                lambda: store.latest_version(path), rounds),
            "latest_version (at least a known one)": _timed(
                lambda: store.latest_version(path, at_least=last), rounds),
            "probe_version (a known one, nothing newer)": _timed(
                lambda: store.probe_version(path, last), rounds),
            "probe_version (30 versions behind)": _timed(
                lambda: store.probe_version(path, far), rounds),
            "files_added_since (5 versions back)": _timed(
                lambda: store.files_added_since(path, near), rounds),
            "files_added_since (30 versions back: an audit pass's acks under load)": _timed(
                lambda: store.files_added_since(path, far), rounds),
            "commit_time (one version)": _timed(lambda: store.commit_time(path, last), rounds),
            "table_exists": _timed(lambda: store.table_exists(path), rounds),
            "committed_progress (audit_hot of 10 generations, loaded)": _loaded(
                lambda: store.committed_progress(s), rounds),
            "one generation's state: delta-rs's dataset (read_table)": _loaded(
                lambda: store.read_table(hot, "audit_hot", where=one & state), rounds),
            "one generation's state: its own files (read_admitting)": _loaded(
                lambda: store.read_admitting(hot, "audit_hot", "pass_id", 10, None, state),
                rounds),
            # last: these append to the table the rows above timed
            "an append behind another writer's: the table loaded anew": _appends(
                path, rounds, False, commits),
            "an append behind another writer's: kept, brought up to date": _appends(
                path, rounds, True, commits + rounds),
        }
    finally:
        if server is not None:
            server.stop(discard=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--where", nargs="+", choices=["local", "s3"], default=["local", "s3"])
    ap.add_argument("--s3-port", type=int, default=28493)
    args = ap.parse_args()
    results = {where: one(where, args.commits, args.rounds, args.s3_port)
               for where in args.where}
    print(f"median of {args.rounds} calls, a table of {args.commits} commits")
    for name in next(iter(results.values())):
        print(f"  {name:46s} " + "  ".join(f"{where} {1000 * r[name]:8.2f} ms"
                                           for where, r in results.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
