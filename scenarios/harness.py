"""What every fault scenario shares: produce through a fault, audit until settled, serve.

The pieces a scenario (the demo, the real-cluster tests, the benchmarks) is
made of: a producer driven through a fault (:func:`produce_with_leader_kill`),
the consume job and audit passes run until nothing is pending
(:func:`audit_until_settled`), the REST API in a thread (:class:`ApiServer`)
and the findings fetched from it (:func:`fetch_lost`), and the helpers that
expand findings (ranges) into single writes to compare with ground truth.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kafka_audit.scenarios.cluster import LocalCluster, wait_until
from kafka_audit.schemas.events import TOPIC_CONFIG
from kafka_audit.settings import Settings

__all__ = ["produce_with_leader_kill", "audit_until_settled", "fetch_lost", "lost_messages",
           "expand_rows", "findings_of", "secondaries", "Secondaries", "assert_secondaries_match",
           "ApiServer", "Component", "settings_file", "say", "pending_explained"]


def say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def produce_with_leader_kill(settings: Settings, cluster: LocalCluster, topic: str,
                             acks: str = "1", before_kill: float = 4, after_kill: float = 4,
                             rate: float = 20000, lag_seconds: float = 0.5, progress=say,
                             during_fault=contextlib.nullcontext):
    """Produce to ``topic``; SIGKILL partition 0's leader mid-stream; restart it; go on.

    ``during_fault()`` is a context entered from just before the fault until the new
    leader is elected (e.g. a paused watcher). Returns (producer, killed node). The
    producer's ``record`` holds its acks.
    """
    from kafka_audit.producers.load import LoadSpec, run_load

    stop = threading.Event()
    holder: dict = {}
    spec = LoadSpec(topic=topic, rate=rate, acks=acks, retries=2, producer_id="demo")

    def produce():
        holder["p"] = run_load(settings, spec, stop=stop, keep_record=True)

    t = threading.Thread(target=produce, name="demo-producer")
    t.start()
    try:
        time.sleep(before_kill)  # let a stream build up before the fault: part of the scenario
        leader = cluster.leader_of(topic, 0)
        followers = [n for n in cluster.running() if n != leader]
        # Followers on loopback replicate within milliseconds, so an acks=1 leader rarely holds
        # unreplicated writes at the instant it dies. Freezing the followers for a moment
        # (shorter than replica.lag.time.max.ms: they stay in the ISR) makes them lag for sure;
        # the leader keeps acknowledging with acks=1 meanwhile. Then the leader is SIGKILLed
        # and the followers resume: one of them is elected without the acked tail.
        def new_leader() -> int | None:
            now = cluster.leader_of(topic, 0)
            return None if now in (-1, leader) else now

        with during_fault():
            progress(f"SIGSTOP followers {followers} of {topic}-0 for {lag_seconds}s")
            for n in followers:
                cluster.signal(n, signal.SIGSTOP)
            try:
                time.sleep(lag_seconds)  # the lag window itself
                progress(f"SIGKILL node {leader}, leader of {topic}-0")
                cluster.kill(leader)
            finally:
                for n in followers:
                    cluster.signal(n, signal.SIGCONT)
            new = wait_until(new_leader, 60, f"a new leader of {topic}-0")
        progress(f"node {new} leads {topic}-0 now; restarting node {leader}")
        cluster.start(leader)
        # a JVM starting on two cores beside the brokers, Spark and the service: once it
        # wrote no line for over 60 s (a CI run of 2026-11-26), so the waits allow 120
        wait_until(lambda: leader in cluster.registered_brokers(), 120,
                   f"node {leader} to rejoin")
        wait_until(lambda: all(leader in p.isr for p in cluster.partitions(topic)), 120,
                   f"node {leader} back in every ISR of {topic}")
        # leadership goes back to the preferred replica now, not at the broker's next
        # imbalance check: a hand-over at the end of the stream would truncate acks=1 writes
        # at the log's tail, where no later write moves the frontier past them
        for info in cluster.partitions(topic):
            cluster.elect_preferred(topic, info.partition)
        progress(f"node {leader} rejoined every ISR; each partition led by its preferred "
                 "replica")
        time.sleep(after_kill)  # keep producing after the heal: the frontier must pass the loss
    finally:
        stop.set()
        t.join(120)
    return holder["p"], leader


def audit_until_settled(spark, settings: Settings, topic: str, timeout: float = 180,
                        progress=say, pattern: str | None = None):
    """Consume to the end and audit until no write of ``topic`` is pending.

    ``pattern`` (a Java regex) narrows what the consume job reads; default: ``topic`` only.
    """
    import pyarrow.compute as pc

    from kafka_audit.jobs.audit.audit_pass import run_audit_pass
    from kafka_audit.jobs.audit.lookups import ClusterLookups
    from kafka_audit.jobs.consume.consume_job import start_consume
    from kafka_audit.store import read_table

    deadline = time.monotonic() + timeout
    lookups = ClusterLookups(settings)
    while True:
        if settings.producer.staged:  # as the service's committer does
            from kafka_audit.jobs.upkeep.staged_acks import StagedCommits

            StagedCommits(settings).drain()
        start_consume(spark, settings, pattern or re.escape(topic), once=True).awaitTermination()
        summary = run_audit_pass(spark, settings, lookups=lookups)
        progress(summary.line())
        state = read_table(settings.table_path("partition_state"), "partition_state",
                           where=(pc.field("pass_id") == summary.pass_id)
                           & (pc.field("topic") == topic))
        pending = sum(state.column("pending").to_pylist())
        if state.num_rows and pending == 0:
            from kafka_audit.jobs.upkeep.windows_job import update_windows

            update_windows(settings)  # when the writes were at risk, from what is known now
            return summary
        if time.monotonic() > deadline:
            raise TimeoutError(f"{pending} writes of {topic} still pending after {timeout}s: "
                               + pending_explained(settings, topic))
        time.sleep(min(settings.audit.settle_seconds, 5) / 2 or 0.5)


def pending_explained(settings: Settings, topic: str) -> str:
    """Why writes of ``topic`` are still pending, from the committed hot state and the
    cluster events: the unjudged ack runs grouped by (placed, error, horizon), the
    frontier observations, and the partition's ISR timeline (for a timeout's message)."""
    import pyarrow.compute as pc

    from kafka_audit.store import committed_progress, read_table

    progress = committed_progress(settings)
    hot = read_table(settings.table_path("audit_hot"), "audit_hot",
                     where=(pc.field("pass_id") == progress.generation)
                     & (pc.field("topic") == topic)).to_pylist()
    groups: dict = {}
    for r in hot:
        if r["kind"] != "ack":
            continue
        key = ("placed" if r["offset"] is not None else "failed", r["error_name"], r["horizon"])
        g = groups.setdefault(key, [0, None, None, None, None])
        g[0] += r["count"]
        if r["offset"] is not None:
            g[1] = min(r["offset"], g[1] if g[1] is not None else r["offset"])
            g[2] = max(r["offset"] + r["count"], g[2] or 0)
        g[3] = min(r["first_ack"], g[3] or r["first_ack"])
        g[4] = max(r["last_ack"], g[4] or r["last_ack"])
    runs = "; ".join(f"{n} {kind} error={err} horizon={hz} offsets={lo}..{hi} "
                     f"acked {a:%H:%M:%S.%f}-{b:%H:%M:%S.%f}"
                     for (kind, err, hz), (n, lo, hi, a, b) in sorted(
                         groups.items(), key=lambda kv: str(kv[0])))
    obs = [(r["offset"], r["observed_at"]) for r in hot if r["kind"] == "observation"]
    seen = max(obs, key=lambda o: o[1]) if obs else None
    events = read_table(settings.table_path("cluster_events"), "cluster_events",
                        where=pc.field("topic") == topic).to_pylist()
    timeline = ", ".join(f"{e['event_time']:%H:%M:%S.%f} {e['kind']} isr={e['isr']}"
                         for e in sorted(events, key=lambda e: e["event_time"])
                         if e["kind"] != TOPIC_CONFIG)
    return (f"pending runs: {runs or 'none'}; latest frontier observation: {seen}; "
            f"events: {timeline or 'none'}")


def fetch_lost(base_url: str, topic: str, token: str | None = None) -> list[dict]:
    """Every loss finding of ``topic`` (lost and lost after being seen), over HTTP, page by
    page with the API's cursor (one traversal: passes committing meanwhile shift nothing).
    ``token``: a bearer token, when the API needs one."""
    from urllib.parse import quote

    return _paged(f"{base_url}/v1/findings?topic={quote(topic)}&kind=lost"
                  f"&kind=lost_after_seen&page_size=1000",
                  {"Authorization": f"Bearer {token}"} if token else {})


def fetch_suspicions(base_url: str, topic: str, pages: int | None = None) -> list[dict]:
    """Every suspicion of ``topic`` over HTTP (``GET /v1/suspicions``, page by page), or
    those of the first ``pages`` pages (1,000 each, the newest changes first)."""
    from urllib.parse import quote

    return _paged(f"{base_url}/v1/suspicions?topic={quote(topic)}&limit=1000", pages=pages)


def _paged(url: str, headers: dict | None = None, pages: int | None = None) -> list[dict]:
    """The items of ``url``'s pages (every one, or the first ``pages``), following the
    API's ``next_cursor``."""
    from urllib.parse import quote

    items: list[dict] = []
    cursor, n = None, 0
    while pages is None or n < pages:
        with urllib.request.urlopen(urllib.request.Request(
                url + (f"&cursor={quote(cursor)}" if cursor else ""), headers=headers or {}),
                timeout=30) as resp:
            body = json.load(resp)
        items.extend(body["items"])
        n += 1
        cursor = body.get("next_cursor")
        if cursor is None:
            break
    return items


