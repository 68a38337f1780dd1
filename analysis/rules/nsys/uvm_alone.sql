-- Time unified-memory migrations run while no kernel runs on the same (pid, device): a sweep line.
WITH ev AS (
    SELECT pid, device, start_ns AS t, 1 AS du, 0 AS dk FROM memcpy WHERE copy_kind LIKE 'UVM%'
    UNION ALL SELECT pid, device, end_ns, -1, 0 FROM memcpy WHERE copy_kind LIKE 'UVM%'
    UNION ALL SELECT pid, device, start_ns, 0, 1 FROM kernels
    UNION ALL SELECT pid, device, end_ns, 0, -1 FROM kernels
),
agg AS (SELECT pid, device, t, SUM(du) AS du, SUM(dk) AS dk FROM ev GROUP BY ALL),
seg AS (
    SELECT LEAD(t) OVER w - t AS len,
           SUM(du) OVER (PARTITION BY pid, device ORDER BY t ROWS UNBOUNDED PRECEDING) AS nu,
           SUM(dk) OVER (PARTITION BY pid, device ORDER BY t ROWS UNBOUNDED PRECEDING) AS nk
    FROM agg WINDOW w AS (PARTITION BY pid, device ORDER BY t)
)
SELECT COALESCE(SUM(len), 0) FROM seg WHERE nu > 0 AND nk = 0 AND len > 0
