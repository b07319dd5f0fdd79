"""The demo: produce with acks=1, SIGKILL the partition leader mid-stream, audit, serve.

Steps, each printed as it happens:

1. fetch the pinned jars (once) and bring the three-node cluster up;
2. create a fresh RF=3 topic; start the cluster watcher;
3. produce stamped records with ``acks=1``; after a few seconds freeze the
   followers of partition 0 for half a second (they stay in the ISR), SIGKILL
   its leader, resume the followers, wait for a new leader, restart the killed node (it
   truncates its divergent tail when it rejoins) and keep producing;
4. read the topics with the Spark consume job and run audit passes until no
   verdict is pending;
5. start the REST API (uvicorn), fetch the loss findings over HTTP and
   print it next to the ground truth: the producer's own acks that a final
   full read (plain confluent-kafka consumer, no Spark) cannot find;
6. stop everything (unless ``--keep-running``). Exit code 0 only if they match.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import urllib.request
from dataclasses import dataclass

from kafka_audit.deploy.cluster import LocalCluster, wait_until
from kafka_audit.groundtruth import acked_but_missing, full_read_stamps
from kafka_audit.settings import Settings

__all__ = ["run_demo", "DemoResult", "produce_with_leader_kill", "audit_until_settled",
           "fetch_lost", "lost_messages", "expand_rows"]


@dataclass
class DemoResult:
    topic: str
    acked: int
    truth_lost: list[tuple[int, int, int]]  # (partition, offset, seq)
    api_lost: list[tuple[int, int, int]]
    killed_node: int

    @property
    def match(self) -> bool:
        return self.truth_lost == self.api_lost


def say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def produce_with_leader_kill(settings: Settings, cluster: LocalCluster, topic: str,
                             acks: str = "1", before_kill: float = 4, after_kill: float = 4,
                             rate: float = 20000, lag_seconds: float = 0.5, progress=say):
    """Produce to ``topic``; SIGKILL partition 0's leader mid-stream; restart it; go on.

    Returns (producer, killed node). The producer's ``record`` holds its acks.
    """
    from kafka_audit.producers.load import LoadSpec, run_load

    stop = threading.Event()
    holder: dict = {}
    spec = LoadSpec(topic=topic, rate=rate, acks=acks, retries=2, producer_id="demo")

    def produce():
        holder["p"] = run_load(settings, spec, stop=stop, keep_record=True)

    t = threading.Thread(target=produce, name="demo-producer")
    t.start()
    try:
        time.sleep(before_kill)  # let a stream build up before the fault: part of the scenario
        leader = cluster.leader_of(topic, 0)
        followers = [n for n in cluster.running() if n != leader]
        # Followers on loopback replicate within milliseconds, so an acks=1 leader rarely holds
        # unreplicated writes at the instant it dies. Freezing the followers for a moment
        # (shorter than replica.lag.time.max.ms: they stay in the ISR) makes them lag for sure;
        # the leader keeps acknowledging with acks=1 meanwhile. Then the leader is SIGKILLed
        # and the followers resume: one of them is elected without the acked tail.
        progress(f"SIGSTOP followers {followers} of {topic}-0 for {lag_seconds}s")
        for n in followers:
            cluster.signal(n, signal.SIGSTOP)
        try:
            time.sleep(lag_seconds)  # the lag window itself
            progress(f"SIGKILL node {leader}, leader of {topic}-0")
            cluster.kill(leader)
        finally:
            for n in followers:
                cluster.signal(n, signal.SIGCONT)
        def new_leader() -> int | None:
            now = cluster.leader_of(topic, 0)
            return None if now in (-1, leader) else now

        new = wait_until(new_leader, 60, f"a new leader of {topic}-0")
        progress(f"node {new} leads {topic}-0 now; restarting node {leader}")
        cluster.start(leader)
        wait_until(lambda: leader in cluster.registered_brokers(), 60,
                   f"node {leader} to rejoin")
        wait_until(lambda: all(leader in p.isr for p in cluster.partitions(topic)), 60,
                   f"node {leader} back in every ISR of {topic}")
        progress(f"node {leader} rejoined every ISR")
        time.sleep(after_kill)  # keep producing after the heal: the frontier must pass the loss
    finally:
        stop.set()
        t.join(120)
    return holder["p"], leader


def audit_until_settled(spark, settings: Settings, topic: str, timeout: float = 180,
                        progress=say, pattern: str | None = None):
    """Consume to the end and audit until no write of ``topic`` is pending.

    ``pattern`` (a Java regex) narrows what the consume job reads; default: ``topic`` only.
    """
    import pyarrow.compute as pc

    from kafka_audit.jobs.audit_job import ClusterLookups, run_audit_pass
    from kafka_audit.jobs.consume_job import start_consume
    from kafka_audit.jobs.io import read_table

    deadline = time.monotonic() + timeout
    lookups = ClusterLookups(settings)
    while True:
        start_consume(spark, settings, pattern or re.escape(topic), once=True).awaitTermination()
        summary = run_audit_pass(spark, settings, lookups=lookups)
        progress(summary.line())
        state = read_table(settings.table_path("partition_state"), "partition_state",
                           where=(pc.field("pass_id") == summary.pass_id)
                           & (pc.field("topic") == topic))
        pending = sum(state.column("pending").to_pylist())
        if state.num_rows and pending == 0:
            return summary
        if time.monotonic() > deadline:
            raise TimeoutError(f"{pending} writes of {topic} still pending after {timeout}s")
        time.sleep(min(settings.audit.settle_seconds, 5) / 2 or 0.5)


def fetch_lost(base_url: str, topic: str) -> list[dict]:
    """Every loss finding of ``topic`` (lost and lost after being seen), over HTTP."""
    items, page = [], 1
    while True:
        url = (f"{base_url}/v1/findings?topic={topic}&kind=lost&kind=lost_after_seen"
               f"&page={page}&page_size=1000")
        with urllib.request.urlopen(url, timeout=30) as resp:
            body = json.load(resp)
        items.extend(body["items"])
        if len(items) >= body["total"] or not body["items"]:
            return items
        page += 1


def expand_rows(rows: list[dict], *cols: str) -> list:
    """Run rows (``offset``/``seq`` first, ``count``) as one value (one column asked) or
    tuple per message, sorted: findings, ledger and consumed rows alike."""
    out = sorted(tuple(r[c] + k if c in ("offset", "seq") else r[c] for c in cols)
                 for r in rows for k in range(r["count"]))
    return [t[0] for t in out] if len(cols) == 1 else out


def lost_messages(items: list[dict]) -> list[tuple[int, int, int]]:
    """Loss findings (ranges) as one ``(partition, offset, seq)`` per lost write, sorted."""
    return expand_rows(items, "partition", "offset", "seq")


class ApiServer:
    """uvicorn in a background thread, for the demo and the tests."""

    def __init__(self, settings: Settings) -> None:
        import uvicorn

        from kafka_audit.auditor_api.main import create_app
        from kafka_audit.settings import get_settings

        app = create_app()
        app.dependency_overrides[get_settings] = lambda: settings  # serve these tables
        self.port = settings.api.port
        self.base_url = f"http://{settings.api.host}:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host=settings.api.host,
                                                    port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="api", daemon=True)

    def __enter__(self) -> ApiServer:
        self.thread.start()
        wait_until(lambda: self.server.started, 30, "the API server to start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def run_demo(settings: Settings, keep_running: bool = False) -> DemoResult:
    from kafka_audit.deploy.jvm import ensure_jars
    from kafka_audit.jobs.spark import get_spark
    from kafka_audit.jobs.watcher import ClusterWatcher

    t0 = time.monotonic()
    say("fetching pinned jars (skipped when cached)")
    ensure_jars()
    cluster = LocalCluster(settings)
    say("bringing up the 3-node KRaft cluster")
    cluster.up(say)
    topic = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    cluster.create_topic(topic, partitions=3, replication=3)
    say(f"created {topic}: 3 partitions, RF=3")
    watcher = ClusterWatcher(settings)
    wthread, wstop = watcher.start_thread()
    spark = None
    try:
        say("producing with acks=1; the leader of partition 0 will be killed mid-stream")
        producer, killed = produce_with_leader_kill(settings, cluster, topic)
        say(f"producer done: sent {producer.sent}, acked {producer.acked}, "
            f"failed {producer.failed}; {producer.ledger.rows_written} ledger rows for "
            f"{producer.ledger.reports_written} delivery reports")
        say("starting Spark; consuming and auditing until every verdict is settled")
        spark = get_spark(settings, "kafka-audit-demo")
        audit_until_settled(spark, settings, topic)
        say("ground truth: a full read of the topic with a plain consumer")
        found = full_read_stamps(cluster.bootstrap, topic)
        truth = acked_but_missing(producer.record or [], producer.producer_id, producer.run_id,
                                  found)
        with ApiServer(settings) as api:
            items = fetch_lost(api.base_url, topic)
            say(f"GET {api.base_url}/v1/findings?topic={topic}&kind=lost&kind=lost_after_seen "
                f"-> {len(items)} ranges")
        api_lost = lost_messages(items)
        result = DemoResult(topic, producer.acked, truth, api_lost, killed)
        _print_result(result, items)
        say(f"demo took {time.monotonic() - t0:.0f}s")
        return result
    finally:
        wstop.set()
        wthread.join(10)
        if spark is not None and not keep_running:
            spark.stop()
        if keep_running:
            say(f"leaving the cluster running ({cluster.bootstrap}); "
                "`kafka-audit cluster down` stops it; `kafka-audit serve` serves the findings")
        else:
            say("stopping the cluster")
            cluster.down()


def _print_result(r: DemoResult, items: list[dict]) -> None:
    print()
    print(f"  topic {r.topic}: {r.acked} writes acknowledged (acks=1), leader node "
          f"{r.killed_node} SIGKILLed mid-stream")
    print(f"  lost according to the auditor's REST API : {len(r.api_lost)}")
    print(f"  acked but absent from a final full read  : {len(r.truth_lost)}")
    for item in items[:10]:
        last = item["offset"] + item["count"] - 1
        print(f"    {item['kind']} p{item['partition']} offsets {item['offset']}..{last} "
              f"seqs {item['seq']}..{item['seq'] + item['count'] - 1} "
              f"({item['subkind'] or 'seen, then replaced'}, cause: {item['cause']})")
    if len(items) > 10:
        print(f"    ... and {len(items) - 10} more ranges")
    print(f"  verdict: {'MATCH' if r.match else 'MISMATCH'}"
          + ("" if r.match else f" api-only {sorted(set(r.api_lost) - set(r.truth_lost))[:5]} "
             f"truth-only {sorted(set(r.truth_lost) - set(r.api_lost))[:5]}"))
    print()
