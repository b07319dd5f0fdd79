-- Acknowledged writes lost, per topic and day (of their ack, in the session's time zone:
-- set it to UTC), from committed audit passes only (a pass that died before its commit
-- point may have left findings behind; the latest progress row names the committed pass).
SELECT f.topic,
       CAST(f.ack_time AS DATE) AS day,
       SUM(f.count) AS lost_writes,
       SUM(CASE WHEN f.kind = 'lost_after_seen' THEN f.count ELSE 0 END) AS lost_after_seen,
       COUNT(*) AS finding_rows,
       MIN(f.ack_time) AS first_lost_ack,
       MAX(f.ack_time) AS last_lost_ack
FROM findings f
WHERE f.kind IN ('lost', 'lost_after_seen')
  AND f.pass_id <= (SELECT MAX(h.pass_id) FROM audit_hot h WHERE h.kind = 'progress')
GROUP BY f.topic, CAST(f.ack_time AS DATE)
ORDER BY day, f.topic
