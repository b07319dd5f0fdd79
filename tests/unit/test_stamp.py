import hmac
import random

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from kafka_audit.jobs.audit.reread import _record
from kafka_audit.schemas import stamp
from kafka_audit.schemas.stamp import (
    HEADER,
    MALFORMED,
    NO_STAMP,
    VERSIONS,
    ForgedStamp,
    Stamp,
    StampError,
    StampMac,
    build_stamp,
    checksum_ok,
    parse_stamp,
    stamp_of_headers,
    stamp_prefix,
    xxh64_reference,
)
from kafka_audit.schemas.tables import TABLES, arrow_schema, spark_schema

from ..support.stamp_corpus import (
    BAD,
    CORPUS,
    FORGED,
    ID_CASES,
    MAC,
    MAC_CORPUS,
    NONE,
    STAMPED,
    raw_stamp,
    unkeyed,
)

ids = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1,
              max_size=40).filter(lambda s: 0 < len(s.encode()) < 256)


@given(ids, ids, st.integers(0, 2**63 - 1), st.integers(0, 2**32 - 1))
def test_stamp_round_trip(producer, run, seq, crc):
    assert parse_stamp(build_stamp(producer, run, seq, crc)) == Stamp(producer, run, seq, crc)


@pytest.mark.parametrize("raw", [None, b"", b"\x01" * 10, b"\x02" + b"\x00" * 14,
                                 build_stamp("p", "r", 1, 2) + b"x",
                                 build_stamp("p", "r", 1, 2)[:-1]])
def test_malformed_stamps_are_refused_with_a_reason(raw):
    with pytest.raises(StampError):
        parse_stamp(raw)


@given(st.binary(max_size=300), st.integers(0, 2**64 - 1))
def test_the_xxhash_package_is_the_reference_xxh64(data, seed):
    assert xxhash.xxh64_intdigest(data, seed) == xxh64_reference(data, seed)
    assert stamp.xxh64(data, seed) == xxh64_reference(data, seed)
    assert stamp.xxh64 is not xxh64_reference  # the package's, where it is installed


def test_empty_ids_are_refused():
    with pytest.raises(StampError):
        build_stamp("", "r", 1, 1)


@pytest.mark.parametrize("seq", [2**63, 2**64 - 1])
def test_a_seq_past_a_signed_long_is_refused(seq):
    with pytest.raises(StampError, match="seq"):
        parse_stamp(raw_stamp(seq, 0))
    with pytest.raises(StampError):
        build_stamp("p", "r", seq, 0)
    assert parse_stamp(raw_stamp(2**63 - 1, 0)).seq == 2**63 - 1


@pytest.mark.parametrize("case", CORPUS + [unkeyed(c) for c in MAC_CORPUS],
                         ids=lambda c: c.name)
def test_the_stamp_rule_on_the_corpus(case):
    if case.status == BAD:
        with pytest.raises(StampError) as err:
            stamp_of_headers(case.headers)
        assert str(err.value)  # a reason
        return
    stamp = stamp_of_headers(case.headers)
    if case.status == NONE:
        assert stamp is None
        return
    assert case.status == STAMPED
    assert stamp == case.stamp
    assert checksum_ok(stamp, case.value) is case.checksum_ok
    assert parse_stamp(next(v for k, v in case.headers if k in (HEADER, HEADER.encode()))
                       ) == stamp


@pytest.mark.parametrize("key_length", [16, 32, 63, 64, 65, 200, 4096])
def test_the_stamp_mac_is_hmac_sha256_cut_to_16_bytes(key_length):
    rnd = random.Random(key_length)
    key = rnd.randbytes(key_length)
    mac = StampMac(key)
    for n in (0, 1, 17, 55, 56, 64, 100, 529):
        stamp = rnd.randbytes(n)
        assert mac(stamp) == hmac.digest(key, stamp, "sha256")[:16], n
    assert mac(b"x") != StampMac(bytes(reversed(key)))(b"x")


