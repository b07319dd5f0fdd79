-- Exposure time per partition: how long its ISR was the leader alone (or empty) on a
-- replicated partition, as the watcher observed it (cluster_events). Each observation
-- holds until the next one of the same partition; the last one holds until now.
-- An acks=1 write, or an acks=all write with min.insync.replicas=1, acknowledged then
-- sat on one replica. unix_micros() is Spark's; setup_duckdb.sql defines it for DuckDB.
WITH observed AS (
  SELECT topic,
         partition,
         event_time,
         cardinality(isr) AS isr_size,
         cardinality(replicas) AS replicas,
         LEAD(event_time) OVER (PARTITION BY topic, partition ORDER BY event_time) AS next_time
  FROM cluster_events
  WHERE isr IS NOT NULL AND partition >= 0
)
SELECT topic,
       partition,
       ROUND(SUM(unix_micros(COALESCE(next_time, CURRENT_TIMESTAMP))
                 - unix_micros(event_time)) / 1000000.0, 3) AS exposed_seconds,
       COUNT(*) AS exposed_observations,
       MIN(event_time) AS first_exposed,
       MAX(event_time) AS last_exposed
FROM observed
WHERE isr_size < 2 AND (replicas IS NULL OR replicas > 1)
GROUP BY topic, partition
ORDER BY exposed_seconds DESC, topic, partition
