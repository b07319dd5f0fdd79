"""Times in query parameters: exactly what OpenAPI's ``format: date-time`` admits (RFC 3339),
read exactly, at every edge (year 0000, offsets up to 23:59, leap seconds)."""

from datetime import UTC, datetime, timedelta, timezone

import jsonschema_rs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_audit.auditor_api.params import parse_instant

DATE_TIME = jsonschema_rs.validator_for({"type": "string", "format": "date-time"},
                                        validate_formats=True)
EPOCH = datetime(1970, 1, 1)


def micros(dt: datetime) -> int:
    """Microseconds since the epoch of an aware datetime, without leaving datetime's range."""
    delta = dt.replace(tzinfo=None) - EPOCH - dt.utcoffset()
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


@pytest.mark.parametrize("text,expected", [
    ("1970-01-01T00:00:00Z", 0),
    ("1970-01-01T01:00:00+01:00", 0),
    ("1969-12-31T23:59:59.999999Z", -1),
    ("2026-01-01t12:00:00.5z", micros(datetime(2026, 1, 1, 12, 0, 0, 500000, UTC))),
    ("2026-01-01T12:00:00.1234567891Z",  # beyond microseconds: truncated
     micros(datetime(2026, 1, 1, 12, 0, 0, 123456, UTC))),
    ("2024-02-29T00:00:00-00:00", micros(datetime(2024, 2, 29, tzinfo=UTC))),
    ("1998-12-31T23:59:60Z", micros(datetime(1999, 1, 1, tzinfo=UTC))),
    ("1998-12-31T15:59:60.123-08:00",
     micros(datetime(1999, 1, 1, 0, 0, 0, 123000, UTC))),
    ("0000-01-01T00:00:00Z", -62167219200 * 1_000_000),  # year 0: before datetime's range
    ("0001-01-01T00:00:00+23:59", micros(datetime(1, 1, 2, tzinfo=UTC))
     - 2 * 86_400_000_000 + 60_000_000),
    ("9999-12-31T23:59:59.999999-23:59",
     micros(datetime(9999, 12, 31, 23, 59, 59, 999999, UTC)) + 86_340_000_000),
    # not RFC 3339: refused
    ("0.5", None), ("1700000000", None), ("-1", None), ("1e9", None), ("", None),
    ("2026-01-01T00:00:00", None), ("2026-01-01 00:00:00Z", None), ("2026-01-01T00:00Z", None),
    ("2026-01-01", None), ("2026-02-29T00:00:00Z", None), ("2026-13-01T00:00:00Z", None),
    ("2026-01-01T24:00:00Z", None), ("2026-01-01T00:60:00Z", None),
    ("2026-01-01T12:00:60Z", None), ("1998-12-31T22:59:60Z", None),
    ("2026-01-01T00:00:00+24:00", None), ("2026-01-01T00:00:00+01:60", None),
    ("2026-01-01T00:00:00+0100", None), ("2026-01-01T00:00:00.Z", None),
    ("２０２６-01-01T00:00:00Z", None), (" 2026-01-01T00:00:00Z", None),
    ("2026-01-01T00:00:00Z\n", None), ("yesterday", None),
])
def test_exactly_rfc3339(text, expected):
    assert DATE_TIME.is_valid(text) == (expected is not None)  # what the schema promises
    if expected is None:
        with pytest.raises(ValueError):
            parse_instant(text)
    else:
        assert parse_instant(text) == expected


@given(st.datetimes(), st.integers(-1439, 1439), st.sampled_from("Tt"))
def test_any_offset_reads_as_the_same_instant(local, offset, sep):
    zone = timezone(timedelta(minutes=offset))
    sign = "-" if offset < 0 else "+"
    text = (f"{local.year:04d}-{local:%m-%d}{sep}{local:%H:%M:%S}.{local.microsecond:06d}"
            f"{sign}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}")
    assert DATE_TIME.is_valid(text)
    assert parse_instant(text) == micros(local.replace(tzinfo=zone))
