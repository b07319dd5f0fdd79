"""The audit's hot state as rows and back: what a pass commits to ``audit_hot`` is what the
next pass judges, through the driver's Arrow path and Spark's pandas path alike; and the
rows of a state are cut into partitions exactly as a scan of their keys would."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_audit.jobs.audit.hot_state import (
    arrow_step_fn,
    hot_from_arrow,
    hot_from_rows,
    hot_table,
    split_confirmed,
    split_idle,
    step_arrow_schema,
)
from kafka_audit.jobs.core.engine import AuditConfig, PartitionHot
from kafka_audit.jobs.core.model import AckRun, ClusterEvent, ReadRun
from kafka_audit.jobs.core.rules import partition_events
from kafka_audit.store import partition_slices

from ..support.random_histories import histories, seeded_steady, steady_histories
from ..support.sizes import examples
from .test_engine_vs_reference import CFG as CFG_ALL
from .test_engine_vs_reference import fed_passes, run_engine

CFG = AuditConfig(settle_seconds=5, lookback_seconds=3, unseen_after_seconds=20,
                  read_retention_seconds=200)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.integers(0, 3))
def test_a_state_as_rows_reads_back_equal_through_arrow_and_pandas(history, cut):
    rows, passes = history
    auditor = run_engine(rows, passes[:max(1, len(passes) - cut)], CFG)
    for (topic, partition), hot in auditor.hot.items():
        t = hot_table(topic, partition, hot, step_arrow_schema())
        assert t.num_rows == (len(hot.acks) + len(hot.reads) + len(hot.judged)
                              + len(hot.observations))
        kept = as_kept(hot)
        assert hot_from_arrow(t) == kept
        assert hot_from_rows(t.to_pandas()) == kept
        # the kinds' rows interleaved (each kind's in its order), as a pass reads them
        assert hot_from_arrow(t.take(pa.array(interleaved(t.column("kind").to_pylist()),
                                              pa.int64()))) == kept


def as_kept(hot: PartitionHot) -> PartitionHot:
    """``hot`` as ``audit_hot`` keeps it: a judged run as the writes it placed (its
    producer run, seqs, offsets) and when it was judged, all a reorder witness needs."""
    return replace(hot, judged=[(AckRun(a.topic, a.partition, a.producer_id, a.run_id, a.seq,
                                        a.count, a.offset, t, t), t) for a, t in hot.judged])


def interleaved(kinds: list[str]) -> list[int]:
    """Row indices taking one row of each kind in turn, each kind's rows in their order."""
    by_kind: dict[str, list[int]] = {}
    for i, k in enumerate(kinds):
        by_kind.setdefault(k, []).append(i)
    queues = [q[::-1] for q in by_kind.values()]
    out: list[int] = []
    while any(queues):
        out += [q.pop() for q in queues if q]
    return out


def scanned(t: pa.Table) -> list[tuple[tuple, list]]:
    """The partitions of ``t`` (sorted by key) found by comparing each row's key with the
    one before, in Python: the reference."""
    keys = list(zip(t.column("topic").to_pylist(), t.column("partition").to_pylist(),
                    strict=True))
    out: list[tuple[tuple, list]] = []
    for i, k in enumerate(keys):
        if not out or out[-1][0] != k:
            out.append((k, []))
        out[-1][1].append(t.column("x")[i].as_py())
    return out


@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.sampled_from([0, 1, 2, None])),
                max_size=40), st.integers(0, 40))
def test_partitions_are_cut_where_the_key_changes(keys, chunk):
    keys.sort(key=lambda k: (k[0] is None, k[0] or "", k[1] is None, k[1] or 0))
    t = pa.table({"topic": pa.array([k[0] for k in keys], pa.string()),
                  "partition": pa.array([k[1] for k in keys], pa.int64()),
                  "x": list(range(len(keys)))})
    if 0 < chunk < len(keys):  # several chunks, as concatenated reads give
        t = pa.concat_tables([t.slice(0, chunk), t.slice(chunk)])
    assert [(k, s.column("x").to_pylist()) for k, s in partition_slices(t)] == scanned(t)


