"""The summary's running sums (``auditor_api/folds.py``) and the snapshots that keep them.

* Folding a table's rows commit by commit gives what a computation over the whole
  table gives (Hypothesis: any rows, any split into commits, more passes than are kept
  apart), and "as of the committed pass" is exact or says it cannot tell.
* Over real Delta tables: an append reads only its files, a compaction reads nothing
  and changes no answer, a delete reads the table again, and ``as_of`` of a recent
  ledger version is the table delta-rs reads at that version.
"""

from collections import Counter
from datetime import UTC, datetime, timedelta
from functools import reduce

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_audit.auditor_api.deps import KEEP
from kafka_audit.auditor_api.folds import RECENT_PASSES, SUMMARY_FOLDS
from kafka_audit.auditor_api.snapshots import Snapshots
from kafka_audit.schemas.stamp import FORGED, NO_STAMP
from kafka_audit.schemas.tables import arrow_schema
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows, compact, read_table

T = datetime(2026, 1, 1, 12, tzinfo=UTC)
FOLDS = {f.name: f for f in SUMMARY_FOLDS}
TOPICS = st.sampled_from(["a", "b", "c"])


def table(name: str, rows: list[dict]) -> pa.Table:
    schema = arrow_schema(name)
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows],
                                schema=schema)


def fold_commits(fold, name, batches):
    """The fold over ``batches`` appended one commit each (versions 1, 2, ...)."""
    return reduce(lambda s, vb: fold.add(s, table(name, vb[1]), vb[0]),
                  enumerate(batches, 1), fold.empty())


def splits(rows):
    """``rows`` cut into consecutive commits (at least one row each)."""
    return st.lists(st.integers(1, 4), min_size=len(rows), max_size=len(rows)).map(
        lambda cuts: _cut(rows, cuts))


def _cut(rows, cuts):
    out, i = [], 0
    for n in cuts:
        if i >= len(rows):
            break
        out.append(rows[i:i + n])
        i += n
    return out


ACK = st.builds(lambda topic, producer, run, count, ms, failed, acks, part, latency: {
    "topic": topic, "producer_id": producer, "run_id": run, "count": count,
    "partition": -1 if failed else part, "seq": 0, "offset": None if failed else 0,
    "send_time": T + timedelta(milliseconds=ms) - timedelta(microseconds=latency),
    "ack_time": T + timedelta(milliseconds=ms),
    "last_ack_time": T + timedelta(milliseconds=ms + 5), "acks": acks,
    "idempotence": acks == "all", "retries": 2, "max_in_flight": 5,
    "error_name": "_MSG_TIMED_OUT" if failed else None},
    TOPICS, st.sampled_from(["p", "q"]), st.sampled_from(["r1", "r2"]), st.integers(1, 50),
    st.integers(0, 10_000), st.booleans(), st.sampled_from(["1", "all"]), st.integers(0, 2),
    st.one_of(st.integers(0, 3_000_000), st.sampled_from([1000, 2000, 5000])))


@given(st.lists(ACK, min_size=1, max_size=40).flatmap(splits))
@settings(max_examples=60, deadline=None)
def test_ack_sums_equal_the_whole_ledger_at_every_version(batches):
    state = fold_commits(FOLDS["ack_sums"], "acks", batches)
    rows = [r for b in batches for r in b]
    assert state.acked == dict(Counter(_sums(rows, "topic")))
    assert state.by_partition == dict(_sums(rows, lambda r: (r["topic"], r["partition"])))
    assert state.failed == dict(_sums([r for r in rows if r["error_name"]], "topic"))
    ok = [r for r in rows if not r["error_name"]]
    assert state.durability == {
        k: (n, frozenset(r["producer_id"] for r in ok if _setting(r) == k))
        for k, n in _sums(ok, _setting).items()}
    assert state.runs == {(r["producer_id"], r["run_id"]) for r in rows}
    for version in range(1, len(batches) + 1):  # the newest ack as each version held it
        held = [r for b in batches[:version] for r in b]
        for topic in (None, "a", "b", "c"):
            mine = [r["last_ack_time"] for r in held if topic in (None, r["topic"])]
            assert state.newest_ack(version, topic) == (True, max(mine) if mine else None)
    assert state.newest_ack(0, None) == (False, None)  # before the fold began: unknown


