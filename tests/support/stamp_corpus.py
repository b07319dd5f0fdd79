"""One corpus of record header lists, good and bad, each with what the stamp rule says of it.

The stamp rule is defined in ``schemas/stamp.py``; every path that reads stamps (the Python
classification, the Spark SQL parse, the consume job's JVM fold, re-reads, ground truth) is
held to this corpus: ``tests/unit/test_stamp.py`` and ``tests/spark/test_stamp_rule.py``.

Stamps here are packed by hand (:func:`raw_stamp`), so that they can break the rule.
:data:`ID_CASES` holds the writers to the same rule (the ids the plugin and the Python
producer take); :data:`MAC_CORPUS`, read under :data:`KEY`, the stamp MAC.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, replace

from kafka_audit.schemas.stamp import FORGED as FORGED_ERROR
from kafka_audit.schemas.stamp import (
    HEADER,
    MAC_HEADER,
    MALFORMED,
    NO_STAMP,
    Stamp,
    StampMac,
    crc32,
    xxh64,
)

__all__ = ["NONE", "BAD", "FORGED", "STAMPED", "Case", "CORPUS", "IdCase", "ID_CASES",
           "KEY", "MAC", "MAC_CORPUS", "raw_stamp", "stamp_error_of", "unkeyed"]

NONE, BAD, FORGED, STAMPED = "no stamp", "malformed", "forged", "stamped"

#: keys as str (confluent-kafka's ``headers()``), or as bytes (the log's: any bytes, read so
#: by the re-read; the Spark frame decodes them as the Java client does)
Headers = list[tuple[str | bytes, bytes | None]] | None


@dataclass(frozen=True)
class Case:
    name: str
    headers: Headers  # None: a record without headers
    value: bytes | None  # the record's value (the checksum is CRC32 or XXH64 of it)
    status: str  # NONE, BAD, FORGED (MAC_CORPUS, under KEY) or STAMPED
    stamp: Stamp | None = None  # when STAMPED or FORGED (the stamp a forger wrote)
    checksum_ok: bool | None = None  # when STAMPED or FORGED

    def __post_init__(self):
        assert self.status in (NONE, BAD, FORGED, STAMPED), self.status
        assert (self.stamp is not None) == (self.checksum_ok is not None) == (
            self.status in (STAMPED, FORGED)), self.name


def stamp_error_of(status: str) -> str | None:
    """The ``consumed`` table's ``stamp_error`` for a status."""
    return {NONE: NO_STAMP, BAD: MALFORMED, FORGED: FORGED_ERROR, STAMPED: None}[status]


def unkeyed(case: Case) -> Case:
    """The case as read without a stamp key: MACs are not looked at, a forged stamp is one."""
    return replace(case, status=STAMPED) if case.status == FORGED else case


def raw_stamp(seq: int, checksum: int, producer: bytes = b"px", run: bytes = b"r1",
              version: int = 1, p_len: int | None = None, r_len: int | None = None,
              layout: int | None = None) -> bytes:
    """A stamp packed as laid out, unchecked: any seq below 2^64, any bytes and lengths.
    ``layout``: the version whose layout is used (default: ``version``'s, version 1's for
    an unknown one): a 4-byte CRC32 (1) or an 8-byte XXH64 (2) after the seq."""
    p_len = len(producer) if p_len is None else p_len
    r_len = len(run) if r_len is None else r_len
    layout = layout or (version if version in (1, 2) else 1)
    return (bytes([version]) + struct.pack(">QI" if layout == 1 else ">QQ", seq, checksum)
            + bytes([p_len]) + producer + bytes([r_len]) + run)


def raw_v2(seq: int, checksum: int, producer: bytes = b"px", run: bytes = b"r1",
           **kw) -> bytes:
    """A version 2 stamp (the plugin's), packed unchecked."""
    return raw_stamp(seq, checksum, producer, run, version=2, **kw)


def _good(name: str, value: bytes | None, seq: int = 7, producer: str = "px",
          run: str = "r1", headers_around: bool = False) -> Case:
    crc = crc32(value or b"")
    h = (HEADER, raw_stamp(seq, crc, producer.encode(), run.encode()))
    headers = [("trace", b"t"), h, ("other", None)] if headers_around else [h]
    return Case(name, headers, value, STAMPED, Stamp(producer, run, seq, crc), True)


