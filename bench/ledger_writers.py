"""How many ack-ledger writers one ``acks`` table holds: N producer hosts committing at once.

Each writer is a process of its own (spawned: delta-rs refuses a forked child) with its
own spool, committing one segment every ``--flush`` seconds through the ledger's commit
path (``SpoolCommitter``: an idempotent Delta append) for ``--seconds``, as a producer
host's ledger does. Afterwards the table's own log says what happened: the commits per
second that landed, and per commit the retries delta-rs needed (``num_retries`` in each
commit's ``operationMetrics``: commits by others it had to rebase over); the writers say
how often a commit failed outright (delta-rs's retries used up: the segment is kept and
flushed again) and how long a commit took. Every spooled row must be in the table once.

``--mode direct`` is that (``producer.ledger_commits: direct``); ``--mode staged`` has the
writers hand their segments over (``store.stage_segment``) while one committer in this
process commits all of them once a second (``jobs/upkeep/staged_acks.py``), as the service
does for ``ledger_commits: staged``. Both report, per segment, the seconds from its spool
to the commit that holds it (from the Delta log: the commit whose transaction for the
writer's app id reaches the segment's version): how late the auditor sees an ack.

``--where local`` (a folder) or ``s3`` (the tests' S3-compatible server, started here on
``--port``). Usage::

    .venv/bin/python bench/ledger_writers.py --writers 20 100 --seconds 60 --where local s3 \
        --mode direct staged
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support.rows

ROWS = 20  # ledger rows (runs) a segment: a busy producer's second


def _writer(warehouse: str, storage: dict, home: str, name: str, start_at: float,
            seconds: float, flush: float, staged: bool) -> dict:
    import pyarrow as pa

    from kafka_audit.producers.ledger import SpoolCommitter
    from kafka_audit.schemas.tables import arrow_schema
    from kafka_audit.settings import Settings
    from tests.support.rows import ledger_row

    s = Settings(home=home, warehouse=warehouse, storage=storage)
    spool = SpoolCommitter(s.table_path("acks"), Path(home) / "spool", f"{name}/run",
                           staged=staged)
    assert spool.lock()
    version, seq, took, spooled_at = spool.first_version(), 0, [], {}
    while time.time() < start_at:
        time.sleep(0.005)
    end = start_at + seconds
    next_at = start_at
    while time.time() < end:
        rows = [{**ledger_row(seq + k), "producer_id": name} for k in range(ROWS)]
        spool.spool(pa.Table.from_pylist(rows, schema=arrow_schema("acks")), version)
        spooled_at[version] = time.time()
        version, seq = version + 1, seq + ROWS
        t0 = time.monotonic()
        spool.commit()
        took.append(time.monotonic() - t0)
        next_at += flush
        time.sleep(max(0.0, next_at - time.time()))
    for _ in range(100):  # what failed is flushed again, as the ledger's next flush does
        if not spool.segments():
            break
        spool.commit()
        time.sleep(0.2)
    return {"spooled": seq, "left": len(spool.segments()), "failures": spool.write_failures,
            "took": took, "app_id": spool.app_id, "spooled_at": spooled_at}


def _commits(path: str) -> list[tuple[dict, dict[str, int]]]:
    """Each commit after version 0: its commitInfo and its apps' transaction versions."""
    from kafka_audit import store

    out = []
    for v in range(1, store.latest_version(path) + 1):
        actions = store._commit_actions(path, v) or []
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        out.append((info, {a["txn"]["appId"]: a["txn"]["version"]
                           for a in actions if "txn" in a}))
    return out


def _visible_after(results: list[dict], commits: list[tuple[dict, dict[str, int]]]
                   ) -> list[float]:
    """Per segment: the seconds from its spool to the first commit whose transaction for
    its app reaches its version."""
    out = []
    for r in results:
        landed = sorted((txns[r["app_id"]], info["timestamp"] / 1000)
                        for info, txns in commits if r["app_id"] in txns)
        for version, at in r["spooled_at"].items():
            when = min((t for v, t in landed if v >= version), default=None)
            if when is not None:
                out.append(when - at)
    return sorted(out)


def _committer(settings, stop: threading.Event, start_at: float):
    from kafka_audit.jobs.upkeep.staged_acks import StagedCommits

    committer = StagedCommits(settings)
    while time.time() < start_at:
        time.sleep(0.01)
    next_at = time.monotonic()
    while not stop.is_set():
        committer.round()
        next_at = max(next_at + 1.0, time.monotonic())
        stop.wait(max(0.0, next_at - time.monotonic()))
    committer.drain(100)  # what is still staged
    return committer


