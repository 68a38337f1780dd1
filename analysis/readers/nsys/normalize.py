"""The SQL that turns a validated nsys export into the normalized tables of ``analysis.readers.schema``.

Pure string building from what ``guard.validate`` verified: only table and column names from the
allow-list in ``analysis.readers.nsys.source`` appear in the SQL, and only when the export has them (a missing
optional column reads as NULL, a missing table leaves the normalized table empty). The export is
attached in DuckDB as ``src``; the statements run in order in the child process (``analysis.readers.nsys.child``).
"""

# ruff: noqa: S608 - every identifier below comes from the allow-list in analysis.readers.nsys.source (asserted
# in _src/_Cols) and every literal is an int or one of our own vocabulary words; no trace string is spliced.

from __future__ import annotations

from typing import NamedTuple, TypedDict

from analysis.readers.nsys.enums import case_sql
from analysis.readers.nsys.guard import ExportInfo
from analysis.readers.nsys.scrub import APPENDED
from analysis.readers.nsys.source import SOURCE_TABLES

PID_MASK = 0xFFFFFF  # globalPid/globalTid pack the OS pid in bits 24..47 and the tid in bits 0..23


class _Cols:
    """Column expressions for one source table under an alias: present columns quoted, absent ones NULL."""

    def __init__(self, info: ExportInfo, table: str, alias: str) -> None:
        self.present = set(info.tables.get(table, ())) & set(SOURCE_TABLES[table].columns)
        self.alias = alias

    def __call__(self, col: str, cast: str | None = None) -> str:
        if col not in self.present:
            return f"NULL::{cast}" if cast else "NULL"
        expr = f'{self.alias}."{col}"'
        return f"{expr}::{cast}" if cast else expr


def _src(table: str) -> str:
    if table not in SOURCE_TABLES:
        raise ValueError(f"{table} is not an allow-listed export table")
    return f'src."{table}"'


def _time(expr: str, offset: int) -> str:
    return f"({expr} - {int(offset)})" if offset else expr


def _pid(expr: str) -> str:
    return f"(({expr} >> 24) & {PID_MASK})::INTEGER"


def _tid(expr: str) -> str:
    return f"({expr} & {PID_MASK})::INTEGER"


CORR_MAX = 2**40 - 1  # CUPTI correlation ids are 32-bit; anything outside 40 bits matches nothing


def _launch_key(pid: str, corr: str) -> str:
    """(pid, correlationId) as one UBIGINT; NULL (no match) for an id outside 0..CORR_MAX."""
    return (f"(CASE WHEN {corr} BETWEEN 0 AND {CORR_MAX} "
            f"THEN ({pid}::UBIGINT << 40) | {corr}::UBIGINT END)")


# The launch table is grouped in this many parts, by the correlation id's low bits (all of a key's calls fall in one
# part): every API call is its own group, and DuckDB's hash aggregate over 4.6M groups (2M kernels) took 0.58 s of
# wall time on 2 threads, against 0.30 s for four aggregates of a quarter of the groups each (fewer cache misses).
LAUNCH_PARTS = 4


def _launch_part(part: int) -> str:
    """(pid, correlationId) -> the first thread of the API calls whose correlation id is ``part`` mod LAUNCH_PARTS."""
    return (f"SELECT {_launch_key('pid', 'correlation_id')} AS k, min(tid) AS tid FROM cuda_api "
            f"WHERE correlation_id BETWEEN 0 AND {CORR_MAX} AND (correlation_id & {LAUNCH_PARTS - 1}) = {int(part)} "
            "GROUP BY 1")


# Every API call by its (pid, correlationId) key, for the launch join without grouping (``Step.exact``).
_CALLS = f"SELECT {_launch_key('pid', 'correlation_id')} AS k, tid FROM cuda_api"  # NULL keys match nothing
_LAUNCHES = ("CREATE TEMP TABLE IF NOT EXISTS _launch AS "
             + " UNION ALL ".join(_launch_part(i) for i in range(LAUNCH_PARTS)))
_JOIN = "__LAUNCH_JOIN__"  # where a GPU table's statement joins its launching calls


class Exact(TypedDict):
    """A statement that must write one row per source row it reads: ``count`` is that number (SQL on the attached
    export), ``fallback`` the statements that write the same rows when it wrote more (its transaction rolled back)."""

    count: str
    fallback: list[str]


class Step(NamedTuple):
    """One statement of the copy: its progress label, its SQL and, for a join that must not repeat rows, its check."""

    label: str
    sql: str
    exact: Exact | None = None


