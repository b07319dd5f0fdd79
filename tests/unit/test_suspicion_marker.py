"""The suspicion marker over real Delta tables (``jobs/audit/suspicions.py``): the watcher's
``epoch_end`` rows and the ledger's runs in, ``suspicions`` rows out, each write once,
also when the ledger commits late, across a restart, and not after the change is no
longer followed; and what a suspicion became (``settle``)."""

from __future__ import annotations

import json

import pyarrow.compute as pc
from hypothesis import example, given, settings
from hypothesis import strategies as st

import kafka_audit.jobs.audit.suspicions as marker_module
from kafka_audit.jobs.audit.suspicions import Marker
from kafka_audit.schemas.suspicions import (
    BY_BROKER,
    BY_TIME,
    CONFIRMED,
    PARTLY,
    SUSPECTED,
    WITHDRAWN,
    settle,
)
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows, read_table, table_exists

from ..support.histories import at
from ..support.sizes import examples


def _ack(seq, count, offset, t, broker=1, run="r"):
    return {"run_id": run, "producer_id": "p", "seq": seq, "count": count, "topic": "t",
            "partition": 0, "offset": offset, "send_time": at(t), "ack_time": at(t),
            "last_ack_time": at(t), "error_code": None, "error_name": None, "acks": "1",
            "idempotence": False, "retries": 2, "max_in_flight": 5, "leader_epoch": None,
            "broker": broker}


def _lead(t, leader, epoch, kind="leader_change"):
    return {"event_time": at(t), "topic": "t", "partition": 0, "kind": kind,
            "leader": leader, "leader_epoch": epoch, "source": "test"}


def _end(t, old, epoch, end, changed, new, new_epoch):
    return {"event_time": at(t), "topic": "t", "partition": 0, "kind": "epoch_end",
            "previous_leader": old, "leader_epoch": epoch, "log_end": end, "leader": new,
            "source": "test", "detail": json.dumps({
                "answered_epoch": epoch, "new_leader": new, "new_epoch": new_epoch,
                "changed_at": at(changed).isoformat()})}


def _warehouse(tmp_path) -> Settings:
    """Broker 1 leads at epoch 5 from 0 s; 150 writes acknowledged by it at 1-3 s; broker 2
    leads at epoch 6 from 4 s, and its log holds epoch 5 up to offset 120."""
    s = Settings(home=tmp_path)
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        _lead(0, 1, 5, "first_seen"), _lead(4, 2, 6), _end(4.5, 1, 5, 120, 4, 2, 6)])
    append_rows(s.table_path("acks"), "acks", [_ack(0, 100, 0, 1), _ack(100, 50, 100, 3)])
    return s


def _suspected(s: Settings) -> list[tuple]:
    rows = read_table(s.table_path("suspicions"), "suspicions").to_pylist()
    return sorted((r["seq"], r["count"], r["offset"], r["basis"], r["old_leader"],
                   r["leader_epoch"], r["end_offset"], r["new_leader"], r["new_epoch"])
                  for r in rows)


def test_the_old_leaders_writes_above_the_end_are_suspected_once(tmp_path):
    s = _warehouse(tmp_path)
    m = Marker(s)
    assert m.round(at(5)) == 30
    assert _suspected(s) == [(120, 30, 120, BY_BROKER, 1, 5, 120, 2, 6)]
    assert m.round(at(5.5)) == 0  # nothing twice

    # the ledger commits the last reports of the old leader late; the new leader's own
    # writes (at its epoch) are not suspected
    append_rows(s.table_path("acks"), "acks", [_ack(150, 10, 150, 3.9),
                                               _ack(160, 5, 120, 4.2, broker=2)])
    assert m.round(at(6)) == 10
    assert [r[:2] for r in _suspected(s)] == [(120, 30), (150, 10)]

    # the old leader acknowledging after the change (paused past its session): suspected
    # once the watcher had time to record whether it leads again (6 s)
    append_rows(s.table_path("acks"), "acks", [_ack(165, 5, 160, 4.6, run="paused")])
    assert m.round(at(7)) == 0
    assert m.round(at(11)) == 5
    assert [r[:2] for r in _suspected(s)] == [(120, 30), (150, 10), (165, 5)]

    # a restarted marker seeds from the table: it writes nothing again
    assert Marker(s).round(at(12)) == 0
    assert [r[:2] for r in _suspected(s)] == [(120, 30), (150, 10), (165, 5)]

    # a change is followed for audit.suspect_follow_seconds after its answer (4.5 s): a
    # report the ledger takes in later is not suspected; a marker that first reads the
    # change later (one that could not run meanwhile) follows it from then
    append_rows(s.table_path("acks"), "acks", [_ack(170, 3, 165, 3.95, run="late")])
    follow = s.audit.suspect_follow_seconds
    assert m.round(at(4.5 + follow + 1)) == 0
    assert Marker(s).round(at(4.5 + follow + 2)) == 3


