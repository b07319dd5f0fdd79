"""The message stamp: one Kafka record header, ``kaudit``, binary.

Two layouts, told apart by the first byte (big-endian numbers)::

    version 1 (the Python producer)          version 2 (the librdkafka plugin)
    byte 0      1                            byte 0      2
    bytes 1-8   sequence                     bytes 1-8   sequence
    bytes 9-12  CRC32 of the value           bytes 9-16  XXH64 of the value, seed 42
    byte 13     length P, then P bytes       byte 17     length P, then P bytes
                of the producer id (UTF-8)               of the producer id (UTF-8)
    next byte   length R, then R bytes       next byte   length R, then R bytes
                of the run id (UTF-8)                    of the run id (UTF-8)

The sequence is unsigned 64 on the wire, below 2^63 to be well formed. One
header instead of four keeps the producer's per-message cost low: the id part
is built once per producer and only the sequence and checksum are packed per
record. Version 2 exists for the native plugin (``producers/plugin/``): XXH64
runs at several GB/s on any CPU (zlib's CRC32 cost about 1 µs a KiB), and it is
the one fast checksum Spark SQL has as a function (``xxhash64``: XXH64 with seed
42), so the consume job's SQL definition computes it like the JVM fold does.
Version 1 stays readable (tables and topics written before it) and is what the
pure-Python producer still writes.

The stamp rule
--------------

Every record has exactly one stamp status, decided by its headers alone:

* **no stamp**: no header has the key ``kaudit`` (no headers at all, or
  other headers only); ``stamp_error`` in ``consumed``: ``"no kaudit header"``.
  A key is compared as the bytes the log holds: one that is not valid UTF-8 is
  never ``kaudit`` (Kafka allows any bytes; the Java client, so Spark, decodes
  such a key with replacement characters, and the re-read reads its bytes);
* **malformed**: a ``kaudit`` header exists but the record holds more than one
  ``kaudit`` header; or its value is null or empty; or shorter than its
  version's fixed part plus two id lengths (15 bytes for version 1, 19 for
  version 2; an unknown version byte is malformed whatever its length); or the
  producer id or the run id has length 0; or the lengths do not add up to the
  value's length exactly (15 + P + R, or 19 + P + R: truncated or overlong);
  or an id is not valid UTF-8 (strictly: no surrogates, no overlong forms,
  nothing past U+10FFFF); or the sequence is 2^63 or more (it must fit a
  signed 64-bit column); ``stamp_error``: ``"malformed stamp"``;
* **forged** (only while a stamp key is configured, ``stamp.key_file``): a
  well-formed stamp without exactly one ``kaudit-mac`` header whose value is the
  stamp's MAC (:class:`StampMac`); ``stamp_error``: ``"forged stamp"``. Such a
  record is no producer's: it never confirms a write;
* **stamped**: a well-formed :class:`Stamp` (producer id, run id, seq, checksum,
  version), with its MAC when a key is configured.

Whether a stamp's checksum matches is decided apart from the rule: CRC32 (version
1) or XXH64 with seed 42 (version 2) of the record's value, a null value counting
as empty bytes (:func:`checksum_ok`).

The stamp MAC
-------------

Anyone who can write to an audited topic can write a well-formed stamp. With a
key configured (the same file for producers and auditor: 16-4096 bytes, not
world-readable), each stamp travels with a second header, ``kaudit-mac``: the
first 16 bytes of HMAC-SHA256 (RFC 2104) under that key of the stamp header's
value. The stamp holds the producer's ids, the seq and the value's digest (its
checksum), so the MAC binds all four: without the key no one can make a stamp
the auditor takes. What it cannot stop is the copy of a stamp someone has read
(with its record's value, or another value made to match a checksum that is no
cryptographic hash): a copy is written after the write it copies, at an offset
other than the one that write's ack names. The MAC covers the stamp, not the
whole value: its cost
stays the same whatever the record's size. Without a key, ``kaudit-mac``
headers are ignored. Readers: the
Python rule below, the consume job's SQL definition (``sha2`` over the key's
inner and outer blocks, :attr:`StampMac.blocks`) and its JVM fold
(``javax.crypto.Mac``); writers: the Python producer and the plugin
(OpenSSL's libcrypto).

:func:`stamp_of_headers` is the definition, over a record's header list
(:func:`parse_stamp` over one ``kaudit`` value). Every reader follows it: the
Spark consume job with SQL functions (``parse_kafka_records`` in
``jobs/consume/transforms.py``) and in its JVM fold (``jobs/consume/ReadRuns.java``), the
direct re-reads (``jobs/audit/reread.py``) and the ground truth
(``scenarios/groundtruth.py``) through :func:`stamp_of_headers` itself; the
plugin writes it (``producers/plugin/kaudit.c``).
``tests/support/stamp_corpus.py`` holds them all equal on one corpus of good
and bad header lists of both versions.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

__all__ = ["HEADER", "HEADER_BYTES", "VERSION", "VERSION_XXH64", "VERSIONS", "SEQ_CRC",
           "SEQ_XXH64", "MIN_LENGTH", "MIN_LENGTHS", "SEQ_LIMIT", "XXH64_SEED", "NO_STAMP",
           "MALFORMED", "FORGED", "MAC_HEADER", "MAC_LENGTH", "KEY_LENGTHS", "Stamp",
           "StampError", "ForgedStamp", "StampMac", "stamp_prefix", "build_stamp",
           "parse_stamp", "stamp_of_headers", "amqp_headers", "stamp_of_amqp", "BARRIER_HEADER",
           "amqp_barrier", "barrier_of_amqp", "checksum_ok",
           "checksum_of", "crc32", "xxh64", "xxh64_reference"]

HEADER = "kaudit"
HEADER_BYTES = HEADER.encode()
VERSION = 1  # CRC32: what the pure-Python producer writes
VERSION_XXH64 = 2  # XXH64 (seed 42): what the librdkafka plugin writes
VERSIONS = (VERSION, VERSION_XXH64)
SEQ_CRC = struct.Struct(">QI")  # bytes 1-12 of a version 1 stamp: sequence, CRC32
SEQ_XXH64 = struct.Struct(">QQ")  # bytes 1-16 of a version 2 stamp: sequence, XXH64
MIN_LENGTH = 15  # version 1: version, seq, CRC32, the two id lengths (ids of one byte: 17)
#: per version: the fixed part plus the two id lengths (the producer id's length is the
#: byte at MIN_LENGTHS[v] - 2, its first byte at MIN_LENGTHS[v] - 1)
MIN_LENGTHS = {VERSION: MIN_LENGTH, VERSION_XXH64: 19}
_SEQ_SUM = {VERSION: SEQ_CRC, VERSION_XXH64: SEQ_XXH64}
SEQ_LIMIT = 2**63  # a well-formed seq is below it: it must fit a signed 64-bit column
XXH64_SEED = 42  # Spark SQL's xxhash64() seed: the SQL definition computes the same
crc32 = zlib.crc32

#: the ``consumed`` table's ``stamp_error`` for a record without a ``kaudit`` header
NO_STAMP = f"no {HEADER} header"
#: the ``consumed`` table's ``stamp_error`` for a record with a malformed one
MALFORMED = "malformed stamp"
#: the ``consumed`` table's ``stamp_error`` for a well-formed stamp whose MAC does not
#: verify (or is missing) while a stamp key is configured
FORGED = "forged stamp"
#: the header that carries a stamp's MAC, and the MAC's length (HMAC-SHA256's first half)
MAC_HEADER = "kaudit-mac"
MAC_HEADER_BYTES = MAC_HEADER.encode()
MAC_LENGTH = 16
#: a stamp key's length, in bytes: at least 128 bits; a file much longer is no key file
KEY_LENGTHS = (16, 4096)


class StampError(ValueError):
    """Raised when a record's ``kaudit`` header is not one well-formed stamp; says why."""


