"""``kafka-audit``: one command, a subcommand per role (also ``python -m kafka_audit``).

Exit codes (:data:`EXIT_CODES`, printed by ``--help`` and listed in
docs/reference/cli.md): 0 success; 1 a demo or scenario whose verdicts did not match
ground truth; 2 a configuration or usage error, or any other :class:`AuditorError` (one
line on stderr, the traceback too with ``--verbose``); 3 ``check`` found a blocker;
130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import traceback

from kafka_audit import __version__
from kafka_audit.clients import LIBRDKAFKA_LOGGER
from kafka_audit.errors import AuditorError
from kafka_audit.jars import LOCAL_VERSIONS
from kafka_audit.log_format import JsonLines
from kafka_audit.redact import ScrubFilter, redacted, scrub
from kafka_audit.settings import get_settings

log = logging.getLogger("kafka_audit.app.cli")

EXIT_OK = 0
EXIT_MISMATCH = 1  # a demo or scenario run whose verdicts did not match ground truth
EXIT_ERROR = 2  # a configuration or usage error (argparse exits 2 too), any AuditorError
EXIT_BLOCKED = 3  # `check` found a problem that blocks auditing
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT
#: every exit code and when, as ``--help`` prints them (the docs' table holds the same)
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_MISMATCH: "demo, scenario run: the auditor's verdicts did not match the ground truth",
    EXIT_ERROR: "a configuration or usage error, or any other error of the auditor (one "
                "line on stderr; --verbose adds the traceback)",
    EXIT_BLOCKED: "check: a blocker, something that keeps the auditor from auditing (a "
                  "permission it needs is missing, ...), printed with its fix",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}
DESCRIPTION = ("Proves, message by message, whether acknowledged Kafka writes survived. One "
               "command, a subcommand per role; 'kafka-audit SUBCOMMAND --help' for its "
               "options. Settings: KAFKA_AUDIT_CONFIG (a YAML file), KAFKA_AUDIT_HOME and "
               "KAFKA_AUDIT_<SECTION>__<KEY> variables; 'kafka-audit config show' prints them.")

# A third-party module a command imports -> the extra of pyproject.toml that installs it
# (a plain install is the ground floor only; tests/unit/test_extras.py holds this true)
EXTRA_OF_MODULE = {
    "confluent_kafka": "producer",
    "fastapi": "api", "starlette": "api", "uvicorn": "api", "prometheus_client": "api",
    "plotly": "api", "fastapi_standalone_docs": "api",
    "pyspark": "spark", "delta": "spark", "py4j": "spark", "great_expectations": "spark",
    "pandas": "spark", "matplotlib": "spark", "scramp": "spark", "xxhash": "spark",
    "kazoo": "spark", "pika": "rabbitmq",
}


def missing_extra(exc: ModuleNotFoundError, command: str) -> str | None:
    """One line naming the extra to install, when ``exc`` is a module an extra brings."""
    extra = EXTRA_OF_MODULE.get((exc.name or "").partition(".")[0])
    if extra is None:
        return None
    return (f"kafka-audit {command} needs {exc.name.partition('.')[0]}, which this install "
            f"lacks: pip install 'kafka-audit[{extra}]' (or [all], the whole auditor)")


def _cluster(args) -> int:
    from kafka_audit.scenarios.cluster import LocalCluster

    return _local_cluster(LocalCluster(get_settings()), args, "cluster")


def _rabbit(args) -> int:
    from kafka_audit.scenarios.rabbit_cluster import LocalRabbitCluster

    return _local_cluster(LocalRabbitCluster(get_settings()), args, "rabbit cluster")


def _local_cluster(c, args, name: str) -> int:
    """``kafka-audit cluster`` and ``kafka-audit rabbit``: one action on local cluster ``c``."""
    if args.action == "up":
        c.up(print)
    elif args.action == "down":
        c.down()
        print(f"{name} stopped")
    elif args.action == "discard":
        c.discard()
        print(f"{name} stopped and {c.root} removed")
    elif args.action == "status":
        print(c.status())
    else:
        if args.node is None:
            raise AuditorError(f"{args.cmd} {args.action} needs a node number")
        {"kill": c.kill, "stop": c.stop, "start": c.start}[args.action](args.node)
        print(f"{c.NODE} {args.node}: {args.action} done")
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
    from kafka_audit.jobs.consume.consume_job import run_consume
    from kafka_audit.jobs.spark import get_spark

    s = get_settings()
    run_consume(get_spark(s, "kafka-audit-consume"), s, args.topics, once=args.once)
    return 0


def _audit(args) -> int:
    from kafka_audit.jobs.audit.audit_job import run_audit_loop
    from kafka_audit.jobs.spark import get_spark

    s = get_settings()
    run_audit_loop(get_spark(s, "kafka-audit-audit"), s, once=args.once,
                   until_settled=args.until_settled)
    return 0


def _commit_staged(args) -> int:
    import signal
    import threading

    from kafka_audit.jobs.upkeep.staged_acks import StagedCommits, run_staged_commits

    s = get_settings()
    if args.once:
        done = StagedCommits(s)
        done.drain()
        print(f"committed {done.segments} staged segments ({done.rows} rows) in "
              f"{done.commits} commits; {done.dropped} committed before, dropped", flush=True)
        return EXIT_ERROR if done.failures else EXIT_OK
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    run_staged_commits(s, stop)
    return EXIT_OK


def _watch(args) -> int:
    from kafka_audit.jobs.watcher.watcher import ClusterWatcher
    from kafka_audit.schemas.events import BLIND

    def show(rows: list[dict]) -> None:
        for row in rows:
            at, kind = f"{row['event_time']:%H:%M:%S}", row["kind"]
            if kind == BLIND:
                print(f"{at} watcher blind until {row['until']:%H:%M:%S}", flush=True)
            elif row.get("partition", -1) < 0:
                print(f"{at} {row['topic'] or 'cluster'} {kind} {row.get('detail')}", flush=True)
            else:
                print(f"{at} {row['topic']}-{row['partition']} {kind} "
                      f"leader={row.get('leader')} isr={row.get('isr')} "
                      f"epoch={row.get('leader_epoch')} log_end={row.get('log_end')}",
                      flush=True)

    w = ClusterWatcher(get_settings(), on_events=show)
    w.wait_reachable()  # a cluster never reached: one line, exit 2
    if not args.once:
        w.run(threading.Event())  # until Ctrl-C (exit 130, like every subcommand)
    return 0


def _run(args) -> int:
    import signal

    from kafka_audit.app.memstats import configure_allocators, restart_with_python_allocator

    s = get_settings()
    # before any thread starts (librdkafka's too) and before deltalake and pyarrow are
    # imported: the modules below may import them one day
    restart_with_python_allocator(s.steady.python_allocator)  # returns once it is in place
    configure_allocators(s.steady)
    from kafka_audit.app.service import build, stop_consume_query
    from kafka_audit.auditor_api.server import check_serving
    from kafka_audit.jobs.watcher.watcher import ClusterWatcher

    check_serving(s.api)  # an API refused (open beyond loopback, bad TLS files): exit 2
    ClusterWatcher(s).wait_reachable()  # a cluster never reached: one line, exit 2
    service = build(s)
    signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(
        target=stop_consume_query, args=(service,), daemon=True).start())
    return service.run()


def _check(args) -> int:
    from kafka_audit.app.preflight import run_check

    report = run_check(get_settings())
    print(report.to_json() if args.json else report.text())
    return EXIT_BLOCKED if report.blocked else EXIT_OK


def _scenario(args) -> int:
    from kafka_audit.scenarios.catalog import SCENARIOS
    from kafka_audit.scenarios.rabbit_scenarios import RABBIT_SCENARIOS

    if args.action == "list":
        for name, summary in [*((n, sc.summary) for n, sc in SCENARIOS.items()),
                              *((n, sc.summary) for n, sc in RABBIT_SCENARIOS.items())]:
            print(f"{name:<32} {summary}")
        return EXIT_OK
    from kafka_audit.jobs.spark import get_spark

    names = [*SCENARIOS, *RABBIT_SCENARIOS] if args.name == ["all"] else args.name
    if not names:
        raise AuditorError("name a scenario (or `all`); `kafka-audit scenario list` names them")
    if unknown := [n for n in names if n not in SCENARIOS and n not in RABBIT_SCENARIOS]:
        raise AuditorError(f"no scenario {unknown[0]!r}; `kafka-audit scenario list` names them")
    if args.seeds < 1:
        raise AuditorError("--seeds must be at least 1")
    s = get_settings()
    cluster_cfg = {**({"kafka_version": args.kafka_version} if args.kafka_version else {}),
                   **({"eligible_leader_replicas": args.elr == "on"} if args.elr else {})}
    s = s.model_copy(update={
        "audit": s.audit.model_copy(update={"settle_seconds": args.settle}),
        "cluster": s.cluster.model_copy(update=cluster_cfg)})
    rows = []
    spark = None
    for kafka, chosen in ((True, [n for n in names if n in SCENARIOS]),
                          (False, [n for n in names if n in RABBIT_SCENARIOS])):
        if not chosen:
            continue
        cluster = _scenario_cluster(s, kafka)
        if args.fresh:
            cluster.discard()
        cluster.up(print)
        try:
            spark = spark or get_spark(s, "kafka-audit-scenario")
            for name in chosen:
                if not kafka:
                    rows.append(_rabbit_scenario_row(name, s, cluster, spark))
                    continue
                for seed in range(args.seed, args.seed + args.seeds):
                    rows.append(_scenario_row(name, seed, s, cluster, spark, args.seconds))
        finally:
            if not args.keep_running:  # nodes left behind would go on eating the CPU
                cluster.down()
                print("cluster stopped (--keep-running leaves it up)")
    if len(rows) > 1:
        print(f"\n{'scenario':<26}{'seed':>5}{'lost (read)':>13}{'lost (REST)':>13}  "
              f"{'faults':>6}  verdict  causes")
        for name, seed, truth, found, causes, faults, verdict in rows:
            print(f"{name:<26}{seed:>5}{truth!s:>13}{found!s:>13}  {faults!s:>6}  "
                  f"{verdict}  {causes}")
    return EXIT_OK if all(r[-1] == "MATCH" for r in rows) else EXIT_MISMATCH


def _scenario_cluster(s, kafka: bool):
    """The local cluster a scenario runs on: the Kafka one, or the RabbitMQ one."""
    if kafka:
        from kafka_audit.scenarios.cluster import LocalCluster

        return LocalCluster(s)
    from kafka_audit.scenarios.rabbit_cluster import LocalRabbitCluster

    return LocalRabbitCluster(s)


def _rabbit_scenario_row(name: str, s, rabbit, spark) -> tuple:
    """One RabbitMQ scenario run, printed; its row of the closing table."""
    from kafka_audit.scenarios.rabbit_scenarios import run_rabbit_scenario

    try:
        report = run_rabbit_scenario(name, s, rabbit, spark)
    except Exception as exc:  # noqa: BLE001 - one run's failure is its row, the rest run
        log.exception("scenario %s failed", name)
        return (name, "-", "-", "-", "-", "-", f"FAILED: {exc}".splitlines()[0])
    print(report.text())
    return (name, "-", len(report.truth_lost), len(report.found_lost),
            ", ".join(sorted(report.causes)) or "-", 1, "MATCH" if report.ok else "MISMATCH")


def _scenario_row(name: str, seed: int, s, cluster, spark, seconds: float) -> tuple:
    """One scenario run, printed; its row of the closing table (a failure is its row)."""
    from kafka_audit.scenarios.runner import run_scenario

    try:
        report = run_scenario(name, s, cluster, spark, seed=seed, seconds=seconds)
    except Exception as exc:  # noqa: BLE001 - one run's failure is its row, the rest run
        log.exception("scenario %s seed %d failed", name, seed)
        return (name, seed, "-", "-", "-", "-", f"FAILED: {exc}".splitlines()[0])
    print(report.text())
    return (name, seed, len(report.truth_lost), len(report.found_lost),
            ", ".join(sorted(report.causes)) or "-", len(report.faults),
            "MATCH" if report.ok else "MISMATCH")


def _serve(args) -> int:
    import uvicorn

    from kafka_audit.auditor_api.main import create_app
    from kafka_audit.auditor_api.server import uvicorn_config

    s = get_settings()
    # --host and --port as the settings' own: the Host names served follow the address
    s = s.model_copy(update={"api": s.api.model_copy(update={
        "host": args.host or s.api.host, "port": args.port or s.api.port})})
    config = uvicorn_config(create_app(s), s)  # refused beyond loopback without a token
    server = uvicorn.Server(config)
    server.run()
    return 0 if server.started else EXIT_ERROR


def _setup(args) -> int:
    from kafka_audit.errors import JarsMissing
    from kafka_audit.jars import client_tools_jar, ensure_jars, native_jar, plugin_library

    print(f"jars ready in {ensure_jars()}; project jars {native_jar()}, {client_tools_jar()}")
    try:  # without it producers are audited by the pure-Python path: said, not fatal
        print(f"producer plugin {plugin_library()}")
    except JarsMissing as exc:
        print(f"producer plugin not built ({exc.message}): producers use the Python path")
    return 0


def _windows(args) -> int:
    from kafka_audit.jobs.upkeep.windows_job import update_windows

    windows = update_windows(get_settings())
    for w in windows:
        end = f"{w.end:%Y-%m-%d %H:%M:%S}" if w.end else "open"
        print(f"{w.kind} {w.topic}/{w.partition} {w.start:%Y-%m-%d %H:%M:%S} .. {end}: "
              f"opened by {w.opened_by}, {w.acks} acks, {w.losses} lost")
    print(f"{len(windows)} windows in the windows table")
    return EXIT_OK


def _ship(args) -> int:
    import time
    from pathlib import Path

    from kafka_audit.producers.native import native_spool_root
    from kafka_audit.producers.shipper import ship_spools

    s = get_settings()
    root = Path(args.spool_dir) if args.spool_dir else native_spool_root(s)
    while True:
        report = ship_spools(root, s.table_path("acks"),
                             staged=s.producer.staged)
        print(report.line(), flush=True)
        if not args.follow:
            return EXIT_ERROR if report.failed else EXIT_OK
        time.sleep(args.interval)


def _demo(args) -> int:
    from kafka_audit.scenarios.demo import run_demo

    result = run_demo(get_settings(), keep_running=args.keep_running)
    return EXIT_OK if result.match else EXIT_MISMATCH


def _config_show(args) -> int:
    import yaml

    data = redacted(get_settings())
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(yaml.safe_dump(data, sort_keys=False, default_flow_style=False), end="")
    return 0


def _token(args) -> int:
    """``token new``: a random token and the settings entry holding its hash; ``token hash``:
    the hash of a token read from stdin (never from the command line: shells keep those)."""
    from kafka_audit.auditor_api.auth import hash_token, new_token

    if args.token_cmd == "new":
        token = new_token()
        print(f"token (give it to {args.name}; it is shown once, only its hash is kept):")
        print(f"  {token}")
        print("settings entry (api.tokens in the file named by KAFKA_AUDIT_CONFIG):")
        print(f"  - {{name: {args.name}, hash: '{hash_token(token)}', role: {args.role}}}")
        return EXIT_OK
    token = sys.stdin.readline().strip()
    if not token:
        raise AuditorError("token hash: give the token on standard input")
    print(hash_token(token))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    codes = "\n".join(f"  {code:>3}  {what}" for code, what in EXIT_CODES.items())
    p = argparse.ArgumentParser(prog="kafka-audit", description=DESCRIPTION,
                                epilog=f"exit codes:\n{codes}",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"kafka-audit {__version__}")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print the traceback of an error, not only its one-line message")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("setup", help="fetch the pinned Kafka, Spark-Kafka and Delta jars (once)")
    s.set_defaults(fn=_setup)

    for name, fn, what, up, status in (
            ("cluster", _cluster, "KRaft", "formatted on first use, as cluster.kafka_version "
             "and cluster.eligible_leader_replicas say", "nodes, leaders and ISRs"),
            ("rabbit", _rabbit, "RabbitMQ", "clustered on first use, as the rabbit settings "
             "say", "each node and the nodes it sees running")):
        s = sub.add_parser(name, help=f"the local 3-node {what} cluster")
        s.add_argument("action", choices=["up", "down", "discard", "status", "kill", "stop",
                                          "start"],
                       help=f"up: start ({up}); status: {status}; down: stop all; discard: "
                       "stop all and remove the cluster's data; kill N: SIGKILL node N; "
                       "stop N / start N")
        s.add_argument("node", nargs="?", type=int, help="node number for kill/stop/start")
        s.set_defaults(fn=fn)

    s = sub.add_parser("produce", help="stamped load with a Delta ack ledger")
    s.add_argument("topic", help="the topic to write to (it must exist)")
    s.add_argument("--rate", type=float, default=1000, help="messages/s, 0 = unlimited "
                   "(default 1000)")
    s.add_argument("--seconds", type=float, default=None, help="stop after this long")
    s.add_argument("--count", type=int, default=None, help="stop after this many writes")
    s.add_argument("--size", type=int, default=100, help="bytes of each value (default 100)")
    s.add_argument("--acks", choices=["0", "1", "all"], default="all",
                   help="the producer's acks (default all)")
    s.add_argument("--idempotence", action="store_true",
                   help="enable.idempotence=true (needs --acks all)")
    s.add_argument("--retries", type=int, default=2,
                   help="the producer's retries (default 2)")
    s.add_argument("--producer-id", default="load",
                   help="the id stamped on every write and kept in the ledger (default load)")
    s.set_defaults(fn=_produce)

    s = sub.add_parser("ship", help="commit the kaudit plugin's spooled delivery reports "
                                    "(producers in any language) to the acks table")
    s.add_argument("--spool-dir", help="the plugin's kaudit.spool.dir (default: "
                                       "<home>/spool/native)")
    s.add_argument("--follow", action="store_true", help="ship again every --interval "
                                                         "seconds, until interrupted")
    s.add_argument("--interval", type=float, default=1.0,
                   help="seconds between two shipments with --follow (default 1)")
    s.set_defaults(fn=_ship)

    s = sub.add_parser("commit-staged", help="commit the acks producer hosts hand over "
                                             "(producer.ledger_commits: staged) every "
                                             "producer.staged_commit_seconds; `run` does it "
                                             "too")
    s.add_argument("--once", action="store_true", help="commit what is staged now, then stop")
    s.set_defaults(fn=_commit_staged)

    s = sub.add_parser("consume", help="Spark job: audited topics -> consumed table")
    s.add_argument("--once", action="store_true", help="read to the current end, then stop")
    s.add_argument("--topics", help="Java regex of topics (default: all not starting with _)")
    s.set_defaults(fn=_consume)

    s = sub.add_parser("audit", help="Spark job: acks x consumed -> findings")
    mode = s.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="one pass, then stop")
    mode.add_argument("--until-settled", type=float, metavar="SECONDS", nargs="?",
                      const=600.0, help="passes until no write is pending (every acked "
                      "write judged: after `consume --once`), then stop; an error if some "
                      "still are after SECONDS (default 600)")
    s.set_defaults(fn=_audit)

    s = sub.add_parser("windows", help="recompute the windows table (when writes were at "
                                       "risk) now; the audit loop does it every "
                                       "steady.windows_every_seconds")
    s.set_defaults(fn=_windows)

    s = sub.add_parser("watch", help="poll leaders/ISRs into cluster_events")
    s.add_argument("--once", action="store_true", help="one look at the cluster, then stop")
    s.set_defaults(fn=_watch)

    s = sub.add_parser("run", help="the whole auditor as one service: watcher, consume, "
                                   "audit, the REST API and the committer of staged acks, "
                                   "supervised; SIGTERM stops it")
    s.add_argument("--log-json", action="store_true", help="log JSON lines, not text")
    s.set_defaults(fn=_run)

    s = sub.add_parser("check", help="preflight against the profile: reachable, credentials "
                                     "accepted, permissions, each audited topic's durability")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.set_defaults(fn=_check)

    s = sub.add_parser("scenario", help="fault scenarios on the local cluster (Kafka's, or "
                                        "RabbitMQ's for the rabbit-* ones), judged against "
                                        "ground truth: list, run NAME")
    s.add_argument("action", choices=["list", "run"],
                   help="list: the scenarios and what each injects; run: run them")
    s.add_argument("name", nargs="*", help="the scenarios to run (see list), or all")
    s.add_argument("--seed", type=int, default=0, help="what varies between runs (Kafka's)")
    s.add_argument("--seeds", type=int, default=1,
                   help="run each scenario this many times, seeds --seed, --seed+1, ...")
    s.add_argument("--seconds", type=float, default=20, help="seconds of traffic")
    s.add_argument("--settle", type=float, default=5,
                   help="audit.settle_seconds for the run (default 5)")
    s.add_argument("--keep-running", action="store_true", help="leave the cluster up afterwards")
    s.add_argument("--kafka-version", choices=LOCAL_VERSIONS, default=None,
                   help="run the local cluster at this Kafka version (cluster.kafka_version)")
    s.add_argument("--elr", choices=["on", "off"], default=None,
                   help="eligible leader replicas (KIP-966) on or off "
                   "(cluster.eligible_leader_replicas)")
    s.add_argument("--fresh", action="store_true",
                   help="discard the local cluster first (its data): needed to run another "
                   "version or election rules than it was formatted with")
    s.set_defaults(fn=_scenario)

    s = sub.add_parser("serve", help="REST API (uvicorn)")
    s.add_argument("--host", help="the address to bind (default: api.host)")
    s.add_argument("--port", type=int, help="the port (default: api.port, 8088)")
    s.set_defaults(fn=_serve)

    s = sub.add_parser("demo", help="produce with acks=1, kill the leader, audit, serve findings")
    s.add_argument("--keep-running", action="store_true", help="leave the cluster up afterwards")
    s.set_defaults(fn=_demo)

    s = sub.add_parser("config", help="the effective settings")
    config = s.add_subparsers(dest="config_cmd", metavar="show", required=True)
    s = config.add_parser("show", help="print the merged settings as YAML, secrets as ***")
    s.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    s.set_defaults(fn=_config_show)

    s = sub.add_parser("token", help="REST API bearer tokens: make one, or hash one")
    token = s.add_subparsers(dest="token_cmd", metavar="new|hash", required=True)
    s = token.add_parser("new", help="print a new random token and its settings entry (hash)")
    s.add_argument("--name", default="reader", help="who holds it (default: reader)")
    s.add_argument("--role", choices=["read", "admin"], default="read",
                   help="read: GET and HEAD only (default); admin: any method")
    s.set_defaults(fn=_token)
    s = token.add_parser("hash", help="print the settings hash of a token read from stdin")
    s.set_defaults(fn=_token)

    # --verbose after the subcommand too; SUPPRESS keeps a global one from being reset
    for parser in [*sub.choices.values(), *config.choices.values(), *token.choices.values()]:
        parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                            help="print the traceback of an error too")
    return p


def _logging(args) -> None:
    """One log stream on stderr: readable lines, or JSON lines with ``--log-json``; the
    Kafka clients' and Spark's chatter only with ``--verbose``."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines() if getattr(args, "log_json", False) else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    handler.addFilter(ScrubFilter())  # no line carries a secret, whoever logged it
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if getattr(args, "cmd", None) == "run" else logging.WARNING)
    logging.getLogger(LIBRDKAFKA_LOGGER).setLevel(
        logging.WARNING if args.verbose else logging.CRITICAL)
    for noisy in ("py4j", "great_expectations", "great_expectations.data_context.types.base",
                  "uvicorn.error", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.INFO if args.verbose else logging.ERROR)
    if args.verbose:
        os.environ.setdefault("KAFKA_AUDIT_SPARK__LOG_LEVEL", "WARN")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # a usage error exits 2
    _logging(args)
    try:
        return args.fn(args)
    except AuditorError as exc:
        if args.verbose:
            print(scrub(traceback.format_exc()), end="", file=sys.stderr)
        print(scrub(f"kafka-audit: {exc}"), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - one line; the traceback with --verbose
        if isinstance(exc, ModuleNotFoundError) and (said := missing_extra(exc, args.cmd)):
            print(f"kafka-audit: {said}", file=sys.stderr)
            return EXIT_ERROR
        if args.verbose:
            print(scrub(traceback.format_exc()), end="", file=sys.stderr)
        first = scrub(str(exc)).splitlines()[0] if str(exc) else ""
        print(f"kafka-audit: {type(exc).__name__}: {first} (--verbose shows the traceback)",
              file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