def expand_rows(rows: list[dict], *cols: str) -> list:
    """Run rows (``offset``/``seq`` first, ``count``) as one value (one column asked) or
    tuple per message, sorted: findings, ledger and consumed rows alike."""
    out = sorted(tuple(r[c] + k if c in ("offset", "seq") else r[c] for c in cols)
                 for r in rows for k in range(r["count"]))
    return [t[0] for t in out] if len(cols) == 1 else out


def lost_messages(items: list[dict]) -> list[tuple[int, int, int]]:
    """Loss findings (ranges) as one ``(partition, offset, seq)`` per lost write, sorted."""
    return expand_rows(items, "partition", "offset", "seq")


class ApiServer:
    """uvicorn in a background thread, for the demo and the tests."""

    def __init__(self, settings: Settings) -> None:
        import uvicorn

        from kafka_audit.auditor_api.main import create_app

        app = create_app(settings)  # serve these tables, with these limits
        self.open = not settings.api.tokens
        self.port = settings.api.port
        self.base_url = f"http://{settings.api.host}:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host=settings.api.host,
                                                    port=self.port, log_level="warning"))
        self.dashboard_url = f"{self.base_url}/dashboard"
        self.thread = threading.Thread(target=self.server.run, name="api", daemon=True)

    def __enter__(self) -> ApiServer:
        self.thread.start()
        wait_until(lambda: self.server.started, 30, "the API server to start")
        say(f"API at {self.base_url} (dashboard {self.dashboard_url}); "
            + ("bearer tokens required" if self.open is False else
               "OPEN: no api.tokens configured (the local demo)"))
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)




