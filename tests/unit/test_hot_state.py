"""The audit's hot state as rows and back: what a pass commits to ``audit_hot`` is what the
next pass judges, through the driver's Arrow path and Spark's pandas path alike; and the
rows of a state are cut into partitions exactly as a scan of their keys would."""

from dataclasses import replace

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_audit.jobs.engine import AuditConfig, PartitionHot
from kafka_audit.jobs.hot_state import (
    hot_from_arrow,
    hot_from_rows,
    hot_table,
    step_arrow_schema,
)
from kafka_audit.jobs.model import AckRun
from kafka_audit.store import partition_slices

from ..support.random_histories import histories
from .test_engine_vs_reference import run_engine

CFG = AuditConfig(settle_seconds=5, lookback_seconds=3, unseen_after_seconds=20,
                  read_retention_seconds=200)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
