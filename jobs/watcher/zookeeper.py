"""A ZooKeeper-era cluster's (Kafka 3.x) timeline, from ZooKeeper's own state.

Before KRaft, the controller kept each partition's leader, leader epoch and ISR in a
znode, ``/brokers/topics/<topic>/partitions/<p>/state`` (JSON: ``leader``,
``leader_epoch``, ``isr``, ``controller_epoch``, and ``leader_recovery_state`` 1 after an
unclean election), the replicas in ``/brokers/topics/<topic>``, the live brokers as
ephemeral znodes under ``/brokers/ids`` and the active controller in ``/controller``.
:class:`ZooKeeperTimeline` watches them read-only (``kazoo``; a watch fires once, and
kazoo sets it again) and hands each state it reads to the same fold as the KRaft
metadata log's records (:class:`~kafka_audit.jobs.watcher.metadata_log.MetadataFold`), as
the record KRaft would have written: so the rows, their kinds and the rules are the
same, with the source ``zookeeper``:

- a partition's state: ``PARTITION_RECORD`` (its time: the znode's ``mtime``, the
  ZooKeeper leader's clock when the controller wrote it);
- a topic: ``TOPIC_RECORD`` (its id from the topic's znode), ``REMOVE_TOPIC_RECORD``;
- a broker's registration appearing: ``REGISTER_BROKER_RECORD`` unfenced (at the
  znode's ``ctime``); disappearing (its session ended: a kill, a cut from ZooKeeper):
  ``FENCE_BROKER_RECORD`` at the time it was seen gone;
- the controller: ``LEADER_CHANGE`` (at the ``/controller`` znode's ``ctime``);
- a topic's durability settings changed (``/config/topics/<topic>``): ``CONFIG_RECORD``.

What it can miss, unlike the metadata log: ZooKeeper keeps no history, only each znode's
current state and a version counting its writes. Two writes between a watch firing and
the read after it are seen as one (the first's rows are not written); the version's jump
says so: counted in :attr:`ZooKeeperTimeline.skipped` and logged. Elections in ZooKeeper
mode are the controller's, from the ISR it wrote to ZooKeeper: a leader outside it only
with ``unclean.leader.election.enable`` (marked by ``leader_recovery_state``), as the
classic rules say; there are no eligible leader replicas.

Fresh while its ZooKeeper session is connected: the watcher's polls give the partition
events otherwise.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from kafka_audit.jobs.watcher.metadata_log import (
    DURABILITY,
    RECOVERING,
    TOPIC_RESOURCE,
    FoldedTimeline,
    MetadataFold,
)
from kafka_audit.schemas.events import ZOOKEEPER_STATE

__all__ = ["ZooKeeperTimeline", "SOURCE", "partition_record", "zookeeper_connect"]

log = logging.getLogger(__name__)

#: the ``source`` of the rows read from ZooKeeper's state: the controller's writes, at the
#: ZooKeeper leader's time
SOURCE = ZOOKEEPER_STATE


def zookeeper_connect(settings) -> str | None:
    """Where the watcher reads a ZooKeeper-era cluster's state: ``watch.zookeeper_connect``,
    or, for the local cluster in ZooKeeper mode (no profile bootstrap), its server."""
    if settings.watch.zookeeper_connect is not None:
        return settings.watch.zookeeper_connect or None  # "": off
    c = settings.cluster
    if settings.profile.bootstrap is None and c.zookeeper:
        return f"{c.host}:{c.zookeeper_port}"
    return None


def partition_record(topic_id: str, partition: int, data: bytes, replicas: list[int],
                     mtime_ms: int) -> dict:
    """The ``PARTITION_RECORD`` a partition's state znode (its JSON ``data``) stands for."""
    state = json.loads(data)
    return {"type": "PARTITION_RECORD", "time": mtime_ms, "data": {
        "topicId": topic_id, "partitionId": partition, "leader": int(state["leader"]),
        "isr": [int(b) for b in state.get("isr") or ()], "replicas": list(replicas),
        "leaderEpoch": int(state.get("leader_epoch", 0)),
        "leaderRecoveryState": RECOVERING if state.get("leader_recovery_state") == RECOVERING
        else 0}}