def _bad(name: str, stamp: bytes | None, value: bytes = b"v") -> Case:
    return Case(name, [(HEADER, stamp)], value, BAD)


def _good2(name: str, value: bytes | None, seq: int = 7, producer: str = "px",
           run: str = "r1", headers_around: bool = False) -> Case:
    h64 = xxh64(value or b"")
    h = (HEADER, raw_v2(seq, h64, producer.encode(), run.encode()))
    headers = [("trace", b"t"), h, ("other", None)] if headers_around else [h]
    return Case(name, headers, value, STAMPED, Stamp(producer, run, seq, h64, 2), True)


_V = b"value"
_CRC = crc32(_V)
_RANDOM = bytes(random.Random(20261122).randrange(256) for _ in range(40))
assert _RANDOM[0] not in (1, 2)  # not even a version byte: malformed whatever follows
_H64 = xxh64(_V)
_KIB = bytes(random.Random(12).randrange(256) for _ in range(1024))  # 32-byte stripes
# checksums with the top bit set and clear: the SQL path compares them as signed longs' hex
_TOP = next(b"top %d" % i for i in range(100) if xxh64(b"top %d" % i) >= 2**63)
_LOW = next(b"low %d" % i for i in range(100) if xxh64(b"low %d" % i) < 2**63)

