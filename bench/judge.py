"""CPU time of one driver-side judgement over a state ``kafka-audit run`` committed.

Reads one generation of ``audit_hot`` (``--pass-id``; default: the newest one in the
table that still holds pending acks), judges it ``--rounds`` times exactly as a pass on
the driver does (:func:`~kafka_audit.jobs.audit.audit_pass.judge_on_driver`, no cluster
events, no log ends, ``now`` two seconds after its newest read) and prints the median
CPU seconds of the process and a digest of the output, so a change to the judge can be
timed against the same input and shown to give the same rows.

Run (any warehouse a run left while it still held pending acks, e.g. one of
bench/latency.py's during its run; ``--save`` keeps the generation as Parquet, which
can be given instead of a warehouse, so before and after a change judge the same rows)::

    .venv/bin/python bench/judge.py var/latency-s10-<id>/warehouse [--pass-id N] [--save g.parquet]
    .venv/bin/python bench/judge.py g.parquet

``--compare`` judges as a pass does (the plain confirmations made in Arrow,
:func:`~kafka_audit.jobs.audit.hot_state.split_confirmed`, and the idle state rows passed
through, :func:`~kafka_audit.jobs.audit.hot_state.split_idle`) and with every row through
the engine, interleaved round by round: both medians and both digests (equal).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from datetime import UTC, timedelta

import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from kafka_audit.jobs.audit.audit_pass import judge_on_driver, widen
from kafka_audit.jobs.audit.hot_state import arrow_step_fn
from kafka_audit.jobs.core.engine import AuditConfig


def generation(warehouse: str, pass_id: int | None):
    if warehouse.endswith(".parquet"):
        t = pq.read_table(warehouse)
        return pc.max(t.column("pass_id")).as_py(), widen(t)
    table = DeltaTable(f"{warehouse}/audit_hot")
    if pass_id is None:
        kinds = table.to_pyarrow_table(columns=["pass_id", "kind"])
        acks = kinds.filter(pc.equal(kinds.column("kind"), "ack"))
        if not acks.num_rows:
            raise SystemExit("no generation of audit_hot holds pending acks: pass --pass-id")
        pass_id = pc.max(acks.column("pass_id")).as_py()
    t = table.to_pyarrow_table(filters=[("pass_id", "=", pass_id)])
    return pass_id, widen(t.filter(pc.not_equal(t.column("kind"), "progress")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("warehouse")
    ap.add_argument("--pass-id", type=int)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--settle", type=float, default=10)
    ap.add_argument("--save", help="write the generation to this Parquet file")
    ap.add_argument("--compare", action="store_true",
                    help="also judge with every row through the engine, interleaved")
    args = ap.parse_args()
    pass_id, rows = generation(args.warehouse, args.pass_id)
    if args.save:
        pq.write_table(rows, args.save)
    newest = pc.max(rows.column("read_time")).as_py()
    if newest is None:
        raise SystemExit(f"generation {pass_id} holds no reads")
    now = newest.astimezone(UTC) + timedelta(seconds=2)
    ways = {"as a pass (Arrow where it can)": True, **({"every row judged": False}
                                                 if args.compare else {})}
    steps = {name: arrow_step_fn({}, now, AuditConfig(args.settle), {}, idle=idle)
             for name, idle in ways.items()}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    outs = {}
    for _ in range(args.rounds):
        for name, step in steps.items():
            c0 = time.process_time()
            outs[name] = judge_on_driver(rows, step)
            cpu[name].append(time.process_time() - c0)
    kinds = rows.group_by("kind").aggregate([("kind", "count")]).to_pylist()
    held = ", ".join(f"{k['kind_count']} {k['kind']}" for k in kinds)
    print(f"generation {pass_id}: {rows.num_rows} rows ({held})")
    for name, out in outs.items():
        print(f"{name}: judge CPU median {statistics.median(cpu[name]):.3f} s over "
              f"{args.rounds} rounds ({', '.join(f'{c:.3f}' for c in cpu[name])}); "
              f"{out.num_rows} rows out, digest {digest(out)}")


def digest(out) -> str:
    """The output rows whatever their order (every column sorted on)."""
    ordered = out.sort_by([(c, "ascending") for c in out.column_names])
    return hashlib.sha1(str(ordered.to_pylist()).encode()).hexdigest()[:12]


if __name__ == "__main__":
    main()