def run_arrow_steps(rows, passes, cfg, idle: bool) -> list[dict]:
    """A history judged pass by pass as the driver judges it (each partition's state as
    Arrow rows through :func:`arrow_step_fn`): per pass and partition, the findings,
    re-reads and status it returned and the state it kept, each as a sorted list."""
    schema = step_arrow_schema()
    keys = sorted({(r.topic, r.partition) for _w, r in rows})
    state = {k: schema.empty_table() for k in keys}
    events: list[ClusterEvent] = []
    out = []
    for now, new, ends in fed_passes(rows, passes):
        events += [r for r in new if isinstance(r, ClusterEvent)]
        step = arrow_step_fn({k: partition_events(events, k) for k in keys}, now, cfg, ends,
                             idle=idle)
        for key in keys:
            fresh = PartitionHot(
                acks=[r for r in new if isinstance(r, AckRun) and (r.topic, r.partition) == key],
                reads=[r for r in new if isinstance(r, ReadRun)
                       and (r.topic, r.partition) == key])
            res = step(key, pa.concat_tables([state[key], hot_table(*key, fresh, schema)]))
            state[key] = res.filter(pc.equal(res.column("row"), "hot"))
            out.append({row: sorted(res.filter(pc.equal(res.column("row"), row)).to_pylist(),
                                    key=repr)
                        for row in ("hot", "finding", "reread", "status")})
    return out


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(topics=("t", "c", "u")),
       # unseen after: as the reference's, past any history, a timedelta's overflow, below
       # a microsecond; reads kept 200 s, or 3 s (the frontier then often an observation's)
       st.sampled_from([20.0, 1e12, float("inf"), 4e-7]), st.sampled_from([200.0, 3.0]),
       # writes past the log's end judged after 60 s, or after 5 (within most histories)
       st.sampled_from([60.0, 5.0]))
def test_a_step_that_passes_idle_rows_through_equals_one_that_judges_them_all(
        history, unseen_after, read_retention, beyond_end):
    rows, passes = history
    cfg = replace(CFG_ALL, unseen_after_seconds=unseen_after,
                  read_retention_seconds=read_retention, beyond_end_seconds=beyond_end)
    assert run_arrow_steps(rows, passes, cfg, idle=True) == run_arrow_steps(
        rows, passes, cfg, idle=False)


def test_idle_rows_are_read_and_judged_runs_far_from_every_unjudged_one():
    now = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
    t0 = now - timedelta(seconds=100)
    run = ("p", "r")
    # a history 100 s old: reads and judged runs at offsets 0..999 (seq = offset + 5000)
    reads = [ReadRun("t", 0, o, 10, *run, o + 5000, t0) for o in range(0, 1000, 10)]
    judged = [(AckRun("t", 0, *run, o + 5000, 10, o, t0, t0), t0) for o in range(0, 1000, 10)]
    # unjudged: offsets 990..1009, and a failed write whose seqs were read at offsets 500..509
    # (busy: the reads touching either, ends included, and those touching such copies': the
    # read at 980 holds seq 5990 at its end, so the one at 970 touching it is busy too)
    acks = [AckRun("t", 0, *run, 5990, 20, 990, now, now),
            AckRun("t", 0, *run, 5500, 10, None, now, now, "timed_out")]
    fresh = ReadRun("t", 0, 1000, 10, *run, 6000, now)  # read this second: never idle
    hot = PartitionHot(acks=acks, reads=[*reads, fresh], judged=judged)
    busy, kept = split_idle(("t", 0), hot_table("t", 0, hot, step_arrow_schema()), now, CFG_ALL)
    back = hot_from_arrow(busy)
    assert {(r.offset, r.read_time) for r in back.reads} == {
        (1000, now), *((o, t0) for o in (480, 490, 500, 510, 520, 970, 980, 990))}
    # judged runs: only those of seq at most 6009 whose last offset reaches 990
    assert sorted(a.offset for a, _ in back.judged) == [990]
    assert back.acks == acks
    # the idle stream reads count as one observation: their highest end, when it was read
    assert back.observations == [(970, t0)]
    assert kept.num_rows == (100 - 8) + (100 - 1)
    assert set(kept.column("row").to_pylist()) == {"hot"}
    assert kept.column("error_name").null_count == kept.num_rows


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steady_histories(topics=("t", "c", "u")), st.sampled_from([200.0, 3.0]))
def test_a_step_that_confirms_plain_runs_in_arrow_equals_one_that_judges_them_all(
        history, read_retention):
    rows, passes = history
    cfg = replace(CFG_ALL, read_retention_seconds=read_retention)
    assert run_arrow_steps(rows, passes, cfg, idle=True) == run_arrow_steps(
        rows, passes, cfg, idle=False)


