/* The event loop of the ``waves`` GPU model, compiled: the mechanics of the Python loop of tests/oracle/waves_loop.py
 * (_run_python: heap, ready counts, hardware queues, dispatch FIFOs, CTA batches, copy engines, rate
 * updates), statement for statement and in the same order, so heap ties break the same way (one shortcut of the
 * same effects: a CTA batch whose kernel's next wave takes its SMs back at once, next_wave).
 *
 * No GPU rule lives here. Python (schedsim.sim.waves_columns.run_waves_program) computes every per-op,
 * per-kernel and per-collective parameter from schedsim.gpu.rules (CTA counts, wave times, queues, host
 * issue times, communicator FIFO edges, link ends) and every rate as a table built from gpu_model's rule
 * functions (gpu.rates.rate_tables); this loop reads them. The only arithmetic here is the Python loop's:
 * remaining work (rem - (t - last) * rate), finish times (t + rem / rate), a transfer's minimum over its link
 * ends of comm[rank] / transfers on that end (a NIC end with shared links: comm[rank] x the flow's share, which
 * schedsim.network.share.LinkShare.event, called back at flow starts and ends, sets; a flow alone on all its links
 * is counted on and off them here, share_event, with no call) (kept as the oracle's _LinkMin
 * keeps it: the minimum and the count of ends at it, refreshed for the dirty ranks of each event), and the
 * one-way factor. Built with
 * -ffp-contract=off so no fused multiply-add changes a rounding: timelines are bit-identical to the Python
 * loop's (tests/sim/test_cwaves.py).
 *
 * Entry: run(ints, floats, arrays) -> number of jobs run; see schedsim.sim.waves_columns.run_waves_program for the order.
 * Also walk(binding, ogrp, i, out), the critical path's walk back (schedsim.sim.engine._timeline_program),
 * acyclic(n, src, dst), Kahn's sweep for the static checks (schedsim.lower.checks._acyclic),
 * first_set(...), the pipeline emitter's input lookups (schedsim.lower.pipeline._FastEmitter._inputs),
 * acyclic_units(n, units, parts), the same sweep over the wait-for graph's edge parts (checks._no_hang),
 * torch_rows(...), torch's _add_send_recv on an order's columns (schedsim.lower.pipeline._torch_lower_cols),
 * succ_csr(...), the DAG's successor lists for schedsim.sim.waves_columns._succ (counting sort by source),
 * kernels(...), the kernel and hardware-queue arrays of schedsim.sim.waves_columns._kernels, fifo_edges(...),
 * rule communicator-order's communicator-order edges, issue_times(...), rule host-issue's issue times from gpu_model's per-class tables,
 * rank_codes(...), rule hardware-queues's per-rank stream numbering, and stream_reached(...), when each op's stream reached
 * it (the preparation and post-pass of
 * schedsim.sim.waves_columns.run_waves_program); join_rows(pieces, n), cut(raw, starts, ends, out) and item_bounds(raw, starts,
 * ends), the JSON text of trace.json's events (schedsim.report.chrome._rows_json, _cut and _json_strs), and
 * held_samples(val, keep), the samples its counters keep (_rate_samples), and overlaps(...) and merge_pieces(...),
 * the metrics' pieces and their overlaps (schedsim.sim.metrics._merged_by and _overlap_by). The package has no other form of any of them: their numpy or
 * Python forms are test oracles (tests/oracle/numpy_helpers.py).
 * Raises MemoryError, or what a Python signal handler raises while it runs (KeyboardInterrupt on Ctrl-C:
 * the handlers run every SIGNAL_EVERY + 1 events).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;
typedef int32_t i32; /* the per-op, per-kernel and per-group buffers: indices and counts below 2**31 */

enum { BATCH = 0, XFER = 1, COPY = 2 };
#define HOST (-2)

/* ---- growable arrays ----------------------------------------------------------------------------------- */
/* Its first IVEC_IN entries in the struct itself (a == in; one 64-byte line with n and cap), the rest on the heap
 * once it outgrows them: a rank's running jobs are read at every event of the rank, and with one malloc'd block per
 * rank (100,000 ranks) that block was a cache miss of its own beside the rank's entry. */
#define IVEC_IN 5
typedef struct { i64 *a; i64 n, cap; i64 in[IVEC_IN]; } ivec;
_Static_assert(sizeof(ivec) == 64, "an ivec is one 64-byte line");

/* The buffer a (of cap entries of size bytes, full) grown to 2·cap entries: a copy on the heap where a is the
 * struct's own in-line buffer, else realloc'd; NULL if out of memory (a unchanged) */
static void *grown(void *a, const void *in, i64 cap, size_t size) {
    if (a != in) return realloc(a, (size_t)(2 * cap) * size);
    void *p = malloc((size_t)(2 * cap) * size);
    if (p) memcpy(p, in, (size_t)cap * size);
    return p;
}

static int ivec_grow(ivec *v) {
    i64 *p = v->cap ? grown(v->a, v->in, v->cap, sizeof(i64)) : v->in;
    if (!p) return -1;
    v->a = p;
    v->cap = v->cap ? 2 * v->cap : IVEC_IN;
    return 0;
}

static inline int ivec_push(ivec *v, i64 x) {
    if (v->n == v->cap && ivec_grow(v) < 0) return -1;
    v->a[v->n++] = x;
    return 0;
}

static void ivec_free(ivec *v) {
    if (v->a != v->in) free(v->a);
}

/* n entries of size bytes (a multiple of 64), zeroed, the first on a 64-byte line (so each entry on lines of its
 * own); NULL if out of memory. Freed with free(). */
static void *lines_zeroed(i64 n, size_t size) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)(n ? n : 1) * size)) return NULL;
    memset(p, 0, (size_t)(n ? n : 1) * size);
    return p;
}

/* ---- heaps: the main event heap ordered by (t, seq), a rank's dispatch FIFO by (t, op, kernel) -----------
 * Both keys are unique (seq counts pushes; an op belongs to one kernel), so the pop order is the total order of
 * the keys, whatever the heap's shape: 4-ary (half the levels of a binary heap), the smallest child found
 * without branches (the main heap holds ~2 entries per rank, often at equal times: the comparisons' outcomes
 * are not predictable). On the 1M-op overlap_gen run (world 64: 5M pops of a ~130-entry heap) heap_pop is
 * still ~18 % of the loop (a chain of dependent loads and compares); the binary heap with branches was ~30 %. */
typedef struct { double t; i64 a, b; } hent; /* main: a = seq, b = job (or -1 - op); pend: a = op, b = kernel */
/* As ivec: the first HEAP_IN entries in the struct (e == in; n, cap and the head on one 64-byte line), the rest on
 * the heap once it outgrows them (a rank's dispatch FIFO, read at every event of the rank) */
#define HEAP_IN 4
typedef struct { hent *e; i64 n, cap; hent in[HEAP_IN]; i64 pad_; } heap_t;
_Static_assert(sizeof(heap_t) == 128, "a heap_t is two 64-byte lines");
typedef struct { hent *e; i64 h, n, cap; hent hd, tl; } lane_t; /* entries in ascending key order: a ring of n from e[h];
                                                               * hd and tl copies of its head and last (n > 0), which the
                                                               * scans of every event read without the ring's index */
#define LANES 8      /* lanes at most */
#define LANES_FIRST 4 /* lanes open at the start; the others open one by one (event_push) */
#define LANE_OPEN 1024 /* a push for the heap opens another lane instead once the heap holds this many */
#define LANE_KEEP 4096 /* entries an emptied lane keeps room for */

/* (x.t, x.a) < (y.t, y.a) as Python compares the tuples (a NaN time is never less), as 0 or 1, no branch */
static inline int hless(const hent *x, const hent *y) {
    return (x->t < y->t) | ((x->t == y->t) & (x->a < y->a));
}

static int heap_push(heap_t *h, double t, i64 a, i64 b) {
    if (h->n == h->cap) {
        hent *p = h->cap ? grown(h->e, h->in, h->cap, sizeof(hent)) : h->in;
        if (!p) return -1;
        h->e = p;
        h->cap = h->cap ? 2 * h->cap : HEAP_IN;
    }
    i64 i = h->n++;
    hent x = {t, a, b};
    while (i > 0) {
        i64 up = (i - 1) >> 2;
        if (!hless(&x, &h->e[up])) break;
        h->e[i] = h->e[up];
        i = up;
    }
    h->e[i] = x;
    return 0;
}

/* x into the heap's first n entries at i, a hole, and down to where it belongs (the hole's subtree holds the
 * rest of the heap's order) */
static void sift_down(hent *e, i64 n, i64 i, hent x) {
    for (;;) {
        i64 c = 4 * i + 1, m;
        if (c + 3 < n) { /* four children: a tournament of three branch-free comparisons */
            i64 m01 = c + hless(&e[c + 1], &e[c]), m23 = c + 2 + hless(&e[c + 3], &e[c + 2]);
            m = m01 ^ ((m01 ^ m23) & -(i64)hless(&e[m23], &e[m01])); /* m23 if less: no branch to mispredict */
        } else if (c < n) {
            m = c;
            for (i64 d = c + 1; d < n; d++)
                if (hless(&e[d], &e[m])) m = d;
        } else {
            break;
        }
        if (!hless(&e[m], &x)) break;
        e[i] = e[m];
        i = m;
    }
    e[i] = x;
}

static void heap_free(heap_t *h) {
    if (h->e != h->in) free(h->e);
}

static hent heap_pop(heap_t *h) {
    hent top = h->e[0];
    i64 n = --h->n;
    if (n) sift_down(h->e, n, 0, h->e[n]);
    return top;
}

/* ---- inputs (buffers owned by Python) and state --------------------------------------------------------- */
typedef struct { /* one job: remaining solo work, rate, time of the last rate change; what it is */
    double rem, rate, last;
    i64 key, ver, seen; /* ver: seq of its latest heap entry (the others are stale); seen: settle's stamp, or the
                         * next free slot while on the free list */
    i32 type, sms, rank, pad; /* rank: a batch's or copy's (krank[key], read here instead: 64 bytes a job) */
} job_t;

typedef struct {
    /* sizes and scalars */
    i64 N, K, G, world, S, nsm, cstride; /* cstride: S / nsm + 1, the comm table's row length */
    double one_way, xlat, mem_boost;
    /* tables (gpu.rates.rate_tables) */
    const double *comm_tab, *batch_tab, *copy_tab;
    /* per op */
    i32 *npred;
    const i32 *succ_ptr, *succ_idx, *sid, *orank, *ogrp, *kern;
    i64 speriod; /* 0, or the successor CSR of rank 0's speriod ops alone: op i's are orank[i]·speriod later */
    const double *issue, *opwork;
    const i32 *otmpl; /* opwork's entry of each op (its template), NULL when opwork is per op */
    /* per kernel */
    const i32 *kops_ptr, *kops_idx, *ktype, *krank, *kmem, *kq;
    i32 *kneed, *kleft;
    const double *ktau;
    i32 *ktail; /* rule split-k: CTAs of the kernel's reduction still to run; negative once handed over */
    const double *ktail_tau;
    const double *kgain; /* rule wave-tail: gpu.rates.fill_gain of the kernel's wave time */
    /* compact forms (run()): kern, kops_ptr and kops_idx NULL when every op is its own kernel, in op order (each
     * the identity); ktail of one entry when every kernel's is 0, and kmem, ktail_tau, kgain and ktau, which only
     * compute kernels (their CTA batches) read, of one entry when every compute kernel has that value (index k &
     * its mask: 0, else ~0); kone: every kernel has one op (kneed and kwait of one entry, 1, never written) */
    i64 mmem, mtail, mttau, mgain, mtau;
    int kone;
    /* hardware queues */
    const i32 *q_ptr, *q_idx;
    /* per collective / send-recv pair (group) */
    const i32 *gmem_ptr, *gmem_idx, *gends_ptr, *gends_idx, *grev_ptr, *grev_idx, *granks_ptr, *granks_idx;
    const i32 *epos_ptr, *epos_idx; /* per member slot (gmem_ptr[g] + m): positions in gends of its rank's ends */
    const double *gwork;
    /* outputs */
    double *start, *end, *ready_t, *deps_t, *khand;
    i32 *binding;

    /* kernels */
    i32 *kbat, *kwait, *qhead, *cqnext;
    char *kstarted, *kready;
    /* groups */
    i32 *gres, *garr, *xcnt; /* counts of a group's members or link ends: below 2**31 (int32 CSRs) */
    double *xmin, *xval;
    char *xinit;
    /* ranks */
    i64 *free_, *held, *nccl_n, *ncomm, *ncopy, *nlink, *cqhead, *cqtail;
    double *nmem; /* HBM load of the memory-bound CTAs resident (rule hbm-share: gpu.rates.mem_rate) */
    i64 *nwait; /* compute kernels in the rank's dispatch FIFO (rule wave-tail) */
    double *crate;
    char *intoplace, *indirty;
    char *lchg; /* an end of the rank changed its transfer count (nlink) since the rank was last settled */
    ivec toplace, dirty;
    ivec *run_job, *run_slot; /* per rank: running jobs, and the member slot of a transfer (its rank's index) */
    heap_t *pend;
    /* jobs: slots of finished jobs are reused (free list), so memory follows the jobs running at once, not the
     * jobs of the run (millions of CTA batches); a heap entry is live only while it is its job's latest (ver), so
     * the entries of a slot's earlier jobs stay stale */
    job_t *job;
    i64 jn, jcap, jfree, njobs;
    heap_t heap;
    lane_t lane[LANES]; /* the main heap's entries that came in ascending order (event_push) */
    int nl;             /* lanes open: lane[0 .. nl - 1] */
    int hole; /* the main heap's root is the event being handled, taken but not yet removed (loop, event_push) */
    i64 seq, stamp;
    int oom;
    int stop;         /* a signal handler raised (Ctrl-C): the exception is set */
    /* run()'s optional halt (halt_h, halt_cw): stop at the first op end t with t - halt_h >= halt_cw (rule host-issue's
     * cold-wait test already true: schedsim.gpu.host.host_waited); halted once it did */
    int halt, halted;
    double halt_h, halt_cw;
    PyThreadState *ts; /* the loop runs without the GIL; it takes it back to run signal handlers */
    /* shared links (schedsim.network.share.LinkShare; NULL without): a NIC end (tier 1) is worth
     * crate x gshare[g], the flow's max-min share, which share_cb(g, started) updates at flow starts and ends */
    PyObject *share_cb;
    const double *gshare;
    const i32 *gflag;
    /* optional (NULL without): the flows' links as CSR (lptr[G + 1], llink) and LinkShare's count and first per
     * link, so that a flow that shares none of its links is put on and taken off them here (share_event) */
    const int64_t *lptr, *llink;
    int64_t *lcount, *lfirst;
    /* run()'s optional hostwait (NULL without): rule host-wait (schedsim.sim.host_wait). An op g with hw_a[g] not
     * NaN is a host wait: the host reached its call at hw_a[g] (s, on the static issue times' clock) and blocks
     * there until what it waits for ended: g's predecessors (hw_dev[g] 0, an imported wait), every op of its rank
     * before it (1, device scope) or the ops j with hw_for[j] == g (2, a stream or events); then it issues g and
     * the ops after it hshift[g] later than their static issue times. hgate[i]: the host wait at or before op i
     * on its rank (-1 none); the ops after a wait (up to the next one, included) hold one count of npred until it
     * resolves (the next one, of scope 1 or 2, one count of gcnt), and a wait of scope 1 or 2 one of its own
     * npred; gcnt[g] (scope 1, 2): the counts left before g resolves; hby[g]: the op whose end it blocked for; rfirst[r]: the rank's first op; rdone[r]:
     * its ops ended; rdev[r]: its device-scoped wait not yet drained (-1 none); rshift[r]: its last shift */
    const double *hw_a;
    const i32 *hw_dev, *hw_for;
    double *hshift;
    i32 *hgate, *gcnt, *hby;
    i64 *rfirst, *rdone, *rdev;
    double *rshift;
} W;

/* the rank of a group's member slot p (granks_ptr[g] <= p < granks_ptr[g + 1]): granks_idx[p], or where that is
 * not given (granks_ptr is gmem_ptr: every group's ranks are its members' ranks) its member's own rank */
static inline i64 grank(const W *w, i64 p) { return w->granks_idx ? w->granks_idx[p] : w->orank[w->gmem_idx[p]]; }

#define CHECK(x) do { if ((x) < 0) { w->oom = 1; return; } } while (0)

/* op i's kernel, kernel k's first member slot, the op at member slot p, kernel k's first op (W's compact forms) */
static inline i64 kern_of(const W *w, i64 i) { return w->kern ? w->kern[i] : i; }
static inline i64 kptr_of(const W *w, i64 k) { return w->kops_ptr ? w->kops_ptr[k] : k; }
static inline i64 kidx_of(const W *w, i64 p) { return w->kops_idx ? w->kops_idx[p] : p; }
static inline i64 khead(const W *w, i64 k) { return kidx_of(w, kptr_of(w, k)); }

/* x at the end of lane l (its key above every key in it); a full ring doubles (a power of 2), unwrapped */
static int lane_push(lane_t *l, hent x) {
    if (l->n == l->cap) {
        i64 cap = l->cap ? 2 * l->cap : 64;
        hent *p = malloc((size_t)cap * sizeof(hent));
        if (!p) return -1;
        for (i64 k = 0; k < l->n; k++) p[k] = l->e[(l->h + k) & (l->cap - 1)];
        free(l->e);
        l->e = p;
        l->h = 0;
        l->cap = cap;
    }
    if (!l->n) l->hd = x;
    l->tl = x;
    l->e[(l->h + l->n++) & (l->cap - 1)] = x;
    return 0;
}

static inline const hent *lane_last(const lane_t *l) { return &l->tl; }

/* A push of an event. Events are popped in the order of their keys (t, seq), which are unique: the next event is
 * the smallest of the heap's root and the lanes' heads, wherever each entry went. An entry whose key is above the
 * last of a lane goes to the lane (of those, the one whose last is largest; an empty lane if none), O(1) both
 * ways: with many ranks in step (100,000 ranks each running its GEMM's CTA batches) the batch ends are pushed in
 * ascending order, and the heap, which would hold one entry per rank, stays small (sift_down over 100,000 entries
 * was the loop's largest cost, its levels cache misses). Where none fits and the heap holds LANE_OPEN entries or
 * more, another lane opens for it (up to LANES): a run whose ends come in a few interleaved ascending runs (the
 * 100,000-rank GEMM + all_reduce) then keeps its heap small, while a run that never fills the heap scans only the
 * first LANES_FIRST lanes (the 1M-op benchmark on 8 ranks puts no entry on the heap: more lanes would only be
 * scanned). Otherwise the first heap push of an event takes the place of the event's own entry, still at the
 * root (w->hole), with one sift down instead of the pop's and the push's two sifts. */
static inline void lane_fit(lane_t *L, const hent *x, lane_t **best, lane_t **empty) {
    if (!L->n) {
        if (!*empty) *empty = L;
    } else if (hless(lane_last(L), x) && (!*best || hless(lane_last(*best), lane_last(L)))) {
        *best = L;
    }
}

