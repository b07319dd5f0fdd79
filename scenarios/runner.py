"""Run a fault scenario (``scenarios/catalog.py``) and judge the auditor against ground
truth computed by the harness alone.

A run: a fresh one-partition RF=3 topic with the scenario's settings; an instrumented
producer writing through the fault; the fault schedule, each fault logged with its time
into ``fault_events``; healing; the consume job and audit passes until nothing is
pending; a final full read with a plain consumer; the auditor's loss findings fetched
over REST and its windows from the ``windows`` table; then, write for write: losses,
duplicates and reorders equal the full read's, the losses' causes are among those the
scenario allows, the windows it expects exist and contain the fault times. A text report
and a PNG of the partition's timeline; :attr:`Report.ok` False on any disagreement.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kafka_audit.scenarios.catalog import SCENARIOS, Context
from kafka_audit.scenarios.groundtruth import acked_but_missing, full_read_stamps
from kafka_audit.scenarios.harness import (
    ApiServer,
    audit_until_settled,
    fetch_lost,
    lost_messages,
    say,
    secondaries,
)
from kafka_audit.schemas.verdicts import cause_name
from kafka_audit.settings import Settings
from kafka_audit.store import append_rows, read_table

__all__ = ["Report", "run_scenario"]

#: a window contains a fault when it spans the fault's time, give or take this (the
#: watcher sees a change up to a poll and a metadata round after it)
FAULT_SLACK = timedelta(seconds=10)


@dataclass
class Report:
    scenario: str
    topic: str
    acked: int = 0
    failed: int = 0
    truth_lost: list = field(default_factory=list)
    found_lost: list = field(default_factory=list)
    causes: set = field(default_factory=set)
    #: lost writes by the kind of window each fell in over REST (None: in none)
    lost_in: dict = field(default_factory=dict)
    windows: list = field(default_factory=list)  # (kind, start, end, acks, losses)
    faults: list = field(default_factory=list)  # (at, kind, detail)
    problems: list = field(default_factory=list)
    picture: Path | None = None
    secondary: object = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def text(self) -> str:
        lines = [f"scenario {self.scenario} on {self.topic}: {self.acked} writes acknowledged, "
                 f"{self.failed} failed",
                 f"  lost according to the auditor (REST): {len(self.found_lost)}",
                 f"  acked but absent from a full read   : {len(self.truth_lost)}",
                 f"  causes: {', '.join(sorted(self.causes)) or '-'}"]
        if self.lost_in:
            lines.append("  lost writes by window: " + ", ".join(
                f"{k or 'none'} {n}" for k, n in sorted(self.lost_in.items(),
                                                        key=lambda kv: str(kv[0]))))
        lines += [f"  {line}" for line in self.secondary.lines()] if self.secondary else []
        lines.append("  faults:")
        lines += [f"    {at:%H:%M:%S.%f}"[:-3] + f" {kind} {detail}"
                  for at, kind, detail in self.faults]
        lines.append("  windows:")
        lines += [f"    {k} {s:%H:%M:%S}-{e:%H:%M:%S}" if e else f"    {k} {s:%H:%M:%S}-open"
                  for k, s, e, *_ in self.windows] or ["    none"]
        if self.picture:
            lines.append(f"  timeline picture: {self.picture}")
        lines.append("  verdict: " + ("MATCH" if self.ok else "MISMATCH: "
                                      + "; ".join(self.problems)))
        return "\n".join(lines)


def _produce(settings: Settings, topic: str, s, stop: threading.Event, holder: dict,
             most: int) -> None:
    from kafka_audit.clients import cluster_config
    from kafka_audit.producers.instrumented import AuditedProducer
    from kafka_audit.producers.load import SEND, STOP, WAIT, Pacer, produce_paced

    conf = {**cluster_config(settings), "acks": s.acks, "enable.idempotence": s.idempotence,
            "retries": s.retries, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000,
            **s.producer}
    p = AuditedProducer(conf, s.name, settings, keep_record=True)
    holder["p"] = p
    pacer, tail = Pacer(s.rate), False

    def gate(sent: int) -> str:
        nonlocal tail
        if stop.is_set():
            return STOP
        if not tail and holder.get("tail"):  # after the heal: paced again from now on
            tail = True
            pacer.restart(sent)
        if sent >= most and not tail:  # a slow heal does not make a longer run
            return WAIT
        return SEND

    produce_paced(p, topic, pacer, gate, b"x" * 88, partition=0, every=200)
    p.close()


def _past_every_ack(cluster, topic: str, holder: dict, progress, timeout: float = 60) -> None:
    """Traffic goes on until the partition's log end passes the highest offset ever
    acknowledged: a fault can leave acknowledged writes above where the healed log ends
    (an isolated leader's), and the audit judges an offset only once the log has passed
    it (until then they are pending, then unseen, never a verdict)."""
    from kafka_audit.scenarios.cluster import wait_until

    def passed() -> bool:
        p = holder.get("p")
        acked = [] if p is None else [o for _s, _t, part, o in (p.record or [])
                                      if part == 0 and o >= 0]  # (a producer's len: queued)
        end = cluster.log_end(topic, 0)  # type: ignore[attr-defined]
        state["last"] = (len(acked), max(acked, default=None), end)
        return bool(acked) and end > max(acked)

    state: dict = {}

    progress("traffic goes on until the log passes the highest acknowledged offset")
    try:
        wait_until(passed, timeout, "the log end to pass every acknowledged offset")
    except Exception:
        progress(f"(acked writes, highest acked offset, log end): {state.get('last')}")
        raise


def run_scenario(name: str, settings: Settings, cluster, spark, seed: int = 0,
                 seconds: float = 12, out_dir: Path | None = None, progress=say) -> Report:
    """Run scenario ``name`` against ``cluster`` (up); see the module docstring."""
    s = SCENARIOS[name]
    topic = f"{name}-{seed}-{uuid.uuid4().hex[:6]}"
    run_id = uuid.uuid4().hex[:12]
    cluster.create_topic(topic, partitions=1, replication=3, config=dict(s.topic_config))
    report = Report(name, topic)
    faults_path = settings.table_path("fault_events")

    def fault(kind: str, **detail) -> None:
        at = datetime.now(UTC)
        report.faults.append((at, kind, detail))
        append_rows(faults_path, "fault_events", [{"at": at, "scenario": name,
                                                   "run_id": run_id, "topic": topic,
                                                   "kind": kind,
                                                   "detail": json.dumps(detail)}])
        progress(f"fault: {kind} {detail}")

    from kafka_audit.jobs.watcher.watcher import ClusterWatcher

    watcher = ClusterWatcher(settings)
    wthread, wstop = watcher.start_thread()
    stop, holder = threading.Event(), {}
    most = int(s.rate * (seconds + 10))
    producer = threading.Thread(target=_produce, args=(settings, topic, s, stop, holder, most),
                                name=f"scenario-{name}-producer")
    producer.start()
    try:
        ctx = Context(cluster, settings, topic, random.Random(seed), seconds, fault, progress,
                      watcher)
        t0 = time.monotonic()
        s.schedule(ctx)
        holder["tail"] = True
        time.sleep(max(2.0, seconds - (time.monotonic() - t0)))  # traffic after the heal
        _past_every_ack(cluster, topic, holder, progress)
    finally:
        stop.set()
        producer.join(180)
        time.sleep(1)  # the watcher's last look at the healed cluster
        wstop.set()
        wthread.join(10)
    p = holder["p"]
    report.acked, report.failed = p.acked, p.failed
    audit_until_settled(spark, settings, topic, timeout=300, progress=progress)
    report.truth_lost = acked_but_missing(p.record or [], p.producer_id, p.run_id,
                                          full_read_stamps(cluster.bootstrap, topic))
    with ApiServer(settings) as api:
        items = fetch_lost(api.base_url, topic)
    report.found_lost = lost_messages(items)
    report.causes = {cause_name(i["cause"] or "") for i in items}
    for i in items:
        kind = i["window_id"].split(":", 1)[0] if i.get("window_id") else None
        report.lost_in[kind] = report.lost_in.get(kind, 0) + i["count"]
    report.secondary = secondaries(settings, cluster.bootstrap, topic, [p])
    report.windows = [(r["kind"], r["start"], r["end"], r["acks"], r["losses"]) for r in
                      read_table(settings.table_path("windows"), "windows").to_pylist()
                      if r["topic"] == topic]
    _judge(report, s)
    report.picture = _picture(settings, report, p, out_dir or settings.home_dir / "scenarios")
    return report


def _judge(report: Report, s) -> None:
    problems = report.problems
    if report.found_lost != report.truth_lost:
        only_api = sorted(set(report.found_lost) - set(report.truth_lost))[:3]
        only_truth = sorted(set(report.truth_lost) - set(report.found_lost))[:3]
        problems.append(f"losses differ (auditor only {only_api}, full read only "
                        f"{only_truth})")
    if s.expect_loss is True and not report.truth_lost:
        problems.append("the scenario is expected to lose writes and lost none")
    if s.expect_loss is False and report.truth_lost:
        problems.append(f"{len(report.truth_lost)} writes lost where none should be")
    if report.secondary is not None and not report.secondary.match:
        problems.append("duplicates or reorders differ from the full read")
    if s.causes and report.causes - s.causes:
        problems.append(f"unexpected causes {sorted(report.causes - s.causes)}")
    faults = [at for at, *_ in report.faults]
    for kind in sorted(s.windows):
        hits = [w for w in report.windows if w[0] == kind]
        if not hits:
            problems.append(f"no {kind} window")
        elif faults and not any(start - FAULT_SLACK <= max(faults)
                                and (end is None or end + FAULT_SLACK >= min(faults))
                                for _k, start, end, *_ in hits):
            problems.append(f"no {kind} window around the faults")


def _picture(settings: Settings, report: Report, producer, folder: Path) -> Path:
    """The partition's timeline: acknowledged writes (offset over time), lost ones marked,
    faults as lines, leaders and ISR size below, windows shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{report.topic}.png"
    events = [r for r in read_table(settings.table_path("cluster_events"),
                                    "cluster_events").to_pylist()
              if r["topic"] == report.topic and r["isr"] is not None and r["partition"] == 0]
    acks = [r for r in read_table(settings.table_path("acks"), "acks").to_pylist()
            if r["topic"] == report.topic and r["offset"] is not None]
    lost = set(report.truth_lost)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1]})
    xs = [r["ack_time"] for r in acks]
    top.scatter(xs, [r["offset"] for r in acks], s=3, color="#4477aa",
                label="acknowledged (runs)")
    runs = sorted((r["seq"], r["count"], r["ack_time"]) for r in acks)

    def acked_at(seq: int):
        for first, count, at in runs:
            if first <= seq < first + count:
                return at
        return None

    marks = [(acked_at(seq), off) for _p, off, seq in sorted(lost)]
    top.scatter([t for t, _o in marks if t is not None],
                [o for t, o in marks if t is not None], s=14, color="#cc3311", marker="x",
                label="lost (full read)")
    colors = {"exposure": "#ee7733", "rejection": "#bbbbbb", "split_brain": "#aa3377",
              "reduced_redundancy": "#ccddaa", "leader_change": "#4477aa"}
    now = datetime.now(UTC)
    labelled = set()
    for kind, start, end, *_ in report.windows:
        for ax in (top, bottom):
            label = kind if ax is top and kind not in labelled else None
            if end is not None and end == start:  # an instant (a clean hand-over): a line
                ax.axvline(start, color=colors.get(kind, "#dddddd"), alpha=0.6,
                           linewidth=1.5, label=label)
            else:
                ax.axvspan(start, end or now, color=colors.get(kind, "#dddddd"), alpha=0.3,
                           label=label)
        labelled.add(kind)
    for at, kind, _detail in report.faults:
        for ax in (top, bottom):
            ax.axvline(at, color="black", linewidth=0.8, linestyle="--")
        top.annotate(kind, (at, 1), xycoords=("data", "axes fraction"), rotation=90,
                     fontsize=7, va="top", ha="right")
    if events:
        events.sort(key=lambda r: r["event_time"])
        t = [r["event_time"] for r in events]
        bottom.step(t, [len(r["isr"]) for r in events], where="post", label="ISR size")
        bottom.step(t, [r["leader"] for r in events], where="post", label="leader node")
    top.set_ylabel("offset")
    bottom.set_ylabel("ISR size / leader")
    bottom.set_xlabel("time (UTC)")
    top.legend(loc="upper left", fontsize=7, markerscale=2)
    bottom.legend(loc="upper left", fontsize=7)
    top.set_title(f"{report.scenario}: {report.topic} — {len(report.truth_lost)} lost of "
                  f"{report.acked} acknowledged")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
