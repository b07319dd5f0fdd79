"""Cluster watcher (first cut): polls metadata, writes changes to ``cluster_events``.

Every ``watch.interval_seconds`` it asks the cluster for each audited
partition's leader, replicas and ISR (``AdminClient.list_topics``) and, when
the leader changes, the new leader epoch (``list_offsets(latest)``: metadata
carries no epoch). A difference from the previous poll becomes one row per
change: ``first_seen``, ``leader_change``, ``offline`` (no leader),
``leader_reelected`` (the same leader at a newer epoch), ``isr_shrink``,
``isr_expand``. Rows are appended with delta-rs.

A poll sees the state at one instant: changes shorter than the interval can be
missed, which is why the audit never relies on events to *find* a loss, only
to attribute one.

Besides, each poll asks every broker ever registered for its own view
(``jobs/watcher/broker_views.py``; PLAINTEXT profiles): a broker cut off from the quorum
still names itself leader while another does at a newer epoch. Two such claims in
two polls in a row write ``split_brain_enter``; ``split_brain_exit`` when they end.

At each leader change it sees (from the metadata log or a poll), the watcher asks the
partition's leader where the old leader's epoch ends in its log (OffsetForLeaderEpoch,
``jobs/watcher/epoch_ends.py``) and writes the answer as an ``epoch_end`` row: the old
leader's writes of that epoch at or above it are truncated, certain before any read.

Outages: a poll that fails (metadata timeouts, every broker unreachable,
authentication refused) is retried with a capped doubling wait; one log line
says when polls start failing and one when they work again. What the watcher
could not observe is a *gap*: a ``watcher_blind`` row (``event_time`` its
start, ``until`` its end) written whenever two successful polls lie more than
``watch.blind_after_seconds`` apart, whatever the reason (an outage, a paused
or restarted watcher: the last good poll of an earlier process is read from
its status file), unless the KRaft metadata log was tailed, current, at both polls: its
tail, a process of its own, hands over every record of the time between at its own
time, so after a poll that took long (a broker frozen, a loaded machine) the leaders,
ISRs and brokers of the time between are whole (only the polls' own samples, log ends and
two-leader views, are sparser). While polls fail, an open gap row (``until`` null) says the
watcher is blind now. A loss whose exposure falls in a gap names it in its
cause. At start, a watcher that cannot reach the cluster within
``watch.startup_timeout_seconds`` stops with one line.

Brokers down (:class:`BrokerOutages`): a broker ever registered that the cluster no
longer lists (*fenced*: it stopped heartbeating, or shut down) or that has not
answered its own metadata request for two polls (*unreachable*) is named in the
watcher's status (``/healthz`` with a token, ``/readyz``), with since when; one log line
when it goes down and one when it is back, never one per poll. A broker down does not
make the auditor unready: the cluster's state is what it watches, not its own.

The watcher's status also carries each partition's log end (the last sample, with its
time): health measures the consume job's lag against it
(:func:`kafka_audit.status.consume_lag`).

Command: ``kafka-audit watch``.
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kafka_audit.clients import admin_client, cluster_config
from kafka_audit.errors import ClusterError
from kafka_audit.jobs.watcher.epoch_ends import EpochEnds
from kafka_audit.jobs.watcher.metadata_log import DURABILITY as _DURABILITY
from kafka_audit.schemas.events import (
    BLIND,
    BROKER_FENCED,
    BROKER_UNFENCED,
    ELR_ELECTION,
    FIRST_SEEN,
    ISR_ALONE_ENTER,
    ISR_ALONE_EXIT,
    ISR_EXPAND,
    ISR_SHRINK,
    LEADER_CHANGE,
    LEADER_REELECTED,
    LOG_END_DROP,
    OFFLINE,
    SPLIT_BRAIN,
    SPLIT_BRAIN_END,
    TOPIC_CONFIG,
    TOPIC_CONFIG_CHANGE,
    UNCLEAN_ELECTION,
    UNDER_MIN_ISR_ENTER,
    UNDER_MIN_ISR_EXIT,
)
from kafka_audit.settings import Settings
from kafka_audit.status import Outage, StatusWriter, read_statuses
from kafka_audit.store import append_rows, check_table

__all__ = ["ClusterWatcher", "diff_partition", "BrokerOutages"]


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionView:
    leader: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    epoch: int | None = None  # the leader epoch the answer gave (None: not said)
    #: the eligible leader replicas (KIP-966; the metadata log's, None where not known)
    elr: tuple[int, ...] | None = None
    #: the leader recovery state is RECOVERING: Kafka elected this leader uncleanly (the
    #: metadata log's; None where not known, as from a poll)
    recovering: bool | None = None


def diff_partition(before: PartitionView | None, after: PartitionView,
                   min_isr: int | None = None) -> list[str]:
    """The event kinds that turn ``before`` into ``after`` (pure, unit-tested).

    Besides leader and ISR changes: ``leader_reelected`` (the same leader at a newer
    epoch: it was fenced or restarted and elected again, the offline moment between too
    short for a poll to see), ``unclean_election`` (the new leader was not in the ISR
    before, and nothing of that ISR is left in the new one: a clean election right after
    an ISR expansion, both between two polls, is not one; or the metadata log says Kafka
    elected it uncleanly: ``after.recovering``, which also marks the last known leader
    elected from an empty ISR and no eligible replica), ``elr_election`` instead where
    the new leader was one of the eligible leader replicas before (KIP-966: it held every
    committed write; a clean election),
    ``under_min_isr_enter``/``_exit`` (the ISR crossed ``min_isr``, when known) and
    ``isr_alone_enter``/``_exit`` (the ISR became, or stopped being, the leader alone on
    a replicated partition)."""
    if before is None:
        kinds = [FIRST_SEEN] + ([OFFLINE] if after.leader < 0 else [])
        if min_isr is not None and len(after.isr) < min_isr:
            kinds.append(UNDER_MIN_ISR_ENTER)
        if _alone(after) and after.leader >= 0:  # offline is said already
            kinds.append(ISR_ALONE_ENTER)
        return kinds
    kinds = []
    if after.leader != before.leader:
        kinds.append(OFFLINE if after.leader < 0 else LEADER_CHANGE)
        election = _election(before, after)
        if election is not None:
            kinds.append(election)
    elif (after.leader >= 0 and None not in (after.epoch, before.epoch)
          and after.epoch > before.epoch):  # type: ignore[operator]
        kinds.append(LEADER_REELECTED)
    if set(after.isr) < set(before.isr) or (set(after.isr) - set(before.isr)
                                            and set(before.isr) - set(after.isr)):
        kinds.append(ISR_SHRINK)
    if set(after.isr) > set(before.isr):
        kinds.append(ISR_EXPAND)
    if min_isr is not None:
        was, now = len(before.isr) < min_isr, len(after.isr) < min_isr
        if now and not was:
            kinds.append(UNDER_MIN_ISR_ENTER)
        elif was and not now:
            kinds.append(UNDER_MIN_ISR_EXIT)
    if _alone(after) and not _alone(before):
        kinds.append(ISR_ALONE_ENTER)
    elif _alone(before) and not _alone(after):
        kinds.append(ISR_ALONE_EXIT)
    return kinds


def _election(before: PartitionView, after: PartitionView) -> str | None:
    """How a new leader (``after.leader`` >= 0, another than before) was elected, where it
    was not from the ISR: ``unclean_election``, ``elr_election`` or None (from the ISR,
    or not known). Kafka's own mark comes first (the metadata log's recovery state);
    then an eligible leader replica before the change is clean; a poll, which sees
    neither, judges by the ISRs alone."""
    if after.leader < 0 or after.leader in before.isr:
        return None
    if after.recovering:
        return UNCLEAN_ELECTION
    if before.elr and after.leader in before.elr:
        return ELR_ELECTION
    if before.isr and not set(before.isr) & set(after.isr):
        return UNCLEAN_ELECTION
    return None


def _alone(v: PartitionView) -> bool:
    """The ISR is the leader alone (or empty, offline) on a replicated partition."""
    return len(v.replicas) > 1 and len(v.isr) <= 1


class BrokerOutages:
    """Which brokers are down, each said once when it goes down and once when it is back.

    A broker is down while it is *fenced* (registered once, and now absent from the
    brokers the cluster lists: the controller dropped it after missed heartbeats, or it
    shut down) or *unreachable* (no answer to its own metadata request in
    ``unreachable_after`` polls in a row: one slow answer on a busy host is not an
    outage). Pure: :meth:`update` gets each poll's sets and returns nothing but the log
    lines it wrote, for tests."""

    def __init__(self, log: logging.Logger, unreachable_after: int = 2) -> None:
        self.log = log
        self.unreachable_after = unreachable_after
        #: broker -> {"since": datetime, "fenced": bool, "unreachable": bool}
        self.down: dict[int, dict] = {}
        self._missed: dict[int, int] = {}  # polls in a row without an answer
        self.outages = 0  # how many began, for tests

    def update(self, known, registered: set[int] | None, answered: set[int] | None,
               now: datetime) -> list[str]:
        """One poll: ``known`` every broker ever registered; ``registered`` the brokers the
        cluster lists now (None: not known); ``answered`` the brokers that answered their
        own request (None: none was asked, or none answered while the cluster did: the
        per-broker requests say nothing then)."""
        lines = []
        for b in sorted(known):
            if answered is not None:
                self._missed[b] = 0 if b in answered else self._missed.get(b, 0) + 1
            fenced = registered is not None and b not in registered
            unreachable = self._missed.get(b, 0) >= self.unreachable_after
            was = self.down.get(b)
            if fenced or unreachable:
                if was is None:
                    self.down[b] = was = {"since": now}
                    self.outages += 1
                    why = " and ".join(w for w, on in (("fenced (the cluster no longer lists "
                                                        "it)", fenced),
                                                       ("unreachable", unreachable)) if on)
                    lines.append(f"watcher: broker {b} is down: {why}")
                was.update(fenced=fenced, unreachable=unreachable)
            elif was is not None:
                del self.down[b]
                lines.append(f"watcher: broker {b} is back after "
                             f"{(now - was['since']).total_seconds():.1f}s")
        for line in lines:
            self.log.warning("%s", line)
        return lines

    def detail(self) -> list[dict]:
        """The brokers down now, for the watcher's status."""
        return [{"broker": b, "since": d["since"].isoformat(), "fenced": d["fenced"],
                 "unreachable": d["unreachable"]} for b, d in sorted(self.down.items())]