static int event_push(W *w, double t, i64 a, i64 b) {
    hent x = {t, a, b};
    lane_t *best = NULL, *empty = NULL;
    for (int l = 0; l < LANES_FIRST; l++) /* a constant count (unrolled); then the lanes opened since, if any */
        lane_fit(&w->lane[l], &x, &best, &empty);
    for (int l = LANES_FIRST; l < w->nl; l++) lane_fit(&w->lane[l], &x, &best, &empty);
    if (best || empty) return lane_push(best ? best : empty, x);
    if (w->nl < LANES && w->heap.n >= LANE_OPEN) return lane_push(&w->lane[w->nl++], x);
    if (!w->hole) return heap_push(&w->heap, t, a, b);
    w->hole = 0;
    sift_down(w->heap.e, w->heap.n, 0, x);
    return 0;
}

/* the lane whose head is the smallest, or NULL when all are empty */
static lane_t *lane_min(W *w) {
    lane_t *m = NULL;
    for (int l = 0; l < LANES_FIRST; l++) {
        lane_t *L = &w->lane[l];
        if (L->n && (!m || hless(&L->hd, &m->hd))) m = L;
    }
    for (int l = LANES_FIRST; l < w->nl; l++) {
        lane_t *L = &w->lane[l];
        if (L->n && (!m || hless(&L->hd, &m->hd))) m = L;
    }
    return m;
}

static int grow_jobs(W *w) {
    i64 c = w->jcap ? 2 * w->jcap : 1024;
    job_t *a = realloc(w->job, (size_t)c * sizeof(job_t));
    if (!a) return -1;
    w->job = a;
    w->jcap = c;
    return 0;
}

static void mark_dirty(W *w, i64 q) {
    if (!w->indirty[q]) {
        w->indirty[q] = 1;
        if (ivec_push(&w->dirty, q) < 0) w->oom = 1;
    }
}

static void mark_toplace(W *w, i64 q) {
    if (!w->intoplace[q]) {
        w->intoplace[q] = 1;
        if (ivec_push(&w->toplace, q) < 0) w->oom = 1;
    }
}

/* the value of transfer g's link end e: its rank's comm rate over the transfers on that end, or on a NIC end with
 * shared links, the rank's comm rate times the flow's share (tests/oracle/waves_loop.py, _LinkMin.track) */
static inline double end_val(const W *w, i64 g, i64 e) {
    if (w->share_cb && (e & 2)) return w->crate[e >> 2] * w->gshare[g];
    return w->crate[e >> 2] / (double)w->nlink[e];
}

/* a flow across nodes starts (1) or ends (0): LinkShare.event (in Python, with the GIL) names the running flows
 * whose share changed; each is tracked anew (xinit 0) on the next settle, through its first rank */
static void share_event(W *w, i64 g, int started) {
    if (!w->share_cb || !w->gflag[g] || w->stop) return;
    if (w->lptr && w->gshare[g] == 1.0) { /* LinkShare._start / _end of a flow alone on every link it crosses: no
                                            * share changes (a flow alone has share 1), nothing to call */
        i64 a0 = w->lptr[g], a1 = w->lptr[g + 1], want = started ? 0 : 1, a;
        for (a = a0; a < a1 && w->lcount[w->llink[a]] == want; a++)
            ;
        if (a == a1) {
            for (a = a0; a < a1; a++) {
                i64 k = w->llink[a];
                w->lfirst[k] = started ? g : -1;
                w->lcount[k] += started ? 1 : -1;
            }
            return;
        }
    }
    PyEval_RestoreThread(w->ts);
    PyObject *got = PyObject_CallFunction(w->share_cb, "ni", (Py_ssize_t)g, started);
    PyObject *seq = got ? PySequence_Fast(got, "share: a sequence of groups") : NULL;
    if (!seq) {
        w->stop = 1;
    } else {
        for (Py_ssize_t a = 0; a < PySequence_Fast_GET_SIZE(seq); a++) {
            i64 h = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, a));
            if (h < 0 || h >= w->G) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "share: group out of range");
                w->stop = 1;
                break;
            }
            w->xinit[h] = 0;
            mark_dirty(w, grank(w, w->granks_ptr[h]));
        }
    }
    Py_XDECREF(seq);
    Py_XDECREF(got);
    w->ts = PyEval_SaveThread();
}

/* new_job(typ, key, sms, work, ranks, t); ranks = (r,) unless a transfer (then its group's ranks) */
static void new_job(W *w, i64 typ, i64 key, i64 sms, double work, i64 r, double t) {
    i64 j = w->jfree;
    if (j >= 0) {
        w->jfree = w->job[j].seen;
    } else {
        if (w->jn == w->jcap && grow_jobs(w) < 0) { w->oom = 1; return; }
        j = w->jn++;
        w->job[j].ver = -1;
    }
    w->njobs++;
    job_t *jb = &w->job[j];
    jb->type = (i32)typ;
    jb->key = key;
    jb->sms = (i32)sms;
    jb->rank = (i32)r;
    jb->seen = -1;
    jb->rem = work;
    jb->rate = 0.0;
    jb->last = t;
    if (typ == XFER) {
        for (i64 p = w->granks_ptr[key], s = 0; p < w->granks_ptr[key + 1]; p++, s++) {
            i64 q = grank(w, p);
            CHECK(ivec_push(&w->run_job[q], j));
            CHECK(ivec_push(&w->run_slot[q], s));
            mark_dirty(w, q);
        }
    } else {
        CHECK(ivec_push(&w->run_job[r], j));
        CHECK(ivec_push(&w->run_slot[r], -1));
        mark_dirty(w, r);
    }
}

/* _LinkMin.track: refresh a transfer's ends on one rank (its member slot), keep min and count at min */
static void track(W *w, i64 g, i64 slot) {
    i64 e0 = w->gends_ptr[g], ne = w->gends_ptr[g + 1] - e0;
    double *vals = w->xval + e0;
    const i32 *ends = w->gends_idx + e0;
    if (!w->xinit[g]) {
        w->xinit[g] = 1;
        double m = 0.0;
        for (i64 p = 0; p < ne; p++) {
            vals[p] = end_val(w, g, ends[p]);
            if (p == 0 || vals[p] < m) m = vals[p];
        }
        i64 cnt = 0;
        for (i64 p = 0; p < ne; p++) cnt += vals[p] == m;
        w->xmin[g] = m;
        w->xcnt[g] = (i32)cnt;
        return;
    }
    double m = w->xmin[g];
    i64 cnt = w->xcnt[g];
    i64 ms = w->gmem_ptr[g] + slot;
    for (i64 pp = w->epos_ptr[ms]; pp < w->epos_ptr[ms + 1]; pp++) {
        i64 p = w->epos_idx[pp];
        i64 e = ends[p];
        double nv = end_val(w, g, e);
        double old = vals[p];
        if (nv == old) continue;
        vals[p] = nv;
        if (nv < m) {
            m = nv;
            cnt = 1;
        } else if (nv == m) {
            cnt++;
        } else if (old == m) {
            if (!--cnt) {
                m = vals[0];
                for (i64 q = 1; q < ne; q++)
                    if (vals[q] < m) m = vals[q];
                for (i64 q = 0; q < ne; q++) cnt += vals[q] == m;
            }
        }
    }
    w->xmin[g] = m;
    w->xcnt[g] = (i32)cnt;
}

static double rate_of(W *w, i64 j) {
    i64 typ = w->job[j].type;
    if (typ == XFER) {
        i64 g = w->job[j].key;
        double rate = w->xmin[g];
        i64 a = w->grev_ptr[g], b = w->grev_ptr[g + 1];
        if (a < b) {
            for (i64 p = a; p < b; p++)
                if (w->nlink[w->grev_idx[p]]) return rate;
            return rate * w->one_way;
        }
        return rate;
    }
    i64 k = w->job[j].key, r = w->job[j].rank;
    if (typ == COPY) { /* gpu.rates.copy_rate's table: engine (0 h2d, 1 d2h, 2 d2d), reverse engine busy, compute */
        i64 e = w->ktype[k] - 2, rev = e == 0 ? 1 : e == 1 ? 0 : -1;
        i64 busy = rev >= 0 && w->cqhead[r * 3 + rev] >= 0; /* gpu.rates.REVERSE_ENGINE */
        return w->copy_tab[(e * 2 + busy) * 2 + (w->held[r] > 0)];
    }
    double rate = w->batch_tab[(w->nccl_n[r] > 0) * 2 + (w->ncopy[r] > 0)];
    if (w->kmem[k & w->mmem]) { /* rule hbm-share: gpu.rates.mem_rate */
        double f = 1.0 / w->nmem[r];
        rate *= f < w->mem_boost ? f : w->mem_boost;
    }
    if (w->nwait[r] && !w->kleft[k] && w->ktail[k & w->mtail] >= 0) rate *= w->kgain[k & w->mgain]; /* rule wave-tail: its ragged end filled */
    return rate;
}

static void rerate_job(W *w, i64 j, double t) {
    double nw = rate_of(w, j), old = w->job[j].rate;
    if (nw != old) {
        if (old > 0.0) {
            double rem = w->job[j].rem - (t - w->job[j].last) * old;
            w->job[j].rem = rem > 0.0 ? rem : 0.0;
        }
        w->job[j].last = t;
        w->job[j].rate = nw;
        w->job[j].ver = w->seq;
        CHECK(event_push(w, t + w->job[j].rem / nw, w->seq++, j));
    }
}

static int cmp_i64(const void *a, const void *b) {
    i64 x = *(const i64 *)a, y = *(const i64 *)b;
    return (x > y) - (x < y);
}

/* ascending; the rank lists sorted per event hold a few ranks, where insertion beats qsort's calls */
static void sort_i64(i64 *a, i64 n) {
    if (n > 32) {
        qsort(a, (size_t)n, sizeof(i64), cmp_i64);
        return;
    }
    for (i64 i = 1; i < n; i++) {
        i64 x = a[i], j = i;
        for (; j > 0 && a[j - 1] > x; j--) a[j] = a[j - 1];
        a[j] = x;
    }
}

/* comm_rates + rerate over the sorted dirty ranks, then clear them. A rank's transfers are tracked only when
 * its comm rate or the transfer count of one of its ends changed since it was last settled (lchg), or a
 * transfer is new: otherwise every end's value crate / nlink is the one its last track stored, and track
 * would change nothing (the Python loop tracks them all, to the same values). On the 1M-op overlap_gen run
 * (world 64) track's divisions were ~7 % of the loop; most events leave the rank's comm rate as it was. */
static void settle(W *w, double t) {
    ivec *d = &w->dirty;
    if (d->n > 1) sort_i64(d->a, d->n); /* qsort(NULL, 0) is undefined */
    for (i64 p = 0; p < d->n; p++) {
        i64 q = d->a[p];
        if (w->ncomm[q]) {
            double c = w->comm_tab[w->held[q] * w->cstride + w->nccl_n[q]];
            if (c != w->crate[q]) w->lchg[q] = 1;
            w->crate[q] = c;
        }
    }
    for (i64 p = 0; p < d->n; p++) {
        i64 r = d->a[p];
        ivec *rj = &w->run_job[r], *rs = &w->run_slot[r];
        int changed = w->lchg[r];
        w->lchg[r] = 0;
        for (i64 x = 0; x < rj->n; x++) {
            job_t *jb = &w->job[rj->a[x]];
            if (jb->type == XFER && (changed || !w->xinit[jb->key])) track(w, jb->key, rs->a[x]);
        }
    }
    w->stamp++;
    for (i64 p = 0; p < d->n; p++) {
        ivec *rj = &w->run_job[d->a[p]];
        for (i64 x = 0; x < rj->n; x++) {
            i64 j = rj->a[x];
            if (w->job[j].seen == w->stamp) continue;
            w->job[j].seen = w->stamp;
            rerate_job(w, j, t);
        }
    }
    for (i64 p = 0; p < d->n; p++) w->indirty[d->a[p]] = 0;
    d->n = 0;
}

/* rule wave-dispatch: the head kernel of the rank's FIFO takes free SMs; the next one only once it has all it needs */
static void place(W *w, i64 r, double t) {
    heap_t *P = &w->pend[r];
    while (P->n) {
        i64 k = P->e[0].b;
        i64 f = w->free_[r];
        if (w->ktype[k] == 1) {
            if (f < w->nsm) return;
            w->free_[r] = f - w->nsm;
            w->nccl_n[r]++;
            heap_pop(P);
            mark_dirty(w, r);
            for (i64 p = kptr_of(w, k); p < kptr_of(w, k + 1); p++) {
                i64 i = kidx_of(w, p);
                w->start[i] = t;
                i64 g = w->ogrp[i];
                w->gres[g]++;
                if (w->gres[g] == w->gmem_ptr[g + 1] - w->gmem_ptr[g]) {
                    /* the member that released the group: of those placed now, the last to be ready */
                    i64 b = i;
                    for (i64 a = w->gmem_ptr[g]; a < w->gmem_ptr[g + 1]; a++) {
                        i64 m = w->gmem_idx[a];
                        if (w->start[m] == t && w->ready_t[m] > w->ready_t[b]) b = m;
                    }
                    for (i64 a = w->gmem_ptr[g]; a < w->gmem_ptr[g + 1]; a++)
                        if (w->gmem_idx[a] != b) w->binding[w->gmem_idx[a]] = (i32)b;
                    for (i64 a = w->granks_ptr[g]; a < w->granks_ptr[g + 1]; a++) w->ncomm[grank(w, a)]++;
                    for (i64 a = w->gends_ptr[g]; a < w->gends_ptr[g + 1]; a++) {
                        w->nlink[w->gends_idx[a]]++;
                        w->lchg[w->gends_idx[a] >> 2] = 1;
                    }
                    new_job(w, XFER, g, 0, w->gwork[g], -1, t);
                    share_event(w, g, 1);
                }
            }
            continue;
        }
        if (f <= 0) return;
        i64 left = w->kleft[k];
        i64 s = f < left ? f : left;
        w->free_[r] = f - s;
        w->kleft[k] = left - s;
        if (!w->kstarted[k]) {
            w->kstarted[k] = 1;
            w->start[khead(w, k)] = t;
        }
        w->held[r] += s;
        i64 mem = w->kmem[k & w->mmem];
        if (mem) w->nmem[r] += (double)s / (double)mem;
        w->kbat[k]++;
        new_job(w, BATCH, k, s, w->ktail[k & w->mtail] < 0 ? w->ktail_tau[k & w->mttau] : w->ktau[k & w->mtau], r, t);
        if (left - s) return;
        heap_pop(P);
        w->nwait[r]--;
    }
}

static void start_copy(W *w, i64 k, double t) {
    i64 r = w->krank[k], i = khead(w, k);
    w->ncopy[r]++;
    w->start[i] = t;
    new_job(w, COPY, k, 0, w->opwork[w->otmpl ? w->otmpl[i] : i], r, t);
}

static void dispatch(W *w, i64 k, double t) {
    i64 typ = w->ktype[k], r = w->krank[k];
    w->khand[k] = t;
    if (typ >= 2) { /* a copy engine's FIFO */
        i64 c = r * 3 + (typ - 2);
        w->cqnext[k] = -1;
        if (w->cqhead[c] < 0) {
            w->cqhead[c] = w->cqtail[c] = k;
            start_copy(w, k, t);
        } else {
            w->cqnext[w->cqtail[c]] = k;
            w->cqtail[c] = k;
        }
        return;
    }
    if (typ == 1) { /* an NCCL kernel asks for SMs once one of its groups has every rank there (rule communicator-order) */
        for (i64 p = kptr_of(w, k); p < kptr_of(w, k + 1); p++) {
            i64 g = w->ogrp[kidx_of(w, p)];
            w->garr[g]++;
            if (w->garr[g] == w->gmem_ptr[g + 1] - w->gmem_ptr[g]) {
                for (i64 a = w->gmem_ptr[g]; a < w->gmem_ptr[g + 1]; a++) {
                    i64 km = kern_of(w, w->gmem_idx[a]);
                    if (w->kone || --w->kwait[km] == kptr_of(w, km + 1) - kptr_of(w, km) - 1) {
                        CHECK(heap_push(&w->pend[w->krank[km]], w->khand[km], khead(w, km), km));
                        mark_toplace(w, w->krank[km]);
                    }
                }
            }
        }
        return;
    }
    CHECK(heap_push(&w->pend[r], t, khead(w, k), k));
    w->nwait[r]++;
    mark_toplace(w, r);
    mark_dirty(w, r); /* rule wave-tail: the rank's placed kernels may now have their ragged ends filled */
}

/* rule hardware-queues: a queue hands over its ready items in order; a kernel with a reduction (rule split-k) holds it (qhead
 * stored as ~h, negative) until the reduction, its next item, is handed over (tests/oracle/waves_loop.py, _drain) */
static void drain(W *w, i64 key, double t) {
    i64 h = w->qhead[key], lo = w->q_ptr[key], hi = w->q_ptr[key + 1];
    if (h < 0) return;
    while (lo + h < hi && w->kready[w->q_idx[lo + h]]) {
        i64 k = w->q_idx[lo + h];
        dispatch(w, k, t);
        h++;
        if (w->ktail[k & w->mtail] > 0) {
            h = ~h;
            break;
        }
    }
    w->qhead[key] = h;
}

static void op_ready(W *w, i64 i, double t) {
    w->ready_t[i] = t;
    i64 k = kern_of(w, i);
    if (!w->kone && --w->kneed[k]) return;
    w->kready[k] = 1;
    drain(w, w->kq[k], t);
}

static void push_ready(W *w, i64 v, double at) { CHECK(event_push(w, at, w->seq++, -1 - v)); }

static void pred_done(W *w, i64 v, i64 i, double t, int hostside);
static void gate_tick(W *w, i64 g, i64 i, double t);

/* rule host-wait: what host wait g waits for ended at t (the last of it op i, -1 none); the host returns from it
 * hshift[g] past the static issue times (the previous wait's shift, or t - hw_a[g] where the host blocked:
 * returned 1, and hby[g] = i), and the ops it holds (up to the next wait, included) lose the count they held */
static int host_resolve(W *w, i64 g, i64 i, double t) {
    i64 r = w->orank[g];
    double s = t - w->hw_a[g];
    int blocked = s > w->rshift[r];
    if (!blocked) s = w->rshift[r];
    w->hby[g] = blocked ? (i32)i : -1;
    w->hshift[g] = s;
    w->rshift[r] = s;
    i64 last = w->rfirst[r + 1];
    for (i64 u = g + 1; u < last; u++) {
        if (isnan(w->hw_a[u])) {
            pred_done(w, u, -1, t, 1);
            continue;
        }
        if (w->hw_dev[u] == 1) w->rdev[r] = u; /* g has not ended yet: u's device is not drained */
        if (w->hw_dev[u]) gate_tick(w, u, -1, t);
        else pred_done(w, u, -1, t, 1);
        break;
    }
    return blocked;
}

/* one count of host wait g (scope 1 or 2) gone at t (op i ended, -1 none): at 0 it resolves, and g itself loses
 * the count it held; where the host blocked, g is bound to op i */
static void gate_tick(W *w, i64 g, i64 i, double t) {
    if (--w->gcnt[g]) return;
    host_resolve(w, g, i, t);
    pred_done(w, g, -1, t, 1);
}

/* one predecessor of op v ended at t (op i, -1 none; hostside: the host wait v was held by resolved): v is ready
 * once its count is 0, at the later of its issue (plus its host wait's shift) and t (plus the cross-stream
 * latency); a host wait of its predecessors (scope 0) resolves then, bound to op i where the host blocked */
