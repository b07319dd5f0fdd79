"""Hand-made plugin spool folders (``producers/plugin/kaudit.c``'s layout), for the shipper's
unit tests: what the plugin would leave, written from Python, so that each crash point and
each state of a run (open, closed, sealed) can be set up exactly."""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

import numpy as np

from kafka_audit.producers.native import spool_folder_name
from kafka_audit.producers.shipper import FORMS, SEGMENT_HEADER

__all__ = ["run", "make_folder", "write_segment", "hold_lock"]


def run(seq: int, count: int, offset: int = -1, partition: int = 0, err: int = 0,
        topic: int = 0, closed: bool = True, ack_us: int = 1_700_000_000_000_000,
        broker: int = -1, leader_epoch: int = -1) -> tuple:
    """One run record: ``count`` reports from ``seq`` (at ``offset``..), acknowledged by
    ``broker`` at ``leader_epoch`` (-1: not known)."""
    return (1, 1 if closed else 0, topic, partition, err, seq, offset, count, ack_us,
            ack_us + count, ack_us - 1000, broker, leader_epoch, 0)


def write_segment(folder: Path, segno: int, runs: list[tuple], sealed: bool = False,
                  capacity: int = 64, magic: bytes = b"KAUDSEG2") -> Path:
    """A segment file; ``magic`` ``KAUDSEG1``: the first form (64-byte records, no broker
    or epoch: what plugins before them left)."""
    form = FORMS[magic]
    header = np.zeros(1, SEGMENT_HEADER)
    header["magic"] = magic
    header["rec_size"] = form.itemsize
    header["capacity"] = capacity
    header["segno"] = segno
    header["used"] = len(runs)
    header["sealed"] = int(sealed)
    body = np.zeros(capacity, form)
    if runs:
        body[:len(runs)] = np.array([r[:len(form.names)] for r in runs], form)
    path = Path(folder) / f"{segno:08d}.seg"
    path.write_bytes(header.tobytes() + body.tobytes())
    return path


def make_folder(root: Path, producer: str = "p", run_id: str = "r", topics=("t",),
                acks: str = "1", segments: list[tuple[list[tuple], bool]] = (),
                sent: int = 0) -> Path:
    """A spool folder with ``meta``, ``topics``, ``state`` and the given segments
    ((runs, sealed) each, numbered from 1)."""
    folder = Path(root) / spool_folder_name(producer, run_id)
    folder.mkdir(parents=True)
    (folder / "meta").write_text(
        f"format=1\nplugin=1\nstamp_version=2\nlibrdkafka=2.16.0\n"
        f"producer_id_hex={producer.encode().hex()}\nrun_id_hex={run_id.encode().hex()}\n"
        f"acks={acks}\nidempotence=false\nretries=2\nmax_in_flight=5\n")
    (folder / "topics").write_text("".join(f"{i}\t{t}\n" for i, t in enumerate(topics)))
    state = bytearray(4096)
    state[:8] = b"KAUDSTA1"
    struct.pack_into("<Q", state, 16, sent)
    (folder / "state").write_bytes(bytes(state))
    for i, (runs, sealed) in enumerate(segments, start=1):
        write_segment(folder, i, runs, sealed)
    return folder


class hold_lock:
    """Hold a folder's ``.lock`` as a live producer would (a context manager)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def __enter__(self) -> hold_lock:
        self.fd = os.open(self.folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
