"""Random audit histories for property tests: acks, reads, re-reads and leader changes.

A history is a list of ``(arrival_time, row)`` plus the pass times. Rows are
drawn to collide often: reads copy, shift or cut acked runs, re-reads say
absent or expired, producers' runs reorder and repeat stamps.

One builder, two sources of choices: Hypothesis (``histories()``: shrinking,
for the in-memory engine) and a seeded ``random.Random`` (``seeded_history``:
hundreds at once, for one Spark run).
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

from kafka_audit.jobs.core.model import AckRun, ClusterEvent, ReadRun

from .histories import at

PRODUCERS = [("p", "r1"), ("p", "r2"), ("q", "r1")]
ERRORS = ["NOT_ENOUGH_REPLICAS", "_MSG_TIMED_OUT", "REQUEST_TIMED_OUT"]


class _Hypothesis:
    def __init__(self, draw):
        self.draw = draw

    def int(self, lo, hi):
        return self.draw(st.integers(lo, hi))

    def float(self, lo, hi):
        return self.draw(st.floats(lo, hi, allow_nan=False))

    def pick(self, items):
        return self.draw(st.sampled_from(items))

    def sets(self, items, min_size):
        return self.draw(st.sets(st.sampled_from(items), min_size=min_size))

    def times(self, lo, hi, max_size):
        return self.draw(st.lists(st.floats(lo, hi, allow_nan=False), min_size=1,
                                  max_size=max_size))


class _Random:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def int(self, lo, hi):
        return self.rng.randint(lo, hi)

    def float(self, lo, hi):
        return self.rng.uniform(lo, hi)

    def pick(self, items):
        return self.rng.choice(list(items))

    def sets(self, items, min_size):
        return set(self.rng.sample(list(items), self.rng.randint(min_size, len(items))))

    def times(self, lo, hi, max_size):
        return [self.rng.uniform(lo, hi) for _ in range(self.rng.randint(1, max_size))]


def build(c, topics=("t",), partitions=(0, 1), max_offset=40, span=40.0):
    rows: list[tuple] = []
    acked: list[AckRun] = []
    for producer, run in c.pick([PRODUCERS[:1], PRODUCERS[:2], PRODUCERS]):
        seq = 0
        for _ in range(c.int(0, 6)):
            topic, part = c.pick(topics), c.pick(partitions)
            count = c.int(1, 6)
            t = c.float(0, span)
            t_last = t + c.pick([0.0, 0.5, 2.0])
            arrive = t_last + c.pick([0.0, 1.0, 5.0])
            seq += c.int(0, 3)  # seqs that went to other partitions
            failed = c.int(0, 4) == 0
            unplaced = not failed and c.int(0, 9) == 0  # acks=0: success, no offset
            a = AckRun(topic, part, producer, run, seq, count,
                       None if failed or unplaced else c.int(0, max_offset), at(t), at(t_last),
                       c.pick(ERRORS) if failed else None,
                       "0" if unplaced else c.pick(["all", "1"]))
            seq += count
            acked.append(a)
            rows.append((at(arrive), a))
    for _ in range(c.int(0, 1)):
        rows += _fail_over(c, topics, partitions, max_offset, span, acked)
    for _ in range(c.int(0, 14)):
        t = c.float(0, span + 20)
        source = c.pick(["stream", "stream", "reread"])
        status = "record" if source == "stream" else c.pick(["record", "record", "absent",
                                                             "truncated", "expired"])
        if acked and status == "record" and c.pick([True, False]):
            a = c.pick(acked)
            shift = c.pick([0, 0, 0, 1, -1, 3])
            cut = c.int(0, a.count - 1)
            count = c.int(1, a.count - cut)
            off = a.offset if a.offset is not None else c.int(0, max_offset)
            r = ReadRun(a.topic, a.partition, max(0, off + cut + shift), count, a.producer_id,
                        a.run_id, a.seq + cut, at(t), source, status)
        else:
            foreign = status != "record" or c.pick([True, False])
            producer, run = c.pick(PRODUCERS)
            r = ReadRun(c.pick(topics), c.pick(partitions), c.int(0, max_offset), c.int(1, 8),
                        None if foreign else producer, None if foreign else run,
                        None if foreign else c.int(0, 20), at(t), source, status)
        rows.append((at(t), r))
    for _ in range(c.int(0, 2)):
        t = c.float(0, span)
        leader = c.int(1, 3)
        before = tuple(sorted(c.sets([1, 2, 3], 1)))
        after = tuple(sorted({leader, *c.sets([1, 2, 3], 0)}))  # alone now and then
        e = ClusterEvent(at(t), c.pick(topics), c.pick(partitions), "leader_change", leader,
                         None, after, before)
        rows.append((at(t + c.pick([0.0, 1.0])), e))
    passes = sorted(set(c.times(0, span + 30, 8)))
    return rows, [at(p) for p in passes] + [at(span + 100), at(span + 400)]


def _fail_over(c, topics, partitions, max_offset, span, acked):
    """A fail-over that truncates acked writes: an old leader acks a run (``acks=1``), a
    leader change, then later writes of the same producer run land at the truncated
    offsets; the consume job reads them there (and may have read the old ones before)."""
    producer, run = c.pick(PRODUCERS)
    topic, part = c.pick(topics), c.pick(partitions)
    t, count, offset = c.float(0, span), c.int(1, 5), c.int(0, max_offset)
    base = 100 + c.int(0, 20)  # above the ordinary runs' seqs
    old = AckRun(topic, part, producer, run, base, count, offset, at(t), at(t), None, "1")
    new = AckRun(topic, part, producer, run, base + count + c.int(0, 3), count + c.int(0, 3),
                 offset + c.int(0, count - 1), at(t + 2), at(t + 2), None, c.pick(["all", "1"]))
    acked += [old, new]
    rows = [(at(t), old), (at(t + 2), new),
            (at(t + 1), ClusterEvent(at(t + 1), topic, part, "leader_change", 2, 1, (2, 3),
                                     (1, 2, 3)))]
    if c.pick([True, False]):  # read from the old leader before the change
        rows.append((at(t + 0.5), ReadRun(topic, part, old.offset, old.count, producer, run,
                                          old.seq, at(t + 0.5))))
    rows.append((at(t + 3), ReadRun(topic, part, new.offset, new.count, producer, run, new.seq,
                                    at(t + 3))))
    if c.pick([True, False]):  # the audit's re-read of the truncated offsets
        rows.append((at(t + 12), ReadRun(topic, part, new.offset, new.count, producer, run,
                                         new.seq, at(t + 12), "reread")))
    return rows


def build_steady(c, topics=("t",), partitions=(0, 1), span=40.0):
    """A history as a fault-free cluster mostly gives it: producer runs appended one after
    another to each partition's log (offsets in order, seqs ascending), each read back
    whole by the stream, with the odd departure from that (a read cut in two or missing, a
    re-read, one from below it finding another record or none, a copy read elsewhere, a
    run acked out of order, a failed run, a leader change), so that most runs are only
    confirmed and some are not."""
    rows: list[tuple] = []
    ends = {(t, p): 0 for t in topics for p in partitions}
    seqs = {run: 0 for run in PRODUCERS}
    for _ in range(c.int(1, 16)):
        producer, run = c.pick(PRODUCERS)
        topic, part = c.pick(topics), c.pick(partitions)
        count, t = c.int(1, 5), c.float(0, span)
        seq = seqs[(producer, run)] + c.pick([0, 0, 0, 2])
        seqs[(producer, run)] = seq + count
        if c.int(0, 9) == 0:  # a failed run
            rows.append((at(t), AckRun(topic, part, producer, run, seq, count, None, at(t),
                                       at(t), c.pick(ERRORS))))
            continue
        offset = ends[(topic, part)] + c.pick([0, 0, 0, 0, 1])
        ends[(topic, part)] = offset + count
        if c.int(0, 9) == 0:  # acked out of order: a lower seq follows at a higher offset
            seq = max(0, seq - c.int(1, 4))
        a = AckRun(topic, part, producer, run, seq, count, offset, at(t), at(t + 0.5), None,
                   c.pick(["all", "all", "1"]))
        rows.append((at(t + c.pick([0.5, 1.0, 5.0])), a))
        read_at = t + c.pick([1.0, 2.0, 20.0])
        how = c.pick(["whole"] * 6 + ["cut", "missing", "reread", "copy", "straddle"])
        if how == "missing":
            continue
        if how == "cut" and count > 1:
            k = c.int(1, count - 1)
            pieces = [(offset, seq, k), (offset + k, seq + k, count - k)]
        else:
            pieces = [(offset, seq, count)]
        for off, s, n in pieces:
            rows.append((at(read_at), ReadRun(topic, part, off, n, producer, run, s,
                                              at(read_at))))
        if how == "reread":
            rows.append((at(read_at + 3), ReadRun(topic, part, offset, count, producer, run,
                                                  seq, at(read_at + 3), "reread")))
        if how == "straddle":  # re-read from below it: another record there, or none
            status = c.pick(["record", "truncated"])
            rows.append((at(read_at + 3), ReadRun(topic, part, max(0, offset - 1), 2, None,
                                                  None, None, at(read_at + 3), "reread",
                                                  status)))
        if how == "copy":  # written twice: the copy read past the partition's end
            copy = ends[(topic, part)]
            ends[(topic, part)] = copy + count
            rows.append((at(read_at), ReadRun(topic, part, copy, count, producer, run, seq,
                                              at(read_at))))
    for _ in range(c.int(0, 1)):
        t = c.float(0, span)
        e = ClusterEvent(at(t), c.pick(topics), c.pick(partitions), "leader_change", 2, 1,
                         c.pick([(2, 3), (2,)]), (1, 2, 3))
        rows.append((at(t), e))
    passes = sorted(set(c.times(0, span + 30, 6)))
    return rows, [at(p) for p in passes] + [at(span + 100), at(span + 400)]


@st.composite
def histories(draw, **kw):
    return build(_Hypothesis(draw), **kw)


@st.composite
def steady_histories(draw, **kw):
    return build_steady(_Hypothesis(draw), **kw)


def seeded_history(seed: int, **kw):
    return build(_Random(seed), **kw)


def seeded_steady(seed: int, **kw):
    return build_steady(_Random(seed), **kw)


def log_end_fn(rows):
    """A partition's log end as a pass at ``now`` sees it: one past the highest placed ack
    known by then, plus a little; unknown (None) at some passes."""
    def log_end(topic: str, partition: int, now) -> int | None:
        if int(now.timestamp()) % 5 == 0:
            return None
        ends = [r.end for when, r in rows if isinstance(r, AckRun) and r.placed
                and (r.topic, r.partition) == (topic, partition) and when <= now]
        return max(ends, default=0) + int(now.timestamp()) % 3

    return log_end
