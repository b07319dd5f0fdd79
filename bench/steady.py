"""What the steady-state benchmarks share (``bench/latency.py``, ``bench/soak.py``).

* settings from the environment (the benchmark's own ports and home, see bench/README.md),
  with the cluster's automatic leader rebalancing off: each fault is then the kill
  alone (a preferred-leader election after the killed node rejoins would destroy
  ``acks=1`` writes of its own, a second fault at another time);
* :class:`Load`: an ``acks=1`` instrumented producer in a thread at a steady rate, whose
  own record of acks (ground truth) is kept in typed arrays (a list of tuples would
  take about 150 bytes a write: 2.7 GB for the soak's 18 million);
* :func:`kill_leader`: a partition's followers frozen for half a second (they stay in the
  ISR, the leader acknowledges alone), its leader SIGKILLed, the node restarted and
  back in every ISR;
* :func:`missing_from_log`: the ground truth, a plain full read of the topic with the
  rule of ``scenarios/groundtruth.py`` (the same consumer settings and stamp rule),
  folding what it finds into a bitmap of sequence numbers instead of a dict of every
  record, so that 18 million records fit;
* :func:`lost_over_rest`: every loss finding of a topic, over HTTP, as single writes.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from kafka_audit.scenarios.cluster import LocalCluster, wait_until
from kafka_audit.settings import Settings, get_settings

__all__ = ["bench_settings", "Load", "kill_leader", "missing_from_log", "lost_over_rest",
           "rss_by_process", "cpu_by_process", "cpu_seconds", "cpu_cores", "processes",
           "process_tree", "fresh_cluster", "cluster_down", "say"]


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def bench_settings(settle: float) -> Settings:
    """The environment's settings (ports, home: bench/README.md) with ``settle`` seconds
    of settle period and the leader rebalancing off."""
    base = get_settings()
    overrides = {**base.cluster.broker_overrides, "auto.leader.rebalance.enable": False}
    return base.model_copy(update={
        "cluster": base.cluster.model_copy(update={"broker_overrides": overrides}),
        "audit": base.audit.model_copy(update={"settle_seconds": settle})})


class _Record:
    """An ``AuditedProducer``'s ``record`` (``(seq, topic, partition, offset)`` per ack) in
    three typed arrays; iterating gives the tuples back."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.seq, self.partition, self.offset = array("q"), array("i"), array("q")

    def append(self, item: tuple[int, str, int, int]) -> None:
        seq, _topic, partition, offset = item
        self.seq.append(seq)
        self.partition.append(partition)
        self.offset.append(offset)

    def __len__(self) -> int:
        return len(self.seq)

    def __iter__(self):
        for i in range(len(self.seq)):
            yield self.seq[i], self.topic, self.partition[i], self.offset[i]


@dataclass
class Load:
    """An instrumented ``acks=1`` producer at ``rate`` msg/s in a thread; ``sent_at`` maps
    wall times to the sequence numbers sent by then (to tell which kill lost a write)."""

    settings: Settings
    topic: str
    rate: float
    acks: str = "1"
    producer = None
    marks: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Load:
        from kafka_audit.producers.instrumented import AuditedProducer
        from kafka_audit.producers.load import LoadSpec, producer_config

        spec = LoadSpec(topic=self.topic, rate=self.rate, acks=self.acks, retries=2,
                        producer_id="bench")
        self.producer = AuditedProducer(producer_config(self.settings, spec), spec.producer_id,
                                        self.settings, keep_record=True)
        self.producer.record = _Record(self.topic)
        self._thread = threading.Thread(target=self._run, name="bench-producer", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        from kafka_audit.producers.load import SEND, STOP, Pacer, produce_paced

        produce_paced(self.producer, self.topic, Pacer(self.rate),
                      lambda _: STOP if self._stop.is_set() else SEND, os.urandom(88),
                      on_every=lambda sent: self.marks.append((time.time(), sent)))

    def sent_by(self, wall: float) -> int:
        """How many writes had been sent by wall time ``wall`` (to the nearest 500)."""
        return max([n for t, n in self.marks if t <= wall], default=0)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)
        self.producer.close()


def cluster_down(cluster: LocalCluster, tries: int = 4) -> None:
    """Stop the cluster; a loaded machine may take more than the launcher's 30 s a node."""
    from kafka_audit.errors import ClusterError

    for n in range(tries):
        try:
            cluster.down()
            return
        except ClusterError as exc:
            say(f"cluster down, try {n + 1}: {exc}")
            time.sleep(10)


