"""The KRaft metadata log as the cluster's timeline: every change in the controller's
order, at the controller's time (milliseconds; the records of one millisecond a
microsecond apart, in the log's order), where the auditor runs beside the nodes.

Kafka's controllers write every partition change, broker registration and fencing into
``__cluster_metadata``; each node keeps a copy in its ``metadata.log.dir``. A small Java
program (``jobs/watcher/MetadataTail.java``) tails those files read-only and decodes each
record with Kafka's own metadata serde into one JSON line; :class:`MetadataFold` (pure:
records in, event rows out) turns them into ``cluster_events`` rows with the source
``kraft:metadata_log``:

- ``PARTITION_RECORD`` / ``PARTITION_CHANGE_RECORD``: the same event kinds the polling
  watcher derives (``jobs/watcher/watcher.py``, ``diff_partition``), from every change, none
  missed however short; the leader epoch counted as Kafka counts it (one more each time
  a change record names a leader); with what no poll sees: the eligible leader replicas
  (KIP-966; ``CLEAR_ELR_RECORD`` empties them), so an election from them is named
  ``elr_election``, not unclean, and the leader recovery state by which Kafka marks an
  unclean election (``unclean_election`` also where the ISR was empty: the last known
  leader elected back);
- ``REGISTER_BROKER_RECORD`` (a restarted broker registers fenced),
  ``BROKER_REGISTRATION_CHANGE_RECORD``, ``FENCE_``/``UNFENCE_BROKER_RECORD``:
  ``broker_fenced`` / ``broker_unfenced``;
- ``CONFIG_RECORD`` of a topic's durability setting changed after its creation:
  ``topic_config_change`` (name, value, the one before; the watcher then asks for the
  effective settings at once);
- the Raft ``LEADER_CHANGE`` control record: ``controller_change`` (the active
  controller), which no client API tells (a KRaft broker answers DescribeCluster with a
  random live broker as "controller").

What it can miss: nothing in the log, but the log can be late. The tail prints an offset
once a majority of the folders it reads hold a record there written in the same Raft
epoch: a controller killed while appending leaves records the quorum never committed in
its own file, and its successor writes others at those offsets in a later epoch (taking
each offset from whichever node had it first read the dead controller's and never the
committed ones: an ISR change missed). So give it every controller's folder (a node that
is down holds nothing back while the rest are a majority), or one (each record as it is
read, that risk kept). While no record is newer than
``watch.metadata_log_stale_seconds`` (the active controller writes a no-op every 500 ms)
the watcher falls back to its polls for partition events.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from kafka_audit.schemas.events import (
    BROKER_FENCED,
    BROKER_UNFENCED,
    CONTROLLER_CHANGE,
    LEADER_CHANGES,
    METADATA_LOG,
    TOPIC_CONFIG_CHANGE,
)

if TYPE_CHECKING:
    from kafka_audit.jobs.watcher.watcher import PartitionView

__all__ = ["MetadataFold", "FoldedTimeline", "MetadataTail", "metadata_dirs",
           "local_metadata_dirs", "tail_command"]

log = logging.getLogger(__name__)

SOURCE = METADATA_LOG
#: a change record's leader when the leader does not change (Kafka's NO_LEADER_CHANGE)
NO_LEADER_CHANGE = -2
#: a partition's leader recovery state after an unclean election (LeaderRecoveryState)
RECOVERING = 1
#: a CONFIG_RECORD's resourceType for a topic (ConfigResource.Type.TOPIC)
TOPIC_RESOURCE = 2
#: the topic settings the timeline follows (the watcher's topic_config rows hold them too)
DURABILITY = ("min.insync.replicas", "unclean.leader.election.enable", "flush.messages",
              "flush.ms", "cleanup.policy", "retention.ms")


def _listed(replicas: tuple[int, ...] | None) -> list[int] | None:
    return list(replicas) if replicas is not None else None


def metadata_dirs(paths: list[str]) -> list[Path]:
    """The ``__cluster_metadata-0`` folders of ``paths`` (each that folder itself or a node's
    ``metadata.log.dir`` holding it)."""
    return [p if p.name.startswith("__cluster_metadata") else p / "__cluster_metadata-0"
            for p in map(Path, paths)]


def local_metadata_dirs(settings) -> list[Path]:
    """The local cluster's nodes' metadata log folders that exist on this machine."""
    root = settings.home_dir / "kafka"
    return [d for d in metadata_dirs([str(root / f"node{n}" / "meta")
                                      for n in range(1, settings.cluster.nodes + 1)])
            if d.is_dir()]


@dataclass
class Polled:
    """What the polls wrote of one partition (or of the brokers) while the log was late:
    the state each of their rows arrived at (:func:`state_of`) and its time, in the polls'
    order, each waiting for the log row it stands for; ``last``: the newest time of those
    the log has passed, and of the log's rows timed after them."""

    rows: list[tuple[tuple, datetime]] = field(default_factory=list)
    last: datetime = datetime.min.replace(tzinfo=UTC)