static void pred_done(W *w, i64 v, i64 i, double t, int hostside) {
    if (--w->npred[v]) return;
    double tv = (!hostside && w->xlat != 0.0 && w->sid[v] != w->sid[i] && w->orank[v] == w->orank[i]) ? t + w->xlat
                                                                                                      : t;
    double iv = w->issue[v]; /* read before deps_t[v] is written: deps_t may be the issue buffer itself */
    i64 by = -1; /* the op whose end a host wait v blocked for */
    if (w->hgate) {
        i64 g = w->hgate[v];
        if (g == v && !w->hw_dev[v]) host_resolve(w, v, i, t);
        if (g == v) by = w->hby[v];
        if (g >= 0) iv += w->hshift[g];
    }
    w->deps_t[v] = tv;
    if (iv > tv || i < 0) {
        w->binding[v] = by >= 0 ? (i32)by : HOST;
        push_ready(w, v, iv > tv ? iv : tv);
        return;
    }
    w->binding[v] = i;
    if (tv > t) {
        push_ready(w, v, tv);
        return;
    }
    op_ready(w, v, t);
}

static void release(W *w, i64 i, double t) {
    w->end[i] = t;
    if (w->halt && t - w->halt_h >= w->halt_cw) w->halted = 1;
    if (w->hgate) { /* rule host-wait: device scope (the rank's ops before its pending wait all ended), awaited ops */
        i64 r = w->orank[i], g = w->rdev[r];
        w->rdone[r]++;
        if (g >= 0 && w->rdone[r] >= g - w->rfirst[r]) {
            w->rdev[r] = -1;
            gate_tick(w, g, i, t);
        }
        if (w->hw_for && w->hw_for[i] >= 0) gate_tick(w, w->hw_for[i], i, t);
    }
    i64 base = w->speriod ? (i64)w->orank[i] * w->speriod : 0, row = i - base;
    for (i64 p = w->succ_ptr[row]; p < w->succ_ptr[row + 1]; p++) pred_done(w, w->succ_idx[p] + base, i, t, 0);
}

/* the rank's lists hold a few jobs: a plain loop shifts them (memmove's call cost more, 3 % of the loop; GCC would
 * make the loop two memmove calls, which its attribute stops) */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
static void run_remove(W *w, i64 q, i64 j) {
    ivec *rj = &w->run_job[q], *rs = &w->run_slot[q];
    i64 n = rj->n, p = 0;
    while (p < n && rj->a[p] != j) p++;
    if (p == n) return;
    for (; p + 1 < n; p++) {
        rj->a[p] = rj->a[p + 1];
        rs->a[p] = rs->a[p + 1];
    }
    rj->n = rs->n = n - 1;
}

/* the time of the next event after the one in hand (a hole at the heap's top is that one: its children are
 * next); +inf when none is left */
static double next_t(W *w) {
    double n = HUGE_VAL;
    heap_t *h = &w->heap;
    if (w->hole) {
        for (i64 c = 1; c <= 4 && c < h->n; c++)
            if (h->e[c].t < n) n = h->e[c].t;
    } else if (h->n) {
        n = h->e[0].t;
    }
    lane_t *lm = lane_min(w);
    if (lm && lm->hd.t < n) n = lm->hd.t;
    return n;
}

/* A CTA batch ends whose kernel's next wave takes its SMs back at once: the kernel heads the rank's dispatch FIFO
 * with more CTAs left than the batch held, and the rank has no free SM. job_done then place (rule wave-dispatch)
 * would free the batch's SMs, place a batch of as many of the kernel's CTAs on them (the kernel stays at the head:
 * CTAs are still left) and make it a new job in the slot just freed; here the same state results without the
 * round trip: the job is the new batch (its slot, at the end of the rank's running jobs, rate 0: settle rates it
 * and pushes its end, as for a new job), the kernel's CTAs left drop by the batch's, and the rank's HBM load
 * takes the batch's share off and on again (the same float operations). Returns 0 (nothing done) otherwise. Such a
 * next wave takes its SMs at once, before the instant's other events (rule wave-dispatch: the kernels handed over at
 * the instant are placed after them; this kernel was handed over before and heads the FIFO). */
static int next_wave(W *w, i64 j, double t) {
    job_t *jb = &w->job[j];
    i64 k = jb->key, r = jb->rank, s = jb->sms;
    const heap_t *P = &w->pend[r];
    if (w->kleft[k] <= s || w->free_[r] || !P->n || P->e[0].b != k || w->intoplace[r]) return 0;
    ivec *rj = &w->run_job[r];
    if (rj->a[rj->n - 1] != j) { /* to the end of the rank's running jobs (already there: nothing moves) */
        run_remove(w, r, j);
        if (ivec_push(rj, j) < 0 || ivec_push(&w->run_slot[r], -1) < 0) {
            w->oom = 1;
            return 1;
        }
    }
    i64 mem = w->kmem[k & w->mmem];
    double load = w->nmem[r];
    if (mem) {
        w->nmem[r] -= (double)s / (double)mem;
        w->nmem[r] += (double)s / (double)mem;
    }
    w->kleft[k] -= (i32)s;
    w->njobs++;
    jb->seen = -1;
    jb->rem = w->ktail[k & w->mtail] < 0 ? w->ktail_tau[k & w->mttau] : w->ktau[k & w->mtau];
    jb->rate = 0.0;
    jb->last = t;
    if (w->dirty.n || w->lchg[r] || memcmp(&load, &w->nmem[r], sizeof load)) {
        mark_dirty(w, r); /* settle as after job_done and place */
        return 1;
    }
    /* settle of this rank alone would change nothing but this job's rate: the rank's comm rate stays (its SMs
     * held are the same), no end of it changed (lchg), its transfers are tracked, and every other job of it was
     * rated at the end of the event that last changed what its rate reads (each such change marks the job's
     * rank dirty, and settle rates every job of a dirty rank), none of which changed here (the kernel keeps CTAs
     * left, the HBM load is the same bits) */
    rerate_job(w, j, t);
    return 1;
}

static void job_done(W *w, i64 j, double t) {
    i64 typ = w->job[j].type, key = w->job[j].key, s = w->job[j].sms;
    if (typ == BATCH && next_wave(w, j, t)) return;
    w->job[j].rate = -1.0;
    w->job[j].seen = w->jfree; /* the slot goes on the free list; only j's value is used below */
    w->jfree = j;
    if (typ == XFER) {
        i64 g = key;
        for (i64 a = w->gends_ptr[g]; a < w->gends_ptr[g + 1]; a++) {
            w->nlink[w->gends_idx[a]]--;
            w->lchg[w->gends_idx[a] >> 2] = 1;
        }
        share_event(w, g, 0);
        for (i64 a = w->granks_ptr[g]; a < w->granks_ptr[g + 1]; a++) {
            i64 q = grank(w, a);
            w->ncomm[q]--;
            run_remove(w, q, j);
            mark_dirty(w, q);
        }
        for (i64 a = w->gmem_ptr[g]; a < w->gmem_ptr[g + 1]; a++) {
            i64 k = kern_of(w, w->gmem_idx[a]);
            if (!--w->kleft[k]) {
                i64 r = w->krank[k];
                w->free_[r] += w->nsm;
                w->nccl_n[r]--;
            }
        }
        for (i64 a = w->gmem_ptr[g]; a < w->gmem_ptr[g + 1]; a++) release(w, w->gmem_idx[a], t);
        for (i64 a = w->granks_ptr[g]; a < w->granks_ptr[g + 1]; a++) mark_toplace(w, grank(w, a));
        return;
    }
    i64 k = key, r = w->job[j].rank;
    run_remove(w, r, j);
    mark_dirty(w, r);
    if (typ == COPY) {
        w->ncopy[r]--;
        i64 c = r * 3 + (w->ktype[k] - 2);
        i64 nx = w->cqnext[w->cqhead[c]];
        w->cqhead[c] = nx;
        if (nx >= 0) start_copy(w, nx, t);
        release(w, khead(w, k), t);
        return;
    }
    w->free_[r] += s;
    w->held[r] -= s;
    w->kbat[k]--;
    i64 mem = w->kmem[k & w->mmem];
    if (mem) w->nmem[r] -= (double)s / (double)mem;
    if (!w->kbat[k] && !w->kleft[k]) {
        if (w->ktail[k & w->mtail] > 0) { /* rule split-k: the main kernel is done; its queue hands the reduction over now
                                           * (a one-entry ktail is 0: never written) */
            w->kleft[k] = w->ktail[k];
            w->ktail[k] = -w->ktail[k];
            w->khand[k] = t;
            CHECK(heap_push(&w->pend[r], t, khead(w, k), k));
            w->nwait[r]++;
            w->qhead[w->kq[k]] = ~w->qhead[w->kq[k]];
            drain(w, w->kq[k], t);
        } else {
            release(w, khead(w, k), t);
        }
    }
    mark_toplace(w, r);
}

static void place_all(W *w, double t) {
    ivec *tp = &w->toplace;
    if (tp->n > 1) sort_i64(tp->a, tp->n);
    for (i64 p = 0; p < tp->n; p++) {
        w->intoplace[tp->a[p]] = 0;
        place(w, tp->a[p], t);
    }
    tp->n = 0;
}

/* events between two checks for signals, minus 1 (a power of 2): ~4 ms of loop; taking the GIL costs ~1 us */
#define SIGNAL_EVERY ((1 << 12) - 1)

static void loop(W *w) {
    if (w->hgate) /* rule host-wait: a rank's first wait of scope 1 or 2 with nothing to wait for resolves at 0 */
        for (i64 i = 0; i < w->N && !w->oom; i++)
            if (w->hgate[i] == i && w->hw_dev[i] && w->gcnt[i] == 0 && isnan(w->hshift[i])) {
                w->gcnt[i] = 1;
                gate_tick(w, i, -1, 0.0);
            }
    for (i64 i = 0; i < w->N && !w->oom; i++)
        if (w->npred[i] == 0) {
            if (w->hgate && w->hgate[i] >= 0) { /* held by a host wait: made ready as that wait resolves */
                if (w->hgate[i] != i || w->hw_dev[i] || !isnan(w->hshift[i])) continue;
                w->npred[i] = 1; /* the rank's first wait (scope 0) with no predecessor: resolved at 0 */
                pred_done(w, i, -1, 0.0, 1);
                continue;
            }
            double iv = w->issue[i];
            w->deps_t[i] = 0.0; /* no dependency; after the read: deps_t may be the issue buffer itself */
            if (iv > 0.0) {
                w->binding[i] = HOST;
                push_ready(w, i, iv);
            } else {
                op_ready(w, i, 0.0);
            }
        }
    place_all(w, 0.0);
    settle(w, 0.0);
    i64 events = 0;
    for (;;) {
        lane_t *lm = lane_min(w);
        if (!(w->heap.n || lm) || w->oom || w->stop || w->halted) break;
        if (!(++events & SIGNAL_EVERY)) { /* Python's signal handlers (Ctrl-C) run here, not after the loop */
            PyEval_RestoreThread(w->ts);
            w->stop = PyErr_CheckSignals() < 0;
            w->ts = PyEval_SaveThread();
            if (w->stop) return;
        }
        hent x;
        if (w->heap.n && (!lm || hless(&w->heap.e[0], &lm->hd))) {
            x = w->heap.e[0]; /* popped at the end of the event unless a push took its place (event_push) */
            w->hole = 1;
        } else {
            x = lm->hd;
            lm->h = (lm->h + 1) & (lm->cap - 1);
            if (--lm->n) lm->hd = lm->e[lm->h];
            else if (lm->cap > LANE_KEEP) { /* emptied: a large ring goes back (lanes take turns) */
                free(lm->e);
                lm->e = NULL;
                lm->h = lm->cap = 0;
            }
        }
        double t = x.t;
        i64 j = x.b;
        if (j < 0)
            op_ready(w, -1 - j, t);
        else if (x.a == w->job[j].ver && w->job[j].rate > 0.0)
            job_done(w, j, t);
        /* rule wave-dispatch: the kernels handed over at one instant are placed once every event of that instant
         * is done, so that ranks met in turn at a tie place as the last one met would (a collective whose group
         * the later ranks complete asks for SMs before the kernels issued after it on the earlier ones) */
        if ((w->toplace.n || w->dirty.n) && next_t(w) > t) {
            if (w->toplace.n) place_all(w, t);
            if (w->dirty.n) settle(w, t);
        }
        if (w->hole) {
            w->hole = 0;
            heap_pop(&w->heap);
        }
    }
}

/* rule host-wait's tables (W): each op's host wait, each rank's first op (ranks ascend: a Program's layout), the
 * count each wait holds on the ops after it and, on a device-scoped wait, on itself until its rank's earlier ops
 * ended; 0 when out of memory */
static int host_wait_setup(W *w) {
    i64 N = w->N, R = w->world;
    w->hgate = malloc(((size_t)N + 1) * sizeof(i32));
    w->gcnt = calloc((size_t)N + 1, sizeof(i32));
    w->hby = malloc(((size_t)N + 1) * sizeof(i32));
    w->rfirst = calloc((size_t)R + 2, sizeof(i64));
    w->rdone = calloc((size_t)R + 1, sizeof(i64));
    w->rdev = malloc(((size_t)R + 1) * sizeof(i64));
    w->rshift = calloc((size_t)R + 1, sizeof(double));
    if (!w->hgate || !w->gcnt || !w->hby || !w->rfirst || !w->rdone || !w->rdev || !w->rshift) return 0;
    for (i64 i = 0; i < N; i++) w->rfirst[w->orank[i] + 1]++;
    for (i64 r = 0; r < R; r++) w->rfirst[r + 1] += w->rfirst[r];
    for (i64 r = 0; r < R; r++) w->rdev[r] = -1;
    i64 cur = -1;
    for (i64 i = 0; i < N; i++) {
        i64 r = w->orank[i];
        if (i == w->rfirst[r]) cur = -1;
        w->hshift[i] = NAN;
        if (!isnan(w->hw_a[i])) {
            int m = w->hw_dev[i];
            if (m) w->npred[i]++; /* scope 1, 2: the wait holds its own op */
            if (cur >= 0) { /* held by the wait before it */
                if (m) w->gcnt[i]++;
                else w->npred[i]++;
            }
            if (m == 1 && i > w->rfirst[r]) { /* held until its rank's earlier ops ended */
                w->gcnt[i]++;
                if (cur < 0) w->rdev[r] = i; /* the rank's first wait; a later one is pending once the one
                                              * before it resolved (host_resolve) */
            }
            cur = i;
        } else if (cur >= 0) {
            w->npred[i]++;
        }
        w->hgate[i] = (i32)cur;
    }
    if (w->hw_for)
        for (i64 j = 0; j < N; j++) {
            i64 g = w->hw_for[j];
            if (g < 0) continue;
            if (g >= N || g <= j || isnan(w->hw_a[g]) || w->hw_dev[g] != 2 || w->orank[g] != w->orank[j]) return -1;
            w->gcnt[g]++;
        }
    return 1;
}

/* ---- Python entry --------------------------------------------------------------------------------------- */
#define NBUF 48
/* Version of the argument lists of run() and the helpers below; schedsim.sim.loop._LAYOUT must equal it, or
 * Python ignores this build (a stale .so of an editable checkout). Bump both whenever the arguments change (5:
 * succ_csr takes pair arrays, fifo_edges writes pairs; 6: the copy table by engine and reverse engine; 7: the
 * kernels' reductions, ktail and ktail_tau after ktau; 8: kgain after ktail_tau, rule wave-tail; 10: run's optional
 * share argument, the shared links; 11: run's and stream_reached's compact forms: kern, kops_ptr, kops_idx empty for
 * the identity, kmem, ktail, ktail_tau, kgain, kneed of one entry when every kernel has that value; 12: share's
 * optional link CSR, counts and firsts, for flows alone on their links; 13: issue_times' optional per-op call
 * extra (issue_sums removed); 14: run's optional halt argument after share, and its result -1 when it halted; 15:
 * join_rows, cut, item_bounds and held_samples, the trace writer's JSON text and counters, and overlaps and
 * merge_pieces, the metrics' pieces; 16: run's ktau of one entry too, and every one-entry buffer read by compute
 * kernels alone, kmem, ktail_tau, kgain and ktau, holds the value of every compute kernel: the others' are never
 * read); 17: run's deps_t may be its issue buffer (read before it is written; deps_t of an op without
 * predecessors 0); 18: the kernels handed over at one instant are placed once every event of it is done (rule
 * wave-dispatch: identical ranks met in turn at a tie run alike); 19: opwork per template, read through otmpl (each
 * op's template, after opwork; empty: opwork per op), cqnext empty where no kernel is a copy, and granks_idx
 * empty where each group's ranks are its members' own (read through gmem_idx and orank), and the successor CSR
 * of rank 0's R ops alone (succ_ptr of R + 1 entries) where rank k's ops are k·R .. k·R + R - 1 and their rows
 * rank 0's shifted by k·R; 20: run's optional hostwait argument after halt (rule host-wait). */
#define LAYOUT 20
/* Entries of the copy rate table: 3 engines x reverse engine busy x compute resident (gpu.rates.rate_tables) */
#define COPY_TAB 12
/* Each buffer's type, in argument order: d float64, i int32 (see the struct's fields and run()'s unpacking) */
static const char KINDS[NBUF + 1] = "ddd" "iiiiiiiddi" "iiiiiiiid" "idd" "ii" "iiiiiiiiiid" "ddddd" "i" "iiii";
/* Which buffers the loop writes ('w'; the others may be read-only, e.g. a Program's columns) */
static const char WRITES[NBUF + 1] = "..." "w........." "......ww." "w.." ".." "..........." "wwwww" "w" "wwww";

