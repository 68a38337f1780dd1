-- Every copy and memset of the report with its unit index, direction code and whether another rule owns
-- its time (pageable: MEM001; unified-memory migration: MEM004). The same rows as analysis.intervals'
-- GPU_OPS_SQL memory part (start known, end >= start), so that they align with the unit's arrays.
-- {units}: VALUES (i, pid, device) of the units; direction codes: see copybound.DIRECTIONS.
SELECT u.i::INTEGER AS unit, o.start_ns, o.end_ns, o.dir::UTINYINT AS dir, o.bytes, o.elsewhere,
       o.tbl::UTINYINT AS tbl, o.row_id
FROM (
    SELECT pid, device, start_ns, end_ns, COALESCE(bytes, 0) AS bytes, 0 AS tbl, rowid AS row_id,
           CASE WHEN copy_kind = 'HtoD' THEN 0
                WHEN copy_kind = 'DtoH' THEN 1
                WHEN copy_kind = 'PtoP' THEN 3
                WHEN copy_kind = 'DtoD' AND src_device IS NOT NULL AND dst_device IS NOT NULL
                     AND src_device <> dst_device THEN 3
                WHEN copy_kind = 'DtoD' THEN 2
                WHEN copy_kind LIKE 'UVM%' THEN 6
                ELSE 5 END AS dir,
           COALESCE(copy_kind LIKE 'UVM%' OR src_kind = 'pageable' OR dst_kind = 'pageable', FALSE) AS elsewhere
    FROM memcpy WHERE start_ns IS NOT NULL AND end_ns >= start_ns
    UNION ALL
    SELECT pid, device, start_ns, end_ns, COALESCE(bytes, 0), 1, rowid, 4, FALSE
    FROM memset WHERE start_ns IS NOT NULL AND end_ns >= start_ns
) o JOIN (VALUES {units}) u(i, pid, device)
  ON u.pid IS NOT DISTINCT FROM o.pid AND u.device IS NOT DISTINCT FROM o.device
