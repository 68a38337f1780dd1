-- Every idle gap of every GPU unit with the one rule that owns it (precedence documented in gaps.py).
-- Reads the temp tables _gp_gaps (gaps with their blocking call), a runs table and a low-window table.
SELECT g.pid, g.device, g.gap_start, g.gap_end, g.gap_ns, g.sync_name, g.copy_name,
       CASE
           WHEN g.sync_name IS NOT NULL THEN 'SYNC001'
           WHEN g.copy_name IS NOT NULL THEN 'MEM002'
           WHEN g.gap_ns >= $min_gap_ns THEN 'GPU001'
           WHEN r.run_end >= g.gap_end THEN 'KRN001'
           WHEN low.k IS NOT NULL THEN 'GPU002'
       END AS owner,
       CASE WHEN r.run_end >= g.gap_end THEN r.run_id END AS run_id,
       low.k AS window_k
FROM _gp_gaps g
ASOF LEFT JOIN {runs} r ON g.pid = r.pid AND g.device = r.device AND g.gap_start >= r.run_start
LEFT JOIN {low} low ON low.pid = g.pid AND low.device = g.device
     AND low.k = (g.gap_start - low.u0) // low.w