static PyObject *run(PyObject *self, PyObject *args) {
    PyObject *ints, *floats, *arrays, *share = Py_None, *halt = Py_None, *hostwait = Py_None;
    if (!PyArg_ParseTuple(args, "OOO|OOO", &ints, &floats, &arrays, &share, &halt, &hostwait)) return NULL;
    if (!PyTuple_Check(ints) || PyTuple_GET_SIZE(ints) != 6 || !PyTuple_Check(floats) ||
        PyTuple_GET_SIZE(floats) != 3 || !PyTuple_Check(arrays) || PyTuple_GET_SIZE(arrays) != NBUF) {
        PyErr_SetString(PyExc_TypeError, "run(ints[6], floats[3], arrays[48])");
        return NULL;
    }
    W w0;
    memset(&w0, 0, sizeof w0);
    W *w = &w0;
    i64 iv[6];
    for (int a = 0; a < 6; a++) {
        iv[a] = PyLong_AsLongLong(PyTuple_GET_ITEM(ints, a));
        if (PyErr_Occurred()) return NULL;
    }
    w->N = iv[0], w->K = iv[1], w->G = iv[2], w->world = iv[3], w->S = iv[4], w->nsm = iv[5];
    if (w->nsm <= 0 || w->S < 0) {
        PyErr_SetString(PyExc_ValueError, "run: sms must be >= 0 and nccl_sms > 0");
        return NULL;
    }
    w->cstride = w->S / w->nsm + 1;
    w->one_way = PyFloat_AsDouble(PyTuple_GET_ITEM(floats, 0));
    w->xlat = PyFloat_AsDouble(PyTuple_GET_ITEM(floats, 1));
    w->mem_boost = PyFloat_AsDouble(PyTuple_GET_ITEM(floats, 2));
    if (PyErr_Occurred()) return NULL;
    if (halt != Py_None) { /* (host_end, cold_wait): stop once an op ends at t with t - host_end >= cold_wait */
        if (!PyTuple_Check(halt) || PyTuple_GET_SIZE(halt) != 2) {
            PyErr_SetString(PyExc_TypeError, "run: halt must be None or (host_end, cold_wait)");
            return NULL;
        }
        w->halt = 1;
        w->halt_h = PyFloat_AsDouble(PyTuple_GET_ITEM(halt, 0));
        w->halt_cw = PyFloat_AsDouble(PyTuple_GET_ITEM(halt, 1));
        if (PyErr_Occurred()) return NULL;
    }

    if (w->N >= INT32_MAX || w->K >= INT32_MAX || w->G >= INT32_MAX || w->world >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "run: more than 2**31 - 1 ops, kernels, groups or ranks");
        return NULL;
    }
    Py_buffer bufs[NBUF], sbuf[6], hbuf[4];
    int got = 0, sgot = 0, hgot = 0;
    void *ptr[NBUF];
    for (; got < NBUF; got++) {
        int wr = WRITES[got] == 'w' ? PyBUF_WRITABLE : 0;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(arrays, got), &bufs[got], wr | PyBUF_FORMAT) < 0) break;
        ptr[got] = bufs[got].buf;
        const char *f = bufs[got].format ? bufs[got].format : "B";
        if (*f == '<' || *f == '=' || *f == '@') f++;
        int want8 = KINDS[got] == 'd';
        if (bufs[got].itemsize != (want8 ? 8 : 4) || strcmp(f, want8 ? "d" : "i") ||
            !PyBuffer_IsContiguous(&bufs[got], 'C')) {
            PyErr_Format(PyExc_TypeError, "run: array %d must be a contiguous %s buffer", got,
                         want8 ? "float64" : "int32");
            PyBuffer_Release(&bufs[got]);
            break;
        }
    }
    PyObject *result = NULL;
    if (got < NBUF) goto release_bufs;
    if (share != Py_None) { /* (callable, gshare float64[G], gflag int32[G]) and optionally (lptr int64[G + 1],
                             * llink int64[E], lcount int64[L], lfirst int64[L]): schedsim.network.share.LinkShare */
        Py_ssize_t ns = PyTuple_Check(share) ? PyTuple_GET_SIZE(share) : 0;
        if ((ns != 3 && ns != 7) || !PyCallable_Check(PyTuple_GET_ITEM(share, 0))) {
            PyErr_SetString(PyExc_TypeError, "run: share must be (callable, gshare, gflag[, lptr, llink, lcount, lfirst])");
            goto release_bufs;
        }
        for (; sgot < ns - 1; sgot++) {
            int wr = sgot >= 4 ? PyBUF_WRITABLE : 0;
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(share, sgot + 1), &sbuf[sgot], wr | PyBUF_FORMAT) < 0) goto release_bufs;
            const char *f = sbuf[sgot].format ? sbuf[sgot].format : "B";
            if (*f == '<' || *f == '=' || *f == '@') f++;
            Py_ssize_t isz = sgot == 1 ? 4 : 8;
            const char *want = sgot == 0 ? "d" : sgot == 1 ? "i" : NULL;
            int ok = sbuf[sgot].itemsize == isz && PyBuffer_IsContiguous(&sbuf[sgot], 'C') &&
                     (want ? !strcmp(f, want) : (!strcmp(f, "l") || !strcmp(f, "q")));
            if (sgot < 2) ok = ok && sbuf[sgot].len == isz * (Py_ssize_t)iv[2];
            if (sgot == 2) ok = ok && sbuf[sgot].len == isz * ((Py_ssize_t)iv[2] + 1);
            if (sgot == 5) ok = ok && sbuf[5].len == sbuf[4].len;
            if (!ok) {
                PyErr_SetString(PyExc_TypeError, "run: share's gshare (float64) and gflag (int32) need one entry per "
                                                 "group, lptr (int64) one more, lcount and lfirst (int64) one per link");
                PyBuffer_Release(&sbuf[sgot]);
                goto release_bufs;
            }
        }
        w->share_cb = PyTuple_GET_ITEM(share, 0);
        w->gshare = (const double *)sbuf[0].buf;
        w->gflag = (const i32 *)sbuf[1].buf;
        if (ns == 7) {
            w->lptr = (const int64_t *)sbuf[2].buf;
            w->llink = (const int64_t *)sbuf[3].buf;
            w->lcount = (int64_t *)sbuf[4].buf;
            w->lfirst = (int64_t *)sbuf[5].buf;
            i64 L = (i64)(sbuf[4].len / 8), E = (i64)(sbuf[3].len / 8);
            int ok = w->lptr[0] == 0 && w->lptr[iv[2]] == E;
            for (i64 g = 0; ok && g < iv[2]; g++) ok = w->lptr[g] <= w->lptr[g + 1];
            for (i64 a = 0; ok && a < E; a++) ok = w->llink[a] >= 0 && w->llink[a] < L;
            if (!ok) {
                PyErr_SetString(PyExc_ValueError, "run: share's lptr and llink must be a CSR of links below len(lcount)");
                goto release_bufs;
            }
        }
    }
    if (hostwait != Py_None) { /* (hw_a float64[N], hw_dev int32[N], hshift float64[N] written, hw_for int32[N]):
                                * rule host-wait */
        if (!PyTuple_Check(hostwait) || PyTuple_GET_SIZE(hostwait) != 4) {
            PyErr_SetString(PyExc_TypeError, "run: hostwait must be None or (hw_a, hw_dev, hshift, hw_for)");
            goto release_bufs;
        }
        for (; hgot < 4; hgot++) {
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(hostwait, hgot), &hbuf[hgot],
                                   (hgot == 2 ? PyBUF_WRITABLE : 0) | PyBUF_FORMAT) < 0) goto release_bufs;
            const char *f = hbuf[hgot].format ? hbuf[hgot].format : "B";
            if (*f == '<' || *f == '=' || *f == '@') f++;
            int int32 = hgot == 1 || hgot == 3;
            Py_ssize_t isz = int32 ? 4 : 8;
            if (hbuf[hgot].itemsize != isz || strcmp(f, int32 ? "i" : "d") ||
                !PyBuffer_IsContiguous(&hbuf[hgot], 'C') || hbuf[hgot].len != isz * (Py_ssize_t)w->N) {
                PyErr_SetString(PyExc_TypeError, "run: hostwait's hw_a, hshift (float64) and hw_dev, hw_for (int32) "
                                                 "need one entry per op");
                PyBuffer_Release(&hbuf[hgot]);
                goto release_bufs;
            }
        }
        w->hw_a = (const double *)hbuf[0].buf;
        w->hw_dev = (const i32 *)hbuf[1].buf;
        w->hshift = (double *)hbuf[2].buf;
        w->hw_for = (const i32 *)hbuf[3].buf;
    }
    if (bufs[2].len != COPY_TAB * (Py_ssize_t)sizeof(double)) { /* read by index in rate_of */
        PyErr_Format(PyExc_ValueError, "run: the copy rate table must hold %d entries", COPY_TAB);
        goto release_bufs;
    }
    if (bufs[1].len != 4 * (Py_ssize_t)sizeof(double)) { /* gpu.rates.rate_tables */
        PyErr_SetString(PyExc_ValueError, "run: the batch rate table must hold 4 entries");
        goto release_bufs;
    }
    int b = 0;
#define D(f) (w->f = (double *)ptr[b++])
#define CD(f) (w->f = (const double *)ptr[b++])
#define I(f) (w->f = (i32 *)ptr[b++])
#define CI(f) (w->f = (const i32 *)ptr[b++])
    CD(comm_tab); CD(batch_tab); CD(copy_tab);
    I(npred); CI(succ_ptr); CI(succ_idx); CI(sid); CI(orank); CI(ogrp); CI(kern); CD(issue); CD(opwork); CI(otmpl);
    CI(kops_ptr); CI(kops_idx); CI(ktype); CI(krank); CI(kmem); CI(kq); I(kneed); I(kleft); CD(ktau);
    I(ktail); CD(ktail_tau); CD(kgain);
    CI(q_ptr); CI(q_idx);
    CI(gmem_ptr); CI(gmem_idx); CI(gends_ptr); CI(gends_idx); CI(grev_ptr); CI(grev_idx); CI(granks_ptr);
    CI(granks_idx); CI(epos_ptr); CI(epos_idx); CD(gwork);
    D(start); D(end); D(ready_t); D(deps_t); D(khand); I(binding);
    /* scratch handed in by Python, zeroed: kernels, groups, ranks */
    I(kbat); I(kwait); I(qhead); I(cqnext);
    if (b != NBUF) {
        PyErr_SetString(PyExc_SystemError, "_cwaves: buffer count");
        goto release_bufs;
    }
    { /* the compact forms (W): kern, kops_ptr, kops_idx all empty (the identity, K == N); ktail of one
       * entry (every kernel's 0); kmem, ktail_tau, kgain, ktau of one entry (every compute kernel's value); kneed of one entry 1 (every kernel one op: kwait
       * is not read) */
        int ident = !bufs[9].len && !bufs[13].len && !bufs[14].len;
        if (ident) {
            w->kern = w->kops_ptr = w->kops_idx = NULL;
        } else if (!bufs[9].len || !bufs[13].len || !bufs[14].len) {
            PyErr_SetString(PyExc_ValueError, "run: kern, kops_ptr and kops_idx are all given or all empty");
            goto release_bufs;
        }
        int many = w->K > 1; /* one kernel: its arrays are one entry as they are */
        w->mmem = many && bufs[17].len == 4 ? 0 : ~(i64)0;
        w->mtail = many && bufs[22].len == 4 ? 0 : ~(i64)0;
        w->mttau = many && bufs[23].len == 8 ? 0 : ~(i64)0;
        w->mgain = many && bufs[24].len == 8 ? 0 : ~(i64)0;
        w->mtau = many && bufs[21].len == 8 ? 0 : ~(i64)0;
        w->kone = bufs[19].len == 4 && w->kneed[0] == 1;
        if ((ident && w->K != w->N) || (!w->mtail && w->ktail[0] != 0) || (bufs[19].len == 4 && w->K > 1 && !w->kone)) {
            PyErr_SetString(PyExc_ValueError, "run: an identity kernel map needs K == N, a one-entry ktail 0 and a "
                                              "one-entry kneed 1");
            goto release_bufs;
        }
        /* opwork of one entry per template, each op's read through otmpl (its template), or one per op (otmpl
         * empty); cqnext, the copy engines' queues, read for copy kernels alone: empty where none is one */
        int bad = 0;
        if (!bufs[12].len) {
            w->otmpl = NULL;
        } else if (bufs[12].len != 4 * (Py_ssize_t)w->N) {
            bad = 1;
        } else {
            i64 nw = (i64)(bufs[11].len / 8);
            for (i64 i = 0; i < w->N && !bad; i++) bad = w->otmpl[i] < 0 || w->otmpl[i] >= nw;
        }
        if (bufs[47].len < 4 * (Py_ssize_t)w->K)
            for (i64 k = 0; k < w->K && !bad; k++) bad = 2 * (w->ktype[k] >= 2);
        /* the successor CSR of rank 0's R ops (succ_ptr of R + 1 < N + 1 entries): every rank's ops are R in a
         * row, in rank order, its successors below R (shifted by the op's rank times R) */
        i64 R = (i64)(bufs[4].len / 4) - 1;
        if (!bad && R != w->N) {
            bad = 4 * (R < 1 || w->N % R != 0 || w->succ_ptr[0] != 0 || (i64)(bufs[5].len / 4) < w->succ_ptr[R]);
            for (i64 r = 0; !bad && r < R; r++) bad = 4 * (w->succ_ptr[r] > w->succ_ptr[r + 1]);
            for (i64 p = 0; !bad && p < w->succ_ptr[R]; p++) bad = 4 * (w->succ_idx[p] < 0 || w->succ_idx[p] >= R);
            for (i64 i = 0, k = 0, j = 0; !bad && i < w->N; i++, j = j + 1 == R ? (k++, 0) : j + 1)
                bad = 4 * (w->orank[i] != k);
            w->speriod = R;
        }
        /* granks_idx empty: each group's ranks are its members' (granks_ptr then equals gmem_ptr) */
        if (!bad && !bufs[34].len) {
            w->granks_idx = NULL;
            bad = 3 * (bufs[33].len != bufs[27].len || memcmp(bufs[33].buf, bufs[27].buf, (size_t)bufs[27].len) != 0);
        }
        if (bad) {
            PyErr_SetString(PyExc_ValueError, bad == 1 ? "run: otmpl must be empty or one index into opwork per op"
                                              : bad == 2 ? "run: cqnext needs one entry per kernel where a kernel is a copy"
                                              : bad == 3 ? "run: an empty granks_idx needs granks_ptr equal to gmem_ptr"
                                              : "run: a successor CSR of R ops needs every rank's ops R in a row, in "
                                                "rank order, and successors below R");
            goto release_bufs;
        }
    }
    {
        i64 N = w->N, K = w->K, G = w->G, R = w->world + 1, E = w->gends_ptr[G]; /* + 1: no 0-byte callocs */
        (void)N;
        w->kstarted = calloc((size_t)K + 1, 1);
        w->kready = calloc((size_t)K + 1, 1);
        w->gres = calloc((size_t)G + 1, sizeof(i32));
        w->garr = calloc((size_t)G + 1, sizeof(i32));
        w->xcnt = calloc((size_t)G + 1, sizeof(i32));
        w->xmin = calloc((size_t)G + 1, sizeof(double));
        w->xinit = calloc((size_t)G + 1, 1);
        w->xval = calloc((size_t)E + 1, sizeof(double));
        w->free_ = calloc((size_t)R, sizeof(i64));
        w->held = calloc((size_t)R, sizeof(i64));
        w->nccl_n = calloc((size_t)R, sizeof(i64));
        w->nmem = calloc((size_t)R, sizeof(double));
        w->ncomm = calloc((size_t)R, sizeof(i64));
        w->ncopy = calloc((size_t)R, sizeof(i64));
        w->nwait = calloc((size_t)R, sizeof(i64));
        w->nlink = calloc((size_t)(4 * R), sizeof(i64)); /* 4·rank + 2·tier + direction */
        w->cqhead = malloc((size_t)(3 * R) * sizeof(i64));
        w->cqtail = calloc((size_t)(3 * R), sizeof(i64));
        w->crate = malloc((size_t)R * sizeof(double));
        w->intoplace = calloc((size_t)R, 1);
        w->indirty = calloc((size_t)R, 1);
        w->lchg = calloc((size_t)R, 1);
        w->run_job = lines_zeroed(R, sizeof(ivec));
        w->run_slot = lines_zeroed(R, sizeof(ivec));
        w->pend = lines_zeroed(R, sizeof(heap_t));
        int hs = w->hw_a ? host_wait_setup(w) : 1;
        if (hs < 0) {
            PyErr_SetString(PyExc_ValueError, "run: hostwait's hw_for must name, for an op, a later host wait of scope 2 "
                                              "on its rank");
            w->stop = 1;
        } else if (!hs) {
            w->oom = 1;
        }
        if (!w->kstarted || !w->kready || !w->gres || !w->garr || !w->xcnt || !w->xmin || !w->xinit || !w->xval ||
            !w->free_ || !w->held || !w->nccl_n || !w->nmem || !w->ncomm || !w->ncopy || !w->nwait || !w->nlink ||
            !w->cqhead || !w->cqtail || !w->crate || !w->intoplace || !w->indirty || !w->lchg || !w->run_job ||
            !w->run_slot || !w->pend) {
            w->oom = 1;
        } else if (!w->stop) {
            for (i64 r = 0; r < R; r++) {
                w->free_[r] = w->S;
                w->crate[r] = 1.0;
            }
            for (i64 c = 0; c < 3 * R; c++) w->cqhead[c] = -1;
            w->jfree = -1;
            w->nl = LANES_FIRST;
            w->ts = PyEval_SaveThread();
            loop(w);
            PyEval_RestoreThread(w->ts);
        }
        if (w->stop)
            ; /* the handler's exception (KeyboardInterrupt) propagates */
        else if (w->oom)
            PyErr_NoMemory();
        else
            result = PyLong_FromLongLong(w->halted ? -1 : w->njobs); /* -1: halted (the outputs are partial) */
        free(w->kstarted); free(w->kready); free(w->gres); free(w->garr); free(w->xcnt); free(w->xmin);
        free(w->xinit); free(w->xval); free(w->free_); free(w->held); free(w->nccl_n); free(w->nmem);
        free(w->ncomm); free(w->ncopy); free(w->nwait); free(w->nlink); free(w->cqhead); free(w->cqtail); free(w->crate);
        free(w->intoplace); free(w->indirty); free(w->lchg);
        free(w->hgate); free(w->gcnt); free(w->hby); free(w->rfirst); free(w->rdone); free(w->rdev); free(w->rshift);
        if (w->run_job)
            for (i64 r = 0; r < R; r++) ivec_free(&w->run_job[r]);
        if (w->run_slot)
            for (i64 r = 0; r < R; r++) ivec_free(&w->run_slot[r]);
        if (w->pend)
            for (i64 r = 0; r < R; r++) heap_free(&w->pend[r]);
        free(w->run_job); free(w->run_slot); free(w->pend);
        ivec_free(&w->toplace); ivec_free(&w->dirty); free(w->job); heap_free(&w->heap);
        for (int l = 0; l < LANES; l++) free(w->lane[l].e);
    }
release_bufs:
    for (int a = 0; a < got; a++) PyBuffer_Release(&bufs[a]);
    for (int a = 0; a < sgot; a++) PyBuffer_Release(&sbuf[a]);
    for (int a = 0; a < hgot; a++) PyBuffer_Release(&hbuf[a]);
    return result;
}

/* ---- acyclic(n, src, dst): Kahn's sweep, for the static checks ------------------------------------------- */
/* Whether the graph of n nodes and edges src[e] -> dst[e] (int32 or int64 buffers, both of one type and length)
 * has no cycle: the sweep of schedsim.lower.checks._acyclic (which runs when this module is not built), in C
 * because a pipeline's NCCL wait-for graph has a million nodes. Its adjacency, in-degrees and stack are int32
 * when n and the edge count are below 2**31 (half the fresh pages of int64). Raises ValueError for a node
 * outside 0..n-1, TypeError for other buffers, MemoryError. */
static int index_buffer(PyObject *o, Py_buffer *b) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (!(b->itemsize == 8 && (!strcmp(f, "l") || !strcmp(f, "q"))) && !(b->itemsize == 4 && (!strcmp(f, "i")
                                                                                                || !strcmp(f, "l")))) {
        PyBuffer_Release(b);
        PyErr_SetString(PyExc_TypeError, "acyclic: src and dst must be int32 or int64 arrays");
        return -1;
    }
    return 0;
}

/* kahn_<IT>_<ST>: the sweep with index type IT over edges of type ST; returns the nodes it reached, -1 when out
 * of memory. The caller has checked every node is in 0..n-1. */