class ForgedStamp(StampError):
    """Raised when a well-formed stamp has no MAC, or one that does not verify, while a
    stamp key is configured; says why."""


class StampMac:
    """The stamp MAC under one key: HMAC-SHA256 (RFC 2104) of a stamp header's value, its
    first :data:`MAC_LENGTH` bytes. The key's inner and outer blocks are hashed once
    (``hashlib`` states copied per stamp: half the cost of ``hmac.digest`` here, which
    ``tests/unit/test_stamp.py`` holds it equal to)."""

    BLOCK = 64  # SHA-256's block size

    def __init__(self, key: bytes) -> None:
        if not KEY_LENGTHS[0] <= len(key) <= KEY_LENGTHS[1]:
            raise StampError(f"a stamp key is {KEY_LENGTHS[0]}-{KEY_LENGTHS[1]} bytes, got "
                             f"{len(key)}")
        self.key = bytes(key)  # for the JVM fold's javax.crypto.Mac
        k = (hashlib.sha256(key).digest() if len(key) > self.BLOCK else key).ljust(
            self.BLOCK, b"\0")
        #: the key's inner and outer blocks (K xor ipad, K xor opad): the SQL definition
        #: hashes them in front of the stamp and of the inner hash
        self.blocks = (bytes(b ^ 0x36 for b in k), bytes(b ^ 0x5C for b in k))
        self._inner = hashlib.sha256(self.blocks[0])
        self._outer = hashlib.sha256(self.blocks[1])

    def __call__(self, stamp: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(stamp)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()[:MAC_LENGTH]

    def check(self, stamp: bytes, macs: list[bytes | None]) -> None:
        """:class:`ForgedStamp` unless ``macs`` (the record's ``kaudit-mac`` values) is the
        one MAC of ``stamp``."""
        if not macs:
            raise ForgedStamp(f"no {MAC_HEADER} header")
        if len(macs) > 1:
            raise ForgedStamp(f"{len(macs)} {MAC_HEADER} headers")
        if macs[0] is None or not hmac.compare_digest(bytes(macs[0]), self(stamp)):
            raise ForgedStamp("the stamp's MAC does not verify")


@dataclass(frozen=True)
class Stamp:
    producer_id: str
    run_id: str
    seq: int
    checksum: int
    version: int = VERSION


_M64 = (1 << 64) - 1
_P1, _P2, _P3, _P4, _P5 = (11400714785074694791, 14029467366897019727, 1609587929392839161,
                           9650029242287828579, 2870177450012600261)


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _M64
    return (((acc << 31) | (acc >> 33)) * _P1) & _M64


def xxh64_reference(data: bytes, seed: int = XXH64_SEED) -> int:
    """XXH64 of ``data`` (the reference algorithm, unsigned 64) in pure Python, about 15 µs
    for a 100-byte value: what :func:`xxh64` is where the ``xxhash`` package is not
    installed (a producer's host), and what the tests hold the package and the plugin's C
    code to."""
    n = len(data)
    i = 0
    if n >= 32:
        v1, v2, v3, v4 = ((seed + _P1 + _P2) & _M64, (seed + _P2) & _M64, seed & _M64,
                          (seed - _P1) & _M64)
        lanes = struct.unpack_from(f"<{(n // 32) * 4}Q", data)
        for j in range(0, len(lanes), 4):
            v1 = _round(v1, lanes[j])
            v2 = _round(v2, lanes[j + 1])
            v3 = _round(v3, lanes[j + 2])
            v4 = _round(v4, lanes[j + 3])
        i = (n // 32) * 32
        h = (((v1 << 1) | (v1 >> 63)) + ((v2 << 7) | (v2 >> 57)) + ((v3 << 12) | (v3 >> 52))
             + ((v4 << 18) | (v4 >> 46))) & _M64
        for v in (v1, v2, v3, v4):
            h = ((h ^ _round(0, v)) * _P1 + _P4) & _M64
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        h ^= _round(0, struct.unpack_from("<Q", data, i)[0])
        h = ((((h << 27) | (h >> 37)) & _M64) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * _P1) & _M64
        h = ((((h << 23) | (h >> 41)) & _M64) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M64
        h = ((((h << 11) | (h >> 53)) & _M64) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    return h ^ (h >> 32)


def _xxh64():
    try:  # the reference's C code (0.15 µs for 100 bytes): the audit's re-reads need it
        from xxhash import xxh64_intdigest
    except ImportError:
        return xxh64_reference
    return lambda data, seed=XXH64_SEED: xxh64_intdigest(data, seed)


#: XXH64 of ``data`` (unsigned 64), seed 42 unless given: Spark's ``xxhash64`` of a binary
#: column and the plugin's C code give the same. A re-read checks it per record read
#: (a range near a fail-over is 100,000 records and more), so the ``xxhash`` package's
#: C code where it is installed ([spark], [all]), else :func:`xxh64_reference`
xxh64: Callable[..., int] = _xxh64()


def checksum_of(value: bytes | None, version: int = VERSION) -> int:
    """The checksum a stamp of ``version`` carries for ``value`` (null: empty bytes)."""
    value = value or b""
    return crc32(value) if version == VERSION else xxh64(value)


def _id_bytes(value: str, what: str) -> bytes:
    try:
        raw = value.encode()
    except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 for it
        raise StampError(f"{what} is not UTF-8: {exc.reason} at {exc.start}") from None
    if not 0 < len(raw) < 256:
        raise StampError(f"{what} must be 1-255 bytes of UTF-8, got {len(raw)}")
    return bytes([len(raw)]) + raw


def stamp_prefix(producer_id: str, run_id: str, version: int = VERSION) -> tuple[bytes, bytes]:
    """The constant parts around the per-record sequence and checksum: (version byte, id
    tail)."""
    if version not in VERSIONS:
        raise StampError(f"unknown stamp version {version}")
    return bytes([version]), _id_bytes(producer_id, "producer id") + _id_bytes(run_id, "run id")


def build_stamp(producer_id: str, run_id: str, seq: int, checksum: int,
                version: int = VERSION) -> bytes:
    if not 0 <= seq < SEQ_LIMIT:
        raise StampError(f"seq must be in [0, 2^63), got {seq}")
    head, tail = stamp_prefix(producer_id, run_id, version)
    return head + _SEQ_SUM[version].pack(seq, checksum) + tail


def _decode_id(raw: bytes, what: str) -> str:
    try:
        return raw.decode()  # strict UTF-8: Java's REPORT decoder and Spark agree on it
    except UnicodeDecodeError as exc:
        raise StampError(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from None


def parse_stamp(value: bytes | None) -> Stamp:
    """The stamp in one ``kaudit`` header value; :class:`StampError` if it is malformed."""
    if value is None:
        raise StampError("null stamp value")
    value = bytes(value)
    if not value:
        raise StampError("empty stamp value")
    version = value[0]
    if version not in VERSIONS:
        raise StampError(f"unknown stamp version {version}")
    min_length = MIN_LENGTHS[version]
    if len(value) < min_length:
        raise StampError(f"stamp too short ({len(value)} bytes)")
    seq, checksum = _SEQ_SUM[version].unpack_from(value, 1)
    p_at = min_length - 2  # the producer id's length byte
    p_len = value[p_at]
    p_end = p_at + 1 + p_len
    if p_len == 0:
        raise StampError("empty producer id")
    if len(value) < p_end + 1:
        raise StampError("truncated producer id")
    r_len = value[p_end]
    if r_len == 0:
        raise StampError("empty run id")
    if len(value) != p_end + 1 + r_len:
        raise StampError("truncated run id" if len(value) < p_end + 1 + r_len
                         else f"overlong stamp ({len(value) - p_end - 1 - r_len} bytes past "
                              "the run id)")
    producer = _decode_id(value[p_at + 1:p_end], "producer id")
    run = _decode_id(value[p_end + 1:], "run id")
    if seq >= SEQ_LIMIT:
        raise StampError(f"seq {seq} does not fit a signed 64-bit integer")
    return Stamp(producer, run, seq, checksum, version)


def stamp_of_headers(headers: Iterable[tuple[str | bytes, bytes | None]] | None,
                     mac: StampMac | None = None) -> Stamp | None:
    """The stamp rule over a record's headers (``(key, value)`` pairs, as confluent-kafka's
    ``Message.headers()`` gives them, or with the key as bytes, as the log holds it and the
    re-read reads it; ``None``: no headers), under the stamp key's ``mac`` if one is
    configured.

    Returns the :class:`Stamp`, or ``None`` when no header is ``kaudit`` (*no stamp*);
    raises :class:`StampError` with the reason when the record's stamp is *malformed*, and
    its subclass :class:`ForgedStamp` when it is *forged*.
    """
    values, macs = [], []
    for k, v in headers or ():
        if k == HEADER or k == HEADER_BYTES:
            values.append(v)
        elif mac is not None and (k == MAC_HEADER or k == MAC_HEADER_BYTES):
            macs.append(v)
    if not values:
        return None
    if len(values) > 1:
        raise StampError(f"{len(values)} {HEADER} headers")
    stamp = parse_stamp(values[0])
    if mac is not None:
        mac.check(bytes(values[0]), macs)
    return stamp


def amqp_headers(stamp: bytes, mac: StampMac | None = None) -> dict[str, bytes]:
    """The AMQP 0-9-1 headers (a message's ``headers`` field table) that carry ``stamp`` (a
    :func:`build_stamp` value), and its MAC under ``mac`` if a stamp key is configured:
    the same values as Kafka's headers, as byte arrays (field type ``x``, what pika
    writes for ``bytes``)."""
    return {HEADER: stamp} if mac is None else {HEADER: stamp, MAC_HEADER: mac(stamp)}


def stamp_of_amqp(headers: Mapping[str, object] | None, mac: StampMac | None = None
                  ) -> Stamp | None:
    """The stamp rule (:func:`stamp_of_headers`) over an AMQP message's ``headers`` table
    as the client decoded it (``None``: no headers). A table holds each key once, so two
    stamps cannot travel together; a ``kaudit`` value the client hands back as no bytes (a
    string, a number, a nested table) is a *malformed* stamp, and a ``kaudit-mac`` one
    verifies nothing (*forged* while a stamp key is configured). pika hands back a byte
    array as ``bytes``, and a long string as ``str`` unless it is no UTF-8."""
    pairs: list[tuple[str, bytes | None]] = []
    for key, value in (headers or {}).items():
        if key in (HEADER, MAC_HEADER) and not isinstance(value, bytes | bytearray):
            if key == HEADER:
                raise StampError(f"the {HEADER} header is an AMQP "
                                 f"{type(value).__name__}, not a byte array")
            value = None
        if key in (HEADER, MAC_HEADER):
            pairs.append((key, value))
    return stamp_of_headers(pairs, mac)


#: the header of a RabbitMQ reader's barrier (``jobs/core/rabbit_rules.py``): 8 bytes, when
#: its publish began in µs since the epoch (big-endian); its MAC, with a stamp key, is
#: over the header's name and value (no stamp begins with ``kaudit-barrier``)
BARRIER_HEADER = "kaudit-barrier"
_BARRIER = struct.Struct(">Q")


def amqp_barrier(sent_us: int, mac: StampMac | None = None) -> dict[str, bytes]:
    """The AMQP headers of a barrier whose publish began at ``sent_us``."""
    value = _BARRIER.pack(sent_us)
    if mac is None:
        return {BARRIER_HEADER: value}
    return {BARRIER_HEADER: value, MAC_HEADER: mac(BARRIER_HEADER.encode() + value)}


def barrier_of_amqp(headers: Mapping[str, object] | None, mac: StampMac | None = None
                    ) -> int | None:
    """When the barrier in a message's headers was published (µs since the epoch), None
    when it is no barrier; :class:`StampError` when its value is malformed,
    :class:`ForgedStamp` when its MAC does not verify while a stamp key is configured."""
    value = (headers or {}).get(BARRIER_HEADER)
    if value is None and BARRIER_HEADER not in (headers or {}):
        return None
    if not isinstance(value, bytes | bytearray) or len(value) != _BARRIER.size:
        raise StampError(f"a {BARRIER_HEADER} header is {_BARRIER.size} bytes")
    if value[0] & 0x80:
        raise StampError(f"a {BARRIER_HEADER} time must fit a signed 64-bit integer")
    if mac is not None:
        m = headers.get(MAC_HEADER, ...)  # type: ignore[union-attr]
        mac.check(BARRIER_HEADER.encode() + bytes(value),
                  [] if m is ... else [m if isinstance(m, bytes | bytearray) else None])
    return _BARRIER.unpack(bytes(value))[0]


def checksum_ok(stamp: Stamp, value: bytes | None) -> bool:
    """Whether ``stamp``'s checksum is the record value's (CRC32 for version 1, XXH64 with
    seed 42 for version 2; a null value counts as empty)."""
    return checksum_of(value, stamp.version) == stamp.checksum
