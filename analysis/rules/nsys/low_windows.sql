-- Windows of each GPU unit whose busy share is under $max_busy_pct. Window length is sized to the
-- unit's span: span / $max_windows, but never shorter than $win_min_ns. Idle comes from the gap pairing.
WITH win AS (
    SELECT pid, device, start_ns AS u0, end_ns AS u1,
           GREATEST($win_min_ns, CAST(CEIL(span_ns / $max_windows) AS BIGINT)) AS w
    FROM _gp_units WHERE span_ns > 0
),
gw AS (
    SELECT g.pid, g.device, g.gap_start, g.gap_end, win.u0, win.u1, win.w,
           UNNEST(range((g.gap_start - win.u0) // win.w, (g.gap_end - 1 - win.u0) // win.w + 1)) AS k
    FROM ({gaps}) g JOIN win ON win.pid = g.pid AND win.device = g.device
),
per AS (
    SELECT pid, device, k, ANY_VALUE(u0) + k * ANY_VALUE(w) AS win_start,
           LEAST(ANY_VALUE(u1), ANY_VALUE(u0) + (k + 1) * ANY_VALUE(w)) AS win_end,
           ANY_VALUE(u0) AS u0, ANY_VALUE(w) AS w,
           SUM(LEAST(gap_end, u0 + (k + 1) * w) - GREATEST(gap_start, u0 + k * w)) AS idle_ns
    FROM gw GROUP BY pid, device, k
)
SELECT pid, device, k, win_start, win_end, u0, w, idle_ns,
       100.0 * (1 - idle_ns / (win_end - win_start)) AS busy_pct
FROM per
WHERE win_end > win_start AND 100.0 * (1 - idle_ns / (win_end - win_start)) < $max_busy_pct