#define KAHN(NAME, IT, ST)                                                                                        \
    static i64 NAME(i64 n, i64 E, const ST *src, const ST *dst) {                                              \
        IT *ptr = calloc((size_t)n + 2, sizeof(IT)), *adj = malloc(((size_t)E + 1) * sizeof(IT));             \
        IT *indeg = calloc((size_t)n + 1, sizeof(IT)), *stack = malloc(((size_t)n + 1) * sizeof(IT));         \
        i64 seen = -1;                                                                                          \
        if (ptr && adj && indeg && stack) {                                                                     \
            seen = 0;                                                                                           \
            for (i64 e = 0; e < E; e++) {                                                                       \
                ptr[src[e] + 2]++;                                                                              \
                indeg[dst[e]]++;                                                                                \
            }                                                                                                   \
            for (i64 v = 2; v < n + 2; v++) ptr[v] += ptr[v - 1];                                               \
            for (i64 e = 0; e < E; e++) adj[ptr[src[e] + 1]++] = (IT)dst[e]; /* ptr[v + 1]: end of row v */   \
            i64 top = 0;                                                                                        \
            for (i64 v = 0; v < n; v++)                                                                         \
                if (!indeg[v]) stack[top++] = (IT)v;                                                            \
            while (top) {                                                                                       \
                IT a = stack[--top];                                                                            \
                seen++;                                                                                         \
                for (IT k = ptr[a]; k < ptr[a + 1]; k++)                                                        \
                    if (!--indeg[adj[k]]) stack[top++] = adj[k];                                                \
            }                                                                                                   \
        }                                                                                                       \
        free(ptr); free(adj); free(indeg); free(stack);                                                         \
        return seen;                                                                                            \
    }
KAHN(kahn_i32_i32, i32, i32)
KAHN(kahn_i32_i64, i32, i64)
KAHN(kahn_i64_i32, i64, i32)
KAHN(kahn_i64_i64, i64, i64)

#define NODES_IN_RANGE(ST)                                                                                        \
    for (i64 e = 0; e < E; e++) {                                                                               \
        const ST *s_ = sb.buf, *d_ = db.buf;                                                                    \
        if (s_[e] < 0 || s_[e] >= n || d_[e] < 0 || d_[e] >= n) {                                               \
            PyErr_Format(PyExc_ValueError, "acyclic: edge %lld (%lld -> %lld) leaves 0..%lld", (long long)e,    \
                         (long long)s_[e], (long long)d_[e], (long long)n - 1);                                  \
            goto done;                                                                                          \
        }                                                                                                       \
    }

static PyObject *acyclic(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t n;
    PyObject *so, *dobj;
    if (!PyArg_ParseTuple(args, "nOO", &n, &so, &dobj)) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "acyclic: n < 0");
        return NULL;
    }
    Py_buffer sb, db;
    if (index_buffer(so, &sb) < 0) return NULL;
    if (index_buffer(dobj, &db) < 0) {
        PyBuffer_Release(&sb);
        return NULL;
    }
    PyObject *result = NULL;
    int wide = sb.itemsize == 8;
    i64 E = sb.len / sb.itemsize;
    if (db.len != sb.len || db.itemsize != sb.itemsize) {
        PyErr_SetString(PyExc_ValueError, "acyclic: src and dst differ in length or type");
        goto done;
    }
    if (wide) {
        NODES_IN_RANGE(i64)
    } else {
        NODES_IN_RANGE(i32)
    }
    i64 seen;
    int narrow = n < INT32_MAX && E < INT32_MAX;
    Py_BEGIN_ALLOW_THREADS
    if (narrow)
        seen = wide ? kahn_i32_i64(n, E, sb.buf, db.buf) : kahn_i32_i32(n, E, sb.buf, db.buf);
    else
        seen = wide ? kahn_i64_i64(n, E, sb.buf, db.buf) : kahn_i64_i32(n, E, sb.buf, db.buf);
    Py_END_ALLOW_THREADS
    if (seen < 0) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyBool_FromLong(seen == n);
done:
    PyBuffer_Release(&sb);
    PyBuffer_Release(&db);
    return result;
}

/* int64_buffer(o, b, writable, what): a C-contiguous int64 buffer of o in b (released by the caller); TypeError
 * "<what>: buffers must be int64 arrays" otherwise. */
static int int64_buffer(PyObject *o, Py_buffer *b, int writable, const char *what) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (b->itemsize != 8 || (strcmp(f, "l") && strcmp(f, "q"))) {
        PyBuffer_Release(b);
        PyErr_Format(PyExc_TypeError, "%s: buffers must be int64 arrays", what);
        return -1;
    }
    return 0;
}

/* typed_index32(o, b): a C-contiguous int32 buffer of o in b (released by the caller); TypeError otherwise. */
static int typed_index32(PyObject *o, Py_buffer *b) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (b->itemsize != 4 || (strcmp(f, "i") && strcmp(f, "l"))) {
        PyBuffer_Release(b);
        PyErr_SetString(PyExc_TypeError, "acyclic_units: parts must be int32 arrays");
        return -1;
    }
    return 0;
}

/* ---- acyclic_units(n, units, parts): Kahn's sweep of the NCCL wait-for graph, edges in parts ------------ */
/* Whether the graph of n nodes has no cycle, its edges: 2u -> 2u + 1 for every u < units (a unit's "posted ->
 * done", not stored), and src[e] -> dst[e] of every (src, dst) pair of int32 arrays in the sequence parts (read
 * where they lie: no concatenation). The sweep of acyclic(), for schedsim.lower.checks._no_hang. Raises
 * TypeError for parts that are not pairs of int32 arrays of one length (the caller then concatenates),
 * ValueError for a node outside 0..n-1 or sizes past int32, MemoryError. */
static PyObject *acyclic_units(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t n, units;
    PyObject *parts;
    if (!PyArg_ParseTuple(args, "nnO", &n, &units, &parts)) return NULL;
    PyObject *seq = PySequence_Fast(parts, "acyclic_units: parts must be a sequence of (src, dst) pairs");
    if (!seq) return NULL;
    Py_ssize_t np_ = PySequence_Fast_GET_SIZE(seq);
    Py_buffer *bufs = calloc((size_t)(2 * np_ + 1), sizeof(Py_buffer));
    PyObject *result = NULL;
    i32 *ptr = NULL, *adj = NULL, *indeg = NULL, *stack = NULL;
    int got = 0;
    i64 E = 0;
    if (!bufs) {
        PyErr_NoMemory();
        goto done;
    }
    if (n < 0 || units < 0 || 2 * (i64)units > (i64)n || n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "acyclic_units: need 0 <= 2 * units <= n < 2**31");
        goto done;
    }
    for (Py_ssize_t k = 0; k < np_; k++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, k);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "acyclic_units: each part must be a (src, dst) tuple");
            goto done;
        }
        for (int j = 0; j < 2; j++) {
            if (typed_index32(PyTuple_GET_ITEM(pair, j), &bufs[got]) < 0) goto done;
            got++;
        }
        if (bufs[got - 1].len != bufs[got - 2].len) {
            PyErr_SetString(PyExc_TypeError, "acyclic_units: src and dst of a part differ in length");
            goto done;
        }
        E += bufs[got - 1].len / 4;
    }
    if (E >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "acyclic_units: more than 2**31 edges");
        goto done;
    }
    for (int k = 0; k < got; k++) {
        const i32 *x = bufs[k].buf;
        for (i64 e = 0; e < bufs[k].len / 4; e++)
            if (x[e] < 0 || x[e] >= n) {
                PyErr_Format(PyExc_ValueError, "acyclic_units: node %lld outside 0..%lld", (long long)x[e],
                             (long long)n - 1);
                goto done;
            }
    }
    ptr = calloc((size_t)n + 2, sizeof(i32));
    adj = malloc(((size_t)E + 1) * sizeof(i32));
    indeg = calloc((size_t)n + 1, sizeof(i32));
    stack = malloc(((size_t)n + 1) * sizeof(i32));
    if (!ptr || !adj || !indeg || !stack) {
        PyErr_NoMemory();
        goto done;
    }
    i64 seen = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int k = 0; k < got; k += 2) {
        const i32 *src = bufs[k].buf, *dst = bufs[k + 1].buf;
        for (i64 e = 0; e < bufs[k].len / 4; e++) {
            ptr[src[e] + 2]++;
            indeg[dst[e]]++;
        }
    }
    for (i64 u = 0; u < units; u++) indeg[2 * u + 1]++;
    for (i64 v = 2; v < (i64)n + 2; v++) ptr[v] += ptr[v - 1];
    for (int k = 0; k < got; k += 2) {
        const i32 *src = bufs[k].buf, *dst = bufs[k + 1].buf;
        for (i64 e = 0; e < bufs[k].len / 4; e++) adj[ptr[src[e] + 1]++] = dst[e]; /* ptr[v + 1]: end of row v */
    }
    i64 top = 0;
    for (i64 v = 0; v < n; v++)
        if (!indeg[v]) stack[top++] = (i32)v;
    while (top) {
        i32 a = stack[--top];
        seen++;
        if (a < 2 * units && !(a & 1) && !--indeg[a + 1]) stack[top++] = a + 1;
        for (i32 k = ptr[a]; k < ptr[a + 1]; k++)
            if (!--indeg[adj[k]]) stack[top++] = adj[k];
    }
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(seen == n);
done:
    free(ptr); free(adj); free(indeg); free(stack);
    for (int k = 0; k < got; k++) PyBuffer_Release(&bufs[k]);
    free(bufs);
    Py_DECREF(seq);
    return result;
}

/* ---- torch_rows(...): torch's _add_send_recv on an order's columns (schedsim.lower.pipeline._torch_lower_cols) */
/* torch_rows(counts, typ, stage, mb, prod, adj, send, peer_st, peer_rank, sweep, o_rank, o_typ, o_st, o_mb, o_bid)
 * -> bool. The steps of P ranks (counts[r] each, rank-major, idle steps typ < 0) run in sweeps: step k
 * of a rank in sweep t_k = max(t_(k-1) + 1, t_prod[k] + adj[k]) (prod[k] < 0: no producer; t_(-1) = -1; adj[k]
 * 0 or 1, counts[r] >= 0, send[k] 0, 4 or 6: ValueError otherwise), the
 * least solution (the numpy path's fixed point) found as longest paths in Kahn's order: False when a step
 * waits on a cycle. Then the rows,
 * in the order torch's sweeps append them (sweep by sweep, ranks ascending: a counting sort by sweep): each
 * busy step on its rank, after it its send (send[k]: 4 SEND_F or 6 SEND_B; 0 none) and on rank peer_rank[k]
 * the matching recv (send + 1) at stage peer_st[k]; per rank, a p2p row's batch id counts the rank's p2p rows
 * from 1 (-1 for a compute). Buffers int64 of one length (the step arrays and sweep, written; counts P; the
 * o_ arrays the busy steps plus twice the sends). Raises TypeError / ValueError for other buffers, MemoryError. */
static PyObject *torch_rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[15];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8],
                          &o[9], &o[10], &o[11], &o[12], &o[13], &o[14]))
        return NULL;
    Py_buffer b[15];
    int got = 0;
    PyObject *result = NULL;
    i64 *start = NULL, *bucket = NULL, *order = NULL, *cur = NULL, *pcnt = NULL;
    i64 *rk = NULL, *cptr = NULL, *cons = NULL, *indeg = NULL, *stack = NULL;
    for (; got < 15; got++)
        if (int64_buffer(o[got], &b[got], got >= 9, "torch_rows") < 0) goto done;
    const i64 *counts = b[0].buf, *typ = b[1].buf, *stage = b[2].buf, *mb = b[3].buf, *prod = b[4].buf;
    const i64 *adj = b[5].buf, *send = b[6].buf, *peer_st = b[7].buf, *peer_rank = b[8].buf;
    i64 *sweep = b[9].buf, *o_rank = b[10].buf, *o_typ = b[11].buf, *o_st = b[12].buf, *o_mb = b[13].buf;
    i64 *o_bid = b[14].buf;
    i64 P = b[0].len / 8, n = b[1].len / 8, R = b[10].len / 8;
    for (int k = 2; k < 10; k++)
        if (b[k].len / 8 != n) goto bad;
    for (int k = 11; k < 15; k++)
        if (b[k].len / 8 != R) goto bad;
    start = malloc(((size_t)P + 1) * sizeof(i64));
    cur = calloc((size_t)P + 1, sizeof(i64));
    pcnt = calloc((size_t)P + 1, sizeof(i64));
    if (!start || !cur || !pcnt) goto nomem;
    start[0] = 0;
    for (i64 r = 0; r < P; r++) {
        if (counts[r] < 0 || counts[r] > n - start[r]) goto bad; /* each rank's steps inside 0..n-1 */
        start[r + 1] = start[r] + counts[r];
    }
    if (start[P] != n) goto bad;
    i64 rows = 0;
    for (i64 k = 0; k < n; k++) {
        if (prod[k] >= n || adj[k] < 0 || adj[k] > 1 || (send[k] && send[k] != 4 && send[k] != 6) ||
            (send[k] && (peer_rank[k] < 0 || peer_rank[k] >= P)))
            goto bad;
        if (typ[k] >= 0) rows += send[k] ? 3 : 1;
    }
    if (rows != R) goto bad;
    /* the sweeps as longest paths, by Kahn's order over each step's two inputs (the step before it on its rank,
     * its producer); a step never reached lies on a wait cycle */
    rk = malloc(((size_t)n + 1) * sizeof(i64));
    cptr = calloc((size_t)n + 2, sizeof(i64));
    cons = malloc(((size_t)n + 1) * sizeof(i64));
    indeg = malloc(((size_t)n + 1) * sizeof(i64));
    stack = malloc(((size_t)n + 1) * sizeof(i64));
    if (!rk || !cptr || !cons || !indeg || !stack) goto nomem;
    for (i64 r = 0; r < P; r++)
        for (i64 k = start[r]; k < start[r + 1]; k++) {
            rk[k] = r;
            indeg[k] = (k > start[r]) + (prod[k] >= 0);
        }
    for (i64 k = 0; k < n; k++)
        if (prod[k] >= 0) cptr[prod[k] + 2]++;
    for (i64 k = 2; k < n + 2; k++) cptr[k] += cptr[k - 1];
    for (i64 k = 0; k < n; k++)
        if (prod[k] >= 0) cons[cptr[prod[k] + 1]++] = k;
    i64 top = 0, done_n = 0;
    for (i64 k = 0; k < n; k++)
        if (!indeg[k]) stack[top++] = k;
    while (top) {
        i64 k = stack[--top];
        done_n++;
        i64 t = k > start[rk[k]] ? sweep[k - 1] + 1 : 0;
        if (prod[k] >= 0 && sweep[prod[k]] + adj[k] > t) t = sweep[prod[k]] + adj[k];
        sweep[k] = t;
        if (k + 1 < start[rk[k] + 1] && !--indeg[k + 1]) stack[top++] = k + 1;
        for (i64 i = cptr[k]; i < cptr[k + 1]; i++)
            if (!--indeg[cons[i]]) stack[top++] = cons[i];
    }
    if (done_n < n) {
        result = Py_NewRef(Py_False);
        goto done;
    }
    /* rows per rank: its busy steps and sends, and the recvs it gets */
    for (i64 k = 0; k < n; k++)
        if (typ[k] >= 0 && send[k]) pcnt[peer_rank[k]]++;
    for (i64 r = 0; r < P; r++)
        for (i64 k = start[r]; k < start[r + 1]; k++)
            if (typ[k] >= 0) pcnt[r] += send[k] ? 2 : 1;
    for (i64 r = 0, acc = 0; r < P; r++) {
        cur[r] = acc;
        acc += pcnt[r];
        pcnt[r] = 0; /* now the rank's p2p rows so far */
    }
    /* the busy steps by sweep, ranks ascending within one (counting sort; step order within a rank) */
    i64 T = 0;
    for (i64 k = 0; k < n; k++)
        if (sweep[k] + 1 > T) T = sweep[k] + 1;
    bucket = calloc((size_t)T + 2, sizeof(i64));
    order = malloc(((size_t)n + 1) * sizeof(i64));
    if (!bucket || !order) goto nomem;
    for (i64 k = 0; k < n; k++)
        if (typ[k] >= 0) bucket[sweep[k] + 2]++;
    for (i64 t = 2; t < T + 2; t++) bucket[t] += bucket[t - 1];
    for (i64 r = 0; r < P; r++)
        for (i64 k = start[r]; k < start[r + 1]; k++)
            if (typ[k] >= 0) order[bucket[sweep[k] + 1]++] = k;
    i64 nbusy = bucket[T];
    for (i64 i = 0; i < nbusy; i++) {
        i64 k = order[i], r = rk[k];
        i64 at = cur[r]++;
        o_rank[at] = r; o_typ[at] = typ[k]; o_st[at] = stage[k]; o_mb[at] = mb[k]; o_bid[at] = -1;
        if (send[k]) {
            at = cur[r]++;
            o_rank[at] = r; o_typ[at] = send[k]; o_st[at] = stage[k]; o_mb[at] = mb[k]; o_bid[at] = ++pcnt[r];
            i64 q = peer_rank[k];
            at = cur[q]++;
            o_rank[at] = q; o_typ[at] = send[k] + 1; o_st[at] = peer_st[k]; o_mb[at] = mb[k]; o_bid[at] = ++pcnt[q];
        }
    }
    result = Py_NewRef(Py_True);
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError, "torch_rows: inconsistent counts, lengths or indices");
    goto done;
nomem:
    PyErr_NoMemory();
done:
    free(start); free(cur); free(pcnt); free(bucket); free(order);
    free(rk); free(cptr); free(cons); free(indeg); free(stack);
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    return result;
}

/* ---- first_set(...): the pipeline emitter's input lookups (schedsim.lower.pipeline._FastEmitter._inputs) --- */
/* first_set(sets, cls, rank, stage, mb, val, cand, K, NS, M, dep) -> bool: for events e = 0 .. E-1 in issue
 * order, dep[e] = val[s] for the first of its class's candidate keys that an earlier event s on the same rank
 * set; dep[e] is left as it is when none was. Event e sets the key sets[e] (keys in 0 .. (NS + 2) * 7 * M - 1);
 * returns False, with dep partly written, as soon as a key is set twice (the caller's sorted case). Its class cls[e] (-1: no lookup) picks the
 * candidates cand[3 * (cls * K + i) ..] for i < K, each (stage offset, code, rule), a code of -1 ending the
 * list; rule 0 always applies, 1 only when the event's stage > 0, 2 only when it is < NS - 1. A candidate's key
 * is ((stage + offset + 1) * 7 + code) * M + mb: what the numpy path (first_found) looks up, event by event.
 * Buffers int64 (dep writable), one length E but cand. Raises TypeError / ValueError for other buffers, a
 * key outside the table or K, NS, M past 2**30, MemoryError. */
