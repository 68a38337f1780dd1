-- Runs of short kernels per GPU unit: maximal stretches (in device order) with no long kernel between.
WITH kern AS (
    -- Narrow rows (no names): the window below sorts every kernel.
    SELECT pid, device, start_ns, end_ns, (end_ns - start_ns) < $short_ns AS is_short
    FROM kernels WHERE start_ns IS NOT NULL
),
numbered AS (
    -- A global order (parallel sort); the count may run on across units, harmless as runs group per unit.
    SELECT *, SUM(CASE WHEN is_short THEN 0 ELSE 1 END)
                  OVER (ORDER BY pid, device, start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS run_id
    FROM kern
)
SELECT pid, device, run_id, MIN(start_ns) AS run_start, MAX(end_ns) AS run_end, COUNT(*) AS run_kernels,
       SUM(end_ns - start_ns) AS kernel_ns
FROM numbered WHERE is_short
GROUP BY pid, device, run_id HAVING COUNT(*) >= $min_run
