-- Copies with pageable memory on either side, with their API call (process + correlation id).
SELECT m.pid, m.device, m.stream, m.start_ns, m.end_ns, m.copy_kind, m.bytes, m.src_kind, m.dst_kind,
       a.name AS api_name, COALESCE(contains(a.name, 'Async'), FALSE) AS is_async
FROM memcpy m
LEFT JOIN cuda_api a ON a.pid = m.pid AND a.correlation_id = m.correlation_id
WHERE (m.src_kind = 'pageable' OR m.dst_kind = 'pageable')