class ZooKeeperTimeline(FoldedTimeline):
    """ZooKeeper's state of a ZooKeeper-mode cluster, watched read-only at ``connect``
    (``host:port[,host:port...][/chroot]``) and folded into ``cluster_events`` rows."""

    def __init__(self, connect: str, fold: MetadataFold, timeout: float = 10.0) -> None:
        super().__init__(fold)
        self.connect, self.timeout = connect, timeout
        self._zk: Any = None
        self._topics: dict[str, str] = {}  # name -> its id
        self._replicas: dict[tuple[str, int], list[int]] = {}
        self._watched: set[tuple[str, int]] = set()  # partitions whose state is watched
        #: each state znode's (czxid, version) last read: a znode made anew (a topic deleted
        #: and made again) starts its versions again
        self._versions: dict[tuple[str, int], tuple[int, int]] = {}
        self._configs_read: set[str] = set()  # topics whose settings were read once
        self._brokers: set[int] | None = None
        #: states written that no read saw (two writes between a watch and its read)
        self.skipped = 0
        self.errors = 0  # znodes whose data could not be read (counted, logged)
        #: every callback's body runs under it: kazoo calls a watch's first read on the
        #: thread that made it and each re-read after a reconnection on a thread of its own
        self._lock_cb = threading.RLock()
        self._stopping = threading.Event()
        self._children: list = []  # the ChildrenWatches: dead ones make the timeline stale

    # ---- lifecycle ----------------------------------------------------------------
    def start(self) -> None:
        """Connect and set the watches; a ZooKeeper not reachable yet is tried again in a
        thread of its own (the polls give the events meanwhile), kazoo then keeps the
        session and the watches across reconnections."""
        from kazoo.client import KazooClient

        # kazoo says every failed reconnection (a line a second while ZooKeeper is down):
        # this timeline says when its session is lost and when it is back, once each
        logging.getLogger("kazoo").setLevel(logging.ERROR)
        self._zk = KazooClient(hosts=self.connect, read_only=True, timeout=self.timeout)
        self._zk.add_listener(self._session)
        try:
            self._connect()
        except Exception as exc:  # noqa: BLE001 - tried again below, never fatal
            log.warning("zookeeper: %s not reachable (%s); tried again, the polls give the "
                        "partition events meanwhile", self.connect,
                        (str(exc).splitlines() or [type(exc).__name__])[0])
            threading.Thread(target=self._connect_later, name="zookeeper-connect",
                             daemon=True).start()

    def _connect(self) -> None:
        self._zk.start(timeout=self.timeout)
        # a watch of a znode that is not there dies at once: a chroot that names no Kafka
        # cluster, or a ZooKeeper no broker has registered in yet, is tried again
        missing = [p for p in ("/brokers/ids", "/brokers/topics") if not self._zk.exists(p)]
        if missing:
            self._zk.stop()
            raise ConnectionError(f"no {' or '.join(missing)} under {self.connect}: not a "
                                  f"Kafka cluster's ZooKeeper (its chroot?), or no broker "
                                  f"has registered yet")
        self._zk.DataWatch("/controller", _locked(self, self._controller))
        self._children = [self._zk.ChildrenWatch("/brokers/ids", _locked(self, self._broker_ids)),
                          self._zk.ChildrenWatch("/brokers/topics",
                                                 _locked(self, self._topic_names))]

    def _connect_later(self) -> None:
        wait = 1.0
        while not self._stopping.wait(wait):
            try:
                self._connect()
                if self._stopping.is_set():  # stopped while connecting
                    self._zk.stop()
                    return
                log.info("zookeeper: connected to %s; its state is the timeline again",
                         self.connect)
                return
            except Exception as exc:  # noqa: BLE001 - tried again
                log.debug("zookeeper: still not reachable: %s", exc)
                wait = min(wait * 2, 10.0)

    def stop(self) -> None:
        self._stopping.set()
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception as exc:  # noqa: BLE001 - stopping anyway
                log.debug("zookeeper: stop: %s", exc)

    def _session(self, state) -> None:
        """kazoo's session state changes (its own thread: log lines only)."""
        if state != self._said:
            self._said = state
            (log.info if state == "CONNECTED" else log.warning)(
                "zookeeper: session %s (%s)%s", state.lower(), self.connect,
                "" if state == "CONNECTED" else ": the polls give the partition events")

    _said = "CONNECTED"

    def fresh(self, now: float | None = None) -> bool:
        from kazoo.protocol.states import KazooState

        return (self._zk is not None and self._zk.state == KazooState.CONNECTED
                and bool(self._children)
                and not any(getattr(w, "_stopped", False) for w in self._children))

    # ---- what the watches see (each record folded by :meth:`take`) --------------------
    def _controller(self, data: bytes | None, stat) -> None:
        if data is None:
            return  # no controller until one is elected: its znode names it then
        try:
            broker = int(json.loads(data)["brokerid"])
        except (ValueError, KeyError, TypeError) as exc:
            self._unreadable("/controller", data, exc)
            return
        self.take({"type": "LEADER_CHANGE", "time": stat.ctime,
                      "data": {"leaderId": broker}})

    def _broker_ids(self, children: list[str]) -> None:
        ids = {int(c) for c in children if c.isdigit()}
        first, before, self._brokers = self._brokers is None, self._brokers or set(), ids
        now_ms = int(time.time() * 1000)
        for broker in sorted(ids - before):
            stat = None
            if not first:  # its registration's own time (the first read's fold quietly)
                try:
                    stat = self._zk.exists(f"/brokers/ids/{broker}")
                except Exception:  # noqa: BLE001 - the session lost meanwhile: when seen
                    pass
            self.take({"type": "REGISTER_BROKER_RECORD", "snapshot": first,
                          "time": stat.ctime if stat is not None else now_ms,
                          "data": {"brokerId": broker, "fenced": False}})
        for broker in sorted(before - ids):
            self.take({"type": "FENCE_BROKER_RECORD", "time": now_ms,
                          "data": {"id": broker}})

    def _topic_names(self, children: list[str]) -> None:
        for topic in sorted(set(children) - set(self._topics)):
            self._topics[topic] = topic  # its id once its znode is read
            self._zk.DataWatch(f"/brokers/topics/{topic}",
                               _locked(self, self._topic, topic))
            self._zk.DataWatch(f"/config/topics/{topic}", _locked(self, self._config, topic))

    def _forget(self, topic: str) -> None:
        """A topic gone (deleted, or made anew under another id): its remove record, and
        nothing of it kept (its partitions' watches end at their next call)."""
        tid = self._topics.pop(topic, None)
        if tid is not None:
            self.take({"type": "REMOVE_TOPIC_RECORD", "time": int(time.time() * 1000),
                          "data": {"topicId": tid}})
        for key in [k for k in self._replicas if k[0] == topic]:
            self._replicas.pop(key, None)
            self._watched.discard(key)
            self._versions.pop(key, None)
        self._configs_read.discard(topic)
        self.fold.configs.pop(topic, None)

    def _topic(self, topic: str, data: bytes | None, stat) -> bool | None:
        if data is None:  # deleted: its partitions' watches end with their znodes
            if topic in self._topics:
                self._forget(topic)
            return False
        try:
            znode = json.loads(data)
            assignment = {int(p): [int(b) for b in r]
                          for p, r in (znode.get("partitions") or {}).items()}
        except (ValueError, TypeError, AttributeError) as exc:
            self._unreadable(f"/brokers/topics/{topic}", data, exc)
            return None
        tid = str(znode.get("topic_id") or topic)
        known = self._topics.get(topic)
        if known not in (None, topic, tid):  # deleted and made again between two reads
            self._forget(topic)
            known = None
        if known != tid or not any(k[0] == topic for k in self._replicas):  # (one lock)
            self._topics[topic] = tid
            self.take({"type": "TOPIC_RECORD", "time": stat.ctime,
                          "data": {"topicId": tid, "name": topic}})
        for p, replicas in sorted(assignment.items()):
            self._replicas[(topic, p)] = replicas
            if (topic, p) in self._watched:
                continue
            self._watched.add((topic, p))
            self._zk.DataWatch(f"/brokers/topics/{topic}/partitions/{p}/state",
                               _locked(self, self._state, topic, p, tid))
        return None

    def _state(self, topic: str, partition: int, tid: str, data: bytes | None, stat
               ) -> bool | None:
        key = (topic, partition)
        if key not in self._watched or self._topics.get(topic) != tid:
            return False  # the topic was deleted (and maybe made again: another watch's)
        if data is None:
            return None  # not written yet: the controller writes it after the topic
        last = self._versions.get(key)
        if last is not None and last[0] != stat.czxid:
            last = None  # a znode made anew
        if last is not None and stat.version > last[1] + 1:
            self.skipped += stat.version - last[1] - 1
            log.info("zookeeper: %d state change(s) of %s-%d written between two reads were "
                     "not seen (%d so far)", stat.version - last[1] - 1, topic, partition,
                     self.skipped)
        if last is not None and stat.version <= last[1]:
            return None  # seen already (a watch set again on a reconnection)
        self._versions[key] = (stat.czxid, stat.version)
        try:
            rec = partition_record(self._topics.get(topic, topic), partition, data,
                                   self._replicas.get(key, []), stat.mtime)
        except (ValueError, KeyError, TypeError) as exc:
            self._unreadable(f"/brokers/topics/{topic}/partitions/{partition}/state", data, exc)
            return None
        self.take(rec)
        return None

    def _config(self, topic: str, data: bytes | None, stat) -> bool | None:
        if data is None:
            return False if topic not in self._topics else None
        try:
            config = json.loads(data).get("config") or {}
        except (ValueError, TypeError, AttributeError) as exc:
            self._unreadable(f"/config/topics/{topic}", data, exc)
            return None
        first = topic not in self._configs_read  # what it was set to before: no change
        self._configs_read.add(topic)
        for name in DURABILITY:
            value = config.get(name)
            self.take({"type": "CONFIG_RECORD", "time": stat.mtime, "snapshot": first,
                          "data": {"resourceType": TOPIC_RESOURCE, "resourceName": topic,
                                   "name": name, "value": value}})
        return None

    def _unreadable(self, path: str, data: bytes, exc: Exception) -> None:
        self.errors += 1
        log.warning("zookeeper: %s could not be read (%s), skipped (%d so far): %.200r",
                    path, exc, self.errors, data)


def _locked(timeline: ZooKeeperTimeline, fn, *args):
    """``fn`` with ``args`` first, under the timeline's lock, as a watch's callback: kazoo
    calls it with ``(data, stat, event)`` and again with ``(data, stat)`` if that raises a
    TypeError (a lambda's bound defaults took the event once), a ChildrenWatch's with the
    children; its first read on the thread that made the watch, later ones on kazoo's or,
    after a reconnection, on a thread each."""
    def callback(*given):
        with timeline._lock_cb:
            return fn(*args, *given[:2])
    return callback
