"""Retention on real Delta tables (delta-rs, no JVM): rows older than the retention are
dropped, their sums kept in ``rollups``, and every total the API serves is the same
before and after; a write still pending keeps its ack and its reads; a round that died
between its sums and its drop changes no total.
"""

import json
from datetime import UTC, datetime, timedelta

import pyarrow.compute as pc
import pytest
from fastapi.testclient import TestClient

from kafka_audit.auditor_api.main import create_app
from kafka_audit.jobs.upkeep.retention import (
    All,
    Any_,
    Cond,
    cutoffs,
    predicates,
    run_retention,
)
from kafka_audit.settings import Settings
from kafka_audit.store import (
    append_rows,
    applied_round,
    files_added_since,
    latest_version,
    read_table,
    write_arrow,
)
from tests.unit.test_api_summary import ack, finding, stream

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
OLD = NOW - timedelta(days=40)  # past retention.days (30)
ANCIENT = NOW - timedelta(days=400)  # past retention.findings_days (365)
RECENT = NOW - timedelta(days=2)


def at(row: dict, when: datetime, *columns: str) -> dict:
    return {**row, **{c: when for c in columns}}


def warehouse(s: Settings, pending_at: datetime | None = None) -> None:
    """Ledger, stream, findings, states and events, old and recent; pass 3 committed,
    having taken in every row; ``pending_at``: a write acked then is still pending."""
    w = s.table_path
    append_rows(w("acks"), "acks", [
        at(ack("orders", 0, 100, at=ANCIENT), ANCIENT, "send_time", "ack_time", "last_ack_time"),
        at(ack("orders", 100, 50, at=OLD), OLD, "last_ack_time"),
        at(ack("orders", 150, 7, error="_MSG_TIMED_OUT", at=OLD), OLD, "last_ack_time"),
        at(ack("other", 0, 9, run="r2", at=OLD), OLD, "last_ack_time"),
        at(ack("orders", 157, 30, partition=1, at=RECENT), RECENT, "last_ack_time")])
    if pending_at is not None:
        append_rows(w("acks"), "acks", [at(ack("orders", 187, 4, partition=1, at=pending_at),
                                           pending_at, "last_ack_time")])
    append_rows(w("consumed"), "consumed", [
        at(stream("orders", 150), OLD, "read_time"),
        at(stream("orders", 3, stamped=False, error="no kaudit header"), OLD, "read_time"),
        at(stream("orders", 2, stamped=False, error="stamp too short: 3 bytes"), OLD,
           "read_time"),
        at(stream("orders", 1, ok=False), OLD, "read_time"),
        at(stream("orders", 5, run="r-unknown"), OLD, "read_time"),
        at(stream("orders", 30), RECENT, "read_time")])
    if pending_at is not None:
        append_rows(w("consumed"), "consumed", [
            at(stream("orders", 4), pending_at + timedelta(seconds=1), "read_time")])
    append_rows(w("findings"), "findings", [
        at(finding("confirmed", 90, pass_id=1), ANCIENT, "detected_at"),
        at(finding("lost", 10, pass_id=1, offset=90), ANCIENT, "detected_at", "ack_time"),
        at(finding("confirmed", 40, pass_id=2, offset=100), OLD, "detected_at"),
        at(finding("lost_after_seen", 10, pass_id=2, offset=140), OLD, "detected_at",
           "ack_time"),
        at(finding("duplicate", 3, pass_id=2, offset=100), OLD, "detected_at"),
        at(finding("rejected", 7, pass_id=2, offset=150), OLD, "detected_at"),
        at(finding("confirmed", 9, topic="other", pass_id=2), OLD, "detected_at"),
        at(finding("confirmed", 30, pass_id=3, offset=157), RECENT, "detected_at")])
    append_rows(w("partition_state"), "partition_state", [
        {"topic": "orders", "partition": p, "frontier": 150, "settled_frontier": 150,
         "observed_at": when, "pending": 0, "unseen": 0, "oldest_unseen": None,
         "pass_id": pass_id}
        for pass_id, when in ((1, ANCIENT), (2, OLD), (3, OLD)) for p in (0, 1)])
    append_rows(w("cluster_events"), "cluster_events", [
        {"event_time": when, "topic": "orders", "partition": 0, "kind": "leader_change",
         "leader": 2, "previous_leader": 1, "source": "watcher:metadata"}
        for when in (OLD, RECENT)])
    hot = [{"kind": "progress", "topic": "", "partition": -1, "pass_id": 3,
            "progress": json.dumps({"pass_id": 3,
                                    "acks_version": latest_version(w("acks")),
                                    "consumed_version": latest_version(w("consumed"))})}]
    if pending_at is not None:
        hot.append({"kind": "ack", "topic": "orders", "partition": 1, "producer_id": "p",
                    "run_id": "r1", "seq": 187, "count": 4, "offset": 187,
                    "first_ack": pending_at, "last_ack": pending_at, "pass_id": 3})
    append_rows(w("audit_hot"), "audit_hot", hot)


