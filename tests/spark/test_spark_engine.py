"""The audit job on real Spark and Delta against the brute-force reference.

Hundreds of random histories (each under its own topics) are written, pass by
pass, into real ``acks``, ``consumed`` and ``cluster_events`` Delta tables;
the Spark audit job runs its incremental passes over them; the findings table,
expanded per message, must equal the per-message reference exactly. One pass
is made to die between its findings write and its commit point, then redone:
nothing may be written twice or missed.
"""

import json
import os
import time

import pytest

from kafka_audit.jobs.audit.audit_pass import run_audit_pass
from kafka_audit.jobs.audit.hot_state import consumed_row
from kafka_audit.jobs.core.engine import AuditConfig
from kafka_audit.jobs.core.model import AckRun, ClusterEvent, Finding, ReadRun
from kafka_audit.jobs.core.reference import finding_messages, reference_verdicts
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows, committed_progress, read_table

from ..support.histories import at
from ..support.random_histories import log_end_fn, seeded_history

# 40 in CI (the README's test command under its 45 minutes); KAFKA_AUDIT_SPARK_HISTORIES=2000
# for a longer run by hand (docs/benchmarks.md)
HISTORIES = int(os.environ.get("KAFKA_AUDIT_SPARK_HISTORIES", "40"))
PASSES = [at(t) for t in (4, 11, 19, 27, 35, 48, 60, 140, 440)]
AUDIT = {"settle_seconds": 5, "lookback_seconds": 3, "unseen_after_seconds": 20,
         "read_retention_seconds": 200}


def rename(row, prefix):
    from dataclasses import replace

    return replace(row, topic=f"{prefix}-{row.topic}")


def ack_row(a: AckRun) -> dict:
    return {"run_id": a.run_id, "producer_id": a.producer_id, "seq": a.seq, "count": a.count,
            "topic": a.topic, "partition": a.partition, "offset": a.offset,
            "send_time": a.first_ack, "ack_time": a.first_ack, "last_ack_time": a.last_ack,
            "error_code": None if a.error is None else -1, "error_name": a.error,
            "acks": a.acks, "idempotence": False, "retries": 2, "max_in_flight": 5,
            "leader_epoch": None}


def event_row(e: ClusterEvent) -> dict:
    return {"event_time": e.event_time, "topic": e.topic, "partition": e.partition,
            "kind": e.kind, "leader": e.leader, "previous_leader": e.previous_leader,
            "isr": list(e.isr or ()), "previous_isr": list(e.previous_isr or ()),
            "replicas": [1, 2, 3], "leader_epoch": None, "source": "test"}


def findings_as_model(rows) -> list[Finding]:
    return [Finding(r["kind"], r["topic"], r["partition"], r["producer_id"], r["run_id"],
                    r["seq"], r["offset"], r["count"], r["subkind"], r["ack_time"], r["cause"],
                    json.loads(r["evidence"])) for r in rows]


class Crash(RuntimeError):
    pass


class Recorded:
    """Cluster lookups answered from the recorded histories (they hold their re-reads)."""

    def __init__(self, compacted, unknown, log_end, crash=False):
        self.compacted, self.unknown, self.log_end, self.crash = compacted, unknown, log_end, crash
        self.now = None

    def policies(self, topics):
        return self.compacted, self.unknown

    def log_ends(self, partitions):
        return {k: e for k in partitions if (e := self.log_end(*k, self.now)) is not None}

    def reread(self, requests):
        if self.crash:
            raise Crash("the audit process dies here")
        return []


def test_spark_audit_equals_the_reference_on_random_histories(spark, tmp_path):
    # the state is appended as a generation each pass and rewritten every 4th (the one that
    # dies, too), so both commit paths are judged against the reference
    settings = Settings(home=tmp_path, audit={**AUDIT, "hot_rewrite_passes": 4})
    # passes 2, 4 (the one that dies, a rewrite) and 6 read their new files and write through
    # Spark, the others through the driver (pyarrow, delta-rs; pass 8 rewrites): both paths
    # are judged
    spark_writes = Settings(home=tmp_path, audit={**AUDIT, "hot_rewrite_passes": 4},
                            spark={"driver_rows": 0})
    histories = {f"h{i}": seeded_history(i, topics=("t", "c", "u")) for i in range(HISTORIES)}
    rows = sorted(((when, rename(row, name)) for name, (hist, _) in histories.items()
                   for when, row in hist), key=lambda x: x[0])
    lookups = Recorded(frozenset(f"h{i}-c" for i in range(HISTORIES)),
                       frozenset(f"h{i}-u" for i in range(HISTORIES)), log_end_fn(rows))
    fed = 0
    for n, now in enumerate(PASSES):
        new = [row for when, row in rows[fed:] if when <= now]
        fed += len(new)
        append_rows(settings.table_path("acks"), "acks",
                    [ack_row(r) for r in new if isinstance(r, AckRun)])
        append_rows(settings.table_path("consumed"), "consumed",
                    [consumed_row(r, n) for r in new if isinstance(r, ReadRun)])
        append_rows(settings.table_path("cluster_events"), "cluster_events",
                    [event_row(r) for r in new if isinstance(r, ClusterEvent)])
        lookups.now = now
        writer = spark_writes if n in (1, 3, 5) else settings
        if n == 3:  # die after the findings are written, before the commit point
            lookups.crash = True
            with pytest.raises(Crash):
                run_audit_pass(spark, writer, now, lookups)
            lookups.crash = False
        t0 = time.monotonic()
        summary = run_audit_pass(spark, writer, now, lookups)
        print(f"{summary.line()} ({time.monotonic() - t0:.1f}s) {summary.seconds}")

    found = findings_as_model(read_table(settings.table_path("findings"), "findings")
                              .to_pylist())
    by_history: dict[str, list[Finding]] = {}
    for f in found:
        by_history.setdefault(f.topic.split("-")[0], []).append(f)
    cfg_ref = AuditConfig(**AUDIT, compacted_topics=frozenset({"c"}),
                          unknown_policy_topics=frozenset({"u"}))
    checked = verdicts = 0
    for name, (hist, _) in histories.items():
        want = reference_verdicts(hist, PASSES, cfg_ref, log_end_fn(hist))
        got = [(m[0], m[1], m[2], m[3].split("-", 1)[1], *m[4:])
               for m in finding_messages(by_history.get(name, []))]
        assert sorted(got, key=repr) == want, name
        checked += 1
        verdicts += len(want)
    assert checked == HISTORIES and verdicts > 3 * HISTORIES
    hot = read_table(settings.table_path("audit_hot"), "audit_hot").to_pylist()
    assert committed_progress(settings).pass_id == len(PASSES) == 9
    # the rewrite at pass 8 dropped the older generations; each progress row is its own
    assert sorted({r["pass_id"] for r in hot}) == [8, 9]
    assert sorted(json.loads(r["progress"])["pass_id"] for r in hot
                  if r["kind"] == "progress") == [8, 9]
    assert all(r["topic"] != "" or r["kind"] == "progress" for r in hot)
