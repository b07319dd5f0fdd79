"""Windows and upkeep: the windows of risk computed from the events and findings
(``windows_job``), the tables compacted and vacuumed (``maintenance``)."""
