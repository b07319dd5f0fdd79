"""The kinds of cluster event and of window, declared once.

The watcher (``jobs/watcher/watcher.py``, ``jobs/watcher/metadata_log.py``) writes the event
kinds to ``cluster_events``; the windows job (``jobs/upkeep/windows_job.py``, by the rules of
``jobs/core/windows.py``) writes the window kinds to ``windows``. The verdict rules read
them; the tables' docs (``schemas/tables.py``, hence
``deploy/sql/TABLES.md``) and the API's enums are derived from :data:`EVENTS` and
:data:`WINDOWS`, and ``tests/unit/test_kinds.py`` proves that they agree and that the
watcher names no other kind.

Each kind is a plain ``str`` (the value stored in the tables). Which window a write fell
in (:mod:`kafka_audit.schemas.windows`) is declared beside this, where both the windows
job and the API read it.
"""

from __future__ import annotations

__all__ = ["EVENTS", "EVENT_KINDS", "WINDOWS", "WINDOW_KINDS", "LEADER_CHANGES", "CLUSTER_WIDE",
           "METADATA_LOG", "ZOOKEEPER_STATE", "EXACT_SOURCES",
           "FIRST_SEEN", "LEADER_CHANGE", "LEADER_REELECTED", "OFFLINE", "UNCLEAN_ELECTION",
           "ELR_ELECTION",
           "ISR_SHRINK", "ISR_EXPAND", "UNDER_MIN_ISR_ENTER", "UNDER_MIN_ISR_EXIT",
           "ISR_ALONE_ENTER", "ISR_ALONE_EXIT", "BLIND", "LOG_END_DROP", "TOPIC_CONFIG",
           "TOPIC_CONFIG_CHANGE", "BROKER_FENCED", "BROKER_UNFENCED", "CONTROLLER_CHANGE",
           "SPLIT_BRAIN", "SPLIT_BRAIN_END", "EPOCH_END", "RABBIT_NODE_DOWN",
           "RABBIT_NODE_UP", "RABBIT_PARTITION", "RABBIT_PARTITION_END", "RABBIT_QUEUE_GONE",
           "EXPOSURE", "REDUCED_REDUNDANCY", "REJECTION", "SPLIT_BRAIN_WINDOW",
           "LEADER_CHANGE_WINDOW", "kinds_doc"]

# ---- cluster events: the ``kind`` of a ``cluster_events`` row ----

LEADER_CHANGE = "leader_change"
#: the same leader at a newer epoch (fenced or restarted, elected again between polls)
LEADER_REELECTED = "leader_reelected"
ISR_SHRINK = "isr_shrink"
ISR_EXPAND = "isr_expand"
OFFLINE = "offline"
UNDER_MIN_ISR_ENTER, UNDER_MIN_ISR_EXIT = "under_min_isr_enter", "under_min_isr_exit"
ISR_ALONE_ENTER, ISR_ALONE_EXIT = "isr_alone_enter", "isr_alone_exit"
UNCLEAN_ELECTION = "unclean_election"
#: the new leader came from the partition's eligible leader replicas (KIP-966, Kafka 4.x):
#: not in the ISR, yet holding every committed write; a clean election the classic rules
#: would take for an unclean one
ELR_ELECTION = "elr_election"
FIRST_SEEN = "first_seen"
#: a gap in the watcher's observation (``jobs/watcher/watcher.py``): nothing was seen in it
BLIND = "watcher_blind"
#: a partition's log end (high watermark) went back: acknowledged data left the log
LOG_END_DROP = "log_end_drop"
TOPIC_CONFIG, TOPIC_CONFIG_CHANGE = "topic_config", "topic_config_change"
#: a broker left the cluster's live set (fenced, or registered anew: a restart); with
#: ``broker_unfenced``, rows of the whole cluster (topic '', partition -1, ``broker``),
#: given to every partition's events like :data:`BLIND` gaps
BROKER_FENCED, BROKER_UNFENCED = "broker_fenced", "broker_unfenced"
CONTROLLER_CHANGE = "controller_change"
#: two brokers each named themselves leader of the partition (the watcher's per-broker
#: views, ``jobs/watcher/broker_views.py``), from ``SPLIT_BRAIN`` to ``SPLIT_BRAIN_END``
SPLIT_BRAIN, SPLIT_BRAIN_END = "split_brain_enter", "split_brain_exit"
#: where the old leader's epoch ends in the new leader's log (``jobs/watcher/epoch_ends.py``):
#: what the old leader acknowledged in that epoch at or above it is truncated
EPOCH_END = "epoch_end"

#: RabbitMQ (``jobs/watcher/rabbit_watcher.py``): written under each watched queue's key,
#: never cluster-wide. A node stopped or started running as the others see it, a node said
#: it is cut off from others and no longer, a watched queue no longer exists
RABBIT_NODE_DOWN, RABBIT_NODE_UP = "rabbit_node_down", "rabbit_node_up"
RABBIT_PARTITION, RABBIT_PARTITION_END = "rabbit_partition", "rabbit_partition_end"
RABBIT_QUEUE_GONE = "rabbit_queue_gone"

