"""RabbitMQ's fault scenarios on the local RabbitMQ cluster, each judged against a plain
consumer's full read (``kafka-audit scenario run rabbit-...``; the cluster tier runs each).

Every scenario declares a queue of its own (with its policy), starts the RabbitMQ watcher,
publishes through the instrumented publisher (``producers/rabbit.py``) around its fault,
and only then reads: a plain consumer takes every message the queue still holds without
acknowledging it (the ground truth; the queue holds them all again after), then the
RabbitMQ reader (``jobs/consume/rabbit_reader.py``) reads the queue into ``consumed`` and
the audit passes run until no write is pending. The reader starts after the fault on
purpose: a message the reader has already taken is out of the queue's hands, and the
fault could not lose it (what an audit queue sees: docs/rabbitmq.md). The run matches when
the audit's losses are exactly the confirmed messages the full read cannot find, each
with a cause the scenario allows, and there are losses exactly when the scenario expects
some.

=====================================  ====================================================
scenario                               fault, and what it must find
=====================================  ====================================================
``rabbit-mirror-unsynced-promoted``    a classic queue mirrored on every node
                                       (``ha-sync-mode=manual``,
                                       ``ha-promote-on-failure=always``); both mirrors
                                       restarted (they come back empty), the master
                                       killed: an unsynchronised mirror is promoted and
                                       what only the master held is lost
``rabbit-mirror-when-synced``          the same with ``when-synced``: no mirror is
                                       promoted; the master comes back with its disk:
                                       nothing lost
``rabbit-quorum-leader-kill``          a quorum queue's leader killed mid-publish: nothing
                                       confirmed is lost
``rabbit-transient-restart``           messages without the persistent flag in a durable
                                       classic queue, its node restarted: all lost
``rabbit-partition-autoheal``          node 3, the master of a queue mirrored on every
                                       node (all synchronised), cut off under ``autoheal``
                                       while the publisher goes on through it, then on
                                       the majority's side (two more idle clients there:
                                       autoheal keeps the side with the most); healed:
                                       what the losing side confirmed alone lost (node
                                       3's as a rule; in a CI run under load node 3's
                                       side won and the majority's were lost)
``rabbit-partition-pause-minority``    the same under ``pause_minority``: node 3 pauses,
                                       the publisher moves on to the majority; nothing
                                       confirmed is lost
=====================================  ====================================================
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

from kafka_audit.schemas.verdicts import Cause

__all__ = ["RABBIT_SCENARIOS", "RabbitScenario", "RabbitReport", "run_rabbit_scenario"]

#: a publish's wait for its confirm (net_ticktime, 8 s, passes before a node cut off
#: confirms alone)
CONFIRM_TIMEOUT = 30.0


@dataclass
class RabbitRun:
    """What a scenario's steps share: the cluster, the settings, the queue."""

    rabbit: object  # LocalRabbitCluster
    settings: object
    queue: str
    key: str
    progress: Callable[[str], None]
    record: list[tuple[int, str | None]] = field(default_factory=list)

    def publisher(self, nodes: dict | None = None, first: int | None = None,
                  persistent: bool = True):
        from kafka_audit.producers.rabbit import AuditedPublisher

        nodes = nodes or {n: self.rabbit.parameters(n) for n in self.rabbit.nodes}
        return AuditedPublisher(nodes, self.key, f"scenario-{self.queue}", self.settings,
                                persistent=persistent, first=first, keep_record=True,
                                confirm_timeout=CONFIRM_TIMEOUT)

    def publish(self, p, count: int, what: str) -> int:
        """``count`` publishes; the confirmed ones."""
        ok = sum(p.publish(b"%s %d" % (what.encode(), i)) for i in range(count))
        self.progress(f"{what}: {ok} of {count} confirmed")
        return ok

    def publish_until(self, p, confirmed: int, what: str, timeout: float = 90) -> int:
        """Publish until ``confirmed`` are (a queue electing a leader nacks meanwhile),
        pausing a little after each refusal; the publishes made."""
        made = ok = 0
        deadline = time.monotonic() + timeout
        while ok < confirmed and time.monotonic() < deadline:
            made += 1
            if p.publish(b"%s %d" % (what.encode(), made)):
                ok += 1
            else:
                time.sleep(0.05)
        self.progress(f"{what}: {ok} of {made} confirmed")
        return made

    def wait_clustered(self, what: str) -> None:
        from kafka_audit.scenarios.cluster import wait_until

        wait_until(self.rabbit.clustered, 120, what, every=1)