@given(st.lists(ACK, min_size=1, max_size=40).flatmap(splits), st.sampled_from([None, "a"]))
@settings(max_examples=60, deadline=None)
def test_producer_sums_give_the_producers_totals_of_the_whole_ledger(batches, topic):
    from kafka_audit.auditor_api.totals import producer_totals, weighted_percentile

    state = fold_commits(FOLDS["producer_sums"], "acks", batches)
    rows = [r for b in batches for r in b if topic in (None, r["topic"])]
    got = producer_totals(state, table("findings", []), topic)
    assert set(got) == {r["producer_id"] for r in rows}
    for pid, p in got.items():
        mine = [r for r in rows if r["producer_id"] == pid]
        ok = [r for r in mine if not r["error_name"]]
        assert (p.acked, p.failed, p.runs, p.topics) == (
            sum(r["count"] for r in mine), sum(r["count"] for r in mine if r["error_name"]),
            len({r["run_id"] for r in mine}), sorted({r["topic"] for r in mine}))
        assert {(d["acks"], d["writes"]) for d in p.settings} == set(
            _sums(ok, "acks").items())
        exact = [(r["ack_time"] - r["send_time"]) / timedelta(milliseconds=1) for r in ok]
        for q, held in ((0.5, p.latency_p50_ms), (0.99, p.latency_p99_ms)):
            want = weighted_percentile(np.array(exact), np.array(
                [r["count"] for r in ok], float), q)
            # three significant digits: within 0.5% (and 1 µs), exact for whole milliseconds
            assert (held is None) == (want is None)
            if want is not None:
                assert abs(held - want) <= 0.005 * want + 0.001, (q, held, want)


def test_latency_buckets_keep_three_digits_and_whole_milliseconds_exactly():
    from kafka_audit.auditor_api.folds import latency_buckets

    got = latency_buckets(np.array([0, 7, 999, 1000, 1234, 12_345, 5_000_000, 999_600, -3]))
    assert got.tolist() == [0, 7, 999, 1000, 1230, 12_300, 5_000_000, 1_000_000, 0]


def _sums(rows, key):
    out = Counter()
    for r in rows:
        out[key(r) if callable(key) else r[key]] += r["count"]
    return out


def _setting(r):
    return (r["topic"], r["acks"], r["idempotence"], r["retries"], r["max_in_flight"])


FINDING = st.builds(lambda topic, kind, count, part, ms: {
    "topic": topic, "kind": kind, "count": count, "finding_id": "f", "partition": part,
    "evidence": "{}", "detected_at": T, "ack_time": T + timedelta(milliseconds=ms)},
    TOPICS, st.sampled_from(["confirmed", "lost", "lost_after_seen", "duplicate"]),
    st.integers(1, 9), st.integers(0, 1), st.integers(0, 5000))


@given(st.lists(st.lists(FINDING, min_size=1, max_size=3), min_size=1,
                max_size=RECENT_PASSES + 30),
       st.integers(0, RECENT_PASSES + 40))
@settings(max_examples=60, deadline=None)
def test_finding_sums_as_of_a_committed_pass_are_exact_or_say_they_cannot_tell(passes,
                                                                             committed):
    batches = [[{**r, "pass_id": p} for r in rows] for p, rows in enumerate(passes, 1)]
    state = fold_commits(FOLDS["finding_sums"], "findings", batches)
    whole = FOLDS["finding_sums"].add(FOLDS["finding_sums"].empty(),
                                      table("findings", [r for b in batches for r in b]), 1)
    want: dict = {}
    for r in (r for b in batches for r in b if r["pass_id"] <= committed):
        key = (r["topic"], r["partition"], r["kind"])
        n, last = want.get(key, (0, None))
        at = r["ack_time"] if r["kind"].startswith("lost") else None
        want[key] = (n + r["count"], max((t for t in (last, at) if t), default=None))
    for s in (state, whole):
        got = s.through(committed)
        if got is None:  # only for a pass older than those kept apart
            assert committed < s.base_pass and len(passes) > RECENT_PASSES
        else:
            assert got == want
    assert state.through(len(passes)) is not None  # the newest pass is always answered


READ = st.builds(lambda topic, kind, count, run: {
    "topic": topic, "count": count, "partition": 0, "offset": 0, "source": "stream",
    "read_time": T, "status": "record",
    "producer_id": "p" if kind in ("ok", "bad") else None,
    "run_id": run if kind in ("ok", "bad") else None,
    "stamped": kind in ("ok", "bad"), "checksum_ok": {"ok": True, "bad": False}.get(kind),
    "stamp_error": {"foreign": NO_STAMP, "malformed": "stamp too short",
                    "forged": FORGED}.get(kind)},
    TOPICS, st.sampled_from(["ok", "bad", "foreign", "malformed", "forged"]), st.integers(1, 9),
    st.sampled_from(["r1", "r2"]))


@given(st.lists(READ, min_size=1, max_size=30).flatmap(splits),
       st.sets(st.sampled_from([("p", "r1"), ("p", "r2")])))
