"""The policy table: which anomalies a producer's settings allow, apart from detection."""

from kafka_audit.schemas.policy import Durability, allowed_because
from kafka_audit.schemas.verdicts import Kind

STRICT = Durability("all", True, 2147483647, 5)
ACKS1 = Durability("1", False, 2, 5)


def test_losses_are_allowed_only_without_acks_all():
    assert allowed_because(Kind.lost, ACKS1) and allowed_because(Kind.lost_after_seen, ACKS1)
    assert allowed_because(Kind.lost, Durability("0", False, 0, 1))
    assert allowed_because(Kind.lost, STRICT) is None
    assert allowed_because(Kind.lost, Durability("all", False, 2, 5)) is None


def test_duplicates_and_reordering_need_retries_without_idempotence():
    assert allowed_because(Kind.duplicate, ACKS1)
    assert allowed_because(Kind.duplicate, STRICT) is None
    assert allowed_because(Kind.duplicate, Durability("all", False, 0, 5)) is None
    assert allowed_because(Kind.reordered, ACKS1)
    assert allowed_because(Kind.reordered, Durability("all", False, 2, 1)) is None
    assert allowed_because(Kind.reordered, STRICT) is None


def test_nothing_else_is_ever_allowed():
    for kind in (Kind.confirmed, Kind.rejected, Kind.indeterminate, Kind.unverified):
        assert allowed_because(kind, ACKS1) is None


def test_a_rabbitmq_message_without_the_persistent_flag_may_be_lost_a_persistent_one_not():
    assert "persistent flag" in allowed_because(Kind.lost, Durability("transient", False, 0, 1))
    assert allowed_because(Kind.lost, Durability("persistent", False, 0, 1)) is None
