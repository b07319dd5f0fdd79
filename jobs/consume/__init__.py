"""The consume job: what is really in the topics, read by Spark's Kafka source into the
``consumed`` table (``consume_job``, ``transforms``), with its Java read-run fold
(``ReadRuns.java``)."""