def findings_of(settings: Settings, topic: str) -> list[dict]:
    """Every finding row of ``topic`` in the warehouse of ``settings``."""
    from kafka_audit.store import read_table

    return [r for r in read_table(settings.table_path("findings"), "findings").to_pylist()
            if r["topic"] == topic]


@dataclass(frozen=True)
class Secondaries:
    """Duplicates and reorders: found by the auditor, and in a full read of the topic."""

    found_duplicates: list[tuple]
    true_duplicates: list[tuple]
    found_reorders: list[tuple]
    true_reorders: list[tuple]

    @property
    def match(self) -> bool:
        return (self.found_duplicates, self.found_reorders) == (self.true_duplicates,
                                                                self.true_reorders)

    def lines(self) -> list[str]:
        return [f"duplicate writes according to the auditor : {len(self.found_duplicates)}",
                f"written twice in a final full read        : {len(self.true_duplicates)}",
                f"reordered writes according to the auditor : {len(self.found_reorders)}",
                f"reordered in a final full read            : {len(self.true_reorders)}"]


def secondaries(settings: Settings, bootstrap: str, topic: str, producers) -> Secondaries:
    """The auditor's ``duplicate`` and ``reordered`` findings of ``topic`` against the
    ground truth from a full read, for the writes the ``producers`` (``AuditedProducer``
    with ``keep_record``) recorded; findings of other producers are left out."""
    from kafka_audit.scenarios.groundtruth import (
        full_read,
        secondary_findings,
        secondary_truth,
        written_by,
    )

    writes = [w for p in producers for w in written_by(p)]
    runs = {(p.producer_id, p.run_id) for p in producers}
    truth = secondary_truth(full_read(bootstrap, topic), writes)
    mine = [r for r in findings_of(settings, topic) if (r["producer_id"], r["run_id"]) in runs]
    found = secondary_findings(mine)
    return Secondaries(found[0], truth[0], found[1], truth[1])


