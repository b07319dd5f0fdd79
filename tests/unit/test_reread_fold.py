"""Folding a direct re-read into runs: every offset asked gets an answer."""

from kafka_audit.jobs.model import Reread
from kafka_audit.jobs.reread import Record, fold_records

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
