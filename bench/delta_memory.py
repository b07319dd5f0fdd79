"""The service's kind of delta-rs work in a loop, and this process's anonymous memory.

Copies a run's warehouse (without its two largest tables, ``acks`` and ``consumed``) to a
scratch folder; each round asks six tables for their newest version, reads
``cluster_events`` whole and three columns of ``findings``, and with ``--writes`` appends
1,000 rows to a scratch table (compacted every 20 rounds). Every 10 rounds it trims the
C heap and prints RssAnon, glibc's bytes in use and Arrow's pool. ``deltalake``'s
extension carries its own jemalloc, whose memory neither of the other two counts; set
``_RJEM_MALLOC_CONF`` to try its options:

    .venv/bin/python bench/delta_memory.py var/soak-<id>/warehouse --rounds 150 --writes
    _RJEM_MALLOC_CONF=narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0,background_thread:true \\
        .venv/bin/python bench/delta_memory.py var/soak-<id>/warehouse --rounds 150 --writes
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from kafka_audit.app.memstats import glibc_heap, release_free_memory, rss_parts
from kafka_audit.store import compact, latest_version, read_table

TABLES = ("audit_hot", "findings", "partition_state", "cluster_events", "windows", "dq_results")


def anon_mb() -> int:
    return int(rss_parts().get("anon", -1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("warehouse", type=Path)
    ap.add_argument("--rounds", type=int, default=150)
    ap.add_argument("--writes", action="store_true", help="append to a scratch table too")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="delta-memory-") as tmp:
        home = Path(tmp) / "warehouse"
        shutil.copytree(args.warehouse, home, ignore=shutil.ignore_patterns("acks", "consumed"))
        scratch = str(home / "scratch")
        first = None
        for i in range(args.rounds):
            for name in TABLES:
                latest_version(str(home / name))
            events = read_table(str(home / "cluster_events"), "cluster_events")
            found = read_table(str(home / "findings"), "findings", ["topic", "partition", "kind"])
            del events, found
            if args.writes:
                rows = pa.table({"i": pa.array(range(i * 1000, (i + 1) * 1000))})
                write_deltalake(scratch, rows, mode="append")
                if i % 20 == 19:
                    compact(scratch)
            if i % 10 == 0 or i == args.rounds - 1:
                release_free_memory()
                heap = glibc_heap()
                used = heap[0] >> 20 if heap else -1
                first = anon_mb() if first is None else first
                print(f"round {i}: anon {anon_mb()} MB, malloc in use {used} MB, arrow pool "
                      f"{pa.total_allocated_bytes() >> 20} MB", flush=True)
        print(f"anonymous memory grew {anon_mb() - first:+d} MB from round 0")


if __name__ == "__main__":
    main()
