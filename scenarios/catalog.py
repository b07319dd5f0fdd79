"""The fault scenarios, by name: the loss modes the field knows, on the real cluster.

``kafka-audit scenario list`` names them; ``kafka-audit scenario run NAME [--seed N]
[--seconds S]`` runs one (:func:`kafka_audit.scenarios.runner.run_scenario`): a fresh
topic with the scenario's settings, instrumented producers through the fault, the fault
schedule logged into ``fault_events`` (which the verdict rules never read), healing, a
final full read, ground truth computed by the harness alone, then the auditor's findings
and windows compared write for write, a text report and a picture of the partition's
timeline.

Each scenario says what the cluster is expected to do to acknowledged writes
(``expect_loss``: True, False, or None where the cluster decides and the report just
says what it did), which causes its losses may carry, and which windows must appear.
Faults here are processes stopped, killed or restarted, listeners cut with iptables on
loopback, and one broker cut off from the others (``scenarios/faults.py``, ``isolate``:
its own listeners by port, its connections to the others by its cgroup) while its
clients still reach it.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kafka_audit.errors import ClusterError
from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.faults import cut_port, isolate

__all__ = ["Scenario", "Context", "SCENARIOS", "scenario"]


@dataclass
class Context:
    """What a fault schedule works with: the cluster, the topic, the settings, a random
    source (``--seed``), the length of the traffic and ``fault(kind, **detail)`` to log
    each fault as it happens (into ``fault_events``)."""

    cluster: object
    settings: object
    topic: str
    rng: random.Random
    seconds: float
    fault: Callable[..., None]
    progress: Callable[[str], None]
    #: the scenario's watcher (``jobs/watcher/watcher.py``), running beside the faults; None
    #: where none runs
    watcher: object | None = None

    def leader(self, partition: int = 0) -> int:
        return self.cluster.leader_of(self.topic, partition)  # type: ignore[attr-defined]

    def hold_until_two_leaders_seen(self, most: float, partition: int = 0) -> None:
        """Keep the fault as it is until the watcher has seen two brokers each name
        themselves leader of ``partition`` (in two polls in a row:
        ``ClusterWatcher._split_brain``), at most ``most`` seconds: a split brain shorter
        than the watcher's polls (a loaded machine's poll takes seconds) is not seen, and
        the fault's length should not decide whether it is. Not seen by then: said, and
        the scenario's judgement tells."""
        if self.watcher is None:
            return
        key = (self.topic, partition)
        try:
            wait_until(lambda: key in self.watcher.two_leaders, most,  # type: ignore[attr-defined]
                       "the watcher to see two leaders")
        except ClusterError:
            self.progress(f"the watcher saw no two leaders of {key} in {most:.0f} s")

    def heal_all(self) -> None:
        """Every node running, every ISR full, preferred leaders back."""
        c = self.cluster
        for n in c.nodes:  # type: ignore[attr-defined]
            if n not in c.running():  # type: ignore[attr-defined]
                c.start(n)  # type: ignore[attr-defined]
                self.fault("node_started", node=n)
        wait_until(lambda: all(len(p.isr) == len(p.replicas)
                               for p in c.partitions(self.topic)), 120,  # type: ignore
                   f"every ISR of {self.topic} to be full again")
        for info in c.partitions(self.topic):  # type: ignore[attr-defined]
            c.elect_preferred(self.topic, info.partition)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    schedule: Callable[[Context], None]  # the faults, run while the producers write
    acks: str = "all"
    idempotence: bool = False
    retries: int = 2
    topic_config: dict = field(default_factory=dict)
    expect_loss: bool | None = None  # None: whatever the cluster does, reported exactly
    causes: frozenset[str] = frozenset()  # the causes its losses may carry
    windows: frozenset[str] = frozenset()  # window kinds that must appear
    producer: dict = field(default_factory=dict)  # further producer properties
    rate: float = 5000


SCENARIOS: dict[str, Scenario] = {}


def scenario(s: Scenario) -> Scenario:
    SCENARIOS[s.name] = s
    return s


