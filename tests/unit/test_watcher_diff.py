from kafka_audit.jobs.watcher.watcher import PartitionView, diff_partition


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


def test_the_same_leader_at_a_newer_epoch_is_reelected():
    def e(leader, isr, epoch):
        return PartitionView(leader, tuple(isr), (1, 2, 3), epoch)

    # fenced or restarted and elected again between two polls: the offline moment unseen
    assert diff_partition(e(3, (3,), 0), e(3, (3,), 2)) == ["leader_reelected"]
    assert diff_partition(e(3, (3,), 2), e(3, (1, 3), 2)) == ["isr_expand", "isr_alone_exit"]
    assert diff_partition(e(3, (3,), None), e(3, (3,), 2)) == []  # no epoch before: unknown
    assert diff_partition(e(3, (3,), 2), e(3, (3,), 1)) == []  # a staler answer: no event


def test_a_clean_election_right_after_an_expansion_is_not_unclean():
    # between two polls the ISR grew to {2, 3} and 3 (the preferred replica) took over
    assert diff_partition(v(2, (2,)), v(3, (2, 3))) == ["leader_change", "isr_expand",
                                                       "isr_alone_exit"]
    # an unclean election leaves nothing of the old ISR in the new one
    assert "unclean_election" in diff_partition(v(1, (1,)), v(2, (2,)))


def test_an_election_from_the_eligible_replicas_is_clean_and_kafkas_mark_is_unclean():
    def e(leader, isr, elr=None, recovering=None):
        return PartitionView(leader, tuple(isr), (1, 2, 3), elr=elr, recovering=recovering)

    # KIP-966: 2 left the ISR as it fell below min.insync.replicas (eligible), the leader 3
    # was lost; 2 took over with every committed write. The classic rule, which sees the
    # ISRs alone (a poll), names it unclean
    assert diff_partition(e(3, (3,)), e(2, (2,)), min_isr=2)[:2] == [
        "leader_change", "unclean_election"]
    assert diff_partition(e(3, (3,), elr=(2,)), e(2, (2,), elr=()), min_isr=2)[:2] == [
        "leader_change", "elr_election"]
    # from an ISR emptied with the eligible replicas kept
    assert diff_partition(e(-1, (), elr=(1, 2)), e(2, (2,), elr=(1,)))[:2] == [
        "leader_change", "elr_election"]
    # the last known leader back with the ISR and the eligible replicas empty: Kafka marks
    # the election unclean (recovering), which the ISRs alone would not tell
    assert "unclean_election" not in diff_partition(e(-1, (), elr=()), e(1, (1,), elr=()))
    assert diff_partition(e(-1, (), elr=()), e(1, (1,), elr=(), recovering=True))[:2] == [
        "leader_change", "unclean_election"]
    # marked unclean, whatever the eligible replicas were
    assert "unclean_election" in diff_partition(e(3, (3,), elr=(2,)),
                                                e(2, (2,), recovering=True))
    # a leader from the ISR is never either
    assert diff_partition(e(3, (2, 3), elr=()), e(2, (2,), elr=(), recovering=False)) == [
        "leader_change", "isr_shrink", "isr_alone_enter"]
