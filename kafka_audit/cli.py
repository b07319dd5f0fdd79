"""``kafka-audit``: one command, a subcommand per role. ``kafka-audit SUBCOMMAND --help``."""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time

from kafka_audit.clients import LIBRDKAFKA_LOGGER
from kafka_audit.errors import AuditorError
from kafka_audit.settings import get_settings


def _cluster(args) -> int:
    from kafka_audit.deploy.cluster import LocalCluster

    c = LocalCluster(get_settings())
    if args.action == "up":
        c.up(print)
    elif args.action == "down":
        c.down()
        print("cluster stopped")
    elif args.action == "status":
        print(c.status())
    else:
        if args.node is None:
            raise AuditorError(f"cluster {args.action} needs a node number")
        {"kill": c.kill, "stop": c.stop, "start": c.start}[args.action](args.node)
        print(f"node {args.node}: {args.action} done")
    return 0


def _produce(args) -> int:
    from kafka_audit.producers.load import LoadSpec, run_load

    spec = LoadSpec(topic=args.topic, rate=args.rate, seconds=args.seconds, count=args.count,
                    size=args.size, acks=args.acks, idempotence=args.idempotence,
                    retries=args.retries, producer_id=args.producer_id)
    p = run_load(get_settings(), spec, progress=print)
    print(f"sent {p.sent}, acked {p.acked}, failed {p.failed}, ledger rows "
          f"{p.ledger.rows_written} for {p.ledger.reports_written} reports (run {p.run_id})")
    return 0


def _consume(args) -> int:
    from kafka_audit.jobs.consume_job import DEFAULT_PATTERN, start_consume
    from kafka_audit.jobs.spark import get_spark

    s = get_settings()
    q = start_consume(get_spark(s, "kafka-audit-consume"), s, args.topics or DEFAULT_PATTERN,
                      once=args.once)
    q.awaitTermination()
    return 0


def _audit(args) -> int:
    from kafka_audit.jobs.audit_job import ClusterLookups, run_audit_pass
    from kafka_audit.jobs.spark import get_spark

    s = get_settings()
    spark = get_spark(s, "kafka-audit-audit")
    lookups = ClusterLookups(s)
    while True:
        print(run_audit_pass(spark, s, lookups=lookups).line(), flush=True)
        if args.once:
            return 0
        time.sleep(s.audit.interval_seconds)


def _watch(args) -> int:
    from kafka_audit.jobs.watcher import ClusterWatcher

    w = ClusterWatcher(get_settings())
    stop = threading.Event()
    try:
        while not stop.is_set():
            for row in w.poll_once():
                print(f"{row['event_time']:%H:%M:%S} {row['topic']}-{row['partition']} "
                      f"{row['kind']} leader={row['leader']} isr={row['isr']} "
                      f"epoch={row['leader_epoch']}", flush=True)
            if args.once:
                return 0
            stop.wait(get_settings().watch.interval_seconds)
    except KeyboardInterrupt:
        return 0
    return 0


def _serve(args) -> int:
    import uvicorn

    s = get_settings()
    uvicorn.run("kafka_audit.auditor_api.main:app", host=args.host or s.api.host,
                port=args.port or s.api.port)
    return 0


def _setup(args) -> int:
    from kafka_audit.deploy.jvm import ensure_jars, native_jar

    print(f"jars ready in {ensure_jars()}; project jar {native_jar()}")
    return 0


def _demo(args) -> int:
    from kafka_audit.demo import run_demo

    result = run_demo(get_settings(), keep_running=args.keep_running)
    return 0 if result.match else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kafka-audit", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("setup", help="fetch the pinned Kafka, Spark-Kafka and Delta jars (once)")
    s.set_defaults(fn=_setup)

    s = sub.add_parser("cluster", help="the local 3-node KRaft cluster")
    s.add_argument("action", choices=["up", "down", "status", "kill", "stop", "start"])
    s.add_argument("node", nargs="?", type=int, help="node number for kill/stop/start")
    s.set_defaults(fn=_cluster)

    s = sub.add_parser("produce", help="stamped load with a Delta ack ledger")
    s.add_argument("topic")
    s.add_argument("--rate", type=float, default=1000, help="messages/s, 0 = unlimited")
    s.add_argument("--seconds", type=float, default=None)
    s.add_argument("--count", type=int, default=None)
    s.add_argument("--size", type=int, default=100)
    s.add_argument("--acks", choices=["0", "1", "all"], default="all")
    s.add_argument("--idempotence", action="store_true")
    s.add_argument("--retries", type=int, default=2)
    s.add_argument("--producer-id", default="load")
    s.set_defaults(fn=_produce)

    s = sub.add_parser("consume", help="Spark job: audited topics -> consumed table")
    s.add_argument("--once", action="store_true", help="read to the current end, then stop")
    s.add_argument("--topics", help="Java regex of topics (default: all not starting with _)")
    s.set_defaults(fn=_consume)

    s = sub.add_parser("audit", help="Spark job: acks x consumed -> findings")
    s.add_argument("--once", action="store_true")
    s.set_defaults(fn=_audit)

    s = sub.add_parser("watch", help="poll leaders/ISRs into cluster_events")
    s.add_argument("--once", action="store_true")
    s.set_defaults(fn=_watch)

    s = sub.add_parser("serve", help="REST API (uvicorn)")
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.set_defaults(fn=_serve)

    s = sub.add_parser("demo", help="produce with acks=1, kill the leader, audit, serve findings")
    s.add_argument("--keep-running", action="store_true", help="leave the cluster up afterwards")
    s.set_defaults(fn=_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger(LIBRDKAFKA_LOGGER).setLevel(logging.CRITICAL)
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except AuditorError as exc:
        print(f"kafka-audit: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
