"""Windows on hand-made timelines, one consistent and one violating case per kind; the
causes of a loss per cause; the windows job over real Delta tables."""

import json
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from kafka_audit.jobs.core.model import ClusterEvent, Finding
from kafka_audit.jobs.core.rules import likely_cause
from kafka_audit.jobs.core.windows import (
    exposure_windows,
    partition_windows,
    reduced_redundancy_windows,
    rejection_windows,
    split_brain_windows,
)
from kafka_audit.schemas.windows import Window, loss_window, window_of
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows, read_table

from ..support.histories import ack, at


def isr(t: float, members: tuple[int, ...], leader: int = 1, kind: str = "isr_shrink",
        replicas=(1, 2, 3)) -> ClusterEvent:
    return ClusterEvent(at(t), "t", 0, kind, leader, leader, members, None, replicas)


def change(t: float, leader: int, previous: int, previous_isr: tuple[int, ...],
           isr_now: tuple[int, ...], kind: str = "leader_change") -> ClusterEvent:
    return ClusterEvent(at(t), "t", 0, kind, leader, previous, isr_now, previous_isr)


def spans(windows):
    return [(w.kind, (w.start - at(0)).total_seconds(),
             None if w.end is None else (w.end - at(0)).total_seconds()) for w in windows]


def test_exposure_while_the_isr_is_below_min_isr_or_the_leader_alone():
    events = [isr(0, (1, 2, 3), kind="first_seen"), isr(10, (1, 2)), isr(20, (1,)),
              isr(30, (1, 2), kind="isr_expand"), isr(40, (1, 2, 3), kind="isr_expand")]
    assert spans(exposure_windows(events, 2, "t", 0)) == [("exposure", 20, 30)]
    assert spans(exposure_windows(events, 3, "t", 0)) == [("exposure", 10, 40)]
    assert spans(exposure_windows(events, None, "t", 0)) == [("exposure", 20, 30)]
    # still exposed at the end: the window is open
    assert spans(exposure_windows(events[:3], 2, "t", 0)) == [("exposure", 20, None)]
    # an unreplicated partition is never exposed
    alone = [isr(0, (1,), kind="first_seen", replicas=(1,))]
    assert exposure_windows(alone, 1, "t", 0) == []


def test_observations_at_one_instant_show_the_worst():
    events = [isr(5, (1,)), isr(5, (1, 2, 3), kind="isr_expand"), isr(9, (1, 2, 3))]
    assert spans(exposure_windows(events, 2, "t", 0)) == [("exposure", 5, 9)]
    assert spans(exposure_windows(list(reversed(events)), 2, "t", 0)) == [("exposure", 5, 9)]


def test_reduced_redundancy_while_a_replica_is_out_of_the_isr():
    events = [isr(0, (1, 2, 3), kind="first_seen"), isr(10, (1, 3)),
              isr(25, (1, 2, 3), kind="isr_expand")]
    assert spans(reduced_redundancy_windows(events, "t", 0)) == [
        ("reduced_redundancy", 10, 25)]
    assert exposure_windows(events, 2, "t", 0) == []  # two of three in sync: no exposure


def test_rejections_close_together_are_one_window():
    refused = [ack(None, 0, count=5, t=10, error="NOT_ENOUGH_REPLICAS"),
               ack(None, 5, count=5, t=12, t_last=13, error="NOT_ENOUGH_REPLICAS"),
               ack(None, 10, count=2, t=30, error="NOT_ENOUGH_REPLICAS_AFTER_APPEND"),
               ack(None, 12, count=2, t=31, error="_MSG_TIMED_OUT")]  # not a refusal
    ws = rejection_windows(refused, "t", 0)
    assert spans(ws) == [("rejection", 10, 13), ("rejection", 30, 30)]
    assert [w.detail["refused"] for w in ws] == [10, 2]


def lost(offset: int, seq: int, t: float, count: int = 1, cause=None) -> Finding:
    return Finding("lost", "t", 0, "p", "r", seq, offset, count, "overwritten", at(t), cause)


def sits(offset: int, seq: int, t: float, count: int = 1) -> Finding:
    return Finding("confirmed", "t", 0, "q", "r", seq, offset, count, None, at(t))


