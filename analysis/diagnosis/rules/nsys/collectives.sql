-- COMM003: every NCCL kernel with the message bytes of the NCCL calls that launched it.
-- A call (an NVTX range of NCCL with a payload size) belongs to the first NCCL kernel its thread launched at
-- or after the call began: a collective launches its kernel inside its own range, a group (ncclGroupStart
-- .. ncclSend/ncclRecv .. ncclGroupEnd) launches one kernel at ncclGroupEnd, after all its calls.
CREATE TEMP TABLE _gp_coll AS
WITH launch AS (
    SELECT a.pid, a.correlation_id, min(a.start_ns) AS launch_ns
    FROM cuda_api a SEMI JOIN kernels n
      ON n.category = 'nccl' AND n.pid = a.pid AND n.correlation_id = a.correlation_id
    GROUP BY ALL
),
k AS (
    SELECT k.rowid AS kid, k.pid, k.tid, k.device, k.stream, k.start_ns, k.end_ns, k.name,
           COALESCE(regexp_extract(COALESCE(k.short_name, k.name), '^nccl(?:Dev)?Kernel_([A-Za-z]+)', 1), '') AS op,
           COALESCE(regexp_extract(COALESCE(k.short_name, k.name), '_(RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT)(?:_|\(|$)', 1), '') AS algo,
           COALESCE(regexp_extract(COALESCE(k.short_name, k.name), '_(LL128|LL|SIMPLE)(?:_|\(|$)', 1), '') AS proto,
           l.launch_ns
    FROM kernels k LEFT JOIN launch l ON l.pid = k.pid AND l.correlation_id = k.correlation_id
    WHERE k.category = 'nccl' AND k.start_ns IS NOT NULL AND k.end_ns > k.start_ns
),
c AS (
    SELECT pid, tid, start_ns, regexp_extract(name, '^nccl([A-Za-z]+)', 1) AS call, bytes, comm_id
    FROM nccl_calls WHERE bytes IS NOT NULL AND pid IS NOT NULL AND tid IS NOT NULL
),
m AS (
    SELECT k.kid, c.call, c.bytes, c.comm_id
    FROM c ASOF JOIN (SELECT * FROM k WHERE launch_ns IS NOT NULL) k
      ON k.pid = c.pid AND k.tid = c.tid AND k.launch_ns >= c.start_ns
),
per AS (
    SELECT kid,
           sum(bytes) FILTER (WHERE call = 'Send') AS send_b,
           sum(bytes) FILTER (WHERE call = 'Recv') AS recv_b,
           sum(bytes) FILTER (WHERE call NOT IN ('Send', 'Recv')) AS coll_b,
           count(*) AS calls,
           any_value(comm_id) AS comm_id   -- a kernel serves one communicator
    FROM m GROUP BY kid
)
SELECT k.kid, k.pid, k.device, k.stream, k.start_ns, k.end_ns, k.name, k.op, k.algo, k.proto,
       CASE WHEN k.op IN ('SendRecv', 'Send', 'Recv') THEN greatest(COALESCE(p.send_b, 0), COALESCE(p.recv_b, 0))
            ELSE p.coll_b END::BIGINT AS bytes,
       COALESCE(p.calls, 0) AS calls, p.comm_id
FROM k LEFT JOIN per p ON p.kid = k.kid