def _pause(ctx: Context, seconds: float) -> None:
    time.sleep(seconds)  # part of the fault's shape: traffic flows meanwhile


def _acks1_kill(ctx: Context) -> None:
    _pause(ctx, ctx.seconds * 0.3)
    leader = ctx.leader()
    followers = [n for n in ctx.cluster.running() if n != leader]  # type: ignore
    # followers frozen for a moment (they stay in the ISR) so the leader holds acks=1 writes
    # they lack; then the leader is killed and one of them is elected without that tail
    for n in followers:
        ctx.cluster.signal(n, signal.SIGSTOP)  # type: ignore[attr-defined]
    ctx.fault("followers_paused", nodes=followers)
    try:
        time.sleep(0.5)
        ctx.cluster.kill(leader)  # type: ignore[attr-defined]
        ctx.fault("leader_killed", node=leader)
    finally:
        for n in followers:
            ctx.cluster.signal(n, signal.SIGCONT)  # type: ignore[attr-defined]
        ctx.fault("followers_resumed", nodes=followers)
    wait_until(lambda: ctx.leader() not in (-1, leader), 60, "a new leader")
    _pause(ctx, 1)
    ctx.heal_all()


@contextlib.contextmanager
def _isr_shrunk_to_leader(ctx: Context):
    """The leader's replication listener cut, until the block ends: its followers stop
    fetching and leave the ISR; producers still reach the leader. Yields the leader."""
    leader = ctx.leader()
    port = ctx.settings.cluster.replication_port(leader)  # type: ignore[attr-defined]
    with cut_port(port):
        ctx.fault("replication_cut", node=leader, port=port)
        wait_until(lambda: ctx.cluster.partitions(ctx.topic)[0].isr == (leader,), 60,
                   "the ISR to shrink to the leader")
        yield leader
    ctx.fault("replication_healed", node=leader)


def _isr_shrunk_then_leader_lost(ctx: Context) -> None:
    """The ISR shrunk to the leader, then the leader killed: with unclean election on, an
    out-of-sync follower takes over."""
    _pause(ctx, ctx.seconds * 0.2)
    with _isr_shrunk_to_leader(ctx) as leader:
        _pause(ctx, ctx.seconds * 0.3)  # writes acknowledged by the leader alone
        ctx.cluster.kill(leader)  # type: ignore[attr-defined]
        ctx.fault("leader_killed", node=leader)
        wait_until(lambda: ctx.leader() not in (-1, leader), 90, "an unclean election")
    _pause(ctx, 1)
    ctx.heal_all()


def _isr_shrunk_then_leader_isolated(ctx: Context) -> None:
    """Jepsen's Kafka case (2013, ZooKeeper era): the ISR shrunk to the leader, then the
    leader cut off from the controllers (ZooKeeper too) and its followers, its producers
    still reaching it. With unclean election on, an out-of-sync follower is elected;
    the old leader, alone in its own ISR, goes on acknowledging acks=all writes until it
    is healed and truncates to the new leader's log."""
    _pause(ctx, ctx.seconds * 0.2)
    with _isr_shrunk_to_leader(ctx) as leader:
        _pause(ctx, ctx.seconds * 0.2)  # writes acknowledged by the leader alone
        _isolated(ctx, leader, ctx.seconds * 0.2)
    _pause(ctx, 1)
    ctx.heal_all()


def _min_isr_2_same_faults(ctx: Context) -> None:
    """As above with min.insync.replicas=2: the cluster refuses writes instead."""
    _pause(ctx, ctx.seconds * 0.2)
    with _isr_shrunk_to_leader(ctx):
        _pause(ctx, ctx.seconds * 0.3)  # writes refused: NOT_ENOUGH_REPLICAS
    ctx.heal_all()


def _leader_paused(ctx: Context) -> None:
    """The leader frozen longer than the broker session timeout, then resumed."""
    _pause(ctx, ctx.seconds * 0.3)
    leader = ctx.leader()
    ctx.cluster.signal(leader, signal.SIGSTOP)  # type: ignore[attr-defined]
    ctx.fault("leader_paused", node=leader)
    try:
        timeout = float(ctx.settings.cluster.broker_overrides.get(  # type: ignore
            "broker.session.timeout.ms", 9000)) / 1000
        time.sleep(timeout * 2)
    finally:
        ctx.cluster.signal(leader, signal.SIGCONT)  # type: ignore[attr-defined]
        ctx.fault("leader_resumed", node=leader)
    _pause(ctx, 2)
    ctx.heal_all()