def test_a_ledger_that_names_no_broker_is_suspected_by_ack_time(tmp_path):
    s = Settings(home=tmp_path)
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        _lead(0, 1, 5, "first_seen"), _lead(4, 2, 6), _end(4.5, 1, 5, 120, 4, 2, 6)])
    append_rows(s.table_path("acks"), "acks", [
        _ack(0, 150, 0, 3, broker=None), _ack(150, 10, 150, 5, broker=None)])
    assert Marker(s).round(at(6)) == 30  # the run after the change is not in the epoch
    assert [(r[0], r[1], r[3]) for r in _suspected(s)] == [(120, 30, BY_TIME)]


def test_no_answered_change_writes_nothing(tmp_path):
    s = Settings(home=tmp_path)
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        _lead(0, 1, 5, "first_seen"), _lead(4, 2, 6)])
    append_rows(s.table_path("acks"), "acks", [_ack(0, 150, 0, 3)])
    m = Marker(s)
    assert m.round(at(5)) == 0
    assert not table_exists(s.table_path("suspicions"))


def test_the_ledgers_tail_is_held_for_its_window_and_read_whole_for_an_older_change(
        tmp_path):
    """The marker holds the ledger's runs of the last follow + 2 * lookback seconds
    between rounds, no change followed; a change that needs older ones (read late) has
    the table read whole again: its writes are all suspected."""
    s = Settings(home=tmp_path)
    keep = s.audit.suspect_follow_seconds + 2 * s.audit.suspect_lookback_seconds
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        _lead(0, 1, 5, "first_seen")])
    append_rows(s.table_path("acks"), "acks", [_ack(0, 100, 0, 1), _ack(100, 50, 100, 3)])
    m = Marker(s)
    assert m.round(at(5)) == 0
    assert m.tail.rows(pc.scalar(True)).column("seq").to_pylist() == [0, 100]
    append_rows(s.table_path("acks"), "acks", [_ack(150, 10, 120, keep + 2, broker=2)])
    # the new run is taken in; the first read's piece is let go once all of it is older
    assert m.round(at(keep + 2)) == 0
    assert m.tail.rows(pc.scalar(True)).column("seq").to_pylist() == [0, 100, 150]
    assert m.round(at(keep + 4)) == 0
    assert m.tail.rows(pc.scalar(True)).column("seq").to_pylist() == [150]

    # broker 2 took over at 4 s; its answer is written late: the change needs runs
    # acknowledged from 4 s - lookback on, older than the tail holds
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        _lead(4, 2, 6), _end(keep + 5, 1, 5, 120, 4, 2, 6)])
    assert m.round(at(keep + 6)) == 30  # seqs 120..149: the table read whole again
    assert [r[:2] for r in _suspected(s)] == [(120, 30)]


