"""What a table's load costs as its checkpoint names more removed files.

A table appended every second and compacted every 10 minutes removes about a file a
second; its checkpoints name each removed file until ``delta.deletedFileRetentionDuration``
has passed (Delta's default: a week; new tables here: ``store.TOMBSTONE_RETENTION_HOURS``).
For each count N this makes a table whose last checkpoint names N removed files beside
one live one (N files written in one commit, one per value of a partition column, then
replaced by an overwrite: each name carries its partition value, a few bytes more than
the ledger's unpartitioned files), then times
``DeltaTable(path)`` and a read of its rows, the medians of ``--rounds``, and prints the
checkpoint's size:

    .venv/bin/python bench/tombstones.py --removed 3600 86400

(3,600: an hour of the ledger; 86,400: a day.)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa


def table_with_removed(path: str, n: int) -> None:
    from deltalake import DeltaTable, write_deltalake

    keys = pa.array(range(n), pa.int64())  # a file per key: n files in one commit
    write_deltalake(path, pa.table({"k": keys, "v": keys}), partition_by=["k"],
                    configuration={"delta.checkpointInterval": "100"})
    one = pa.array([0], pa.int64())
    write_deltalake(path, pa.table({"k": one, "v": one}), mode="overwrite")
    DeltaTable(path).create_checkpoint()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--removed", type=int, nargs="+", default=[3600, 86400])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    from deltalake import DeltaTable

    for n in args.removed:
        with tempfile.TemporaryDirectory() as d:
            path = str(Path(d) / "t")
            table_with_removed(path, n)
            cp = sorted((Path(path) / "_delta_log").glob("*.checkpoint.parquet"))[-1]
            loads, reads = [], []
            for _ in range(args.rounds):
                t = time.perf_counter()
                dt = DeltaTable(path)
                loads.append(time.perf_counter() - t)
                t = time.perf_counter()
                dt.to_pyarrow_table()
                reads.append(time.perf_counter() - t)
            print(f"{n:>9,} removed files named: checkpoint {cp.stat().st_size / 2**20:.1f} MB, "
                  f"load {statistics.median(loads) * 1000:.1f} ms, load+read "
                  f"{(statistics.median(loads) + statistics.median(reads)) * 1000:.1f} ms "
                  f"(medians of {args.rounds})")


if __name__ == "__main__":
    main()
