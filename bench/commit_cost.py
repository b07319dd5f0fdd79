"""What one ack-ledger commit costs its process, against the live files of ``acks``.

A producer on the default ``producer.ledger_commits: direct`` commits its delivery reports
to ``acks`` once a second (``producer.ledger_flush_seconds``), through the same call as
here (``store.append_arrow_once`` on the table kept between commits). This appends
``--rows`` rows a commit to a fresh ``acks`` table in a temporary folder, ``--commits``
commits in blocks of ``--block``, and prints each block's median CPU time per commit of
this process (every thread: delta-rs's runtime threads do most of the work) against the
table's live files; then compacts the table as the service's upkeep does
(``store.compact``: OPTIMIZE and a checkpoint) and measures one block more.

The service compacts every ``upkeep.compact_every_seconds`` (600 s), so between two rounds
a table written by N producers gains up to 600 x N files.

Run: ``.venv/bin/python bench/commit_cost.py [--commits 300] [--block 50] [--rows 60]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from producer_bench import cpu_seconds

from kafka_audit.schemas.tables import arrow_schema
from kafka_audit.store import append_arrow_once, compact, live_files, one_snapshot_each


def rows(n: int, first_seq: int) -> pa.Table:
    """``n`` runs of a producer's delivery reports, as a shipper's batch."""
    now = datetime.now(UTC)
    return pa.Table.from_pylist([
        {"run_id": "r1", "producer_id": "bench", "seq": first_seq + 1000 * i, "count": 1000,
         "topic": "t", "partition": i % 3, "offset": 1000 * i, "send_time": now,
         "ack_time": now, "last_ack_time": now, "acks": "all", "idempotence": False,
         "retries": 2, "max_in_flight": 5, "broker": 1 + i % 3, "system": "kafka"}
        for i in range(n)], schema=arrow_schema("acks"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=300)
    ap.add_argument("--block", type=int, default=50)
    ap.add_argument("--rows", type=int, default=60)
    args = ap.parse_args()
    path = str(Path(tempfile.mkdtemp(prefix="kafka-audit-commit-")) / "acks")
    version = 0

    def block(label: str) -> None:
        nonlocal version
        cpu, wall = [], []
        for _ in range(args.block):
            batch = rows(args.rows, version * args.rows * 1000)
            c, w = cpu_seconds(), time.perf_counter()
            with one_snapshot_each():
                append_arrow_once(path, "acks", batch, "bench/r1", version,
                                  known=version - 1)
            cpu.append(cpu_seconds() - c)
            wall.append(time.perf_counter() - w)
            version += 1
        files = len(live_files(path))
        print(f"{label:<18} {version:>5} commits, live files {files:>5}   commit: CPU "
              f"{statistics.median(cpu) * 1e3:6.1f} ms (p90 "
              f"{sorted(cpu)[int(0.9 * len(cpu))] * 1e3:6.1f}), wall "
              f"{statistics.median(wall) * 1e3:6.1f} ms", flush=True)

    while version < args.commits:
        block("warm-up" if version == 0 else "")
    c = cpu_seconds()
    compact(path)
    print(f"compacted in {cpu_seconds() - c:.2f} s CPU")
    block("compacted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