def fresh_cluster(settings: Settings) -> LocalCluster:
    """The local cluster of ``settings``, stopped, wiped and started again. Wiped: the
    topics of earlier runs (gigabytes, 5,000 msg/s for minutes each) made a SIGKILLed
    broker's log recovery outlast the 90 s a kill waits for it to rejoin."""
    cluster = LocalCluster(settings)
    cluster_down(cluster)
    shutil.rmtree(settings.home_dir / "kafka", ignore_errors=True)
    cluster.up(say)
    return cluster


def settings_of_its_own(home: Path, offset: int) -> Settings:
    """Settings whose home is ``home`` and whose local cluster runs on the test cluster's
    ports plus ``offset`` (apart from the demo's, the tests' and the other benchmarks')."""
    ports = {"broker_base_port": 19091 + offset, "controller_base_port": 19191 + offset,
             "replication_base_port": 19291 + offset, "secure_base_port": 19391 + offset}
    return Settings(home=home, cluster=ports)


def cluster_of_its_own(settings: Settings) -> LocalCluster:
    """The local cluster of ``settings`` (:func:`settings_of_its_own`), stopped and wiped:
    ``up()`` it."""
    cluster = LocalCluster(settings)
    cluster.down()
    shutil.rmtree(settings.home_dir / "kafka", ignore_errors=True)
    return cluster


def kill_leader(cluster: LocalCluster, topic: str, lag_seconds: float = 0.5,
                progress=say, partition: int = 0) -> tuple[float, int, bool]:
    """Freeze ``partition``'s followers ``lag_seconds`` (they stay in the ISR: shorter than
    replica.lag.time.max.ms), SIGKILL its leader meanwhile, thaw them; wait for a new
    leader, restart the node and wait until it is back in every ISR. Returns the wall
    time of the kill, the node killed and whether it was the active controller too (on
    the test cluster's combined nodes: a second fail-over before the first, see
    ``LocalCluster.active_controller``)."""
    killed_at, leader, controller = _kill_and_restart(cluster, topic, lag_seconds, progress,
                                                      partition)
    _rejoined(cluster, topic, leader, progress)
    return killed_at, leader, controller


def kill_leader_twice(cluster: LocalCluster, topic: str, after: float,
                      lag_seconds: float = 0.5, progress=say, partition: int = 0
                      ) -> list[tuple[float, int, bool]]:
    """Two fail-overs of ``partition`` in a row: its leader killed as in
    :func:`kill_leader` and started again at once, then ``after`` seconds after the first
    kill the new leader killed in turn, before the first fail-over's losses could settle
    (on the test cluster's combined nodes the second election waits for the first node's
    controller to rejoin the quorum); both nodes registered and back in every ISR at the
    end. The two kills, as :func:`kill_leader` returns one."""
    first = _kill_and_restart(cluster, topic, lag_seconds, progress, partition)
    time.sleep(max(0.0, first[0] + after - time.time()))
    second = _kill_and_restart(cluster, topic, lag_seconds, progress, partition)
    for node in (first[1], second[1]):
        _rejoined(cluster, topic, node, progress)
    return [first, second]


def _kill_and_restart(cluster: LocalCluster, topic: str, lag_seconds: float, progress,
                      partition: int) -> tuple[float, int, bool]:
    """The kill of :func:`kill_leader`: a new leader elected, the node started again (not
    waited for)."""
    leader = cluster.leader_of(topic, partition)
    controller = cluster.active_controller() == leader
    followers = [n for n in cluster.running() if n != leader]
    for n in followers:
        cluster.signal(n, signal.SIGSTOP)
    try:
        time.sleep(lag_seconds)  # the leader acknowledges alone meanwhile (acks=1)
        killed_at = time.time()
        cluster.kill(leader)
    finally:
        for n in followers:
            cluster.signal(n, signal.SIGCONT)
    progress(f"SIGKILL node {leader}, leader of {topic}-{partition}"
             f"{' and the active controller' if controller else ''} (followers {followers} "
             f"frozen {lag_seconds}s before)")
    wait_until(lambda: cluster.leader_of(topic, partition) not in (-1, leader), 120,
               f"a new leader of {topic}-{partition}")
    cluster.start(leader)
    return killed_at, leader, controller


def _rejoined(cluster: LocalCluster, topic: str, node: int, progress) -> None:
    """``node`` registered again and back in every ISR of ``topic``."""
    wait_until(lambda: node in cluster.registered_brokers(), 120, f"node {node} to rejoin")
    wait_until(lambda: all(node in p.isr for p in cluster.partitions(topic)), 120,
               f"node {node} back in every ISR of {topic}")
    progress(f"node {node} back in every ISR of {topic}")