@dataclass(frozen=True)
class RabbitScenario:
    name: str
    summary: str
    expects_loss: bool
    causes: frozenset[str]
    declare: Callable[[RabbitRun], None]
    fault: Callable[[RabbitRun], None]


@dataclass
class RabbitReport:
    name: str
    key: str
    published: int
    confirmed: int
    truth_lost: set[int]
    found_lost: set[int]
    causes: set[str]
    counts: dict[str, int]
    expects_loss: bool
    allowed: frozenset[str]
    #: what the lost findings name as the setting that lost them (``evidence.setting``)
    settings_named: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return (self.found_lost == self.truth_lost and bool(self.truth_lost) == self.expects_loss
                and self.causes <= self.allowed)

    def text(self) -> str:
        return "\n".join([
            f"  scenario {self.name}: queue {self.key}",
            f"  published {self.published}, confirmed {self.confirmed}; verdicts {self.counts}",
            f"  lost according to the audit          : {len(self.found_lost)}",
            f"  confirmed and absent from a full read: {len(self.truth_lost)}",
            f"  causes: {', '.join(sorted(self.causes)) or '-'} (allowed: "
            f"{', '.join(sorted(self.allowed)) or 'none'})",
            *(f"  the setting that lost them: {t}" for t in sorted(self.settings_named)),
            f"  verdict: {'MATCH' if self.ok else 'MISMATCH'}"])


# ---- the scenarios' steps ---------------------------------------------------------------

def _mirrored(promote: str) -> Callable[[RabbitRun], None]:
    def declare(run: RabbitRun) -> None:
        run.rabbit.set_policy(run.queue, f"^{run.queue}$", {
            "ha-mode": "all", "ha-sync-mode": "manual", "ha-promote-on-failure": promote})
        _declare(run, 1, {"x-queue-master-locator": "client-local"})
    return declare


def _declare(run: RabbitRun, node: int, arguments: dict | None = None) -> None:
    """The scenario's queue, declared through ``node`` (a classic queue's master there)."""
    import pika

    conn = pika.BlockingConnection(run.rabbit.parameters(node))
    conn.channel().queue_declare(run.queue, durable=True, arguments=arguments)
    conn.close()


def _unsynced_master_lost(run: RabbitRun, comes_back: bool) -> None:
    from kafka_audit.scenarios.cluster import wait_until

    with run.publisher({1: run.rabbit.parameters(1)}) as p:
        run.publish(p, 200, "before the mirrors restart")
        for n in (2, 3):  # a mirror that comes back is empty: unsynchronised
            run.rabbit.stop(n)
            run.rabbit.start(n)
            run.wait_clustered(f"node {n} back in the cluster")
        run.progress("both mirrors restarted: unsynchronised")
        run.publish(p, 100, "after")
        run.record = list(p.record)
    run.rabbit.kill(1)
    run.progress("node 1, the master, killed")
    if comes_back:
        run.rabbit.start(1)
        run.wait_clustered("node 1 back with its disk")
        return
    name = run.rabbit.cfg.node_name(1)
    wait_until(lambda: (run.rabbit.api(2, f"queues/%2F/{run.queue}").get("node")
                        not in (None, name)), 60, "a mirror promoted master")
    run.progress("a mirror was promoted master")


def _quorum_leader_kill(run: RabbitRun) -> None:
    info = run.rabbit.api(1, f"queues/%2F/{run.queue}")
    leader = {v: k for k, v in run.rabbit.node_numbers().items()}.get(info["leader"], 1)
    try:
        with run.publisher(first=leader) as p:
            run.publish(p, 200, "before the kill")
            run.rabbit.kill(leader)
            run.progress(f"node {leader}, the leader, killed")
            run.publish_until(p, 200, "after")
            run.record = list(p.record)
    finally:
        run.rabbit.start(leader)
        run.wait_clustered(f"node {leader} back in the cluster")


def _transient_restart(run: RabbitRun) -> None:
    with run.publisher({1: run.rabbit.parameters(1)}, persistent=False) as p:
        run.publish(p, 200, "transient")
        run.record = list(p.record)
    run.rabbit.stop(1)
    run.rabbit.start(1)
    run.wait_clustered("node 1 back in the cluster")
    run.progress("node 1, the queue's, restarted")


