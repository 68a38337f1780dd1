-- A cause for each gap of {owned} (one rule's gaps), from what the process's launching threads did during it:
-- OS runtime calls or CUDA API work covering at least half the gap, else no recorded activity.
WITH gg AS (SELECT * FROM {owned}),
launchers AS (
    SELECT DISTINCT pid, tid FROM kernels WHERE tid IS NOT NULL
    UNION SELECT DISTINCT pid, tid FROM memcpy WHERE tid IS NOT NULL
    UNION SELECT DISTINCT pid, tid FROM memset WHERE tid IS NOT NULL
),
os AS (
    SELECT gg.pid, gg.device, gg.gap_start,
           SUM(LEAST(o.end_ns, gg.gap_end) - GREATEST(o.start_ns, gg.gap_start)) AS cov,
           arg_max(o.name, LEAST(o.end_ns, gg.gap_end) - GREATEST(o.start_ns, gg.gap_start)) AS top
    FROM gg JOIN osrt o ON o.pid = gg.pid AND o.start_ns < gg.gap_end AND o.end_ns > gg.gap_start
    SEMI JOIN launchers l ON l.pid = o.pid AND l.tid = o.tid
    GROUP BY ALL
),
api AS (
    SELECT gg.pid, gg.device, gg.gap_start,
           SUM(LEAST(a.end_ns, gg.gap_end) - GREATEST(a.start_ns, gg.gap_start)) AS cov,
           arg_max(a.name, LEAST(a.end_ns, gg.gap_end) - GREATEST(a.start_ns, gg.gap_start)) AS top
    FROM gg JOIN cuda_api a ON a.pid = gg.pid AND a.start_ns < gg.gap_end AND a.end_ns > gg.gap_start
    SEMI JOIN launchers l ON l.pid = a.pid AND l.tid = a.tid
    GROUP BY ALL
)
SELECT gg.pid, gg.device, gg.gap_start, gg.gap_end, gg.gap_ns,
       CASE WHEN COALESCE(os.cov, 0) >= COALESCE(api.cov, 0) AND COALESCE(os.cov, 0) * 2 >= gg.gap_ns
                THEN 'os_runtime'
            WHEN COALESCE(api.cov, 0) * 2 >= gg.gap_ns THEN 'cuda_api'
            ELSE 'no_activity' END AS cause,
       CASE WHEN COALESCE(os.cov, 0) >= COALESCE(api.cov, 0) AND COALESCE(os.cov, 0) * 2 >= gg.gap_ns
                THEN os.top
            WHEN COALESCE(api.cov, 0) * 2 >= gg.gap_ns THEN api.top END AS cause_name
FROM gg
LEFT JOIN os ON os.pid = gg.pid AND os.device = gg.device AND os.gap_start = gg.gap_start
LEFT JOIN api ON api.pid = gg.pid AND api.device = gg.device AND api.gap_start = gg.gap_start
