"""Folding a direct re-read into runs: every offset asked gets an answer."""

from kafka_audit.jobs.audit.reread import Record, _reread_one, batch_size, fold_records
from kafka_audit.jobs.core.model import Reread

from ..support.histories import at


def rec(offset, seq=None, producer="p", run="r", ok=True, epoch=3):
    if seq is None:
        return Record(offset, None, None, None, None, epoch, "no kaudit header")
    return Record(offset, producer, run, seq, ok, epoch)


def shape(runs):
    return [(r.offset, r.count, r.status, r.producer_id, r.seq, r.leader_epoch) for r in runs]


def test_every_offset_asked_is_answered():
    # log holds [5, 12); offsets 0..4 expired, 8 compacted away, 12.. beyond the end
    records = [rec(5, 10), rec(6, 11), rec(7, 12), rec(9, None), rec(10, None), rec(11, 40)]
    runs = fold_records(Reread("t", 0, 2, 15, "x"), records, low=5, high=12, read_time=at(1))
    assert shape(runs) == [
        (2, 3, "expired", None, None, None),
        (5, 3, "record", "p", 10, 3),
        (8, 1, "absent", None, None, None),
        (9, 2, "record", None, None, 3),
        (11, 1, "record", "p", 40, 3),
        (12, 3, "truncated", None, None, None),
    ]
    assert sum(r.count for r in runs) == 13 and all(r.source == "reread" for r in runs)


def test_runs_split_at_seq_jumps_epoch_changes_and_bad_checksums():
    records = [rec(0, 0), rec(1, 2), rec(2, 3, epoch=4), rec(3, 4, epoch=4, ok=False)]
    runs = fold_records(Reread("t", 0, 0, 4, "x"), records, low=0, high=4, read_time=at(1))
    assert shape(runs) == [(0, 1, "record", "p", 0, 3), (1, 1, "record", "p", 2, 3),
                           (2, 1, "record", "p", 3, 4), (3, 1, "record", None, None, 4)]


def test_records_outside_the_range_are_ignored():
    runs = fold_records(Reread("t", 0, 3, 5, "x"), [rec(2, 2), rec(3, 3), rec(4, 4), rec(5, 5)],
                        low=0, high=10, read_time=at(1))
    assert shape(runs) == [(3, 2, "record", "p", 3, 3)]


def test_a_consume_call_asks_for_no_more_than_the_offsets_left():
    # consume(n) returns when it has n records or its timeout passed: asking 5,000 for a
    # range of 300 near the log's end waited the whole timeout (bench/reread.py)
    assert [batch_size(0, 300), batch_size(0, 10**6), batch_size(299, 300)] == [300, 5000, 1]
    assert batch_size(5, 5) == 1 and batch_size(7, 3) == 1  # at least the end-of-log event


class _Msg:
    def __init__(self, offset):
        self._offset = offset

    def error(self):
        return None

    def offset(self):
        return self._offset

    def leader_epoch(self):
        return 3

    def headers(self):
        return None

    def value(self):
        return b""


class _Consumer:
    """A log of offsets [0, 1000) behind a consumer whose consume(n) gives n records."""

    def __init__(self):
        self.asked, self.pos = [], 0

    def get_watermark_offsets(self, tp, timeout):
        return 0, 1000

    def assign(self, tps):
        self.pos = tps[0].offset

    def unassign(self):
        pass

    def consume(self, n, timeout):
        self.asked.append(n)
        out = [_Msg(o) for o in range(self.pos, min(self.pos + n, 1000))]
        self.pos += len(out)
        return out


def test_a_reread_asks_the_consumer_for_the_range_it_reads():
    c = _Consumer()
    runs = _reread_one(c, Reread("t", 0, 200, 500, "x"), timeout=5)
    assert c.asked == [300]  # one call, for the 300 offsets asked
    assert shape(runs) == [(200, 300, "record", None, None, 3)]


class _Undecodable(_Msg):
    """confluent-kafka's Message for a record with a header key that is not UTF-8:
    ``headers()`` raises (issue 36)."""

    def headers(self):
        raise SystemError("<built-in method headers of cimpl.Message object at 0x7f> "
                          "returned a result with an exception set")


class _Broken(_Msg):
    def value(self):
        raise RuntimeError("anything else a record may throw")

    def headers(self):
        return [("kaudit", bytes([1]) + bytes(12) + b"\x01p\x01r")]


def test_a_record_that_cannot_be_classified_is_malformed_and_its_range_answered():
    class Mixed(_Consumer):
        def consume(self, n, timeout):
            out = super().consume(n, timeout)
            return [_Undecodable(m.offset()) if m.offset() == 250 else
                    _Broken(m.offset()) if m.offset() == 260 else m for m in out]

    runs = _reread_one(Mixed(), Reread("t", 0, 200, 300, "x"), timeout=5)
    # every offset answered, the two records unjudged (no producer), as foreign ones are
    assert shape(runs) == [(200, 100, "record", None, None, 3)]
    from kafka_audit.jobs.audit.reread import _record

    for msg, says in ((_Undecodable(1), "malformed stamp: headers unreadable here "
                                        "(SystemError"),
                      (_Broken(2), "malformed stamp: unreadable (RuntimeError)")):
        r = _record(msg)
        assert (r.producer_id, r.seq, r.checksum_ok) == (None, None, None)
        assert r.stamp_error.startswith(says), r.stamp_error