CORPUS: list[Case] = [
    # no stamp
    Case("no headers", None, _V, NONE),
    Case("empty header list", [], _V, NONE),
    Case("other headers only", [("other", b"x"), ("trace", None)], _V, NONE),
    Case("a key that is not ours (case differs)", [("KAUDIT", raw_stamp(1, _CRC))], _V, NONE),
    Case("a header key that is not UTF-8", [(b"\xc3\x28", b"x")], _V, NONE),
    Case("kaudit's bytes and a byte that is not UTF-8",
         [(HEADER.encode() + b"\xff", raw_stamp(1, _CRC))], _V, NONE),
    Case("a stamp under a key that is not UTF-8", [(b"\xffkaudit", raw_stamp(1, _CRC))], _V,
         NONE),
    # malformed
    _bad("empty value", b""),
    _bad("null value", None),
    _bad("too short", b"\x01short"),
    _bad("14 bytes", raw_stamp(1, _CRC)[:14]),
    _bad("random bytes", _RANDOM),
    _bad("unknown version", raw_stamp(1, _CRC, version=3)),
    _bad("unknown version, laid out as version 2", raw_stamp(1, _H64, version=3, layout=2)),
    _bad("version 0", raw_stamp(1, _CRC, version=0)),
    _bad("truncated producer id", raw_stamp(1, _CRC)[:15]),
    _bad("producer id length past the end", raw_stamp(1, _CRC, p_len=200)),
    _bad("producer id cut before the run id length", raw_stamp(1, _CRC)[:16]),
    _bad("truncated run id", raw_stamp(1, _CRC, b"px", b"r1", r_len=5)),
    _bad("run id cut short", raw_stamp(1, _CRC)[:-1]),
    _bad("overlong (a trailing byte)", raw_stamp(1, _CRC) + b"!"),
    _bad("overlong (run id length short)", raw_stamp(1, _CRC, b"px", b"r1", r_len=1)),
    _bad("empty producer id", raw_stamp(1, _CRC, b"", b"r1")),
    _bad("empty run id", raw_stamp(1, _CRC, b"px", b"")),
    _bad("empty producer and run ids (15 bytes)", raw_stamp(1, _CRC, b"", b"")),
    _bad("producer id not UTF-8", raw_stamp(1, _CRC, b"p\xff\xfe")),
    _bad("run id not UTF-8", raw_stamp(1, _CRC, b"px", b"r\xc3")),
    _bad("producer id with a UTF-8 surrogate", raw_stamp(1, _CRC, b"\xed\xa0\x80")),
    _bad("run id with an overlong encoding", raw_stamp(1, _CRC, b"px", b"\xc0\xaf")),
    _bad("producer id past U+10FFFF", raw_stamp(1, _CRC, b"\xf4\x90\x80\x80")),
    _bad("run id with a lone continuation byte", raw_stamp(1, _CRC, b"px", b"\x80")),
    _bad("seq = 2^63", raw_stamp(2**63, _CRC), _V),
    _bad("seq = 2^64 - 1", raw_stamp(2**64 - 1, _CRC), _V),
    Case("two stamp headers (both well formed)",
         [(HEADER, raw_stamp(1, _CRC)), (HEADER, raw_stamp(2, _CRC))], _V, BAD),
    Case("two stamp headers (the same one twice)",
         [(HEADER, raw_stamp(1, _CRC)), ("other", b"x"), (HEADER, raw_stamp(1, _CRC))], _V, BAD),
    Case("a good stamp header, then a null one",
         [(HEADER, raw_stamp(1, _CRC)), (HEADER, None)], _V, BAD),
    # stamped
    _good("a well-formed stamp", _V),
    _good("the next seq of the same run", _V, seq=8),
    _good("seq = 2^63 - 1", _V, seq=2**63 - 1),
    _good("seq = 0", b"zero", seq=0),
    _good("among other headers", b"around", seq=3, headers_around=True),
    _good("multibyte UTF-8 ids", b"utf8", producer="prod-\u00e9\u4e2d", run="\U0001f600"),
    _good("an id holding U+FFFD itself", b"fffd", producer="\ufffd\ufffd\ufffd"),
    _good("ids of 255 bytes", b"long", producer="p" * 255, run="r" * 255),
    _good("a null value (checksummed as empty bytes)", None, seq=9),
    Case("beside a header key that is not UTF-8",
         [(b"\xfe\xff", b"x"), (HEADER.encode(), raw_stamp(13, _CRC))], _V, STAMPED,
         Stamp("px", "r1", 13, _CRC), True),
    _good("an empty value", b"", seq=10),
    Case("forged: checksum does not match the value", [(HEADER, raw_stamp(11, _CRC ^ 1))], _V,
         STAMPED, Stamp("px", "r1", 11, _CRC ^ 1), False),
    Case("forged: null value, checksum not that of empty bytes",
         [(HEADER, raw_stamp(12, 1234))], None, STAMPED, Stamp("px", "r1", 12, 1234), False),
    # version 2 (the plugin's: XXH64 with seed 42)
    _bad("v2: 18 bytes", raw_v2(1, _H64)[:18]),
    _bad("v2: laid out as version 1", raw_stamp(1, _CRC, version=2, layout=1)),
    _bad("v1: laid out as version 2", raw_stamp(1, _H64, version=1, layout=2)),
    _bad("v2: producer id length past the end", raw_v2(1, _H64, p_len=200)),
    _bad("v2: producer id cut before the run id length", raw_v2(1, _H64)[:20]),
    _bad("v2: truncated run id", raw_v2(1, _H64, r_len=5)),
    _bad("v2: overlong (a trailing byte)", raw_v2(1, _H64) + b"!"),
    _bad("v2: empty producer id", raw_v2(1, _H64, b"", b"r1")),
    _bad("v2: empty run id", raw_v2(1, _H64, b"px", b"")),
    _bad("v2: empty producer and run ids (19 bytes)", raw_v2(1, _H64, b"", b"")),
    _bad("v2: producer id not UTF-8", raw_v2(1, _H64, b"p\xff\xfe")),
    _bad("v2: run id with a UTF-8 surrogate", raw_v2(1, _H64, b"px", b"\xed\xa0\x80")),
    _bad("v2: seq = 2^63", raw_v2(2**63, _H64), _V),
    Case("v2: two stamp headers", [(HEADER, raw_v2(1, _H64)), (HEADER, raw_v2(2, _H64))], _V,
         BAD),
    Case("v1 and v2 stamp headers together",
         [(HEADER, raw_stamp(1, _CRC)), (HEADER, raw_v2(1, _H64))], _V, BAD),
    _good2("v2: a well-formed stamp", _V, seq=20),
    _good2("v2: the next seq of the same run", _V, seq=21),
    _good("v1 after v2: the same run's next seq (a run may mix versions)", _V, seq=22),
    _good2("v2: seq = 2^63 - 1", _V, seq=2**63 - 1),
    _good2("v2: seq = 0", b"zero", seq=0),
    _good2("v2: among other headers", b"around", seq=3, headers_around=True),
    _good2("v2: multibyte UTF-8 ids", b"utf8", producer="prod-\u00e9\u4e2d", run="\U0001f600"),
    _good2("v2: ids of 255 bytes", b"long", producer="p" * 255, run="r" * 255),
    _good2("v2: a null value (checksummed as empty bytes)", None, seq=30),
    _good2("v2: an empty value", b"", seq=31),
    _good2("v2: a 1 KiB value", _KIB, seq=32),
    _good2("v2: a checksum with its top bit set", _TOP, seq=33),
    _good2("v2: a checksum with its top bit clear", _LOW, seq=34),
    Case("v2: forged: checksum does not match the value", [(HEADER, raw_v2(40, _H64 ^ 1))], _V,
         STAMPED, Stamp("px", "r1", 40, _H64 ^ 1, 2), False),
    Case("v2: forged: the value's CRC32 where XXH64 belongs", [(HEADER, raw_v2(41, _CRC))], _V,
         STAMPED, Stamp("px", "r1", 41, _CRC, 2), False),
    Case("v2: forged: null value, checksum not that of empty bytes",
         [(HEADER, raw_v2(42, 1234))], None, STAMPED, Stamp("px", "r1", 42, 1234, 2), False),
]



