"""When the audit loop starts its next pass (``jobs/audit_job._wait``): on a commit, at the
interval's end, at the instant the writes that look lost settle, and not while the
consume job reads a backlog. Timing is checked
as bounds on the monotonic clock (the wait may run late on a loaded machine, never early)."""

import threading
import time

from kafka_audit.jobs.audit.audit_job import _wait
from kafka_audit.jobs.consume.consume_job import Backlog
from kafka_audit.settings import Settings


def waited(tmp_path, interval: float, due_in: float | None = None, pass_seconds: float = 0.0,
           wake_after: float | None = None, backlog: Backlog | None = None,
           hold: float = 60, caught_up_after: float | None = None) -> float:
    settings = Settings(home=tmp_path, audit={"interval_seconds": interval},
                        steady={"min_pass_gap_seconds": 0.05, "backlog_pass_seconds": hold})
    stop, wake = threading.Event(), threading.Event()
    t0 = time.monotonic()
    if wake_after is not None:
        threading.Timer(wake_after, wake.set).start()
    if caught_up_after is not None:
        # the consume thread saw the progress of the batch that read the rest
        threading.Timer(caught_up_after, lambda: backlog.update(0)).start()
    _wait(settings, stop, wake, None if due_in is None else t0 + due_in, pass_seconds,
          backlog)
    return time.monotonic() - t0


def behind(*records: int | None) -> Backlog:
    """A backlog after micro-batches that left ``records`` each (None: none ended yet)."""
    backlog = Backlog()
    for r in records:
        if r is None:
            backlog.reset(known=False)
        else:
            backlog.update(r)
    return backlog


def test_a_commit_starts_the_next_pass_early(tmp_path):
    assert waited(tmp_path, interval=30, wake_after=0.1) < 10


def test_a_pass_starts_when_what_looks_lost_settles_without_a_commit(tmp_path):
    took = waited(tmp_path, interval=30, due_in=0.6)
    assert 0.6 <= took < 10


def test_a_commit_just_before_the_suspects_settle_waits_for_them(tmp_path):
    # woken 0.1 s in, 0.5 s before they settle, after passes of 2 s: begun then, the pass
    # would still run when they settle and leave them to the next one
    assert waited(tmp_path, interval=30, due_in=0.6, pass_seconds=2, wake_after=0.1) >= 0.6
    # passes shorter than the time left: the woken pass goes first
    assert waited(tmp_path, interval=30, due_in=20, pass_seconds=2, wake_after=0.1) < 10


def test_an_interval_ending_just_before_the_suspects_settle_waits_for_them(tmp_path):
    assert waited(tmp_path, interval=0.2, due_in=0.8, pass_seconds=2) >= 0.8
    assert waited(tmp_path, interval=0.2, due_in=20, pass_seconds=2) < 10


def test_settled_already_starts_at_once_and_stop_ends_the_wait(tmp_path):
    assert waited(tmp_path, interval=30, due_in=-5) < 10
    settings = Settings(home=tmp_path)
    stop = threading.Event()
    stop.set()
    t0 = time.monotonic()
    _wait(settings, stop, threading.Event(), t0 + 60, 100)
    assert time.monotonic() - t0 < 10


def test_a_commit_of_a_backlog_batch_does_not_start_a_pass_until_the_backlog_is_read(tmp_path):
    # woken at 0.1 s by a batch that left 2 M records to read (the wake stays set, as the
    # later batches' commits set it again): the pass waits until the consume thread has
    # seen the progress of the batch that read the rest (1.0 s), then starts at once
    took = waited(tmp_path, interval=30, wake_after=0.1, backlog=behind(2_000_000),
                  caught_up_after=1.0)
    assert 1.0 <= took < 10
    # with nothing left to read the same commit starts it at once
    assert waited(tmp_path, interval=30, wake_after=0.1, backlog=behind(0)) < 10
    # and with no commit, the interval's end once the backlog is read
    took = waited(tmp_path, interval=0.2, backlog=behind(2_000_000), caught_up_after=1.0)
    assert 1.0 <= took < 10


def test_a_backlog_not_read_faster_than_it_grows_still_gets_a_pass_every_hold(tmp_path):
    took = waited(tmp_path, interval=0.2, wake_after=0.1,
                  backlog=behind(2_000_000, 2_000_000), hold=1.5)  # not shrinking
    assert 1.5 <= took < 10
    took = waited(tmp_path, interval=0.2, wake_after=0.1,
                  backlog=behind(2_000_000, 2_400_000), hold=1.5)  # growing
    assert 1.5 <= took < 10