def _retries_without_idempotence(ctx: Context) -> None:
    """The leader's replication cut briefly: its appends wait for followers until the
    broker times the requests out, the producer retries, the first appends stay."""
    _pause(ctx, ctx.seconds * 0.3)
    leader = ctx.leader()
    port = ctx.settings.cluster.replication_port(leader)  # type: ignore[attr-defined]
    with cut_port(port):
        ctx.fault("replication_cut", node=leader, port=port)
        time.sleep(2)
    ctx.fault("replication_healed", node=leader)
    ctx.heal_all()


def _rolling_restart(ctx: Context) -> None:
    """Each broker stopped cleanly (SIGTERM) and started again, one after another."""
    _pause(ctx, ctx.seconds * 0.2)
    for n in list(ctx.cluster.nodes):  # type: ignore[attr-defined]
        ctx.cluster.stop(n)  # type: ignore[attr-defined]
        ctx.fault("node_stopped", node=n)
        ctx.cluster.start(n)  # type: ignore[attr-defined]
        ctx.fault("node_started", node=n)
        wait_until(lambda: all(len(p.isr) == len(p.replicas)
                               for p in ctx.cluster.partitions(ctx.topic)), 120,  # type: ignore
                   f"node {n} back in every ISR")
    ctx.heal_all()


def _isolated(ctx: Context, node: int, hold: float) -> None:
    """``node`` cut off from the other brokers until the quorum has fenced it and (if it
    led) elected another leader, then ``hold`` seconds more; its clients reach it all
    along. What the quorum decides is read from another broker: the isolated one's own
    metadata is stale."""
    other = next(n for n in ctx.cluster.nodes if n != node)  # type: ignore[attr-defined]
    led = ctx.leader() == node
    with isolate(ctx.cluster, node):
        ctx.fault("node_isolated", node=node, led=led)
        wait_until(lambda: node not in ctx.cluster.partitions(  # type: ignore[attr-defined]
            ctx.topic, seen_by=other)[0].isr, 60, f"node {node} out of the ISR")
        if led:
            new = wait_until(lambda: (n if (n := ctx.cluster.leader_of(  # type: ignore
                ctx.topic, 0, seen_by=other)) not in (-1, node) else None), 60,
                "the quorum to elect another leader")
            ctx.fault("leader_elected", node=new, while_isolated=node)
        _pause(ctx, hold)  # the isolated node keeps serving its clients meanwhile
        if led:
            ctx.hold_until_two_leaders_seen(30)
    ctx.fault("node_healed", node=node)


def _isolated_leader(ctx: Context) -> None:
    """The leader cut off from the controllers and its followers: the quorum fences it
    and elects a follower; the old leader, unaware, keeps acknowledging its producers
    until it is healed and truncates to the new leader's log."""
    _pause(ctx, ctx.seconds * 0.2)
    _isolated(ctx, ctx.leader(), ctx.seconds * 0.3)
    ctx.heal_all()


def _follower_partitioned(ctx: Context) -> None:
    """A follower cut off from the leader and the controllers: it leaves the ISR and is
    fenced; writes go on with the other two replicas."""
    _pause(ctx, ctx.seconds * 0.2)
    leader = ctx.leader()
    follower = next(n for n in ctx.cluster.nodes if n != leader)  # type: ignore[attr-defined]
    _isolated(ctx, follower, ctx.seconds * 0.3)
    ctx.heal_all()


def _partition_dir(ctx: Context, node: int) -> Path:
    """Where broker ``node`` keeps the scenario's partition (its ``log.dirs`` is one folder)."""
    return ctx.cluster.node_dir(node) / "data" / f"{ctx.topic}-0"  # type: ignore[attr-defined]


