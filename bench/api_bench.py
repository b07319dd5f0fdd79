"""REST API under load: 50 concurrent clients against findings, summaries and a partition
timeline, over a warehouse of at least 10,000,000 acknowledged writes with a fault's
findings among them. Run by hand (never by the tests):

    .venv/bin/python bench/api_bench.py [--writes 10000000] [--clients 50] [--seconds 30]
                                        [--churn [--live]] [--rebuild]

The warehouse (``var/bench-api/warehouse``, built once, ``--rebuild`` to redo) is written
with the project's own table layer (``kafka_audit.store``, delta-rs), shaped as the jobs
shape it, not produced through Kafka (10M records would take the cluster half an hour
here): four ``acks=1`` producers, each owning three partitions of two topics, each
committing one ledger row per partition per second (one Delta commit per flush, as the
ledger does: 2,000 commits); consume micro-batches every 2 s (one read run per
partition, 250 commits); an audit pass every 5 s (its confirmed findings, its partition
states and its progress row: 100 passes); the watcher's events. At second 250, partition
0 of topic ``orders``: its followers lag, its leader dies, the new leader truncates the
last 0.5 s of ``acks=1`` writes (``lost/overwritten``, cause ``acks=1 fail-over``).

The API runs as ``kafka-audit serve`` runs it (one uvicorn process), bearer tokens on.
The clients are one asyncio process speaking HTTP/1.1 over keep-alive connections
(cheap per request, so the figures are the server's); each client sends its next
request as soon as the answer came (closed loop, no think time), cycling through the
endpoints. ``--no-cache`` turns the API's response cache off (every request computes
its answer from the table snapshots). ``--churn`` appends an audit pass (findings,
partition states, progress) every 5 s during the load, from a process of its own as a
live audit does, so snapshots reload under load; ``--live`` adds the ledger's and the
consume job's commits every second (acks and reads of ``orders`` 0-2, the timeline's
partition among them), as a running ``kafka-audit run`` makes them.
``--where s3`` builds and serves the warehouse in a bucket of the tests' S3-compatible
server (s3proxy over ``var/bench-api-s3/store``, started here), the home then
``var/bench-api-s3/home``; the API reads every table from the bucket.
Prints p50/p99 per endpoint and checks them against the targets (p99 <= 50 ms for
findings and summaries, <= 250 ms for a timeline).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "var" / "bench-api"
T0 = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)
SECONDS = 500  # of production; writes per producer per second follow from --writes
TOPICS = ("orders", "payments")
PRODUCERS = (("A", "orders", (0, 1, 2)), ("B", "orders", (3, 4, 5)),
             ("C", "payments", (0, 1, 2)), ("D", "payments", (3, 4, 5)))
FAULT_AT = 250  # s: the leader of orders-0 dies; the last LOST_SPAN s of acks are lost
LOST_SPAN = 0.5
TARGETS = {"findings": 0.050, "summary": 0.050, "timeline": 0.250}


def build(writes: int) -> dict:
    """The warehouse; returns what the benchmark needs to know of it."""
    from kafka_audit.settings import Settings
    from kafka_audit.store import append_rows

    shutil.rmtree(HOME, ignore_errors=True)
    s = Settings(home=HOME)
    if s.remote_warehouse:
        from kafka_audit.storage import locate

        at = locate(s.warehouse_uri)
        at.fs.delete_dir_contents(at.path, missing_dir_ok=True)
    per_second = -(-writes // (SECONDS * len(PRODUCERS) * 3))  # per partition, rounded up
    offsets = {(t, p): 0 for t in TOPICS for p in range(6)}
    acked = lost = 0
    ack_rows: dict[tuple, list] = {}  # (topic, partition) -> [(second, offset, count)]
    started = time.monotonic()
    for sec in range(SECONDS):
        at = T0 + timedelta(seconds=sec)
        for producer, topic, parts in PRODUCERS:
            rows = []
            for p in parts:
                off = offsets[(topic, p)]
                rows.append({"run_id": f"run-{producer}", "producer_id": producer,
                             "seq": off, "count": per_second, "topic": topic, "partition": p,
                             "offset": off, "send_time": at - timedelta(milliseconds=3),
                             "ack_time": at, "last_ack_time": at + timedelta(milliseconds=999),
                             "error_code": None, "error_name": None, "acks": "1",
                             "idempotence": False, "retries": 2, "max_in_flight": 5,
                             "leader_epoch": None})
                ack_rows.setdefault((topic, p), []).append((sec, off, per_second))
                offsets[(topic, p)] = off + per_second
                acked += per_second
            append_rows(s.table_path("acks"), "acks", rows)  # one ledger flush, one commit
        if sec % 50 == 0:
            print(f"  ledger: {sec}/{SECONDS} s of acks ({time.monotonic() - started:.0f} s)",
                  flush=True)
    # consume micro-batches every 2 s: one read run per partition (what was acked then);
    # after the fault, orders-0's truncated tail reads as another producer's records
    lost_count = int(per_second * LOST_SPAN)
    for sec in range(0, SECONDS, 2):
        rows = []
        for (topic, p), runs in ack_rows.items():
            for s_, off, n in runs[sec:sec + 2]:
                rows.append({"topic": topic, "partition": p, "offset": off, "count": n,
                             "kafka_timestamp": T0 + timedelta(seconds=s_), "stamped": True,
                             "stamp_error": None,
                             "producer_id": PRODUCERS[[q[1] == topic and p in q[2]
                                                       for q in PRODUCERS].index(True)][0],
                             "run_id": "run-x", "seq": off, "checksum_ok": True,
                             "read_time": T0 + timedelta(seconds=sec + 2.5), "batch_id": sec,
                             "source": "stream", "status": "record", "leader_epoch": None})
        append_rows(s.table_path("consumed"), "consumed", rows)
    # audit passes every 5 s: confirmed findings of the acks 30 s old (settled)
    fault_off = None
    for pass_id in range(1, SECONDS // 5 + 1):
        now = T0 + timedelta(seconds=pass_id * 5 + 30)
        findings, states = [], []
        for (topic, p), runs in ack_rows.items():
            for s_, off, n in runs[(pass_id - 1) * 5:pass_id * 5]:
                producer = next(q[0] for q in PRODUCERS if q[1] == topic and p in q[2])
                confirmed = n
                if (topic, p) == ("orders", 0) and s_ == FAULT_AT - 1:
                    confirmed = n - lost_count
                    fault_off = off + confirmed
                    lost += lost_count
                    findings.append(finding("lost", "overwritten", topic, p, producer,
                                            fault_off, lost_count,
                                            T0 + timedelta(seconds=s_ + 1 - LOST_SPAN),
                                            now, pass_id, "acks=1 fail-over"))
                findings.append(finding("confirmed", None, topic, p, producer, off, confirmed,
                                        T0 + timedelta(seconds=s_), now, pass_id, None))
                states.append((topic, p, off + n))
        append_rows(s.table_path("findings"), "findings", findings)
        append_rows(s.table_path("partition_state"), "partition_state", [
            {"topic": t, "partition": p, "frontier": f + 100, "settled_frontier": f,
             "observed_at": now, "pending": 0, "unseen": 0, "oldest_unseen": None,
             "pass_id": pass_id} for t, p, f in states])
        progress(s, pass_id)
    events = []
    for t in TOPICS:
        for p in range(6):
            events.append(event(t, p, T0 - timedelta(seconds=1), "first_seen", p % 3 + 1, None,
                                [p % 3 + 1, (p + 1) % 3 + 1, (p + 2) % 3 + 1]))
    fault = T0 + timedelta(seconds=FAULT_AT + 0.2)
    events += [event("orders", 0, fault, "leader_change", 2, 1, [2, 3]),
               event("orders", 0, fault + timedelta(seconds=9), "isr_expand", 2, 2, [2, 3, 1])]
    append_rows(s.table_path("cluster_events"), "cluster_events", events)
    info = {"writes": acked, "lost": lost, "per_second": per_second, "fault_offset": fault_off,
            "passes": SECONDS // 5}
    HOME.mkdir(parents=True, exist_ok=True)  # (a bucket's warehouse leaves it empty)
    (HOME / "bench.json").write_text(json.dumps(info))
    print(f"  warehouse: {acked:,} acknowledged writes, {lost:,} lost, built in "
          f"{time.monotonic() - started:.0f} s", flush=True)
    return info


def finding(kind, subkind, topic, p, producer, off, n, ack_time, now, pass_id, cause):
    return {"finding_id": f"{kind}:{topic}:{p}:{producer}:run-{producer}:{off}", "kind": kind,
            "subkind": subkind, "topic": topic, "partition": p, "offset": off,
            "producer_id": producer, "run_id": f"run-{producer}", "seq": off, "count": n,
            "ack_time": ack_time, "evidence": json.dumps({"acked_offset": off}), "cause": cause,
            "detected_at": now, "pass_id": pass_id}


def event(topic, p, at, kind, leader, previous, isr):
    return {"event_time": at, "topic": topic, "partition": p, "kind": kind, "leader": leader,
            "previous_leader": previous, "isr": isr, "previous_isr": None,
            "replicas": [1, 2, 3], "leader_epoch": 1, "source": "bench", "until": None,
            "log_end": None}


def progress(s, pass_id):
    from kafka_audit.store import append_rows

    append_rows(s.table_path("audit_hot"), "audit_hot", [
        {"kind": "progress", "topic": "", "partition": -1, "pass_id": pass_id,
         "progress": json.dumps({"pass_id": pass_id, "acks_version": -1,
                                 "consumed_version": -1})}])


def churn(stop: threading.Event, start_pass: int, live: bool, info: dict) -> int:
    """An audit pass every 5 s while the load runs: findings, states, progress; with
    ``live``, also the ledger and the consume job committing every second (the orders
    producer's acks and their reads, after the warehouse's last offsets)."""
    import pyarrow.compute as pc

    from kafka_audit.settings import Settings
    from kafka_audit.store import append_rows, read_table

    s = Settings(home=HOME)
    pass_id, tick, n = start_pass, 0, info["per_second"]
    held = read_table(s.table_path("acks"), "acks", columns=["offset", "count", "ack_time"],
                      where=(pc.field("topic") == "orders") & (pc.field("partition") == 0))
    ends = pc.add(held.column("offset"), held.column("count"))
    base = pc.max(ends).as_py()  # earlier --live runs appended some: go on after them
    first = pc.max(held.column("ack_time")).as_py() + timedelta(seconds=1)
    while not stop.wait(1 if live else 5):
        tick += 1
        now = datetime.now(UTC)
        if live:
            at = first + timedelta(seconds=tick - 1)
            off = base + n * (tick - 1)
            append_rows(s.table_path("acks"), "acks", [
                {"run_id": "run-A", "producer_id": "A", "seq": off, "count": n,
                 "topic": "orders", "partition": p, "offset": off, "send_time": at,
                 "ack_time": at, "last_ack_time": at + timedelta(milliseconds=999),
                 "error_code": None, "error_name": None, "acks": "1", "idempotence": False,
                 "retries": 2, "max_in_flight": 5, "leader_epoch": None} for p in (0, 1, 2)])
            append_rows(s.table_path("consumed"), "consumed", [
                {"topic": "orders", "partition": p, "offset": off, "count": n,
                 "kafka_timestamp": at, "stamped": True, "stamp_error": None,
                 "producer_id": "A", "run_id": "run-A", "seq": off, "checksum_ok": True,
                 "read_time": now, "batch_id": 10_000 + tick, "source": "stream",
                 "status": "record", "leader_epoch": None} for p in (0, 1, 2)])
            if tick % 5:
                continue
        pass_id += 1
        append_rows(s.table_path("findings"), "findings", [
            finding("confirmed", None, "payments", 5, "D", 10**12 + pass_id, 1, now, now,
                    pass_id, None)])
        append_rows(s.table_path("partition_state"), "partition_state", [
            {"topic": "payments", "partition": 5, "frontier": 1, "settled_frontier": 1,
             "observed_at": now, "pending": 0, "unseen": 0, "oldest_unseen": None,
             "pass_id": pass_id}])
        progress(s, pass_id)
    return pass_id - start_pass


def churn_process(start_pass: int, live: bool, info: dict) -> None:
    """The writer of ``--churn`` in a process of its own, as the audit is: the load's
    clients then share nothing with it but the machine. It stops when its standard input
    closes and prints the passes it committed."""
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    print(churn(stop, start_pass, live, info), flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str, token: str) -> dict:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


async def client(i: int, host: str, port: int, token: str, paths: list, deadline: float,
                 lat: dict, errors: list) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    k = i
    try:
        while time.perf_counter() < deadline:
            name, path = paths[k % len(paths)]
            k += 1
            req = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                   f"\r\n").encode()
            t = time.perf_counter()
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            length = next(int(h.split(":", 1)[1]) for h in lines
                          if h.lower().startswith("content-length:"))
            await reader.readexactly(length)
            lat[name].append(time.perf_counter() - t)
            if status != 200:
                errors.append((name, status))
    finally:
        writer.close()


async def load(host, port, token, paths, clients, seconds) -> tuple[dict, list]:
    lat = {name: [] for name, _ in paths}
    errors: list = []
    deadline = time.perf_counter() + seconds
    await asyncio.gather(*[client(i, host, port, token, paths, deadline, lat, errors)
                           for i in range(clients)])
    return lat, errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writes", type=int, default=10_000_000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--churn", action="store_true", help="an audit pass commits every 5 s")
    ap.add_argument("--live", action="store_true",
                    help="with --churn: the ledger and the consume job also commit every "
                         "second (acks and reads of the timeline's partition)")
    ap.add_argument("--churn-writer", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--build-only", action="store_true", help="build the warehouse, no load")
    ap.add_argument("--no-cache", action="store_true",
                    help="api.response_cache off: every request computes its answer (from the "
                         "snapshots), none is served from memory")
    ap.add_argument("--where", choices=["local", "s3"], default="local",
                    help="the warehouse on disk or in a bucket of the local S3 server")
    ap.add_argument("--s3-port", type=int, default=28492)
    args = ap.parse_args()
    global HOME
    s3 = None
    if args.where == "s3":
        HOME = ROOT / "var" / "bench-api-s3" / "home"
        if args.churn_writer is None:  # the writer inherits the storage's environment
            s3 = object_store(args.s3_port)
    try:
        return run(args)
    finally:
        if s3 is not None:
            s3.stop()


def object_store(port: int):
    """The S3 server over ``var/bench-api-s3/store``, and the environment (this process's,
    so the server's and the churn writer's too) that puts the warehouse in its bucket."""
    from kafka_audit.scenarios.object_store import S3Server

    server = S3Server(ROOT / "var" / "bench-api-s3" / "store", port, heap_mb=512).start()
    bucket = server.bucket("bench-api")
    storage = server.storage()
    os.environ["KAFKA_AUDIT_WAREHOUSE"] = f"{bucket}/warehouse"
    for key, value in storage.items():
        os.environ[f"KAFKA_AUDIT_STORAGE__{key.upper()}"] = str(value).lower() \
            if isinstance(value, bool) else str(value)
    return server


def run(args) -> int:
    info_path = HOME / "bench.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else None
    if args.churn_writer is not None:
        churn_process(args.churn_writer, args.live, info)
        return 0
    if args.rebuild or info is None or info["writes"] < args.writes:
        print(f"building a warehouse of {args.writes:,} acknowledged writes in {HOME}",
              flush=True)
        info = build(args.writes)
    if args.build_only:
        return 0
    from kafka_audit.auditor_api.auth import hash_token, new_token

    token = new_token()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_AUDIT_")
           or k.startswith(("KAFKA_AUDIT_WAREHOUSE", "KAFKA_AUDIT_STORAGE__"))}
    env.update({"KAFKA_AUDIT_HOME": str(HOME), "KAFKA_AUDIT_API__PORT": str(port),
                "KAFKA_AUDIT_API__TOKENS": json.dumps([{"name": "bench",
                                                        "hash": hash_token(token)}]),
                "KAFKA_AUDIT_API__RESPONSE_CACHE": "false" if args.no_cache else "true"})
    exe = Path(sys.executable).with_name("kafka-audit")
    server = subprocess.Popen([str(exe), "serve"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=2)
                break
            except OSError:
                time.sleep(0.2)
        fault = (T0 + timedelta(seconds=FAULT_AT)).strftime("%Y-%m-%dT%H:%M:%SZ")
        fault_end = (T0 + timedelta(seconds=FAULT_AT + 10)).strftime("%Y-%m-%dT%H:%M:%SZ")
        first = get(f"{base}/v1/findings?topic=orders&page_size=100", token)
        later = get(f"{base}/v1/findings?topic=orders&page_size=100&cursor="
                    f"{first['next_cursor']}", token)
        endpoints = [  # (label, target class, path)
            ("findings lost", "findings",
             "/v1/findings?topic=orders&kind=lost&kind=lost_after_seen"),
            ("findings page 1", "findings", "/v1/findings?topic=orders&page_size=100"),
            ("findings page 3", "findings",
             f"/v1/findings?topic=orders&page_size=100&cursor={later['next_cursor']}"),
            ("findings counts", "findings", "/v1/findings/counts?topic=orders"),
            ("topics", "summary", "/v1/topics"),
            ("topic detail", "summary", "/v1/topics/orders"),
            ("summary", "summary", "/v1/summary?topic=orders"),
            ("producers", "summary", "/v1/producers"),
            ("timeline (all 500 s)", "timeline", "/v1/partitions/orders/0/timeline"),
            ("timeline (fault, 10 s)", "timeline",
             f"/v1/partitions/orders/0/timeline?since={fault}&until={fault_end}"),
        ]
        classes = {label: cls for label, cls, _ in endpoints}
        paths = [(label, path) for label, _, path in endpoints]
        cold = {}
        for _name, path in paths:  # the first request of each: snapshots and indexes built
            t = time.perf_counter()
            body = get(base + path, token)
            cold[path] = time.perf_counter() - t
            if path.startswith("/v1/topics/orders"):
                assert body["lost"] == info["lost"], body["lost"]
        topics = get(f"{base}/v1/topics", token)
        total = sum(t["acked"] for t in topics)
        lost = get(f"{base}/v1/findings?topic=orders&kind=lost", token)
        print(f"serving {total:,} acknowledged writes ({info['lost']:,} lost in "
              f"{lost['total']} findings); first requests (cold): "
              + ", ".join(f"{p.split('?')[0]} {1000 * c:.0f} ms" for p, c in cold.items()),
              flush=True)
        churner = None
        if args.churn:  # in a process of its own, as the audit is
            churner = subprocess.Popen(
                [sys.executable, __file__, "--churn-writer", str(info["passes"] + 10_000),
                 "--where", args.where] + (["--live"] if args.live else []), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True)
        t = time.perf_counter()
        lat, errors = asyncio.run(load("127.0.0.1", port, token, paths, args.clients,
                                       args.seconds))
        elapsed = time.perf_counter() - t
        passes = 0
        if churner is not None:
            out, _ = churner.communicate("", timeout=60)
            passes = int(out.split()[-1])
        n = sum(len(v) for v in lat.values())
        print(f"{args.clients} clients, {elapsed:.0f} s, {n:,} requests ({n / elapsed:,.0f}/s), "
              f"response cache {'off' if args.no_cache else 'on'}"
              + (f", an audit pass committed every 5 s ({passes})" if args.churn else "")
              + (", the ledger and the consume job every second" if args.live else "")
              + (f"; {len(errors)} errors {errors[:3]}" if errors else "; no error"))
        ok = True
        for name, values in lat.items():
            a = np.array(values) * 1000
            p50, p99 = np.percentile(a, 50), np.percentile(a, 99)
            target = TARGETS[classes[name]] * 1000
            met = p99 <= target
            ok &= met
            print(f"  {name:24s} n={len(a):6d}  p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  "
                  f"(target p99 <= {target:.0f} ms: {'met' if met else 'NOT met'})")
        return 0 if ok and not errors else 1
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