def test_a_backlog_being_caught_up_holds_the_pass_past_the_hold_until_read(tmp_path):
    # each batch leaves fewer: the pass waits for the end, past backlog_pass_seconds,
    # without spinning meanwhile
    cpu = time.process_time()
    took = waited(tmp_path, interval=0.2, wake_after=0.1,
                  backlog=behind(3_000_000, 2_000_000), hold=0.5, caught_up_after=1.5)
    assert 1.5 <= took < 10
    assert time.process_time() - cpu < 0.5 * took  # a busy loop takes the whole wait
    # writes that look lost settle meanwhile: judged when they do
    took = waited(tmp_path, interval=30, due_in=0.8, wake_after=0.1,
                  backlog=behind(3_000_000, 2_000_000), hold=0.5)
    assert 0.8 <= took < 10


def test_the_first_pass_after_a_start_waits_for_the_reading(tmp_path, monkeypatch):
    from kafka_audit.jobs.audit.audit_job import _holding
    from kafka_audit.jobs.consume import consume_job

    start = time.monotonic()
    assert _holding(behind(None), start + 60)  # the first batch has not ended
    # ... past the hold while the consume thread says its query runs (bench/catchup.py:
    # a 30-minute outage's first batch ran 2 minutes, and a pass begun at 60 s took the
    # cores from it)
    starting = behind(None)
    assert _holding(starting, start - 1)
    starting.beat()
    assert _holding(starting, start - 1)
    monkeypatch.setattr(consume_job, "BEAT_STALE", 0.0)  # the thread has stopped saying so
    assert not _holding(starting, start - 1)  # ... the hold caps the wait
    monkeypatch.undo()
    assert _holding(behind(3_000_000, 2_000_000), start - 1)  # gaining: however long
    # a query's first batch that left records, ended past the hold (a 10-minute outage's,
    # bench/catchup.py: the pass begun then judged beside the rest of the reading)
    assert _holding(behind(None, 2_785_869), start - 1)
    assert not _holding(behind(None, 2_785_869, 2_900_000), start - 1)  # then growing
    assert not _holding(behind(3_000_000, 0), start + 60)  # read
    assert not _holding(behind(0), start + 60)  # nothing to read (a query idle from start)
    # 0: no waiting for a backlog, even one being caught up
    assert waited(tmp_path, interval=30, wake_after=0.1, backlog=behind(3_000_000, 2_000_000),
                  hold=0) < 10


def test_a_batch_run_again_after_a_restart_does_not_end_the_first_pass_s_wait(tmp_path):
    """A restart runs the batch the stop interrupted again first, from its checkpointed
    plan: its progress names no latest offsets. Taken as 0 left, it let the first pass
    judge a 10-minute outage's 3.2 M writes beside their reading (bench/catchup.py)."""
    from kafka_audit.jobs.audit.audit_job import _holding

    start = time.monotonic()
    backlog = behind(None)
    backlog.update(None)  # the re-run batch's progress
    assert backlog.state() == (None, False)
    assert _holding(backlog, start + 60)
    backlog.update(2_000_000)  # the first batch planned after the restart
    backlog.update(1_000_000)
    assert _holding(backlog, start - 1)  # gaining: however long
    backlog.update(None)  # a batch that says nothing leaves a known state as it was
    assert backlog.state() == (1_000_000, True)


def test_writes_that_settle_during_a_backlog_are_judged_when_they_do(tmp_path):
    took = waited(tmp_path, interval=30, due_in=0.8, wake_after=0.1,
                  backlog=behind(2_000_000))
    assert 0.8 <= took < 10


def test_a_backlog_s_reading_is_logged_batch_by_batch_and_when_it_ends():
    backlog = Backlog()

    def batch(n: int, read: int, left: int | None) -> str | None:
        return backlog.update(left, {"batch": n, "records": read, "seconds": 4.0,
                                     "sink_seconds": 3.0})

    assert batch(1, 1_000, 0) is None  # steady state: nothing to say
    line = batch(2, 1_000_000, 2_500_000)
    assert line == ("consume: batch 2 read 1,000,000 records in 4.0 s (3.0 s of it "
                    "folding and committing); 2,500,000 left to read")
    assert batch(3, 0, None) is None  # a batch that does not say: nothing ends
    assert "1,500,000 left" in batch(4, 1_000_000, 1_500_000)
    end = batch(5, 1_500_000, 0)
    assert end.startswith("consume: backlog read: 3,500,000 records in ")
    took = float(end.split(" in ")[1].split(" s ")[0])
    assert 4.0 <= took < 60  # from the first batch's start, which began 4 s before its end
    assert batch(6, 1_000, 0) is None  # read: quiet again
    assert backlog.state() == (0, False)
    batch(7, 1_000_000, 900_000)
    backlog.reset(known=False)  # the query failed and started again: its own reading
    batch(8, 1_000_000, 500_000)
    assert batch(9, 500_000, 0).startswith("consume: backlog read: 1,500,000 records")
