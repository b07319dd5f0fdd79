"""Where each kill's loss latency went, from a ``bench/latency.py`` home.

    .venv/bin/python bench/latency_log.py var/latency-s10-<id>
    .venv/bin/python bench/latency_log.py var/latency-s10-s3-<id> --s3 var/latency-s3-<id>

A run whose warehouse was in a bucket (``--where s3``) is read from the bucket: ``--s3``
names the S3 server's folder (``var/latency-s3-<id>``), read as plain files (s3proxy's
filesystem store keeps each object as one).

Per kill (``latency.json``), in seconds after it: the partition's new leader (the first
``leader_change`` in ``cluster_events``), the first stream read past its lost writes
(``consumed``: the read that carries the frontier beyond them), the producer's first ack
after the kill (``acks``: a write the new leader took) and the first stream read of it,
when they settled (the read past plus ``audit.settle_seconds``), when the last of them
was written as a finding (``detected_at``) and answered over REST (the bench's own
poll); then the phases of the pass that wrote them (its line in ``run.log``). A kill's
lost writes are the loss findings acknowledged from 15 s before it to 1 s after it.
Last, the steady read lag for comparison: per stream read more than 30 s from every
kill, from the ack of its first offset to its read.
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.compute as pc

from kafka_audit.latency import nearest_rank
from kafka_audit.schemas.verdicts import LOSSES
from kafka_audit.store import read_table


def _warehouse(home: Path, s3_folder: Path | None):
    """A function from a table's name to its path in the run's warehouse. A bucket's tables
    are read from the S3 server's folder, where s3proxy's filesystem store keeps each
    object as a plain file (``data/<bucket>/<key>``)."""
    uri = json.loads((home / "latency.json").read_text()).get("warehouse")
    if uri is None or "://" not in uri:
        return lambda name: str(home / "warehouse" / name)
    if s3_folder is None:
        raise SystemExit(f"the run's warehouse is {uri}: name the S3 server's folder with "
                         "--s3 var/latency-s3-<id>")
    bucket_and_prefix = urlsplit(uri)
    base = s3_folder / "data" / bucket_and_prefix.netloc / bucket_and_prefix.path.lstrip("/")
    return lambda name: str(base / name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("home", type=Path, help="a bench/latency.py home (var/latency-s10-...)")
    ap.add_argument("--s3", type=Path, help="the S3 server's folder of a --where s3 run "
                    "(var/latency-s3-...)")
    args = ap.parse_args()
    home = args.home
    result = json.loads((home / "latency.json").read_text())
    table = _warehouse(home, args.s3)
    events = read_table(table("cluster_events"), "cluster_events").filter(
        pc.equal(pc.field("kind"), "leader_change")).sort_by("event_time").to_pylist()
    findings = [f for f in read_table(table("findings"), "findings").to_pylist()
                if f["kind"] in LOSSES]
    stream = read_table(table("consumed"), "consumed",
                        ["partition", "offset", "count", "read_time", "source"])
    stream = stream.filter(pc.equal(stream["source"], "stream")).to_pylist()
    acks = read_table(table("acks"), "acks", ["partition", "offset", "ack_time"])
    passes = {int(m.group(1)): (m.group(2), m.group(3)) for m in re.finditer(
        r"audit pass (\d+) at (\S+): .*?(\[[^\]]*\])", (home / "run.log").read_text(), re.M)}
    settle = timedelta(seconds=result["settle"])
    for kill in result["kills"]:
        at = datetime.fromtimestamp(kill["killed_at"], UTC)
        mine = [f for f in findings
                if at - timedelta(seconds=15) <= f["ack_time"] <= at + timedelta(seconds=1)]
        if not mine:
            print(f"kill {at:%H:%M:%S}: no loss found")
            continue
        p = mine[0]["partition"]
        end = max(f["offset"] + f["count"] for f in mine)
        elected = next((e["event_time"] for e in events
                        if e["event_time"] > at and e["partition"] == p), None)
        read = min((r["read_time"] for r in stream if r["partition"] == p
                    and r["read_time"] > at and r["offset"] + r["count"] > end), default=None)
        first_ack, first_read = _first_ack_read(acks, stream, p, at)
        found = max(mine, key=lambda f: f["detected_at"])
        when, phases = passes.get(found["pass_id"], ("?", ""))
        both = " (leader and active controller)" if kill.get("controller") else ""
        print(f"kill {at:%H:%M:%S} p{p}{both}: elected {_after(at, elected)}, read past "
              f"{_after(at, read)}, first ack {_after(at, first_ack)} read "
              f"{_after(at, first_read)}, settled {_after(at, read + settle if read else None)}, "
              f"detected {_after(at, found['detected_at'])}, answered "
              f"+{kill['answered_after']}; "
              f"pass {found['pass_id']} began {when} {phases}")
    kills = [datetime.fromtimestamp(k["killed_at"], UTC) for k in result["kills"]]
    lags = _steady_lags(acks, stream, kills)
    if lags:
        print(f"steady read lag, ack to stream read ({len(lags)} reads more than 30 s from "
              f"every kill): p50 {nearest_rank(lags, 0.5):.1f}s p90 "
              f"{nearest_rank(lags, 0.9):.1f}s max {max(lags):.1f}s")


def _first_ack_read(acks, stream: list[dict], p: int, at: datetime):
    """The first ack of partition ``p`` more than 1 s after the kill at ``at`` (a write the
    new leader took) and the first stream read of its offset."""
    later = acks.filter(pc.and_(pc.equal(acks["partition"], p),
                                pc.greater(acks["ack_time"], at + timedelta(seconds=1))))
    if later.num_rows == 0:
        return None, None
    first = later.sort_by("ack_time").slice(0, 1).to_pylist()[0]
    read = min((r["read_time"] for r in stream if r["partition"] == p and r["read_time"] > at
                and r["offset"] <= first["offset"] < r["offset"] + r["count"]), default=None)
    return first["ack_time"], read


def _steady_lags(acks, stream: list[dict], kills: list[datetime]) -> list[float]:
    """Seconds from ack to stream read, per stream read whose first offset was
    acknowledged more than 30 s from every kill."""
    by_partition: dict[int, tuple[list[int], list]] = {}
    for a in acks.sort_by([("partition", "ascending"), ("offset", "ascending")]).to_pylist():
        offs, times = by_partition.setdefault(a["partition"], ([], []))
        offs.append(a["offset"])
        times.append(a["ack_time"])
    lags = []
    for r in stream:
        offs, times = by_partition.get(r["partition"], ([], []))
        i = bisect.bisect_right(offs, r["offset"]) - 1  # the ack range holding its first offset
        if i < 0:
            continue
        t = times[i]
        if all(abs((t - k).total_seconds()) > 30 for k in kills):
            lags.append((r["read_time"] - t).total_seconds())
    return lags


def _after(at: datetime, t: datetime | None) -> str:
    return f"+{(t - at).total_seconds():.1f}" if t is not None else "-"


if __name__ == "__main__":
    main()