def assert_secondaries_match(settings: Settings, bootstrap: str, topic: str, *producers
                             ) -> Secondaries:
    """:func:`secondaries`, printed, and an ``AssertionError`` naming the first differences
    unless the auditor's duplicates and reorders equal the full read's."""
    s = secondaries(settings, bootstrap, topic, producers)
    for line in s.lines():
        print(line)
    assert s.found_duplicates == s.true_duplicates, (
        "duplicates: auditor only", sorted(set(s.found_duplicates) - set(s.true_duplicates))[:5],
        "full read only", sorted(set(s.true_duplicates) - set(s.found_duplicates))[:5])
    assert s.found_reorders == s.true_reorders, (
        "reorders: auditor only", sorted(set(s.found_reorders) - set(s.true_reorders))[:5],
        "full read only", sorted(set(s.true_reorders) - set(s.found_reorders))[:5])
    return s


def settings_file(settings: Settings, path) -> Path:
    """The effective ``settings`` as a YAML overlay (for ``KAFKA_AUDIT_CONFIG``): a component
    started as a process of its own then sees exactly what this process sees."""
    import yaml

    from kafka_audit.producers.ledger import private_file

    path = Path(path)
    data = settings.model_dump(mode="json")
    if settings.storage.secret_access_key is not None:
        # a dump shows the object store's secret as ***: the process reads it from a
        # file of its own, as an operator's would
        secret = path.with_name(path.name + ".storage-secret")
        with open(private_file(secret), "w") as f:
            f.write(settings.storage.secret_access_key.get_secret_value())
        data["storage"] |= {"secret_access_key": None, "secret_access_key_file": str(secret)}
    path.write_text(yaml.safe_dump(data))
    return path


class Component:
    """A ``kafka-audit`` subcommand run as a process of its own, with ``settings``; its output
    goes to a log file. ``pause()``/``resume()`` freeze and thaw it (SIGSTOP/SIGCONT)."""

    def __init__(self, settings: Settings, *args: str) -> None:
        import os
        import subprocess
        import sys

        folder = settings.home_dir
        folder.mkdir(parents=True, exist_ok=True)
        self.log_path = folder / f"{args[0]}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_AUDIT_")}
        env["KAFKA_AUDIT_CONFIG"] = str(settings_file(settings, folder / f"{args[0]}.yaml"))
        exe = Path(sys.executable).with_name("kafka-audit")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(exe), *args], env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> int | None:
        import subprocess

        if self.alive():
            self.resume()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode

    def __enter__(self) -> Component:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