def served(s: Settings, c: TestClient | None = None) -> dict:
    """Every total the API serves, from ``c`` or a new app (nothing held from before)."""
    c = c or TestClient(create_app(s), base_url="http://localhost")
    metrics = [line for line in c.get("/metrics").text.splitlines()
               if line.startswith("kafka_audit_") and "_seconds" not in line
               and "build_info" not in line and "_age" not in line and "_bytes" not in line]
    return {"summary": c.get("/v1/summary").json(),
            "orders": c.get("/v1/summary", params={"topic": "orders"}).json(),
            "topics": c.get("/v1/topics").json(),
            "producers": [{k: v for k, v in p.items() if not k.startswith("latency")}
                          for p in c.get("/v1/producers").json()],
            "metrics": sorted(metrics)}


@pytest.fixture
def s(tmp_path):
    return Settings(home=tmp_path)


def test_aged_rows_go_and_every_total_stays(s):
    warehouse(s)
    before = served(s)
    assert before["summary"]["acked"] == 196 and before["summary"]["pending"] == 0
    running = TestClient(create_app(s), base_url="http://localhost")
    assert served(s, running) == before  # an API holding the tables across the drop
    w = s.table_path
    versions = {t: latest_version(w(t)) for t in ("acks", "consumed", "findings")}
    done = {d.table: d for d in run_retention(s, now=NOW)}
    # the drops append nothing for readers of appended rows (the audit, the quality check),
    # though the one of findings rewrote a file to keep its losses
    for t, v in versions.items():
        assert files_added_since(w(t), v)[1] == [], t
    assert done["findings"].rows == 4
    assert {t: done[t].rows for t in ("acks", "consumed", "findings", "partition_state",
                                      "cluster_events")} == {
        "acks": 4, "consumed": 5, "findings": 4, "partition_state": 4, "cluster_events": 1}
    assert read_table(w("acks"), "acks").column("last_ack_time").to_pylist() == [RECENT]
    kinds = sorted(read_table(w("findings"), "findings", ["kind"]).column("kind").to_pylist())
    # the file it rewrote keeps plain strings: a filtered read of it works (delta-rs's
    # DELETE wrote string_view, which pyarrow cannot compare with a string)
    assert read_table(w("findings"), "findings", ["kind"],
                      where=pc.field("kind") == "rejected").num_rows == 1
    # confirmations past 30 days go, the other verdicts stay their 365 days
    assert kinds == ["confirmed", "duplicate", "lost_after_seen", "rejected"]
    assert sorted(read_table(w("partition_state"), "partition_state", ["pass_id"])
                  .column("pass_id").to_pylist()) == [3, 3]  # the committed pass's state
    rollups = read_table(w("rollups"), "rollups")
    assert sorted(set(rollups.column("table").to_pylist())) == ["acks", "consumed", "findings"]
    assert pc.sum(rollups.filter(pc.field("table") == "acks").column("count")).as_py() == 166
    assert served(s, running) == before
    assert served(s) == before
    # a second round finds nothing more to drop, and the totals still hold
    versions = {t: latest_version(w(t)) for t in ("acks", "consumed", "findings", "rollups")}
    again = {d.table: d.rows for d in run_retention(s, now=NOW)}
    assert not any(again.values())
    assert versions == {t: latest_version(w(t)) for t in versions}  # no empty commit
    assert served(s) == before


