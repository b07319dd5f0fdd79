"""What a soak's own files say beyond its samples: where the pass time and the memory went.

From a run's home (``var/soak-<id>``, left by ``bench/soak.py``):

* each part of the audit pass (the ``[prepare .. judge ..]`` of the service's pass lines
  in ``run.log``), median per ten minutes of the run, with the writes confirmed per pass;
* the memory lines of the service and the API child (``kafka_audit/app/memstats.py``) in a
  window of the run (``--window``; minute 10 to the end): range of each figure, and the
  first and last line's Python object counts;
* the newest ``audit_hot`` generation's rows by kind (the audit's hot state);
* per table held by the API (``acks``, ``consumed``, ``findings``): rows, rows per
  acknowledged write and Arrow bytes per row;
* with ``--stdout`` (what ``bench/soak.py`` printed, with its ``[HH:MM:SS] SIGKILL node N``
  lines), per kill: when partition 0's new leader shows in ``cluster_events``, when the
  consume job first read past the lost offsets, and when the last loss finding of that
  kill was detected, each in seconds after the kill.

Run::

    .venv/bin/python bench/soak_log.py var/soak-<id> [--window 10 25] [--stdout soak.log]

Minutes count from the first pass line of the log.
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow.compute as pc
from soak import slope_per_hour

from kafka_audit.schemas.verdicts import LOSSES
from kafka_audit.store import read_table

PASS = re.compile(r"^(\d\d):(\d\d):(\d\d) .*audit pass \d+ at [0-9:]+: .*?(\d+) confirmed; "
                  r".*; ([0-9.]+)s \[(.*)\]$")
MEMORY = re.compile(r"^(\d\d):(\d\d):(\d\d) .*memory \((?P<proc>\w+)\): rss (?P<rss>\d+) MB"
                    r"(?: \(anon (?P<anon>\d+), file (?P<file>\d+)[^)]*\))?; malloc in use "
                    r"(?P<used>\d+) MB, free held (?P<free>\d+) MB.*arrow pool (?P<arrow>\d+) MB"
                    r".*objects (?P<objects>.*); the last trim gave back (?P<trim>\d+) MB")

#: (label, group of MEMORY) of the memory ranges printed; anon and file only in lines
#: written since the memory line split RSS
MEMORY_PARTS = [("rss", "rss"), ("anon", "anon"), ("file", "file"), ("malloc in use", "used"),
                ("free held", "free"), ("arrow pool", "arrow"), ("trim gave back", "trim")]


def _slope(points: list[tuple[float, float]]) -> str:
    per_hour = slope_per_hour(points)
    return "?" if per_hour is None else f"{per_hour:+.0f}/h"


def _minutes(h: str, m: str, s: str, start: int | None) -> tuple[float, int]:
    t = int(h) * 3600 + int(m) * 60 + int(s)
    start = t if start is None else start
    return ((t - start) % 86400) / 60, start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("home", type=Path)
    ap.add_argument("--window", type=float, nargs=2, default=(10, float("inf")),
                    metavar=("FROM", "TO"), help="minutes of the memory ranges")
    ap.add_argument("--stdout", type=Path, help="bench/soak.py's output: per-kill times")
    args = ap.parse_args()
    log = (args.home / "run.log").read_text(errors="replace").splitlines()
    start = None
    parts: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    memory: dict[str, list[tuple[float, re.Match]]] = defaultdict(list)
    for line in log:
        if m := PASS.search(line):
            minute, start = _minutes(*m.group(1, 2, 3), start)
            bucket = parts[int(minute // 10) * 10]
            bucket["pass"].append(float(m.group(5)))
            bucket["confirmed"].append(float(m.group(4)))
            named = m.group(6).split()
            for name, secs in zip(named[::2], named[1::2], strict=True):
                bucket[name].append(float(secs))
        elif m := MEMORY.search(line):
            minute, start = _minutes(*m.group(1, 2, 3), start)
            memory[m["proc"]].append((minute, m))
    print("audit pass parts, median per ten minutes (s; confirmed: writes per pass)")
    for ten, named in sorted(parts.items()):
        medians = " ".join(f"{k} {statistics.median(v):g}" for k, v in named.items())
        print(f"  {ten:3d}-{ten + 10:<3d} {medians} ({len(named['pass'])} passes)")
    for proc, lines in memory.items():
        lo, hi = args.window
        timed = [(minute, m) for minute, m in lines if lo <= minute <= hi]
        late = [m for _, m in timed]
        if not late:
            continue
        print(f"memory ({proc}), minutes {lo:g}-{hi:g}, MB (slope per hour; each line is "
              f"logged right after the trim): " + ", ".join(
                  f"{label} {min(int(m[g]) for m in late)}-{max(int(m[g]) for m in late)} "
                  f"({_slope([(t, int(m[g])) for t, m in timed])})"
                  for label, g in MEMORY_PARTS if all(m[g] is not None for m in late)))
        print(f"  objects, first line: {lines[0][1]['objects']}")
        print(f"  objects, last line:  {lines[-1][1]['objects']}")
    warehouse = args.home / "warehouse"
    hot = read_table(str(warehouse / "audit_hot"), "audit_hot", ["kind", "pass_id"])
    newest = pc.max(hot["pass_id"]).as_py()
    kinds = pc.value_counts(hot.filter(pc.equal(hot["pass_id"], newest))["kind"]).to_pylist()
    print(f"audit_hot generation {newest}: " + ", ".join(
        f"{k['values']} {k['counts']}" for k in kinds))
    held = {name: read_table(str(warehouse / name), name)
            for name in ("acks", "consumed", "findings")}
    acks = held["acks"]
    acked = pc.sum(acks.filter(pc.is_null(acks["error_code"]))["count"]).as_py() or 0
    for name, t in held.items():
        print(f"{name}: {t.num_rows} rows, {t.num_rows / max(acked, 1):.4f} per acknowledged "
              f"write ({acked}), {t.nbytes / max(t.num_rows, 1):.0f} B a row as Arrow")

    if args.stdout:
        kills(warehouse, held, args.stdout.read_text(errors="replace"))


def kills(warehouse: Path, held: dict, printed: str) -> None:
    """Per kill of partition 0's leader: its election, first read and detection
    (``held``: the ``consumed`` and ``findings`` tables, read once by the caller)."""
    events = read_table(str(warehouse / "cluster_events"), "cluster_events").sort_by(
        "event_time").to_pylist()
    findings = held["findings"].to_pylist()
    consumed = held["consumed"].filter(pc.equal(held["consumed"]["partition"], 0)).to_pylist()
    lost = [f for f in findings if f["kind"] in LOSSES
            and f["partition"] == 0]
    day = (events[0]["event_time"] if events else None)
    times: list[tuple[datetime, int]] = []
    for h, m, sec, node in re.findall(r"^\[(\d\d):(\d\d):(\d\d)\] SIGKILL node (\d+)",
                                      printed, re.M) if day else []:
        at = day.replace(hour=int(h), minute=int(m), second=int(sec), microsecond=0)
        while at < (times[-1][0] if times else day - timedelta(hours=12)):  # past midnight
            at += timedelta(days=1)
        times.append((at, int(node)))
    for i, (at, node) in enumerate(times):
        until = times[i + 1][0] if i + 1 < len(times) else at + timedelta(days=1)
        mine = [f for f in lost if at <= f["detected_at"] < until]
        elected = next((e["event_time"] for e in events if e["event_time"] > at
                        and e["leader"] not in (None, node) and e["partition"] == 0), None)
        line = f"kill at {at:%H:%M:%S} (node {node}): elected " + (
            f"+{(elected - at).total_seconds():.1f}s" if elected else "-")
        if mine:
            low = min(f["offset"] for f in mine)
            read = min((r["read_time"] for r in consumed if r["read_time"] > at
                        and r["source"] == "stream" and r["offset"] + r["count"] > low),
                       default=None)
            detected = max(f["detected_at"] for f in mine)
            line += (f", read +{(read - at).total_seconds():.1f}s" if read else ", read -") + \
                f", {sum(f['count'] for f in mine)} lost, detected " \
                f"+{(detected - at).total_seconds():.1f}s"
        print(line)


if __name__ == "__main__":
    main()
