-- KRN003: groups of the same compute kernel (process, device, name, grid, block) and their durations'
-- p10/p50/p90 (quantile_disc: the value at rank floor(q * (n - 1)) of the sorted durations). A group is
-- judged when it has at least $min_n instances and a median of at least $min_median_ns; it is unstable
-- when p90 >= $spread * p10, and an instance is an outlier when it lasts at least $factor * p50.
-- flagged: the instances that count (outliers, and every instance above the median of an unstable group).
-- Groups are keyed by one 64-bit hash of the eight columns (one integer to group and join on instead of
-- eight, a kernel name among them: 4x faster at 1M kernels); a collision, about 2^-64 per pair of groups,
-- would merge two groups' statistics. The group's columns come from one of its rows.
-- shapes: the judged groups that are unstable or have an outlier. The rule stores them first in a temporary table
-- ({shapes}), which the other queries read: with the table's true row count DuckDB builds the hash join of flagged
-- on those few shapes, not on the kernels (as it did on the CTE, holding every kernel: 500-600 MiB at 10M), and no
-- query holds the quantiles' state beside the kernels it joins. The three quantiles are one list-valued
-- quantile_disc (one copy of each group's durations instead of one per quantile; the same values).
-- {exclude}: a predicate that leaves out KRN002's kernels (TRUE when there are none).
WITH k AS (
    SELECT rowid AS row_id, hash(pid, device, name, grid_x, grid_y, grid_z, block_x, block_y, block_z) AS key,
           end_ns - start_ns AS dur, start_ns
    FROM kernels
    WHERE category = 'compute' AND start_ns IS NOT NULL AND end_ns >= start_ns AND name IS NOT NULL
      AND {exclude}
),
g AS (
    SELECT key, n, total, q[1] AS p10, q[2] AS p50, q[3] AS p90, mx, any_row
    FROM (SELECT key, COUNT(*) AS n, SUM(dur) AS total, quantile_disc(dur, [0.1, 0.5, 0.9]) AS q, MAX(dur) AS mx,
                 ANY_VALUE(row_id) AS any_row
          FROM k GROUP BY key HAVING COUNT(*) >= $min_n)
    WHERE q[2] >= $min_median_ns
),
shapes AS (
    SELECT row_number() OVER (ORDER BY g.total DESC, kk.name, g.key) AS gid, g.*, kk.pid, kk.device, kk.name,
           kk.grid_x, kk.grid_y, kk.grid_z, kk.block_x, kk.block_y, kk.block_z,
           g.p90 >= $spread * GREATEST(g.p10, 1) AS unstable
    FROM g JOIN kernels kk ON kk.rowid = g.any_row
    WHERE g.p90 >= $spread * GREATEST(g.p10, 1) OR g.mx >= $factor * g.p50
),
flagged AS (
    SELECT f.gid, k.row_id, k.dur, k.dur - f.p50 AS excess, k.dur >= $factor * f.p50 AS outlier
    FROM k JOIN {shapes} f ON k.key = f.key
    WHERE k.dur >= $factor * f.p50 OR (f.unstable AND k.dur > f.p50)
)
