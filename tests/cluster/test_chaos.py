"""The auditor's own chaos, the CI-sized part (a kill of each kind; the 20-a-kind runs
are not built yet): parts of ``kafka-audit run`` SIGKILLed while producers write, each kill followed
by writes it must still judge.

* the Spark driver JVM: the consume stream and the audit loop fail on the dead session;
  the service starts a new JVM and both go on from their checkpoints;
* the API child: the service starts it again;
* the whole service (its API child and JVM die with it): started again by hand, as
  systemd would.

After all of them every acknowledged write (each producer's own record) has exactly one
verdict, ``confirmed`` (no broker fault, acks=all): none lost from the ledger, none
judged twice, no false finding.
"""

import os
import signal
import threading
from pathlib import Path

from kafka_audit.producers.load import LoadSpec, run_load
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.harness import Component, expand_rows, findings_of

from .test_service import api_child, judged


def children(pid: int) -> list[int]:
    return [int(c) for t in Path(f"/proc/{pid}/task").iterdir()
            for c in (t / "children").read_text().split()]


def spark_driver(pid: int) -> int | None:
    """The service's Spark driver JVM (not the watcher's metadata-log tail)."""
    for c in children(pid):
        try:
            cmd = Path(f"/proc/{c}/cmdline").read_bytes()
        except OSError:
            continue
        if b"java" in cmd.split(b"\0")[0] and b"pyspark-shell" in cmd:
            return c
    return None


def writes_meanwhile(settings, topic: str, producer_id: str, count: int, producers: list):
    """``count`` writes at 1,000 msg/s in a thread (the kill lands while they go on)."""
    def run() -> None:
        producers.append(run_load(settings, LoadSpec(
            topic=topic, rate=1000, count=count, acks="all", producer_id=producer_id),
            keep_record=True))

    thread = threading.Thread(target=run, name=f"load-{producer_id}")
    thread.start()
    return thread


def test_killed_parts_of_the_service_lose_and_double_nothing(cluster, settings, topic):
    producers: list = []
    producers.append(run_load(settings, LoadSpec(topic=topic, rate=0, count=3000, acks="all",
                                                 producer_id="before"), keep_record=True))
    with Component(settings, "run") as service:
        wait_until(lambda: judged(settings, topic, 3000), 240, "3000 writes judged")

        jvm = spark_driver(service.proc.pid)
        assert jvm is not None, "no Spark driver JVM under the service"
        load = writes_meanwhile(settings, topic, "jvm-kill", 3000, producers)
        os.kill(jvm, signal.SIGKILL)
        load.join(120)
        wait_until(lambda: spark_driver(service.proc.pid) not in (None, jvm), 120,
                   "a new Spark driver JVM")
        wait_until(lambda: judged(settings, topic, 6000), 300,
                   "the writes around the JVM's kill judged on the new one")

        api = wait_until(lambda: api_child(service.proc.pid), 30, "the API process")
        load = writes_meanwhile(settings, topic, "api-kill", 2000, producers)
        os.kill(api, signal.SIGKILL)
        load.join(120)
        wait_until(lambda: (a := api_child(service.proc.pid)) and a != api, 60,
                   "a new API process")
        wait_until(lambda: judged(settings, topic, 8000), 240, "8000 writes judged")

        load = writes_meanwhile(settings, topic, "service-kill", 3000, producers)
        service.proc.send_signal(signal.SIGKILL)
        service.proc.wait(30)
        load.join(120)
        log = service.output()
    assert "the Spark driver JVM is gone: starting a new one" in log
    with Component(settings, "run"):  # as systemd would start it again
        wait_until(lambda: judged(settings, topic, 11000), 300, "11000 writes judged")
    found = findings_of(settings, topic)
    assert {r["kind"] for r in found} == {"confirmed"}  # nothing lost, duplicated, false
    assert len(producers) == 4
    for p in producers:  # every acknowledged write in the ledger and judged exactly once
        mine = [r for r in found if r["run_id"] == p.run_id]
        assert expand_rows(mine, "seq") == sorted(seq for seq, *_ in p.record), p.producer_id
