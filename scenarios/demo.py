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
   print them next to the ground truth: the producer's own acks that a final
   full read (plain confluent-kafka consumer, no Spark) cannot find; likewise
   the duplicates and reorders found, next to those in the full read;
6. stop everything (unless ``--keep-running``). Exit code 0 only if all match.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kafka_audit.scenarios.cluster import LocalCluster
from kafka_audit.scenarios.groundtruth import acked_but_missing, full_read_stamps
from kafka_audit.scenarios.harness import (
    ApiServer,
    Secondaries,
    audit_until_settled,
    fetch_lost,
    lost_messages,
    produce_with_leader_kill,
    say,
    secondaries,
)
from kafka_audit.settings import Settings

__all__ = ["run_demo", "DemoResult"]


@dataclass
class DemoResult:
    topic: str
    acked: int
    truth_lost: list[tuple[int, int, int]]  # (partition, offset, seq)
    api_lost: list[tuple[int, int, int]]
    killed_node: int
    secondary: Secondaries  # duplicates and reorders, found and true

    @property
    def match(self) -> bool:
        return self.truth_lost == self.api_lost and self.secondary.match


def run_demo(settings: Settings, keep_running: bool = False) -> DemoResult:
    from kafka_audit.jars import ensure_jars
    from kafka_audit.jobs.spark import get_spark
    from kafka_audit.jobs.watcher.watcher import ClusterWatcher

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
        result = DemoResult(topic, producer.acked, truth, api_lost, killed,
                            secondaries(settings, cluster.bootstrap, topic, [producer]))
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
    lost_match = r.truth_lost == r.api_lost
    print(f"  losses: {'MATCH' if lost_match else 'MISMATCH'}"
          + ("" if lost_match else f" api-only {sorted(set(r.api_lost) - set(r.truth_lost))[:5]} "
             f"truth-only {sorted(set(r.truth_lost) - set(r.api_lost))[:5]}"))
    for line in r.secondary.lines():
        print(f"  {line}")
    print(f"  duplicates and reorders: {'MATCH' if r.secondary.match else 'MISMATCH'}")
    print(f"  verdict: {'MATCH' if r.match else 'MISMATCH'}")
    print()
