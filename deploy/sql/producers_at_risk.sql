-- Producers at risk: durability settings that allow an anomaly (schemas/policy.py: acks=0/1
-- allows losses; retries without idempotence allows duplicates, and with more than one
-- request in flight reorders), their writes, and what the audit found: allowed anomalies
-- are still reported; a loss with acks=all is a violation (the cluster broke its promise).
WITH settings AS (
  SELECT producer_id, run_id, acks, idempotence, retries, max_in_flight,
         SUM(count) AS writes
  FROM acks
  GROUP BY producer_id, run_id, acks, idempotence, retries, max_in_flight
),
found AS (
  SELECT producer_id, run_id,
         SUM(CASE WHEN kind IN ('lost', 'lost_after_seen') THEN count ELSE 0 END) AS lost,
         SUM(CASE WHEN kind = 'duplicate' THEN count ELSE 0 END) AS duplicates,
         SUM(CASE WHEN kind = 'reordered' THEN count ELSE 0 END) AS reordered
  FROM findings
  WHERE pass_id <= (SELECT MAX(h.pass_id) FROM audit_hot h WHERE h.kind = 'progress')
  GROUP BY producer_id, run_id
)
SELECT s.producer_id,
       s.acks,
       s.idempotence,
       s.retries,
       s.max_in_flight,
       COUNT(*) AS runs,
       SUM(s.writes) AS writes,
       s.acks IN ('0', '1') AS loss_allowed,
       (NOT s.idempotence AND s.retries > 0) AS duplicates_allowed,
       (NOT s.idempotence AND s.retries > 0 AND s.max_in_flight > 1) AS reorders_allowed,
       SUM(COALESCE(f.lost, 0)) AS lost,
       SUM(COALESCE(f.duplicates, 0)) AS duplicates,
       SUM(COALESCE(f.reordered, 0)) AS reordered,
       SUM(CASE WHEN s.acks IN ('0', '1') THEN 0 ELSE COALESCE(f.lost, 0) END) AS lost_violating
FROM settings s
LEFT JOIN found f ON f.producer_id = s.producer_id AND f.run_id = s.run_id
GROUP BY s.producer_id, s.acks, s.idempotence, s.retries, s.max_in_flight
HAVING s.acks IN ('0', '1') OR (NOT s.idempotence AND s.retries > 0)
    OR SUM(COALESCE(f.lost, 0)) > 0
ORDER BY lost_violating DESC, lost DESC, writes DESC, s.producer_id
