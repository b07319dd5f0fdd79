"""The application floor: the ``kafka-audit`` command (``cli``), the supervised service
(``service``, ``api_process``), the cluster check (``preflight``, ``Preflight.java``), the
generated references (``docgen``, ``sql_layouts``) and process memory (``memstats``). It may
import every part; nothing below it imports it."""