def test_split_brain_when_a_lost_write_was_acked_after_the_one_there_now():
    # the new leader acknowledged offsets 100-109 from 20 on; the old one, cut off, kept
    # acknowledging writes at the same offsets until 35: two leaders at once
    now_there = [sits(100, 0, t=20, count=10)]
    losses = [lost(100, 50, t=18), lost(101, 51, t=24), lost(109, 59, t=35)]
    ws = split_brain_windows(losses, now_there, "t", 0)
    assert spans(ws) == [("split_brain", 20, 35)]
    assert "offset 100" in ws[0].opened_by and ws[0].detail["writes_lost_in_it"] == 2
    # a plain fail-over (or a hand-over's truncated tail): every lost write acknowledged
    # before the writes there now
    assert split_brain_windows(losses[:1], now_there, "t", 0) == []
    # lost writes at other offsets pair with nothing
    assert split_brain_windows([lost(300, 51, t=24)], now_there, "t", 0) == []


def test_a_loss_falls_in_the_most_telling_window_and_windows_count_acks_and_losses():
    events = [isr(0, (1, 2, 3), kind="first_seen"), isr(10, (1,)),
              change(20, leader=2, previous=1, previous_isr=(1,), isr_now=(2,))]
    losses = [lost(5, 5, t=15, count=3)]
    acks = [ack(0, 0, count=10, t=12), ack(10, 10, count=4, t=30)]
    ws = partition_windows("t", 0, events, 2, acks, losses)
    exposure = [w for w in ws if w.kind == "exposure"][0]
    assert (exposure.acks, exposure.losses) == (14, 3)  # open: every later ack is inside
    assert window_of(ws, at(15)).kind == "exposure"
    assert window_of(ws, at(5)) is None


def test_a_loss_acknowledged_in_no_window_falls_in_the_one_that_destroyed_it():
    def w(kind, start, end=None):
        return Window(kind, "t", 0, at(start), None if end is None else at(end), "x")

    rejection, crash, later = w("rejection", 12, 14), w("exposure", 20, 22), w("exposure", 50)
    reduced = w("reduced_redundancy", 20, 30)
    ws = [rejection, reduced, crash, later]
    assert loss_window(ws, at(13)) == rejection  # its ack fell in one: that one
    # acknowledged while all was well: the first cluster window after it, the most
    # telling kind at one start; a rejection window is the producer's, never the cause
    assert loss_window(ws, at(10), detected=at(40)) == crash
    assert loss_window(ws, at(10), detected=at(15)) is None  # found before any opened
    assert loss_window(ws, at(31), detected=at(60)) == later
    assert loss_window(ws, at(31), detected=at(45)) is None
    assert loss_window(ws, None) is None


def test_each_cause_from_its_evidence():
    def cause(a, events):
        return likely_cause(a, events, at(100))

    acks_all = ack(0, 0, acks="all", t=10)
    # simultaneous crash: every replica down (offline), the ISR had three, back clean
    offline = change(20, leader=-1, previous=1, previous_isr=(1, 2, 3), isr_now=(1,),
                     kind="offline")
    back = change(40, leader=1, previous=-1, previous_isr=(1,), isr_now=(1, 2, 3))
    assert cause(acks_all, [offline, back]) == "simultaneous crash"
    # disk loss: a replica came back empty (the log end went back to 0) and leads
    empty = ClusterEvent(at(45), "t", 0, "log_end_drop", 1, None, (1,), None, log_end=0)
    assert cause(acks_all, [offline, back, empty]) == "disk loss"
    shorter = ClusterEvent(at(45), "t", 0, "log_end_drop", 1, None, (1,), None, log_end=900)
    assert cause(acks_all, [offline, back, shorter]) == "simultaneous crash"
    # the ones before, unchanged
    assert cause(ack(0, 0, acks="1", t=10), [offline]) == "acks=1 fail-over"
    assert cause(acks_all, [change(20, 3, 1, (1, 2), (3,))]) == "unclean election"
    assert cause(acks_all, [change(20, 2, 1, (1,), (2,))]) == \
        "ISR shrunk to leader then leader lost"