def missing_from_log(bootstrap: str, topic: str, record: _Record, producer_id: str,
                     run_id: str, timeout: float = 1800) -> list[tuple[int, int, int]]:
    """Acked writes ``(partition, offset, seq)`` whose stamp a full read of the topic now
    cannot find anywhere (:func:`~kafka_audit.scenarios.groundtruth.acked_but_missing`),
    folding the stamps of this producer run into a bitmap of sequence numbers as
    :func:`~kafka_audit.scenarios.groundtruth.scan_log` yields them (millions of records:
    no dictionary of every place)."""
    from kafka_audit.scenarios.groundtruth import scan_log

    top = max(record.seq, default=0)
    seen = bytearray(top + 1)
    for _p, _o, s in scan_log(bootstrap, topic, timeout):
        if s is not None and s[:2] == (producer_id, run_id) and 0 <= s[2] <= top:
            seen[s[2]] = 1
    return sorted((record.partition[i], record.offset[i], record.seq[i])
                  for i in range(len(record)) if not seen[record.seq[i]])


def lost_over_rest(base_url: str, topic: str) -> set[tuple[int, int, int]]:
    """Every write of ``topic`` its loss findings name, ``(partition, offset, seq)``, over
    HTTP (:func:`~kafka_audit.scenarios.harness.fetch_lost`)."""
    from kafka_audit.scenarios.harness import fetch_lost, lost_messages

    return set(lost_messages(fetch_lost(base_url, topic)))


def _children(pid: int) -> list[int]:
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(d))
            except (OSError, ValueError, IndexError):
                continue
    return kids


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return "?"
    text = b" ".join(args).decode(errors="replace")
    if "pyspark.daemon" in text or "pyspark/daemon" in text or "pyspark.worker" in text:
        return "python worker"
    if "MetadataTail" in text:  # the watcher's tail of the KRaft metadata log
        return "metadata-log tail (JVM)"
    if args and args[0].endswith(b"java"):
        return "spark driver (JVM)"
    if "kafka_audit.app.api_process" in text:
        return "API (Python, child)"
    if "kafka_audit.app.marker_process" in text:
        return "suspicion marker (Python, child)"
    return "kafka-audit run (Python)"


def process_tree(root: int, root_name: str = "kafka-audit run (Python)"
                 ) -> dict[str, list[int]]:
    """The pids of ``root`` (named ``root_name``) and its descendants by name: its API
    process, its Spark driver JVM, its Python workers (:func:`_name`)."""
    out: dict[str, list[int]] = {}
    todo, tree = [root], []
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(_children(pid))
    for pid in tree:
        out.setdefault(_name(pid) if pid != root else root_name, []).append(pid)
    return out


def processes(service_pid: int, cluster: LocalCluster, bench_pid: int) -> dict[str, list[int]]:
    """The pids of the service's Python process, its API process, its Spark driver JVM,
    its Python workers, each broker, and this benchmark process (the producer), by name."""
    out = process_tree(service_pid)
    for n in cluster.nodes:
        pid = cluster.pid(n)
        out[f"broker {n}"] = [pid] if pid else []
    out["producer (bench)"] = [bench_pid]
    return out


def rss_by_process(procs: dict[str, list[int]]) -> dict[str, float]:
    """RSS in MB of each of :func:`processes` (Python workers summed)."""
    return {name: sum(_rss_mb(p) for p in pids) for name, pids in procs.items()}


def cpu_by_process(procs: dict[str, list[int]]) -> dict[str, dict[int, float]]:
    """CPU seconds (user + system, threads included) each of :func:`processes` has used
    since it started, by pid: a process restarted since the last sample (a broker after a
    kill) is told apart by its pid."""
    return {name: {p: _cpu_s(p) for p in pids} for name, pids in procs.items()}


def cpu_seconds(before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]
                ) -> dict[str, float]:
    """CPU seconds each process used between two :func:`cpu_by_process` samples (a pid
    absent before counts from its start)."""
    return {name: sum(t - before.get(name, {}).get(p, 0.0) for p, t in pids.items())
            for name, pids in after.items()}


def cpu_cores(before: dict[str, dict[int, float]], after: dict[str, dict[int, float]],
              seconds: float) -> dict[str, float]:
    """Cores each process used between two :func:`cpu_by_process` samples ``seconds``
    apart."""
    return {name: used / seconds for name, used in cpu_seconds(before, after).items()}


def _cpu_s(pid: int) -> float:
    return stat_cpu_s(f"/proc/{pid}/stat")[1]


def stat_cpu_s(path: str) -> tuple[str, float]:
    """The name and CPU seconds (user and system) of a ``/proc/<pid>/stat`` or
    ``/proc/<pid>/task/<tid>/stat`` file; ("", 0.0) when it is gone."""
    try:
        with open(path) as f:
            text = f.read()
        name, rest = text[text.index("(") + 1:].rsplit(")", 1)
        fields = rest.split()
        return name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return "", 0.0