static PyObject *first_set(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[8];
    Py_ssize_t K, NS, M;
    if (!PyArg_ParseTuple(args, "OOOOOOOnnnO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &K, &NS, &M, &o[7]))
        return NULL;
    Py_buffer b[8];
    int got = 0;
    PyObject *result = NULL;
    i64 *at = NULL;
    for (; got < 8; got++)
        if (int64_buffer(o[got], &b[got], got == 7, "first_set") < 0) goto done;
    i64 E = b[0].len / 8;
    for (int k = 1; k < 8; k++)
        if (k != 6 && b[k].len / 8 != E) {
            PyErr_SetString(PyExc_ValueError, "first_set: per-event buffers differ in length");
            goto done;
        }
    /* K, NS and M bounded so 3K and the key space (NS + 2) * 7 * M cannot overflow */
    if (K < 0 || NS < 0 || M < 1 || K > ((i64)1 << 30) || NS > ((i64)1 << 30) || M > ((i64)1 << 30) ||
        b[6].len / 8 % (3 * (K ? K : 1))) {
        PyErr_SetString(PyExc_ValueError, "first_set: bad K, NS, M or candidate table");
        goto done;
    }
    const i64 *sets = b[0].buf, *cls = b[1].buf, *rank = b[2].buf, *stage = b[3].buf, *mb = b[4].buf;
    const i64 *val = b[5].buf, *cand = b[6].buf;
    i64 *dep = b[7].buf, ncls = K ? b[6].len / 8 / (3 * K) : 0, space = (NS + 2) * 7 * M;
    at = malloc(((size_t)space + 1) * sizeof(i64));
    if (!at) {
        PyErr_NoMemory();
        goto done;
    }
    for (i64 k = 0; k < space; k++) at[k] = -1;
    for (i64 e = 0; e < E; e++) {
        i64 c = cls[e];
        if (c >= ncls) {
            PyErr_SetString(PyExc_ValueError, "first_set: a class without candidates");
            goto done;
        }
        for (i64 i = 0; c >= 0 && i < K; i++) {
            const i64 *q = cand + 3 * (c * K + i);
            if (q[1] < 0) break;
            if ((q[2] == 1 && stage[e] <= 0) || (q[2] == 2 && stage[e] >= NS - 1)) continue;
            /* unsigned: arbitrary int64 inputs wrap (defined), then fail the range test */
            i64 key = (i64)((((uint64_t)stage[e] + (uint64_t)q[0] + 1u) * 7u + (uint64_t)q[1]) * (uint64_t)M
                             + (uint64_t)mb[e]);
            if (key < 0 || key >= space) {
                PyErr_SetString(PyExc_ValueError, "first_set: a candidate key outside the table");
                goto done;
            }
            i64 s = at[key];
            if (s >= 0 && rank[s] == rank[e]) {
                dep[e] = val[s];
                break;
            }
        }
        if (sets[e] < 0 || sets[e] >= space) {
            PyErr_SetString(PyExc_ValueError, "first_set: a set key outside the table");
            goto done;
        }
        if (at[sets[e]] >= 0) { /* a key set twice: not the dense case */
            result = Py_NewRef(Py_False);
            goto done;
        }
        at[sets[e]] = e;
    }
    result = Py_NewRef(Py_True);
done:
    free(at);
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    return result;
}

/* ---- walk(binding, ogrp, i, out): the critical path's walk back from op i, for the timeline ------------------ */
/* Follows binding[] (the op that released each op; < 0: its host launch, or none) from op i until it leaves the
 * ops or meets one it has seen, and writes to out (int32, length >= len(binding)) every op on the way except a
 * rendezvous peer standing for its group's op (binding and op in one group): the loop of
 * schedsim.sim.engine._timeline_program, from the last op to the first. Returns how many it wrote. Raises
 * TypeError for buffers that are not int32 of one length (out: at least), ValueError for i outside them. */
static int typed_buffer(PyObject *o, Py_buffer *b, const char *code, Py_ssize_t size, int writable,
                        const char *what) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (b->itemsize != size || strcmp(f, code)) {
        PyBuffer_Release(b);
        PyErr_SetString(PyExc_TypeError, what);
        return -1;
    }
    return 0;
}

static int int32_buffer(PyObject *o, Py_buffer *b, int writable) {
    return typed_buffer(o, b, "i", 4, writable, "walk: binding, ogrp and out must be int32 arrays");
}

static PyObject *walk(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *bo, *go, *oo;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "OOnO", &bo, &go, &i, &oo)) return NULL;
    Py_buffer bb, gb, ob;
    if (int32_buffer(bo, &bb, 0) < 0) return NULL;
    if (int32_buffer(go, &gb, 0) < 0) {
        PyBuffer_Release(&bb);
        return NULL;
    }
    if (int32_buffer(oo, &ob, 1) < 0) {
        PyBuffer_Release(&bb);
        PyBuffer_Release(&gb);
        return NULL;
    }
    PyObject *result = NULL;
    i64 n = bb.len / 4, k = 0;
    const i32 *binding = bb.buf, *ogrp = gb.buf;
    i32 *out = ob.buf;
    char *seen = NULL;
    if (gb.len != bb.len || ob.len < bb.len) {
        PyErr_SetString(PyExc_TypeError, "walk: binding and ogrp differ in length, or out is shorter");
        goto done;
    }
    if (i >= n) {
        PyErr_SetString(PyExc_ValueError, "walk: start op outside the ops");
        goto done;
    }
    seen = calloc((size_t)n + 1, 1);
    if (!seen) {
        PyErr_NoMemory();
        goto done;
    }
    while (i >= 0 && i < n && !seen[i]) {
        seen[i] = 1;
        i64 b = binding[i];
        if (!(b >= 0 && b < n && ogrp[i] >= 0 && ogrp[b] == ogrp[i])) out[k++] = (i32)i;
        i = b;
    }
    result = PyLong_FromLongLong(k);
done:
    free(seen);
    PyBuffer_Release(&bb);
    PyBuffer_Release(&gb);
    PyBuffer_Release(&ob);
    return result;
}

/* ---- succ_csr(n, edges, sid, sptr, sidx, npred, xdeps): the DAG's successor lists ---------------------------- */
/* The edges (a tuple of int64 or int32 arrays, each of (src, dst) pairs one after another, e.g. an (E, 2) array: ops
 * 0..n-1, any order, repeats allowed) as CSR: row r of sidx (from sptr[r] to sptr[r + 1], int32) holds r's
 * distinct successors in ascending order, which is what sorting the keys src·n + dst and dropping repeats gives
 * (tests/oracle/numpy_helpers.succ_csr). npred[v] (int32) counts v's distinct predecessors, xdeps[v]
 * (int64) those on another stream (sid: int64 stream code per op). sidx needs room for every edge; returns the
 * number of distinct edges. Counting sort by source, then each row sorted in place (rows are short: insertion
 * sort, qsort past 32 entries). */
static int int64_or_int32(PyObject *o, Py_buffer *b, int is64, int writable, const char *what) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    int ok = is64 ? b->itemsize == 8 && (!strcmp(f, "l") || !strcmp(f, "q")) : b->itemsize == 4 && !strcmp(f, "i");
    if (!ok) {
        PyBuffer_Release(b);
        PyErr_SetString(PyExc_TypeError, what);
        return -1;
    }
    return 0;
}

/* entry e of an edge array of int32 (is32) or int64 entries */
static inline i64 edge_at(const void *buf, int is32, i64 e) {
    return is32 ? (i64)((const i32 *)buf)[e] : ((const i64 *)buf)[e];
}

static int cmp_i32(const void *a, const void *b) {
    i32 x = *(const i32 *)a, y = *(const i32 *)b;
    return (x > y) - (x < y);
}

static PyObject *succ_csr(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t n;
    PyObject *edges, *o[5];
    if (!PyArg_ParseTuple(args, "nO!OOOOO", &n, &PyTuple_Type, &edges, &o[0], &o[1], &o[2], &o[3], &o[4]))
        return NULL;
    Py_ssize_t ne = PyTuple_GET_SIZE(edges);
    if (ne > 16) {
        PyErr_SetString(PyExc_ValueError, "succ_csr: at most 16 edge arrays");
        return NULL;
    }
    static const int is64[5] = {1, 0, 0, 0, 1};
    Py_buffer b[5], eb[16];
    int got = 0, egot = 0;
    PyObject *result = NULL;
    i64 *cur = NULL;
    int e32[16];
    for (; egot < ne; egot++) {
        if (index_buffer(PyTuple_GET_ITEM(edges, egot), &eb[egot]) < 0) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "succ_csr: int64 or int32 edge arrays");
            goto done;
        }
        e32[egot] = eb[egot].itemsize == 4;
    }
    for (; got < 5; got++)
        if (int64_or_int32(o[got], &b[got], is64[got], got >= 1,
                           "succ_csr: int64 sid; writable int32 sptr, sidx, npred and int64 xdeps") < 0)
            goto done;
    i64 E = 0;
    for (int k = 0; k < ne; k++) {
        if ((eb[k].len / eb[k].itemsize) % 2) {
            PyErr_SetString(PyExc_ValueError, "succ_csr: an edge array of an odd length (not pairs)");
            goto done;
        }
        E += eb[k].len / eb[k].itemsize / 2;
    }
    if (b[0].len / 8 != n || b[1].len / 4 != n + 1 || b[2].len / 4 < E || b[3].len / 4 != n || b[4].len / 8 != n ||
        E >= ((i64)1 << 31)) {
        PyErr_SetString(PyExc_ValueError, "succ_csr: arrays of the wrong lengths (or 2**31 edges or more)");
        goto done;
    }
    const i64 *sid = b[0].buf;
    i32 *sptr = b[1].buf, *sidx = b[2].buf, *npred = b[3].buf;
    i64 *xdeps = b[4].buf;
    for (int k = 0; k < ne; k++) {
        for (i64 e = 0; e < eb[k].len / eb[k].itemsize; e++)
            if (edge_at(eb[k].buf, e32[k], e) < 0 || edge_at(eb[k].buf, e32[k], e) >= n) {
                PyErr_SetString(PyExc_ValueError, "succ_csr: an edge names an op outside 0..n-1");
                goto done;
            }
    }
    cur = malloc(((size_t)n + 1) * sizeof(i64));
    if (!cur) {
        PyErr_NoMemory();
        goto done;
    }
    memset(cur, 0, ((size_t)n + 1) * sizeof(i64));
    for (int k = 0; k < ne; k++) {
        const void *pr = eb[k].buf;
        for (i64 e = 0; e < eb[k].len / eb[k].itemsize / 2; e++) cur[edge_at(pr, e32[k], 2 * e) + 1]++;
    }
    for (i64 r = 0; r < n; r++) cur[r + 1] += cur[r];
    for (int k = 0; k < ne; k++) {
        const void *pr = eb[k].buf;
        for (i64 e = 0; e < eb[k].len / eb[k].itemsize / 2; e++) /* cur[r]: end of r */
            sidx[cur[edge_at(pr, e32[k], 2 * e)]++] = (i32)edge_at(pr, e32[k], 2 * e + 1);
    }
    memset(npred, 0, (size_t)n * sizeof(i32));
    memset(xdeps, 0, (size_t)n * sizeof(i64));
    i64 w = 0, a = 0;
    for (i64 r = 0; r < n; r++) {
        i64 z = cur[r];
        i32 *row = sidx + a;
        i64 len = z - a;
        if (len > 32) {
            qsort(row, (size_t)len, sizeof(i32), cmp_i32);
        } else {
            for (i64 i = 1; i < len; i++) {
                i32 x = row[i];
                i64 j = i - 1;
                while (j >= 0 && row[j] > x) {
                    row[j + 1] = row[j];
                    j--;
                }
                row[j + 1] = x;
            }
        }
        sptr[r] = (i32)w;
        for (i64 i = a; i < z; i++) {
            i32 v = sidx[i];
            if (i > a && v == sidx[i - 1]) continue; /* read before any write reaches it: w <= i */
            sidx[w++] = v;
            npred[v]++;
            if (sid[v] != sid[r]) xdeps[v]++;
        }
        a = z;
    }
    sptr[n] = (i32)w;
    result = PyLong_FromLongLong(w);
done:
    free(cur);
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    for (int k = 0; k < egot; k++) PyBuffer_Release(&eb[k]);
    return result;
}

/* ---- kernels(...): rules hardware-queues, cta-count, hbm-share's kernel and hardware-queue arrays ---------------------------------------- */
/* kernels((N, world, nb, C[, wt]), rank, batch, res, tmpl, work, opq, tctas, twaves, tmem, kern, kptr, kidx, ktype,
 * krank, kneed, kleft, ktau, kmem, kq, qptr, qidx) -> (K, Q): what tests/oracle/numpy_helpers.kernels
 * makes, in O(N). Kernels are numbered by first appearance: an op with batch[i] >= 0 joins the kernel of
 * its (rank, batch), every other op is its own; kptr/kidx list each kernel's ops in op order, and each kernel
 * takes its first op's (head's) resource, rank, template and work: kleft = CTAs (compute), members
 * (communication) or 0; ktau = work / waves (compute) else 0; kmem = memory-bound (compute) else 0. Queues are
 * numbered by first appearance of (rank, opq[head]) over the kernels, qptr/qidx list each queue's kernels in
 * order. Per op (N): rank, batch, res, tmpl, opq int32, work float64 (per template, T entries, where wt is
 * given and not 0: an op's is its template's); per template (T): tctas, tmem int32, twaves
 * float64; outputs int32 (ktau float64), kern/kidx/qidx and the per-kernel ones with room for N, kptr N+1, qptr
 * min(N, world * C) + 1; with no batch (nb 0) kidx, ktype and krank may be empty: then every op is its own kernel
 * and they are the op indices, res and rank, which the caller has; and kern, kptr and kneed too with them (not
 * written: the identity, and one op per kernel). ValueError for wrong lengths, an index out of range, or world,
 * nb or C past 2**31. */
static PyObject *kernels(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t N, world, nb, C, wt = 0;
    PyObject *o[21], *sizes;
    if (!PyArg_ParseTuple(args, "O!OOOOOOOOOOOOOOOOOOOOO", &PyTuple_Type, &sizes, &o[0], &o[1], &o[2], &o[3],
                          &o[4], &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14], &o[15],
                          &o[16], &o[17], &o[18], &o[19], &o[20]) ||
        !PyArg_ParseTuple(sizes, "nnnn|n", &N, &world, &nb, &C, &wt))
        return NULL;
    /* inputs 0-8, outputs 9-20; 'd': float64 */
    static const char dbl[21] = {0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0};
    Py_buffer b[21];
    int got = 0;
    for (; got < 21; got++)
        if (typed_buffer(o[got], &b[got], dbl[got] ? "d" : "i", dbl[got] ? 8 : 4, got >= 9,
                         "kernels: int32 columns, float64 work, waves and ktau, writable outputs") < 0)
            break;
    PyObject *result = NULL;
    i32 *btab = NULL, *qtab = NULL, *cur = NULL;
    if (got < 21) goto done;
    i64 T = b[6].len / 4;
    /* the (rank, batch) and (rank, queue) tables hold world * nb and world * C slots: sizes whose products
     * overflow (or past 2**31 each: int32 codes) are refused, not wrapped */
    /* no batches: every op its own kernel, in op order; kidx, ktype, krank may then be empty (not written: the
     * caller reads the op columns), and kern, kptr, kneed too (bare: the identity and one op each) */
    int lean = nb == 0 && !b[11].len && !b[12].len && !b[13].len;
    int bare = lean && !b[9].len && !b[10].len && !b[14].len;
    i64 qmax = world < 1 || C < 1 || (i64)world * C >= N ? N : (i64)world * C; /* the most queues: Q <= K <= N */
    int bad = N < 0 || world < 1 || nb < 0 || C < 1 || world >= ((i64)1 << 31) || nb >= ((i64)1 << 31) ||
              C >= ((i64)1 << 31) || b[7].len / 8 != T || b[8].len / 4 != T ||
              (!bare && b[10].len / 4 < N + 1) || b[20].len / 4 < N || b[19].len / 4 < qmax + 1 ||
              N >= ((i64)1 << 31);
    for (int k = 0; k < 6; k++) bad |= b[k].len / (k == 4 ? 8 : 4) != (k == 4 && wt ? T : N);
    for (int k = 9; k < 21; k++)
        bad |= k != 10 && k != 19 && !(lean && k >= 11 && k <= 13) && !(bare && (k == 9 || k == 14)) &&
               b[k].len / (k == 16 ? 8 : 4) < N;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "kernels: arrays of the wrong lengths (or world, nb or C past 2**31)");
        goto done;
    }
    const i32 *rank = b[0].buf, *batch = b[1].buf, *res = b[2].buf, *tmpl = b[3].buf, *opq = b[5].buf;
    const i32 *tctas = b[6].buf, *tmem = b[8].buf;
    const double *work = b[4].buf, *twaves = b[7].buf;
    i32 *kern = b[9].buf, *kptr = b[10].buf, *kidx = b[11].buf, *ktype = b[12].buf, *krank = b[13].buf;
    i32 *kneed = b[14].buf, *kleft = b[15].buf, *kmem = b[17].buf, *kq = b[18].buf, *qptr = b[19].buf;
    i32 *qidx = b[20].buf;
    double *ktau = b[16].buf;
    i64 nbt = nb > 0 ? (i64)world * nb : 0;
    btab = malloc(((size_t)nbt + 1) * sizeof(i32));
    qtab = malloc(((size_t)world * C + 1) * sizeof(i32));
    cur = malloc(((size_t)N + 1) * sizeof(i32));
    if (!btab || !qtab || !cur) {
        PyErr_NoMemory();
        goto done;
    }
    for (i64 k = 0; k < nbt; k++) btab[k] = -1;
    for (i64 k = 0; k < (i64)world * C; k++) qtab[k] = -1;
    i32 K = 0, Q = 0;
    for (i64 i = 0; i < N; i++) {
        if (rank[i] < 0 || rank[i] >= world || tmpl[i] < 0 || tmpl[i] >= T || opq[i] < 0 || opq[i] >= C ||
            batch[i] >= nb) {
            PyErr_SetString(PyExc_ValueError, "kernels: a rank, template, queue or batch out of range");
            goto done;
        }
        if (batch[i] >= 0) {
            i32 *slot = &btab[(i64)rank[i] * nb + batch[i]];
            if (*slot < 0) *slot = K++;
            kern[i] = *slot;
        } else if (bare) {
            K++;
        } else {
            kern[i] = K++;
        }
    }
    if (!bare) {
        memset(kneed, 0, (size_t)K * sizeof(i32));
        for (i64 i = 0; i < N; i++) kneed[kern[i]]++;
        kptr[0] = 0;
        for (i32 k = 0; k < K; k++) kptr[k + 1] = kptr[k] + kneed[k];
    }
    if (!lean) {
        memcpy(cur, kptr, (size_t)K * sizeof(i32));
        for (i64 i = 0; i < N; i++) kidx[cur[kern[i]]++] = (i32)i;
    }
    for (i32 k = 0; k < K; k++) {
        i32 h = lean ? k : kidx[kptr[k]], t = tmpl[h], r = res[h];
        int comp = r == 0;
        if (!lean) {
            ktype[k] = r;
            krank[k] = rank[h];
        }
        kleft[k] = comp ? tctas[t] : (r == 1 ? (bare ? 1 : kneed[k]) : 0);
        ktau[k] = comp ? work[wt ? t : h] / twaves[t] : 0.0;
        kmem[k] = comp ? tmem[t] : 0;
        i32 *slot = &qtab[(i64)rank[h] * C + opq[h]];
        if (*slot < 0) *slot = Q++;
        kq[k] = *slot;
    }
    memset(cur, 0, ((size_t)Q + 1) * sizeof(i32));
    for (i32 k = 0; k < K; k++) cur[kq[k] + 1]++;
    qptr[0] = 0;
    for (i32 q = 0; q < Q; q++) qptr[q + 1] = qptr[q] + cur[q + 1];
    memcpy(cur, qptr, (size_t)Q * sizeof(i32));
    for (i32 k = 0; k < K; k++) qidx[cur[kq[k]]++] = k;
    result = Py_BuildValue("(ii)", K, Q);
