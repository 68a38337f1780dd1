-- KRN003: groups of the same compute kernel (process, device, name, grid, block) and their durations'
-- p10/p50/p90 (quantile_disc: the value at rank floor(q * (n - 1)) of the sorted durations). A group is
-- judged when it has at least $min_n instances and a median of at least $min_median_ns; it is unstable
-- when p90 >= $spread * p10, and an instance is an outlier when it lasts at least $factor * p50.
-- flagged: the instances that count (outliers, and every instance above the median of an unstable group).
WITH k AS (
    SELECT rowid AS row_id, pid, device, name, grid_x, grid_y, grid_z, block_x, block_y, block_z,
           end_ns - start_ns AS dur
    FROM kernels
    WHERE category = 'compute' AND start_ns IS NOT NULL AND end_ns >= start_ns AND name IS NOT NULL
),
g AS (
    SELECT pid, device, name, grid_x, grid_y, grid_z, block_x, block_y, block_z, COUNT(*) AS n,
           SUM(dur) AS total, quantile_disc(dur, 0.1) AS p10, quantile_disc(dur, 0.5) AS p50,
           quantile_disc(dur, 0.9) AS p90, MAX(dur) AS mx
    FROM k GROUP BY ALL
    HAVING COUNT(*) >= $min_n AND quantile_disc(dur, 0.5) >= $min_median_ns
),
f AS (
    SELECT row_number() OVER (ORDER BY total DESC, name) AS gid, *,
           p90 >= $spread * GREATEST(p10, 1) AS unstable
    FROM g WHERE p90 >= $spread * GREATEST(p10, 1) OR mx >= $factor * p50
),
flagged AS (
    SELECT f.gid, k.row_id, k.dur, k.dur - f.p50 AS excess, k.dur >= $factor * f.p50 AS outlier
    FROM k JOIN f
      ON k.name = f.name AND k.pid IS NOT DISTINCT FROM f.pid AND k.device IS NOT DISTINCT FROM f.device
     AND k.grid_x IS NOT DISTINCT FROM f.grid_x AND k.grid_y IS NOT DISTINCT FROM f.grid_y
     AND k.grid_z IS NOT DISTINCT FROM f.grid_z AND k.block_x IS NOT DISTINCT FROM f.block_x
     AND k.block_y IS NOT DISTINCT FROM f.block_y AND k.block_z IS NOT DISTINCT FROM f.block_z
    WHERE k.dur >= $factor * f.p50 OR (f.unstable AND k.dur > f.p50)
)