@pytest.mark.parametrize("length", [0, 15, 4097])
def test_a_stamp_key_is_16_to_4096_bytes(length):
    with pytest.raises(StampError, match="16-4096 bytes"):
        StampMac(bytes(length))


@pytest.mark.parametrize("case", MAC_CORPUS, ids=lambda c: c.name)
def test_the_stamp_rule_under_a_key_on_the_mac_corpus(case):
    if case.status in (BAD, FORGED):
        with pytest.raises(StampError) as err:
            stamp_of_headers(case.headers, MAC)
        assert isinstance(err.value, ForgedStamp) is (case.status == FORGED), err.value
        return
    stamp = stamp_of_headers(case.headers, MAC)
    if case.status == NONE:
        assert stamp is None
        return
    assert stamp == case.stamp and checksum_ok(stamp, case.value) is case.checksum_ok


@pytest.mark.parametrize("case", ID_CASES, ids=lambda c: c.name)
def test_the_python_producer_takes_exactly_the_ids_the_readers_accept(case):
    # an id is a str here: bytes that are not UTF-8 arrive as lone surrogates
    text = case.raw.decode("utf-8", "surrogateescape")
    for version in VERSIONS:
        for ids in ((text, "r"), ("p", text)):
            if case.valid:
                head, tail = stamp_prefix(*ids, version)
                stamp = head + bytes(16 if version == 2 else 12) + tail
                assert (parse_stamp(stamp).producer_id, parse_stamp(stamp).run_id) == ids
            else:
                with pytest.raises(StampError):
                    stamp_prefix(*ids, version)


class _Message:
    """The little of confluent-kafka's ``Message`` that a re-read looks at."""

    def __init__(self, offset, headers, value):
        self._offset, self._headers, self._value = offset, headers, value

    def offset(self):
        return self._offset

    def headers(self):
        return self._headers

    def value(self):
        return self._value

    def leader_epoch(self):
        return 3


@pytest.mark.parametrize("case, mac", [(c, None) for c in CORPUS]
                         + [(unkeyed(c), None) for c in MAC_CORPUS]
                         + [(c, MAC) for c in MAC_CORPUS], ids=lambda c: getattr(c, "name", ""))
def test_rereads_follow_the_stamp_rule(case, mac):
    r = _record(_Message(41, case.headers, case.value), mac)
    assert (r.offset, r.leader_epoch) == (41, 3)
    if case.status == STAMPED:
        assert (r.producer_id, r.run_id, r.seq, r.checksum_ok, r.stamp_error) == (
            case.stamp.producer_id, case.stamp.run_id, case.stamp.seq, case.checksum_ok, None)
        return
    assert (r.producer_id, r.run_id, r.seq, r.checksum_ok) == (None, None, None, None)
    if case.status == NONE:
        assert r.stamp_error == NO_STAMP
    elif case.status == FORGED:  # no producer's: it confirms no write
        assert r.stamp_error.startswith("forged stamp: ")
    else:
        assert r.stamp_error.startswith(f"{MALFORMED}: ")


def test_spark_and_arrow_declarations_agree_column_by_column():
    """Both engines must see the same types: a drift here breaks cross-engine tables."""
    spark_for_arrow = {"string": "string", "int64": "bigint", "int32": "int", "bool": "boolean",
                       "double": "double", "timestamp[us, tz=UTC]": "timestamp",
                       "list<item: int32>": "array<int>", "date32[day]": "date"}
    for name in TABLES:
        arrow = arrow_schema(name)
        spark = spark_schema(name)
        assert arrow.names == spark.fieldNames(), name
        for a, s in zip(arrow, spark.fields, strict=True):
            assert spark_for_arrow[str(a.type)] == s.dataType.simpleString(), (name, a.name)
            assert a.nullable == s.nullable, (name, a.name)