@settings(max_examples=60, deadline=None)
def test_stream_sums_give_the_unjudged_records_by_reason(batches, runs):
    state = fold_commits(FOLDS["stream_sums"], "consumed", batches)
    rows = [r for b in batches for r in b]
    for topic in ("a", "b", "c"):
        mine = [r for r in rows if r["topic"] == topic]

        def total(pred, mine=mine):
            return sum(r["count"] for r in mine if pred(r))
        assert state.unjudged(topic, frozenset(runs)) == {
            "no_stamp": total(lambda r: not r["stamped"] and r["stamp_error"] == NO_STAMP),
            "malformed_stamp": total(lambda r: not r["stamped"]
                                     and r["stamp_error"] not in (NO_STAMP, FORGED)),
            "forged_stamp": total(lambda r: not r["stamped"] and r["stamp_error"] == FORGED),
            "bad_checksum": total(lambda r: r["stamped"] and r["checksum_ok"] is False),
            "unknown_producer": total(lambda r: r["stamped"] and r["checksum_ok"]
                                      and (r["producer_id"], r["run_id"]) not in runs)}
    assert state.topics == state.stream_topics == {r["topic"] for r in rows}


def ack_row(seq, topic="orders", at=T):
    return {"run_id": "r", "producer_id": "p", "seq": seq, "count": 1, "topic": topic,
            "partition": 0, "offset": seq, "send_time": at, "ack_time": at,
            "last_ack_time": at, "error_code": None, "error_name": None, "acks": "1",
            "idempotence": False, "retries": 2, "max_in_flight": 5, "leader_epoch": None}


def test_snapshots_follow_appends_and_compactions_without_reading_the_table(tmp_path):
    s = Settings(home=tmp_path)
    path = s.table_path("acks")
    for i in range(12):
        append_rows(path, "acks", [ack_row(i, at=T + timedelta(seconds=i))])
    snaps = Snapshots(s.table_path, KEEP, SUMMARY_FOLDS)
    assert snaps.fold("ack_sums").acked == {"orders": 12} and snaps.loads == 1
    compact(path)  # rewrites the files: no row changes
    append_rows(path, "acks", [ack_row(12, "payments", T + timedelta(seconds=12))])
    got = snaps.get("acks")
    assert snaps.loads == 1 and snaps.appends == 1  # only the appended file was read
    assert sorted(got.data.column("seq").to_pylist()) == list(range(13))
    assert snaps.fold("ack_sums").acked == {"orders": 12, "payments": 1}
    for v in range(got.marks[0][0], got.version + 1):  # a recent version: a prefix, exact
        held = snaps.as_of("acks", v)
        assert sorted(held.column("seq").to_pylist()) == sorted(
            read_table(path, "acks", version=v).column("seq").to_pylist())
    assert snaps.as_of("acks", 3).num_rows == 4  # older than the snapshot: read (v0 held 1)


def test_a_delete_makes_the_snapshots_read_the_table_again(tmp_path):
    from deltalake import DeltaTable

    s = Settings(home=tmp_path)
    path = s.table_path("acks")
    for i in range(4):
        append_rows(path, "acks", [ack_row(i)])
    snaps = Snapshots(s.table_path, KEEP, SUMMARY_FOLDS)
    assert snaps.fold("ack_sums").acked == {"orders": 4}
    DeltaTable(path).delete("seq >= 2")
    assert snaps.fold("ack_sums").acked == {"orders": 2} and snaps.loads == 2
    assert pc.sum(snaps.get("acks").data.column("count")).as_py() == 2


def test_the_apis_snapshots_fold_the_ledger_without_holding_its_rows(tmp_path):
    """The ledger and the stream grow with every write: the API keeps their sums, not their
    rows (``deps.UNHELD``); a request that needs rows reads them as of the held version."""
    from kafka_audit.auditor_api.deps import new_snapshots

    s = Settings(home=tmp_path)
    path = s.table_path("acks")
    for i in range(6):
        append_rows(path, "acks", [ack_row(i, at=T + timedelta(seconds=i))])
    snaps = new_snapshots(s)
    first = snaps.get("acks")
    assert first.data is None and snaps.loads == 1  # read whole once, a batch at a time
    assert snaps.fold("ack_sums").acked == {"orders": 6}
    assert snaps.fold("ack_sums").newest_ack(first.version, None) == (
        True, T + timedelta(seconds=5))
    compact(path)
    append_rows(path, "acks", [ack_row(6, "payments", T + timedelta(seconds=6))])
    now = snaps.get("acks")
    assert now.data is None and snaps.loads == 1 and snaps.appends == 1
    assert snaps.fold("ack_sums").acked == {"orders": 6, "payments": 1}
    assert snaps.fold("producer_sums").writes == {("p", "orders"): (6, 0),
                                                  ("p", "payments"): (1, 0)}
    orders = pc.field("topic") == "orders"
    for version in (first.version, now.version):  # rows as of a version, read, not kept
        got = snaps.read("acks", version, orders, ["seq", "count"])
        assert got.schema.names == ["seq", "count"]
        assert sorted(got.column("seq").to_pylist()) == sorted(read_table(
            path, "acks", where=orders, version=version).column("seq").to_pylist())
    assert snaps.as_of("acks", first.version).num_rows == 6
    assert snaps.read("acks", -1).num_rows == 0
    assert snaps.get("findings").data is not None  # the findings are held