#: every kind of cluster event, with what it says (the ``cluster_events`` table's docs)
EVENTS: dict[str, str] = {
    LEADER_CHANGE: "another broker leads the partition",
    LEADER_REELECTED: "the same leader at a newer epoch",
    ISR_SHRINK: "a replica left the ISR",
    ISR_EXPAND: "a replica joined the ISR",
    OFFLINE: "no leader",
    UNDER_MIN_ISR_ENTER: "the ISR fell below min.insync.replicas",
    UNDER_MIN_ISR_EXIT: "the ISR reached min.insync.replicas again",
    ISR_ALONE_ENTER: "the ISR became the leader alone on a replicated partition",
    ISR_ALONE_EXIT: "the ISR is no longer the leader alone",
    UNCLEAN_ELECTION: "the new leader was not in the ISR before and nothing of that ISR is "
                      "in the new one (nor among the eligible leader replicas); from the "
                      "metadata log also every election Kafka marks unclean (leader "
                      "recovery state RECOVERING: with the ISR and the eligible replicas "
                      "empty, the last known leader back, even with unclean election off)",
    ELR_ELECTION: "the new leader came from the eligible leader replicas (KIP-966), not the "
                  "ISR: it held every committed write, a clean election",
    FIRST_SEEN: "the watcher saw the partition for the first time",
    BLIND: "a gap: nothing was observed from event_time to until; topic '' and partition -1",
    LOG_END_DROP: "the log end went back",
    TOPIC_CONFIG: "the topic's durability settings as read, in detail",
    TOPIC_CONFIG_CHANGE: "a durability setting of the topic changed, in detail",
    BROKER_FENCED: "a broker left the live set; topic '' and partition -1",
    BROKER_UNFENCED: "a broker rejoined the live set; topic '' and partition -1",
    CONTROLLER_CHANGE: "another controller is active; topic '' and partition -1",
    SPLIT_BRAIN: "two brokers each named themselves leader: leader the newer, "
                 "previous_leader the older",
    SPLIT_BRAIN_END: "no longer two leaders",
    RABBIT_NODE_DOWN: "RabbitMQ: a node stopped running as the others see it (leader: "
                      "the node; detail: its name)",
    RABBIT_NODE_UP: "RabbitMQ: a node runs again (leader: the node; detail: restarted, "
                    "what it held only in memory gone)",
    RABBIT_PARTITION: "RabbitMQ: a node said it is cut off from others (detail: "
                      "partitions)",
    RABBIT_PARTITION_END: "RabbitMQ: the node no longer says so",
    RABBIT_QUEUE_GONE: "RabbitMQ: the watched queue no longer exists",
    EPOCH_END: "after a leader change, where the old leader's epoch (leader_epoch, led by "
               "previous_leader) ends in the log of the broker asked (leader): log_end; "
               "the old leader's writes of that epoch at or above it are truncated",
}
EVENT_KINDS = tuple(EVENTS)

#: the events that replace a partition's leader (or leave it without one, or elect it anew)
LEADER_CHANGES = (LEADER_CHANGE, OFFLINE, LEADER_REELECTED)
#: the cluster-wide rows every partition's evidence includes
CLUSTER_WIDE = (BLIND, BROKER_FENCED, BROKER_UNFENCED)
#: the source of events read from the KRaft metadata log: at the controller's own time, in
#: its order (a polled event is seen up to a poll late)
METADATA_LOG = "kraft:metadata_log"
#: the source of events read from a ZooKeeper-era cluster's state in ZooKeeper: at the time
#: the controller's write landed there (before any broker acts on it), in its order
ZOOKEEPER_STATE = "zookeeper"
#: the sources whose times are the controller's own, not a poll's
EXACT_SOURCES = (METADATA_LOG, ZOOKEEPER_STATE)

# ---- windows: the ``kind`` of a ``windows`` row (``jobs/core/windows.py``) ----

SPLIT_BRAIN_WINDOW = "split_brain"
EXPOSURE = "exposure"
REJECTION = "rejection"
REDUCED_REDUNDANCY = "reduced_redundancy"
LEADER_CHANGE_WINDOW = LEADER_CHANGE

#: every kind of window, the most telling first (the order a write's window is chosen
#: in), with what it says (the ``windows`` table's docs)
WINDOWS: dict[str, str] = {
    SPLIT_BRAIN_WINDOW: "two brokers acted as leader",
    EXPOSURE: "the ISR below min.insync.replicas, or the leader alone",
    REJECTION: "producers were refused for want of replicas",
    REDUCED_REDUNDANCY: "a replica out of the ISR",
    LEADER_CHANGE_WINDOW: "the leader changed or there was none, until one is named again",
}
WINDOW_KINDS = tuple(WINDOWS)


def kinds_doc(kinds: dict[str, str]) -> str:
    """The docs of a ``kind`` column: each kind with what it says."""
    return " | ".join(f"{k} ({meaning})" for k, meaning in kinds.items())
