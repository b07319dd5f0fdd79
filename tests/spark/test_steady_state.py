"""Steady state on real Spark and Delta: suspects re-read and judged in the pass that finds
them, and tables compacted between (and during) passes without any write judged twice
or missed.

* A pass that suspects a loss re-reads the range and reports the loss itself, exactly
  as two in-memory passes at the same instant would; the next pass neither judges it
  again nor takes the re-read in twice. One seen before it settles is re-read then and
  decided by the pass at its settling, without a second read.
* Random histories (as in ``test_spark_engine.py``) audited pass by pass while every
  table is compacted (OPTIMIZE) and vacuumed between the appends and between the
  passes, the events read incrementally by one warm state, one pass dying before its
  commit point: the findings equal the per-message reference.
"""

import pytest

from kafka_audit.jobs.audit.audit_pass import Warm, run_audit_pass
from kafka_audit.jobs.audit.hot_state import consumed_row
from kafka_audit.jobs.core.engine import AuditConfig, InMemoryAuditor
from kafka_audit.jobs.core.model import AckRun, ClusterEvent, ReadRun
from kafka_audit.jobs.core.reference import finding_messages, reference_verdicts
from kafka_audit.jobs.upkeep.maintenance import COMPACTED, Plan, Upkeep
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows, committed_progress, footprint, read_table

from ..support.histories import ack, at, leader_change, read
from ..support.random_histories import log_end_fn, seeded_history
from .test_spark_engine import (
    AUDIT,
    PASSES,
    Crash,
    Recorded,
    ack_row,
    event_row,
    findings_as_model,
    rename,
)

HISTORIES = 25


class Log:
    """Lookups over a log as it stands now: a re-read answers from it."""

    def __init__(self, log: dict[int, tuple[str, int]], now):
        self.log, self.now, self.asked = log, now, []

    def policies(self, topics):
        return frozenset(), frozenset()

    def log_ends(self, partitions):
        return {}

    def reread(self, requests):
        if requests:
            self.asked.append(requests)
        t = (self.now - at(0)).total_seconds() + 0.5
        return [read(o, self.log[o][1], producer=self.log[o][0], t=t, source="reread")
                for q in requests for o in range(q.offset, q.end)]


def key(f):
    return (f.kind, f.subkind, f.offset, f.count, f.seq, f.cause)


def _tables(settings: Settings, acks=(), reads=(), events=()) -> None:
    if acks:
        append_rows(settings.table_path("acks"), "acks", [ack_row(a) for a in acks])
    if reads:
        append_rows(settings.table_path("consumed"), "consumed",
                    [consumed_row(r, 0) for r in reads])
    if events:
        append_rows(settings.table_path("cluster_events"), "cluster_events",
                    [event_row(e) for e in events])


def test_a_suspect_is_reread_and_judged_in_the_pass_that_finds_it(spark, tmp_path):
    settings = Settings(home=tmp_path, audit={**AUDIT, "settle_seconds": 5})
    acks = [ack(0, 0, count=2, acks="1")]
    events = [leader_change(0.5)]
    _tables(settings, acks, [read(0, 0)], events)
    lookups = Log({1: ("q", 7)}, at(11))
    assert run_audit_pass(spark, settings, at(2), lookups).findings == {}  # sees the frontier
    # another record at offset 1, read at 1 but committed only now: settled, it is a suspect
    _tables(settings, reads=[read(1, 7, producer="q")])
    first = run_audit_pass(spark, settings, at(11), lookups)
    found = findings_as_model(read_table(settings.table_path("findings"), "findings")
                              .to_pylist())
    # the in-memory engine: a pass at 11, then one at the same instant with the re-read
    mem = InMemoryAuditor(AuditConfig(**{**AUDIT, "settle_seconds": 5}))
    mem.run_pass(at(2), acks, [read(0, 0)], events)
    mem.run_pass(at(11), [], [read(1, 7, producer="q")], [])
    mem.run_pass(at(11), [], [read(1, 7, producer="q", t=11.5, source="reread")], [])
    assert sorted(map(key, found)) == sorted(map(key, mem.findings))
    assert sorted((f.kind, f.offset) for f in found) == [("confirmed", 0), ("lost", 1)]
    assert first.pass_id == 2 and first.findings == {"confirmed": 1, "lost": 1}
    assert [[(q.offset, q.end) for q in asked] for asked in lookups.asked] == [[(1, 2)]]
    # the next pass: nothing judged again, the re-read (kept in consumed) not taken in twice
    second = run_audit_pass(spark, settings, at(20), lookups)
    assert second.findings == {} and second.rereads == 0
    assert len(read_table(settings.table_path("findings"), "findings").to_pylist()) == 2
    rereads = [r for r in read_table(settings.table_path("consumed"), "consumed").to_pylist()
               if r["source"] == "reread"]
    assert [(r["offset"], r["batch_id"]) for r in rereads] == [(1, 2)]
    progress = committed_progress(settings)
    hot = read_table(settings.table_path("audit_hot"), "audit_hot").to_pylist()
    assert [r["offset"] for r in hot if r["pass_id"] == progress.generation
            and r["kind"] == "read" and r["source"] == "reread"] == [1]


