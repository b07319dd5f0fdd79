"""Cluster watcher (first cut): polls metadata, writes changes to ``cluster_events``.

Every ``watch.interval_seconds`` it asks the cluster for each audited
partition's leader, replicas and ISR (``AdminClient.list_topics``) and, when
the leader changes, the new leader epoch (``list_offsets(latest)``: metadata
carries no epoch). A difference from the previous poll becomes one row per
change: ``first_seen``, ``leader_change``, ``offline`` (no leader),
``isr_shrink``, ``isr_expand``. Rows are appended with delta-rs.

A poll sees the state at one instant: changes shorter than the interval can be
missed, which is why the audit never relies on events to *find* a loss, only
to attribute one.

Command: ``kafka-audit watch``.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import UTC, datetime

from kafka_audit.jobs.io import append_rows, upgrade_table
from kafka_audit.settings import Settings

__all__ = ["ClusterWatcher", "diff_partition"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionView:
    leader: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]


def diff_partition(before: PartitionView | None, after: PartitionView) -> list[str]:
    """The event kinds that turn ``before`` into ``after`` (pure, unit-tested)."""
    if before is None:
        return ["first_seen"] + (["offline"] if after.leader < 0 else [])
    kinds = []
    if after.leader != before.leader:
        kinds.append("offline" if after.leader < 0 else "leader_change")
    if set(after.isr) < set(before.isr) or (set(after.isr) - set(before.isr)
                                            and set(before.isr) - set(after.isr)):
        kinds.append("isr_shrink")
    if set(after.isr) > set(before.isr):
        kinds.append("isr_expand")
    return kinds


class ClusterWatcher:
    def __init__(self, settings: Settings, topic_prefix_excluded: str = "_") -> None:
        self.settings = settings
        self.table = settings.table_path("cluster_events")
        upgrade_table(self.table, "cluster_events")
        self.excluded = topic_prefix_excluded
        self.state: dict[tuple[str, int], PartitionView] = {}
        self.events_written = 0
        self._admin = None

    def _client(self):
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            from kafka_audit.clients import client_logger

            self._admin = AdminClient({"bootstrap.servers": self.settings.cluster.bootstrap,
                                       "logger": client_logger()})
        return self._admin

    def _epochs(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if not keys:
            return {}
        req = {TopicPartition(t, p): OffsetSpec.latest() for t, p in keys}
        out: dict[tuple[str, int], int | None] = {}
        for tp, fut in self._client().list_offsets(req, request_timeout=5).items():
            try:
                epoch = fut.result().leader_epoch
                out[(tp.topic, tp.partition)] = None if epoch is None or epoch < 0 else epoch
            except Exception:  # noqa: BLE001 - a partition without leader has no epoch
                out[(tp.topic, tp.partition)] = None
        return out

    def poll_once(self) -> list[dict]:
        md = self._client().list_topics(timeout=5)
        now = datetime.now(UTC)
        rows: list[dict] = []
        changed: list[tuple[str, int]] = []
        for name, topic in md.topics.items():
            if name.startswith(self.excluded) or topic.error is not None:
                continue
            for pid, p in topic.partitions.items():
                key = (name, pid)
                view = PartitionView(p.leader, tuple(sorted(p.isrs)), tuple(p.replicas))
                before = self.state.get(key)
                for kind in diff_partition(before, view):
                    rows.append({
                        "event_time": now, "topic": name, "partition": pid, "kind": kind,
                        "leader": view.leader,
                        "previous_leader": before.leader if before else None,
                        "isr": list(view.isr), "previous_isr": list(before.isr) if before else None,
                        "replicas": list(view.replicas), "leader_epoch": None,
                        "source": "watcher:metadata",
                    })
                    changed.append(key)
                self.state[key] = view
        if rows:
            epochs = self._epochs(sorted(set(changed)))
            for r in rows:
                r["leader_epoch"] = epochs.get((r["topic"], r["partition"]))
            append_rows(self.table, "cluster_events", rows)
            self.events_written += len(rows)
        return rows

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.poll_once()
            except Exception as exc:  # noqa: BLE001 - a broker outage must not stop the watcher
                log.warning("watcher poll failed: %s", exc)
            stop.wait(self.settings.watch.interval_seconds)

    def start_thread(self) -> tuple[threading.Thread, threading.Event]:
        stop = threading.Event()
        t = threading.Thread(target=self.run, args=(stop,), name="cluster-watcher", daemon=True)
        t.start()
        return t, stop