def _event(sec, isr_, kind="isr_shrink"):
    return {"event_time": at(sec), "topic": "t", "partition": 0, "kind": kind, "leader": 1,
            "isr": list(isr_), "replicas": [1, 2, 3], "source": "test"}


def _shrunk_warehouse(tmp_path) -> Settings:
    """min.insync.replicas=2; the ISR shrinks to the leader at 10 s; 7 writes acked at 12 s."""
    s = Settings(home=tmp_path)
    t0 = at(0)
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        _event(0, (1, 2, 3), "first_seen"), _event(10, (1,)),
        {"event_time": t0, "topic": "t", "partition": -1, "kind": "topic_config",
         "detail": '{"min.insync.replicas": "2"}', "source": "test"}])
    append_rows(s.table_path("acks"), "acks", [
        {"run_id": "r", "producer_id": "p", "seq": 0, "count": 7, "topic": "t",
         "partition": 0, "offset": 0, "send_time": t0 + timedelta(seconds=12),
         "ack_time": t0 + timedelta(seconds=12), "last_ack_time": t0 + timedelta(seconds=12),
         "error_code": None, "error_name": None, "acks": "1", "idempotence": False,
         "retries": 2, "max_in_flight": 5, "leader_epoch": None}])
    return s


def test_the_windows_job_rewrites_the_table_only_when_windows_change(tmp_path):
    from kafka_audit.jobs.upkeep.windows_job import update_windows

    s = _shrunk_warehouse(tmp_path)
    ws = update_windows(s, now=at(60))
    assert [(w.kind, w.acks) for w in ws] == [("exposure", 7), ("reduced_redundancy", 7)]
    version = _version(s)
    update_windows(s, now=at(61))  # nothing changed: nothing written
    assert _version(s) == version
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        _event(30, (1, 2, 3), "isr_expand")])
    ws = update_windows(s, now=at(62))
    assert [(w.kind, w.end) for w in ws] == [("exposure", at(30)),
                                             ("reduced_redundancy", at(30))]
    assert _version(s) == version + 1
    rows = read_table(s.table_path("windows"), "windows").to_pylist()
    assert sorted((r["kind"], r["end"]) for r in rows) == [("exposure", at(30)),
                                                           ("reduced_redundancy", at(30))]


def test_a_run_with_no_fault_computes_an_empty_windows_table(tmp_path):
    """No window is a result: the table is created empty, and the API says computed."""
    from fastapi.testclient import TestClient

    from kafka_audit.auditor_api.main import create_app
    from kafka_audit.jobs.upkeep.windows_job import update_windows

    s = Settings(home=tmp_path)
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        _event(0, (1, 2, 3), "first_seen")])
    c = TestClient(create_app(s), base_url="http://localhost")
    assert c.get("/v1/windows").json() == {"computed": False, "items": []}
    assert update_windows(s, now=at(60)) == []
    assert read_table(s.table_path("windows"), "windows").num_rows == 0
    version = _version(s)
    update_windows(s, now=at(61))  # still none: nothing written
    assert _version(s) == version
    c = TestClient(create_app(s), base_url="http://localhost")
    assert c.get("/v1/windows").json() == {"computed": True, "items": []}


def test_the_audit_loops_upkeep_computes_windows_when_their_sources_change(tmp_path):
    from kafka_audit.jobs.upkeep.maintenance import Plan, Upkeep

    s = _shrunk_warehouse(tmp_path)
    upkeep = Upkeep(s, clock=lambda: 100.0)
    assert upkeep.run(Plan(windows=True))["windows"][0] == "2 windows"
    assert upkeep.done.windows == 100.0
    rows = read_table(s.table_path("windows"), "windows").to_pylist()
    assert sorted((r["kind"], r["end"]) for r in rows) == [("exposure", None),
                                                           ("reduced_redundancy", None)]
    version = _version(s)
    assert upkeep.run(Plan(windows=True))["windows"][0] == "unchanged"
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        _event(30, (1, 2, 3), "isr_expand")])
    # the windows closed at 30 s, which is more than retention.days ago: left out
    assert upkeep.run(Plan(windows=True))["windows"][0] == "0 windows"
    assert read_table(s.table_path("windows"), "windows").num_rows == 0
    kept = Upkeep(s.model_copy(update={"retention": s.retention.model_copy(
        update={"enabled": False})}), clock=lambda: 100.0)
    assert kept.run(Plan(windows=True))["windows"][0] == "2 windows"
    assert _version(s) == version + 2
    rows = read_table(s.table_path("windows"), "windows").to_pylist()
    assert sorted((r["kind"], r["end"]) for r in rows) == [("exposure", at(30)),
                                                           ("reduced_redundancy", at(30))]


