"""Random audit histories for property tests: acks, reads, re-reads and leader changes.

A history is a list of ``(arrival_time, row)`` plus the pass times. Rows are
drawn to collide often: reads copy, shift or truncate acked runs, re-reads say
absent or expired, producers' runs reorder and repeat stamps.
"""

from __future__ import annotations

from hypothesis import strategies as st

from kafka_audit.jobs.model import AckRun, ClusterEvent, ReadRun

from .histories import at

PRODUCERS = [("p", "r1"), ("p", "r2"), ("q", "r1")]
ERRORS = ["NOT_ENOUGH_REPLICAS", "_MSG_TIMED_OUT", "REQUEST_TIMED_OUT"]


@st.composite
def histories(draw, topics=("t",), partitions=(0, 1), max_offset=40, span=40.0):
    rows: list[tuple] = []
    acked: list[AckRun] = []
    for producer, run in draw(st.sampled_from([PRODUCERS[:1], PRODUCERS[:2], PRODUCERS])):
        seq = 0
        for _ in range(draw(st.integers(0, 6))):
            topic = draw(st.sampled_from(topics))
            part = draw(st.sampled_from(partitions))
            count = draw(st.integers(1, 6))
            t = draw(st.floats(0, span, allow_nan=False))
            t_last = t + draw(st.sampled_from([0.0, 0.5, 2.0]))
            arrive = t_last + draw(st.sampled_from([0.0, 1.0, 5.0]))
            seq += draw(st.integers(0, 3))  # seqs that went to other partitions
            if draw(st.integers(0, 4)) == 0:
                err = draw(st.sampled_from(ERRORS))
                a = AckRun(topic, part, producer, run, seq, count, None, at(t), at(t_last), err,
                           draw(st.sampled_from(["all", "1"])))
            else:
                off = draw(st.integers(0, max_offset))
                a = AckRun(topic, part, producer, run, seq, count, off, at(t), at(t_last), None,
                           draw(st.sampled_from(["all", "1"])))
            seq += count
            acked.append(a)
            rows.append((at(arrive), a))
    for _ in range(draw(st.integers(0, 14))):
        t = draw(st.floats(0, span + 20, allow_nan=False))
        source = draw(st.sampled_from(["stream", "stream", "reread"]))
        status = "record" if source == "stream" else draw(
            st.sampled_from(["record", "record", "absent", "expired"]))
        if acked and status == "record" and draw(st.booleans()):
            a = draw(st.sampled_from(acked))
            shift = draw(st.sampled_from([0, 0, 0, 1, -1, 3]))
            cut = draw(st.integers(0, a.count - 1))
            count = draw(st.integers(1, a.count - cut))
            off = (a.offset if a.offset is not None else draw(st.integers(0, max_offset)))
            r = ReadRun(a.topic, a.partition, max(0, off + cut + shift), count, a.producer_id,
                        a.run_id, a.seq + cut, at(t), source, status)
        else:
            foreign = status != "record" or draw(st.booleans())
            producer, run = draw(st.sampled_from(PRODUCERS))
            r = ReadRun(draw(st.sampled_from(topics)), draw(st.sampled_from(partitions)),
                        draw(st.integers(0, max_offset)), draw(st.integers(1, 8)),
                        None if foreign else producer, None if foreign else run,
                        None if foreign else draw(st.integers(0, 20)), at(t), source, status)
        rows.append((at(t), r))
    for _ in range(draw(st.integers(0, 2))):
        t = draw(st.floats(0, span, allow_nan=False))
        leader = draw(st.integers(1, 3))
        isr = tuple(sorted(draw(st.sets(st.integers(1, 3), min_size=1))))
        e = ClusterEvent(at(t), draw(st.sampled_from(topics)), draw(st.sampled_from(partitions)),
                         "leader_change", leader, None, (leader,), isr)
        rows.append((at(t + draw(st.sampled_from([0.0, 1.0]))), e))
    passes = sorted(set(draw(st.lists(st.floats(0, span + 30, allow_nan=False),
                                      min_size=1, max_size=8))))
    return rows, [at(p) for p in passes] + [at(span + 100), at(span + 400)]
