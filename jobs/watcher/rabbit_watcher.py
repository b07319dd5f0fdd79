"""The RabbitMQ watcher: nodes, partitions, and each watched queue's leader and synchronised
replicas, from the management API into ``cluster_events``.

Every ``interval`` the watcher asks every node's management API for ``/api/nodes`` (each
node's own view: which nodes run, since when, and which it is partitioned from) and the
first that answers for each watched queue (``/api/queues/<vhost>/<name>``), and writes
what changed (:func:`diff_rabbit`, pure) under the queue's key (``schemas/systems.py``),
its ``partition`` 0, ``source`` ``rabbit:management``. Nodes are numbered as given, or
by the endpoint each answers at (the management API's ``/api/overview`` names its node:
endpoint N's node is N, as ``rabbitmq.nodes`` numbers them for the publishers); a node
no endpoint has named yet carries no number. ``detail`` names them.

==================  ===========================================================
kind                when
==================  ===========================================================
``first_seen``      the queue seen for the first time (or again after it was gone)
``leader_change``   another node leads it (a classic queue's master, a quorum
                    queue's or a stream's leader); ``isr``: the leader and the
                    replicas holding every message (a classic queue's synchronised
                    mirrors; a quorum queue's online members)
``unclean_election``  beside a change: the new leader was not among those
                    (``ha-promote-on-failure=always`` promoting an unsynchronised
                    mirror): what only the old one held is gone
``offline``         no node leads it
``isr_shrink``, ``isr_expand``  a replica stopped or started holding every message
``rabbit_queue_gone``  the queue no longer exists (deleted, or gone with its node)
``rabbit_node_down``, ``rabbit_node_up``  a node stopped or started running as the others
                    see it (``detail``: ``node``; up: ``restarted`` when it came back
                    from a stop or its uptime went back: a new VM, what it held only in
                    memory gone)
``rabbit_partition``, ``rabbit_partition_end``  a node is cut off from others
                    (``detail``: ``node``, ``partitions``), and no longer: what a node
                    says (RabbitMQ fills it in once the cut heals), or two nodes'
                    views disagreeing crosswise while both answer (the cut, live)
==================  ===========================================================

Node and partition events are written under every watched queue's key: each queue's
evidence holds what its nodes went through (no RabbitMQ event is cluster-wide: Kafka's
partitions never see them). The causes they name: ``jobs/core/rabbit_rules.py``.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kafka_audit.schemas.events import (
    FIRST_SEEN,
    ISR_EXPAND,
    ISR_SHRINK,
    LEADER_CHANGE,
    OFFLINE,
    RABBIT_NODE_DOWN,
    RABBIT_NODE_UP,
    RABBIT_PARTITION,
    RABBIT_PARTITION_END,
    RABBIT_QUEUE_GONE,
    UNCLEAN_ELECTION,
)
from kafka_audit.schemas.systems import parse_rabbit_key
from kafka_audit.store import append_rows, check_table

if TYPE_CHECKING:
    from kafka_audit.status import StatusWriter

__all__ = ["QueueView", "NodeView", "diff_rabbit", "RabbitWatcher", "SOURCE"]

log = logging.getLogger(__name__)
SOURCE = "rabbit:management"


@dataclass(frozen=True)
class QueueView:
    """One queue as the management API shows it (node names)."""

    leader: str | None
    replicas: tuple[str, ...]
    synced: tuple[str, ...]  # the leader and the replicas holding every message


@dataclass(frozen=True)
class NodeView:
    running: bool
    uptime_ms: int | None = None
    partitions: tuple[str, ...] = ()


def queue_view(info: dict) -> QueueView:
    """A ``/api/queues/<vhost>/<name>`` answer as a :class:`QueueView`."""
    if info.get("type") == "quorum":
        leader = info.get("leader")
        replicas = tuple(sorted(info.get("members") or ()))
        synced = tuple(sorted(info.get("online") or ()))
    else:  # classic (mirrored or not), stream
        leader = info.get("node") or info.get("leader")
        mirrors = info.get("slave_nodes") or ()
        replicas = tuple(sorted({*(mirrors or ()), *((leader,) if leader else ())}))
        synced = tuple(sorted({*(info.get("synchronised_slave_nodes") or ()),
                               *((leader,) if leader else ())}))
    return QueueView(leader, replicas, synced)


def _row(at: datetime, key: str, kind: str, numbers: dict[str, int], **kw) -> dict:
    def num(name):
        return None if name is None else numbers.get(name)

    def nums(names):
        return None if names is None else sorted(n for n in map(num, names) if n is not None)

    detail = kw.pop("detail", None)
    return {"event_time": at, "topic": key, "partition": 0, "kind": kind,
            "leader": num(kw.get("leader")), "previous_leader": num(kw.get("previous_leader")),
            "isr": nums(kw.get("isr")), "previous_isr": nums(kw.get("previous_isr")),
            "replicas": nums(kw.get("replicas")), "leader_epoch": None, "source": SOURCE,
            "until": None, "log_end": None,
            "detail": None if detail is None else json.dumps(detail, sort_keys=True),
            "eligible_leader_replicas": None, "previous_eligible_leader_replicas": None}


def merge_views(views: list[list[dict]]) -> dict[str, NodeView]:
    """The answering nodes' ``/api/nodes`` rows merged into one view: a node runs if one
    view says so (a partitioned node's own side sees it running); its partitions are what
    any view says (RabbitMQ 3.10 fills them in only once the cut heals), and the cut seen
    live: two views that disagree crosswise (one sees X running and Y not, the other Y
    running and X not) are the two sides of a cut between X and Y. A node booting back
    sees the others running, a stopped node has no view: neither looks like a cut."""
    merged: dict[str, dict] = {}
    running: list[dict[str, bool]] = []
    for rows in views:
        running.append({r["name"]: bool(r.get("running")) for r in rows})
        for r in rows:
            m = merged.setdefault(r["name"], {"running": False, "uptime": None,
                                              "partitions": set()})
            if r.get("running"):
                m["running"] = True
                if r.get("uptime") is not None:
                    m["uptime"] = max(m["uptime"] or 0, r["uptime"])
            m["partitions"] |= set(r.get("partitions") or ())
    for v in running:
        for w in running:
            for x in (x for x, up in v.items() if up and w.get(x) is False):
                for y in (y for y, up in w.items() if up and v.get(y) is False):
                    merged[x]["partitions"].add(y)
                    merged[y]["partitions"].add(x)
    return {k: NodeView(v["running"], v["uptime"], tuple(sorted(v["partitions"])))
            for k, v in merged.items()}


def diff_rabbit(key: str, numbers: dict[str, int], before: QueueView | None,
                after: QueueView | None, nodes_before: dict[str, NodeView],
                nodes_after: dict[str, NodeView], at: datetime,
                seen: bool = True) -> list[dict]:
    """The events between two views of one queue and of the nodes (module docstring).
    ``before`` None: not seen before (``seen`` False) or gone; ``after`` None: gone now."""
    rows: list[dict] = []
    if after is not None and (before is None):
        rows.append(_row(at, key, FIRST_SEEN, numbers, leader=after.leader, isr=after.synced,
                         replicas=after.replicas, detail={"leader": after.leader}))
    elif after is None and before is not None and seen:
        rows.append(_row(at, key, RABBIT_QUEUE_GONE, numbers, previous_leader=before.leader,
                         previous_isr=before.synced, replicas=before.replicas))
    elif after is not None and before is not None:
        if after.leader != before.leader:
            kind = OFFLINE if after.leader is None else LEADER_CHANGE
            names = {"leader": after.leader, "previous_leader": before.leader}
            rows.append(_row(at, key, kind, numbers, leader=after.leader,
                             previous_leader=before.leader, isr=after.synced,
                             previous_isr=before.synced, replicas=after.replicas,
                             detail=names))
            if after.leader is not None and before.synced and after.leader not in before.synced:
                rows.append(_row(at, key, UNCLEAN_ELECTION, numbers, leader=after.leader,
                                 previous_leader=before.leader, isr=after.synced,
                                 previous_isr=before.synced, replicas=after.replicas,
                                 detail={**names, "unsynchronised": True}))
        elif set(after.synced) != set(before.synced):
            kind = ISR_SHRINK if set(after.synced) < set(before.synced) else ISR_EXPAND
            rows.append(_row(at, key, kind, numbers, leader=after.leader, isr=after.synced,
                             previous_isr=before.synced, replicas=after.replicas))
    for name in sorted(set(nodes_before) | set(nodes_after)):
        b, a = nodes_before.get(name), nodes_after.get(name)
        if a is None or b is None:
            continue
        if b.running and not a.running:
            rows.append(_row(at, key, RABBIT_NODE_DOWN, numbers, leader=name,
                             detail={"node": name}))
        elif a.running and (not b.running or (a.uptime_ms is not None
                                              and b.uptime_ms is not None
                                              and a.uptime_ms < b.uptime_ms)):
            rows.append(_row(at, key, RABBIT_NODE_UP, numbers, leader=name,
                             detail={"node": name, "restarted": True}))
        if a.partitions and not b.partitions:
            rows.append(_row(at, key, RABBIT_PARTITION, numbers, leader=name,
                             detail={"node": name, "partitions": sorted(a.partitions)}))
        elif b.partitions and not a.partitions:
            rows.append(_row(at, key, RABBIT_PARTITION_END, numbers, leader=name,
                             detail={"node": name}))
    return rows


class RabbitWatcher:
    """Polls the management APIs (``endpoints``: node number -> its base URL,
    ``http://host:port``) for ``keys`` and appends what changed to ``cluster_events``."""

    def __init__(self, table_path: str, endpoints: dict[int, str], keys: list[str],
                 username: str, password: str, interval: float = 0.5,
                 timeout: float = 2.0, numbers: dict[str, int] | None = None) -> None:
        self.table = table_path
        check_table(table_path, "cluster_events")
        self.endpoints = dict(endpoints)
        self.targets = {k: parse_rabbit_key(k) for k in keys}
        self.interval, self.timeout = interval, timeout
        self._auth = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
        self.queues: dict[str, QueueView | None] = {}
        self.nodes: dict[str, NodeView] = {}
        #: per key, the nodes' view its last events were written against
        self._seen_by: dict[str, dict[str, NodeView]] = {}
        #: node name -> number (given, or learnt from the endpoints: :meth:`_learn_numbers`)
        self.numbers: dict[str, int] = dict(numbers or {})
        self._fixed = numbers is not None
        self.polls = 0

    def _get(self, node: int, path: str):
        req = urllib.request.Request(f"{self.endpoints[node]}/api/{path}",
                                     headers={"Authorization": self._auth})
        with urllib.request.urlopen(req, timeout=self.timeout) as r:
            return json.loads(r.read())

    def _nodes(self) -> dict[str, NodeView] | None:
        """Every answering node's view, merged (:func:`merge_views`)."""
        views = []
        for n in sorted(self.endpoints):
            try:
                views.append(self._get(n, "nodes"))
            except (OSError, ValueError):
                continue
        return merge_views(views) if views else None

    def _queue(self, key: str) -> tuple[bool, QueueView | None]:
        """(answered, the view: None when the queue does not exist)."""
        t = self.targets[key]
        path = (f"queues/{urllib.parse.quote(t.vhost, safe='')}/"
                f"{urllib.parse.quote(t.name, safe='')}")
        for n in sorted(self.endpoints):
            try:
                return True, queue_view(self._get(n, path))
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return True, None
            except (OSError, ValueError):
                continue
        return False, None

    def _learn_numbers(self) -> None:
        """Each endpoint not yet named: the node it answers for is its number."""
        named = set(self.numbers.values())
        for n in sorted(set(self.endpoints) - named):
            try:
                name = self._get(n, "overview").get("node")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(name, str) and name not in self.numbers:
                self.numbers[name] = n

    def poll_once(self) -> list[dict]:
        at = datetime.now(UTC)
        nodes = self._nodes()
        if nodes is None:
            return []
        if not self._fixed and set(nodes) - set(self.numbers):
            self._learn_numbers()
        rows: list[dict] = []
        for key in self.targets:
            answered, view = self._queue(key)
            if not answered:
                continue
            seen = key in self.queues
            # against the nodes as this key last saw them: a poll that had no answer for
            # the queue leaves its node events to the next one that has
            rows += diff_rabbit(key, self.numbers, self.queues.get(key), view,
                                self._seen_by.get(key, self.nodes or nodes), nodes, at, seen)
            self.queues[key] = view
            self._seen_by[key] = nodes
        self.nodes = nodes
        if rows:
            append_rows(self.table, "cluster_events", rows)
        self.polls += 1
        return rows

    def run(self, stop: threading.Event, status: StatusWriter | None = None) -> None:
        """Poll every ``interval`` until ``stop`` is set; ``status``: its status file, a
        poll that no node answered or that failed to be written is a failing step."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                polls = self.polls
                rows = self.poll_once()
                if status is not None:
                    if self.polls > polls:
                        status.ok(polls=self.polls, events=len(rows),
                                  nodes_running=sum(v.running for v in self.nodes.values()))
                    else:
                        status.failing("no management API answered")
            except Exception as exc:  # noqa: BLE001 - the next poll tries again
                log.warning("rabbit watcher poll failed: %s", exc)
                if status is not None:
                    status.failing(f"{type(exc).__name__}: {exc}")
            stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
