"""The metadata log's Java tail (``jobs/watcher/MetadataTail.java``) on a copy of a real
node's ``__cluster_metadata`` folder: every record once, in offset order, decoded by
Kafka's serde, the folder's files untouched (it opens them read-only and never trims)."""

import hashlib
import json
import os
import shutil
import struct
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from kafka_audit.jobs.watcher.metadata_log import MetadataFold, tail_command
from kafka_audit.scenarios.cluster import wait_until


def digests(folder) -> dict:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in folder.iterdir()}


def test_the_tail_reads_every_record_once_and_writes_nothing(cluster, tmp_path):
    source = cluster.node_dir(1) / "meta" / "__cluster_metadata-0"
    copy = tmp_path / "__cluster_metadata-0"
    shutil.copytree(source, copy)
    before = digests(copy)
    proc = subprocess.Popen(tail_command([copy, copy]), stdout=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stdout:  # read until the first look says where it stands
            rec = json.loads(line)
            if rec["type"] == "_AT":
                break
            lines.append(rec)
    finally:
        proc.terminate()
        proc.wait(10)
    assert digests(copy) == before
    offsets = [r["offset"] for r in lines]
    # two copies of one folder: each offset still once, in order, none left out
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) and offsets[0] == 0
    assert rec["next"] == offsets[-1] + 1
    types = {r["type"] for r in lines}
    assert {"TOPIC_RECORD", "PARTITION_RECORD", "REGISTER_BROKER_RECORD",
            "LEADER_CHANGE"} <= types
    fold = MetadataFold()
    rows = [row for r in lines for row in fold.apply(r)]
    # every topic the cluster has was created in this log; each is named in the rows
    named = {r["topic"] for r in rows if r["kind"] == "first_seen"}
    assert {p.topic for p in cluster.partitions() if not p.topic.startswith("_")} <= named


# A record batch's header (Kafka's format v2): base offset (8 bytes), length of the rest
# (4), the Raft epoch that wrote it (4), magic, CRC, attributes, last offset delta. The
# CRC covers the bytes from the attributes on, so a batch moves to another offset and
# epoch by rewriting the first 16 bytes: real batches forge a divergent tail.
HEADER = struct.Struct(">qii")


@dataclass(frozen=True)
class Batch:
    raw: bytes
    base: int
    count: int  # offsets it spans

    def at(self, base: int, epoch: int) -> bytes:
        return HEADER.pack(base, len(self.raw) - 12, epoch) + self.raw[16:]


def batches(segment: Path) -> list[Batch]:
    data, out, pos = segment.read_bytes(), [], 0
    while pos + 27 <= len(data):
        base, length, _ = HEADER.unpack_from(data, pos)
        last_delta = struct.unpack_from(">i", data, pos + 23)[0]
        out.append(Batch(data[pos:pos + 12 + length], base, last_delta + 1))
        pos += 12 + length
    return out


def forged(blocks: list[Batch], start: int, epoch: int) -> bytes:
    """``blocks`` one after another from offset ``start``, written in ``epoch``."""
    out, at = b"", start
    for b in blocks:
        out += b.at(at, epoch)
        at += b.count
    return out


class Tail:
    """The Java tail of ``dirs``, its lines gathered by a thread."""

    def __init__(self, dirs: list[Path]) -> None:
        self.proc = subprocess.Popen(tail_command(dirs), stdout=subprocess.PIPE, text=True)
        self.lines: list[dict] = []
        self.at, self.looks = -1, 0  # the latest look's next offset; looks so far
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            rec = json.loads(line)
            if rec["type"] == "_AT":
                self.at, self.looks = rec["next"], self.looks + 1
            else:
                self.lines.append(rec)

    def looks_past(self, n: int) -> None:
        """Waits for two whole looks begun after this call, the last at or past ``n``."""
        k = self.looks
        wait_until(lambda: self.looks >= k + 2 and self.at >= n, 60,
                   f"the tail to look past offset {n}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def the_same(line: dict, original: dict) -> bool:
    return line["type"] == original["type"] and line.get("data") == original.get("data")


def test_a_tail_no_quorum_wrote_is_never_read_and_a_rewritten_tail_is(cluster, tmp_path):
    """A controller killed while appending leaves records the quorum never committed in
    its own file; the next controller writes others at those offsets in a later epoch, and
    the killed node truncates its tail when it returns. The tail prints only what a
    majority of the nodes hold in one epoch, and reads a node's rewritten tail again."""
    source = cluster.node_dir(1) / "meta" / "__cluster_metadata-0"
    segments = sorted(source.glob("*.log"))
    assert [s.name for s in segments] == ["00000000000000000000.log"]
    log = batches(segments[0])
    # the real lines of every offset, and the batches holding topic records (the tail
    # forged from them) and holding only no-op records (the tail no quorum wrote)
    real = Tail([source])
    try:
        wait_until(lambda: real.at >= log[-1].base + log[-1].count, 60, "the real log read")
    finally:
        real.stop()
    by_offset = {r["offset"]: r for r in real.lines}
    kinds = [{by_offset[o]["type"] for o in range(b.base, b.base + b.count)} for b in log]
    topical = [b for b, k in zip(log, kinds, strict=True) if "PARTITION_RECORD" in k][:3]
    noops = [b for b, k in zip(log, kinds, strict=True) if k == {"NO_OP_RECORD"}][:2]
    assert topical and noops
    prefix = log[:len(log) // 2]
    n = prefix[-1].base + prefix[-1].count
    epoch = max(HEADER.unpack_from(b.raw)[2] for b in prefix)
    head = b"".join(b.raw for b in prefix)
    lost, kept = forged(noops, n, epoch), forged(topical, n, epoch + 1)
    assert len(kept) > len(lost)  # the rewritten tail outgrows the one it replaced
    written = [by_offset[o] for b in topical for o in range(b.base, b.base + b.count)]

    folders = [tmp_path / f"node{i}" / "__cluster_metadata-0" for i in (1, 2, 3)]
    for f in folders:
        f.mkdir(parents=True)
        (f / "00000000000000000000.log").write_bytes(head)
    killed, down, new = (f / "00000000000000000000.log" for f in folders)
    with killed.open("ab") as w:
        w.write(lost)  # the killed controller's own tail, listed first
    tail = Tail(folders)
    try:
        tail.looks_past(n)
        assert [r["offset"] for r in tail.lines] == list(range(n))
        with new.open("ab") as w:
            w.write(kept)  # the next controller's records at those offsets: one node of 3
        tail.looks_past(n)
        assert tail.at == n, "a record one node of three holds is not committed"
        # the killed node returns: its tail truncated and the quorum's written there, the
        # file longer than before by the next look (the tail must see it changed)
        swap = tmp_path / "swap.log"
        swap.write_bytes(head + kept)
        os.replace(swap, killed)
        end = n + len(written)
        wait_until(lambda: tail.at >= end, 60, "the rewritten tail read")
        tail.looks_past(end)
    finally:
        tail.stop()
    assert [r["offset"] for r in tail.lines] == list(range(end))
    assert all(the_same(a, b) for a, b in zip(tail.lines[n:], written, strict=True))
    assert all(the_same(a, by_offset[a["offset"]]) for a in tail.lines[:n])
    assert down.stat().st_size == len(head)  # the third node stayed down throughout
