import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_audit.schemas.stamp import Stamp, StampError, build_stamp, parse_stamp
from kafka_audit.schemas.tables import TABLES, arrow_schema

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


def test_empty_ids_are_refused():
    with pytest.raises(StampError):
        build_stamp("", "r", 1, 1)


def test_every_table_has_an_arrow_schema():
    for name, cols in TABLES.items():
        assert arrow_schema(name).names == [c.name for c in cols]
