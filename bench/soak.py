"""Soak: ``kafka-audit run`` for an hour at a steady rate, a leader kill every 10 minutes.

An ``acks=1`` producer at ``--rate`` msg/s (5,000) into one topic (3 partitions, RF 3);
every ``--kill-every`` seconds partition 0's followers are frozen half a second and its
leader SIGKILLed (acknowledged writes are destroyed: real losses to find). Each minute:
the RSS and the CPU time of every process (the service's Python process, its Spark driver
JVM, its Python workers, each broker, this process: the producer; the CPU as cores used
between samples, so a slower pass can be told from a busier neighbour), the audit
passes of that minute (count, median and max time, from the service's log), every
table's version, live files and bytes (data and Delta log), and the time one
``GET /v1/summary?topic=`` takes. Then the slope of each line after minute 10 (per hour) and a plot
(``--plot``, PNG, matplotlib). At the end a full read gives the ground truth: the
losses answered over REST must equal it.

Samples go to ``<home>/soak-*/samples.jsonl`` as they are taken; ``--replot FILE`` draws
the plot and slopes again from such a file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from steady import (
    Load,
    bench_settings,
    cluster_down,
    cpu_by_process,
    cpu_cores,
    fresh_cluster,
    kill_leader,
    lost_over_rest,
    missing_from_log,
    processes,
    rss_by_process,
    say,
)

from kafka_audit.latency import loss_latency
from kafka_audit.scenarios.cluster import LocalCluster, wait_until
from kafka_audit.scenarios.harness import Component
from kafka_audit.status import consume_lag, current_statuses
from kafka_audit.store import footprint, read_table

TABLES = ("acks", "consumed", "cluster_events", "findings", "audit_hot", "partition_state",
          "dq_results", "rollups")
PASS = re.compile(r"audit pass (\d+) at [0-9:]+: .*; ([0-9.]+)s( \[[^]]*\])?$")


def timed_summary(api: str, topic: str) -> tuple[float | None, dict | None]:
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(f"{api}/v1/summary?topic={topic}", timeout=120) as r:
            body = json.load(r)
    except Exception:  # noqa: BLE001 - recorded as missing
        return None, None
    return round((time.perf_counter() - t) * 1000, 1), body


def pass_times(log_text: str, seen: int) -> tuple[list[float], int]:
    """Pass times (s) in the service log after its first ``seen`` pass lines."""
    lines = [m for line in log_text.splitlines() if (m := PASS.search(line))]
    return [float(m.group(2)) for m in lines[seen:]], len(lines)


def sample(minute: float, service: Component, cluster: LocalCluster, settings, api: str,
           topic: str, seen: int) -> tuple[dict, int]:
    times, seen = pass_times(service.output(), seen)
    ms, body = timed_summary(api, topic)
    tables = {}
    for t in TABLES:
        f = footprint(settings.table_path(t))
        if f is not None:
            tables[t] = {"version": f.version, "live_files": f.live_files,
                         "live_mb": round(f.live_bytes / 2**20, 3),
                         "data_files": f.data_files, "data_mb": round(f.data_bytes / 2**20, 3),
                         "log_mb": round(f.log_bytes / 2**20, 3)}
    current = current_statuses(settings.home_dir).current
    procs = processes(service.proc.pid, cluster, os.getpid())  # one walk of /proc for both
    return {
        "minute": round(minute, 2),
        "rss_mb": {k: round(v, 1) for k, v in rss_by_process(procs).items()},
        # cumulative CPU seconds by name and pid (pids as strings, as JSON keeps them)
        "cpu_s": {k: {str(p): round(t, 2) for p, t in v.items()}
                  for k, v in cpu_by_process(procs).items()},
        "passes": len(times),
        "pass_median_s": statistics.median(times) if times else None,
        "pass_max_s": max(times) if times else None,
        "tables": tables,
        "home_mb": round(tree_bytes(settings.home_dir) / 2**20, 3),
        "summary_ms": ms,
        "pending": body and body["pending"], "lost": body and body["lost"],
        "lag_offsets": consume_lag(current.get("consume"), current.get("watcher"))["offsets"],
    }, seen


def tree_bytes(root: Path) -> int:
    """Bytes of every file under ``root`` (the whole warehouse: tables, logs, the
    streams' checkpoints, status files), counted as they are; a file deleted while the
    walk runs is left out."""
    total = 0
    for d, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(d, name)).st_size
            except OSError:
                pass
    return total


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (minute, value) points, per hour."""
    pts = [(x, y) for x, y in points if y is not None]
    if len(pts) < 3:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return 60 * sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def lines(samples: list[dict]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """The plotted lines by panel: name -> [(minute, value)]."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {
        "RSS (MB)": {}, "CPU (cores, between samples)": {},
        "audit pass (s, median per minute)": {}, "table versions": {},
        "table bytes on disk (MB, data + log)": {}, "table live data (MB)": {},
        "GET /v1/summary (ms)": {}}
    prev = None
    for s in samples:
        m = s["minute"]
        for name, mb in s["rss_mb"].items():
            out["RSS (MB)"].setdefault(name, []).append((m, mb))
        if prev is not None and "cpu_s" in s and "cpu_s" in prev and m > prev["minute"]:
            for name, cores in cpu_cores(prev["cpu_s"], s["cpu_s"],
                                         60 * (m - prev["minute"])).items():
                out["CPU (cores, between samples)"].setdefault(name, []).append(
                    (m, round(cores, 3)))
        prev = s
        out["audit pass (s, median per minute)"].setdefault("median", []).append(
            (m, s["pass_median_s"]))
        out["audit pass (s, median per minute)"].setdefault("max", []).append(
            (m, s["pass_max_s"]))
        for t, f in s["tables"].items():
            out["table versions"].setdefault(t, []).append((m, f["version"]))
            out["table bytes on disk (MB, data + log)"].setdefault(t, []).append(
                (m, f["data_mb"] + f["log_mb"]))
            if "live_mb" in f:  # what the table holds now (replaced files not counted)
                out["table live data (MB)"].setdefault(t, []).append((m, f["live_mb"]))
        if "home_mb" in s:
            out["table bytes on disk (MB, data + log)"].setdefault(
                "whole home", []).append((m, s["home_mb"]))
        out["GET /v1/summary (ms)"].setdefault("one request", []).append((m, s["summary_ms"]))
    return out


#: minutes a low of the whole home's bytes is taken over: with retention in minutes the
#: bytes are a sawtooth (files replaced every minute, vacuumed an hour later), whose
#: lows show the trend its slope hides
LOW_WINDOW = 10


def lows(samples: list[dict], after: float = 10) -> list[tuple[float, dict]]:
    """The sample with the fewest bytes in the home, per whole :data:`LOW_WINDOW` minutes
    from minute ``after`` on: (the window's first minute, that sample)."""
    out = []
    start = after
    while any(s["minute"] >= start + LOW_WINDOW - 1 for s in samples):
        window = [s for s in samples if start <= s["minute"] < start + LOW_WINDOW]
        if window:
            out.append((start, min(window, key=lambda s: s["home_mb"])))
        start += LOW_WINDOW
    return out


def slopes(samples: list[dict], after: float = 10) -> dict[str, dict[str, float | None]]:
    return {panel: {name: slope_per_hour([p for p in pts if p[0] >= after])
                    for name, pts in named.items()}
            for panel, named in lines(samples).items()}


def plot(samples: list[dict], kills: list[float], path: Path, after: float = 10) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = lines(samples)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 15), sharex=True)
    for ax, (panel, named) in zip(axes, panels.items(), strict=True):
        for name, pts in named.items():
            pts = [(x, y) for x, y in pts if y is not None]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], label=name, linewidth=1.2)
        for k in kills:
            ax.axvline(k, color="grey", linestyle=":", linewidth=0.8)
        ax.axvspan(0, after, color="0.93")  # before ``after``: not in the slopes
        ax.set_title(panel, fontsize=10)
        ax.legend(fontsize=7, loc="upper left", ncol=3)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("minutes (dotted: leader kills; shaded: before --slopes-after, left "
                        "out of the slopes)")
    fig.tight_layout()
    fig.savefig(path, dpi=60)
    plt.close(fig)


