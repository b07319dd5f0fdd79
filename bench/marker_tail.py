"""What the suspicion marker's tail of the ledger costs and saves (``jobs/audit/suspicions.py``,
``_Tail``), over a run's warehouse (a latency run's, say): the ``acks`` table's commits
replayed in order into a growing copy of its log (the data files linked, nothing
rewritten), the tail advanced after each as a round does (``now``: the commit's time):

* **steady:** CPU seconds a round pays to take in the commits since the last one
  (median, p95, max over the rounds) and the runs held at the end;
* **at a change:** for each leader change the run's ``suspicions`` name, the runs a
  newly followed change takes (its partitions' at or above their end offsets, from its
  lookback on), read the way the marker read them before the tail (the table loaded and
  scanned) against taken from the tail held at that commit: CPU and wall seconds of each
  (median, p95, max over the changes), and whether both give the same runs;
* **in the run:** each commit of its ``suspicions`` table, seconds from the change to
  the rows' ``suspected_at`` and to the commit: before dda74c9 ``suspected_at`` was when
  the marker's round began, so the commit minus it is the round's time; since, it is
  when the round decided.

Run::

    .venv/bin/python bench/marker_tail.py var/latency-s10-local-<id> [--every 1]

``--every N``: a round after every N commits (1: each).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.compute as pc

from kafka_audit.jobs.audit.suspicions import _ACK_COLUMNS, _PLACED, Marker, _above, _Tail, _ts
from kafka_audit.latency import nearest_rank
from kafka_audit.settings import Settings
from kafka_audit.store import (
    _commit_actions,
    _data_file,
    commit_time,
    latest_version,
    read_files,
    read_table,
    table_dataset,
)


def _at(path: str, version: int) -> datetime:
    return datetime.fromtimestamp(commit_time(path, version), UTC)


def _spread(xs: list[float]) -> str:
    return (f"median {nearest_rank(xs, 0.5):.4f}  p95 {nearest_rank(xs, 0.95):.4f}  "
            f"max {max(xs):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("home", type=Path, help="a run's home (its warehouse/ beneath)")
    ap.add_argument("--every", type=int, default=1, help="commits between rounds")
    args = ap.parse_args()
    settings = Settings(home=args.home.resolve())
    acks = Path(settings.table_path("acks"))
    keep = Marker(settings).tail.keep  # the window the service's marker holds
    lookback = timedelta(seconds=settings.audit.suspect_lookback_seconds)
    floors: dict[datetime, dict[tuple[str, int], int]] = {}  # change -> its end offsets
    for r in read_table(settings.table_path("suspicions"), "suspicions",
                        ["changed_at", "topic", "partition", "end_offset"]).to_pylist():
        ends = floors.setdefault(r["changed_at"], {})
        key = (r["topic"], r["partition"])
        ends[key] = min(ends.get(key, r["end_offset"]), r["end_offset"])
    changes = sorted(floors)
    versions = range(latest_version(str(acks)) + 1)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "acks"
        (copy / "_delta_log").mkdir(parents=True)
        for f in acks.glob("*.parquet"):
            os.symlink(f, copy / f.name)
        tail = _Tail(str(copy), keep)
        steady: list[float] = []
        old_cpu, old_wall, new_cpu, new_wall, same = [], [], [], [], 0
        pending = list(changes)
        for v in versions:
            log = f"_delta_log/{v:020d}.json"
            if not (acks / log).exists():
                continue  # the log's cleanup removed it: the whole read starts later
            os.symlink(acks / log, copy / log)
            if v % args.every and v != versions[-1]:
                continue
            at = _at(str(acks), v)
            c0 = time.process_time()
            tail.advance(at, None)
            if tail.version is not None and not tail.rebuilt:
                steady.append(time.process_time() - c0)
            while pending and pending[0] <= at:
                change = pending.pop(0)
                where = _PLACED & _above(floors[change]) & (
                    pc.field("last_ack_time") >= _ts(change - lookback))
                c0, w0 = time.process_time(), time.perf_counter()
                _v, data = table_dataset(str(copy))
                whole = data.to_table(columns=_ACK_COLUMNS, filter=where)
                old_cpu.append(time.process_time() - c0)
                old_wall.append(time.perf_counter() - w0)
                c0, w0 = time.process_time(), time.perf_counter()
                held = tail.rows(where)
                new_cpu.append(time.process_time() - c0)
                new_wall.append(time.perf_counter() - w0)
                key = ["topic", "partition", "producer_id", "run_id", "seq"]
                same += whole.sort_by([(k, "ascending") for k in key]).equals(
                    held.sort_by([(k, "ascending") for k in key]))
        held_rows = sum(c[0].num_rows for c in tail.chunks)
    print(f"{acks}: {len(versions)} commits, a round every {args.every}")
    print(f"steady, CPU s a round: {_spread(steady)} over {len(steady)} rounds; "
          f"{held_rows} runs held at the end ({len(tail.chunks)} pieces)")
    if old_cpu:
        print(f"at {len(old_cpu)} changes, the runs a new change takes: read from the table "
              f"CPU {_spread(old_cpu)}, wall {_spread(old_wall)}")
        print(f"  from the tail: CPU {_spread(new_cpu)}, wall {_spread(new_wall)}; "
              f"the same runs at {same} of {len(old_cpu)}")
    print("in the run, each commit of its suspicions: the change, then seconds to the rows' "
          "suspected_at and to the commit")
    table = settings.table_path("suspicions")
    for v in range(latest_version(table) + 1):
        added = [_data_file(table, a["add"]["path"])
                 for a in _commit_actions(table, v) or [] if "add" in a]
        if not added:
            continue
        t = read_files(added, "suspicions", ["changed_at", "suspected_at"])
        changed = pc.min(t.column("changed_at")).as_py()
        marked = pc.min(t.column("suspected_at")).as_py()
        print(f"  {changed:%H:%M:%S.%f}"[:-3] + f"  +{(marked - changed).total_seconds():.1f}"
              f"  +{(_at(table, v) - changed).total_seconds():.1f}")


if __name__ == "__main__":
    main()
