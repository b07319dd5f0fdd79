"""Loss latency in ``kafka-audit run`` (settle 10 s): an acks=1 leader kill, its lost writes
answered over REST equal to the ground truth (a full read), and the time from the kill
until all of them were answered printed; each lost write suspected over
REST (``/v1/suspicions``) before it was judged, every suspected write lost (the plugin
names the acknowledging broker: exact), each suspicion confirmed once settled. The
figures themselves are judged by ``bench/latency.py`` (10 kills, p95 against settle +
15 s, and 5 s from the change to the first suspected; ``--second-after`` kills the new
leader of a partition still failing over), never here: wall times on a shared machine
are no test. One kill here, the CI's part; the benchmark's runs, by hand, are in
docs/benchmarks.md with their dates."""

import threading
import time

import httpx

from kafka_audit.producers.load import LoadSpec, run_load
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.groundtruth import acked_but_missing, full_read_stamps
from kafka_audit.scenarios.harness import (
    Component,
    fetch_lost,
    fetch_suspicions,
    lost_messages,
    produce_with_leader_kill,
)

SETTLE = 10
KILLS = 1


def summary(base: str, topic: str) -> dict | None:
    try:
        r = httpx.get(f"{base}/v1/summary", params={"topic": topic}, timeout=30)
    except httpx.HTTPError:
        return None
    return r.json() if r.status_code == 200 else None


class Answers:
    """Asks the loss findings and the suspicions every second; notes when each lost write
    is first answered, and when each write is first suspected."""

    def __init__(self, base: str, topic: str) -> None:
        self.base, self.topic = base, topic
        self.first_seen: dict[tuple[int, int, int], float] = {}
        self.first_suspected: dict[tuple[int, int, int], float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(1):
            t = time.time()
            try:
                for w in lost_messages(fetch_suspicions(self.base, self.topic)):
                    self.first_suspected.setdefault(w, t)
                for w in lost_messages(fetch_lost(self.base, self.topic)):
                    self.first_seen.setdefault(w, t)
            except Exception:  # noqa: BLE001 - a busy API is asked again
                pass


def test_each_kills_losses_are_answered_over_rest_and_equal_ground_truth(cluster, settings,
                                                                          topic):
    settings = settings.model_copy(update={
        "audit": settings.audit.model_copy(update={"settle_seconds": SETTLE,
                                                   "interval_seconds": 5})})
    base = f"http://{settings.api.host}:{settings.api.port}"
    run_load(settings, LoadSpec(topic=topic, rate=0, count=1000, acks="all"))
    kills: list[float] = []

    def progress(msg: str) -> None:
        print(msg, flush=True)
        if msg.startswith("SIGKILL"):
            kills.append(time.time())

    answers = Answers(base, topic)
    with Component(settings, "run") as service:
        wait_until(lambda: (s := summary(base, topic)) and s["acked"] == 1000
                   and s["pending"] == 0, 300, "the service to judge the first writes", every=1)
        answers.thread.start()
        producers = [produce_with_leader_kill(settings, cluster, topic, acks="1", rate=5000,
                                              before_kill=4, after_kill=SETTLE,
                                              progress=progress)[0] for _ in range(KILLS)]
        stamps = full_read_stamps(cluster.bootstrap, topic)
        truth = [acked_but_missing(p.record, p.producer_id, p.run_id, stamps)
                 for p in producers]
        lost = sorted(w for t in truth for w in t)
        try:
            wait_until(lambda: all(w in answers.first_seen for w in lost)
                       and (s := summary(base, topic)) is not None and s["pending"] == 0,
                       300, "every lost write answered over REST and nothing pending", every=2)
        finally:
            answers.stop.set()
            answers.thread.join(10)
        found = lost_messages(fetch_lost(base, topic))
        suspected = fetch_suspicions(base, topic)
        log = service.output()
    assert len(kills) == KILLS and all(truth), \
        "each acks=1 leader kill is expected to lose writes"
    assert found == lost, (len(found), len(lost), log[-3000:])
    # suspected at the fail-over: exactly the lost writes, each before it was judged, and
    # every suspicion confirmed by the read
    assert lost_messages(suspected) == lost, (len(lost_messages(suspected)), len(lost))
    assert {s["state"] for s in suspected} == {"confirmed"}
    assert all(answers.first_suspected[w] < answers.first_seen[w] for w in lost)
    for n, (k, t) in enumerate(zip(kills, truth, strict=True), 1):
        answered = max(answers.first_seen[w] for w in t) - k
        suspected_after = min(answers.first_suspected[w] for w in t) - k
        print(f"kill {n}: {len(t)} writes lost, all answered over REST {answered:.1f}s after "
              f"the kill, the first suspected {suspected_after:.1f}s after it (settle "
              f"{SETTLE} s; bench/latency.py judges these figures)")
