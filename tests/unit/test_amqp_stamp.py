"""The stamp in AMQP 0-9-1 headers (schemas/stamp.py), through pika's own field-table codec:
what a publisher writes is what a reader of the queue parses, under the same stamp rule as
Kafka's headers."""

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pika import data

from kafka_audit.schemas.stamp import (
    ForgedStamp,
    Stamp,
    StampError,
    StampMac,
    amqp_barrier,
    amqp_headers,
    barrier_of_amqp,
    build_stamp,
    checksum_of,
    stamp_of_amqp,
)

MAC = StampMac(b"k" * 32)


def wire(headers: dict) -> dict:
    """``headers`` as a reader gets them: encoded by pika and decoded again."""
    parts: list[bytes] = []
    data.encode_table(parts, headers)
    decoded, _ = data.decode_table(b"".join(parts), 0)
    return decoded


ids = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=60).filter(
    lambda s: len(s.encode()) < 256)


@given(ids, ids, st.integers(0, 2**63 - 1), st.binary(max_size=200), st.booleans())
def test_a_stamp_crosses_the_wire_as_it_was_built(producer, run, seq, value, keyed):
    mac = MAC if keyed else None
    stamp = build_stamp(producer, run, seq, checksum_of(value))
    got = stamp_of_amqp(wire({"app": "x", **amqp_headers(stamp, mac)}), mac)
    assert got == Stamp(producer, run, seq, checksum_of(value))


def test_no_headers_or_no_stamp_is_no_stamp():
    assert stamp_of_amqp(None) is None
    assert stamp_of_amqp(wire({})) is None
    assert stamp_of_amqp(wire({"trace": b"\x01", "kaudit-mac": b"x"})) is None


@pytest.mark.parametrize("value", [7, "kaudit", {"nested": b"x"}, [b"x"], None, True,
                                   Decimal("1.5")])
def test_a_stamp_that_is_no_byte_array_is_malformed(value):
    with pytest.raises(StampError, match="not a byte array"):
        stamp_of_amqp(wire({"kaudit": value}))


def test_a_stamp_without_its_mac_is_forged_while_a_key_is_configured():
    stamp = build_stamp("p", "r", 1, 0)
    with pytest.raises(ForgedStamp, match="no kaudit-mac"):
        stamp_of_amqp(wire(amqp_headers(stamp)), MAC)
    with pytest.raises(ForgedStamp, match="does not verify"):
        stamp_of_amqp(wire({**amqp_headers(stamp), "kaudit-mac": "a string"}), MAC)
    with pytest.raises(ForgedStamp, match="does not verify"):
        stamp_of_amqp(wire(amqp_headers(stamp, StampMac(b"other-key-" * 2))), MAC)
    assert stamp_of_amqp(wire(amqp_headers(stamp)), None) == Stamp("p", "r", 1, 0)


def test_a_barrier_crosses_the_wire_and_a_bad_one_is_refused():
    sent = 1_764_500_000_123_456
    assert barrier_of_amqp(wire(amqp_barrier(sent))) == sent
    assert barrier_of_amqp(wire(amqp_barrier(sent, MAC)), MAC) == sent
    assert barrier_of_amqp(wire({"kaudit": b"x"})) is None and barrier_of_amqp(None) is None
    with pytest.raises(StampError, match="8 bytes"):
        barrier_of_amqp(wire({"kaudit-barrier": b"\x00" * 7}))
    with pytest.raises(StampError, match="8 bytes"):
        barrier_of_amqp(wire({"kaudit-barrier": "12345678"}))
    with pytest.raises(ForgedStamp, match="no kaudit-mac"):
        barrier_of_amqp(wire(amqp_barrier(sent)), MAC)
    # a stamp's MAC is no barrier's: the value is bound to the header's name
    forged = {**amqp_barrier(sent), "kaudit-mac": MAC(amqp_barrier(sent)["kaudit-barrier"])}
    with pytest.raises(ForgedStamp, match="does not verify"):
        barrier_of_amqp(wire(forged), MAC)