def test_a_pending_write_keeps_its_ack_and_its_reads(s):
    pending = OLD + timedelta(hours=1)
    warehouse(s, pending_at=pending)
    before = served(s)
    assert before["summary"]["pending"] == 4
    run_retention(s, now=NOW)
    w = s.table_path
    acks = read_table(w("acks"), "acks", ["seq", "last_ack_time"]).to_pylist()
    # older than the pending write by more than the margin: gone; itself and after: kept
    assert sorted(r["seq"] for r in acks) == [157, 187]
    reads = read_table(w("consumed"), "consumed", ["read_time"]).column("read_time").to_pylist()
    assert pending + timedelta(seconds=1) in reads
    assert served(s) == before


def test_rows_the_audit_has_not_taken_in_are_kept(s):
    warehouse(s)
    w = s.table_path
    append_rows(w("acks"), "acks", [at(ack("late", 0, 5, at=OLD), OLD, "last_ack_time")])
    run_retention(s, now=NOW)
    topics = read_table(w("acks"), "acks", ["topic"]).column("topic").to_pylist()
    assert "late" in topics  # appended after the version the committed pass took in


def test_a_round_that_died_between_its_sums_and_its_drop_changes_no_total(s):
    warehouse(s)
    before = served(s)
    c = cutoffs(s, NOW, None, None)
    where = predicates(c, 3)
    # round 1's sums of acks written, its drop never committed
    from kafka_audit.jobs.upkeep.retention import _drop  # the round's own step

    summed = read_table(s.table_path("acks"), "acks", where=where["acks"][0].arrow())
    from kafka_audit.rollups import rollup

    write_arrow(s.table_path("rollups"), "rollups", rollup("acks", summed, 1, NOW))
    assert applied_round(s.table_path("acks")) == 0
    assert served(s) == before  # round 1's sums are not taken in: acks did not commit it
    d = _drop(s, "acks", *where["acks"], NOW, latest_version(s.table_path("acks")))
    assert (d.round, d.rows) == (1, 4)  # round 1 again: its sums replaced, not added
    assert pc.sum(read_table(s.table_path("rollups"), "rollups").column("rows")).as_py() == 4
    assert served(s) == before


def test_rows_appended_while_a_round_runs_are_kept(s):
    from kafka_audit.store import commit_drop, plan_drop

    warehouse(s)
    path = s.table_path("consumed")
    where, cutoff = predicates(cutoffs(s, NOW, None, None), 3)["consumed"]
    gone: list = []
    plan = plan_drop(path, "consumed", where.arrow(), "read_time", cutoff, gone.append)
    # an old read appended between the round's reading and its commit: another file
    append_rows(path, "consumed", [at(stream("orders", 11), OLD, "read_time")])
    assert commit_drop(plan, 1, {}) == sum(t.num_rows for t in gone) == 5
    counts = read_table(path, "consumed", ["count"]).column("count").to_pylist()
    assert sorted(counts) == [11, 30]


