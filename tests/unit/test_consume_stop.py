"""The consume query's quiet stop: the JVM's log of a refused batch is silenced before the
refusal can happen (``stop_quietly``)."""

import threading

from kafka_audit.jobs.consume import consume_job


def test_the_jvm_loggers_are_silenced_before_a_batch_is_refused(monkeypatch):
    seen = []  # what happened, in order: the loggers silenced, halting set, the query stopped
    monkeypatch.setattr(consume_job, "_silence_jvm_loggers",
                        lambda spark, names: seen.append(("silenced", tuple(names))))

    class Halting(threading.Event):
        def set(self):
            seen.append(("halting",))
            super().set()

    class Query:  # between micro-batches: nothing runs
        isActive = True  # noqa: N815 - Spark's name
        status = {"isTriggerActive": False}
        lastProgress = {"batchId": 2}  # noqa: N815 - Spark's name

        def stop(self):
            seen.append(("stopped",))

        def exception(self):
            return None

    consume_job.stop_quietly(None, Query(), Halting(), wait=0)
    assert seen == [("silenced", (consume_job._STREAMING_LOGGER,)), ("halting",),
                           ("stopped",)]
