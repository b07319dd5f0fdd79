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


def test_unclean_election_min_isr_and_the_leader_alone():
    assert diff_partition(v(1, (1,)), v(3, (3,)), min_isr=2) == [
        "leader_change", "unclean_election", "isr_shrink"]
    assert diff_partition(v(1, (1, 2, 3)), v(1, (1,)), min_isr=2) == [
        "isr_shrink", "under_min_isr_enter", "isr_alone_enter"]
    assert diff_partition(v(1, (1,)), v(1, (1, 2)), min_isr=2) == [
        "isr_expand", "under_min_isr_exit", "isr_alone_exit"]
    assert diff_partition(None, v(1, (1,)), min_isr=2) == [
        "first_seen", "under_min_isr_enter", "isr_alone_enter"]
    assert diff_partition(v(1, (1,), replicas=(1,)), v(1, (1,), replicas=(1,))) == []
