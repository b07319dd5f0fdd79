"""Who maps a process's anonymous memory: its mmap/munmap/mremap calls, recorded by perf with
their stacks, summed by the allocator each stack names.

Record while the process runs (root; the calls are rare, but each copies 8 kB of stack,
which slowed the service's passes in the 2026-11-27 soak: record minutes, not the hour),
then sum::

    perf record -e syscalls:sys_enter_mmap -e syscalls:sys_exit_mmap \\
        -e syscalls:sys_enter_munmap -e syscalls:sys_enter_mremap -e syscalls:sys_exit_mremap \\
        --call-graph dwarf,8192 -p <pid> -o var/mm.data      # Ctrl-C to stop
    .venv/bin/python bench/mmap_trace.py var/mm.data [--left var/mm-left.json]

Per allocator: MB mapped (and in how many calls), unmapped, net. A region unmapped that was
mapped before the recording is counted apart. ``--left`` writes the regions still mapped at
the end (address, length, allocator), to set beside ``bench/smaps.py``'s samples.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections import Counter

#: (allocator, a frame naming it), the first match in a stack wins
ALLOCATORS = (("pymalloc", "_PyObject_ArenaMmap"), ("pthread stack", "allocate_stack"),
              ("glibc malloc (arena heap)", "new_heap"), ("glibc malloc (mmap chunk)", "sysmalloc"),
              ("glibc realloc", "mremap_chunk"), ("jemalloc (deltalake)", "_internal.abi3.so"),
              ("arrow", "libarrow"), ("jvm", "libjvm"), ("numpy", "numpy"),
              ("librdkafka", "librdkafka"), ("mimalloc", "mi_"), ("dlopen", "_dl_map"))
HEAD = re.compile(r"\s*(\d+)\s+(\S+):\s*(.*)")


def allocator(stack: list[str]) -> str:
    text = "\n".join(stack)
    for name, frame in ALLOCATORS:
        if frame in text:
            return name
    frames = [f for f in stack if "libc.so" not in f and "mmap" not in f]
    return "other: " + (frames[0].split(None, 1)[-1][:80] if frames else "?")


def _hex(trace: str, field: str) -> int:
    return int(re.search(field + r": (0x[0-9a-f]+)", trace).group(1), 16)


def _returned(trace: str) -> int | None:
    last = trace.split()[-1] if trace.split() else ""
    return int(last, 16) if last.startswith("0x") else None


def summed(events: list[str]) -> tuple[dict[str, Counter], dict[int, tuple[int, str]]]:
    """Per allocator: bytes mapped, calls, bytes unmapped; and the regions left mapped."""
    pending: dict[str, tuple[int, str]] = {}
    regions: dict[int, tuple[int, str]] = {}
    sums: dict[str, Counter] = {}

    def add(cls: str, **n: int) -> None:
        sums.setdefault(cls, Counter()).update(n)

    def unmap(addr: int, length: int, stack: list[str]) -> str:
        cls = regions.pop(addr, (0, ""))[1] or f"mapped before ({allocator(stack)})"
        add(cls, unmapped=length)
        return cls

    for ev in events:
        lines = [x.strip() for x in ev.strip().split("\n") if x.strip()]
        m = HEAD.match(lines[0]) if lines else None
        if not m:
            continue
        tid, event, trace = m.groups()
        stack = lines[1:]
        if event == "syscalls:sys_enter_mmap":
            anonymous = _hex(trace, "fd") == 0xffffffff
            pending[tid] = (_hex(trace, "len"), allocator(stack) if anonymous else "")
        elif event == "syscalls:sys_enter_mremap":
            cls = unmap(_hex(trace, "addr"), _hex(trace, "old_len"), stack)
            pending[tid] = (_hex(trace, "new_len"), cls)
        elif event == "syscalls:sys_enter_munmap":
            unmap(_hex(trace, "addr"), _hex(trace, "len"), stack)
        elif event in ("syscalls:sys_exit_mmap", "syscalls:sys_exit_mremap") and tid in pending:
            length, cls = pending.pop(tid)
            addr = _returned(trace)
            if cls and addr is not None:  # anonymous, and not an error
                regions[addr] = (length, cls)
                add(cls, mapped=length, calls=1)
    return sums, regions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", help="perf.data (or its `perf script` text, ending in .txt)")
    ap.add_argument("--left", help="write the regions still mapped at the end here (JSON)")
    args = ap.parse_args()
    if args.data.endswith(".txt"):
        with open(args.data) as f:
            text = f.read()
    else:
        text = subprocess.run(["perf", "script", "-i", args.data, "-F",
                               "tid,event,trace,ip,sym,dso"], capture_output=True, text=True,
                              check=True).stdout
    sums, regions = summed(text.split("\n\n"))
    mb = 2 ** 20
    for cls, n in sorted(sums.items(), key=lambda kv: -abs(kv[1]["mapped"] - kv[1]["unmapped"])):
        print(f"{(n['mapped'] - n['unmapped']) / mb:+9.1f} MB net ({n['mapped'] / mb:8.1f} "
              f"mapped in {n['calls']} calls, {n['unmapped'] / mb:8.1f} unmapped)  {cls}")
    if args.left:
        with open(args.left, "w") as f:
            json.dump([[a, n, c] for a, (n, c) in regions.items()], f)


if __name__ == "__main__":
    main()
