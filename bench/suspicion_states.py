"""What ``GET /v1/suspicions`` pays after each audit pass: the suspicions' states derived
again from the committed findings (``auditor_api/routes/suspicions.py``,
``settled_suspicions``), over a run's warehouse (a latency run's, say), the snapshots
loaded once as the API holds them: CPU seconds per derivation (median and range of
rounds) and a digest of the states, so a change is timed on the same rows and shown to
give them. ``--against REV``: the module as it was at git revision ``REV`` too, the rounds
interleaved.

``--replay``: the API as it lives instead: the run's suspicions and findings appended
again to a new warehouse in the order they were made, a pass committed after each pass's
findings, each way deriving the states after every commit from what it held before (the
snapshots read on by appends, as the API's are): CPU seconds a commit (median, p95, max,
sum) and the digest after the last.

Run::

    .venv/bin/python bench/suspicion_states.py var/latency-s10-local-<id> [--rounds 7] \
        [--against REV] [--replay]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kafka_audit.auditor_api.deps import TableReader
from kafka_audit.auditor_api.routes.suspicions import settled_suspicions
from kafka_audit.settings import Settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("home", type=Path, help="a run's home (its warehouse/ beneath)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--against", help="a git revision: its module timed too, interleaved")
    ap.add_argument("--replay", action="store_true",
                    help="replay the tables' commits in order, derived after each")
    args = ap.parse_args()
    if args.replay:
        return replay(args.home.resolve(), args.against)
    reader = TableReader(Settings(home=args.home.resolve()))
    for table in ("findings", "suspicions", "audit_hot"):
        reader.snapshot(table)  # loaded once, as the API holds them
    findings = reader.snapshot("findings").data.num_rows
    ways = {"now": settled_suspicions}
    if args.against:
        ways[args.against] = module_at(args.against,
                                       "auditor_api/routes/suspicions.py").settled_suspicions
    times: dict[str, list[float]] = {k: [] for k in ways}
    digests: dict[str, str] = {}
    for _ in range(args.rounds):
        for name, derive in ways.items():
            reader.snapshots._memo.clear()  # a new findings version: derived anew
            reader.snapshots._kept.clear()  # and from nothing kept
            t0 = time.process_time()
            rows = derive(reader)
            times[name].append(time.process_time() - t0)
            digests[name] = _digest(rows)
    for name, ts in times.items():
        print(f"{name}: {len(rows)} suspicions over {findings} findings: CPU "
              f"{statistics.median(ts):.3f} s a derivation (median of {args.rounds}; "
              f"{min(ts):.3f}-{max(ts):.3f}), states digest {digests[name]}")


def replay(home: Path, against: str | None) -> None:
    """The run's suspicions, findings and passes appended again to a new warehouse in the
    order they were made (each marker round's rows one commit, each pass's findings one,
    then its progress row; by the time each was made), each way deriving the states after
    every commit with its own reader held from the commit before, as the API's is (timed
    apart from loading the new version, which every way pays alike)."""
    import pyarrow.compute as pc

    from kafka_audit.store import append_rows, read_table

    src = Settings(home=home)
    findings = read_table(src.table_path("findings"), "findings")
    suspicions = read_table(src.table_path("suspicions"), "suspicions")
    steps = []
    for p in sorted(set(findings.column("pass_id").to_pylist())):
        rows = findings.filter(pc.field("pass_id") == p)
        steps.append((pc.min(rows.column("detected_at")).as_py(), "findings", rows, p))
    for at in sorted(set(suspicions.column("suspected_at").to_pylist())):
        steps.append((at, "suspicions", suspicions.filter(pc.field("suspected_at") == at),
                      None))
    steps.sort(key=lambda s: (s[0], s[1]))
    ways = {"now": settled_suspicions}
    if against:
        ways[against] = module_at(against, "auditor_api/routes/suspicions.py").settled_suspicions
    with tempfile.TemporaryDirectory() as new_home:
        settings = Settings(home=new_home)
        readers = {name: TableReader(settings) for name in ways}
        times: dict[str, list[float]] = {k: [] for k in ways}
        for _at, table, rows, pass_id in steps:
            append_rows(settings.table_path(table), table, rows.to_pylist())
            if pass_id is not None:
                append_rows(settings.table_path("audit_hot"), "audit_hot", [{
                    "kind": "progress", "topic": "", "partition": -1, "pass_id": pass_id,
                    "progress": json.dumps({"pass_id": pass_id, "acks_version": 0,
                                            "consumed_version": 0})}])
            for name, derive in ways.items():
                for t in ("findings", "suspicions", "audit_hot"):
                    readers[name].snapshot(t)  # the new version loaded: not timed
                t0 = time.process_time()
                derive(readers[name])
                times[name].append(time.process_time() - t0)
        for name, ts in times.items():
            ts.sort()
            last = ways[name](readers[name])
            print(f"{name}: {len(steps)} steps replayed, {len(last)} suspicions at the end: "
                  f"CPU {statistics.median(ts):.4f} s a step (median; p95 "
                  f"{ts[int(0.95 * (len(ts) - 1))]:.4f}, max {ts[-1]:.4f}, sum "
                  f"{sum(ts):.2f}), states digest {_digest(last)}")


def _digest(rows: list[dict]) -> str:
    states = [(r["topic"], r["partition"], r["producer_id"], r["run_id"], r["seq"], r["state"],
               r["lost"], r["found"], r["other"], r["pending"]) for r in rows]
    return hashlib.sha256(json.dumps(states).encode()).hexdigest()[:12]


def module_at(rev: str, path: str):
    """The module at ``path`` (from the repository's root) as it was at git revision
    ``rev``, imported apart."""
    here = Path(__file__).resolve().parent.parent
    text = subprocess.run(["git", "show", f"{rev}:{path}"],
                          cwd=here, check=True, capture_output=True, text=True).stdout
    name = f"{Path(path).stem}_then"
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(text)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module

if __name__ == "__main__":
    main()