def test_a_round_racing_a_compaction_says_so(s, caplog):
    """Delta's conflict check lets a removal of a file pass that a compaction removed
    meanwhile (its removes change no data): never expected, compaction and retention share
    the upkeep's thread, but said loudly."""
    from kafka_audit.store import commit_drop, compact, plan_drop

    warehouse(s)
    path = s.table_path("consumed")
    append_rows(path, "consumed", [at(stream("orders", 1), RECENT, "read_time")])
    where, cutoff = predicates(cutoffs(s, NOW, None, None), 3)["consumed"]
    plan = plan_drop(path, "consumed", where.arrow(), "read_time", cutoff, lambda _r: None)
    assert compact(path)["numFilesRemoved"] == 2
    with caplog.at_level("ERROR"):
        assert commit_drop(plan, 1, {}) == 5
    assert "raced commit" in caplog.text
    caplog.clear()
    plan = plan_drop(path, "consumed", where.arrow(), "read_time", cutoff, lambda _r: None)
    with caplog.at_level("ERROR"):
        commit_drop(plan, 2, {})
    assert "raced" not in caplog.text


def test_an_append_that_loaded_the_table_before_a_drop_goes_through(s):
    """delta-rs refuses an append whose table was loaded before a commit that removed rows
    (a retention round's): the ledger, the audit and the watcher would each fail a commit
    every round; the table layer tries it again on the new version."""
    from deltalake import CommitProperties, DeltaTable

    from kafka_audit.store import _write, append_arrow_once, commit_drop, plan_drop

    warehouse(s)
    path = s.table_path("consumed")
    stale = DeltaTable(path)  # an appender's view from before the drop
    where, cutoff = predicates(cutoffs(s, NOW, None, None), 3)["consumed"]
    assert commit_drop(plan_drop(path, "consumed", where.arrow(), "read_time", cutoff,
                                 lambda _r: None), 1, {}) == 5
    rows = [at(stream("orders", 7), RECENT, "read_time")]
    from kafka_audit.store import _arrow

    _write(path, "consumed", stale, [_arrow("consumed", rows)], "append", CommitProperties())
    assert append_arrow_once(path, "consumed", _arrow("consumed", rows), "app", 1)
    assert not append_arrow_once(path, "consumed", _arrow("consumed", rows), "app", 1)
    assert sorted(read_table(path, "consumed", ["count"]).column("count").to_pylist()) == [
        7, 7, 30]
    assert DeltaTable(path).version() == stale.version() + 3


def test_one_predicate_both_ways():
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    p = All((Cond("pass_id", "<=", 3), Any_((Cond("detected_at", "<", when),
                                             Cond("kind", "=", "it's")))))
    assert p.sql() == ("(\"pass_id\" <= 3) AND ((\"detected_at\" < "
                       "'2026-01-02T03:04:05.678901Z') OR (\"kind\" = 'it''s'))")
    assert str(p.arrow()).count("pass_id") == 1


def test_retention_off_or_settings_that_contradict(tmp_path):
    with pytest.raises(ValueError, match="findings_days"):
        Settings(home=tmp_path, retention={"days": 30, "findings_days": 7})
    s = Settings(home=tmp_path, retention={"enabled": False})
    from kafka_audit.jobs.upkeep.maintenance import Done, plan

    assert not plan(s, 1, 10_000.0, Done()).retention
    assert plan(Settings(home=tmp_path), 1, 10_000.0, Done()).retention


def test_suspicions_go_with_the_confirmations_their_states_are_read_from(s):
    def suspicion(t):
        return {"topic": "orders", "partition": 0, "producer_id": "p", "run_id": "r",
                "seq": 0, "count": 3, "offset": 0, "ack_time": t, "last_ack_time": t,
                "broker": 1, "basis": "broker", "old_leader": 1, "leader_epoch": 4,
                "end_offset": 0, "new_leader": 2, "new_epoch": 5, "changed_at": t,
                "suspected_at": t}

    path = s.table_path("suspicions")
    append_rows(path, "suspicions", [suspicion(OLD), suspicion(RECENT)])
    done = {d.table: d.rows for d in run_retention(s, now=NOW)}
    assert done["suspicions"] == 1
    assert read_table(path, "suspicions").column("ack_time").to_pylist() == [RECENT]
