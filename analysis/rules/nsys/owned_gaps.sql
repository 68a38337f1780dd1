-- Every idle gap of every GPU unit with the one rule that owns it (precedence documented in gaps.py).
-- Reads the temp tables _gp_gaps (gaps with their blocking call), a runs table and a low-window table.
WITH uw AS (SELECT DISTINCT pid, device, u0, w FROM {low}),
gk AS (
    -- The window each gap starts in, so the low windows join on equality (a hash join, not a scan).
    SELECT g.*, (g.gap_start - uw.u0) // uw.w AS k
    FROM _gp_gaps g LEFT JOIN uw ON uw.pid = g.pid AND uw.device = g.device
)
SELECT g.pid, g.device, g.gap_start, g.gap_end, g.gap_ns,
       CASE
           WHEN g.by_sync THEN 'SYNC001'
           WHEN g.by_copy THEN 'MEM002'
           WHEN g.gap_ns >= $min_gap_ns THEN 'GPU001'
           WHEN r.run_end >= g.gap_end THEN 'KRN001'
           WHEN low.k IS NOT NULL THEN 'GPU002'
       END AS owner,
       CASE WHEN r.run_end >= g.gap_end THEN r.run_id END AS run_id,
       low.k AS window_k
FROM gk g
ASOF LEFT JOIN {runs} r ON g.pid = r.pid AND g.device = r.device AND g.gap_start >= r.run_start
LEFT JOIN {low} low ON low.pid = g.pid AND low.device = g.device AND low.k = g.k