def test_a_suspicion_settles_by_the_verdicts_of_its_writes():
    # seqs 120..149 suspected
    assert settle(120, 30, []).state == SUSPECTED
    assert settle(120, 30, [("lost", 100, 40)]) == settle(120, 30, [("lost", 100, 40)])
    got = settle(120, 30, [("confirmed", 0, 120), ("lost", 120, 30), ("duplicate", 120, 5)])
    assert (got.lost, got.found, got.other, got.pending, got.state) == (30, 0, 0, 0, CONFIRMED)
    got = settle(120, 30, [("confirmed", 100, 60)])
    assert (got.found, got.state) == (30, WITHDRAWN)
    got = settle(120, 30, [("lost", 120, 10), ("confirmed", 130, 20)])
    assert (got.lost, got.found, got.state) == (10, 20, PARTLY)
    got = settle(120, 30, [("lost", 120, 10)])
    assert (got.lost, got.pending, got.state) == (10, 20, SUSPECTED)
    got = settle(120, 30, [("indeterminate", 125, 100), ("lost", 120, 5)])
    assert (got.lost, got.other, got.state) == (5, 25, PARTLY)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["lost", "confirmed", "indeterminate"]),
                          st.integers(1, 6)), max_size=12),
       st.integers(0, 40), st.integers(1, 20), st.booleans())
def test_the_api_settles_from_the_verdicts_a_span_meets_as_from_all(verdicts, lo, n, nested):
    """The API finds a suspicion's verdicts by bisection over its run's (one per write,
    so never overlapping): the same settlement as from every finding of the run the
    committed pass serves (one of a later pass is not)."""
    from kafka_audit.auditor_api.routes.suspicions import _verdicts_by_run

    rows, seq = [], 0
    for kind, count in verdicts:  # a run's verdicts, gaps (pending writes) between some
        rows.append({"topic": "t", "partition": 0, "producer_id": "p", "run_id": "r",
                     "kind": kind, "seq": seq, "count": count})
        seq += count + (count % 2)
    if nested and rows:  # never made (a write has one verdict), yet still found
        rows.append({**rows[0], "seq": rows[0]["seq"], "count": seq + 5, "kind": "lost"})
    judged = [(r["kind"], r["seq"], r["count"]) for r in rows]
    found = _verdicts_by_run({("t", 0, "p", "r"): [
        (r["kind"], r["seq"], r["count"], 1) for r in rows[::-1]] + [("lost", 0, seq, 2)]}, 1)
    assert settle(lo, n, found.overlapping(("t", 0, "p", "r"), lo, lo + n)) == \
        settle(lo, n, judged)


