"""NCCL's network transfers, from the NVTX ranges its network layer writes (``ncclNet*``).

Where NCCL's network calls are instrumented, every send and receive it posts to the network is an NVTX
event whose text carries its arguments::

    ncclNetIsend(): Data_Size: 1048576, Sender_Rank: 0, Receiver_Rank: 1, Channel_ID: 0, Sequence: 0
    ncclNetIrecv(): Data_Size: 1048576, Sender_Rank: 1, Receiver_Rank: 0, Channel_ID: 0, Sequence: 0

(the send as the call's range, the receive as a mark inside a bare ``ncclNetIrecv()`` range), and the
``ncclNetSendTest()``/``ncclNetRecvTest()`` polls are bare ranges, except the one poll that finds the
request done: it leaves a mark with the same arguments. A transfer is one posted request: its post is
the Isend/Irecv event, its completion the first done-poll with the same direction, peers, channel and
sequence (the k-th post of those arguments pairs with their k-th completion, so a sequence number reused
by another communicator between the same peers pairs in order).

``net_transfers`` (derived at ingest, ``analysis.readers.schema.DERIVED_TABLES``) holds one row per transfer;
a file written before the table existed gets the same rows from ``source`` (computed on its NVTX table).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from analysis.duck import connect
from analysis.readers.schema import DERIVED_TABLES, ddl

TABLE = "net_transfers"
# Only the events with arguments: the bare polls (most of them) are the waiting, not a transfer.
_ARGS = (r"^ncclNet(Isend|Irecv|SendTest|RecvTest)\(\): Data_Size: (\d+), Sender_Rank: (\d+), "
         r"Receiver_Rank: (\d+), Channel_ID: (\d+), Sequence: (\d+)")

TRANSFERS_SQL = f"""
    WITH ev AS (
        SELECT pid, tid, start_ns,
               regexp_extract(text, '{_ARGS}', ['op', 'size', 'snd', 'rcv', 'ch', 'seq']) AS m
        FROM nvtx
        WHERE text LIKE 'ncclNet%: Data_Size: %' AND start_ns IS NOT NULL
    ), parsed AS (
        SELECT pid, tid, start_ns, m.op AS op,
               CASE WHEN m.op IN ('Isend', 'SendTest') THEN 'send' ELSE 'recv' END AS direction,
               TRY_CAST(m.size AS BIGINT) AS bytes, TRY_CAST(m.snd AS INTEGER) AS sender_rank,
               TRY_CAST(m.rcv AS INTEGER) AS receiver_rank, TRY_CAST(m.ch AS INTEGER) AS channel,
               TRY_CAST(m.seq AS BIGINT) AS sequence
        FROM ev WHERE m.op <> ''
    ), numbered AS (
        SELECT *, ROW_NUMBER() OVER (PARTITION BY pid, direction, sender_rank, receiver_rank, channel, sequence,
                                                  op IN ('Isend', 'Irecv')
                                     ORDER BY start_ns) AS k
        FROM parsed
    )
    SELECT p.pid, p.tid, p.direction, p.sender_rank, p.receiver_rank, p.channel, p.sequence, p.bytes,
           p.start_ns AS post_ns, d.start_ns AS done_ns
    FROM numbered p
    LEFT JOIN numbered d
      ON d.op NOT IN ('Isend', 'Irecv') AND d.pid = p.pid AND d.direction = p.direction
     AND d.sender_rank = p.sender_rank AND d.receiver_rank = p.receiver_rank AND d.channel = p.channel
     AND d.sequence = p.sequence AND d.k = p.k AND d.start_ns >= p.start_ns
    WHERE p.op IN ('Isend', 'Irecv')
"""  # noqa: S608 - constants


def source(tables: set[str]) -> str:
    """The relation of the report's transfers: its table, or (older files) the same rows from its NVTX."""
    if TABLE in tables:
        return TABLE
    if "nvtx" in tables:
        return f"({TRANSFERS_SQL})"
    return f"(SELECT * FROM ({TRANSFERS_SQL}) WHERE FALSE)"  # noqa: S608 - constants


def write_net(con: duckdb.DuckDBPyConnection) -> int:
    """Create and fill ``net_transfers`` on ``con`` (the normalized file, not yet published); returns its rows."""
    con.execute(f"DROP TABLE IF EXISTS {TABLE}")
    con.execute(ddl({TABLE: DERIVED_TABLES[TABLE]})[0])
    con.execute(f"INSERT INTO {TABLE} {TRANSFERS_SQL} ORDER BY post_ns, pid, channel")
    return int(con.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchall()[0][0])  # noqa: S608 - a constant


def write_net_file(path: Path, memory_bytes: int) -> int:
    con = connect(path, memory_bytes=memory_bytes)
    try:
        n = write_net(con)
        con.execute("CHECKPOINT")
        return n
    finally:
        con.close()
