"""What retention drops is summed into ``rollups`` (``kafka_audit/rollups.py``), and the
running totals that take those sums in are the totals of the rows themselves.

Hypothesis: any ledger, stream and findings rows, any of them dropped (summed batch by
batch, the batches' sums merged); the API's folds of the rows kept plus the rollup rows
equal its folds of every row: the summary's, the topics', the metrics' and the
producers' counts (not the ack latency, which is of the rows kept).
"""

from datetime import UTC, datetime, timedelta

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_audit.rollups import MALFORMED, ROLLED_UP, as_table_rows, merge, rollup
from kafka_audit.schemas.stamp import FORGED, NO_STAMP
from kafka_audit.schemas.tables import arrow_schema
from tests.unit.test_api_folds import ACK, FINDING, FOLDS, READ, table

AT = datetime(2026, 3, 1, tzinfo=UTC)


def _split(rows, drop, cuts):
    """(kept rows, dropped rows in batches of at most ``cuts`` rows)."""
    gone = [r for r, d in zip(rows, drop, strict=False) if d]
    kept = [r for r, d in zip(rows, drop, strict=False) if not d]
    return kept, [gone[i:i + cuts] for i in range(0, len(gone), cuts)]


def _with_rollups(fold, name, kept, batches, round_=1):
    summed = merge([rollup(name, table(name, b), round_, AT) for b in batches])
    state = fold.add(fold.empty(), table(name, kept), 1)
    return fold.add(state, as_table_rows(name, summed), 2), summed


def _rows_and_drops(strategy, max_size=40):
    return st.lists(strategy, min_size=1, max_size=max_size).flatmap(
        lambda rows: st.tuples(st.just(rows),
                               st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)),
                               st.integers(1, 7)))


@given(_rows_and_drops(ACK))
@settings(max_examples=80, deadline=None)
def test_the_ledgers_totals_survive_a_drop(case):
    rows, drop, cuts = case
    kept, batches = _split(rows, drop, cuts)
    whole = FOLDS["ack_sums"].add(FOLDS["ack_sums"].empty(), table("acks", rows), 1)
    got, summed = _with_rollups(FOLDS["ack_sums"], "acks", kept, batches)
    assert got.by_partition == whole.by_partition
    assert got.failed == whole.failed
    assert got.durability == whole.durability
    assert got.runs == whole.runs
    assert got.newest_now == whole.newest_now
    assert sum(summed.column("rows").to_pylist()) == sum(drop)
    p_whole = FOLDS["producer_sums"].add(FOLDS["producer_sums"].empty(), table("acks", rows), 1)
    p_got, _ = _with_rollups(FOLDS["producer_sums"], "acks", kept, batches)
    assert (p_got.writes, p_got.runs, p_got.settings, p_got.run_settings) == (
        p_whole.writes, p_whole.runs, p_whole.settings, p_whole.run_settings)


@given(_rows_and_drops(FINDING), st.integers(1, 5))
@settings(max_examples=80, deadline=None)
def test_the_verdicts_survive_a_drop(case, passes):
    rows, drop, cuts = case
    rows = [{**r, "pass_id": 1 + i % passes, "cause": "c" if i % 3 else None,
             "producer_id": "p", "run_id": f"r{i % 2}"} for i, r in enumerate(rows)]
    kept, batches = _split(rows, drop, cuts)
    fold = FOLDS["finding_sums"]
    whole = fold.add(fold.empty(), table("findings", rows), 1)
    got, _ = _with_rollups(fold, "findings", kept, batches)
    assert got.through(passes) == whole.through(passes)


@given(_rows_and_drops(READ), st.sets(st.sampled_from([("p", "r1"), ("p", "r2")])))
@settings(max_examples=80, deadline=None)
def test_the_streams_reasons_survive_a_drop(case, runs):
    rows, drop, cuts = case
    kept, batches = _split(rows, drop, cuts)
    fold = FOLDS["stream_sums"]
    whole = fold.add(fold.empty(), table("consumed", rows), 1)
    got, summed = _with_rollups(fold, "consumed", kept, batches)
    for topic in ("a", "b", "c"):
        assert got.unjudged(topic, frozenset(runs)) == whole.unjudged(topic, frozenset(runs))
    assert (got.topics, got.stream_topics, got.partitions) == (
        whole.topics, whole.stream_topics, whole.partitions)
    # a malformed stamp's detail is not kept: one group however the parser worded it
    errors = set(summed.column("stamp_error").to_pylist())
    assert errors <= {None, MALFORMED, NO_STAMP, FORGED}


def test_a_rollup_row_is_a_day_and_a_group():
    t0 = datetime(2026, 3, 1, 23, 59, tzinfo=UTC)
    rows = [{"topic": "a", "producer_id": "p", "run_id": "r", "count": n, "partition": 0,
             "seq": 0, "offset": 0, "send_time": t, "ack_time": t,
             "last_ack_time": t + timedelta(seconds=1), "acks": "all", "idempotence": True,
             "retries": 2, "max_in_flight": 5, "error_name": None}
            for n, t in ((3, t0), (4, t0 - timedelta(hours=1)), (5, t0 + timedelta(hours=1)))]
    out = rollup("acks", table("acks", rows), 7, AT).sort_by("day").to_pylist()
    assert [(r["day"].isoformat(), r["rows"], r["count"], r["kind"], r["round"])
            for r in out] == [("2026-03-01", 2, 7, "acked", 7), ("2026-03-02", 1, 5, "acked", 7)]
    assert out[0]["first_time"] == t0 - timedelta(hours=1)
    assert out[0]["last_time"] == t0 + timedelta(seconds=1)
    assert rollup("acks", table("acks", []), 1, AT).num_rows == 0
    assert merge([]).schema.names == arrow_schema("rollups").names


def test_every_group_column_is_a_column_of_its_table_and_of_the_rollups():
    for name, spec in ROLLED_UP.items():
        for col in (*spec.groups, spec.time, spec.first, spec.last):
            assert col in arrow_schema(name).names, (name, col)
        for col in spec.groups:
            assert col in arrow_schema("rollups").names, (name, col)
    assert isinstance(as_table_rows("acks", merge([])), pa.Table)