def _kill_all(ctx: Context) -> list[int]:
    """Every node SIGKILLed at once (the signals first, then the waits): a power cut."""
    nodes = list(ctx.cluster.running())  # type: ignore[attr-defined]
    for n in nodes:
        ctx.cluster.signal(n, signal.SIGKILL)  # type: ignore[attr-defined]
    ctx.fault("all_killed", nodes=nodes)
    wait_until(lambda: not ctx.cluster.running(), 30, "every node to exit")  # type: ignore
    return nodes


def _simultaneous_crash(ctx: Context) -> None:
    """Every broker crashes at once, each losing what its OS had not yet written back.

    ``kill -9`` alone keeps the page cache, so nothing unflushed is lost. A power cut
    keeps only what reached the disk: here each node's *writeback* is the instant its
    partition's segment files were last on disk (their sizes then, one node after
    another, as separate machines flush at separate times); after the kill each file is
    cut back to that size and files created after it are removed, which is what a power
    cut does to writes the OS still held. Kafka's own recovery of an unclean shutdown
    then runs on restart (it rebuilds the indexes and truncates a torn batch)."""
    _pause(ctx, ctx.seconds * 0.3)
    on_disk: dict[int, dict[Path, int]] = {}
    for n in ctx.rng.sample(list(ctx.cluster.nodes), len(ctx.cluster.nodes)):  # type: ignore
        on_disk[n] = {f: f.stat().st_size for f in _partition_dir(ctx, n).glob("*.log")}
        ctx.fault("writeback", node=n, bytes=sum(on_disk[n].values()))
        time.sleep(ctx.rng.uniform(0.2, 0.5))
    time.sleep(1)  # acknowledged writes now sit in every node's page cache only
    nodes = _kill_all(ctx)
    for n in nodes:
        for f in _partition_dir(ctx, n).glob("*.log"):
            if f not in on_disk[n]:
                f.unlink()
            elif f.stat().st_size > on_disk[n][f]:
                os.truncate(f, on_disk[n][f])
    ctx.fault("unwritten_tails_discarded", nodes=nodes)
    for n in nodes:
        ctx.cluster.start(n)  # type: ignore[attr-defined]
        ctx.fault("node_started", node=n)
    ctx.heal_all()
    wait_until(lambda: all(p.leader >= 0 and len(p.isr) == len(p.replicas)
                           for p in ctx.cluster.partitions()), 180,  # type: ignore[attr-defined]
               "every partition of every topic led with its ISR full (all nodes restarted)")


def _disk_loss(ctx: Context) -> None:
    """The ISR shrunk to the leader (min.insync.replicas=1: it acknowledges alone), the
    leader killed, its data folder for the partition removed while it is down, then
    started again: the only in-sync replica is back, empty, and leads; the followers
    truncate to it."""
    _pause(ctx, ctx.seconds * 0.2)
    with _isr_shrunk_to_leader(ctx) as leader:
        _pause(ctx, ctx.seconds * 0.3)  # writes acknowledged by the leader alone
        ctx.cluster.kill(leader)  # type: ignore[attr-defined]
        ctx.fault("leader_killed", node=leader)
    shutil.rmtree(_partition_dir(ctx, leader))
    ctx.fault("data_removed", node=leader, folder=str(_partition_dir(ctx, leader)))
    ctx.cluster.start(leader)  # type: ignore[attr-defined]
    ctx.fault("node_started", node=leader)
    ctx.heal_all()


#: a producer that reports a write it cannot place within seconds, without retrying: the
#: scenarios where the cluster refuses or cannot commit writes
GIVE_UP_FAST = {"retries": 0, "message.timeout.ms": 3000, "request.timeout.ms": 2000}

scenario(Scenario(
    "acks1-leader-kill", "acks=1, the leader SIGKILLed mid-stream: loss", _acks1_kill,
    acks="1", expect_loss=True, causes=frozenset({"acks=1 fail-over"})))
