"""The ground truth's end offsets: asked again while a new leader's high watermark settles."""

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_audit.scenarios.groundtruth import end_offsets


class Answers:
    """A consumer whose watermark answers are scripted per partition (an exception: raised)."""

    def __init__(self, script):
        self.script = {p: list(a) for p, a in script.items()}
        self.asked = 0

    def get_watermark_offsets(self, tp, timeout):
        self.asked += 1
        answer = self.script[tp.partition].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def settling():
    return KafkaException(KafkaError(KafkaError.OFFSET_NOT_AVAILABLE,
                                     "Leader high watermark is not caught up"))


def test_a_new_leaders_unsettled_watermark_is_asked_again():
    c = Answers({0: [(0, 10)], 1: [settling(), settling(), (0, 7)]})
    assert end_offsets(c, "t", [0, 1], within=30) == {0: 10, 1: 7}
    assert c.asked == 4


def test_another_error_is_raised_at_once():
    c = Answers({0: [KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)),
                     (0, 1)]})
    with pytest.raises(KafkaException):
        end_offsets(c, "t", [0], within=30)
    assert c.asked == 1


def test_a_watermark_that_never_settles_is_raised_after_the_deadline():
    c = Answers({0: [settling()] * 3})
    with pytest.raises(KafkaException):
        end_offsets(c, "t", [0], within=0)
    assert c.asked == 1