def test_steady_histories_confirm_most_runs_in_arrow_and_leave_the_rest():
    """The property above is about something: over seeded steady histories, the runs taken
    out are most of the confirmed ones, and some are left to the engine."""
    taken = confirmed = 0
    for seed in range(40):
        rows, passes = seeded_steady(seed)
        schema = step_arrow_schema()
        for now, new, _ends in fed_passes(rows, passes[-1:]):
            events = [r for r in new if isinstance(r, ClusterEvent)]
            for key in sorted({(r.topic, r.partition) for r in new}):
                hot = PartitionHot(
                    acks=[r for r in new if isinstance(r, AckRun)
                          and (r.topic, r.partition) == key],
                    reads=[r for r in new if isinstance(r, ReadRun)
                           and (r.topic, r.partition) == key])
                _rest, done = split_confirmed(key, hot_table(*key, hot, schema), now, CFG_ALL,
                                              partition_events(events, key))
                out = arrow_step_fn({key: partition_events(events, key)}, now, CFG_ALL, {},
                                    idle=False)(key, hot_table(*key, hot, schema))
                kinds = out.filter(pc.equal(out.column("row"), "finding")).column("kind")
                confirmed += kinds.to_pylist().count("confirmed")
                taken += 0 if done is None else done.num_rows // 2
    assert 0 < taken < confirmed
    assert taken > confirmed / 2


def test_a_run_out_of_order_cut_or_copied_is_left_to_the_engine():
    now = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
    t0 = now - timedelta(seconds=100)
    run = ("p", "r")
    acks = [AckRun("t", 0, *run, 0, 10, 0, t0, t0),     # plain: confirmed in Arrow
            AckRun("t", 0, *run, 10, 10, 10, t0, t0),   # read in two pieces
            AckRun("t", 0, *run, 20, 10, 20, t0, t0),   # a copy read at 50
            AckRun("t", 0, "q", "r", 5, 10, 30, t0, t0),  # q's seqs 5..14 at 30..39,
            AckRun("t", 0, "q", "r", 0, 5, 40, t0, t0)]   # and seqs 0..4 above them
    reads = [ReadRun("t", 0, 0, 10, *run, 0, t0), ReadRun("t", 0, 10, 4, *run, 10, t0),
             ReadRun("t", 0, 14, 6, *run, 14, t0), ReadRun("t", 0, 20, 10, *run, 20, t0),
             ReadRun("t", 0, 30, 10, "q", "r", 5, t0), ReadRun("t", 0, 40, 5, "q", "r", 0, t0),
             ReadRun("t", 0, 50, 10, *run, 20, t0)]
    t = hot_table("t", 0, PartitionHot(acks=acks, reads=reads), step_arrow_schema())
    rest, done = split_confirmed(("t", 0), t, now, CFG_ALL, [])
    assert done is not None
    found = done.filter(pc.equal(done.column("row"), "finding"))
    assert found.column("finding_id").to_pylist() == ["confirmed:t:0:p:r:0"]
    assert sorted(a.offset for a in hot_from_arrow(rest).acks) == [10, 20, 30, 40]
    # a leader change a second after the acks gates every run: none is taken
    change = ClusterEvent(t0 + timedelta(seconds=1), "t", 0, "leader_change", 2, 1, (2, 3),
                          (1, 2, 3))
    assert split_confirmed(("t", 0), t, now, CFG_ALL, [change]) == (t, None)
    # not yet settled (read this instant, settle 5 s): none is taken
    fresh = hot_table("t", 0, PartitionHot(acks=acks[:1], reads=[replace(reads[0],
                                                                         read_time=now)]),
                      step_arrow_schema())
    assert split_confirmed(("t", 0), fresh, now, CFG_ALL, []) == (fresh, None)


def test_rows_the_engine_never_writes_are_left_to_it():
    """A judged row of no writes (count 0 or below: ``_ascending`` compares neighbours, which
    orders only positive counts) and an ack without a seq are never taken."""
    now = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
    t0 = now - timedelta(seconds=100)
    plain = AckRun("t", 0, "p", "r", 10, 3, 10, t0, t0)
    read = ReadRun("t", 0, 10, 3, "p", "r", 10, t0)
    schema = step_arrow_schema()
    t = hot_table("t", 0, PartitionHot(acks=[plain], reads=[read]), schema)
    assert split_confirmed(("t", 0), t, now, CFG_ALL, [])[1] is not None
    odd = PartitionHot(acks=[plain], reads=[read],
                       judged=[(AckRun("t", 0, "p", "r", 13, -10, 13, t0, t0), t0),
                               (AckRun("t", 0, "p", "r", 5, 1, 14, t0, t0), t0)])
    t = hot_table("t", 0, odd, schema)
    assert split_confirmed(("t", 0), t, now, CFG_ALL, []) == (t, None)
    t = hot_table("t", 0, PartitionHot(acks=[replace(plain, seq=None)],
                                       reads=[replace(read, seq=0)]), schema)
    assert split_confirmed(("t", 0), t, now, CFG_ALL, []) == (t, None)