def _round(where: str, writers: int, seconds: float, flush: float, port: int,
           mode: str) -> dict:
    from kafka_audit import store
    from kafka_audit.settings import Settings

    base = Path(tempfile.mkdtemp(prefix="ledger-writers-"))
    server = None
    try:
        if where == "s3":
            from kafka_audit.scenarios.object_store import S3Server

            server = S3Server(base / "s3", port, heap_mb=512).start()
            warehouse, storage = f"{server.bucket('ledger')}/w", server.storage()
        else:
            warehouse, storage = str(base / "warehouse"), {}
        s = Settings(home=base, warehouse=warehouse, storage=storage)
        acks = s.table_path("acks")
        from tests.support.rows import ledger_row

        store.append_rows(acks, "acks", [ledger_row(0)])  # the table exists
        ctx = multiprocessing.get_context("spawn")
        start_at = time.time() + 5 + writers * 1.5  # every child imported and ready (2 cores)
        staged = mode == "staged"
        stop, done = threading.Event(), []
        committer = threading.Thread(
            target=lambda: done.append(_committer(s, stop, start_at))) if staged else None
        if committer is not None:
            committer.start()
        with ctx.Pool(writers) as pool:
            results = pool.starmap(_writer, [
                (warehouse, storage, str(base / f"w{n}"), f"w{n}", start_at, seconds, flush,
                 staged) for n in range(writers)])
        if committer is not None:
            stop.set()
            committer.join()
        commits = _commits(acks)
        infos = [info for info, _ in commits]
        visible = _visible_after(results, commits)
        landed = [i for i in infos if i.get("operation") == "WRITE"]
        in_window = [i for i in landed
                     if start_at * 1000 <= i.get("timestamp", 0) <= (start_at + seconds) * 1000]
        retries = [int(i.get("operationMetrics", {}).get("num_retries", 0)) for i in landed]
        took = sorted(t for r in results for t in r["took"])
        rows = store.read_table(acks, "acks", ["producer_id", "seq"])
        keys = set(zip(rows.column("producer_id").to_pylist(), rows.column("seq").to_pylist(),
                       strict=True))
        spooled = sum(r["spooled"] for r in results)
        return {
            "where": where, "mode": mode, "writers": writers, "seconds": seconds,
            "flush": flush, "commits_per_s": round(len(in_window) / seconds, 1),
            "segments_per_s": round(sum(len(r["spooled_at"]) for r in results) / seconds, 1),
            "wanted_per_s": round(writers / flush, 1),
            "visible_s_p50": round(visible[len(visible) // 2], 2) if visible else None,
            "visible_s_p95": round(visible[int(0.95 * (len(visible) - 1))], 2)
            if visible else None,
            "committer_failures": done[0].failures if done else None,
            "retries_mean": round(statistics.fmean(retries), 2) if retries else 0,
            "retries_p95": sorted(retries)[int(0.95 * (len(retries) - 1))] if retries else 0,
            "retries_max": max(retries, default=0),
            "failed_commits": sum(r["failures"] for r in results),
            # direct: a writer's commit; staged: its hand-over
            "commit_s_p50": round(took[len(took) // 2], 3) if took else None,
            "commit_s_p95": round(took[int(0.95 * (len(took) - 1))], 3) if took else None,
            "segments_left": sum(r["left"] for r in results),
            "rows_exact": rows.num_rows == len(keys) == spooled + 1,
        }
    finally:
        if server is not None:
            server.stop(discard=True)
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, nargs="+", default=[4, 20])
    ap.add_argument("--where", nargs="+", choices=["local", "s3"], default=["local", "s3"])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--flush", type=float, default=1.0, help="seconds between a writer's "
                    "commits (the ledger's flush_seconds)")
    ap.add_argument("--port", type=int, default=24491, help="the S3 server's port")
    ap.add_argument("--mode", nargs="+", choices=["direct", "staged"], default=["direct"])
    args = ap.parse_args()
    for writers in args.writers:
        for where in args.where:
            for mode in args.mode:
                print(json.dumps(_round(where, writers, args.seconds, args.flush, args.port,
                                        mode)), flush=True)


if __name__ == "__main__":
    main()
