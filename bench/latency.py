"""Loss latency of ``kafka-audit run``: from a leader kill to its lost writes over REST.

For each settle period asked (``--settle 10 30``): a fresh warehouse, ``kafka-audit run``
as a process of its own (watcher, consume, audit, API), an ``acks=1`` producer at
``--rate`` msg/s, and ``--kills`` leader kills at random times over ``--minutes``
(a partition's followers frozen half a second, its leader SIGKILLed, the node restarted:
partition 0's with ``--victim any``; with ``--victim broker`` the first partition whose
leader is not the active controller, as on a cluster with dedicated controllers, where
a broker's death never takes the controller with it).
A poller asks ``GET /v1/findings?kind=lost&kind=lost_after_seen`` every second and
notes when each lost write is first answered. At the end a full read of the topic gives
the ground truth; each truly lost write belongs to the kill that followed its sending.
Per kill: the time from the kill until *every* write it destroyed is answered over REST,
and the time from the leader change (the first ``leader_change`` of the partition in
``cluster_events`` after the kill) until its first lost write was suspected over REST
(``GET /v1/suspicions``, polled beside the findings; goal p95 <= 5 s), with the share of
the lost writes suspected before any verdict (goal >= 99 %) and every withdrawn
suspicion with its reason. ``--second-after S``: each kill is followed, ``S`` seconds after
it (its node started again at once), by a kill of the partition's new leader: two
fail-overs of one partition within seconds, the second before the first's losses
settled, the marker following the first while the second comes.
Reported: p50, p95 and max over the kills against settle + 15 s (and apart, over the
kills of a leader that was also the active controller and over the others), the per-finding
ack-to-detection percentiles (``kafka_audit/latency.py``), and whether the losses found
equal the ground truth.

``--where s3`` puts each run's warehouse (every table, Spark's checkpoint) in a bucket of
the tests' S3-compatible server (s3proxy over a folder, started here on ``--s3-port``),
spools and status files staying under the run's home; ``--where local s3`` runs each
settle period on disk, then in the bucket, in the same sitting.

Run (the benchmark's own ports and home; see bench/README.md)::

    KAFKA_AUDIT_CLUSTER__BROKER_BASE_PORT=27091 ... .venv/bin/python bench/latency.py
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
import urllib.request
import uuid
from datetime import datetime

from steady import (
    Load,
    bench_settings,
    cluster_down,
    fresh_cluster,
    kill_leader,
    kill_leader_twice,
    lost_over_rest,
    missing_from_log,
    say,
)

from kafka_audit.latency import loss_latency, nearest_rank
from kafka_audit.scenarios.cluster import LocalCluster, wait_until
from kafka_audit.scenarios.harness import Component, fetch_suspicions, lost_messages
from kafka_audit.settings import Settings
from kafka_audit.store import read_table


def summary(base: str, topic: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{base}/v1/summary?topic={topic}", timeout=10) as r:
            return json.load(r)
    except Exception:  # noqa: BLE001 - not up yet / topic not known yet
        return None


class Poller:
    """Asks the loss findings and, in a thread of its own (a slow page of findings must not
    space its samples out), the suspicions every ``every`` seconds; notes when each write
    first shows in each. The suspicions as a client watching for new ones asks them: the
    first page (the newest changes first) every ``every`` seconds, and every page every
    ``whole_every`` (a fail-over that cut thousands of runs leaves more than a page)."""

    def __init__(self, base: str, topic: str, every: float = 1.0,
                 whole_every: float = 10.0) -> None:
        self.base, self.topic, self.every, self.whole_every = base, topic, every, whole_every
        self._whole_at = 0.0  # when to read every page next (monotonic)
        self.first_seen: dict[tuple[int, int, int], float] = {}
        self.first_suspected: dict[tuple[int, int, int], float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True, name="poller")

    def _poll(self, ask, into: dict) -> None:
        while not self.stop.is_set():
            t = time.time()
            try:
                for w in ask():
                    into.setdefault(w, t)
            except Exception:  # noqa: BLE001 - the API may be busy: asked again
                pass
            self.stop.wait(max(0.0, self.every - (time.time() - t)))

    def _suspicions(self) -> list:
        now = time.monotonic()
        whole = now >= self._whole_at
        if whole:
            self._whole_at = now + self.whole_every
        return lost_messages(fetch_suspicions(self.base, self.topic,
                                              pages=None if whole else 1))

    def run(self) -> None:
        suspicions = threading.Thread(target=self._poll, daemon=True, args=(
            self._suspicions, self.first_suspected), name="poller-suspicions")
        suspicions.start()
        self._poll(lambda: lost_over_rest(self.base, self.topic), self.first_seen)
        suspicions.join(30)


def kill_times(rng: random.Random, kills: int, start: float, span: float, gap: float
               ) -> list[float]:
    """``kills`` random offsets in ``[start, start + span]``, at least ``gap`` apart."""
    free = span - gap * (kills - 1)
    if free < 0:
        raise SystemExit(f"{kills} kills at least {gap}s apart do not fit in {span}s")
    points = sorted(rng.uniform(0, free) for _ in range(kills))
    return [start + p + i * gap for i, p in enumerate(points)]


def spread(xs: list[float]) -> dict:
    """How many, p50, p95 and max of ``xs`` (answers of kills, seconds); the figures ``[]``
    when there are none."""
    return {"count": len(xs), "p50": xs and nearest_rank(xs, 0.5),
            "p95": xs and nearest_rank(xs, 0.95), "max": xs and max(xs)}


def victim_partition(cluster: LocalCluster, topic: str, victim: str) -> int:
    """The partition whose leader is killed: 0 (``any``), or the first whose leader is not
    the active controller (``broker``; 0 if every leader is)."""
    if victim == "any":
        return 0
    controller = cluster.active_controller()
    for p in sorted(cluster.partitions(topic), key=lambda p: p.partition):
        if p.leader not in (-1, controller):
            return p.partition
    return 0


def run_one(cluster: LocalCluster, settle: float, args, rng: random.Random,
            s3=None) -> dict:
    base_settings = bench_settings(settle)
    where = "s3" if s3 is not None else "local"
    run = f"latency-s{settle:g}-{where}-{time.strftime('%H%M%S')}"
    home = base_settings.home_dir / run
    settings = base_settings.model_copy(update={"home": home})
    if s3 is not None:  # validated anew: the storage section takes effect
        settings = Settings.model_validate({**settings.model_dump(), "home": home,
                                            "warehouse": f"{s3.bucket('latency')}/{run}",
                                            "storage": s3.storage()})
    topic = f"lat-s{settle:g}-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=3, replication=3)
    api = f"http://{settings.api.host}:{settings.api.port}"
    say(f"settle {settle:g}s: topic {topic}, home {home}, warehouse {settings.warehouse_uri}")
    load = Load(settings, topic, args.rate).start()
    poller = Poller(api, topic)
    with Component(settings, "run") as service:
        wait_until(lambda: (s := summary(api, topic)) and s["verdicts"]["confirmed"] > 0,
                   600, "the first confirmed writes over REST", every=1)
        say("the service judges: warm-up done")
        poller.thread.start()
        t0 = time.monotonic()
        killed = []
        for at in kill_times(rng, args.kills, args.warmup, args.minutes * 60, args.gap):
            time.sleep(max(0.0, at - (time.monotonic() - t0)))
            part = victim_partition(cluster, topic, args.victim)
            if args.second_after is None:
                killed.append((*kill_leader(cluster, topic, partition=part), part))
            else:  # its new leader killed in turn, soon after
                killed += [(*k, part) for k in kill_leader_twice(
                    cluster, topic, args.second_after, partition=part)]
        time.sleep(settle + 30)  # later writes carry the frontier past the last loss
        load.stop()
        say(f"producer stopped: {load.producer.acked} acked")
        truth = missing_from_log(settings.cluster.bootstrap, topic, load.producer.record,
                                 load.producer.producer_id, load.producer.run_id)
        say(f"ground truth: {len(truth)} acked writes missing from the log")
        deadline = time.time() + args.wait
        while time.time() < deadline and not all(w in poller.first_seen for w in truth):
            time.sleep(1)
        time.sleep(3)
        poller.stop.set()
        poller.thread.join(30)
        found = lost_over_rest(api, topic)
        suspected = fetch_suspicions(api, topic)
        service_log = service.output()
    findings = read_table(settings.table_path("findings"), "findings").to_pylist()
    changes = sorted((r["event_time"].timestamp(), r["partition"]) for r in read_table(
        settings.table_path("cluster_events"), "cluster_events").to_pylist()
        if r["topic"] == topic and r["kind"] == "leader_change")
    per_finding = loss_latency(findings, topic)
    marked_at = {w: datetime.fromisoformat(s["suspected_at"]).timestamp()
                 for s in suspected for w in lost_messages([s])}
    # each lost write belongs to the first kill after its sending (5 s of slack: in flight)
    # (never past the next kill: two kills of a pair may come within 5 s)
    bounds = [load.sent_by(min(k[0] + 5, killed[i + 1][0]) if i + 1 < len(killed)
                           else k[0] + 5) for i, k in enumerate(killed)]
    per_kill = []
    for i, (k, node, controller, part) in enumerate(killed):
        lo = bounds[i - 1] if i else -1
        mine = [w for w in truth if lo < w[2] <= bounds[i]]
        seen = [poller.first_seen.get(w) for w in mine]
        # the leader change the kill caused: the partition's first after it
        change = next((t for t, p in changes if p == part and t > k), None)
        early = [poller.first_suspected[w] for w in mine if w in poller.first_suspected
                 and w in poller.first_seen and poller.first_suspected[w] < poller.first_seen[w]]
        marked = [marked_at[w] for w in mine if w in marked_at]
        per_kill.append({"killed_at": k, "node": node, "partition": part,
                         "controller": controller, "lost": len(mine),
                         "answered_after": None if not mine or None in seen
                         else round(max(seen) - k, 1),
                         "changed_after": None if change is None else round(change - k, 1),
                         "suspected_before_verdict": len(early),
                         "suspected_after_change": None if not early or change is None
                         else round(min(early) - change, 1),
                         # the marker's part of it: when its row was written
                         "marked_after_change": None if not marked or change is None
                         else round(min(marked) - change, 1)})
    overall = spread([k["answered_after"] for k in per_kill if k["answered_after"] is not None])
    suspecting = spread([k["suspected_after_change"] for k in per_kill
                         if k["suspected_after_change"] is not None])
    marking = spread([k["marked_after_change"] for k in per_kill
                      if k["marked_after_change"] is not None])
    suspected_writes = set(lost_messages(suspected))
    withdrawn = [{k: s[k] for k in ("partition", "seq", "count", "state", "basis", "why")}
                 for s in suspected if s["state"] in ("withdrawn", "partly")]
    by_class = {name: spread([k["answered_after"] for k in per_kill if k["controller"] is want
                              and k["answered_after"] is not None])
                for name, want in (("controller", True), ("broker", False))}
    result = {
        "where": where, "warehouse": settings.warehouse_uri,
        "settle": settle, "target": settle + 15, "topic": topic, "acked": load.producer.acked,
        "kills": per_kill, "lost_truth": len(truth), "lost_rest": len(found),
        "equal": set(truth) == found, "unanswered": len(set(truth) - found),
        "false": len(found - set(truth)),
        "p50": overall["p50"], "p95": overall["p95"], "max": overall["max"],
        "by_class": by_class, "victim": args.victim, "second_after": args.second_after,
        "suspected": {**suspecting, "goal": 5.0, "marked": marking,
                      "before_verdict": sum(k["suspected_before_verdict"] for k in per_kill),
                      "covered": len(suspected_writes & set(truth)),
                      "writes": len(suspected_writes), "withdrawn": withdrawn,
                      "unexplained": sum(1 for w in withdrawn if not w["why"])},
        "per_finding": per_finding.__dict__ if per_finding else None,
        "passes": service_log.count("audit pass "),
    }
    (home / "latency.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--settle", type=float, nargs="+", default=[10, 30])
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--minutes", type=float, default=10, help="the kills fall in this span")
    ap.add_argument("--warmup", type=float, default=20, help="seconds before the span")
    ap.add_argument("--gap", type=float, default=40, help="least seconds between two kills")
    ap.add_argument("--rate", type=float, default=5000)
    ap.add_argument("--wait", type=float, default=300,
                    help="after the full read, how long to wait for the last answers")
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--second-after", type=float, default=None,
                    help="each kill is followed this many seconds after it (its node "
                         "started again at once) by a kill of the partition's new leader (a "
                         "second fail-over before the first's losses settled; each counts "
                         "as a kill of its own)")
    ap.add_argument("--victim", choices=["any", "broker"], default="any",
                    help="any: partition 0's leader, whichever node; broker: a leader that "
                    "is not the active controller")
    ap.add_argument("--where", nargs="+", choices=["local", "s3"], default=["local"],
                    help="the warehouse on disk, in a bucket of the local S3 server, or each "
                    "in turn (per settle period)")
    ap.add_argument("--s3-port", type=int, default=28491)
    ap.add_argument("--keep-cluster", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    cluster = fresh_cluster(bench_settings(10))
    results, s3 = [], None
    try:
        if "s3" in args.where:
            from kafka_audit.scenarios.object_store import S3Server

            folder = bench_settings(10).home_dir / f"latency-s3-{time.strftime('%H%M%S')}"
            s3 = S3Server(folder, args.s3_port, heap_mb=512).start()
        for settle in args.settle:
            for where in args.where:
                results.append(run_one(cluster, settle, args, rng,
                                       s3 if where == "s3" else None))
    finally:
        if s3 is not None:
            s3.stop()
        if not args.keep_cluster:
            cluster_down(cluster)
    print()
    for r in results:
        kills = ", ".join(f"{k['answered_after']}{'c' if k['controller'] else ''}"
                          for k in r["kills"])
        print(f"settle {r['settle']:g}s, warehouse {r['warehouse']}: per kill (s; c: the "
              f"leader was also the active controller): {kills}")
        print(f"  p50 {r['p50']}s  p95 {r['p95']}s  max {r['max']}s  against settle + 15 = "
              f"{r['target']:g}s: {'met' if r['p95'] and r['p95'] <= r['target'] else 'NOT met'}")
        for name, c in r["by_class"].items():
            if c["count"]:
                print(f"  {name} kills ({c['count']}): p50 {c['p50']}s  p95 {c['p95']}s  "
                      f"max {c['max']}s")
        sp = r["suspected"]
        share = sp["covered"] / r["lost_truth"] if r["lost_truth"] else 1.0
        print(f"  leader change to the first suspected write over REST: p50 {sp['p50']}s  "
              f"p95 {sp['p95']}s  max {sp['max']}s over {sp['count']} kills against "
              f"{sp['goal']:g}s: {'met' if sp['p95'] and sp['p95'] <= sp['goal'] else 'NOT met'}")
        mk = sp["marked"]
        print(f"  of which the marker's row written after the change: p50 {mk['p50']}s  "
              f"p95 {mk['p95']}s  max {mk['max']}s")
        print(f"  suspected: {sp['covered']} of the {r['lost_truth']} lost writes "
              f"({100 * share:.1f} %; {sp['before_verdict']} before their verdict), "
              f"{sp['writes']} suspected in all, {len(sp['withdrawn'])} suspicions withdrawn "
              f"({sp['unexplained']} without a reason)")
        pf = r["per_finding"]
        if pf:
            print(f"  per loss finding, ack to detection: p50 {pf['p50']:.1f}s p95 "
                  f"{pf['p95']:.1f}s max {pf['max']:.1f}s over {pf['count']} findings")
        print(f"  lost: REST {r['lost_rest']}, ground truth {r['lost_truth']}: "
              f"{'EQUAL' if r['equal'] else 'DIFFERENT'} ({r['unanswered']} unanswered, "
              f"{r['false']} not lost); {r['acked']} acked; {r['passes']} passes")


if __name__ == "__main__":
    main()
