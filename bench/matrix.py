"""The scenario matrix: each Kafka version the local cluster runs, with KIP-966's eligible
leader replicas off and on (the ZooKeeper-era 3.9: off, it has none), the scenarios whose
faults the versions and election rules treat differently, each judged write for write
against a full read.

For every (version, ELR) pair: the local cluster discarded and formatted anew that way
(``cluster.kafka_version``, ``cluster.eligible_leader_replicas``), then each scenario of
``--scenarios`` run as ``kafka-audit scenario run`` runs it (``scenarios/runner.py``):
its losses, duplicates and reorders equal the full read's, the causes among those the
scenario allows, the windows it expects there. A row per run, printed and written to
``<home>/matrix-<time>.md`` (the table ``docs/scenarios.md`` carries) and ``.json``.
The local cluster under that home is discarded first and after: give it a home of its own.

Run (a home and ports of its own, so a demo or benchmark may run beside it)::

    KAFKA_AUDIT_HOME=var/matrix KAFKA_AUDIT_CLUSTER__BROKER_BASE_PORT=28091 \\
    KAFKA_AUDIT_CLUSTER__CONTROLLER_BASE_PORT=28191 \\
    KAFKA_AUDIT_CLUSTER__REPLICATION_BASE_PORT=28291 KAFKA_AUDIT_API__PORT=28080 \\
        .venv/bin/python bench/matrix.py [--seconds 12] [--seeds 1]

The tests run one scenario on each version with ELR on
(``tests/cluster/test_kafka_versions.py``) and the whole catalog on the pinned version
with classic elections (``tests/scenarios/test_catalog.py``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from steady import say

from kafka_audit.jars import LOCAL_VERSIONS, ZOOKEEPER_VERSIONS
from kafka_audit.jobs.spark import get_spark
from kafka_audit.scenarios.cluster import LocalCluster
from kafka_audit.scenarios.runner import run_scenario
from kafka_audit.settings import get_settings

#: the faults whose course depends on the election rules: a fail-over, the ISR shrunk to
#: the leader with and without unclean election, every broker down at once, a leader cut
#: off from the quorum, a sole replica back without its data
SCENARIOS = ("acks1-leader-kill", "isr-shrunk-unclean", "min-isr-2", "simultaneous-crash",
             "isolated-leader", "disk-loss")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", nargs="*", default=list(LOCAL_VERSIONS),
                    choices=LOCAL_VERSIONS)
    ap.add_argument("--elr", nargs="*", default=["off", "on"], choices=["off", "on"])
    ap.add_argument("--scenarios", nargs="*", default=list(SCENARIOS))
    ap.add_argument("--seconds", type=float, default=12, help="seconds of traffic a run")
    ap.add_argument("--seeds", type=int, default=1, help="runs of each scenario")
    args = ap.parse_args()
    base = get_settings()
    stamp = time.strftime("%m%d-%H%M%S")
    rows: list[dict] = []
    spark = get_spark(base, "kafka-audit-matrix")
    for version in args.versions:
        # ZooKeeper mode has no eligible leader replicas: its classic rules alone
        for elr in ["off"] if version in ZOOKEEPER_VERSIONS else args.elr:
            s = base.model_copy(update={"cluster": base.cluster.model_copy(update={
                "kafka_version": version, "eligible_leader_replicas": elr == "on"})})
            cluster = LocalCluster(s)
            cluster.discard()
            cluster.up(say)
            try:
                for name in args.scenarios:
                    for seed in range(1, args.seeds + 1):
                        rows.append(_row(version, elr, name, seed, s, cluster, spark,
                                         args.seconds, base.home_dir / f"matrix-{stamp}"))
                        say(_line(rows[-1]))
            finally:
                cluster.discard()
    spark.stop()
    table = _table(rows)
    print(table)
    out = base.home_dir / f"matrix-{stamp}"
    out.with_suffix(".md").write_text(table + "\n")
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1, default=str))
    say(f"written {out}.md and .json")
    return 0 if all(r["verdict"] == "MATCH" for r in rows) else 1


def _row(version: str, elr: str, name: str, seed: int, s, cluster, spark, seconds: float,
         folder: Path) -> dict:
    row = {"kafka": version, "elr": elr, "scenario": name, "seed": seed}
    started = time.monotonic()
    try:
        r = run_scenario(name, s, cluster, spark, seed=seed, seconds=seconds,
                         out_dir=folder, progress=say)
    except Exception as exc:  # noqa: BLE001 - one run's failure is its row; the rest run
        return {**row, "truth": "-", "found": "-", "causes": "-", "windows": "-",
                "seconds": round(time.monotonic() - started),
                "verdict": f"FAILED: {str(exc).splitlines()[0][:120] if str(exc) else exc!r}"}
    print(r.text())
    return {**row, "truth": len(r.truth_lost), "found": len(r.found_lost),
            "causes": ", ".join(sorted(r.causes)) or "-",
            "windows": ", ".join(sorted({w[0] for w in r.windows})) or "-",
            "seconds": round(time.monotonic() - started),
            "verdict": "MATCH" if r.ok else "MISMATCH"}


def _line(r: dict) -> str:
    return (f"{r['kafka']} ELR {r['elr']} {r['scenario']} seed {r['seed']}: lost {r['found']} "
            f"of {r['truth']} ({r['causes']}) {r['verdict']}")


def _table(rows: list[dict]) -> str:
    cols = ("kafka", "elr", "scenario", "seed", "truth", "found", "causes", "windows",
            "seconds", "verdict")
    head = ("Kafka", "ELR", "scenario", "seed", "lost (full read)", "lost (REST)", "causes",
            "windows", "s", "verdict")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