def _mirrored_synced(run: RabbitRun) -> None:
    run.rabbit.set_policy(run.queue, f"^{run.queue}$", {"ha-mode": "all",
                                                         "ha-sync-mode": "automatic"})
    _declare(run, 3, {"x-queue-master-locator": "client-local"})


def _cut_master(mode: str) -> Callable[[RabbitRun], None]:
    """Node 3, the master of a queue mirrored on every node (every mirror synchronised),
    cut off from nodes 1 and 2 while the publisher goes on through it, under partition
    handling ``mode``; the cut healed after."""
    def fault(run: RabbitRun) -> None:
        import pika

        from kafka_audit.scenarios.cluster import wait_until
        from kafka_audit.scenarios.faults import isolate_rabbit

        rabbit = run.rabbit
        rabbit.set_partition_handling(mode)
        held: list = []
        try:
            with run.publisher(first=3) as p:
                run.publish(p, 100, "before the cut")
                with isolate_rabbit(rabbit, 3):
                    run.progress(f"node 3, the master, cut off ({mode})")
                    run.publish(p, 100, "during the cut")
                    if mode == "autoheal":
                        wait_until(lambda: not (rabbit.view(1) or {}).get(
                            rabbit.cfg.node_name(3), {}).get("running", True), 60,
                            "nodes 1 and 2 to see node 3 gone", every=1)
                        # autoheal's winner is the side with the most client
                        # connections: the publisher leaves node 3, two clients idle on
                        # node 1 (no heartbeats: nothing services them)
                        p._lost()  # noqa: SLF001 - the next publish connects anew
                        held = [pika.BlockingConnection(rabbit.parameters(1, heartbeat=0))
                                for _ in range(2)]
                        run.publish(p, 100, "on the majority's side")
                    else:
                        wait_until(lambda: rabbit.view(3) is None, 60,
                                   "node 3 to pause", every=1)
                        run.publish(p, 100, "after node 3 paused")
                run.progress("the cut healed")
                run.record = list(p.record)
            wait_until(rabbit.clustered, 180, "one cluster again", every=1)
            run.progress("the cluster is whole again")
        finally:
            for conn in held:
                _close_quietly(conn)
            rabbit.set_partition_handling(rabbit.cfg.partition_handling)
    return fault


def _close_quietly(conn) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - a connection being given up
        pass


RABBIT_SCENARIOS: dict[str, RabbitScenario] = {s.name: s for s in (
    RabbitScenario("rabbit-mirror-unsynced-promoted",
                   "mirrored queue, ha-promote-on-failure=always: unsynchronised mirror "
                   "promoted, its master's messages lost", True,
                   frozenset({Cause.unsynced_promotion}), _mirrored("always"),
                   lambda run: _unsynced_master_lost(run, comes_back=False)),
    RabbitScenario("rabbit-mirror-when-synced",
                   "the same with when-synced: the master comes back with its disk, no loss",
                   False, frozenset(), _mirrored("when-synced"),
                   lambda run: _unsynced_master_lost(run, comes_back=True)),
    RabbitScenario("rabbit-quorum-leader-kill",
                   "quorum queue's leader killed mid-publish: no confirmed message lost",
                   False, frozenset(),
                   lambda run: _declare(run, 1, {"x-queue-type": "quorum"}),
                   _quorum_leader_kill),
    RabbitScenario("rabbit-transient-restart",
                   "messages without the persistent flag, their queue's node restarted: lost",
                   True, frozenset({Cause.transient_restart}),
                   lambda run: _declare(run, 1, {"x-queue-type": "classic"}),
                   _transient_restart),
    RabbitScenario("rabbit-partition-autoheal",
                   "mirrored queue's master cut off under autoheal, published to on both "
                   "sides: the losing side restarted, its confirmed messages lost", True,
                   frozenset({Cause.partition_loser}), _mirrored_synced,
                   _cut_master("autoheal")),
    RabbitScenario("rabbit-partition-pause-minority",
                   "the same under pause_minority: the cut-off master pauses, no confirmed "
                   "message lost", False, frozenset(), _mirrored_synced,
                   _cut_master("pause_minority")),
)}


# ---- the run -----------------------------------------------------------------------------