done:
    free(btab);
    free(qtab);
    free(cur);
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    return result;
}

/* ---- stream_reached(qptr, qidx, khand, kern, call0, deps_t): when each op's stream reached it --------------- */
/* In place, deps_t[i] = max(deps_t[i], qreach[kern[i]], call0[i]) (kern empty: the identity, K == N), qreach[k] the time the queue handed over the
 * kernel before k in its queue (khand of that kernel; 0 for a queue's first): the post-pass of
 * schedsim.sim.waves_columns.run_waves_program (its numpy form: tests/oracle/numpy_helpers.py), one O(N + K)
 * pass. qptr/qidx
 * (int32 CSR of the queues' kernels), kern (int32 per op); khand (float64 per kernel), call0, deps_t (float64 per
 * op, deps_t writable). Raises TypeError for other buffers, ValueError for an index out of range. */
static PyObject *stream_reached(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5])) return NULL;
    static const char dbl[6] = {0, 0, 1, 0, 1, 1};
    Py_buffer b[6];
    int got = 0;
    for (; got < 6; got++)
        if (typed_buffer(o[got], &b[got], dbl[got] ? "d" : "i", dbl[got] ? 8 : 4, got == 5,
                         "stream_reached: int32 qptr, qidx, kern; float64 khand, call0, writable deps_t") < 0)
            break;
    PyObject *result = NULL;
    double *qreach = NULL;
    if (got < 6) goto done;
    i64 Q = b[0].len / 4 - 1, L = b[1].len / 4, K = b[2].len / 8, N = b[4].len / 8;
    const i32 *qptr = b[0].buf, *qidx = b[1].buf, *kern = b[3].len ? b[3].buf : NULL; /* empty: the identity */
    const double *khand = b[2].buf, *call0 = b[4].buf;
    double *deps = b[5].buf;
    int bad = Q < 0 || (kern ? b[3].len / 4 != N : K != N) || b[5].len / 8 != N ||
              (Q >= 0 && (qptr[0] < 0 || qptr[Q] > L));
    for (i64 q = 0; !bad && q < Q; q++) bad = qptr[q + 1] < qptr[q];
    for (i64 p = 0; !bad && p < L; p++) bad = qidx[p] < 0 || qidx[p] >= K;
    for (i64 i = 0; kern && !bad && i < N; i++) bad = kern[i] < 0 || kern[i] >= K;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "stream_reached: a queue, kernel or op index out of range");
        goto done;
    }
    qreach = calloc((size_t)K + 1, sizeof(double));
    if (!qreach) {
        PyErr_NoMemory();
        goto done;
    }
    for (i64 q = 0; q < Q; q++)
        for (i64 p = qptr[q] + 1; p < qptr[q + 1]; p++) qreach[qidx[p]] = khand[qidx[p - 1]];
    for (i64 i = 0; i < N; i++) {
        double d = deps[i], x = qreach[kern ? kern[i] : i];
        d = x > d ? x : d; /* np.maximum of finite values */
        x = call0[i];
        deps[i] = x > d ? x : d;
    }
    result = Py_NewRef(Py_None);
done:
    free(qreach);
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    return result;
}

/* ---- fifo_edges(rank, comm, batch, out): rule communicator-order's communicator-order edges ------------------------------ */
/* The edges of tests/oracle/numpy_helpers.comm_fifo_columns (the numpy form: a test oracle), in
 * one pass over ops whose ranks ascend: per (rank, communicator) the ops with comm >= 0 in order, consecutive
 * ops of one batch (batch >= 0, equal) one entry, every op of an entry after every op of the entry before it
 * (out[2e] -> out[2e + 1]: an (E, 2) array of pairs, as succ_csr reads them; in another order than numpy's).
 * rank, comm, batch int64 of one length n; out writable int64 of an even length (room for len/2 edges). Returns
 * the number of edges (those past the room not written: call again with room for them), or -1 when the ranks
 * do not ascend or a code is 4n + 64 or more (sparse: its table is not made; nothing written that counts). Raises TypeError for other buffers, ValueError for lengths that
 * differ. */
static PyObject *fifo_edges(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[4];
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3])) return NULL;
    Py_buffer b[4];
    int got = 0;
    for (; got < 4; got++)
        if (int64_or_int32(o[got], &b[got], 1, got == 3, "fifo_edges: int64 rank, comm, batch; writable int64 out")
            < 0)
            break;
    PyObject *result = NULL;
    i64 *st = NULL, *nxt = NULL;
    if (got < 4) goto done;
    i64 n = b[0].len / 8, room = b[3].len / 16;
    if (b[1].len / 8 != n || b[2].len / 8 != n || (b[3].len / 8) % 2) {
        PyErr_SetString(PyExc_ValueError, "fifo_edges: arrays of different lengths");
        goto done;
    }
    const i64 *rank = b[0].buf, *comm = b[1].buf, *batch = b[2].buf;
    i64 *out = b[3].buf;
    i64 nc = 0, E = 0;
    for (i64 i = 0; i < n; i++) {
        if (comm[i] >= 4 * n + 64) E = -1; /* sparse codes: a table that large is numpy's job (no wrap) */
        else if (comm[i] >= nc) nc = comm[i] + 1;
        if (i && rank[i] < rank[i - 1]) E = -1;
    }
    if (E < 0) {
        result = PyLong_FromLongLong(-1);
        goto done;
    }
    /* per communicator: the rank its state belongs to, the first op of its previous entry, the first and last op
     * of its current entry; an entry's ops are chained through nxt */
    st = malloc(((size_t)nc + 1) * 4 * sizeof(i64));
    nxt = malloc(((size_t)n + 1) * sizeof(i64));
    if (!st || !nxt) {
        PyErr_NoMemory();
        goto done;
    }
    for (i64 c = 0; c < nc; c++) st[4 * c] = -1;
    for (i64 i = 0; i < n; i++) {
        i64 c = comm[i];
        if (c < 0) continue;
        i64 *s = st + 4 * c;
        nxt[i] = -1;
        if (s[0] != rank[i] || rank[i] < 0) { /* the key's first op (ranks ascend: a state of an earlier rank) */
            s[0] = rank[i];
            s[1] = -1;
            s[2] = s[3] = i;
            continue;
        }
        if (batch[i] >= 0 && batch[i] == batch[s[3]]) { /* joins the current entry */
            nxt[s[3]] = i;
            s[3] = i;
        } else { /* opens an entry: the current one becomes the previous */
            s[1] = s[2];
            s[2] = s[3] = i;
        }
        for (i64 p = s[1]; p >= 0; p = nxt[p]) {
            if (E < room) {
                out[2 * E] = p;
                out[2 * E + 1] = i;
            }
            E++;
        }
    }
    result = PyLong_FromLongLong(E);
done:
    free(st);
    free(nxt);
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    return result;
}

/* ---- issue_times(...): rule host-issue's host issue times from per-class tables ------------------------------------ */
/* issue_times(rank, stream, hclass, repeat, batch, xdeps, host_s, by_class, per_repeat, first_group, first_cost,
 * batch_class, (ev_s, extra, sw_s, batch_s), issue, call0[, call_extra]) -> bool: schedsim.gpu.host.host_issue_columns'
 * columns and sums in one pass over ops whose ranks ascend (False, nothing that counts written, when they do
 * not or a batch id is 4n + 64 or more: host_issue_columns sorts and renumbers first). Every rule is in the tables
 * Python makes from gpu_model: an op of host class h calls by_class[h] seconds, times its repeat when per_repeat[h],
 * plus call_extra[i] (a GEMM shape's gemm.call extra, s) when given; an op of batch_class pays batch_s instead at
 * the first op of its (rank, batch); the first op of each first_group[h] >= 0 on a rank pays first_cost of that
 * group. Per rank the host adds, op by op and in this order, host_s, the event waits (xdeps * ev_s), extra, sw_s
 * where the stream changed, the call and the first-call cost: the floats and order of numpy's cumsum over them
 * (the test oracle tests/oracle/numpy_helpers.host_issue_columns), so bit-identical. Per op: rank, stream, hclass,
 * batch, xdeps int64, repeat int64 and host_s float64 (length n, or 1: one value for all), call_extra float64
 * (length n); per class: by_class float64, per_repeat and first_group int32; first_cost float64; issue, call0
 * writable float64. Raises TypeError for other buffers, ValueError for a class or group outside the tables, or
 * lengths that differ. */
static PyObject *issue_times(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[14] = {NULL};
    Py_ssize_t batch_class;
    double ev_s, extra, sw_s, batch_s;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOn(dddd)OO|O", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &o[8], &o[9], &o[10], &batch_class, &ev_s, &extra, &sw_s, &batch_s, &o[11], &o[12], &o[13]))
        return NULL;
    /* 'q': int64, 'd': float64, 'i': int32 */
    static const char kind[14] = {'q', 'q', 'q', 'q', 'q', 'q', 'd', 'd', 'i', 'i', 'd', 'd', 'd', 'd'};
    int nbuf = o[13] && o[13] != Py_None ? 14 : 13; /* call_extra given */
    Py_buffer b[14];
    int got = 0;
    for (; got < nbuf; got++) {
        int r = kind[got] == 'q'
                    ? int64_or_int32(o[got], &b[got], 1, 0, "issue_times: int64 op columns")
                    : typed_buffer(o[got], &b[got], kind[got] == 'd' ? "d" : "i", kind[got] == 'd' ? 8 : 4, got == 11 || got == 12,
                                   "issue_times: float64 times and costs, int32 class tables, writable outputs");
        if (r < 0) break;
    }
    PyObject *result = NULL;
    i64 *bseen = NULL;
    if (got < nbuf) goto done;
    i64 n = b[0].len / 8, nr_ = b[3].len / 8, nh = b[6].len / 8, H = b[7].len / 8, G = b[10].len / 8;
    int bad = b[1].len / 8 != n || b[2].len / 8 != n || b[4].len / 8 != n || b[5].len / 8 != n ||
              (nr_ != n && nr_ != 1) || (nh != n && nh != 1) || b[8].len / 4 != H || b[9].len / 4 != H ||
              b[11].len / 8 != n || b[12].len / 8 != n || G > 8 || (nbuf == 14 && b[13].len / 8 != n);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "issue_times: arrays of the wrong lengths");
        goto done;
    }
    const i64 *rank = b[0].buf, *stream = b[1].buf, *hcls = b[2].buf, *rep = b[3].buf, *batch = b[4].buf;
    const i64 *xdeps = b[5].buf;
    const double *hs = b[6].buf, *by_class = b[7].buf, *first_cost = b[10].buf;
    const i32 *per_rep = b[8].buf, *fgrp = b[9].buf;
    double *issue = b[11].buf, *call0 = b[12].buf;
    const double *cx = nbuf == 14 ? b[13].buf : NULL;
    i64 nb = 0;
    for (i64 i = 0; i < n; i++) {
        if (hcls[i] < 0 || hcls[i] >= H || fgrp[hcls[i]] >= G) {
            PyErr_SetString(PyExc_ValueError, "issue_times: a host class outside the tables");
            goto done;
        }
        if ((i && rank[i] < rank[i - 1]) || batch[i] >= 4 * n + 64) { /* sparse batch ids: no table that large */
            result = Py_NewRef(Py_False);
            goto done;
        }
        if (batch[i] >= nb) nb = batch[i] + 1;
    }
    bseen = malloc(((size_t)nb + 1) * sizeof(i64));
    if (!bseen) {
        PyErr_NoMemory();
        goto done;
    }
    for (i64 k = 0; k < nb; k++) bseen[k] = -1;
    i64 rstep = nr_ == n ? 1 : 0, hstep = nh == n ? 1 : 0;
    char seen[8] = {0};
    double acc = 0.0;
    for (i64 i = 0; i < n; i++) {
        int nr = !i || rank[i] != rank[i - 1];
        if (nr) memset(seen, 0, sizeof seen);
        i64 h = hcls[i];
        double call = by_class[h];
        if (per_rep[h]) call *= (double)rep[i * rstep];
        if (cx) call += cx[i];
        if (h == batch_class && batch[i] >= 0 && bseen[batch[i]] != rank[i]) { /* ranks ascend: a stamp */
            bseen[batch[i]] = rank[i];
            call = batch_s;
        }
        double first = 0.0;
        i32 g = fgrp[h];
        if (g >= 0 && !seen[g]) {
            seen[g] = 1;
            first = first_cost[g];
        }
        double hv = hs[i * hstep];
        acc = nr ? hv : acc + hv; /* np.cumsum starts a rank at its first element */
        acc += (double)xdeps[i] * ev_s;
        acc += extra;
        acc += !nr && stream[i] != stream[i - 1] ? sw_s : 0.0;
        call0[i] = acc;
        acc += call;
        acc += first;
        issue[i] = acc;
    }
    result = Py_NewRef(Py_True);
done:
    free(bseen);
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    return result;
}

/* ---- rank_codes(rank, key, out): each key numbered by first appearance on its rank ------------------------- */
/* out[i] = how many distinct keys rank[i]'s ops showed before key[i] first appeared on that rank (0 for the
 * rank's first key, 1 for its second, ...), in one pass over ops whose ranks ascend; the numbering of
 * schedsim.gpu.rules.stream_queue_columns (numpy's: the test oracle tests/oracle/numpy_helpers.rank_codes). rank, key int64 (key >= 0) of one length;
 * out writable int64. Returns False (nothing that counts written) when the ranks do not ascend or a key is 4n + 64
 * or more (sparse: its table is not made). Raises TypeError
 * for other buffers, ValueError for a negative key or lengths that differ. */
static PyObject *rank_codes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[3];
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2])) return NULL;
    Py_buffer b[3];
    int got = 0;
    for (; got < 3; got++)
        if (int64_or_int32(o[got], &b[got], 1, got == 2, "rank_codes: int64 rank and key, writable int64 out") < 0)
            break;
    PyObject *result = NULL;
    i64 *stamp = NULL, *code = NULL;
    if (got < 3) goto done;
    i64 n = b[0].len / 8, nk = 0;
    if (b[1].len / 8 != n || b[2].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "rank_codes: arrays of different lengths");
        goto done;
    }
    const i64 *rank = b[0].buf, *key = b[1].buf;
    i64 *out = b[2].buf;
    for (i64 i = 0; i < n; i++) {
        if (key[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "rank_codes: a negative key");
            goto done;
        }
        if (key[i] >= 4 * n + 64 || (i && rank[i] < rank[i - 1])) { /* sparse keys: no table that large */
            result = Py_NewRef(Py_False);
            goto done;
        }
        if (key[i] >= nk) nk = key[i] + 1;
    }
    stamp = malloc(((size_t)nk + 1) * sizeof(i64));
    code = malloc(((size_t)nk + 1) * sizeof(i64));
    if (!stamp || !code) {
        PyErr_NoMemory();
        goto done;
    }
    for (i64 k = 0; k < nk; k++) stamp[k] = -1; /* the position of the rank's first op when the key was seen */
    i64 head = 0, next = 0;
    for (i64 i = 0; i < n; i++) {
        if (i && rank[i] != rank[i - 1]) {
            head = i;
            next = 0;
        }
        i64 k = key[i];
        if (stamp[k] != head) {
            stamp[k] = head;
            code[k] = next++;
        }
        out[i] = code[k];
    }
    result = Py_NewRef(Py_True);
done:
    free(stamp);
    free(code);
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    return result;
}

/* ---- join_rows(pieces, n) and cut(raw, starts, ends, out): the trace writer's JSON text ------------------ */
/* An item of a fixed-width bytes buffer (numpy S) without its NUL padding, numpy's value of it */
static inline i64 item_len(const char *p, i64 w) {
    while (w && !p[w - 1]) w--;
    return w;
}

/* join_rows(pieces, n) -> bytes: n rows joined by commas, row i the concatenation of each piece's: a bytes piece
 * is the same in every row; any other piece is a C-contiguous buffer of n fixed-width bytes items (numpy S, shape
 * (n,)) giving row i its item i without the NUL padding (b"": nothing). The writer's JSON text holds no NUL byte
 * (orjson writes it \u0000), so this is the text the rows' bytes give with every NUL dropped: the form of
 * schedsim.report.chrome._rows_json (its numpy form, one matrix of the rows' bytes per block of rows, is the test
 * oracle tests/oracle/chrome_text.py). Two passes (the length, then the bytes): no buffer larger than the result.
 * Raises TypeError for a piece that is neither, ValueError for a buffer of another length than n, MemoryError. */
static PyObject *join_rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *pieces;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "On", &pieces, &n)) return NULL;
    PyObject *seq = PySequence_Fast(pieces, "join_rows: pieces must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t np_ = PySequence_Fast_GET_SIZE(seq);
    Py_buffer *b = calloc((size_t)np_ + 1, sizeof(Py_buffer));
    char *isarr = calloc((size_t)np_ + 1, 1);
    PyObject *result = NULL;
    Py_ssize_t got = 0;
    if (!b || !isarr) {
        PyErr_NoMemory();
        goto done;
    }
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "join_rows: n must be >= 0");
        goto done;
    }
    i64 fixed = 0; /* the bytes every row has: the constant pieces' and the comma */
    for (; got < np_; got++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, got);
        if (PyBytes_Check(o)) {
            if (PyObject_GetBuffer(o, &b[got], PyBUF_SIMPLE) < 0) goto done;
            fixed += b[got].len;
            continue;
        }
        if (PyObject_GetBuffer(o, &b[got], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
        isarr[got] = 1;
        const char *f = b[got].format ? b[got].format : "B";
        size_t fl = strlen(f);
        if (b[got].ndim != 1 || !fl || f[fl - 1] != 's') {
            got++;
            PyErr_SetString(PyExc_TypeError, "join_rows: a piece must be bytes or a 1-d fixed-width bytes array");
            goto done;
        }
        if (b[got].shape[0] != n) {
            got++;
            PyErr_Format(PyExc_ValueError, "join_rows: a piece of %zd items, not n = %zd", b[got - 1].shape[0], n);
            goto done;
        }
    }
    i64 total = n ? n * (fixed + 1) - 1 : 0;
    for (Py_ssize_t k = 0; k < np_; k++) {
        if (!isarr[k]) continue;
        i64 w = b[k].itemsize;
        const char *p = b[k].buf;
        for (i64 i = 0; i < n; i++) total += item_len(p + i * w, w);
    }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!result) goto done;
    char *out = PyBytes_AS_STRING(result);
    for (i64 i = 0; i < n; i++) {
        if (i) *out++ = ',';
        for (Py_ssize_t k = 0; k < np_; k++) {
            if (!isarr[k]) {
                memcpy(out, b[k].buf, (size_t)b[k].len);
                out += b[k].len;
                continue;
            }
            i64 w = b[k].itemsize;
            const char *p = (const char *)b[k].buf + i * w;
            i64 L = item_len(p, w);
            memcpy(out, p, (size_t)L);
            out += L;
        }
    }
done:
    for (Py_ssize_t k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    free(b);
    free(isarr);
    Py_DECREF(seq);
    return result;
}

