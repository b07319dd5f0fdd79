"""The audited topics the consume job subscribes to, from the ack ledger read
incrementally (real Delta tables): each look reads only the files appended since the
last, a compaction reads nothing, and the answer equals a whole read of the ledger."""

from kafka_audit.jobs.consume.consume_job import LedgerTopics, audited_pattern
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows, compact, read_table

from ..support.rows import ledger_row


def ack(topic: str, seq: int) -> dict:
    return ledger_row(seq, topic)


def whole(path: str) -> set[str]:
    return set(read_table(path, "acks", columns=["topic"]).column("topic").to_pylist())


def test_the_ledger_s_topics_are_read_from_the_files_appended_since(tmp_path):
    s = Settings(home=tmp_path)
    path = s.table_path("acks")
    seen = LedgerTopics(path)
    assert seen.read() == set() and audited_pattern(s, seen) == audited_pattern(s)
    for i, topic in enumerate(["orders", "orders", "events"]):
        append_rows(path, "acks", [ack(topic, i)])
    assert seen.read() == {"orders", "events"} == whole(path) and seen.files_read == 3
    assert seen.read() == {"orders", "events"} and seen.files_read == 3  # nothing new
    for i in range(10):
        append_rows(path, "acks", [ack("orders", 10 + i)])
    seen.read()
    assert seen.files_read == 13
    assert compact(path)["numFilesRemoved"] == 13
    assert seen.read() == whole(path) and seen.files_read == 13  # the compaction: none read
    append_rows(path, "acks", [ack("payments", 99)])
    assert seen.read() == {"orders", "events", "payments"} == whole(path)
    assert seen.files_read == 14 and seen.full_reads == 0
    # the pattern names the same topics as one from a whole read
    assert audited_pattern(s, seen) == audited_pattern(s)


class _Query:
    """A streaming query's ``status`` as Spark gives it (``None``: it has ended)."""

    def __init__(self, status: dict | None) -> None:
        self._status = status

    @property
    def status(self) -> dict:
        if self._status is None:
            raise RuntimeError("the query has ended")
        return self._status


def _active(active: bool | None) -> _Query:
    return _Query(None if active is None else {"isTriggerActive": active})


def test_a_restart_on_new_topics_waits_for_the_gap_between_two_micro_batches():
    from kafka_audit.jobs.consume.consume_job import _between_batches

    assert not _between_batches(_active(True), "t1", "t1")  # the batch seen then still runs
    assert _between_batches(_active(False), "t1", "t1")  # none runs
    assert _between_batches(_active(True), "t1", "t2")  # one ended since: the next just began
    assert _between_batches(_active(True), None, "t1")
    assert _between_batches(_active(None), "t1", "t1")  # ending: its error comes next


def test_a_query_is_idle_only_once_a_trigger_found_nothing_to_read():
    from kafka_audit.jobs.consume.consume_job import _idle

    def status(message, data=False, active=False):
        return _Query({"message": message, "isDataAvailable": data,
                       "isTriggerActive": active})

    # still starting, both flags off: not idle (the audit's first pass must wait for it)
    assert not _idle(status("Initializing StreamExecution"))
    assert not _idle(status("Initializing sources"))
    # a trigger looked and found nothing, then waits for the next one
    assert _idle(status("Waiting for data to arrive"))
    assert _idle(status("Waiting for next trigger"))
    assert not _idle(status("Getting offsets from KafkaV2[SubscribePattern[t]]", active=True))
    assert not _idle(status("Processing new data", data=True, active=True))
    assert not _idle(_Query(None))  # ending: its error comes next


def test_a_query_started_again_after_an_error_leaves_what_is_left_unknown(tmp_path, monkeypatch):
    """After a failure the backlog reads 0 (the passes may run while nothing is read); the
    next query runs the interrupted batch again first, whose progress says nothing of what
    is left: until a batch it planned has ended, the first pass must wait again."""
    import threading

    from kafka_audit.jobs.consume import consume_job
    from kafka_audit.jobs.consume.consume_job import Backlog, run_consume

    backlog, stop, seen = Backlog(), threading.Event(), []

    class Failing:
        lastProgress = None

        def awaitTermination(self, timeout):  # noqa: N802 - Spark's name
            raise RuntimeError("every broker unreachable")

        def stop(self):
            pass

    def start(*args, **kwargs):
        seen.append(backlog.state())
        if len(seen) == 1:
            backlog.update(2_000_000)  # as a batch of the first query had said
            return Failing()
        stop.set()
        return _Query(None)

    monkeypatch.setattr(consume_job, "start_consume", start)
    monkeypatch.setattr(consume_job, "stop_quietly", lambda *a: None)
    settings = Settings(home=tmp_path).model_copy(update={"outage": Settings().outage.model_copy(
        update={"retry_seconds": 0.01})})
    run_consume(object(), settings, pattern="^t$", stop=stop, backlog=backlog)
    assert seen == [(None, False), (None, False)]


def test_the_ledger_s_topics_are_looked_at_every_topic_refresh_seconds(tmp_path, monkeypatch):
    """The consume loop waits on its query no longer than ``spark.topic_refresh_seconds``
    between two looks at the ledger's topics: with its 2 s waits a new topic was looked for
    2-4 s apart whatever the setting, its reading that much later (bench/sustained.py)."""
    import threading
    import time

    from kafka_audit.jobs.consume import consume_job
    from kafka_audit.jobs.consume.consume_job import run_consume

    waits, looks, stop = [], [], threading.Event()

    class Running:
        lastProgress = None

        def __init__(self, pause: bool = True) -> None:
            self.pause = pause

        def awaitTermination(self, timeout):  # noqa: N802 - Spark's name
            waits.append(timeout)
            if self.pause:
                time.sleep(timeout)
            if len(waits) == 6 or not self.pause:
                stop.set()
            return False

        def stop(self):
            pass

    def pattern(settings, ledger=None):
        looks.append(time.monotonic())
        return "^t$"

    monkeypatch.setattr(consume_job, "start_consume", lambda *a, **k: Running())
    monkeypatch.setattr(consume_job, "stop_quietly", lambda *a: None)
    monkeypatch.setattr(consume_job, "audited_pattern", pattern)
    base = Settings(home=tmp_path)
    settings = base.model_copy(update={"spark": base.spark.model_copy(
        update={"topic_refresh_seconds": 0.1, "warm_up": False})})
    run_consume(object(), settings, stop=stop)
    assert waits and max(waits) <= 0.1
    assert len(looks) >= 4  # the query's pattern, then a look every wait or two

    # a pattern given (``consume --topics``): nothing to look for, its waits are 2 s
    waits.clear()
    stop.clear()
    monkeypatch.setattr(consume_job, "start_consume", lambda *a, **k: Running(pause=False))
    run_consume(object(), settings, pattern="^t$", stop=stop)
    assert waits == [2.0]