def test_the_api_serves_each_suspicion_with_what_the_read_made_of_it(tmp_path):
    """Over real tables: suspected writes apart from the verdicts in /v1/summary, each
    suspicion's state by the committed findings in /v1/suspicions, the change on the loss
    in /v1/findings, the counters in /metrics."""
    from fastapi.testclient import TestClient

    from kafka_audit.auditor_api.main import create_app

    s = _warehouse(tmp_path)
    assert Marker(s).round(at(5)) == 30  # seqs 120..149
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        _lead(10, 1, 7), _end(10.5, 2, 6, 200, 10, 1, 7)])
    append_rows(s.table_path("acks"), "acks", [_ack(300, 40, 190, 9, broker=2, run="r2")])
    assert Marker(s).round(at(11)) == 30  # r2's seqs 310..339 at offsets 200..229
    client = TestClient(create_app(s), base_url="http://localhost")

    def states():
        got = client.get("/v1/suspicions").json()
        return got["writes"], [(i["run_id"], i["seq"], i["state"], i["lost"], i["found"],
                                i["pending"]) for i in got["items"]]

    assert states() == ({"suspected": 60, "open": 60, "confirmed": 0, "withdrawn": 0},
                        [("r2", 310, SUSPECTED, 0, 0, 30), ("r", 120, SUSPECTED, 0, 0, 30)])

    def finding(kind, seq, count, run="r", pass_id=1):
        return {"finding_id": f"{kind}:t:0:p:{run}:{seq}", "kind": kind, "subkind": None,
                "topic": "t", "partition": 0, "offset": seq, "producer_id": "p",
                "run_id": run, "seq": seq, "count": count, "ack_time": at(3),
                "evidence": "{}", "cause": "acks=1 fail-over" if kind == "lost" else None,
                "detected_at": at(40), "pass_id": pass_id}

    append_rows(s.table_path("findings"), "findings", [
        finding("confirmed", 0, 120), finding("lost", 120, 30), finding("confirmed", 300, 40,
                                                                          "r2"),
        finding("lost", 0, 5, "r2", pass_id=2)])  # a pass not committed: not served
    append_rows(s.table_path("audit_hot"), "audit_hot", [
        {"kind": "progress", "topic": "", "partition": -1, "pass_id": 1,
         "progress": '{"pass_id": 1, "acks_version": 0, "consumed_version": 0}'}])
    writes, items = states()
    assert writes == {"suspected": 60, "open": 0, "confirmed": 30, "withdrawn": 30}
    assert items == [("r2", 310, WITHDRAWN, 0, 30, 0), ("r", 120, CONFIRMED, 30, 0, 0)]
    why = client.get("/v1/suspicions", params={"state": WITHDRAWN}).json()["items"][0]["why"]
    assert "30 found in the log" in why and "end offset it answered, 200" in why
    # pages by cursor: each suspicion once, in order; a cursor keeps to its filters
    first = client.get("/v1/suspicions", params={"limit": 1}).json()
    second = client.get("/v1/suspicions", params={"limit": 1,
                                                  "cursor": first["next_cursor"]}).json()
    assert [(p["items"][0]["run_id"], p["total"]) for p in (first, second)] == [("r2", 2),
                                                                                ("r", 2)]
    assert second["next_cursor"] is None
    for bad in (first["next_cursor"][:-3], "bm90IGEgY3Vyc29y"):
        assert client.get("/v1/suspicions", params={"cursor": bad}).status_code == 422
    other = client.get("/v1/suspicions", params={"state": CONFIRMED,
                                                 "cursor": first["next_cursor"]})
    assert other.status_code == 422 and "other filters" in other.text

    summary = client.get("/v1/summary").json()
    assert summary["suspected"] == writes
    assert summary["verdicts"]["lost"] == 30  # the verdicts are the read's alone
    lost = client.get("/v1/findings", params={"kind": "lost"}).json()["items"]
    assert [(f["seq"], f["suspected_by"]["old_leader"], f["suspected_by"]["new_leader"],
             f["suspected_by"]["leader_epoch"], f["suspected_by"]["end_offset"])
            for f in lost] == [(120, 1, 2, 5, 120)]
    confirmed = client.get("/v1/findings", params={"kind": "confirmed"}).json()["items"]
    assert {f["suspected_by"] for f in confirmed} == {None}
    metrics = client.get("/metrics").text
    assert 'kafka_audit_suspected_writes_total{system="kafka",topic="t"} 60.0' in metrics
    assert 'kafka_audit_withdrawn_suspected_writes_total{system="kafka",topic="t"} 30.0' in metrics
    assert 'kafka_audit_open_suspected_writes{system="kafka",topic="t"} 0.0' in metrics