def report(samples: list[dict], kills: list[float], plot_path: Path | None,
           after: float = 10) -> dict:
    sl = slopes(samples, after)
    for panel, named in sl.items():
        print(panel)
        for name, v in named.items():
            vals = [y for x, y in lines(samples)[panel][name] if y is not None and x >= after]
            span = f"{min(vals):.1f}..{max(vals):.1f}" if vals else "-"
            print(f"  {name:32s} slope {v if v is None else f'{v:+.2f}'}/h   "
                  f"(after minute {after:g}: {span})")
    for start, low in lows(samples, after):
        print(f"  the whole home's low in minutes {start:g}-{start + LOW_WINDOW:g}: "
              f"{low['home_mb']:.1f} MB (minute {low['minute']:g})")
    if plot_path is not None:
        plot(samples, kills, plot_path, after)
        print(f"plot: {plot_path} ({plot_path.stat().st_size // 1024} KB)")
    return sl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--rate", type=float, default=5000)
    ap.add_argument("--kill-every", type=float, default=600)
    ap.add_argument("--first-kill", type=float, default=300)
    ap.add_argument("--every", type=float, default=60, help="seconds between samples")
    ap.add_argument("--settle", type=float, default=30)
    ap.add_argument("--plot", type=Path, default=Path("bench/soak.png"))
    ap.add_argument("--replot", type=Path, help="a samples.jsonl to plot again")
    ap.add_argument("--slopes-after", type=float, default=10,
                    help="the slopes and ranges count samples from this minute on (with "
                         "retention in minutes, past the vacuum's hour: 70)")
    ap.add_argument("--memory-log", type=float, default=60,
                    help="seconds between the service's memory lines in its log "
                         "(kafka_audit/app/memstats.py; 0: none)")
    args = ap.parse_args()
    if args.replot:
        samples = [json.loads(x) for x in args.replot.read_text().splitlines() if x.strip()]
        meta = json.loads((args.replot.parent / "kills.json").read_text())
        report(samples, meta, args.plot, args.slopes_after)
        return

    base = bench_settings(args.settle)
    base = base.model_copy(update={"service": base.service.model_copy(
        update={"memory_log_seconds": args.memory_log})})
    home = base.home_dir / f"soak-{time.strftime('%m%d-%H%M%S')}"
    settings = base.model_copy(update={"home": home})
    home.mkdir(parents=True, exist_ok=True)
    cluster = fresh_cluster(base)
    topic = f"soak-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=3, replication=3)
    api = f"http://{settings.api.host}:{settings.api.port}"
    say(f"topic {topic}, home {home}")
    samples: list[dict] = []
    kills: list[float] = []
    out = home / "samples.jsonl"
    load = Load(settings, topic, args.rate).start()
    try:
        with Component(settings, "run") as service:
            t0 = time.monotonic()
            stop = threading.Event()

            def killer() -> None:
                n = 0
                while not stop.is_set():
                    at = args.first_kill + n * args.kill_every
                    if at > args.minutes * 60 - 60 or stop.wait(max(0.0, at - (
                            time.monotonic() - t0))):
                        return
                    try:
                        kill_leader(cluster, topic)
                        kills.append(round((time.monotonic() - t0) / 60, 2))
                        (home / "kills.json").write_text(json.dumps(kills))
                    except Exception as exc:  # noqa: BLE001 - reported, the soak goes on
                        say(f"kill {n} failed: {exc}")
                    n += 1

            threading.Thread(target=killer, daemon=True).start()
            seen = 0
            while (time.monotonic() - t0) / 60 < args.minutes:
                time.sleep(max(0.0, args.every * (len(samples) + 1) - (time.monotonic() - t0)))
                s, seen = sample((time.monotonic() - t0) / 60, service, cluster, settings, api,
                                 topic, seen)
                samples.append(s)
                with out.open("a") as f:
                    f.write(json.dumps(s) + "\n")
                say(f"minute {s['minute']:.0f}: passes {s['passes']} median "
                    f"{s['pass_median_s']}s; summary {s['summary_ms']} ms; pending "
                    f"{s['pending']} lost {s['lost']} lag {s['lag_offsets']}; RSS "
                    f"{sum(s['rss_mb'].values()):.0f} MB")
            stop.set()
            load.stop()
            say(f"producer stopped: {load.producer.acked} acked")
            truth = set(missing_from_log(settings.cluster.bootstrap, topic, load.producer.record,
                                         load.producer.producer_id, load.producer.run_id))
            say(f"ground truth: {len(truth)} acked writes missing from the log")
            found: set = set()

            def settled() -> bool:
                nonlocal found
                found = lost_over_rest(api, topic)
                _, body = timed_summary(api, topic)
                return found >= truth and body is not None and body["pending"] == 0

            try:
                wait_until(settled, 900, "every write judged", every=5)
            except Exception as exc:  # noqa: BLE001 - reported below
                say(str(exc))
            _, final = timed_summary(api, topic)  # with retention on, rollups added in
    finally:
        cluster_down(cluster)
    findings = read_table(settings.table_path("findings"), "findings").to_pylist()
    lat = loss_latency(findings, topic)
    result = {"topic": topic, "acked": load.producer.acked, "lost_truth": len(truth),
              "lost_rest": len(found), "equal": found == truth, "kills": kills,
              "summary": final,
              "per_finding_latency": lat.__dict__ if lat else None}
    (home / "result.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    sl = report(samples, kills, args.plot, args.slopes_after)
    (home / "slopes.json").write_text(json.dumps(sl, indent=1))


if __name__ == "__main__":
    main()
