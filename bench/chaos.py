"""The auditor's own chaos suite: each part SIGKILLed at random moments under load.

On a freshly wiped local cluster (one topic, 3 partitions, RF 3): ``kafka-audit run``; a
producer process using the kaudit plugin directly (a plain librdkafka client, as a C or
Go application would: ``--producer`` below) that appends the partition and offset of every
acknowledged write to a file of its own as the delivery report arrives (unbuffered: what
it wrote survives its SIGKILL); and ``kafka-audit ship --follow`` beside it. Then
``--kills`` kills of each kind, in a random order, each ``--gap`` seconds or more after
the last recovery:

* ``service``: the whole ``kafka-audit run`` (its API child and JVM die with it), started
  again;
* ``api``: its API child (the service starts it again);
* ``driver``: its Spark driver JVM (the service starts a new one);
* ``producer``: the producer (a new run, with a new run id, starts);
* ``shipper``: ``kafka-audit ship --follow`` (started again).

At the end the producer is stopped (its spool sealed), shipped, and the service left to
judge everything. Reported: per kind the seconds until it recovered (p50, max), and the
three invariants: acknowledged writes (the producers' own files) missing from the ledger
(goal 0), writes judged twice (goal 0), findings other than ``confirmed`` (goal 0: no
broker fault, acks=all).

Run (the demo's ports and ``var`` home)::

    KAFKA_AUDIT_HOME=var .venv/bin/python bench/chaos.py [--kills 20] [--rate 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from steady import cluster_down, fresh_cluster, say

from kafka_audit.scenarios.cluster import wait_until
from kafka_audit.scenarios.harness import Component, settings_file
from kafka_audit.settings import Settings, get_settings

KINDS = ("service", "api", "driver", "producer", "shipper")


def plugin_producer(settings: Settings, topic: str, rate: float, acks_file: Path,
                    stop_file: Path) -> None:
    """The producer (``--producer``): a plain confluent-kafka client with the plugin's
    properties, ``rate`` writes a second until ``stop_file`` exists; each acknowledged
    write's ``partition offset`` appended to ``acks_file`` with one ``write(2)``."""
    from confluent_kafka import Producer

    from kafka_audit.clients import cluster_config
    from kafka_audit.producers.native import load_plugin, native_spool_root, plugin_properties

    run_id = time.strftime("%Y%m%dT%H%M%S-") + uuid.uuid4().hex[:8]
    props = plugin_properties(load_plugin(), native_spool_root(settings), "chaos", run_id)
    p = Producer({**cluster_config(settings), **props, "acks": "all",
                  "enable.idempotence": True, "linger.ms": 5})
    fd = os.open(acks_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def delivered(err, msg) -> None:
        if err is None:
            os.write(fd, f"{msg.partition()} {msg.offset()}\n".encode())

    start, sent = time.monotonic(), 0
    while not stop_file.exists():
        if sent > (time.monotonic() - start) * rate:
            p.poll(0.005)
            continue
        try:
            p.produce(topic, os.urandom(100), on_delivery=delivered)
            sent += 1
        except BufferError:
            p.poll(0.05)
    p.flush(60)
    os.close(fd)


class Proc:
    """A helper process of this benchmark, logging to ``log``."""

    def __init__(self, args: list[str], settings: Settings, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_AUDIT_")}
        env["KAFKA_AUDIT_CONFIG"] = str(settings_file(settings, settings.home_dir /
                                                      "chaos.yaml"))
        self.log = open(log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.log.close()

    def stop(self, timeout: float = 120) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


def children(pid: int) -> list[int]:
    out = []
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (t / "children").read_text().split()]
        except OSError:
            continue
    return out


def child_with(pid: int, marker: bytes) -> int | None:
    for c in children(pid):
        try:
            if marker in Path(f"/proc/{c}/cmdline").read_bytes():
                return c
        except OSError:
            continue
    return None


def kill_child(service: int, marker: bytes, what: str, timeout: float,
               ready=lambda: True) -> None:
    """SIGKILL the service's child whose command line holds ``marker``; wait until another
    runs and ``ready()`` holds."""
    pid = wait_until(lambda: child_with(service, marker), 120, f"the {what}")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: child_with(service, marker) not in (None, pid) and ready(), timeout,
               f"a new {what}")


def api_up(api: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{api}/healthz", timeout=5) as r:
            return r.status == 200
    except Exception:  # noqa: BLE001 - not up
        return False


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--producer":
        plugin_producer(get_settings(), sys.argv[2], float(sys.argv[3]), Path(sys.argv[4]),
                        Path(sys.argv[5]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=20, help="kills of each kind")
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    ap.add_argument("--rate", type=float, default=2000, help="the producer's msg/s")
    ap.add_argument("--gap", type=float, nargs=2, default=[5, 20],
                    help="seconds after a recovery before the next kill (random in range)")
    ap.add_argument("--seed", type=int, default=39)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    base = get_settings()
    cluster = fresh_cluster(base)
    home = base.home_dir / f"chaos-{time.strftime('%H%M%S')}"
    settings = base.model_copy(update={"home": home})
    home.mkdir(parents=True)
    topic = f"chaos-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=3, replication=3)
    api = f"http://{settings.api.host}:{settings.api.port}"
    spool = home / "spool" / "native"
    stop_file = home / "producer.stop"
    exe = str(Path(sys.executable).with_name("kafka-audit"))
    runs = [0]

    def new_producer() -> Proc:
        runs[0] += 1
        return Proc([sys.executable, __file__, "--producer", topic, f"{args.rate:g}",
                     str(home / f"acks-{runs[0]}.txt"), str(stop_file)], settings,
                    home / f"producer-{runs[0]}.log")

    def new_shipper() -> Proc:
        return Proc([exe, "ship", "--follow", "--spool-dir", str(spool)], settings,
                    home / "shipper.log")

    say(f"topic {topic}, home {home}: {args.kills} kills of {', '.join(args.kinds)}")
    service = Component(settings, "run")
    producer, shipper = new_producer(), new_shipper()
    recovered: dict[str, list[float]] = {k: [] for k in args.kinds}
    plan = [k for k in args.kinds for _ in range(args.kills)]
    rng.shuffle(plan)
    try:
        wait_until(lambda: api_up(api), 300, "the API")
        for i, kind in enumerate(plan):
            time.sleep(rng.uniform(*args.gap))
            t0 = time.monotonic()
            if kind == "service":
                service.proc.send_signal(signal.SIGKILL)
                service.proc.wait(30)
                service.stop()
                service = Component(settings, "run")
                wait_until(lambda: api_up(api), 300, "the API after a service kill")
            elif kind == "api":
                kill_child(service.proc.pid, b"api_process", "API child", 120,
                           lambda: api_up(api))
            elif kind == "driver":
                kill_child(service.proc.pid, b"pyspark-shell", "Spark driver JVM", 300)
            elif kind == "producer":
                producer.kill()
                producer = new_producer()
            elif kind == "shipper":
                shipper.kill()
                shipper = new_shipper()
            recovered[kind].append(time.monotonic() - t0)
            say(f"kill {i + 1}/{len(plan)}: {kind}, recovered in {recovered[kind][-1]:.1f}s")
        stop_file.touch()
        producer.proc.wait(120)
        producer.log.close()
        shipper.stop()
        subprocess.run([exe, "ship", "--spool-dir", str(spool)], env={
            **{k: v for k, v in os.environ.items() if not k.startswith("KAFKA_AUDIT_")},
            "KAFKA_AUDIT_CONFIG": str(home / "chaos.yaml")}, check=True, timeout=300)
        result = judge(settings, topic, api, home)
    finally:
        service.stop(120)
        cluster_down(cluster)
    result["recovered"] = {k: {"kills": len(v), "p50": round(statistics.median(v), 1),
                               "max": round(max(v), 1)} for k, v in recovered.items() if v}
    (home / "chaos.json").write_text(json.dumps(result, indent=1, default=str))
    print()
    for k, r in result["recovered"].items():
        print(f"{k:>8}: {r['kills']} kills, recovered in p50 {r['p50']}s, max {r['max']}s")
    print(f"acknowledged writes (the producers' own files): {result['acked_by_producers']:,}; "
          f"missing from the ledger: {result['missing_from_ledger']} (goal 0)")
    print(f"writes judged twice: {result['judged_twice']} (goal 0); findings other than "
          f"confirmed: {result['not_confirmed']} (goal 0); ledger {result['ledger']:,}, "
          f"judged {result['judged']:,}")


def judge(settings: Settings, topic: str, api: str, home: Path) -> dict:
    """Waits until the service has judged every write in the ledger, then checks the
    invariants against the tables and the producers' own files."""
    import urllib.request

    from kafka_audit.scenarios.harness import expand_rows, findings_of
    from kafka_audit.store import read_table

    def ledger() -> list[dict]:
        return [r for r in read_table(settings.table_path("acks"), "acks").to_pylist()
                if r["topic"] == topic]

    def summary() -> dict | None:
        try:
            with urllib.request.urlopen(f"{api}/v1/summary?topic={topic}", timeout=10) as r:
                return json.load(r)
        except Exception:  # noqa: BLE001 - busy
            return None

    total = len(expand_rows(ledger(), "seq"))
    wait_until(lambda: (s := summary()) and s["acked"] >= total and s["pending"] == 0, 900,
               "every write judged", every=2)
    rows = ledger()
    acked_places = set(expand_rows([r for r in rows if r["error_code"] is None],
                                   "partition", "offset"))
    mine = set()
    for f in home.glob("acks-*.txt"):
        for line in f.read_text().splitlines():
            part, offset = line.split()
            mine.add((int(part), int(offset)))
    found = findings_of(settings, topic)
    judged = expand_rows([r for r in found if r["run_id"]], "run_id", "seq")
    return {"acked_by_producers": len(mine), "missing_from_ledger": len(mine - acked_places),
            "ledger": len(expand_rows(rows, "seq")), "judged": len(judged),
            "judged_twice": len(judged) - len(set(judged)),
            "not_confirmed": sum(r["count"] for r in found if r["kind"] != "confirmed")}


if __name__ == "__main__":
    main()
