"""The message stamp: one Kafka record header, ``kaudit``, binary.

Layout (big-endian)::

    byte 0      version (1)
    bytes 1-8   sequence (unsigned 64)
    bytes 9-12  CRC32 of the value (unsigned 32)
    byte 13     length P of the producer id, then P bytes UTF-8
    next byte   length R of the run id, then R bytes UTF-8

One header instead of four keeps the producer's per-message cost low: the
id part is built once per producer and only 12 bytes are packed per record.
The Spark consume job parses the same layout with SQL functions
(``jobs/transforms.py``); ``parse_stamp`` is the reference parser.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

__all__ = ["HEADER", "VERSION", "SEQ_CRC", "Stamp", "StampError", "stamp_prefix", "build_stamp",
           "parse_stamp", "crc32"]

HEADER = "kaudit"
VERSION = 1
SEQ_CRC = struct.Struct(">QI")  # bytes 1-12 of a stamp: sequence, CRC32
crc32 = zlib.crc32


class StampError(ValueError):
    """Raised when a header value is not a well-formed stamp."""


@dataclass(frozen=True)
class Stamp:
    producer_id: str
    run_id: str
    seq: int
    checksum: int


def _id_bytes(value: str, what: str) -> bytes:
    raw = value.encode()
    if not 0 < len(raw) < 256:
        raise StampError(f"{what} must be 1-255 bytes of UTF-8, got {len(raw)}")
    return bytes([len(raw)]) + raw


def stamp_prefix(producer_id: str, run_id: str) -> tuple[bytes, bytes]:
    """The constant parts around the per-record 12 bytes: (version byte, id tail)."""
    return bytes([VERSION]), _id_bytes(producer_id, "producer id") + _id_bytes(run_id, "run id")


def build_stamp(producer_id: str, run_id: str, seq: int, checksum: int) -> bytes:
    head, tail = stamp_prefix(producer_id, run_id)
    return head + SEQ_CRC.pack(seq, checksum) + tail


def parse_stamp(value: bytes | None) -> Stamp:
    if value is None or len(value) < 15:
        raise StampError("stamp too short")
    if value[0] != VERSION:
        raise StampError(f"unknown stamp version {value[0]}")
    seq, checksum = SEQ_CRC.unpack_from(value, 1)
    p_len = value[13]
    p_end = 14 + p_len
    if p_len == 0 or len(value) < p_end + 1:
        raise StampError("truncated producer id")
    r_len = value[p_end]
    if r_len == 0 or len(value) != p_end + 1 + r_len:
        raise StampError("truncated or overlong run id")
    try:
        producer = value[14:p_end].decode()
        run = value[p_end + 1:].decode()
    except UnicodeDecodeError as exc:
        raise StampError(f"ids are not UTF-8: {exc}") from None
    return Stamp(producer, run, seq, checksum)