@dataclass(frozen=True)
class IdCase:
    """A producer or run id as bytes, and whether the stamp rule takes it (1-255 bytes of
    strict UTF-8). Every writer is held to these too: the plugin refuses an id the readers
    would reject (``tests/unit/test_plugin_native.py``), the Python producer's stamp
    refuses it (``tests/unit/test_stamp.py``). No id holds a NUL byte: the rule takes one,
    a librdkafka property cannot carry it."""

    name: str
    raw: bytes
    valid: bool


ID_CASES: list[IdCase] = [
    IdCase("ASCII", b"billing-1", True),
    IdCase("one byte", b"p", True),
    IdCase("255 bytes", b"p" * 255, True),
    IdCase("255 bytes ending in a 2-byte character", b"p" * 253 + "\u00e9".encode(), True),
    IdCase("2-, 3- and 4-byte characters", "\u00e9\u4e2d\U0001f600".encode(), True),
    IdCase("U+FFFD itself", "\ufffd".encode(), True),
    IdCase("U+D7FF and U+E000 (around the surrogates)", "\ud7ff\ue000".encode(), True),
    IdCase("U+10FFFF", "\U0010ffff".encode(), True),
    IdCase("empty", b"", False),
    IdCase("256 bytes", b"p" * 256, False),
    IdCase("300 bytes (once cut to 255 without a word)", b"c" * 300, False),
    IdCase("254 bytes and a 2-byte character (256)", b"p" * 254 + "\u00e9".encode(), False),
    IdCase("bytes that are not UTF-8", b"p\xff\xfe", False),
    IdCase("a character cut short", b"r\xc3", False),
    IdCase("a 4-byte character cut short", b"r\xf0\x9f\x98", False),
    IdCase("a lone continuation byte", b"\x80", False),
    IdCase("a surrogate (U+D800)", b"\xed\xa0\x80", False),
    IdCase("a surrogate (U+DFFF)", b"\xed\xbf\xbf", False),
    IdCase("an overlong 2-byte form", b"\xc0\xaf", False),
    IdCase("an overlong 3-byte form", b"\xe0\x80\xaf", False),
    IdCase("an overlong 4-byte form", b"\xf0\x80\x80\xaf", False),
    IdCase("past U+10FFFF", b"\xf4\x90\x80\x80", False),
    IdCase("a lead byte F5", b"\xf5\x80\x80\x80", False),
    IdCase("a lead byte FF", b"\xff", False),
]

assert len({c.name for c in ID_CASES}) == len(ID_CASES)


def _id_cases() -> list[Case]:
    """Each id case as a producer id of a version 2 stamp (the plugin's layout) and as a run
    id of a version 1 stamp (the Python producer's); an id past 255 bytes cannot be packed
    (its length is one byte): a stamp that says 255 and holds more is overlong."""
    out = []
    for c in ID_CASES:
        n = min(len(c.raw), 255)
        v2 = raw_v2(50, _H64, c.raw, b"r1", p_len=n)
        v1 = raw_stamp(51, _CRC, b"px", c.raw, r_len=n)
        if c.valid:
            text = c.raw.decode()
            out += [Case(f"id as producer (v2): {c.name}", [(HEADER, v2)], _V, STAMPED,
                         Stamp(text, "r1", 50, _H64, 2), True),
                    Case(f"id as run (v1): {c.name}", [(HEADER, v1)], _V, STAMPED,
                         Stamp("px", text, 51, _CRC), True)]
        else:
            out += [_bad(f"id as producer (v2): {c.name}", v2, _V),
                    _bad(f"id as run (v1): {c.name}", v1, _V)]
    return out