def _launched(label: str, table: str, alias: str, sql: str, key: str, where: str = "") -> Step:
    """A GPU table's statement (``sql`` holds ``_JOIN``) joined to its launching call directly: every API call is
    hashed by its key, none grouped. Each call has its own correlation id (CUPTI's; every corpus export), so each
    GPU row meets at most one call and the rows written are the rows read, which the child checks against a count
    on the export. A key that repeats writes more: the child rolls the statement back and runs ``fallback``, the
    join on the launch table grouped to one call per key (``_launch_part``: the first thread). Grouping every call
    cost more than the joins (2.6-2.9 s of 30 s wall at 10M kernels, docs/speed.md), and is now paid only there."""
    src = _src(table)  # allow-listed
    direct = sql.replace(_JOIN, f"LEFT JOIN ({_CALLS}) l ON l.k = {key}")
    grouped = sql.replace(_JOIN, f"LEFT JOIN _launch l ON l.k = {key}")
    if where:  # the rows the statement reads: its own filter, in DuckDB
        count = f"SELECT count(*) FROM {src} {alias} {where}"
    else:  # SQLite counts a table's rows from its b-tree without reading them: 0.2 s for 10M kernels
        count = f"SELECT * FROM sqlite_query('src', 'SELECT count(*) FROM \"{table}\"')"
    return Step(label, direct, Exact(count=count, fallback=[_LAUNCHES, grouped]))


def _name(alias: str, id_expr: str) -> str:
    return f"LEFT JOIN _strings {alias} ON {alias}.id = {id_expr}"