def state_of(row: dict) -> tuple:
    """The state a ``cluster_events`` row arrives at: a partition's (leader, ISR, leader
    epoch; None without a leader or where the poll had none), a broker's (id, fenced)."""
    if row["partition"] < 0:
        broker = json.loads(row["detail"]).get("broker") if row.get("detail") else None
        return (broker, row["kind"] == BROKER_FENCED)
    leader = row.get("leader")
    epoch = row.get("leader_epoch") if leader is not None and leader >= 0 else None
    return (leader, tuple(sorted(row.get("isr") or ())), epoch)


def same_state(a: tuple, b: tuple) -> bool:
    """Equal states; a partition's epoch compared only where both rows know it."""
    if len(a) != 3 or len(b) != 3:
        return a == b
    return a[:2] == b[:2] and (None in (a[2], b[2]) or a[2] == b[2])


@dataclass
class MetadataFold:
    """The metadata log folded record by record (pure): topic names, partitions, brokers;
    :meth:`apply` returns the ``cluster_events`` rows a record makes.

    ``min_isr`` maps a topic to its ``min.insync.replicas`` where known (the watcher's);
    ``excluded``: topics whose names start with it make no rows (internal topics);
    ``quiet_until``: records up to this time only fold (a restarted watcher has written
    their rows before); ``polled``: per partition (``("", -1)``: the brokers' fencing),
    the rows the watcher's polls wrote while the log was late (:class:`Polled`): the log's
    row each stands for is not written again, and every other one is (a change between
    two polls, a flap the polls never saw), timed after the polled rows it follows: the
    record stays complete, each change once, in order."""

    min_isr: Mapping[str, int] = field(default_factory=dict)
    excluded: str = "_"
    quiet_until: datetime | None = None
    #: the rows' ``source``: the KRaft metadata log's, or another exact timeline folded the
    #: same way (a ZooKeeper-era cluster's state in ZooKeeper: ``jobs/watcher/zookeeper.py``)
    source: str = SOURCE
    polled: dict[tuple[str, int], Polled] = field(default_factory=dict)
    topics: dict[str, str] = field(default_factory=dict)  # topic id -> name
    #: (topic id, partition) -> its state (with its eligible leader replicas)
    partitions: dict[tuple[str, int], PartitionView] = field(default_factory=dict)
    fenced: dict[int, bool] = field(default_factory=dict)
    #: partition changes skipped: their partition's creation was never read (a skip, counted)
    unknown_changes: int = 0
    controller: int | None = None
    #: a topic's own min.insync.replicas (its CONFIG_RECORD), before ``min_isr`` is asked
    topic_min_isr: dict[str, int] = field(default_factory=dict)
    #: each topic's durability settings of its own (CONFIG_RECORDs): name -> value
    configs: dict[str, dict[str, str | None]] = field(default_factory=dict)
    created: dict[str, int] = field(default_factory=dict)  # name -> its creation's ms
    #: the leader changes left unwritten because a polled row stands for them, as the log
    #: has them (their exact epoch: a poll that could ask no broker has none), taken by
    #: :meth:`take_muted` after each record for the questions of where the old epoch ends
    muted: list[dict] = field(default_factory=list)
    _last_ms: int = -1  # the last timed record's own time (ms) and the one it was given (us)
    _last_us: int = -1

    def apply(self, rec: dict) -> list[dict]:
        kind, data = rec.get("type"), rec.get("data") or {}
        at = self._time(rec.get("time", -1))
        quiet = rec.get("snapshot") or at is None or (
            self.quiet_until is not None and at <= self.quiet_until)
        rows = self._apply(kind, data, at)
        if quiet:
            return []
        if not self.polled:
            return rows
        written, when = [], {}
        for r in rows:  # one record's rows of a key arrive at one state: decided once
            key = (r["topic"], r["partition"])
            if r["kind"] == CONTROLLER_CHANGE:  # never polled
                written.append(r)
                continue
            if key not in when:
                when[key] = self._after_polls(key, state_of(r), at)
            if when[key] is not None:
                written.append({**r, "event_time": when[key]})
            elif r["kind"] in LEADER_CHANGES:
                self.muted.append(r)
        return written

    def take_muted(self) -> list[dict]:
        """The muted leader changes since the last call (:attr:`muted`)."""
        rows, self.muted = self.muted, []
        return rows

    def _after_polls(self, key: tuple[str, int], state: tuple, at: datetime
                     ) -> datetime | None:
        """None where the next polled row (its time at or after ``at``) stands for this log
        row (the polls saw the log's states in its order; that polled row is used up: a
        state the log arrives at twice is written twice);
        else the time to write it at: ``at``, or just after the newest row of the key
        written so far, whose state it follows (a polled row's time is the poll's, later
        than the change it saw)."""
        polled = self.polled.get(key)
        if polled is None:
            return at
        polled.rows = [(s, t) for s, t in polled.rows if t >= at]  # the rest cannot match
        # the polls saw the log's states in its order: the next one of the partition (of
        # the broker, for the brokers' rows) stands for this row, or none does
        i = next((i for i, (s, _t) in enumerate(polled.rows)
                  if len(s) == 3 or s[0] == state[0]), None)
        if i is not None and same_state(polled.rows[i][0], state):
            polled.last = max(polled.last, polled.rows.pop(i)[1])
            return None
        stamp = at if at > polled.last else polled.last + timedelta(microseconds=1)
        polled.last = stamp
        if not polled.rows and stamp == at:  # the log is past the polls
            del self.polled[key]
        return stamp

    def _time(self, ms: int) -> datetime | None:
        """A record's time, its order kept: the controller stamps a whole batch with one
        millisecond (all of a restart's fencings and elections, say), so a record in the
        same or a later millisecond than the one before it but not after its time gets
        one microsecond more. Rules order events by time alone, and a tie there loses the
        log's order (which leader change came first). A clock that went back (another
        controller's) keeps its own time. Deterministic: a replay gives the same times."""
        if ms < 0:
            return None
        us = ms * 1000
        if ms >= self._last_ms and us <= self._last_us:
            us = self._last_us + 1
        self._last_ms, self._last_us = ms, us
        return datetime.fromtimestamp(us // 1_000_000, UTC).replace(microsecond=us % 1_000_000)

    def _apply(self, kind, data: dict, at: datetime | None) -> list[dict]:
        if kind == "TOPIC_RECORD":
            self.topics[data["topicId"]] = data["name"]
            self.created[data["name"]] = self._last_ms
        elif kind == "REMOVE_TOPIC_RECORD":
            tid = data["topicId"]
            self.topics.pop(tid, None)
            for key in [k for k in self.partitions if k[0] == tid]:
                del self.partitions[key]
        elif kind == "PARTITION_RECORD":
            from kafka_audit.jobs.watcher.watcher import PartitionView

            new = PartitionView(data.get("leader", -1), tuple(sorted(data.get("isr") or ())),
                                tuple(data.get("replicas") or ()), data.get("leaderEpoch", 0),
                                elr=tuple(sorted(data.get("eligibleLeaderReplicas") or ())),
                                recovering=data.get("leaderRecoveryState") == RECOVERING)
            return self._partition(data["topicId"], data["partitionId"], new, at)
        elif kind == "PARTITION_CHANGE_RECORD":
            key = (data["topicId"], data["partitionId"])
            old = self.partitions.get(key)
            if old is None:  # a change to a partition this fold never saw created: counted
                self.unknown_changes += 1
                log.warning("metadata log: a change to partition %s/%s never seen created "
                            "skipped (%d so far)", data["topicId"], data["partitionId"],
                            self.unknown_changes)
                return []
            # the recovery state a change sets (absent: unchanged) marks its election
            changes: dict = {"recovering": data.get("leaderRecoveryState") == RECOVERING}
            if data.get("eligibleLeaderReplicas") is not None:  # null: unchanged
                changes["elr"] = tuple(sorted(data["eligibleLeaderReplicas"]))
            if data.get("isr") is not None:
                changes["isr"] = tuple(sorted(data["isr"]))
            if data.get("replicas") is not None:
                changes["replicas"] = tuple(data["replicas"])
            if data.get("leader", NO_LEADER_CHANGE) != NO_LEADER_CHANGE:
                changes["leader"], changes["epoch"] = data["leader"], old.epoch + 1  # type: ignore[operator]
            return self._partition(*key, replace(old, **changes), at)
        elif kind == "CLEAR_ELR_RECORD":  # a min.insync.replicas change: ELRs emptied
            name = data.get("topicName") or None  # none named: every topic's
            for key, view in self.partitions.items():
                if name is None or self.topics.get(key[0]) == name:
                    self.partitions[key] = replace(view, elr=())
        elif kind in ("REGISTER_BROKER_RECORD", "BROKER_REGISTRATION_CHANGE_RECORD",
                      "FENCE_BROKER_RECORD", "UNFENCE_BROKER_RECORD",
                      "UNREGISTER_BROKER_RECORD"):
            return self._broker(kind, data, at)
        elif kind == "CONFIG_RECORD" and data.get("resourceType") == TOPIC_RESOURCE \
                and data.get("name") in DURABILITY:
            return self._config(data["resourceName"], data["name"], data.get("value"), at)
        elif kind == "LEADER_CHANGE":
            leader = data.get("leaderId", -1)
            if leader >= 0 and leader != self.controller:
                before, self.controller = self.controller, leader
                return [self._row(at, "", -1, CONTROLLER_CHANGE,
                                  detail={"controller": leader, "previous": before})]
        return []

    def _partition(self, tid: str, pid: int, new: PartitionView, at: datetime | None
                   ) -> list[dict]:
        """``new`` in place of what the partition was; its rows (those of ``diff_partition``,
        the polls' own rules)."""
        from kafka_audit.jobs.watcher.watcher import diff_partition

        key = (tid, pid)
        old = self.partitions.get(key)
        self.partitions[key] = new
        topic = self.topics.get(tid)
        if topic is None or topic.startswith(self.excluded):
            return []
        kinds = diff_partition(old, new, self.topic_min_isr.get(topic, self.min_isr.get(topic)))
        return [self._row(at, topic, pid, k, leader=new.leader,
                          previous_leader=old.leader if old else None,
                          isr=list(new.isr), previous_isr=list(old.isr) if old else None,
                          replicas=list(new.replicas),
                          leader_epoch=new.epoch if new.leader >= 0 else None,
                          eligible_leader_replicas=_listed(new.elr),
                          previous_eligible_leader_replicas=_listed(old.elr) if old else None)
                for k in kinds]

    def _config(self, topic: str, name: str, value: str | None, at: datetime | None
                ) -> list[dict]:
        """A topic's durability setting set or removed (None: back to the cluster's default):
        a ``topic_config_change`` row with the name, the value and the one before (the
        polls' ``topic_config`` rows hold the effective values, defaults included)."""
        if name == "min.insync.replicas":
            try:
                self.topic_min_isr[topic] = int(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):  # removed (null): the cluster's default again
                self.topic_min_isr.pop(topic, None)
        before = self.configs.setdefault(topic, {}).get(name)
        self.configs[topic][name] = value
        if before == value or topic.startswith(self.excluded) or (
                before is None and self._last_ms == self.created.get(topic)):
            return []  # unchanged, internal, or set with the topic (in its creation's batch)
        return [self._row(at, topic, -1, TOPIC_CONFIG_CHANGE,
                          detail={"name": name, "value": value, "previous": before})]

    def _broker(self, kind: str, data: dict, at: datetime | None) -> list[dict]:
        broker = data.get("brokerId", data.get("id"))
        if broker is None:
            return []
        if kind == "REGISTER_BROKER_RECORD":
            fenced = bool(data.get("fenced", True))
        elif kind == "BROKER_REGISTRATION_CHANGE_RECORD":
            change = data.get("fenced", 0)
            if change == 0:
                return []
            fenced = change > 0
        elif kind == "UNREGISTER_BROKER_RECORD":
            fenced = True
        else:
            fenced = kind == "FENCE_BROKER_RECORD"
        was = self.fenced.get(broker)
        self.fenced[broker] = fenced
        if was == fenced and kind != "REGISTER_BROKER_RECORD":
            return []
        detail = {"broker": broker}
        if kind == "REGISTER_BROKER_RECORD":
            detail["registered"] = True  # a (re)start: a new incarnation of the broker
        return [self._row(at, "", -1, BROKER_FENCED if fenced else BROKER_UNFENCED,
                          detail=detail)]

    def _row(self, at, topic: str, partition: int, kind: str, detail: dict | None = None,
             **columns) -> dict:
        return {"event_time": at, "topic": topic, "partition": partition, "kind": kind,
                **columns, "detail": json.dumps(detail) if detail is not None else None,
                "source": self.source}


class FoldedTimeline:
    """Records folded as they arrive (:class:`MetadataFold`), for the watcher:
    :meth:`drain_with_muted` hands over the rows made since the last call, :meth:`polled`
    tells the fold what the polls wrote meanwhile, :meth:`fresh` whether the timeline is
    current. Its sources: :class:`MetadataTail` (the KRaft metadata log) and
    :class:`~kafka_audit.jobs.watcher.zookeeper.ZooKeeperTimeline`."""

    #: whether the watcher's own stalls lose nothing of it: a log read by a process of its
    #: own (the KRaft tail) hands over, after a stall, every record written meanwhile, at
    #: its own time; a timeline the watcher's process keeps (ZooKeeper's) stalls with it
    outlives_stalls = False

    def __init__(self, fold: MetadataFold) -> None:
        self.fold = fold
        self._lock = threading.Lock()
        #: the fold's rows in the log's order, each with whether it was muted
        self._rows: list[tuple[dict, bool]] = []
        self._newest: float = -1.0  # ms, the newest record's time

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def fresh(self, now: float | None = None) -> bool:
        raise NotImplementedError

    def take(self, rec: dict) -> None:
        """One record the tail printed, folded (its rows, the muted among them, kept for
        :meth:`drain_with_muted`)."""
        if rec.get("type") == "_AT":
            return
        with self._lock:
            self._rows += [(r, False) for r in self.fold.apply(rec)]
            self._rows += [(r, True) for r in self.fold.take_muted()]
            if not rec.get("snapshot"):
                self._newest = max(self._newest, float(rec.get("time", -1)))

    def polled(self, rows: list[dict], at: datetime) -> None:
        """The polls wrote these change rows (partitions', brokers') at ``at`` while the log
        was late: the log's row each stands for is not written again."""
        with self._lock:
            for r in rows:
                polled = self.fold.polled.setdefault((r["topic"], r["partition"]), Polled())
                state = state_of(r)
                if not polled.rows or polled.rows[-1] != (state, at):  # a change's kinds: once
                    polled.rows.append((state, at))

    def drain_with_muted(self) -> tuple[list[dict], list[dict]]:
        """The rows to write the log gave since the last call, and those with the leader
        changes a polled row stood for among them (:attr:`MetadataFold.muted`), all in the
        log's order: the muted are not written, yet their epochs raise the questions the
        polled rows could not (one without an epoch raises none), and a question is raised
        only by a change newer than the last one followed."""
        with self._lock:
            taken, self._rows = self._rows, []
        return [r for r, muted in taken if not muted], [r for r, _ in taken]


class MetadataTail(FoldedTimeline):
    """The Java tail (``jobs/watcher/MetadataTail.java``) of the nodes' metadata logs,
    folded as its lines arrive; fresh while its newest record is younger than
    ``stale_seconds`` and the tail alive."""

    outlives_stalls = True

    def __init__(self, dirs: list[Path], fold: MetadataFold, stale_seconds: float) -> None:
        super().__init__(fold)
        self.dirs, self.stale_seconds = dirs, stale_seconds
        self._proc: subprocess.Popen | None = None
        self.errors = 0  # lines that could not be read (counted, skipped)
        self._stopping = False

    def start(self) -> None:
        self._proc = subprocess.Popen(tail_command(self.dirs), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, bufsize=1)
        threading.Thread(target=self._read, name="metadata-log-tail", daemon=True).start()

    def stop(self) -> None:
        self._stopping = True
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                self.take(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                self.errors += 1
                log.warning("metadata log: a line skipped (%s): %.200s", exc, line)
        err = self._proc.stderr.read() if self._proc.stderr else ""
        (log.debug if self._stopping else log.warning)(
            "metadata log tail ended (exit %s)%s; partition events come from the polls",
            self._proc.wait(), f": {err.strip().splitlines()[-1]}" if err.strip() else "")

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def fresh(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        with self._lock:
            newest = self._newest
        return self.alive() and newest >= 0 and now - newest / 1000 <= self.stale_seconds


def tail_command(dirs: list[Path]) -> list[str]:
    """The Java tail of ``dirs`` (a look every 200 ms), on the newest Kafka jars we run
    (:func:`~kafka_audit.jars.tools_classpath`: they read every older version's records)."""
    from kafka_audit.jars import client_tools_jar, tools_classpath

    classpath = f"{client_tools_jar(quiet=True)}:{tools_classpath(quiet=True)}"
    return ["java", "-Xmx64m", "-XX:+UseSerialGC", "-cp", classpath,
            "kafka_audit.jobs.watcher.MetadataTail", "200", *map(str, dirs)]