def test_a_write_that_looks_lost_before_it_settles_is_read_then_and_judged_at_once(
        spark, tmp_path):
    """The consume job read another record at an acknowledged offset that has not settled
    (an acks=1 fail-over): the pass re-reads it at once and says when it settles; the pass
    then decides it in its first judgement, on the view read early, with no second read."""
    settings = Settings(home=tmp_path, audit={**AUDIT, "settle_seconds": 5})
    acks = [ack(0, 0, count=2, acks="1")]
    reads = [read(0, 0), read(1, 7, producer="q", t=1.5)]
    _tables(settings, acks, reads, [leader_change(0.5)])
    lookups = Log({1: ("q", 7)}, at(2))
    early = run_audit_pass(spark, settings, at(2), lookups)
    assert early.findings == {} and early.suspects_settle == at(6.5)
    assert [[(q.offset, q.end) for q in asked] for asked in lookups.asked] == [[(1, 2)]]
    lookups.now = at(7)
    assert run_audit_pass(spark, settings, at(4), lookups).suspects_settle == at(6.5)
    settled = run_audit_pass(spark, settings, at(7), lookups)
    assert settled.findings == {"confirmed": 1, "lost": 1} and settled.rereads == 0
    assert len(lookups.asked) == 1 and settled.suspects_settle is None
    rows = read_table(settings.table_path("findings"), "findings").to_pylist()
    assert sorted((f.kind, f.offset, f.subkind) for f in findings_as_model(rows)) == [
        ("confirmed", 0, None), ("lost", 1, "overwritten")]
    assert {r["pass_id"] for r in rows} == {3}


def _upkeep(settings: Settings) -> dict:
    return Upkeep(settings).run(Plan(compact=True))


def test_compaction_between_passes_judges_nothing_twice_and_misses_nothing(spark, tmp_path):
    steady = {"compact_min_files": 2}
    settings = Settings(home=tmp_path, audit={**AUDIT, "hot_rewrite_passes": 4}, steady=steady)
    spark_writes = Settings(home=tmp_path, audit={**AUDIT, "hot_rewrite_passes": 4},
                            spark={"driver_rows": 0}, steady=steady)
    histories = {f"h{i}": seeded_history(1000 + i, topics=("t", "c", "u"))
                 for i in range(HISTORIES)}
    rows = sorted(((when, rename(row, name)) for name, (hist, _) in histories.items()
                   for when, row in hist), key=lambda x: x[0])
    lookups = Recorded(frozenset(f"h{i}-c" for i in range(HISTORIES)),
                       frozenset(f"h{i}-u" for i in range(HISTORIES)), log_end_fn(rows))
    warm = Warm()  # one loop's state: cluster events read incrementally across the passes
    fed = 0
    compacted = 0
    for n, now in enumerate(PASSES):
        new = [row for when, row in rows[fed:] if when <= now]
        fed += len(new)
        for half in (new[: len(new) // 2], new[len(new) // 2:]):
            # two appends per table, a compaction between them and after: the pass reads
            # files a compaction already replaced, beside the compaction's own
            append_rows(settings.table_path("acks"), "acks",
                        [ack_row(r) for r in half if isinstance(r, AckRun)])
            append_rows(settings.table_path("consumed"), "consumed",
                        [consumed_row(r, n) for r in half if isinstance(r, ReadRun)])
            append_rows(settings.table_path("cluster_events"), "cluster_events",
                        [event_row(r) for r in half if isinstance(r, ClusterEvent)])
            did = _upkeep(settings)
            compacted += sum("compacted" in what for what, _ in did.values())
        lookups.now = now
        writer = spark_writes if n in (1, 3, 5) else settings
        if n == 3:  # die after the findings are written, before the commit point
            lookups.crash = True
            with pytest.raises(Crash):
                run_audit_pass(spark, writer, now, lookups, warm)
            lookups.crash = False
            _upkeep(settings)  # the dead pass's findings are compacted with the others
        summary = run_audit_pass(spark, writer, now, lookups, warm)
        print(summary.line())

    assert compacted >= 2 * len(COMPACTED)
    for table in ("acks", "consumed", "findings"):
        print(table, footprint(settings.table_path(table)))
    found = findings_as_model(read_table(settings.table_path("findings"), "findings")
                              .to_pylist())
    by_history: dict[str, list] = {}
    for f in found:
        by_history.setdefault(f.topic.split("-")[0], []).append(f)
    cfg_ref = AuditConfig(**AUDIT, compacted_topics=frozenset({"c"}),
                          unknown_policy_topics=frozenset({"u"}))
    verdicts = 0
    for name, (hist, _) in histories.items():
        want = reference_verdicts(hist, PASSES, cfg_ref, log_end_fn(hist))
        got = [(m[0], m[1], m[2], m[3].split("-", 1)[1], *m[4:])
               for m in finding_messages(by_history.get(name, []))]
        assert sorted(got, key=repr) == want, name
        verdicts += len(want)
    assert verdicts > 3 * HISTORIES
    assert committed_progress(settings).pass_id == len(PASSES)
