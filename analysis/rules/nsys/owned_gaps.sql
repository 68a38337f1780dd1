-- Every idle gap of every GPU unit with the one rule that owns it (precedence documented in gaps.py),
-- built in one statement so that the one large table (a row per gap) is written once.
-- Placeholders: the gap pairing, the sync-call name filter (an IN-list), the blocking copy calls,
-- and the runs table for these params.
-- Gaps left unowned here may still be GPU002's (it decides last, from this table).
WITH g AS ({gaps}),
syncs AS (
    -- The running maximum of call ends lets one ASOF join answer "was any call, started before the
    -- gap opened, still running then?" exactly, even with calls on several threads.
    SELECT pid, start_ns,
           MAX(end_ns) OVER (PARTITION BY pid ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS reach
    FROM cuda_api WHERE {sync_filter}
),
copies AS (
    SELECT pid, start_ns,
           MAX(end_ns) OVER (PARTITION BY pid ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS reach
    FROM {copies}
),
gs AS (
    SELECT g.*, COALESCE(s.reach >= g.gap_start, FALSE) AS by_sync
    FROM g ASOF LEFT JOIN syncs s ON g.pid = s.pid AND g.gap_start >= s.start_ns
),
gc AS (
    SELECT gs.*, COALESCE(c.reach >= gs.gap_start, FALSE) AS by_copy
    FROM gs ASOF LEFT JOIN copies c ON gs.pid = c.pid AND gs.gap_start >= c.start_ns
)
SELECT g.pid, g.device, g.gap_start, g.gap_end, g.gap_ns,
       CASE
           WHEN g.by_sync THEN 1          -- SYNC001 (codes: gaps.OWNER_CODES; a small int per row, not text)
           WHEN g.by_copy THEN 2          -- MEM002
           WHEN g.gap_ns >= $min_gap_ns THEN 3  -- GPU001
           WHEN r.run_end >= g.gap_end THEN 4   -- KRN001
       END::UTINYINT AS owner,
       CASE WHEN r.run_end >= g.gap_end THEN r.run_id END AS run_id
FROM gc g
ASOF LEFT JOIN {runs} r ON g.pid = r.pid AND g.device = r.device AND g.gap_start >= r.run_start
