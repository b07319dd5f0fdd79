"""What an audit pass asks the audited cluster: cleanup policies, log ends, direct re-reads.

Every answer may be partial, and a pass goes on with what it got (see
:class:`ClusterLookups`). Tests that replay recorded histories pass an object
with the same three methods instead.

Kept warm across the passes of one loop: one admin client, and one re-read consumer
(a new consumer costs a connection and a metadata round trip before its first fetch).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time

from kafka_audit.clients import admin_client, cluster_config
from kafka_audit.jobs.core.model import ReadRun, Reread
from kafka_audit.schemas.systems import RABBITMQ, kafka_topics, system_of
from kafka_audit.settings import Settings

__all__ = ["ClusterLookups", "POLICY_FRESH_SECONDS", "POLICY_STALE_SECONDS",
           "POLICY_WAIT_SECONDS", "POLICY_RETRY_SECONDS"]

log = logging.getLogger(__name__)

#: a topic's cleanup.policy is asked again once its answer is this old
POLICY_FRESH_SECONDS = 30.0
#: ... and, while it cannot be asked, the last answer serves until it is this old
POLICY_STALE_SECONDS = 300.0
#: a pass waits this long for a topic's first answer (the ask's own timeout too)
POLICY_WAIT_SECONDS = 10.0
#: an ask that failed is made again this much later
POLICY_RETRY_SECONDS = 5.0


class ClusterLookups:
    """What a pass asks the audited cluster: cleanup policies, log ends, direct re-reads.

    Every answer may be partial: a topic whose policy cannot be read is
    *unknown* (verdicts that rest on it wait), a partition whose log end cannot
    be read gets none this pass, a range that cannot be re-read is asked again
    next pass. Tests that replay recorded histories pass their own lookups.
    """

    def __init__(self, settings: Settings) -> None:
        from kafka_audit.stamp_key import stamp_mac

        self.settings = settings
        # the stamp key, read once (a key file that is no key: an error now): re-reads
        # verify stamps' MACs with it
        self._mac = stamp_mac(settings) if settings is not None else None
        self._client = None
        self._consumer = None
        self._policies: dict[str, tuple[bool, float]] = {}  # topic -> (compacted, answered at)
        self._asking: dict[str, concurrent.futures.Future] = {}  # topic -> its ask in flight
        self._asked: dict[str, float] = {}  # topic -> when it was last asked

    def _admin(self):
        """One admin client for every pass that shares these lookups (kept referenced while
        its futures resolve)."""
        if self._client is None:
            self._client = admin_client(cluster_config(self.settings))
        return self._client

    def policies(self, topics: set[str]) -> tuple[frozenset[str], frozenset[str]]:
        """(compacted topics, topics whose policy is unknown).

        A topic's ``cleanup.policy`` is asked again once its last answer is
        :data:`POLICY_FRESH_SECONDS` old, and the pass does not wait for that answer: it
        uses the last one, and the new one serves a later pass. Right after a broker dies
        the admin client may wait out a request to it (10 s), and that wait would delay the
        very passes that judge the losses. While the cluster cannot answer, an answer up to
        :data:`POLICY_STALE_SECONDS` old still serves; older, the topic is unknown. Only a
        topic never answered yet makes the pass wait, up to :data:`POLICY_WAIT_SECONDS`; an
        ask that failed is made again :data:`POLICY_RETRY_SECONDS` later."""
        from confluent_kafka.admin import ConfigResource

        topics = kafka_topics(topics)
        if not topics:
            return frozenset(), frozenset()
        self._harvest()
        now = time.monotonic()
        ask = sorted(t for t in topics if t not in self._asking
                     and now - self._policies.get(t, (None, -1e18))[1] >= POLICY_FRESH_SECONDS
                     and now - self._asked.get(t, -1e18) >= POLICY_RETRY_SECONDS)
        if ask:
            futures = self._admin().describe_configs([ConfigResource("topic", t) for t in ask],
                                                     request_timeout=POLICY_WAIT_SECONDS)
            for res, fut in futures.items():
                self._asking[res.name], self._asked[res.name] = fut, now
        first = [self._asking[t] for t in topics if t in self._asking and t not in self._policies]
        if first:
            concurrent.futures.wait(first, timeout=POLICY_WAIT_SECONDS)
            self._harvest()
        compacted, unknown = set(), set()
        for t in topics:
            known = self._policies.get(t)
            if known is None or now - known[1] > POLICY_STALE_SECONDS:
                unknown.add(t)
            elif known[0]:
                compacted.add(t)
        return frozenset(compacted), frozenset(unknown)

    def _harvest(self) -> None:
        """Take the answers of the policy asks that finished."""
        for topic, fut in list(self._asking.items()):
            if not fut.done():
                continue
            del self._asking[topic]
            try:
                policy = fut.result(timeout=0).get("cleanup.policy")
            except Exception as exc:  # noqa: BLE001 - an older answer, or unknown
                log.warning("cleanup.policy of %s unknown: %s", topic, exc)
                continue
            compacted = policy is not None and "compact" in (policy.value or "")
            self._policies[topic] = (compacted, time.monotonic())

    def log_ends(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The high watermark of each partition that answers (a RabbitMQ key: none)."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        kafka = kafka_topics({t for t, _ in partitions})
        partitions = [p for p in partitions if p[0] in kafka]
        if not partitions:
            return {}
        admin = self._admin()
        # short: a partition whose leader just died answers next pass (its failed writes
        # wait for their horizon), the rest of the pass does not wait for it
        futures = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest()
                                      for t, p in partitions}, request_timeout=3)
        out = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = int(fut.result(timeout=5).offset)
            except Exception as exc:  # noqa: BLE001 - no horizon this pass; asked again
                log.warning("log end of %s/%s unknown: %s", tp.topic, tp.partition, exc)
        return out

    def reread(self, requests: list[Reread]) -> list[ReadRun]:
        """Every requested range read directly, one answer per offset, within
        ``steady.rejudge_timeout_seconds`` in all (each range within
        ``audit.reread_timeout_seconds``): the pass judges the answers at once, and a
        range not answered in time is asked again by the next pass."""
        from kafka_audit.jobs.audit.reread import _reread_one

        if not requests:
            return []
        out: list[ReadRun] = []
        rabbit = [q for q in requests if system_of(q.topic) == RABBITMQ]
        if rabbit:
            out += lookup_consumed(self.settings.table_path("consumed"), rabbit)
            requests = [q for q in requests if system_of(q.topic) != RABBITMQ]
        budget = self.settings.steady.rejudge_timeout_seconds
        deadline = time.monotonic() + budget
        for n, req in enumerate(requests):
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("re-reads: %d of %d ranges left for the next pass (over %.0fs)",
                            len(requests) - n, len(requests), budget)
                break
            for attempt in (1, 2):  # a consumer that knew a broker now dead: once more, fresh
                try:
                    out.extend(_reread_one(self._reader(), req, min(
                        self.settings.audit.reread_timeout_seconds,
                        deadline - time.monotonic()), self._mac))
                    break
                except Exception as exc:  # noqa: BLE001 - asked again next pass; others go on
                    self.close_reader()
                    if attempt == 2 or deadline - time.monotonic() <= 0:
                        log.warning("re-read of %s/%s [%s, %s) failed: %s", req.topic,
                                    req.partition, req.offset, req.end, exc)
                        break
        return out

    def _reader(self):
        """The re-read consumer, made once (``jobs/audit/reread.py``'s settings)."""
        from confluent_kafka import Consumer

        from kafka_audit.clients import consumer_config

        if self._consumer is None:
            self._consumer = Consumer(consumer_config(
                cluster_config(self.settings), "kafka-audit-reread",
                **{"auto.offset.reset": "error", "enable.partition.eof": True}))
        return self._consumer

    def close_reader(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # noqa: BLE001 - being replaced anyway
                pass
            self._consumer = None


def lookup_consumed(path: str, requests: list[Reread]) -> list[ReadRun]:
    """RabbitMQ's re-read (``jobs/core/rabbit_rules.py``): for each request, what the
    reader wrote to ``consumed`` of seqs ``offset .. end-1`` of its producer run (the
    reader's own rows: no earlier lookup's copies), as reads of ``source`` ``reread``,
    and one ``lookup`` read saying the lookup was made (found or not)."""
    from datetime import UTC, datetime

    import pyarrow.compute as pc

    from kafka_audit.jobs.core.rabbit_rules import LOOKUP
    from kafka_audit.store import read_table

    asked = [q for q in requests if q.run_id is not None]
    if not asked:
        return []
    try:  # one read for every key asked (a pass's lookups); failed: asked again next pass
        rows = read_table(path, "consumed", where=pc.field("topic").isin(
            sorted({q.topic for q in asked}))
            & pc.field("run_id").isin(sorted({q.run_id for q in asked}))
            & (pc.field("source") != "reread")
            & pc.field("status").isin(["record", "redelivered"])
            # the stamp rule's reads only (as a pass takes them in): a record whose
            # body fails its checksum is no write's
            & pc.field("stamped")
            & (pc.field("checksum_ok").is_null() | pc.field("checksum_ok"))).to_pylist()
    except Exception as exc:  # noqa: BLE001 - the writes wait, nothing is judged on them
        log.warning("lookup of %d RabbitMQ writes' reads in consumed failed: %s",
                    len(asked), exc)
        return []
    runs: dict[tuple, list[dict]] = {}
    for r in rows:
        runs.setdefault((r["topic"], r["producer_id"], r["run_id"]), []).append(r)
    now = datetime.now(UTC)
    out: list[ReadRun] = []
    for q in asked:
        out += [ReadRun(q.topic, r["partition"], r["offset"], r["count"], r["producer_id"],
                        r["run_id"], r["seq"], r["read_time"], source="reread",
                        status=r["status"])
                for r in runs.get((q.topic, q.producer_id, q.run_id), ())
                if r["seq"] < q.end and q.offset < r["seq"] + r["count"]]
        out.append(ReadRun(q.topic, q.partition, -1, q.end - q.offset, q.producer_id,
                           q.run_id, q.offset, now, source="reread", status=LOOKUP))
    return out

