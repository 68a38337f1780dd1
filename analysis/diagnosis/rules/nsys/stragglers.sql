-- Collective instances matched across participants by (kernel name, occurrence), on the run's time base.
-- Three statements, separated by the marker line below, run in order on the run's connection:
-- the complete instances, then one row per instance, then one row per participant.
-- {parts} is the union of each participant report's NCCL kernels (part, pid, device, name, t, inw), t in HUGEINT
-- (session-relative time + the report's offset); every sum below is of differences, never of times.
CREATE OR REPLACE TEMP TABLE _gp_comm_inst AS
WITH p AS ({parts}),
inst AS (
    SELECT part, pid, device, name, t, inw,
           ROW_NUMBER() OVER (PARTITION BY part, pid, name ORDER BY t) AS k
    FROM p
),
n AS (SELECT COUNT(*) AS n FROM (SELECT DISTINCT part, pid FROM p)),
complete AS (
    -- Only instances every participant reached can be compared, and only those inside the analysis window
    -- (every participant's kernel of the instance in its report's window; occurrences are numbered over
    -- the whole reports, so the window never changes which kernels are matched).
    SELECT name, k FROM inst GROUP BY name, k HAVING COUNT(*) = (SELECT n FROM n) AND BOOL_AND(inw)
)
SELECT i.*, MAX(i.t) OVER (PARTITION BY i.name, i.k) AS last_t
FROM inst i SEMI JOIN complete c ON c.name = i.name AND c.k = i.k;
-- next statement
CREATE OR REPLACE TEMP TABLE _gp_comm_last AS
SELECT name, k, MIN(t) AS first_t, MAX(t) AS last_t, MAX(t) - MIN(t) AS skew,
       arg_max({'part': part, 'pid': pid, 'device': device}, t) AS who,
       -- What the others waited for the last one here (summed over them).
       SUM(last_t - t) AS waits
FROM _gp_comm_inst GROUP BY name, k;
-- next statement
CREATE OR REPLACE TEMP TABLE _gp_comm_part AS
SELECT i.part, i.pid,
       COUNT(*) FILTER (WHERE l.skew >= $min_skew_ns AND l.who.part = i.part AND l.who.pid = i.pid) AS times_last,
       COALESCE(SUM(l.skew) FILTER (WHERE l.skew >= $min_skew_ns AND l.who.part = i.part
                                    AND l.who.pid = i.pid), 0) AS skew_when_last,
       COALESCE(SUM(l.last_t - i.t) FILTER (WHERE l.skew >= $min_skew_ns), 0) AS waited,
       COALESCE(SUM(l.waits) FILTER (WHERE l.skew >= $min_skew_ns AND l.who.part = i.part
                                     AND l.who.pid = i.pid), 0) AS imposed
FROM _gp_comm_inst i JOIN _gp_comm_last l ON l.name = i.name AND l.k = i.k
GROUP BY i.part, i.pid