@contextmanager
def _thread(target: Callable[[threading.Event], None], name: str):
    stop = threading.Event()
    t = threading.Thread(target=target, args=(stop,), name=name, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(60)


def _peek(rabbit, queue: str) -> set[int]:
    """A plain consumer's full read, given back: each message the queue holds taken
    without an acknowledgement, the channel then closed (the queue holds them all again)."""
    import pika

    from kafka_audit.schemas.stamp import stamp_of_amqp

    conn = pika.BlockingConnection(rabbit.parameters(rabbit.running()[0]))
    ch = conn.channel()
    seen: set[int] = set()
    while True:
        method, props, _ = ch.basic_get(queue, auto_ack=False)
        if method is None:
            break
        stamp = stamp_of_amqp(props.headers)
        if stamp is not None:
            seen.add(stamp.seq)
    conn.close()
    return seen


def audit_rabbit_until_judged(spark, settings, key: str, timeout: float = 180,
                              progress: Callable[[str], None] = print) -> dict[str, int]:
    """Audit passes until no write of ``key`` is pending; its verdicts, counted."""
    import pyarrow.compute as pc

    from kafka_audit.jobs.audit.audit_pass import run_audit_pass
    from kafka_audit.scenarios.cluster import wait_until
    from kafka_audit.store import read_table

    def judged() -> bool:
        summary = run_audit_pass(spark, settings, quality=False)
        progress(summary.line())
        state = read_table(settings.table_path("partition_state"), "partition_state",
                           where=(pc.field("pass_id") == summary.pass_id)
                           & (pc.field("topic") == key))
        return bool(state.num_rows) and sum(state.column("pending").to_pylist()) == 0

    wait_until(judged, timeout, f"every write of {key} judged", every=1)
    counts: dict[str, int] = {}
    for f in read_table(settings.table_path("findings"), "findings",
                        where=pc.field("topic") == key).to_pylist():
        counts[f["kind"]] = counts.get(f["kind"], 0) + f["count"]
    return counts


def run_rabbit_scenario(name: str, settings, rabbit, spark,
                        progress: Callable[[str], None] = print) -> RabbitReport:
    """Run scenario ``name`` on the running local RabbitMQ cluster ``rabbit``; its report."""
    import pyarrow.compute as pc

    from kafka_audit.jobs.consume.rabbit_reader import RabbitReader
    from kafka_audit.jobs.watcher.rabbit_watcher import RabbitWatcher
    from kafka_audit.scenarios.cluster import wait_until
    from kafka_audit.scenarios.rabbit_cluster import GUEST
    from kafka_audit.schemas.systems import rabbit_key
    from kafka_audit.store import read_table

    sc = RABBIT_SCENARIOS[name]
    queue = f"{name}-{uuid.uuid4().hex[:8]}"
    key = rabbit_key("queue", "/", queue)
    run = RabbitRun(rabbit, settings, queue, key, progress)
    progress(f"{name}: queue {queue}")
    sc.declare(run)
    watcher = RabbitWatcher(settings.table_path("cluster_events"), rabbit.management_urls(),
                            [key], GUEST, GUEST, interval=0.3, numbers=rabbit.node_numbers())
    try:
        with _thread(watcher.run, "rabbit-watcher"):
            wait_until(lambda: watcher.polls, 30, "the RabbitMQ watcher's first poll")
            sc.fault(run)
            held = _peek(rabbit, queue)
            progress(f"a full read finds {len(held)} stamped messages in the queue")
            reader = RabbitReader(settings, {n: rabbit.parameters(n) for n in rabbit.nodes},
                                  [key], name=queue, barrier_seconds=0.5, flush_seconds=0.2)
            with _thread(reader.run, "rabbit-reader"):
                counts = audit_rabbit_until_judged(spark, settings, key, progress=progress)
    finally:  # the cluster whole again for what runs next
        for n in rabbit.nodes:
            if rabbit.pid(n) is None:
                rabbit.start(n)
        run.wait_clustered("every node back in one cluster")
    findings = read_table(settings.table_path("findings"), "findings",
                          where=pc.field("topic") == key).to_pylist()
    lost = [f for f in findings if f["kind"] == "lost"]
    confirmed = {s for s, e in run.record if e is None}
    return RabbitReport(
        name, key, len(run.record), len(confirmed), confirmed - held,
        {f["seq"] + i for f in lost for i in range(f["count"])},
        {f["cause"] for f in lost}, counts, sc.expects_loss, sc.causes,
        {json.loads(f["evidence"] or "{}").get("setting") for f in lost} - {None})
