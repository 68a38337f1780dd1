/* The idle painting's sweep: one pass over the idle parts and the covering intervals.
 *
 * Built with the package (setup.py) as a shared library and called through ctypes from
 * analysis/diagnosis/sweep.py, which documents it and checks every argument (types, lengths, room for
 * the records). No Python API here: plain arrays in, counts out.
 */
#include <stdint.h>
#include <stdlib.h>

#if defined(_WIN32)
#define EXPORT __declspec(dllexport)
#else
#define EXPORT __attribute__((visibility("default")))
#endif

/* Records of (bin, slot, ns, calls), four int64 per row. Returns -1 when ``rec`` has no room left. */
static int put(int64_t *rec, int64_t cap, int64_t *n, int64_t b, int64_t sl, int64_t ns, int64_t calls) {
    if (*n >= cap) return -1;
    int64_t *r = rec + 4 * (*n);
    r[0] = b;
    r[1] = sl;
    r[2] = ns;
    r[3] = calls;
    (*n)++;
    return 0;
}

/* Returns the number of records written, -1 when ``rec`` is too small, -2 when out of memory, -3 when an
 * index is out of range (a category, slot, source, piece, cover row or order entry). */
EXPORT int64_t goodput_sweep(
    int64_t nparts, const int64_t *fs, const int64_t *fe, const int64_t *fpiece,
    int64_t npieces,       /* length of the per-piece arrays (taken_out, long_) */
    int64_t ncuts, const int64_t *cuts, int64_t bins,
    int64_t n, const int64_t *order, /* the intervals in start order: positions, or NULL (already) */
    const int64_t *s, const int64_t *e, const uint8_t *cat, const int64_t *slot,
    const uint8_t *src,    /* per interval: 0, or the source (1 or 2) whose cover is measured, or NULL */
    const int64_t *cover_pieces, /* ascending: the pieces measured, row r of ``cover`` for cover_pieces[r] */
    int64_t *cover, int64_t ncover, /* (ncover, 2): per row, the time sources 1 and 2 cover, added to */
    int64_t nslots, int64_t ncat, int64_t none_code,
    const uint8_t *take,   /* (bins, ncat) or NULL */
    const uint8_t *long_,  /* per piece or NULL */
    uint8_t *counted,      /* per interval, updated */
    int64_t *ns_out,       /* (bins, ncat), added to */
    int64_t *taken_out,    /* per piece, added to (with take) */
    int64_t *long_out,     /* per category, added to (with long_) */
    int64_t *rec, int64_t cap)
{
    if (bins < 1 || none_code < 0 || none_code >= ncat) return -3;
    int64_t *best_end = malloc(sizeof(int64_t) * (size_t)ncat);
    int64_t *best_who = malloc(sizeof(int64_t) * (size_t)ncat);
    int64_t *acc_ns = calloc((size_t)(nslots > 0 ? nslots : 1), sizeof(int64_t));
    int64_t *acc_calls = calloc((size_t)(nslots > 0 ? nslots : 1), sizeof(int64_t));
    int64_t *last_bin = malloc(sizeof(int64_t) * (size_t)(nslots > 0 ? nslots : 1));
    int64_t nrec = 0, j = 0, status = 0, ci = -1;
    int64_t ri = 0, prev_pc = -1; /* the first row of ``cover_pieces`` not below the parts' piece so far */
    int64_t src_end[2] = {INT64_MIN, INT64_MIN}; /* per source, the furthest end of its started intervals */
    int64_t *present = NULL; /* the categories present, most specific first */
    int64_t npresent = 0;
    if (!best_end || !best_who || !acc_ns || !acc_calls || !last_bin) {
        status = -2;
        goto done;
    }
    for (int64_t k = 0; k < ncat; k++) {
        best_end[k] = INT64_MIN;
        best_who[k] = -1;
    }
    /* The categories present, most specific first: the winner's search looks only at those. */
    present = malloc(sizeof(int64_t) * (size_t)ncat);
    if (!present) {
        status = -2;
        goto done;
    }
    uint8_t seen[256] = {0}; /* ``cat`` is one byte */
    for (int64_t i = 0; i < n; i++) seen[cat[i]] = 1;
    for (int64_t k = 0; k < 256; k++) {
        if (!seen[k]) continue;
        if (k >= ncat) {
            status = -3;
            goto done;
        }
        present[npresent++] = k;
    }
    for (int64_t k = 0; k < nslots; k++) last_bin[k] = -1;
    for (int64_t p = 0; p < nparts; p++) {
        int64_t t = fs[p];
        /* The part's bin: the last cut at or before its start (parts come in time order), within [0, bins). */
        while (ci + 1 < ncuts && cuts[ci + 1] <= t) ci++;
        const int64_t bn = ci < 0 ? 0 : (ci >= bins ? bins - 1 : ci);
        const int64_t b = fe[p], pc = fpiece[p];
        if (pc < 0 || ((take || long_) && pc >= npieces)) {
            status = -3;
            goto done;
        }
        int64_t row = -1;
        if (cover_pieces) { /* parts come in piece order: the row pointer only moves forward (else restarts) */
            if (pc < prev_pc) ri = 0;
            prev_pc = pc;
            while (ri < ncover && cover_pieces[ri] < pc) ri++;
            if (ri < ncover && cover_pieces[ri] == pc) row = ri;
        }
        while (t < b) {
            while (j < n) { /* the intervals started by now */
                const int64_t i = order ? order[j] : j;
                if (i < 0 || i >= n) {
                    status = -3;
                    goto done;
                }
                if (s[i] > t) break;
                const int64_t k = cat[i]; /* checked with the categories present */
                if (slot[i] < 0 || slot[i] >= nslots || (src && src[i] > 2)) {
                    status = -3;
                    goto done;
                }
                if (e[i] >= best_end[k]) {
                    best_end[k] = e[i];
                    best_who[k] = i;
                }
                if (src && src[i] && e[i] > src_end[src[i] - 1]) src_end[src[i] - 1] = e[i];
                j++;
            }
            int64_t act = -1;
            for (int64_t q = 0; q < npresent; q++) {
                if (best_end[present[q]] > t) {
                    act = present[q];
                    break;
                }
            }
            int64_t nxt = b;
            if (j < n) {
                const int64_t next_start = s[order ? order[j] : j];
                if (next_start < nxt) nxt = next_start;
            }
            if (act >= 0 && best_end[act] < nxt) nxt = best_end[act];
            if (row >= 0) { /* the sources' covers end where a step must end too */
                for (int x = 0; x < 2; x++) {
                    if (src_end[x] > t && src_end[x] < nxt) nxt = src_end[x];
                }
            }
            const int64_t len = nxt - t;
            if (row >= 0) {
                for (int x = 0; x < 2; x++) {
                    if (src_end[x] > t) cover[2 * row + x] += len;
                }
            }
            const int64_t c = act >= 0 ? act : none_code;
            ns_out[bn * ncat + c] += len;
            if (take && take[bn * ncat + c]) {
                taken_out[pc] += len;
            } else if (long_ && long_[pc]) {
                long_out[c] += len;
            }
            if (act >= 0) {
                const int64_t who = best_who[act], sl = slot[who];
                if (last_bin[sl] != bn) {
                    if (last_bin[sl] >= 0 && put(rec, cap, &nrec, last_bin[sl], sl, acc_ns[sl], acc_calls[sl])) {
                        status = -1;
                        goto done;
                    }
                    last_bin[sl] = bn;
                    acc_ns[sl] = 0;
                    acc_calls[sl] = 0;
                }
                acc_ns[sl] += len;
                if (!counted[who]) {
                    counted[who] = 1;
                    acc_calls[sl]++;
                }
            }
            t = nxt;
        }
    }
    for (int64_t sl = 0; sl < nslots; sl++) {
        if (last_bin[sl] >= 0 && put(rec, cap, &nrec, last_bin[sl], sl, acc_ns[sl], acc_calls[sl])) {
            status = -1;
            goto done;
        }
    }
done:
    free(present);
    free(best_end);
    free(best_who);
    free(acc_ns);
    free(acc_calls);
    free(last_bin);
    return status ? status : nrec;
}

