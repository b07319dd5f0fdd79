"""Health that tells the truth about ``kafka-audit run`` (issue 36, items 13, 14 and 16), as
a user meets it: SIGTERM while micro-batches run stops the service with one log line, no
traceback and no Spark driver JVM left behind; started again, ``/readyz`` is not ready on
the statuses the stopped process left, only once the new process wrote its own; and the
consume lag is the log end minus what the consume job committed, measured while the job
is stalled (its last progress said 0).
"""

import os
import signal
import threading
from pathlib import Path

import httpx

from kafka_audit.producers.load import LoadSpec, run_load
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.harness import Component

READY_COMPONENTS = ("watcher", "consume", "audit")


def readyz(settings) -> httpx.Response | None:
    try:
        return httpx.get(f"http://{settings.api.host}:{settings.api.port}/readyz", timeout=10)
    except httpx.HTTPError:
        return None


def spark_jvm(pid: int) -> int:
    """The Spark driver JVM the service started (a child of one of its threads)."""
    children = [int(c) for t in Path(f"/proc/{pid}/task").iterdir()
                for c in (t / "children").read_text().split()]
    return next(c for c in children
                if b"org.apache.spark.deploy.SparkSubmit" in Path(f"/proc/{c}/cmdline")
                .read_bytes())


def running(pid: int) -> bool:
    """``pid`` is a live process (not gone, not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def lag(settings) -> int | None:
    r = readyz(settings)
    return None if r is None else r.json()["behind"]["consume_lag_offsets"]


def test_sigterm_stops_quietly_and_a_restart_is_ready_only_on_its_own_statuses(
        cluster, settings, topic):
    # micro-batches back to back (a short trigger, writes all along): SIGTERM lands in one
    settings = settings.model_copy(update={"spark": settings.spark.model_copy(
        update={"consume_trigger_seconds": 0.2})})
    stop_load = threading.Event()
    load = threading.Thread(target=run_load, args=(settings, LoadSpec(
        topic=topic, rate=2000, seconds=600, acks="all")), kwargs={"stop": stop_load})
    load.start()
    try:
        with Component(settings, "run") as first:
            wait_until(lambda: (r := readyz(settings)) is not None and r.status_code == 200,
                       180, "the first run to be ready")
            jvm = spark_jvm(first.proc.pid)
            code = first.stop(timeout=60)
            jvm_survived = running(jvm)  # the moment the service has exited
            out = first.output()
    finally:
        stop_load.set()
        load.join()
    assert code == 0, out[-3000:]
    assert not jvm_survived, f"the Spark driver JVM {jvm} outlived the service"
    stopping = out[out.index("stopping"):]
    assert "Traceback" not in stopping and "py4j" not in stopping, stopping[:3000]
    assert len(stopping.splitlines()) < 15, stopping[:3000]  # a few lines, each one line
    # the batch running then was let end (small batches: well within the stop's wait)
    assert "consume: stopped between micro-batches" in stopping, stopping[:3000]

    # started again: ready only on statuses the new process wrote
    with Component(settings, "run") as second:
        seen: list[httpx.Response] = []

        def ready() -> httpx.Response | None:
            r = readyz(settings)
            if r is not None:
                seen.append(r)
            return r if r is not None and r.status_code == 200 else None

        first_ready = wait_until(ready, 180, "the second run to be ready", every=0.1).json()
        for name in READY_COMPONENTS:
            assert first_ready["components"][name]["pid"] == second.proc.pid, first_ready
        not_ready = [r.json() for r in seen if r.status_code == 503]
        # the API answered before the new consume job wrote a status: the old one was refused
        assert any(b["components"]["consume"]["state"] == "not running" for b in not_ready), \
            [b["components"]["consume"] for b in not_ready]


def test_the_consume_lag_is_measured_while_the_job_is_stalled(cluster, settings, topic):
    run_load(settings, LoadSpec(topic=topic, rate=0, count=1000, acks="all"))
    with Component(settings, "run") as service:
        wait_until(lambda: lag(settings) == 0, 180, "the consume job to read all 1000 writes")
        jvm = spark_jvm(service.proc.pid)
        os.kill(jvm, signal.SIGSTOP)  # the consume job stalls: its last progress caught up
        try:
            run_load(settings, LoadSpec(topic=topic, rate=0, count=5000, acks="all",
                                        producer_id="b"))
            wait_until(lambda: lag(settings) == 5000, 60,
                       "the lag to be the 5000 writes the stalled job has not read")
            body = readyz(settings).json()
            assert body["behind"]["consume_lag"]["partitions"] == 3, body["behind"]
        finally:
            os.kill(jvm, signal.SIGCONT)
        wait_until(lambda: lag(settings) == 0, 120, "the lag to fall back to 0")