scenario(Scenario(
    "isr-shrunk-unclean", "acks=all, min.insync.replicas=1, the ISR shrunk to the leader "
    "(its replication cut), the leader killed, unclean election on: loss even with acks=all",
    _isr_shrunk_then_leader_lost,
    topic_config={"min.insync.replicas": "1", "unclean.leader.election.enable": "true"},
    expect_loss=True,
    causes=frozenset({"ISR shrunk to leader then leader lost", "unclean election"}),
    windows=frozenset({"exposure"})))
scenario(Scenario(
    "isr-shrunk-isolated", "Jepsen's case: acks=all, min.insync.replicas=1, unclean "
    "election on, the ISR shrunk to the leader, then the leader cut off from the "
    "controllers and its followers but not its producers: a follower outside the ISR is "
    "elected while the old leader acknowledges alone; loss",
    _isr_shrunk_then_leader_isolated,
    topic_config={"min.insync.replicas": "1", "unclean.leader.election.enable": "true"},
    expect_loss=True,
    causes=frozenset({"ISR shrunk to leader then leader lost", "unclean election",
                      "isolated leader (split brain)"}),
    windows=frozenset({"exposure"})))
scenario(Scenario(
    "min-isr-2", "acks=all, min.insync.replicas=2, the ISR shrunk to the leader: writes "
    "refused, no loss; rejection and exposure windows", _min_isr_2_same_faults,
    topic_config={"min.insync.replicas": "2"}, expect_loss=False,
    producer=GIVE_UP_FAST,
    windows=frozenset({"rejection", "exposure"})))
scenario(Scenario(
    "leader-paused", "the leader frozen (SIGSTOP) twice the broker session timeout, then "
    "resumed: whatever the cluster does, reported exactly", _leader_paused))
scenario(Scenario(
    "retries-duplicates", "retries without idempotence while the leader cannot replicate: "
    "duplicates (and reordering), no loss", _retries_without_idempotence,
    producer={"request.timeout.ms": 1000, "message.timeout.ms": 60000, "retries": 1000,
              "max.in.flight.requests.per.connection": 5},
    expect_loss=False))
scenario(Scenario(
    "rolling-restart", "a healthy rolling restart of all three brokers: no loss, no false "
    "finding", _rolling_restart, idempotence=True, expect_loss=False))
scenario(Scenario(
    "isolated-leader", "acks=1, the leader cut off from the controllers and its followers "
    "but reachable by its producers: it keeps acknowledging after the quorum elected "
    "another leader; loss", _isolated_leader, acks="1", expect_loss=True,
    causes=frozenset({"acks=1 fail-over", "isolated leader (split brain)"}),
    windows=frozenset({"reduced_redundancy", "split_brain"})))
scenario(Scenario(
    "isolated-leader-min-isr-2", "the same with acks=all and min.insync.replicas=2: the "
    "old leader cannot commit, its writes time out; no loss", _isolated_leader,
    topic_config={"min.insync.replicas": "2"}, expect_loss=False,
    producer=GIVE_UP_FAST,
    windows=frozenset({"reduced_redundancy", "split_brain"})))
scenario(Scenario(
    "follower-partitioned", "a follower cut off from the leader and the controllers: no "
    "loss, a reduced-redundancy window", _follower_partitioned, expect_loss=False,
    windows=frozenset({"reduced_redundancy"})))
scenario(Scenario(
    "simultaneous-crash", "acks=all, every broker killed at once, each losing the writes "
    "its OS had not written back (a power cut), then restarted: loss of unflushed writes",
    _simultaneous_crash, expect_loss=True,
    # on the metadata log's exact timeline the nodes may be fenced one by one, the ISR
    # shrink to the leader and the same leader return: a lost disk's shape, told apart by
    # every replica having gone down (the cluster-wide broker rows in every partition's
    # evidence)
    causes=frozenset({"simultaneous crash"})))
scenario(Scenario(
    "disk-loss", "acks=all, min.insync.replicas=1, the ISR shrunk to the leader, the "
    "leader killed and its data folder removed, then restarted: it leads, empty; loss",
    _disk_loss, topic_config={"min.insync.replicas": "1"}, expect_loss=True,
    causes=frozenset({"disk loss"}), windows=frozenset({"exposure"})))