def test_two_fail_overs_in_a_row_each_name_their_own_change_as_the_window(tmp_path):
    """Broker 1 killed at 8 s (leader 2 named at 10), broker 2 killed at 28 (leader 3 at
    30), broker 1 out of the ISR meanwhile: a write broker 2 acknowledged at 20 fell in the
    reduced-redundancy window the first change opened, yet the second change truncated
    it. Its suspicion names that change, and so does its window."""
    from fastapi.testclient import TestClient

    from kafka_audit.auditor_api.main import create_app

    s = Settings(home=tmp_path)

    def window(kind, start, end, by):
        return {"window_id": f"{kind}:t:0:{at(start).isoformat()}", "kind": kind,
                "topic": "t", "partition": 0, "start": at(start), "end": at(end),
                "opened_by": by, "closed_by": None, "acks": 0, "losses": 0, "detail": None,
                "computed_at": at(100)}

    append_rows(s.table_path("windows"), "windows", [
        window("leader_change", 8, 10, "1 lost"), window("leader_change", 28, 30, "2 lost"),
        window("reduced_redundancy", 8, 60, "1 out of the ISR")])

    def lost(seq, t, run):
        return {"finding_id": f"lost:t:0:p:{run}:{seq}", "kind": "lost", "subkind": None,
                "topic": "t", "partition": 0, "offset": seq, "producer_id": "p",
                "run_id": run, "seq": seq, "count": 5, "ack_time": at(t), "evidence": "{}",
                "cause": "acks=1 fail-over", "detected_at": at(50), "pass_id": 1}

    append_rows(s.table_path("findings"), "findings", [lost(100, 7, "a"), lost(200, 20, "b"),
                                                       lost(300, 21, "c")])
    append_rows(s.table_path("audit_hot"), "audit_hot", [
        {"kind": "progress", "topic": "", "partition": -1, "pass_id": 1,
         "progress": '{"pass_id": 1, "acks_version": 0, "consumed_version": 0}'}])

    def suspicion(seq, t, changed, old, epoch, run):
        return {"topic": "t", "partition": 0, "producer_id": "p", "run_id": run, "seq": seq,
                "count": 5, "offset": seq, "ack_time": at(t), "last_ack_time": at(t),
                "broker": old, "basis": "broker", "old_leader": old, "leader_epoch": epoch,
                "end_offset": seq, "new_leader": old + 1, "new_epoch": epoch + 1,
                "changed_at": at(changed), "suspected_at": at(changed + 1)}

    append_rows(s.table_path("suspicions"), "suspicions", [
        suspicion(100, 7, 10, 1, 4, "a"), suspicion(200, 20, 30, 2, 5, "b")])
    client = TestClient(create_app(s), base_url="http://localhost")
    items = client.get("/v1/findings", params={"kind": "lost"}).json()["items"]
    assert {i["run_id"]: i["window_id"].split(":")[0] for i in items} == {
        "a": "leader_change", "b": "leader_change", "c": "reduced_redundancy"}
    assert {i["run_id"]: i["window_id"] for i in items}["b"] == \
        f"leader_change:t:0:{at(28).isoformat()}"
    named = {w["window_id"]: w["losses_named"] for w in client.get("/v1/windows").json()["items"]}
    assert named == {f"leader_change:t:0:{at(8).isoformat()}": 5,
                     f"leader_change:t:0:{at(28).isoformat()}": 5,
                     f"reduced_redundancy:t:0:{at(8).isoformat()}": 5}


_RUNS = st.sampled_from([("a", 0), ("a", 1), ("b", 0)])  # (run, partition)
_STEPS = st.lists(st.tuples(st.one_of(
    st.tuples(st.just("suspect"), _RUNS, st.integers(0, 20), st.integers(1, 8)),
    st.tuples(st.just("judge"), _RUNS, st.integers(0, 20), st.integers(1, 8),
              st.sampled_from(["lost", "confirmed", "indeterminate", "duplicate"]),
              st.integers(-1, 1)),
    st.tuples(st.just("commit"))), st.booleans()), min_size=1, max_size=12)


def _from_scratch(s: Settings) -> list[tuple]:
    """Each suspicion's state by every verdict of its run the committed pass serves, from
    the tables read whole: apart from the API's derivation."""
    hot = read_table(s.table_path("audit_hot"), "audit_hot").to_pylist()
    committed = max((r["pass_id"] for r in hot if r["kind"] == "progress"), default=0)
    found = [f for f in read_table(s.table_path("findings"), "findings").to_pylist()
             if f["pass_id"] <= committed]
    out = []
    for r in read_table(s.table_path("suspicions"), "suspicions").to_pylist():
        got = settle(r["seq"], r["count"], [
            (f["kind"], f["seq"], f["count"]) for f in found
            if (f["partition"], f["run_id"]) == (r["partition"], r["run_id"])])
        out.append((r["changed_at"], r["partition"], r["run_id"], r["seq"], r["count"],
                    got.state, got.lost, got.found, got.other, got.pending))
    return [o[1:] for o in sorted(out, key=lambda o: o[:4], reverse=True)]


