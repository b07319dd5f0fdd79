"""The verdicts, declared once: kinds, sub-kinds, causes (``../shared/DESIGN.md``, "Verdicts").

The rules (``jobs/core/rules.py``) give them, the ``findings`` table stores them as
strings, the API filters on them and lists them in its OpenAPI schema. Each
member is a ``str``, so a finding's ``kind`` compares equal to its stored value.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

__all__ = ["Kind", "Subkind", "Cause", "cause_name", "CAUSE_SLACK", "LOSSES", "ANNOTATIONS",
           "UNJUDGED", "PRIMARY", "SUBKINDS", "REJECTING_ERRORS"]


class Kind(StrEnum):
    """What became of an acknowledged (or failed) write."""

    #: a record carries the write's stamp at its acked offset
    confirmed = "confirmed"
    #: never seen at its settled offset (see :class:`Subkind`)
    lost = "lost"
    #: seen at its offset, later another record (or none) is there
    lost_after_seen = "lost_after_seen"
    #: an annotation: the stamp sits at two or more offsets of the log
    duplicate = "duplicate"
    #: an annotation: a lower seq of the same producer run sits at a higher offset
    reordered = "reordered"
    #: the delivery report failed; the record is ``present`` or ``absent``
    indeterminate = "indeterminate"
    #: the cluster refused the write (``NOT_ENOUGH_REPLICAS`` and kin): never a loss
    rejected = "rejected"
    #: retention or compaction removed it before it could be checked: never a loss
    unverified = "unverified"
    #: acknowledged, but its producer's ack ledger could record its delivery report
    #: nowhere (the spool's disk full while the warehouse was out of reach, past what it
    #: holds in memory): never judged, counted apart from the judged writes (it is not in
    #: ``acks``). From the ledger's own account (its commits' notes), never from the rules
    unrecorded = "unrecorded"


class Subkind(StrEnum):
    overwritten = "overwritten"  # lost: another record sits at the acked offset
    vanished = "vanished"  # lost: no record there, and the frontier is past it
    present = "present"  # indeterminate: failed, yet in the log
    absent = "absent"  # indeterminate: failed and not in the log (a failed write)
    retention = "retention"  # unverified: below the log start before it was read
    compacted = "compacted"  # unverified: removed by the log cleaner


class Cause(StrEnum):
    """The likely cause of a loss, from the evidence only."""

    acks1_failover = "acks=1 fail-over"
    isr_shrunk = "ISR shrunk to leader then leader lost"
    unclean_election = "unclean election"
    #: acknowledged by a leader a newer one had already replaced (it kept accepting
    #: writes): a loss inside a split-brain window (``jobs/core/windows.py``)
    isolated_leader = "isolated leader (split brain)"
    #: every in-sync replica lost the write at once (a power cut): the partition went
    #: offline from a full ISR, or a leader elected from the ISR that held an acks=all
    #: write came back without it
    simultaneous_crash = "simultaneous crash"
    #: a replica came back with less than it had acknowledged: its log end went back to 0,
    #: or the sole in-sync replica was elected again without the write
    disk_loss = "disk loss"
    #: RabbitMQ (``jobs/core/rabbit_rules.py``): a message published without the
    #: persistent flag, and the node that led its queue restarted
    transient_restart = "non-persistent message across a restart"
    #: a partition's losing side (``cluster_partition_handling=autoheal``, or by hand) was
    #: restarted: what its queue leader took during the partition is gone
    partition_loser = "partition loser restarted"
    #: ``ha-promote-on-failure=always``: a mirror that did not hold every message was
    #: promoted master
    unsynced_promotion = "unsynchronised mirror promoted"
    #: the queue ceased to exist (its node forgotten, or deleted)
    queue_lost = "queue lost with its node"
    unknown = "unknown"


#: how long before a write's ack a leader change may still be the one that lost it: the
#: watcher's observations lag the change itself (it polls every watch interval), and a
#: producer's ack time is when its delivery report was handled, which can trail the
#: broker's answer. The rules' cause and the API's "the change that lost it" both use it.
CAUSE_SLACK = timedelta(seconds=5)


def cause_name(cause: str) -> str:
    """A finding's cause without what qualifies it: ``acks=1 fail-over (watcher blind
    11:51:18-11:51:28)`` and ``unknown: watcher blind ...`` name ``acks=1 fail-over`` and
    ``unknown``. The watcher goes blind for a few seconds when the broker it asks dies;
    the cause still holds, and the gap is said beside it."""
    for known in sorted(Cause, key=len, reverse=True):
        if cause.startswith(known):
            return str(known)
    return cause


#: verdicts that are a loss of an acknowledged write
LOSSES = frozenset({Kind.lost, Kind.lost_after_seen})
#: verdicts given beside a write's own verdict, counted apart from it
ANNOTATIONS = frozenset({Kind.duplicate, Kind.reordered})
#: writes the judgement never saw (their delivery reports were not recorded): counted
#: apart, like the annotations, never among the verdicts on the ledger's writes
UNJUDGED = frozenset({Kind.unrecorded})
#: the verdicts on a recorded write: each recorded write gets exactly one, in time
PRIMARY = tuple(k for k in Kind if k not in ANNOTATIONS and k not in UNJUDGED)
#: the sub-kinds each kind may carry (a kind not named here carries none)
SUBKINDS = {Kind.lost: (Subkind.overwritten, Subkind.vanished),
            Kind.indeterminate: (Subkind.present, Subkind.absent),
            Kind.unverified: (Subkind.retention, Subkind.compacted)}

#: librdkafka error names with which the cluster refused a write (it chose consistency):
#: an availability event, ``rejected``, never a loss
REJECTING_ERRORS = frozenset({
    "NOT_ENOUGH_REPLICAS", "POLICY_VIOLATION", "INVALID_REQUIRED_ACKS",
    "MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD",
    "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "UNKNOWN_TOPIC_OR_PART",
    "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "INVALID_MSG_SIZE", "_MSG_TIMED_OUT_QUEUED",
    # RabbitMQ (producers/rabbit.py): a nack (the broker did not take the message) and a
    # mandatory message returned unrouted
    "NACK", "RETURNED",
})