def _version(s) -> int:
    from deltalake import DeltaTable

    return DeltaTable(s.table_path("windows")).version()


def test_kafka_audit_windows_computes_and_prints_them(tmp_path, monkeypatch, capsys):
    from kafka_audit.app import cli
    from kafka_audit.settings import get_settings

    _shrunk_warehouse(tmp_path)
    monkeypatch.setenv("KAFKA_AUDIT_HOME", str(tmp_path))
    get_settings.cache_clear()
    try:
        assert cli.main(["windows"]) == 0
    finally:
        get_settings.cache_clear()
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "2 windows in the windows table"
    assert out[0].startswith("exposure t/0 2026-01-01 00:00:10 .. open: opened by isr_shrink")
    assert out[0].endswith("7 acks, 0 lost") and out[1].startswith("reduced_redundancy t/0")
    assert len(read_table(Settings(home=tmp_path).table_path("windows"), "windows")) == 2


def test_the_pass_gives_every_partition_the_brokers_fencing(tmp_path):
    """The audit pass's event log over a real ``cluster_events`` table: a broker row is
    cluster-wide, in every partition's evidence (one it has never seen too), read once."""
    from kafka_audit.jobs.audit.audit_pass import EventLog

    s = Settings(home=tmp_path)
    path = s.table_path("cluster_events")

    def broker(t, kind, detail):
        return {"event_time": at(t), "topic": "", "partition": -1, "kind": kind,
                "detail": detail, "source": "test"}

    append_rows(path, "cluster_events", [
        _event(0, (1, 2, 3), "first_seen"), broker(5, "broker_fenced", '{"broker": 2}'),
        broker(6, "broker_fenced", "not json")])
    log = EventLog()
    events = log.refresh(s)
    fenced = [(e.broker, e.event_time) for e in events[("t", 0)] if e.kind == "broker_fenced"]
    assert fenced == [(2, at(5)), (None, at(6))]  # a row without a broker still counts
    assert [e.broker for e in events.get(("u", 9))] == [2, None]
    append_rows(path, "cluster_events", [broker(7, "broker_unfenced", '{"broker": 2}')])
    events = log.refresh(s)
    assert [(e.kind, e.broker) for e in events[("t", 0)] if e.topic == ""] == [
        ("broker_fenced", 2), ("broker_fenced", None), ("broker_unfenced", 2)]


def test_a_leader_change_is_a_window_and_holds_a_clean_hand_overs_loss():
    """A clean preferred-replica hand-over (the ISR full throughout) opens no exposure or
    reduced redundancy; the acks=1 write it truncated falls in its leader_change window."""
    from kafka_audit.jobs.core.windows import leader_change_windows

    full = (0, 1, 2)

    def view(t, leader, kind="isr_change", isr_=full):
        return ClusterEvent(at(t), "t", 0, kind, leader, None, isr_, None, full)

    events = [view(0, 0, "first_seen"), view(10, 0), view(20, 1),  # hand-over 0 -> 1
              view(30, -1, "offline", (1,)), view(35, -1, isr_=(1,)), view(40, 1),
              view(50, 1, "leader_reelected"), view(60, 1)]
    assert spans(leader_change_windows(events, "t", 0)) == [
        ("leader_change", 20, 20), ("leader_change", 30, 40), ("leader_change", 50, 50)]
    assert leader_change_windows(events[:5], "t", 0)[-1].end is None  # offline: lasts
    # broker 0 is a broker like any other: a steady leader 0 opens nothing
    assert leader_change_windows(events[:2], "t", 0) == []
    ws = partition_windows("t", 0, events[:3], 1, [], [])
    assert [w.kind for w in ws] == ["leader_change"]  # nothing else saw the hand-over
    assert loss_window(ws, at(15), detected=at(45)).start == at(20)