@settings(max_examples=examples(60), deadline=None)
@given(_STEPS)
@example([(("suspect", ("a", 0), 0, 4), True),  # a verdict of a served pass appended
          (("judge", ("a", 0), 0, 4, "lost", -1), True)])
@example([(("suspect", ("a", 0), 0, 4), True),  # served once its pass is committed
          (("judge", ("a", 0), 0, 4, "lost", 0), True), (("commit",), True)])
def test_the_api_settles_from_what_changed_as_from_everything(steps):
    """The API derives the suspicions' states from what its last derivation left and the
    rows appended since (suspicions, verdicts, a committed pass): over real tables, after
    any sequence of appends, the states a derivation from the tables read whole gives, in
    the same order, and the rows a reader new to them serves."""
    import tempfile

    from kafka_audit.auditor_api.deps import TableReader
    from kafka_audit.auditor_api.routes.suspicions import settled_suspicions

    def served(reader):
        return [(r["partition"], r["run_id"], r["seq"], r["count"], r["state"], r["lost"],
                 r["found"], r["other"], r["pending"], r["why"])
                for r in settled_suspicions(reader)]

    with tempfile.TemporaryDirectory() as home:
        s = Settings(home=home)
        kept = TableReader(s)
        committed, n = 0, 0
        judged: dict[tuple, set[int]] = {}
        # the tables exist from the start: a verdict of another run, a committed pass
        for step, derive in [(("judge", ("z", 0), 0, 1, "confirmed", 0), False),
                             (("commit",), False), *steps, (("commit",), True)]:
            if step[0] == "suspect":
                _, (run, part), seq, count = step
                n += 1
                append_rows(s.table_path("suspicions"), "suspicions", [{
                    "topic": "t", "partition": part, "producer_id": "p", "run_id": run,
                    "seq": seq, "count": count, "offset": seq, "ack_time": at(1),
                    "last_ack_time": at(1), "broker": 1, "basis": "broker", "old_leader": 1,
                    "leader_epoch": 4, "end_offset": seq, "new_leader": 2, "new_epoch": 5,
                    "changed_at": at(n), "suspected_at": at(n + 1)}])
            elif step[0] == "judge":  # one verdict a write: only seqs without one yet
                _, (run, part), seq, count, kind, ahead = step
                taken = judged.setdefault((run, part), set())
                span = [q for q in range(seq, seq + count)
                        if q not in taken or kind == "duplicate"]  # an annotation: beside
                span = span[:next((i for i in range(1, len(span))
                                   if span[i] != span[i - 1] + 1), len(span))]
                if span:
                    if kind != "duplicate":
                        taken.update(span)
                    append_rows(s.table_path("findings"), "findings", [{
                        "finding_id": f"{kind}:t:{part}:p:{run}:{span[0]}", "kind": kind,
                        "subkind": None, "topic": "t", "partition": part,
                        "offset": span[0], "producer_id": "p", "run_id": run,
                        "seq": span[0], "count": len(span), "ack_time": at(1),
                        "evidence": "{}", "cause": None, "detected_at": at(40),
                        "pass_id": max(1, committed + ahead + 1)}])
            else:
                committed += 1
                append_rows(s.table_path("audit_hot"), "audit_hot", [{
                    "kind": "progress", "topic": "", "partition": -1, "pass_id": committed,
                    "progress": json.dumps({"pass_id": committed, "acks_version": 0,
                                            "consumed_version": 0})}])
            if derive:  # else the next derivation meets more than one change
                got = served(kept)
                assert [g[:-1] for g in got] == _from_scratch(s)
                assert got == served(TableReader(s))


@settings(max_examples=examples(30), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1),
                          st.lists(st.tuples(st.integers(1, 20), st.booleans()), max_size=2),
                          st.one_of(st.none(), st.integers(0, 30)), st.booleans(),
                          st.booleans()),
                min_size=1, max_size=12))
@example([(0, [(10, False)], None, False, False), (0, [(10, True)], 5, False, False),
          (0, [(5, False)], None, True, False)])
@example([(1, [(10, False)], None, False, False), (0, [], 0, False, True),
          (0, [], None, False, False), (1, [], 5, False, False), (0, [], None, False, False)])