def statements(info: ExportInfo) -> list[Step]:
    """The copy's statements, in execution order; labels name the normalized table for progress reports."""
    t, off = info.tables, info.time_offset_ns
    dec = info.decoders
    out: list[Step] = [
        Step("strings", "CREATE TEMP TABLE _strings AS SELECT id::BIGINT AS id, value::VARCHAR AS value "
                        f"FROM {_src('StringIds')}"),
    ]

    if "CUPTI_ACTIVITY_KIND_RUNTIME" in t:
        c = _Cols(info, "CUPTI_ACTIVITY_KIND_RUNTIME", "r")
        ev = c("eventClass")
        # eventClass 67 rows are CUDA-backtrace duplicates of a call (same correlationId): drop them.
        where = f"WHERE {ev} IS DISTINCT FROM 67" if "eventClass" in c.present else ""
        kind = (f"CASE {ev} WHEN 0 THEN 'runtime' WHEN 1 THEN 'driver' "
                "ELSE (CASE WHEN starts_with(n.name, 'cuda') THEN 'runtime' ELSE 'driver' END) END")
        # The _vNNNN suffix is stripped once per distinct string, not once per call.
        out.append(Step("cuda_api names", "CREATE TEMP TABLE _api_names AS "
                    "SELECT id, regexp_replace(value, '_v[0-9]+$', '') AS name FROM _strings"))
        out.append(Step("cuda_api", f"""
            INSERT INTO cuda_api
            SELECT {_pid(c("globalTid"))}, {_tid(c("globalTid"))},
                   {_time('r."start"', off)}, {_time('r."end"', off)},
                   n.name, {kind}, {c("correlationId")}, {c("returnValue")}
            FROM {_src("CUPTI_ACTIVITY_KIND_RUNTIME")} r LEFT JOIN _api_names n ON n.id = {c("nameId")}
            {where}"""))
    # The launching call of each GPU activity (``_launched``); correlation ids are unique per process only. (pid,
    # correlationId) is packed into one UBIGINT (24 + 40 bits): a single-column key halves the cost of
    # the hash joins below, which probe millions of GPU rows against every API call.

    def activity(table: str, alias: str) -> tuple[_Cols, str, str]:
        c = _Cols(info, table, alias)
        pid = _pid(c("globalPid"))
        key = _launch_key(pid, c("correlationId"))
        start, end = _time(f'{alias}."start"', off), _time(f'{alias}."end"', off)
        head = (f'{c("deviceId")}, {c("contextId")}, {c("streamId")}, {pid}, l.tid, '
                f'{start}, {end}, {c("correlationId")}')
        return c, key, head

    # The synchronization events first, right after the API calls: the two largest launch joins (sync, kernels) each
    # hash every API call, and in this order the copy's peak stays that of one of them (10M kernels: 1,250-1,270 MiB
    # against 1,300-1,480 with the kernels first, docs/speed.md).
    if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in t:
        c = _Cols(info, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "y")
        pid = _pid(c("globalPid"))
        corr = c("correlationId")
        out.append(_launched("sync", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "y", f"""
            INSERT INTO sync
            SELECT {c("deviceId")}, {c("contextId")}, {c("streamId")}, {pid}, l.tid,
                   {_time('y."start"', off)}, {_time('y."end"', off)}, {corr},
                   {case_sql(c("syncType"), dec["sync_type"])}, {c("eventId")}
            FROM {_src("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")} y {_JOIN}""", _launch_key(pid, corr)))

    if "CUPTI_ACTIVITY_KIND_KERNEL" in t:
        c, key, head = activity("CUPTI_ACTIVITY_KIND_KERNEL", "k")
        out.append(_launched("kernels", "CUPTI_ACTIVITY_KIND_KERNEL", "k", f"""
            INSERT INTO kernels
            SELECT {head}, {"dn.value" if "demangledName" in c.present else "sn.value"}, sn.value, {c("mangledName")},
                   {c("gridX")}, {c("gridY")}, {c("gridZ")}, {c("blockX")}, {c("blockY")}, {c("blockZ")},
                   {c("registersPerThread")}, {c("staticSharedMemory")}, {c("dynamicSharedMemory")},
                   {c("graphId")},
                   CASE WHEN starts_with(sn.value, 'nccl') OR starts_with(dn.value, 'nccl')
                        THEN 'nccl' ELSE 'compute' END
            FROM {_src("CUPTI_ACTIVITY_KIND_KERNEL")} k {_JOIN}
            {_name("dn", c("demangledName"))} {_name("sn", c("shortName"))}""", key))
        if "mangledName" in c.present:
            # Each mangled name once, not in every row: 0.5 s of the copy's CPU at 2M kernels (docs/speed.md).
            out.append(Step("kernels", """
                INSERT INTO mangled_names
                SELECT s.id, s.value FROM (SELECT DISTINCT mangled_id FROM kernels WHERE mangled_id IS NOT NULL) m
                JOIN _strings s ON s.id = m.mangled_id"""))

    if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in t:
        # A graph replay traced whole: GPU work from its start to its end, named by its graph (its kernels are not
        # in the export, so no kernel rule names it); rows without timestamps (0, 0: not collected) are left out.
        c, key, head = activity("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "g")
        gid = c("graphId")
        where = 'WHERE g."end" > g."start" AND g."start" > 0'
        out.append(_launched("kernels", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "g", f"""
            INSERT INTO kernels
            SELECT {head}, 'CUDA graph ' || COALESCE({gid}::VARCHAR, '?'), 'CUDA graph ' || COALESCE({gid}::VARCHAR, '?'),
                   NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, {gid}, 'graph'
            FROM {_src("CUPTI_ACTIVITY_KIND_GRAPH_TRACE")} g {_JOIN}
            {where}""", key, where))

    if "CUPTI_ACTIVITY_KIND_MEMCPY" in t:
        c, key, head = activity("CUPTI_ACTIVITY_KIND_MEMCPY", "m")
        out.append(_launched("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY", "m", f"""
            INSERT INTO memcpy
            SELECT {head}, {case_sql(c("copyKind"), dec["copy_kind"])}, {c("bytes")},
                   {case_sql(c("srcKind"), dec["memory_kind"])}, {case_sql(c("dstKind"), dec["memory_kind"])},
                   {c("srcDeviceId")}, {c("dstDeviceId")}
            FROM {_src("CUPTI_ACTIVITY_KIND_MEMCPY")} m {_JOIN}""", key))

    if "CUPTI_ACTIVITY_KIND_MEMSET" in t:
        c, key, head = activity("CUPTI_ACTIVITY_KIND_MEMSET", "s")
        out.append(_launched("memset", "CUPTI_ACTIVITY_KIND_MEMSET", "s", f"""
            INSERT INTO memset
            SELECT {head}, {c("bytes")}, {c("value")}, {case_sql(c("memKind"), dec["memory_kind"])}
            FROM {_src("CUPTI_ACTIVITY_KIND_MEMSET")} s {_JOIN}""", key))

    # Temp tables hold memory until dropped; the join tables are done with here.
    out.append(Step("cleanup", "DROP TABLE IF EXISTS _launch"))  # built only where a key repeats
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in t:
        out.append(Step("cleanup", "DROP TABLE _api_names"))

    if "NVTX_EVENTS" in t:
        out.extend(_nvtx(info))
        out.append(Step("cleanup", "DROP TABLE _nvtx"))
        out.extend(_nccl_calls(info))

    for table, target in (("OSRT_API", "osrt"), ("PROFILER_OVERHEAD", "overhead")):
        if table in t:
            c = _Cols(info, table, "o")
            out.append(Step(target, f"""
                INSERT INTO {target}
                SELECT {_pid(c("globalTid"))}, {_tid(c("globalTid"))},
                       {_time('o."start"', off)}, {_time('o."end"', off)}, n.value
                FROM {_src(table)} o {_name("n", c("nameId"))}"""))

    if "COMPOSITE_EVENTS" in t:
        out.append(Step("cpu_samples", _cpu_samples(info)))
        if "SAMPLING_CALLCHAINS" in t:
            out.append(Step("meta", _failure(info)))
    if "SCHED_EVENTS" in t:
        out.append(Step("off_cpu", _off_cpu(info)))
    out.extend(_system_metrics(info))

    if "ThreadNames" in t:
        out.append(Step("threads", f"""
            INSERT INTO threads
            SELECT {_pid('h."globalTid"')}, {_tid('h."globalTid"')}, n.value
            FROM {_src("ThreadNames")} h {_name("n", 'h."nameId"')}"""))
    if "PROCESSES" in t:
        # Text appended to a process name is cut as in the kept export (analysis.readers.nsys.scrub.APPENDED).
        out.append(Step("processes", f'INSERT INTO processes SELECT p."pid", left(rtrim(regexp_replace(p."name", '
                                 f"'{APPENDED}', '')), 256) FROM {_src('PROCESSES')} p"))
    out.extend(_devices(info))
    return out


def _system_metrics(info: ExportInfo) -> list[Step]:
    """GPU metrics samples and NIC counters, with their names resolved (empty when not collected)."""
    t, off = info.tables, info.time_offset_ns
    out: list[Step] = []
    if "GPU_METRICS" in t:
        g = _Cols(info, "GPU_METRICS", "g")
        if "TARGET_INFO_GPU_METRICS" in t:
            n = _Cols(info, "TARGET_INFO_GPU_METRICS", "n")
            # One name per (typeId, metricId): the table lists each pair once, but never trust that.
            names = (f"""LEFT JOIN (SELECT "typeId" AS type_id, "metricId" AS metric_id,
                                           any_value({n("typeName")}) AS source, any_value("metricName") AS metric
                                    FROM {_src("TARGET_INFO_GPU_METRICS")} n GROUP BY ALL) n
                         ON n.type_id = g."typeId" AND n.metric_id = g."metricId" """)
            source, metric = "COALESCE(n.source, 'type ' || g.\"typeId\")", "COALESCE(n.metric, 'metric ' || g.\"metricId\")"
        else:
            names = ""
            source, metric = "'type ' || g.\"typeId\"", "'metric ' || g.\"metricId\""
        out.append(Step("gpu_metrics", f"""
            INSERT INTO gpu_metrics
            SELECT {source}, {metric}, {_time('g."timestamp"', off)}, {g("value", "DOUBLE")}
            FROM {_src("GPU_METRICS")} g {names}"""))
    if "TARGET_INFO_NIC_INFO" in t:
        ni = _Cols(info, "TARGET_INFO_NIC_INFO", "ni")
        model, mjoin = "NULL", ""
        if "ENUM_NET_DEVICE_ID" in t and "deviceId" in ni.present:
            d = _Cols(info, "ENUM_NET_DEVICE_ID", "d")
            model = "d.label"
            mjoin = (f'LEFT JOIN (SELECT "id", any_value({d("label")}) AS label FROM {_src("ENUM_NET_DEVICE_ID")} d '
                     'GROUP BY ALL) d ON d."id" = ni."deviceId"')
        out.append(Step("nics", f"""
            INSERT INTO nics
            SELECT ni."nicId", ni."name", {ni("stateName")}, {case_sql(ni("linkLayer"), info.decoders["link_layer"])},
                   {model}
            FROM {_src("TARGET_INFO_NIC_INFO")} ni {mjoin}"""))
    if "NET_NIC_METRIC" in t:
        m = _Cols(info, "NET_NIC_METRIC", "m")
        joins, nic = "", "'nic ' || m.\"globalId\""
        if "NIC_ID_MAP" in t:
            joins += (f'LEFT JOIN (SELECT "globalId" AS gid, any_value("nicId") AS nic_id FROM {_src("NIC_ID_MAP")} '
                      'GROUP BY ALL) i ON i.gid = m."globalId" ')
            nic = "'nic ' || COALESCE(i.nic_id, m.\"globalId\")"
            if "TARGET_INFO_NIC_INFO" in t:
                joins += (f'LEFT JOIN (SELECT "nicId" AS nic_id, any_value("name") AS name '
                          f'FROM {_src("TARGET_INFO_NIC_INFO")} GROUP BY ALL) ni ON ni.nic_id = i.nic_id ')
                nic = f"COALESCE(ni.name, {nic})"
        metric, unit = "'metric ' || m.\"metricsIdx\"", "NULL"
        if "TARGET_INFO_NETWORK_METRICS" in t:
            w = _Cols(info, "TARGET_INFO_NETWORK_METRICS", "w")
            joins += (f'LEFT JOIN (SELECT "metricsListId" AS list_id, "metricsIdx" AS idx, any_value("name") AS name, '
                      f'any_value({w("unit")}) AS unit FROM {_src("TARGET_INFO_NETWORK_METRICS")} w GROUP BY ALL) w '
                      'ON w.list_id = m."metricsListId" AND w.idx = m."metricsIdx" ')
            metric, unit = f"COALESCE(w.name, {metric})", "w.unit"
        out.append(Step("nic_metrics", f"""
            INSERT INTO nic_metrics
            SELECT {nic}, {m("portId")}, {metric}, {unit}, {_time('m."start"', off)}, {_time('m."end"', off)},
                   {m("value", "DOUBLE")}
            FROM {_src("NET_NIC_METRIC")} m {joins}"""))
    return out


def _cpu_samples(info: ExportInfo) -> str:
    """CPU samples with their leaf function: the call-chain frame at stack depth 0 (the innermost)."""
    e = _Cols(info, "COMPOSITE_EVENTS", "e")
    off = info.time_offset_ns
    if "SAMPLING_CALLCHAINS" in info.tables:
        c = _Cols(info, "SAMPLING_CALLCHAINS", "c")
        module = "md.value" if "module" in c.present else "NULL"
        chain = (f'LEFT JOIN {_src("SAMPLING_CALLCHAINS")} c ON c."id" = e."id" AND c."stackDepth" = 0 '
                 + _name("fn", 'c."symbol"') + " "
                 + (_name("md", c("module")) if "module" in c.present else ""))
        function = "fn.value"
    else:
        chain, function, module = "", "NULL", "NULL"
    return f"""
        INSERT INTO cpu_samples
        SELECT {_pid('e."globalTid"')}, {_tid('e."globalTid"')}, {_time('e."start"', off)}, {e("cpu")},
               {function}, {module}
        FROM {_src("COMPOSITE_EVENTS")} e {chain}"""


# A run that failed, as its last CPU samples show it: a frame of an uncaught exception or an abort (the C++ terminate
# handler, abort/raise, a failed assert, Python printing an uncaught exception's traceback or a fatal error) at any
# depth of one of a thread's last ``LAST_SAMPLES`` samples. The frames that threw (``THROWN``) are kept beside it.
FAILED = (r"^(std::terminate|__gnu_cxx::__verbose_terminate_handler|abort|raise|__assert_fail|__libc_message"
          r"|PyErr_PrintEx|PyErr_Print|_PyErr_PrintEx|_?PyErr_Display|PyTraceBack_Print|_?Py_FatalError[A-Za-z_]*)(\(.*\))?$")
THROWN = r"^(__cxa_throw|__cxa_rethrow|_Unwind_RaiseException|_?PyErr_SetObject|PyErr_SetString|PyErr_Format)(\(.*\))?$"
LAST_SAMPLES = 16


def _failure(info: ExportInfo) -> str:
    """``meta['failure']``: the latest of the threads' last samples whose call chain shows the run failing
    (``FAILED``), as JSON: its time, pid, tid and the failing and throwing frames, innermost first. No row when none."""
    off = info.time_offset_ns
    return f"""
        INSERT INTO meta
        SELECT 'failure', json_object('ns', start_ns, 'pid', pid, 'tid', tid, 'frames', frames)::VARCHAR FROM (
            SELECT s.start_ns, s.pid, s.tid, string_agg(n.value, ' < ' ORDER BY c."stackDepth") AS frames,
                   bool_or(regexp_matches(n.value, '{FAILED}')) AS failed
            FROM (SELECT e."id" AS id, {_time('e."start"', off)} AS start_ns, {_pid('e."globalTid"')} AS pid,
                         {_tid('e."globalTid"')} AS tid,
                         row_number() OVER (PARTITION BY e."globalTid" ORDER BY e."start" DESC) AS k
                  FROM {_src("COMPOSITE_EVENTS")} e) s
            JOIN {_src("SAMPLING_CALLCHAINS")} c ON c."id" = s.id
            JOIN _strings n ON n.id = c."symbol"
            WHERE s.k <= {LAST_SAMPLES} AND (regexp_matches(n.value, '{FAILED}') OR regexp_matches(n.value, '{THROWN}'))
            GROUP BY s.id, s.start_ns, s.pid, s.tid)
        WHERE failed ORDER BY start_ns DESC LIMIT 1"""


def _off_cpu(info: ExportInfo) -> str:
    """Each thread's stretches off CPU: a switch-out to the thread's next event when that one is a switch-in.

    One window function over the events per thread in time order; a switch-out followed by another switch-out
    (an event lost) or by nothing (the thread ended, or the capture did) gives no row. At equal times a
    switch-in sorts first: a thread switched in and out in the same nanosecond is then off CPU from there.
    """
    e = _Cols(info, "SCHED_EVENTS", "e")
    dec, start = info.decoders, _time('e."start"', info.time_offset_ns)

    def decoded(col: str, key: str) -> str:  # NULL stays NULL (the export does not say), unknown values 'unknown'
        return f"(CASE WHEN {e(col)} IS NOT NULL THEN {case_sql(e(col), dec[key])} END)" if col in e.present else "NULL"

    return f"""
        INSERT INTO off_cpu
        SELECT pid, tid, start_ns, end_ns, cpu, state, block FROM (
            SELECT {_pid('e."globalTid"')} AS pid, {_tid('e."globalTid"')} AS tid, {start} AS start_ns,
                   lead({start}) OVER w AS end_ns, e."isSchedIn" <> 0 AS is_in,
                   lead(e."isSchedIn" <> 0) OVER w AS next_in, {e("cpu")} AS cpu,
                   {decoded("threadState", "thread_state")} AS state, {decoded("threadBlock", "thread_block")} AS block
            FROM {_src("SCHED_EVENTS")} e WHERE e."globalTid" IS NOT NULL AND e."isSchedIn" IS NOT NULL
            WINDOW w AS (PARTITION BY e."globalTid" ORDER BY e."start", e."isSchedIn" <> 0 DESC))
        WHERE NOT is_in AND next_in"""


def _nvtx(info: ExportInfo) -> list[Step]:
    c = _Cols(info, "NVTX_EVENTS", "e")
    off = info.time_offset_ns
    pid = _pid(c("globalTid"))
    text = c("text")
    if "textId" in c.present:
        text = f'COALESCE({text}, tx.value)'
    tx_join = _name("tx", 'e."textId"') if "textId" in c.present else ""
    out: list[Step] = []
    domain = "NULL"
    joins = ""
    if "domainId" in c.present:
        # Domain names come from the eventType 75 (NvtxDomainCreate) rows; domain ids are per process.
        out.append(Step("nvtx domains", f"""
            CREATE TEMP TABLE _domains AS
            SELECT {pid} AS pid, e."domainId" AS domain_id, any_value({text}) AS name
            FROM {_src("NVTX_EVENTS")} e {tx_join}
            WHERE e."eventType" = 75 AND e."domainId" IS NOT NULL GROUP BY ALL"""))
        legacy = ""
        if "DomainStrings" in info.tables:  # 2020 exports name domains in their own table
            legacy = f'UNION ALL SELECT "id", "domainName" FROM {_src("DomainStrings")}'
        out.append(Step("nvtx domains", f"""
            CREATE TEMP TABLE _domain_ids AS
            SELECT domain_id, any_value(name) AS name FROM (
                SELECT domain_id, name FROM _domains
                {legacy}
            ) WHERE domain_id IS NOT NULL GROUP BY domain_id"""))
        domain = 'CASE WHEN e."domainId" = 0 THEN NULL ELSE COALESCE(dp.name, di.name) END'
        joins = (f'LEFT JOIN _domains dp ON dp.pid = {pid} AND dp.domain_id = e."domainId" '
                 'LEFT JOIN _domain_ids di ON di.domain_id = e."domainId"')
    end = _time(c("end"), off) if "end" in c.present else "NULL"
    out.append(Step("nvtx", f"""
        CREATE TEMP TABLE _nvtx AS
        SELECT row_number() OVER () AS rid, {pid} AS pid, {_tid(c("globalTid"))} AS tid,
               {_time('e."start"', off)} AS start_ns,
               CASE WHEN e."eventType" = 34 THEN NULL ELSE {end} END AS end_ns,
               {text} AS text, {domain} AS domain,
               CASE e."eventType" WHEN 59 THEN 'push_pop' WHEN 60 THEN 'start_end' ELSE 'mark' END AS kind
        FROM {_src("NVTX_EVENTS")} e {tx_join} {joins}
        WHERE e."eventType" IN (34, 59, 60)"""))
    out.append(Step("nvtx", NVTX_NESTING_SQL))
    return out


# NCCL's API calls whose NVTX payload carries a message size, and the communicator-init calls that carry
# the number of ranks (NCCL >= 2.17 registers these schemas; nsys >= 2024.5 exports them).
NCCL_SIZE_FIELD = "Message size [bytes]"
NCCL_RANKS_FIELD = "No. of ranks"
NCCL_COMM_FIELD = "NCCL communicator ID"  # NCCL >= 2.2x puts it first in every payload
MAX_PAYLOAD_FIELD = 2**62  # a decoded size above this is not a size (garbage or a misread layout): NULL


def _le_uint(hexed: str, offset: str, width: int) -> str:
    """SQL: the little-endian unsigned integer of ``width`` bytes at byte ``offset`` of a hex string."""
    return (f"list_sum(list_transform(range({width}), i -> (('0x' || substr({hexed}, 2 * ({offset}) + 2 * i::BIGINT + 1, 2))"
            f"::UBIGINT) << (8 * i)::INTEGER))")


def _has_payloads(info: ExportInfo) -> bool:
    c = _Cols(info, "NVTX_EVENTS", "e")
    # Without payload schemas there is no NCCL payload to decode (and no second pass over NVTX_EVENTS).
    return ("NVTX_EVENTS" in info.tables and bool({"jsonText", "binaryData"} & c.present)
            and "domainId" in c.present and "NVTX_PAYLOAD_SCHEMA_ENTRIES" in info.tables)


def varchar_statements(info: ExportInfo) -> list[str]:
    """The reads of NCCL's NVTX payloads, run with ``sqlite_all_varchar`` (every column read as text).

    Exports carry a payload either as ``jsonText`` (a JSON object keyed by the schema entries' names,
    when exported with JSON) or as ``binaryData`` (the payload's bytes laid out as its schema says,
    little-endian, when exported with blobs). DuckDB's SQLite scanner refuses a BLOB in a column declared
    TEXT, so these statements read the export with every column as text and cast back here; the child runs
    them on its own attachment of the export (``srcv``) before it locks its configuration, and restores
    the setting right after. They copy only what the
    ``nccl_calls`` statement needs into temporary tables: ranges whose text starts with ``nccl`` and carry a
    payload, and the byte offsets of the two fields read (``NVTX_PAYLOAD_SCHEMA_ENTRIES``).
    """
    if not _has_payloads(info):
        return []
    return [stmt.replace('src."', 'srcv."') for stmt in _payload_reads(info)]


def _payload_reads(info: ExportInfo) -> list[str]:
    c = _Cols(info, "NVTX_EVENTS", "e")
    p = _Cols(info, "NVTX_PAYLOAD_SCHEMA_ENTRIES", "p")
    off = info.time_offset_ns
    js = c("jsonText") if "jsonText" in c.present else "NULL::VARCHAR"
    bin_hex = f'hex(encode({c("binaryData")}))' if "binaryData" in c.present else "NULL::VARCHAR"
    text = c("text")
    tx_join = ""
    if "textId" in c.present:
        text = f"COALESCE({text}, tx.\"value\")"
        tx_join = f'LEFT JOIN {_src("StringIds")} tx ON TRY_CAST(tx."id" AS BIGINT) = TRY_CAST(e."textId" AS BIGINT)'
    gtid = 'TRY_CAST(e."globalTid" AS BIGINT)'
    end = f'TRY_CAST({c("end")} AS BIGINT)' if "end" in c.present else "NULL::BIGINT"
    poff = f'COALESCE(TRY_CAST({p("offset")} AS BIGINT), 0)'
    return [
        f"""CREATE TEMP TABLE _payload_offsets AS
            SELECT TRY_CAST(p."domainId" AS BIGINT) AS domain_id, p."name"::VARCHAR AS field, min({poff}) AS off
            FROM {_src("NVTX_PAYLOAD_SCHEMA_ENTRIES")} p
            WHERE p."name" IN ('{NCCL_SIZE_FIELD}', '{NCCL_RANKS_FIELD}', '{NCCL_COMM_FIELD}')
            GROUP BY ALL HAVING min({poff}) = max({poff})""",
        f"""CREATE TEMP TABLE _nccl_ev AS
            SELECT * FROM (
                SELECT {_pid(gtid)} AS pid, {_tid(gtid)} AS tid,
                       {_time('TRY_CAST(e."start" AS BIGINT)', off)} AS start_ns, {_time(end, off)} AS end_ns,
                       {text}::VARCHAR AS name, TRY_CAST(e."domainId" AS BIGINT) AS dom,
                       {js}::VARCHAR AS js, {bin_hex} AS hx
                FROM {_src("NVTX_EVENTS")} e {tx_join}
                WHERE e."eventType" IN ('59', '60') AND ({js} IS NOT NULL OR {c("binaryData")} IS NOT NULL))
            WHERE starts_with(name, 'nccl')""",
    ]


def _nccl_calls(info: ExportInfo) -> list[Step]:
    """The ``nccl_calls`` rows from what ``varchar_statements`` copied: the message size of each NCCL
    call and the rank count of each communicator init, from JSON or from the bytes at the field's offset
    (per domain, used only when every schema of the domain agrees on it)."""
    if not _has_payloads(info):
        return []

    def field(name: str, alias: str, width: int, target: str) -> str:
        from_json = f"""TRY_CAST(json_extract_string(TRY_CAST(ev.js AS JSON), '$."{name}"') AS HUGEINT)"""
        from_bin = (f"CASE WHEN ev.hx IS NOT NULL AND length(ev.hx) >= 2 * ({alias}.off + {width}) "
                    f"THEN {_le_uint('ev.hx', f'{alias}.off', width)} END")
        value = f"COALESCE({from_json}, {from_bin})"
        return f"CASE WHEN {value} BETWEEN 0 AND {MAX_PAYLOAD_FIELD} THEN ({value})::{target} END"

    # The communicator id is a 64-bit hash: any value, kept as its decimal text.
    comm = (f"""COALESCE(TRY_CAST(json_extract_string(TRY_CAST(ev.js AS JSON), '$."{NCCL_COMM_FIELD}"') AS UBIGINT),
                        CASE WHEN ev.hx IS NOT NULL AND length(ev.hx) >= 2 * (oc.off + 8)
                             THEN ({_le_uint('ev.hx', 'oc.off', 8)})::UBIGINT END)::VARCHAR""")

    return [
        Step("nccl_calls", f"""
            INSERT INTO nccl_calls
            SELECT ev.pid, ev.tid, ev.start_ns, ev.end_ns, ev.name,
                   CASE WHEN NOT starts_with(ev.name, 'ncclComm') THEN {field(NCCL_SIZE_FIELD, "os", 8, "BIGINT")} END,
                   CASE WHEN starts_with(ev.name, 'ncclComm') THEN {field(NCCL_RANKS_FIELD, "orr", 4, "INTEGER")} END,
                   {comm}
            FROM _nccl_ev ev
            LEFT JOIN _payload_offsets os ON os.domain_id = ev.dom AND os.field = '{NCCL_SIZE_FIELD}'
            LEFT JOIN _payload_offsets orr ON orr.domain_id = ev.dom AND orr.field = '{NCCL_RANKS_FIELD}'
            LEFT JOIN _payload_offsets oc ON oc.domain_id = ev.dom AND oc.field = '{NCCL_COMM_FIELD}'"""),
        Step("cleanup", "DROP TABLE _nccl_ev; DROP TABLE _payload_offsets"),
    ]


# Push/pop ranges nest per thread: a range's depth is the number of ranges open on its thread when it
# starts. Walk +1/-1 events in time order; at equal times an end precedes a start (siblings touch), a
# longer range starts before a shorter one (parent first), and a zero-length range closes after it opens.
NVTX_NESTING_SQL = """
    INSERT INTO nvtx
    WITH pp AS (SELECT rid, pid, tid, start_ns, end_ns FROM _nvtx
                WHERE kind = 'push_pop' AND end_ns IS NOT NULL AND end_ns >= start_ns),
    ev AS (
        SELECT rid, pid, tid, start_ns AS t, 1 AS step, 1 AS k, start_ns - end_ns AS tie FROM pp
        UNION ALL
        SELECT rid, pid, tid, end_ns, -1, CASE WHEN end_ns = start_ns THEN 2 ELSE 0 END, 0 FROM pp
    ),
    depth AS (
        SELECT rid, step, sum(step) OVER (PARTITION BY pid, tid ORDER BY t, k, tie, rid
                                          ROWS UNBOUNDED PRECEDING) - 1 AS nesting
        FROM ev
    )
    SELECT n.pid, n.tid, n.start_ns, n.end_ns, n.text, n.domain, n.kind, d.nesting::INTEGER
    FROM _nvtx n LEFT JOIN (SELECT rid, nesting FROM depth WHERE step = 1) d ON d.rid = n.rid"""


def _devices(info: ExportInfo) -> list[Step]:
    t = info.tables
    g = _Cols(info, "TARGET_INFO_GPU", "g")
    details = (f'{g("name")}, {g("uuid")}, {g("busLocation")}, {g("smCount")}, {g("totalMemory")}, '
               f'{g("memoryBandwidth")}, {g("l2CacheSize")}, {g("clockRate")}, {g("computeMajor")}, '
               f'{g("computeMinor")}, {g("maxWarpsPerSm")}, {g("maxBlocksPerSm")}, {g("maxRegistersPerSm")}, '
               f'{g("maxShmemPerSm")}')
    gpu = _src("TARGET_INFO_GPU")
    has_gpu = "TARGET_INFO_GPU" in t and "id" in g.present
    if "TARGET_INFO_CUDA_DEVICE" in t and has_gpu:
        d = _Cols(info, "TARGET_INFO_CUDA_DEVICE", "d")
        # cudaId is the ordinal the process saw (KERNEL.deviceId); GPUs no traced process used get NULL.
        return [Step("devices", f"""
            INSERT INTO devices
            SELECT d."cudaId", {d("pid")}, d."gpuId", {details}
            FROM {_src("TARGET_INFO_CUDA_DEVICE")} d LEFT JOIN {gpu} g ON g."id" = d."gpuId"
            UNION ALL
            SELECT NULL, NULL, g."id", {details} FROM {gpu} g
            WHERE g."id" NOT IN (SELECT "gpuId" FROM {_src("TARGET_INFO_CUDA_DEVICE")})""")]
    if has_gpu and "cuDevice" in g.present:
        return [Step("devices", f'INSERT INTO devices SELECT g."cuDevice", NULL, g."id", {details} FROM {gpu} g')]
    if "TARGET_INFO_CUDA_GPU" in t:
        # 2020 exports: per-process CUDA view. Its memory size/bandwidth columns use other units; left NULL.
        c = _Cols(info, "TARGET_INFO_CUDA_GPU", "c")
        return [Step("devices", f"""
            INSERT INTO devices
            SELECT c."deviceId", {c("pid")}, NULL, c."name", NULL, {c("pciBusId")}, {c("numMultiprocessors")},
                   NULL, NULL, {c("l2CacheSize")}, NULL, {c("computeCapabilityMajor")},
                   {c("computeCapabilityMinor")}, {c("maxWarpsPerMultiprocessor")},
                   {c("maxBlocksPerMultiprocessor")}, {c("maxRegistersPerMultiprocessor")},
                   {c("maxSharedMemoryPerMultiprocessor")}
            FROM {_src("TARGET_INFO_CUDA_GPU")} c""")]
    if has_gpu:
        return [Step("devices", f'INSERT INTO devices SELECT NULL, NULL, g."id", {details} FROM {gpu} g')]
    return []
