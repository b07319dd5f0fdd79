from kafka_audit.jobs.watcher import PartitionView, diff_partition


def v(leader, isr, replicas=(1, 2, 3)):
    return PartitionView(leader, tuple(isr), tuple(replicas))


def test_first_sight():
    assert diff_partition(None, v(1, (1, 2, 3))) == ["first_seen"]
    assert diff_partition(None, v(-1, ())) == ["first_seen", "offline"]


def test_leader_change_and_isr_shrink():
    assert diff_partition(v(1, (1, 2, 3)), v(2, (2, 3))) == ["leader_change", "isr_shrink"]


def test_isr_expand_and_offline():
    assert diff_partition(v(2, (2, 3)), v(2, (1, 2, 3))) == ["isr_expand"]
    assert diff_partition(v(2, (2,)), v(-1, (2,))) == ["offline"]


def test_no_change_no_event():
    assert diff_partition(v(1, (1, 2)), v(1, (1, 2))) == []