def test_the_marker_marks_from_its_tail_as_from_the_table_read_each_round(tmp_path_factory,
                                                                          steps):
    """Rounds over a ledger and leader changes growing between them: the marker that
    takes its runs from the tail it holds suspects, round by round, what one that reads
    the ledger whole every round suspects (the reference: the table, no state held).
    Each step (10 s), on partition 0 or 1: runs acknowledged (length, by the old
    leader), maybe a change (the old epoch ending that far below the log's end), maybe
    the ledger's commit late by 20 s (a change's writes before its lookback are never
    suspected), maybe the change answered late, after the round two steps on (the other
    partition's change followed first)."""
    home = tmp_path_factory.mktemp("tail")
    # a window of 20 + 2 * 25 s: runs age out of the tail and late changes read it whole
    s = Settings(home=home, audit={"suspect_follow_seconds": 20,
                                   "suspect_lookback_seconds": 25})
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        {**_lead(0, 1, 5, "first_seen"), "partition": p} for p in (0, 1)])
    held, whole = Marker(s), Marker(s)
    whole.path = str(home / "reference")
    loose, marker_module._MAX_LOOSE = marker_module._MAX_LOOSE, 1  # pieces combined often
    try:
        _rounds(s, held, whole, steps)
    finally:
        marker_module._MAX_LOOSE = loose

    def marked(path):
        if not table_exists(path):
            return []
        return sorted((r["partition"], r["seq"], r["count"], r["offset"], r["basis"],
                       r["old_leader"], r["leader_epoch"], r["end_offset"], r["new_leader"],
                       r["new_epoch"]) for r in read_table(path, "suspicions").to_pylist())

    assert marked(s.table_path("suspicions")) == marked(whole.path)


def _rounds(s: Settings, held: Marker, whole: Marker, steps: list) -> None:
    """The steps of the test above, each round of ``held`` against one of ``whole``."""
    state = {p: {"leader": 1, "epoch": 5, "offset": 0, "seq": 0} for p in (0, 1)}
    answers: list[tuple[int, dict]] = []  # (the step after whose round it is answered, row)
    t = 0.0
    for i, (p, runs, cut, late, answer_late) in enumerate(steps):
        t = 10.0 * (i + 1)
        st_ = state[p]
        rows = []
        for n, by_old in runs:
            broker = st_["leader"] if not by_old else (1 if st_["leader"] != 1 else 2)
            rows.append({**_ack(st_["seq"], n, st_["offset"], t - (20 if late else 1),
                                broker=broker, run=f"r{p}"), "partition": p})
            st_["seq"] += n
            st_["offset"] += n
        if rows:
            append_rows(s.table_path("acks"), "acks", rows)
        if cut is not None:
            new = 2 if st_["leader"] == 1 else 1
            end = {**_end(t + 0.5, st_["leader"], st_["epoch"], max(0, st_["offset"] - cut),
                          t, new, st_["epoch"] + 1), "partition": p}
            append_rows(s.table_path("cluster_events"), "cluster_events",
                        [{**_lead(t, new, st_["epoch"] + 1), "partition": p}]
                        + ([] if answer_late else [end]))
            answers += [(i + 2, end)] if answer_late else []
            st_["leader"], st_["epoch"] = new, st_["epoch"] + 1
        whole.tail.version = None  # the reference reads the table whole each round
        assert held.round(at(t + 1)) == whole.round(at(t + 1))
        if due := [a for n, a in answers if n <= i]:
            append_rows(s.table_path("cluster_events"), "cluster_events",
                        [{**a, "event_time": at(t + 2)} for a in due])
            answers = [(n, a) for n, a in answers if n > i]
    if answers:
        append_rows(s.table_path("cluster_events"), "cluster_events",
                    [{**a, "event_time": at(t + 2)} for _, a in answers])
    for later in (8, 30):  # the late runs ripen; every change ends being followed
        whole.tail.version = None
        assert held.round(at(t + later)) == whole.round(at(t + later))
