-- Every idle gap of every GPU unit with the one rule that owns it (precedence documented in gaps.py),
-- built in one statement so that the one large table (a row per gap) is written once.
-- Placeholders: the gap pairing, the sync-call name filter (an IN-list), the blocking copy calls,
-- and the runs table for these params.
-- Gaps left unowned here may still be GPU002's (it decides last, from this table).
-- Only integer columns travel through the joins (gap_ns is derived at the end).
WITH g AS (SELECT pid, device, gap_start, gap_end FROM ({gaps})),
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
gs AS MATERIALIZED (
    SELECT g.*, COALESCE(s.reach >= g.gap_start, FALSE) AS by_sync
    FROM g ASOF LEFT JOIN syncs s ON g.pid = s.pid AND g.gap_start >= s.start_ns
),
-- Each later test runs only on the gaps the earlier ones leave (an ASOF join sorts all its input, so
-- testing every gap against the copies and the runs cost more than the rest of the statement).
gc AS MATERIALIZED (
    SELECT gs.*, COALESCE(c.reach >= gs.gap_start, FALSE) AS by_copy
    FROM (SELECT * FROM gs WHERE NOT by_sync) gs ASOF LEFT JOIN copies c ON gs.pid = c.pid AND gs.gap_start >= c.start_ns
)
-- Owner codes: gaps.OWNER_CODES (a small int per row, not text); ``run_id`` is read for KRN001's gaps only.
SELECT pid, device, gap_start, gap_end, gap_end - gap_start AS gap_ns, 1::UTINYINT AS owner, NULL::BIGINT AS run_id  -- SYNC001
FROM gs WHERE by_sync
UNION ALL
SELECT pid, device, gap_start, gap_end, gap_end - gap_start,
       CASE WHEN by_copy THEN 2 ELSE 3 END::UTINYINT,  -- MEM002, else GPU001
       NULL::BIGINT
FROM gc WHERE by_copy OR gap_end - gap_start >= $min_gap_ns
UNION ALL
SELECT g.pid, g.device, g.gap_start, g.gap_end, g.gap_end - g.gap_start,
       CASE WHEN r.run_end >= g.gap_end THEN 4 END::UTINYINT,  -- KRN001, else unowned (maybe GPU002's)
       CASE WHEN r.run_end >= g.gap_end THEN r.run_id END
FROM (SELECT * FROM gc WHERE NOT (by_copy OR gap_end - gap_start >= $min_gap_ns)) g
ASOF LEFT JOIN {runs} r ON g.pid = r.pid AND g.device = r.device AND g.gap_start >= r.run_start
