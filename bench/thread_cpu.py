"""Where a benchmark's CPU goes, thread by thread: a sampler to run beside it, and the sum
of a time window of its samples.

``sample OUT [--every 1]`` appends, every ``--every`` seconds until stopped, one JSON line
to OUT: the time and the CPU seconds so far of every thread of every process (its command
line's start, the thread's name). ``window OUT START END`` prints the CPU each process
and each kind of thread (digits in names folded: ``Executor task launch worker-3`` and
``-7`` are one kind) spent between the samples nearest those two times (``HH:MM:SS``
today, or seconds since the epoch). A thread born and gone between two samples is not
seen. Run::

    .venv/bin/python bench/thread_cpu.py sample /tmp/cpu.jsonl --every 1 &
    KAFKA_AUDIT_HOME=var .venv/bin/python bench/catchup.py --outage 5 --steady 2
    .venv/bin/python bench/thread_cpu.py window /tmp/cpu.jsonl 08:31:50 08:32:47
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from steady import stat_cpu_s  # noqa: E402 - shared


def snapshot() -> dict[str, list]:
    """``pid/tid`` -> [command line's start, thread name, CPU seconds] of every thread that
    has used any."""
    out: dict[str, list] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:4]
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        command = b" ".join(argv).decode(errors="replace")[-120:]
        for tid in tids:
            name, seconds = stat_cpu_s(f"/proc/{pid}/task/{tid}/stat")
            if seconds:
                out[f"{pid}/{tid}"] = [command, name, seconds]
    return out


def sample(path: Path, every: float) -> None:
    with path.open("a") as f:
        while True:
            f.write(json.dumps({"t": time.time(), "threads": snapshot()}) + "\n")
            f.flush()
            time.sleep(every)


def _when(text: str) -> float:
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    hms = datetime.strptime(text, "%H:%M:%S").time()
    return datetime.combine(datetime.now().date(), hms).timestamp()


def window(path: Path, start: float, end: float, top: int = 30) -> None:
    first = last = None
    for line in path.open():
        s = json.loads(line)
        if s["t"] <= start or first is None:
            first = s
        if s["t"] <= end:
            last = s
    if first is None or last is None or last["t"] <= first["t"]:
        sys.exit("no two samples in that window")
    by_process: dict[str, float] = defaultdict(float)
    by_thread: dict[tuple[str, str], float] = defaultdict(float)
    for key, (command, name, seconds) in last["threads"].items():
        spent = seconds - first["threads"].get(key, [None, None, 0.0])[2]
        if spent <= 0:
            continue
        process = f"{key.split('/')[0]} {command[-60:]}"
        by_process[process] += spent
        by_thread[(process, re.sub(r"\d+", "N", name))] += spent
    print(f"window {last['t'] - first['t']:.1f} s")
    for process, spent in sorted(by_process.items(), key=lambda x: -x[1])[:top]:
        print(f"{spent:8.1f}  {process}")
    print("--- threads")
    for (process, name), spent in sorted(by_thread.items(), key=lambda x: -x[1])[:top]:
        print(f"{spent:8.1f}  {process[:40]:40} {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("sample")
    s.add_argument("out", type=Path)
    s.add_argument("--every", type=float, default=1.0)
    w = sub.add_parser("window")
    w.add_argument("out", type=Path)
    w.add_argument("start")
    w.add_argument("end")
    args = ap.parse_args()
    if args.what == "sample":
        sample(args.out, args.every)
    else:
        window(args.out, _when(args.start), _when(args.end))


if __name__ == "__main__":
    main()