def _acks_at(s: Settings, *seconds: float, count: int = 5) -> None:
    append_rows(s.table_path("acks"), "acks", [
        {"run_id": "r", "producer_id": "p", "seq": int(sec * 100), "count": count,
         "topic": "t", "partition": 0, "offset": int(sec * 100),
         "send_time": at(sec), "ack_time": at(sec), "last_ack_time": at(sec),
         "error_code": None, "error_name": None, "acks": "1", "idempotence": False,
         "retries": 2, "max_in_flight": 5, "leader_epoch": None} for sec in seconds])


def test_window_counts_are_kept_until_the_ledger_gains_acks_from_before_their_end(
        tmp_path, monkeypatch):
    """Closed windows are not counted again on every computation (the scans grew with the
    windows); a file of acks from before a window's end (a late ledger, a compaction) has
    it counted again, so the kept counts always equal a fresh computation's."""
    from kafka_audit.jobs.upkeep import windows_job
    from kafka_audit.jobs.upkeep.windows_job import WindowInputs, compute_windows

    s = _shrunk_warehouse(tmp_path)  # 7 writes acked at 12 s, the ISR shrunk at 10 s
    append_rows(s.table_path("cluster_events"), "cluster_events", [
        _event(30, (1, 2, 3), "isr_expand"), _event(40, (1,))])  # closed; open from 40 s
    asked: list[list[tuple]] = []
    scan = windows_job._acked_inside

    def spy(settings, windows, now):
        asked.append([(w.kind, w.start, w.end) for w in windows])
        return scan(settings, windows, now)

    monkeypatch.setattr(windows_job, "_acked_inside", spy)
    counts = WindowInputs(s)

    def both(now):
        kept = sorted((w.kind, w.start, w.acks) for w in compute_windows(s, now, counts))
        fresh = sorted((w.kind, w.start, w.acks) for w in compute_windows(s, now))
        assert kept == fresh
        return kept

    assert both(at(60)) == [("exposure", at(10), 7), ("exposure", at(40), 0),
                            ("reduced_redundancy", at(10), 7),
                            ("reduced_redundancy", at(40), 0)]
    _acks_at(s, 45)  # new acks after the closed windows: only the open ones are counted
    asked.clear()
    assert [n for *_, n in both(at(61))] == [7, 5, 7, 5]
    assert {end for _, _, end in asked[0]} == {None}
    _acks_at(s, 20, count=3)  # shipped late, acked inside the closed windows
    assert [n for *_, n in both(at(62))] == [10, 5, 10, 5]


def _split_brain_by_every_pair(losses, confirmed):
    """The window's first and last ack and its lost-write count by the definition: every
    (confirmed, lost) pair at shared offsets with the lost write acked later."""
    pairs = [(c, f) for f in losses for c in confirmed
             if f.offset < c.offset + c.count and c.offset < f.offset + f.count
             and f.ack_time > c.ack_time]
    if not pairs:
        return None
    return (min(c.ack_time for c, _ in pairs), max(f.ack_time for _, f in pairs),
            sum(f.count for f in {id(f): f for _, f in pairs}.values()))


_finding = st.tuples(st.integers(0, 30), st.integers(1, 6), st.integers(0, 40))


@given(st.lists(_finding, max_size=10), st.lists(_finding, max_size=10))
def test_split_brain_windows_equal_the_pairwise_definition(lost_at, there):
    """Found through an offset index rather than every pair (which grew square with the
    losses of a long run), the window is the definition's."""
    losses = [lost(o, i, t=t, count=n) for i, (o, n, t) in enumerate(lost_at)]
    now_there = [sits(o, i, t=t, count=n) for i, (o, n, t) in enumerate(there)]
    ws = split_brain_windows(losses, now_there, "t", 0)
    want = _split_brain_by_every_pair(losses, now_there)
    got = (ws[0].start, ws[0].end, ws[0].detail["writes_lost_in_it"]) if ws else None
    assert got == want