/* cut(raw, starts, ends, out): out[i] = raw[starts[i]:ends[i]] for every i, out a writable C-contiguous buffer of
 * len(starts) fixed-width bytes items (numpy S of width >= every piece's length, zeroed: the rest of each item stays
 * NUL), raw bytes (uint8), starts and ends int64 of one length: schedsim.report.chrome._cut (its numpy form, a
 * sliding window per piece, is the test oracle tests/oracle/chrome_text.py). Raises TypeError for other buffers,
 * ValueError for a piece outside raw or longer than out's items, or lengths that differ. */
static PyObject *cut(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[4];
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3])) return NULL;
    Py_buffer raw, se[2], out;
    if (PyObject_GetBuffer(o[0], &raw, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (int64_buffer(o[1], &se[0], 0, "cut: starts and ends") < 0) {
        PyBuffer_Release(&raw);
        return NULL;
    }
    if (int64_buffer(o[2], &se[1], 0, "cut: starts and ends") < 0) {
        PyBuffer_Release(&raw);
        PyBuffer_Release(&se[0]);
        return NULL;
    }
    PyObject *result = NULL;
    if (PyObject_GetBuffer(o[3], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) goto release;
    i64 n = se[0].len / 8, w = out.itemsize;
    if (se[1].len / 8 != n || out.len != n * w) {
        PyErr_SetString(PyExc_ValueError, "cut: starts, ends and out of different lengths");
        goto done;
    }
    const i64 *s = se[0].buf, *e = se[1].buf;
    for (i64 i = 0; i < n; i++)
        if (s[i] < 0 || e[i] < s[i] || e[i] > raw.len || e[i] - s[i] > w) {
            PyErr_Format(PyExc_ValueError, "cut: piece %lld (%lld:%lld) outside the %zd bytes or wider than %lld",
                         (long long)i, (long long)s[i], (long long)e[i], raw.len, (long long)w);
            goto done;
        }
    char *dst = out.buf;
    const char *src = raw.buf;
    for (i64 i = 0; i < n; i++) memcpy(dst + i * w, src + s[i], (size_t)(e[i] - s[i]));
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
release:
    PyBuffer_Release(&raw);
    PyBuffer_Release(&se[0]);
    PyBuffer_Release(&se[1]);
    return result;
}

/* item_bounds(raw, starts, ends): where each item of a flat JSON array of n strings, numbers or nulls lies in its
 * text raw (orjson's ["...",1.5,null,...], no whitespace), starts[i] its first byte (a string's opening quote) and
 * ends[i] one past its last (n = len(starts) = len(ends), writable int64): a scan that steps over each backslash's
 * escaped byte inside a string and ends any other item at the next comma or bracket, for
 * schedsim.report.chrome._json_strs and _json_values (their numpy forms, quotes after an even run of backslashes
 * and the array's commas, are the test oracle tests/oracle/chrome_text.py). Raises ValueError where raw is not
 * such an array of n items, TypeError for other buffers. */
static PyObject *item_bounds(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[3];
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2])) return NULL;
    Py_buffer raw, se[2];
    if (PyObject_GetBuffer(o[0], &raw, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    int got = 0;
    for (; got < 2; got++)
        if (int64_buffer(o[1 + got], &se[got], 1, "item_bounds: starts and ends") < 0) break;
    PyObject *result = NULL;
    if (got < 2) goto done;
    i64 n = se[0].len / 8, L = raw.len, p = 1;
    if (se[1].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "item_bounds: starts and ends of different lengths");
        goto done;
    }
    const unsigned char *r = raw.buf;
    i64 *s = se[0].buf, *e = se[1].buf;
    if (L < 2 || r[0] != '[') goto bad;
    for (i64 i = 0; i < n; i++) {
        if (p >= L) goto bad;
        s[i] = p;
        if (r[p] == '"') { /* a string: to its closing quote */
            p++;
            while (p < L && r[p] != '"') p += r[p] == '\\' ? 2 : 1;
            if (p >= L) goto bad;
            p++;
        } else { /* a number, null, true or false: to the comma or bracket after it */
            while (p < L && r[p] != ',' && r[p] != ']' && r[p] != '"' && r[p] != '[' && r[p] != '{') p++;
            if (p == s[i]) goto bad;
        }
        e[i] = p;
        if (p >= L || r[p] != (i + 1 < n ? ',' : ']')) goto bad;
        p++;
    }
    if (p != L && !(n == 0 && L == 2 && r[1] == ']')) goto bad;
    result = Py_NewRef(Py_None);
    goto done;
bad:
    PyErr_Format(PyExc_ValueError, "item_bounds: not a flat JSON array of %lld items (at byte %lld)", (long long)n,
                 (long long)p);
done:
    PyBuffer_Release(&raw);
    for (int k = 0; k < got; k++) PyBuffer_Release(&se[k]);
    return result;
}

/* held_samples(val, keep) -> kept: a counter's samples that hold (schedsim.report.chrome._rate_samples): keep[i] = 1
 * where val[i] is not within 1e-9 (relative: |kept - x| <= 1e-9 * max(1, |x|), Python's max) of the last value
 * kept, the first always kept; val float64, keep writable uint8 (bool) of one length. The loop of the Python form
 * (the test oracle tests/oracle/chrome_text.py), statement for statement: the same IEEE operations (built with
 * -ffp-contract=off), so the same samples. Raises TypeError for other buffers, ValueError for lengths that
 * differ. */
static PyObject *held_samples(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[2];
    if (!PyArg_ParseTuple(args, "OO", &o[0], &o[1])) return NULL;
    Py_buffer vb, kb;
    if (typed_buffer(o[0], &vb, "d", 8, 0, "held_samples: val must be a float64 array") < 0) return NULL;
    if (typed_buffer(o[1], &kb, "?", 1, 1, "held_samples: keep must be a writable bool array") < 0) {
        PyBuffer_Release(&vb);
        return NULL;
    }
    PyObject *result = NULL;
    i64 n = vb.len / 8, kept_n = 0;
    if (kb.len != n) {
        PyErr_SetString(PyExc_ValueError, "held_samples: val and keep of different lengths");
    } else {
        const double *v = vb.buf;
        char *k = kb.buf;
        double kept = 0.0;
        for (i64 i = 0; i < n; i++) {
            double x = v[i], ax = fabs(x);
            if (i && fabs(kept - x) <= 1e-9 * (ax > 1.0 ? ax : 1.0)) {
                k[i] = 0; /* unchanged: a counter sample holds until the next one */
            } else {
                k[i] = 1;
                kept = x;
                kept_n++;
            }
        }
        result = PyLong_FromLongLong(kept_n);
    }
    PyBuffer_Release(&vb);
    PyBuffer_Release(&kb);
    return result;
}

/* overlaps(xg, x0, x1, yg, y0, y1, og, over) -> k: every overlap of a piece of x with a piece of y of its group,
 * for schedsim.sim.metrics._overlap_by: x and y pieces each sorted by group (int64, ascending) and, within one, by
 * start, disjoint and apart (schedsim.sim.metrics._merged_by's pieces: each starts after the one before ends), so
 * that a sweep finds, per x piece in order, the y pieces of its group with y1 > x0 and y0 < x1 in order (the pairs
 * its numpy form finds by two searches of each group's starts and ends, the test oracle
 * tests/oracle/merged_pieces.py), and writes those whose overlap min(x1, y1) - max(x0, y0) is positive: og[k] the
 * group, over[k] the overlap (float64; og and over writable, len(x) + len(y) long at least: the pairs of one group's
 * sweep are at most its pieces of both less one). Raises TypeError for other buffers, ValueError for lengths that
 * differ or outputs too short. */
static PyObject *overlaps(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7])) return NULL;
    Py_buffer b[8];
    int got = 0;
    for (; got < 8; got++) {
        int is_group = got == 0 || got == 3 || got == 6, w = got >= 6;
        int bad = is_group ? int64_buffer(o[got], &b[got], w, "overlaps: int64 groups, float64 times")
                           : typed_buffer(o[got], &b[got], "d", 8, w, "overlaps: int64 groups, float64 times");
        if (bad < 0) break;
    }
    PyObject *result = NULL;
    if (got < 8) goto done;
    i64 nx = b[0].len / 8, ny = b[3].len / 8;
    if (b[1].len / 8 != nx || b[2].len / 8 != nx || b[4].len / 8 != ny || b[5].len / 8 != ny ||
        b[6].len / 8 < nx + ny || b[7].len / 8 < nx + ny) {
        PyErr_SetString(PyExc_ValueError, "overlaps: lengths differ, or og and over shorter than len(x) + len(y)");
        goto done;
    }
    const i64 *xg = b[0].buf, *yg = b[3].buf;
    const double *x0 = b[1].buf, *x1 = b[2].buf, *y0 = b[4].buf, *y1 = b[5].buf;
    i64 *og = b[6].buf;
    double *ov = b[7].buf;
    i64 k = 0, lo = 0, hi = 0, cap = nx + ny;
    for (i64 i = 0; i < nx; i++) {
        i64 g = xg[i];
        if (!i || g != xg[i - 1]) { /* a new group: both searches start at its first y piece */
            while (lo < ny && yg[lo] < g) lo++;
            hi = lo;
        }
        while (lo < ny && yg[lo] == g && !(y1[lo] > x0[i])) lo++; /* searchsorted(y1, x0, "right") */
        if (hi < lo) hi = lo;
        while (hi < ny && yg[hi] == g && y0[hi] < x1[i]) hi++; /* searchsorted(y0, x1, "left") */
        for (i64 j = lo; j < hi; j++) {
            double a = x1[i] < y1[j] ? x1[i] : y1[j], c = x0[i] > y0[j] ? x0[i] : y0[j], d = a - c;
            if (d > 0.0) {
                if (k == cap) {
                    PyErr_SetString(PyExc_ValueError, "overlaps: pieces not sorted and apart");
                    goto done;
                }
                og[k] = g;
                ov[k++] = d;
            }
        }
    }
    result = PyLong_FromLongLong(k);
done:
    for (int a = 0; a < got; a++) PyBuffer_Release(&b[a]);
    return result;
}

/* merge_pieces(group, start, end, runs, og, os, oe) -> k: the pieces of every group's intervals, for
 * schedsim.sim.metrics._merged_by: the intervals (group int64, start and end float64, of one length n) come as
 * the runs runs[r]:runs[r + 1] (int64, runs[0] = 0, the last n), each sorted by group (ascending) and, within
 * one, by start; they are taken in (group, start) order across the runs (a tie: the earlier run first; a merge of
 * the runs, not a sort), empty ones (not end > start: NaN too) left out, and a piece opens at each interval of a
 * new group or that starts after the running maximum of its group's ends so far, and ends at that maximum when the
 * next opens. og[k], os[k], oe[k] (writable, n long at least): each piece's group, start and end, selections of the
 * values (no arithmetic). Its numpy form, a running maximum over (group, end) pairs, is in the package's history
 * (tests/oracle/merged_pieces.py holds the loop before it); the tests compare the two. Raises TypeError for other
 * buffers, ValueError for lengths that differ or runs that do not cover 0..n. */
static PyObject *merge_pieces(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6])) return NULL;
    Py_buffer b[7];
    int got = 0;
    for (; got < 7; got++) {
        int is_int = got == 0 || got == 3 || got == 4, w = got >= 4;
        int bad = is_int ? int64_buffer(o[got], &b[got], w, "merge_pieces: int64 group, runs and og, float64 times")
                         : typed_buffer(o[got], &b[got], "d", 8, w, "merge_pieces: int64 group, runs and og, float64 times");
        if (bad < 0) break;
    }
    PyObject *result = NULL;
    if (got < 7) goto done;
    i64 n = b[0].len / 8, nr = b[3].len / 8 - 1;
    const i64 *g = b[0].buf, *runs = b[3].buf;
    const double *st = b[1].buf, *en = b[2].buf;
    if (b[1].len / 8 != n || b[2].len / 8 != n || b[4].len / 8 < n || b[5].len / 8 < n || b[6].len / 8 < n ||
        nr < 1 || nr > 64 || runs[0] != 0 || runs[nr] != n) {
        PyErr_SetString(PyExc_ValueError, "merge_pieces: lengths differ, or runs do not cover 0..n (1 to 64 runs)");
        goto done;
    }
    i64 pos[64];
    for (i64 r = 0; r < nr; r++) {
        if (runs[r + 1] < runs[r]) {
            PyErr_SetString(PyExc_ValueError, "merge_pieces: runs must ascend");
            goto done;
        }
        pos[r] = runs[r];
    }
    i64 *og = b[4].buf, k = 0;
    double *os = b[5].buf, *oe = b[6].buf, reach = 0.0;
    for (;;) {
        i64 i = -1;
        for (i64 r = 0; r < nr; r++) { /* the smallest (group, start) of the runs' heads; a tie: the earlier run */
            i64 q = pos[r];
            if (q < runs[r + 1] && (i < 0 || g[q] < g[i] || (g[q] == g[i] && st[q] < st[i]))) i = q;
        }
        if (i < 0) break;
        for (i64 r = 0; r < nr; r++)
            if (pos[r] == i) {
                pos[r]++;
                break;
            }
        if (!(en[i] > st[i])) continue;
        if (!k || g[i] != og[k - 1] || st[i] > reach) {
            if (k) oe[k - 1] = reach;
            og[k] = g[i];
            os[k++] = st[i];
            reach = en[i];
        } else if (en[i] > reach) {
            reach = en[i];
        }
    }
    if (k) oe[k - 1] = reach;
    result = PyLong_FromLongLong(k);
done:
    for (int a = 0; a < got; a++) PyBuffer_Release(&b[a]);
    return result;
}

/* end_bound(key, d, rel) -> best: schedsim.sim.waves_columns.latest_end_bound's walk over each (rank, stream)'s ops
 * in program order: key (int64) the ops' (rank, stream) codes, each code's ops consecutive, d and rel (float64) each
 * op's least duration and release, all of one length n. Per run of equal keys whose d is not all zero, with c_i the
 * running sum of d from the run's first op (summed in order, as numpy's cumsum) and run_i the running maximum of
 * rel_i - (c_i - d_i) (NaN once a NaN is met, as numpy's maximum.accumulate), the largest run_i + c_i over its ops
 * with d_i > 0 (NaN where one is NaN); best is the largest of those over the runs that is not NaN (-inf: none): the
 * arithmetic of its numpy form (the test oracle tests/oracle/numpy_helpers.py end_bound), operation for operation,
 * so the bound is bit-identical. A run with d not all zero but none positive (a negative or NaN d, which the bound
 * never makes) counts nothing, where the numpy form raises. Raises TypeError for other buffers, ValueError for
 * lengths that differ. */
static PyObject *end_bound(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[3];
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2])) return NULL;
    Py_buffer kb, db, rb;
    if (int64_buffer(o[0], &kb, 0, "end_bound: key") < 0) return NULL;
    if (typed_buffer(o[1], &db, "d", 8, 0, "end_bound: d must be a float64 array") < 0) {
        PyBuffer_Release(&kb);
        return NULL;
    }
    if (typed_buffer(o[2], &rb, "d", 8, 0, "end_bound: rel must be a float64 array") < 0) {
        PyBuffer_Release(&kb);
        PyBuffer_Release(&db);
        return NULL;
    }
    PyObject *result = NULL;
    i64 n = kb.len / 8;
    if (db.len / 8 != n || rb.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "end_bound: key, d and rel of different lengths");
    } else {
        const i64 *key = kb.buf;
        const double *d = db.buf, *rel = rb.buf;
        double best = -INFINITY;
        for (i64 lo = 0, hi; lo < n; lo = hi) {
            int any = 0;
            for (hi = lo; hi < n && key[hi] == key[lo]; hi++) any |= d[hi] != 0.0;
            if (!any) continue;
            double c = 0.0, run = 0.0, top = 0.0;
            int have = 0, top_nan = 0;
            for (i64 i = lo; i < hi; i++) {
                c = c + d[i];
                double x = rel[i] - (c - d[i]);
                if (i == lo || isnan(x) || isnan(run)) run = (i == lo || isnan(x)) ? x : run;
                else if (x > run) run = x;
                if (d[i] > 0.0) {
                    double v = run + c;
                    if (isnan(v)) top_nan = 1;
                    else if (!have || v > top) top = v;
                    have = 1;
                }
            }
            if (have && !top_nan && top > best) best = top;
        }
        result = PyFloat_FromDouble(best);
    }
    PyBuffer_Release(&kb);
    PyBuffer_Release(&db);
    PyBuffer_Release(&rb);
    return result;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS, "Run the waves event loop on flat arrays (schedsim.sim.waves_columns.run_waves_program)."},
    {"walk", walk, METH_VARARGS, "walk(binding, ogrp, i, out) -> n: the critical path from op i, last op first."},
    {"acyclic", acyclic, METH_VARARGS, "acyclic(n, src, dst) -> bool: no cycle among n nodes (int32 or int64 edges)."},
    {"acyclic_units", acyclic_units, METH_VARARGS, "acyclic_units(n, units, parts) -> bool: acyclic() of edge parts."},
    {"torch_rows", torch_rows, METH_VARARGS, "torch_rows(...) -> bool: torch's _add_send_recv rows (_torch_lower_cols)."},
    {"first_set", first_set, METH_VARARGS, "first_set(...) -> bool: the pipeline emitter's input lookups (_FastEmitter._inputs)."},
    {"kernels", kernels, METH_VARARGS, "kernels(...) -> (K, Q): kernel and queue arrays (waves_columns._kernels)."},
    {"succ_csr", succ_csr, METH_VARARGS, "succ_csr(n, edges, sid, sptr, sidx, npred, xdeps) -> distinct edges."},
    {"stream_reached", stream_reached, METH_VARARGS, "stream_reached(qptr, qidx, khand, kern, call0, deps_t): in place."},
    {"rank_codes", rank_codes, METH_VARARGS, "rank_codes(rank, key, out) -> bool: keys numbered per rank (ranks ascending)."},
    {"issue_times", issue_times, METH_VARARGS, "issue_times(...) -> bool: rule host-issue from per-class tables (ranks ascending)."},
    {"fifo_edges", fifo_edges, METH_VARARGS, "fifo_edges(rank, comm, batch, out) -> edges (-1: ranks not ascending)."},
    {"join_rows", join_rows, METH_VARARGS, "join_rows(pieces, n) -> bytes: rows of JSON text (report.chrome._rows_json)."},
    {"item_bounds", item_bounds, METH_VARARGS, "item_bounds(raw, starts, ends): the items of a JSON array (report.chrome._json_strs)."},
    {"held_samples", held_samples, METH_VARARGS, "held_samples(val, keep) -> kept: a counter's samples that hold (report.chrome._rate_samples)."},
    {"overlaps", overlaps, METH_VARARGS, "overlaps(xg, x0, x1, yg, y0, y1, og, over) -> k: pieces' overlaps (sim.metrics._overlap_by)."},
    {"merge_pieces", merge_pieces, METH_VARARGS, "merge_pieces(group, start, end, runs, og, os, oe) -> k: pieces (sim.metrics._merged_by)."},
    {"end_bound", end_bound, METH_VARARGS, "end_bound(key, d, rel) -> best: the walk of waves_columns.latest_end_bound."},
    {"cut", cut, METH_VARARGS, "cut(raw, starts, ends, out): out[i] = raw[starts[i]:ends[i]] (report.chrome._cut)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cwaves",
                                    "Compiled event loop of the waves GPU model (see _cwaves.c).", -1, methods};

PyMODINIT_FUNC PyInit__cwaves(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "LAYOUT", LAYOUT) < 0) Py_CLEAR(m);
    return m;
}