CORPUS += _id_cases()

assert len({c.name for c in CORPUS}) == len(CORPUS)


#: the stamp key the MAC corpus is read under (and a key of another's)
KEY = bytes(range(7, 39))
MAC = StampMac(KEY)
_OTHER = StampMac(bytes(range(100, 132)))


def _macced(name: str, stamp: bytes, mac: bytes | None, status: str, seq: int, value: bytes,
            version: int = 1, around: bool = False, ok: bool = True) -> Case:
    headers = [(HEADER, stamp)] + ([] if mac is None else [(MAC_HEADER, mac)])
    if around:
        headers = [("trace", b"t"), *reversed(headers), ("other", None)]
    checksum = crc32(value) if version == 1 else xxh64(value)
    checksum = checksum if ok else checksum ^ 1
    return Case(f"mac: {name}", headers, value, status,
                Stamp("px", "r1", seq, checksum, version), ok)


_S1 = raw_stamp(60, _CRC)
_S2 = raw_v2(61, _H64)

#: header lists read under :data:`KEY` (``status``) and without a key (:func:`unkeyed`):
#: a stamp is taken only with exactly one ``kaudit-mac`` header holding its MAC
MAC_CORPUS: list[Case] = [
    _macced("its MAC (v1, the Python producer's)", _S1, MAC(_S1), STAMPED, 60, _V),
    _macced("its MAC (v2, the plugin's)", _S2, MAC(_S2), STAMPED, 61, _V, version=2),
    _macced("its MAC, before the stamp, among other headers", _S1, MAC(_S1), STAMPED, 60, _V,
            around=True),
    _macced("its MAC over a checksum that does not match the value",
            raw_stamp(62, _CRC ^ 1), MAC(raw_stamp(62, _CRC ^ 1)), STAMPED, 62, _V, ok=False),
    _macced("no MAC", _S1, None, FORGED, 60, _V),
    _macced("one bit off", _S1, bytes([MAC(_S1)[0] ^ 1]) + MAC(_S1)[1:], FORGED, 60, _V),
    _macced("another stamp's", _S1, MAC(raw_stamp(59, _CRC)), FORGED, 60, _V),
    _macced("under another key", _S2, _OTHER(_S2), FORGED, 61, _V, version=2),
    _macced("HMAC-SHA256 whole (32 bytes)", _S1, MAC(_S1) + bytes(16), FORGED, 60, _V),
    _macced("15 bytes of it", _S1, MAC(_S1)[:15], FORGED, 60, _V),
    _macced("empty", _S1, b"", FORGED, 60, _V),
    Case("mac: a null value", [(HEADER, _S1), (MAC_HEADER, None)], _V, FORGED,
         Stamp("px", "r1", 60, _CRC), True),
    Case("mac: twice, both right", [(HEADER, _S1), (MAC_HEADER, MAC(_S1)),
                                    (MAC_HEADER, MAC(_S1))], _V, FORGED,
         Stamp("px", "r1", 60, _CRC), True),
    Case("mac: under a key that is not ours (case differs)",
         [(HEADER, _S1), ("KAUDIT-MAC", MAC(_S1))], _V, FORGED, Stamp("px", "r1", 60, _CRC),
         True),
    Case("mac: a MAC and no stamp", [(MAC_HEADER, MAC(_S1))], _V, NONE),
    Case("mac: its MAC over a malformed stamp", [(HEADER, _S1[:-1]),
                                                (MAC_HEADER, MAC(_S1[:-1]))], _V, BAD),
    Case("mac: its MAC, the MAC header's key as bytes",
         [(HEADER.encode(), _S2), (MAC_HEADER.encode(), MAC(_S2))], _V, STAMPED,
         Stamp("px", "r1", 61, _H64, 2), True),
]

assert len({c.name for c in MAC_CORPUS}) == len(MAC_CORPUS)