def _finding_row(kind: str, offset: int, t: float, pass_id: int, count: int = 1) -> dict:
    producer = "p" if kind == "lost" else "q"
    return {"finding_id": f"{kind}:{offset}:{pass_id}", "kind": kind,
            "subkind": "overwritten" if kind == "lost" else None, "topic": "t",
            "partition": 0, "offset": offset, "producer_id": producer, "run_id": "r",
            "seq": offset, "count": count, "ack_time": at(t), "evidence": "{}",
            "cause": None, "detected_at": at(t + 30), "pass_id": pass_id}


def _commit_pass(s: Settings, pass_id: int) -> None:
    append_rows(s.table_path("audit_hot"), "audit_hot", [
        {"kind": "progress", "topic": "", "partition": -1, "pass_id": pass_id,
         "progress": json.dumps({"pass_id": pass_id})}])


def test_windows_from_kept_inputs_equal_a_fresh_computation_as_findings_arrive(tmp_path):
    """The refusals, losses and confirmed findings at lost offsets are read incrementally
    between computations: each computation still equals one from the tables alone, as
    passes commit losses, uncommitted passes stay out, and the writes at lost offsets are
    confirmed later than their losses."""
    from kafka_audit.jobs.upkeep.windows_job import WindowInputs, compute_windows

    s = _shrunk_warehouse(tmp_path)
    kept = WindowInputs(s)

    def both() -> list[tuple]:
        mine = sorted((w.kind, w.start, w.end, w.losses) for w in compute_windows(
            s, at(90), kept))
        assert mine == sorted((w.kind, w.start, w.end, w.losses)
                              for w in compute_windows(s, at(90)))
        return mine

    def split(ws):
        return [(start, end) for kind, start, end, _ in ws if kind == "split_brain"]

    append_rows(s.table_path("findings"), "findings", [
        _finding_row("lost", 100, 24, 1), _finding_row("confirmed", 100, 20, 1, count=10)])
    assert split(both()) == []  # pass 1 not committed
    _commit_pass(s, 1)
    assert split(both()) == [(at(20), at(24))]
    # pass 2 loses a write at 300, acked at 30; what sits there was acked at 26 and is
    # confirmed only by pass 3
    append_rows(s.table_path("findings"), "findings", [_finding_row("lost", 300, 30, 2)])
    _commit_pass(s, 2)
    assert split(both()) == [(at(20), at(24))]
    append_rows(s.table_path("findings"), "findings", [_finding_row("confirmed", 300, 26, 3)])
    assert split(both()) == [(at(20), at(24))]
    _commit_pass(s, 3)
    assert split(both()) == [(at(20), at(30))]  # the two pairs, one window
    assert kept.losses.full_reads == 1 and kept.refused.full_reads <= 1


def test_only_the_writes_confirmed_at_lost_offsets_are_read_for_split_brain(tmp_path):
    """The confirmed findings read for split-brain windows are those at the lost offsets,
    not every one between a partition's first and last loss (two kills apart, that was
    every write confirmed between them, read and converted at every computation)."""
    from kafka_audit.jobs.upkeep.windows_job import WindowInputs, compute_windows

    s = _shrunk_warehouse(tmp_path)
    append_rows(s.table_path("findings"), "findings", [
        _finding_row("lost", 100, 24, 1), _finding_row("confirmed", 100, 20, 1, count=10),
        _finding_row("confirmed", 110, 21, 1, count=90),  # between the two losses
        _finding_row("lost", 300, 30, 1, count=2), _finding_row("confirmed", 299, 26, 1, count=2)])
    _commit_pass(s, 1)
    kept = WindowInputs(s)
    mine = sorted((w.kind, w.start, w.end, w.losses) for w in compute_windows(s, at(90), kept))
    assert sorted(kept._over[1].read().column("offset").to_pylist()) == [100, 299]
    assert ("split_brain", at(20), at(30), 3) in mine
    assert mine == sorted((w.kind, w.start, w.end, w.losses)
                          for w in compute_windows(s, at(90)))
