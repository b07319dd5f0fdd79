"""The audit job: acks joined against what was consumed, judged by the core (``audit_job``
the loop, ``audit_pass`` one pass, ``hot_state`` the open partitions, ``lookups`` and
``reread`` the checks against the cluster, ``quality`` the tables' expectations)."""
