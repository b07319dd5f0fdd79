import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_audit.schemas.stamp import Stamp, StampError, build_stamp, parse_stamp
from kafka_audit.schemas.tables import TABLES, arrow_schema, spark_schema

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


def test_spark_and_arrow_declarations_agree_column_by_column():
    """Both engines must see the same types: a drift here breaks cross-engine tables."""
    spark_for_arrow = {"string": "string", "int64": "bigint", "int32": "int", "bool": "boolean",
                       "double": "double", "timestamp[us, tz=UTC]": "timestamp",
                       "list<item: int32>": "array<int>"}
    for name in TABLES:
        arrow = arrow_schema(name)
        spark = spark_schema(name)
        assert arrow.names == spark.fieldNames(), name
        for a, s in zip(arrow, spark.fields, strict=True):
            assert spark_for_arrow[str(a.type)] == s.dataType.simpleString(), (name, a.name)
            assert a.nullable == s.nullable, (name, a.name)
