-- Time unified-memory migrations run while no kernel runs on the same (pid, device): a sweep line.
WITH ev AS (
    SELECT pid, device, start_ns AS t, 1 AS du, 0 AS dk FROM memcpy WHERE copy_kind LIKE 'UVM%'
    UNION ALL SELECT pid, device, end_ns, -1, 0 FROM memcpy WHERE copy_kind LIKE 'UVM%'
    UNION ALL SELECT pid, device, start_ns, 0, 1 FROM kernels
    UNION ALL SELECT pid, device, end_ns, 0, -1 FROM kernels
),
seg AS (
    -- Same sweep as analysis.intervals.SEGMENTS_SQL: one global sort, zero-length tie segments dropped.
    SELECT pid, device, LEAD(t) OVER w - t AS len, LEAD(pid) OVER w AS np, LEAD(device) OVER w AS nd,
           SUM(du) OVER w AS nu, SUM(dk) OVER w AS nk
    FROM ev WINDOW w AS (ORDER BY pid, device, t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT COALESCE(SUM(len), 0) FROM seg
WHERE nu > 0 AND nk = 0 AND len > 0 AND np IS NOT DISTINCT FROM pid AND nd IS NOT DISTINCT FROM device