#: how long a poll waits for the answers beside the metadata (log ends and epochs, the
#: brokers, topic settings): a broker that just died answers nothing for
#: seconds, and the next metadata poll must not wait for it (the watcher would be blind)
LOOKUP_BUDGET_SECONDS = 1.0


def answered(futures: dict, budget: float = LOOKUP_BUDGET_SECONDS) -> dict:
    """``key -> result`` of the ``futures`` answered without error within ``budget``
    seconds (together); the others are left out (asked again by a later poll)."""
    done, _ = wait_futures(list(futures.values()), timeout=budget)
    out = {}
    for key, fut in futures.items():
        if fut in done and fut.exception() is None:
            out[key] = fut.result()
        elif fut in done:
            log.debug("%s: %s", key, fut.exception())
    return out


class ClusterWatcher:
    """Polls the cluster's metadata into ``cluster_events``; ``on_events`` gets each poll's
    new rows (the CLI prints them)."""

    def __init__(self, settings: Settings, topic_prefix_excluded: str = "_",
                 on_events=None) -> None:
        self.settings = settings
        self.table = settings.table_path("cluster_events")
        check_table(self.table, "cluster_events")
        self.excluded = topic_prefix_excluded
        self.on_events = on_events
        self.state: dict[tuple[str, int], PartitionView] = {}
        self.events_written = 0
        self._admin = None
        earlier = read_statuses(settings.home_dir).get("watcher")
        #: the end of the last successful poll (of an earlier watcher process too)
        self.last_ok: datetime | None = earlier.last_ok if earlier else None
        self._open_gap: datetime | None = None  # start of a gap written as open
        self.min_isr: dict[str, int] = {}  # topic -> min.insync.replicas (when known)
        self.configs: dict[str, dict] = {}  # topic -> durability settings last written
        self.log_end: dict[tuple[str, int], int] = {}  # partition -> last log end seen
        self.brokers: set[int] | None = None
        self._next_config = self._next_log_end = datetime.min.replace(tzinfo=UTC)
        self._cluster_asked = None  # a describe_cluster not answered yet
        #: every broker ever registered (a fenced one may still act as leader): id -> address
        self.known_brokers: dict[int, tuple[str, int]] = {}
        #: the brokers that answered their own metadata request in the last poll (None:
        #: none was asked)
        self.answering: set[int] | None = None
        self.broker_outages = BrokerOutages(log)
        self.log_ends_at: datetime | None = None  # the last sample of every log end
        #: partitions two brokers lead at once now: key -> {broker: leader epoch}
        self.two_leaders: dict[tuple[str, int], dict[int, int]] = {}
        self._seen_two: dict[tuple[str, int], datetime] = {}  # first poll that saw two
        #: the KRaft metadata log, tailed where its files are on this machine (exact order
        #: and times) while the watcher runs
        self.metadata = None
        self._metadata_started = False
        self.exact = False  # the last poll took partition events from the metadata log
        self._security = None  # how each broker is asked (the profile's TLS and SASL)
        #: the leader changes' questions: where does the old leader's epoch end
        self.epoch_ends = EpochEnds()
        #: epoch_end rows answered early whose write failed: written with the next poll's
        self._unwritten: list[dict] = []
        self._pool = None
        self.outage = Outage("watcher", StatusWriter(settings.home_dir, "watcher"), log,
                             settings.outage.retry_seconds, settings.outage.max_backoff_seconds)

    def _client(self):
        if self._admin is None:
            self._admin = admin_client(cluster_config(self.settings))
        return self._admin

    def _gap(self, start: datetime, until: datetime | None) -> dict:
        return {"event_time": start, "topic": "", "partition": -1, "kind": BLIND,
                "until": until, "source": "watcher:gap"}

    def _metadata_dirs(self) -> list[Path]:
        from kafka_audit.jobs.watcher.metadata_log import local_metadata_dirs, metadata_dirs

        w = self.settings.watch
        if w.metadata_log_dirs is not None:
            dirs = metadata_dirs(w.metadata_log_dirs)
            if missing := [d for d in dirs if not d.is_dir()]:
                log.warning("watcher: no metadata log at %s (watch.metadata_log_dirs); the "
                            "others are tailed", ", ".join(map(str, missing)))
            return [d for d in dirs if d.is_dir()]
        if self.settings.profile.bootstrap is not None:
            return []  # a remote cluster: its files are not here
        return local_metadata_dirs(self.settings)

    def _start_metadata(self) -> None:
        """The exact timeline, once: the KRaft metadata log's tail if its folders are here,
        or a ZooKeeper-era cluster's state in ZooKeeper (:func:`~kafka_audit.jobs.watcher.
        zookeeper.zookeeper_connect`); events of it already in ``cluster_events`` (an
        earlier watcher's) are folded, not written again."""
        from kafka_audit.jobs.watcher.zookeeper import zookeeper_connect

        self._metadata_started = True
        connect = zookeeper_connect(self.settings)
        dirs = [] if connect else self._metadata_dirs()
        if not dirs and not connect:
            return
        import pyarrow.compute as pc

        from kafka_audit.jobs.watcher import zookeeper
        from kafka_audit.jobs.watcher.metadata_log import SOURCE, MetadataFold, MetadataTail
        from kafka_audit.store import read_table

        source = zookeeper.SOURCE if connect else SOURCE
        done = read_table(self.table, "cluster_events", ["event_time"],
                          where=pc.field("source") == source)["event_time"]
        quiet = pc.max(done).as_py() if len(done) else None
        fold = MetadataFold(min_isr=self.min_isr, excluded=self.excluded, quiet_until=quiet,
                            source=source)
        if connect:
            self.metadata = zookeeper.ZooKeeperTimeline(connect, fold)
            self.metadata.start()
            log.info("watcher: ZooKeeper's state is the timeline's source (%s)", connect)
            return
        self.metadata = MetadataTail(dirs, fold, self.settings.watch.metadata_log_stale_seconds)
        self.metadata.start()
        log.info("watcher: the KRaft metadata log is the timeline's source (%s)",
                 ", ".join(map(str, dirs)))

    def stop(self) -> None:
        if self.metadata is not None:
            self.metadata.stop()

    def poll_once(self) -> list[dict]:
        """One poll; raises when the cluster cannot be asked (the caller rides it out).

        Where the metadata log is tailed and current, partition, broker and controller
        events come from it (exact); the polls still give split brains, log ends and topic
        settings, and take over the partition events while the log is not current."""
        exact_rows, changes = (self.metadata.drain_with_muted() if self.metadata is not None
                               else ([], []))
        was_exact, self.exact = self.exact, self.metadata is not None and self.metadata.fresh()
        # the timeline came whole through the time since the last poll: a log the watcher's
        # stall does not stop, current then and now
        whole = was_exact and self.exact and self.metadata.outlives_stalls
        if exact_rows:  # written even if this poll fails: the files were read
            append_rows(self.table, "cluster_events", exact_rows)
            self.events_written += len(exact_rows)
            if any(r["kind"] == TOPIC_CONFIG_CHANGE for r in exact_rows):
                self._next_config = datetime.min.replace(tzinfo=UTC)  # effective ones now
        # followed with the changes polled rows stood for, in the log's order, at their
        # epochs: a poll that could ask no broker wrote a change without one, which raises
        # no question of where the old epoch ends (a quorum's return, 2026-11-29)
        self.epoch_ends.follow(changes)
        if self.epoch_ends.pending:  # the log's new changes, and those the last poll left
            self._ask_epoch_ends_now()  # unanswered: asked first, not after the lookups a
            # dead broker holds up (a polled change answered at the next poll waited 2.7 s)
        views = self._ask_brokers()
        if views:  # every broker's own answer: the newest epoch's view of each partition
            from kafka_audit.jobs.watcher.broker_views import freshest

            parts, source = freshest(views), "watcher:broker_views"
        else:  # no per-broker views (a secured profile, or none answered): one client's
            parts, source = self._one_view(), "watcher:metadata"
        now = datetime.now(UTC)  # when the answers were in (a poll's lookups take time)
        rows: list[dict] = []
        changed: list[tuple[str, int]] = []
        polled: list[dict] = []  # the rows of the changes polled while the log was late
        topics = sorted({t for t, _p in parts if not t.startswith(self.excluded)})
        if now >= self._next_config:  # topic settings (durability) every config interval
            rf: dict[str, int] = {}
            for (t, _p), v in parts.items():
                rf[t] = min(rf.get(t, len(v.replicas)), len(v.replicas))
            rows += self._topic_configs(topics, rf, now)
            self._next_config = now + timedelta(seconds=self.settings.watch.config_seconds)
        brokers = self._cluster(now)
        rows += [] if self.exact else brokers  # exact from the log, else polled
        for key in sorted(k for k in parts if k[0] in set(topics)):
            p = parts[key]
            before = self.state.get(key)
            epoch = p.leader_epoch if p.leader_epoch >= 0 else None
            if None not in (epoch, before and before.epoch):  # a staler answer never lowers it
                epoch = max(epoch, before.epoch)  # type: ignore[type-var,union-attr]
            view = PartitionView(p.leader, tuple(sorted(p.isr)), tuple(p.replicas), epoch)
            if before is None:
                self.epoch_ends.seed(key, view.leader, view.epoch)
            for kind in diff_partition(before, view, self.min_isr.get(key[0])):
                changed.append(key)
                if self.exact:
                    continue  # the metadata log gave this change, at its exact time
                rows.append({
                    "event_time": now, "topic": key[0], "partition": key[1], "kind": kind,
                    "leader": view.leader,
                    "previous_leader": before.leader if before else None,
                    "isr": list(view.isr), "previous_isr": list(before.isr) if before else None,
                    "replicas": list(view.replicas),
                    "leader_epoch": p.leader_epoch if p.leader_epoch >= 0 else None,
                    "source": source,
                })
                if before is not None:  # a change the poll saw, not its first sight
                    polled.append(rows[-1])
            self.state[key] = view
        if not self.exact and self.metadata is not None and (polled or brokers):
            # these changes were polled: the log's rows arriving at the same states are not
            # written again; the others are (a flap between two polls). A partition's
            # first sight (a restarted watcher's first poll) is no change: the log's rows of
            # what changed while the watcher was down are still written
            self.metadata.polled([*polled, *brokers], now)
        rows += self._split_brain(views, topics, now)
        sample = now >= self._next_log_end
        asked = sorted(self.state) if sample else sorted(set(changed))
        if asked:
            answers = self._log_ends(asked)
            for r in rows:
                if r.get("partition", -1) >= 0 and r["kind"] not in (SPLIT_BRAIN,
                                                                     SPLIT_BRAIN_END):
                    epoch, end = answers.get((r["topic"], r["partition"]), (None, None))
                    r["leader_epoch"] = r.get("leader_epoch") if epoch is None else epoch
                    r["log_end"] = end
            rows += self._log_end_drops(answers, now)
            if sample:
                self._next_log_end = now + timedelta(
                    seconds=self.settings.watch.log_end_seconds)
                self.log_ends_at = now
        self.epoch_ends.follow(rows)  # the polled changes (epochs filled in above)
        answered = []
        if self.epoch_ends.pending:
            answered = self._epoch_ends({k: (v.leader, v.leader_epoch)
                                         for k, v in parts.items()}, now)
            rows += answered
        # a broker the cluster no longer lists, or that no longer answers, is said once;
        # when no broker answered its own request the metadata came from one client
        # (or the profile's brokers are not asked one by one): no verdict on reachability
        self.broker_outages.update(self.known_brokers, self.brokers,
                                   self.answering or None, now)
        blind = self.settings.watch.blind_after_seconds
        if self.last_ok is not None and (self._open_gap is not None or (
                (now - self.last_ok).total_seconds() > blind and not whole)):
            rows.insert(0, self._gap(self.last_ok, now))
        rows = self._unwritten + rows
        if rows:
            self._append_events(rows, answered)
        self._unwritten = []
        self.last_ok, self._open_gap = now, None
        return rows

    def _log_ends(self, keys: list[tuple[str, int]]
                  ) -> dict[tuple[str, int], tuple[int | None, int | None]]:
        """(leader epoch, log end) of each partition that answers."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        req = {TopicPartition(t, p): OffsetSpec.latest() for t, p in keys}
        out: dict[tuple[str, int], tuple[int | None, int | None]] = {}
        for tp, info in answered(self._client().list_offsets(req, request_timeout=5)).items():
            epoch = info.leader_epoch
            out[(tp.topic, tp.partition)] = (None if epoch is None or epoch < 0 else epoch,
                                             int(info.offset))
        return out

    def _log_end_drops(self, answers: dict, now: datetime) -> list[dict]:
        """A log end lower than the one seen before: acknowledged data left the log (a
        truncation after a fail-over, or a replica back with less than it had)."""
        rows = []
        for key, (_epoch, end) in answers.items():
            if end is None:
                continue
            before = self.log_end.get(key)
            if before is not None and end < before:
                view = self.state.get(key)
                rows.append({"event_time": now, "topic": key[0], "partition": key[1],
                             "kind": LOG_END_DROP, "leader": view.leader if view else None,
                             "isr": list(view.isr) if view else None, "log_end": end,
                             "detail": json.dumps({"log_end_before": before}),
                             "source": "watcher:list_offsets"})
            self.log_end[key] = end
        return rows

    def _topic_configs(self, topics: list[str], rf: dict[str, int], now: datetime
                       ) -> list[dict]:
        """Each topic's durability settings; a row when they change (or are first seen)."""
        from confluent_kafka.admin import ConfigResource

        if not topics:
            return []
        rows = []
        futures = self._client().describe_configs([ConfigResource("topic", t) for t in topics],
                                                  request_timeout=5)
        for res, cfg in answered(futures).items():  # the others: asked again next interval
            detail = {"replication_factor": rf.get(res.name, 0),
                      **{k: cfg[k].value for k in _DURABILITY if k in cfg}}
            if self.configs.get(res.name) != detail:
                self.configs[res.name] = detail
                rows.append({"event_time": now, "topic": res.name, "partition": -1,
                             "kind": TOPIC_CONFIG, "detail": json.dumps(detail),
                             "source": "watcher:describe_configs"})
            try:
                self.min_isr[res.name] = int(detail["min.insync.replicas"])
            except (KeyError, TypeError, ValueError):
                pass
        return rows

    def _ask_epoch_ends_now(self) -> None:
        """The pending questions (of the leader changes the metadata log just gave, and of
        those an earlier poll left unanswered: a new leader may not answer at once), asked
        before this poll's lookups (each waits up to the lookup budget on a broker that
        died) of each partition's leader as last named (by the log, or by the last poll:
        its view may be older than the change), their answers written at once: the
        suspicion marker reads them seconds sooner. Unanswered ones are asked again at the
        poll's end, of its view's leader."""
        rows = self._epoch_ends(dict(self.epoch_ends.leaders), datetime.now(UTC))
        if rows:
            self._append_events(rows, rows)

    def _append_events(self, rows: list[dict], answered: list[dict]) -> None:
        """``rows`` appended to ``cluster_events``; if that fails, the ``answered`` epoch
        ends among them (their questions no longer pending, never asked again) are kept to
        be written with a later poll's rows."""
        try:
            append_rows(self.table, "cluster_events", rows)
        except Exception:
            self._unwritten += answered
            raise
        self.events_written += len(rows)

    def _epoch_ends(self, leaders: dict, now: datetime) -> list[dict]:
        """The ``epoch_end`` rows of the leader changes' questions answered now
        (``epoch_ends.py``): each asked of the partition's leader in ``leaders`` (partition
        -> (leader, epoch)) where that is at the change's epoch or newer."""
        from functools import partial

        from kafka_audit.jobs.watcher.broker_views import epoch_ends

        return self.epoch_ends.ask(self.known_brokers, leaders, now,
                                   partial(epoch_ends, security=self._broker_security()),
                                   LOOKUP_BUDGET_SECONDS)

    def _broker_security(self):
        """How each broker is asked one by one (the profile's TLS and SASL), read once."""
        if self._security is None:
            from kafka_audit.jobs.watcher.broker_views import security_for

            self._security = security_for(self.settings.profile)
        return self._security

    def _ask_brokers(self) -> dict[int, dict]:
        """Every known broker's own view of every topic (``broker_views.py``), asked all at
        once within the lookup budget: broker -> {partition: view}; the brokers each
        answer names are known from then on. Empty without per-broker views (a secured
        profile, no broker known yet) or when none answered in time."""
        self.answering = None
        if not self.known_brokers:
            return {}
        from concurrent.futures import ThreadPoolExecutor

        from kafka_audit.jobs.watcher.broker_views import ask

        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="broker-view")
        security = self._broker_security()
        futures = {b: self._pool.submit(ask, host, port, None, LOOKUP_BUDGET_SECONDS,
                                        security=security)
                   for b, (host, port) in sorted(self.known_brokers.items())}
        views = {}
        for b, (brokers, answer) in answered(futures).items():
            self.known_brokers.update(brokers)
            views[b] = answer
        self.answering = set(views)
        return views

    def _one_view(self) -> dict:
        """One client's metadata (librdkafka's ``list_topics``: the broker it picks), as
        views without epochs; the brokers it names are known from then on."""
        from kafka_audit.jobs.watcher.broker_views import BrokerView

        md = self._client().list_topics(timeout=5)
        self.known_brokers.update({b.id: (b.host, b.port) for b in md.brokers.values()})
        return {(n, pid): BrokerView(p.leader, -1, tuple(sorted(p.isrs)), tuple(p.replicas))
                for n, t in md.topics.items() if t.error is None
                for pid, p in t.partitions.items()}

    def _split_brain(self, views: dict[int, dict], topics: list[str], now: datetime
                     ) -> list[dict]:
        """A ``split_brain_enter`` row when two brokers each name themselves leader of a
        partition in two polls in a row, ``split_brain_exit`` when that ends. Brokers that
        did not answer in time have no say this poll."""
        from kafka_audit.jobs.watcher.broker_views import claimants

        rows = []
        for key in sorted(self.state):
            if key[0] not in topics:
                continue
            claim = claimants(views, key)
            before = self.two_leaders.get(key)
            if len(claim) >= 2:
                first = self._seen_two.setdefault(key, now)
                if before is None and first < now:  # seen by two polls in a row: not a
                    # broker's first moments after a restart, before its metadata caught up
                    rows.append(self._two_leaders_row(first, key, SPLIT_BRAIN, claim))
                if before is not None or first < now:
                    self.two_leaders[key] = claim
            elif len(views) >= 2:  # none, or ended: as two answers or more say
                self._seen_two.pop(key, None)
                if before is not None:
                    del self.two_leaders[key]
                    rows.append(self._two_leaders_row(now, key, SPLIT_BRAIN_END, before))
        return rows

    def _two_leaders_row(self, now: datetime, key: tuple[str, int], kind: str,
                         claim: dict[int, int]) -> dict:
        newest = max(claim, key=lambda b: (claim[b], b))
        oldest = min(claim, key=lambda b: (claim[b], b))
        return {"event_time": now, "topic": key[0], "partition": key[1], "kind": kind,
                "leader": newest, "previous_leader": oldest,
                "leader_epoch": claim[newest], "source": "watcher:broker_views",
                "detail": json.dumps({"leaders": {str(b): e for b, e in sorted(claim.items())}})}

    def _cluster(self, now: datetime) -> list[dict]:
        """The registered (unfenced) brokers; a row for each change."""
        fresh = self._cluster_asked is None
        if fresh:
            self._cluster_asked = self._client().describe_cluster(request_timeout=5)
        fut = self._cluster_asked
        if not answered({"cluster": fut}, LOOKUP_BUDGET_SECONDS if fresh else 0):
            if fut.done():  # failed: asked again next poll (the metadata decides outages)
                self._cluster_asked = None
            return []  # not answered yet: harvested by a later poll, never waited out
        self._cluster_asked = None
        d = fut.result()
        # no controller from it: a KRaft broker answers DescribeCluster with a random live
        # broker as the "controller" (clients cannot reach the quorum), a new one each time
        rows = []
        brokers = {n.id for n in d.nodes}
        if self.brokers is not None:
            for b in sorted(self.brokers - brokers):
                rows.append(self._cluster_row(now, BROKER_FENCED, {"broker": b}))
            for b in sorted(brokers - self.brokers):
                rows.append(self._cluster_row(now, BROKER_UNFENCED, {"broker": b}))
        self.brokers = brokers
        return rows

    def _cluster_row(self, now: datetime, kind: str, detail: dict) -> dict:
        return {"event_time": now, "topic": "", "partition": -1, "kind": kind,
                "detail": json.dumps(detail), "source": "watcher:describe_cluster"}

    def step(self) -> float:
        """One poll, outages ridden out; returns how long to wait before the next."""
        try:
            rows = self.poll_once()
        except Exception as exc:  # noqa: BLE001 - an outage must not stop the watcher
            self._mark_blind()
            return self.outage.failed(exc)
        self.outage.succeeded(**self.status_detail())
        if rows and self.on_events is not None:
            self.on_events(rows)
        return self.settings.watch.interval_seconds

    def status_detail(self) -> dict:
        """What the watcher's status file says besides its last good poll: the brokers down,
        and every partition's last log end (health measures the consume lag with them)."""
        ends: dict[str, dict[str, int]] = {}
        for (t, p), end in sorted(self.log_end.items()):
            ends.setdefault(t, {})[str(p)] = end
        return {"partitions": len(self.state), "events_written": self.events_written,
                "brokers": {"known": sorted(self.known_brokers),
                            "registered": None if self.brokers is None else sorted(self.brokers),
                            "down": self.broker_outages.detail()},
                "log_ends": ends,
                "log_ends_at": self.log_ends_at.isoformat() if self.log_ends_at else None}

    def _mark_blind(self) -> None:
        """While polls fail, an open gap says the watcher sees nothing now (once an outage)."""
        if self._open_gap is not None or self.last_ok is None:
            return
        try:
            append_rows(self.table, "cluster_events", [self._gap(self.last_ok, None)])
            self._open_gap = self.last_ok
        except Exception as exc:  # noqa: BLE001 - written again at the next failed poll
            log.debug("cannot write the open gap: %s", exc)

    def wait_reachable(self) -> None:
        """The first poll, retried for ``watch.startup_timeout_seconds``; a cluster never
        reached is a ``ClusterError`` with one line."""
        import time

        deadline = time.monotonic() + self.settings.watch.startup_timeout_seconds
        while True:
            try:
                rows = self.poll_once()
                break
            except Exception as exc:  # noqa: BLE001 - retried until the deadline
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"the watcher cannot reach the cluster of profile "
                        f"{self.settings.profile.name!r} after "
                        f"{self.settings.watch.startup_timeout_seconds:.0f}s: "
                        f"{str(exc).splitlines()[0]}") from None
                time.sleep(self.settings.outage.retry_seconds)
        self.outage.succeeded(**self.status_detail())
        if rows and self.on_events is not None:
            self.on_events(rows)

    def run(self, stop: threading.Event) -> None:
        """Polls until ``stop``; the metadata log is tailed meanwhile (where it is here)."""
        if not self._metadata_started:
            try:
                self._start_metadata()
            except Exception as exc:  # noqa: BLE001 - the polls are the fallback source
                log.warning("watcher: cannot follow the cluster's timeline (the KRaft "
                            "metadata log or ZooKeeper: %s); partition events come from the "
                            "polls", (str(exc).splitlines() or [type(exc).__name__])[0])
                if self.metadata is not None:
                    self.metadata.stop()
                self.metadata = None
        try:
            while not stop.is_set():
                stop.wait(self.step())
        finally:
            self.stop()
            if self._pool is not None:
                self._pool.shutdown(wait=False)

    def start_thread(self) -> tuple[threading.Thread, threading.Event]:
        stop = threading.Event()
        t = threading.Thread(target=self.run, args=(stop,), name="cluster-watcher", daemon=True)
        t.start()
        return t, stop
