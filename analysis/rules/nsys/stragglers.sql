-- Collective instances matched across participants by (kernel name, occurrence), on one time base.
-- The placeholder below is the union of each participant report's NCCL kernels (part, pid, device, name, t).
WITH p AS ({parts}),
inst AS (
    SELECT part, pid, device, name, t,
           ROW_NUMBER() OVER (PARTITION BY part, pid, name ORDER BY t) AS k
    FROM p
),
n AS (SELECT COUNT(*) AS n FROM (SELECT DISTINCT part, pid FROM p)),
complete AS (
    -- Only instances every participant reached can be compared.
    SELECT name, k FROM inst GROUP BY name, k HAVING COUNT(*) = (SELECT n FROM n)
),
inst_last AS (
    SELECT i.name, i.k, MIN(i.t) AS first_t, MAX(i.t) AS last_t, MAX(i.t) - MIN(i.t) AS skew,
           arg_max(i.part, i.t) AS last_part, arg_max(i.pid, i.t) AS last_pid, arg_max(i.device, i.t) AS device,
           SUM(i.t) AS sum_t, COUNT(*) AS cnt
    FROM inst i SEMI JOIN complete c ON c.name = i.name AND c.k = i.k
    GROUP BY i.name, i.k
),
per_part AS (
    SELECT pp.part, pp.pid,
           COUNT(*) FILTER (WHERE il.skew >= $min_skew_ns AND il.last_part = pp.part AND il.last_pid = pp.pid)
               AS times_last,
           COALESCE(SUM(il.skew) FILTER (WHERE il.skew >= $min_skew_ns AND il.last_part = pp.part
                                        AND il.last_pid = pp.pid), 0) AS skew_when_last,
           COALESCE(SUM(il.last_t - i.t) FILTER (WHERE il.skew >= $min_skew_ns), 0) AS waited,
           -- What the others waited for this participant when it came last (summed over them).
           COALESCE(SUM(il.last_t * il.cnt - il.sum_t) FILTER (WHERE il.skew >= $min_skew_ns
                    AND il.last_part = pp.part AND il.last_pid = pp.pid), 0) AS imposed
    FROM (SELECT DISTINCT part, pid FROM p) pp
    JOIN inst i ON i.part = pp.part AND i.pid = pp.pid
    JOIN inst_last il ON il.name = i.name AND il.k = i.k
    GROUP BY pp.part, pp.pid
)