/* Calls in start order (``start`` ascending): their ends become the running maximum (``end`` rewritten in
 * place: the furthest any call started so far reaches) and ``owner[i]`` the position of the call that
 * reaches that far (the later one on a tie). Returns 0, or -3 when ``start`` is not ascending (nothing
 * is written then: the caller sorts and calls again). */
EXPORT int64_t goodput_reach(int64_t n, const int64_t *start, int64_t *end, int64_t *owner) {
    for (int64_t i = 1; i < n; i++) {
        if (start[i] < start[i - 1]) return -3;
    }
    int64_t reach = INT64_MIN, who = 0;
    for (int64_t i = 0; i < n; i++) {
        if (end[i] >= reach) {
            reach = end[i];
            who = i;
        }
        end[i] = reach;
        owner[i] = who;
    }
    return 0;
}

/* The last position of ``a`` (ascending, length n) at or before ``q``, or -1, given ``i``: the answer for an
 * earlier query (or -1). A query at or after that one gallops forward from ``i`` (a step beyond the answer,
 * then bisection); one before it searches from the start. */
static int64_t gallop_last_le(int64_t n, const int64_t *a, int64_t q, int64_t i) {
    if (i >= 0 && a[i] > q) i = -1;
    int64_t lo = i, step = 1, hi = i + 1;
    while (hi < n && a[hi] <= q) {
        lo = hi;
        hi = lo + step;
        step <<= 1;
    }
    if (hi > n) hi = n;
    /* a[lo] <= q (or lo = -1); a[hi] > q (or hi = n): the answer lies in [lo, hi). */
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] <= q) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* For each query ``t[j]``: the position of the last element of ``a`` (ascending, length n) at or before it,
 * or -1 (NumPy's ``searchsorted(a, t, side="right") - 1``). Queries in ascending order walk forward from
 * the previous answer, galloping (linear in all, logarithmic per far jump); a query below the previous
 * one is searched afresh, so any order is answered. Every position written lies in [-1, n). */
EXPORT void goodput_last_le(int64_t n, const int64_t *a, int64_t m, const int64_t *t, int64_t *out) {
    int64_t i = -1;
    for (int64_t j = 0; j < m; j++) {
        i = gallop_last_le(n, a, t[j], i);
        out[j] = i;
    }
}

/* Per query ``t[j]``: the position of the call running then that reaches furthest, or -1: calls in start
 * order, ``reach``/``owner`` from goodput_reach (the last call started at or before t[j] gives the furthest
 * reach so far; it runs at t[j] when that reach is at or after t[j]). Queries walk as in goodput_last_le.
 * Returns 0, or -3 when an owner position is out of range. */
EXPORT int64_t goodput_call_at(int64_t n, const int64_t *start, const int64_t *reach, const int64_t *owner,
                               int64_t m, const int64_t *t, int64_t *out) {
    goodput_last_le(n, start, m, t, out);
    for (int64_t j = 0; j < m; j++) {
        const int64_t i = out[j];
        if (i < 0) continue;
        if (reach[i] < t[j]) {
            out[j] = -1;
        } else {
            if (owner[i] < 0 || owner[i] >= n) return -3;
            out[j] = owner[i];
        }
    }
    return 0;
}

/* The distinct values of ``x`` (ascending, written over its first elements), as their count; -3 when ``x``
 * is not ascending (nothing written). */
EXPORT int64_t goodput_distinct_sorted(int64_t n, int64_t *x) {
    for (int64_t i = 1; i < n; i++) {
        if (x[i] < x[i - 1]) return -3;
    }
    int64_t k = n ? 1 : 0;
    for (int64_t i = 1; i < n; i++) {
        if (x[i] != x[k - 1]) x[k++] = x[i];
    }
    return k;
}

/* Names looked up in a dictionary: ``table_h`` (ascending hashes) and ``table_c`` (their category codes). Per
 * hash: its position in the table as its slot and the table's code, or slot -1 and ``dflt`` when absent.
 * Returns how many were absent. Rows of one name come in runs, so the previous answer is tried first. */
EXPORT int64_t goodput_lookup(int64_t nt, const uint64_t *table_h, const uint8_t *table_c, int64_t m,
                              const uint64_t *h, uint8_t dflt, uint8_t *code_out, int64_t *slot_out) {
    int64_t missing = 0, last = -1;
    for (int64_t j = 0; j < m; j++) {
        const uint64_t q = h[j];
        int64_t at = -1;
        if (last >= 0 && table_h[last] == q) {
            at = last;
        } else {
            int64_t lo = 0, hi = nt; /* the first position whose hash is at or above q */
            while (lo < hi) {
                const int64_t mid = lo + (hi - lo) / 2;
                if (table_h[mid] < q) lo = mid + 1;
                else hi = mid;
            }
            if (lo < nt && table_h[lo] == q) at = lo;
        }
        if (at >= 0) {
            last = at;
            slot_out[j] = at;
            code_out[j] = table_c[at];
        } else {
            slot_out[j] = -1;
            code_out[j] = dflt;
            missing++;
        }
    }
    return missing;
}

/* The gap owner table's structural pass over one unit's gaps (in start order): per gap its owner code,
 * ``long_code`` when it lasts at least ``min_gap``, else ``run_code`` when the last run of short kernels
 * that started at or before it (``run_start`` ascending) lasts to its end (the gap's position and the
 * run's id then go to ``run_idx``/``run_of``, room for n), else 0. Per code (``tot_ns``/``tot_n``, 256
 * entries, added to) the time the gaps of that code keep (their length less ``taken``, NULL: nothing
 * taken) and their number, counting only gaps that keep some; ``left``: the gap is of code 0 and keeps
 * some. Returns how many gaps went to the runs. */
EXPORT int64_t goodput_classify(int64_t n, const int64_t *gs, const int64_t *ge, const int64_t *taken,
                                int64_t min_gap, int64_t nruns, const int64_t *run_start, const int64_t *run_end,
                                const int64_t *run_id, uint8_t long_code, uint8_t run_code, uint8_t *owner,
                                int64_t *run_idx, int64_t *run_of, int64_t *tot_ns, int64_t *tot_n,
                                uint8_t *left) {
    int64_t k = 0, ri = -1; /* ri: the last run started at or before the previous gap (or -1) */
    for (int64_t i = 0; i < n; i++) {
        const int64_t a = gs[i], b = ge[i];
        uint8_t code = 0;
        if (b - a >= min_gap) {
            code = long_code;
        } else if (nruns > 0) {
            ri = gallop_last_le(nruns, run_start, a, ri);
            if (ri >= 0 && run_end[ri] >= b) {
                code = run_code;
                run_idx[k] = i;
                run_of[k] = run_id[ri];
                k++;
            }
        }
        owner[i] = code;
        const int64_t keep = b - a - (taken ? taken[i] : 0);
        if (keep > 0) {
            tot_ns[code] += keep;
            tot_n[code]++;
        }
        left[i] = code == 0 && keep > 0;
    }
    return k;
}

/* GPU002's regions: per gap marked in ``mask`` (in any order), the time it keeps (its length less ``taken``,
 * NULL: nothing taken) is added to ``out[region[(gs - u0) / w]]`` when that window belongs to a region
 * (>= 0). Returns 0, or -3 when a gap's window or region is out of range. */
EXPORT int64_t goodput_region_sum(int64_t n, const int64_t *gs, const int64_t *ge, const int64_t *taken,
                                  const uint8_t *mask, int64_t u0, int64_t w, int64_t nwin, const int64_t *region,
                                  int64_t nreg, int64_t *out) {
    if (w <= 0) return -3;
    for (int64_t i = 0; i < n; i++) {
        if (!mask[i]) continue;
        if (gs[i] < u0) return -3;
        const int64_t k = (gs[i] - u0) / w;
        if (k >= nwin) return -3;
        const int64_t r = region[k];
        if (r < 0) continue;
        if (r >= nreg) return -3;
        out[r] += ge[i] - gs[i] - (taken ? taken[i] : 0);
    }
    return 0;
}

/* Runs of short kernels of one unit: its operations in time order, those of category at most ``kmax`` are
 * kernels (the others, copies and memsets, neither extend nor break a run). A run is a maximal stretch of
 * consecutive kernels each lasting less than ``short_ns``, kept when it holds at least ``min_run``. Per kept
 * run: the position of its first kernel among the unit's kernels, that kernel's start, the latest end of
 * its kernels, their number and their summed time. Returns the runs' number, or -1 past ``cap`` runs. */
EXPORT int64_t goodput_short_runs(int64_t n, const int64_t *start, const int64_t *end, const uint8_t *cat,
                                  uint8_t kmax, int64_t short_ns, int64_t min_run, int64_t cap, int64_t *first,
                                  int64_t *run_start, int64_t *run_end, int64_t *run_kernels, int64_t *kernel_ns) {
    int64_t k = 0, runs = 0, in = 0, f = 0, s = 0, e = 0, sum = 0;
    for (int64_t i = 0; i <= n; i++) {
        if (i < n && cat[i] > kmax) continue;
        const int64_t d = i < n ? end[i] - start[i] : 0;
        if (i < n && d < short_ns) {
            if (in == 0) {
                f = k;
                s = start[i];
                e = end[i];
                sum = 0;
            } else if (end[i] > e) {
                e = end[i];
            }
            sum += d;
            in++;
        } else { /* a long kernel, or past the last operation: the run so far ends */
            if (in > 0 && in >= min_run) {
                if (runs >= cap) return -1;
                first[runs] = f;
                run_start[runs] = s;
                run_end[runs] = e;
                run_kernels[runs] = in;
                kernel_ns[runs] = sum;
                runs++;
            }
            in = 0;
        }
        k++;
    }
    return runs;
}
