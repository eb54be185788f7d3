/* CUDA driver API stand-in (installed as libcuda.so.1). TEST FIXTURE, not CUDA: see standin.h,
 * which says what it models. Sections: configuration; memory kinds; streams and their
 * workers; memory management; copies; streams, events and host functions; capture and
 * graphs; pointer attributes; the virtual memory API. */
#define _GNU_SOURCE
#include "standin.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define D(p) ((void *)(uintptr_t)(p))

/* ---- Configuration ------------------------------------------------------------------------ */

/* Read once from the environment:
 *   HOTPIN_STANDIN_NO_DEVICE=1        every call fails with CUDA_ERROR_NO_DEVICE
 *   HOTPIN_STANDIN_FAIL_PIN_EVERY=N   every Nth pinning call (host alloc or register) fails
 *                                     with CUDA_ERROR_OUT_OF_MEMORY
 *   HOTPIN_STANDIN_ASYNC_DELAY_US=N   an enqueued operation starts no earlier than N µs
 *                                     after it was enqueued, unless waited for (20000)
 *   HOTPIN_STANDIN_PAGEABLE_GBPS=G    a copy to or from pageable memory spends at least
 *                                     bytes / G GB/s in the call (unset: as fast as memcpy),
 *                                     as a slow host's pageable copies would
 *   HOTPIN_STANDIN_REGISTER_DELAY_US=N a registration held for a test's race
 *                                     (hotpin_standin_hold_next_registration()) waits, once
 *                                     released, N µs more before CUDA records it */
static int no_device;
static uint64_t register_delay_ns;
static atomic_int hold_next, registering, released;
static long fail_pin_every;
static double pageable_gbps;
static uint64_t delay_ns = 20000 * 1000ull;
static atomic_long pin_calls;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init(void);

static void read_config(void) {
    const char *nd = getenv("HOTPIN_STANDIN_NO_DEVICE");
    const char *every = getenv("HOTPIN_STANDIN_FAIL_PIN_EVERY");
    const char *delay = getenv("HOTPIN_STANDIN_ASYNC_DELAY_US");
    const char *gbps = getenv("HOTPIN_STANDIN_PAGEABLE_GBPS");
    const char *register_delay = getenv("HOTPIN_STANDIN_REGISTER_DELAY_US");
    register_delay_ns = register_delay ? (uint64_t)strtol(register_delay, NULL, 10) * 1000 : 0;
    pageable_gbps = gbps ? strtod(gbps, NULL) : 0;
    fail_pin_every = every ? strtol(every, NULL, 10) : 0;
    no_device = nd && nd[0] == '1';
    if (delay) {
        long us = strtol(delay, NULL, 10);
        delay_ns = us > 0 ? (uint64_t)us * 1000 : 0;
    }
}

static CUresult check_device(void) {
    pthread_once(&init_once, init);
    return no_device ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

static int pin_should_fail(void) {
    long n = atomic_fetch_add(&pin_calls, 1) + 1;
    return fail_pin_every > 0 && n % fail_pin_every == 0;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* Pinned and device allocations remember their size in a header page before the block. */
static void *alloc_pages(size_t size, int lock) {
    size_t page = page_size();
    size_t total = page + ((size + page - 1) / page) * page;
    if (total < size) return NULL;
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    if (lock && mlock(base, total) != 0) {
        munmap(base, total);
        return NULL;
    }
    *(size_t *)base = total;
    return (char *)base + page;
}

static void free_pages(void *p) {
    char *base = (char *)p - page_size();
    munmap(base, *(size_t *)base);
}

/* ---- Memory kinds ------------------------------------------------------------------------- */

/* CUDA knows every block it allocated or registered; any other host address is pageable, and
 * copies to or from pageable memory follow other rules (see the copies below). One table of
 * ranges, scanned linearly. It grows with mremap, not realloc: an interposed malloc (the
 * preload's) may call cuMemHostRegister, which takes the table's lock. */
enum range_type { RANGE_FREE, RANGE_HOST_ALLOC, RANGE_REGISTERED, RANGE_DEVICE };

struct range {
    uintptr_t start;
    size_t size;
    enum range_type type;
    unsigned flags;          /* as given to cuMemHostAlloc or cuMemHostRegister */
    int managed;             /* from cuMemAllocManaged */
    unsigned long long id;   /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
};

static struct range *ranges;
static size_t ranges_len, ranges_cap;
static unsigned long long next_range_id = 1;
static pthread_mutex_t ranges_lock = PTHREAD_MUTEX_INITIALIZER;

/* A free slot, the table grown if full; NULL if it cannot grow. Under ranges_lock. */
static struct range *free_slot(void) {
    for (size_t i = 0; i < ranges_len; i++)
        if (ranges[i].type == RANGE_FREE) return &ranges[i];
    if (ranges_len == ranges_cap) {
        size_t cap = ranges_cap ? 2 * ranges_cap : 1024;
        void *grown = ranges
            ? mremap(ranges, ranges_cap * sizeof *ranges, cap * sizeof *ranges, MREMAP_MAYMOVE)
            : mmap(NULL, cap * sizeof *ranges, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (grown == MAP_FAILED) return NULL;
        ranges = grown;
        ranges_cap = cap;
    }
    return &ranges[ranges_len++];
}

static int ranges_add(const void *start, size_t size, enum range_type type, unsigned flags, int managed) {
    pthread_mutex_lock(&ranges_lock);
    struct range *r = free_slot();
    if (r) *r = (struct range){(uintptr_t)start, size, type, flags, managed, next_range_id++};
    pthread_mutex_unlock(&ranges_lock);
    return r != NULL;
}

static int overlaps(const struct range *r, uintptr_t start, size_t size) {
    return r->start < start + size && start < r->start + r->size;
}

/* Removes the range of `type` starting at `start`; its size in *size. 0 if there is none. */
static int ranges_remove(const void *start, enum range_type type, size_t *size) {
    int found = 0;
    pthread_mutex_lock(&ranges_lock);
    for (size_t i = 0; i < ranges_len && !found; i++) {
        if (ranges[i].type == type && ranges[i].start == (uintptr_t)start) {
            if (size) *size = ranges[i].size;
            ranges[i].type = RANGE_FREE;
            found = 1;
        }
    }
    pthread_mutex_unlock(&ranges_lock);
    return found;
}

/* Removes the ranges of `type` that lie inside [start, start + size): registrations inside a
 * block being freed, device ranges of memory being unmapped. */
static void ranges_remove_inside(const void *start, size_t size, enum range_type type) {
    uintptr_t lo = (uintptr_t)start;
    pthread_mutex_lock(&ranges_lock);
    for (size_t i = 0; i < ranges_len; i++)
        if (ranges[i].type == type && ranges[i].start >= lo && ranges[i].start + ranges[i].size <= lo + size)
            ranges[i].type = RANGE_FREE;
    pthread_mutex_unlock(&ranges_lock);
}

enum memory_kind { MEMORY_PAGEABLE, MEMORY_PINNED, MEMORY_DEVICE };

/* What CUDA knows of address `p`: pinned (allocated or registered; a registration wins over
 * the block it lies in), device, or nothing (pageable). The range found goes to *found. */
static enum memory_kind lookup(const void *p, struct range *found) {
    uintptr_t at = (uintptr_t)p;
    const struct range *best = NULL;
    pthread_mutex_lock(&ranges_lock);
    for (size_t i = 0; i < ranges_len; i++) {
        const struct range *r = &ranges[i];
        if (r->type == RANGE_FREE || at < r->start || at - r->start >= r->size) continue;
        if (!best || r->type == RANGE_REGISTERED) best = r;
    }
    struct range copy = best ? *best : (struct range){0};
    pthread_mutex_unlock(&ranges_lock);
    if (found) *found = copy;
    if (!best) return MEMORY_PAGEABLE;
    return copy.type == RANGE_DEVICE ? MEMORY_DEVICE : MEMORY_PINNED;
}

/* ---- Streams and their workers ------------------------------------------------------------ */

/* Every operation enqueued on any stream gets the next number of one sequence, under
 * order_lock: "older" below means a smaller number. Each stream runs its operations in order
 * on its own worker thread (started at its first operation). An operation starts no earlier
 * than delay_ns after it was enqueued unless it is expedited: someone waits for it, and then
 * it and every older operation it depends on run without delay. */
enum stream_kind { STREAM_LEGACY, STREAM_PER_THREAD, STREAM_CREATED };

struct stream {
    struct stream *next_all;     /* every stream ever made: none is freed, a destroyed one is reused */
    /* Set under streams_lock, read without it (atomic): */
    _Atomic(enum stream_kind) kind;
    atomic_int in_use;           /* created and not destroyed (always, for the legacy stream) */
    atomic_uint flags;           /* CU_STREAM_NON_BLOCKING */
    pthread_mutex_t lock;
    pthread_cond_t work;         /* its worker waits here for work, or for an operation's delay */
    pthread_cond_t done;         /* waiters wait here for operations to finish */
    struct op *head, *tail;      /* enqueued, not started; oldest first */
    uint64_t running;            /* the number of the operation its worker runs; 0 when none */
    atomic_ulong busy;           /* enqueued and not finished (read without the lock) */
    uint64_t expedite_through;   /* operations numbered up to this run without delay */
    struct stream *blocked_on;   /* the stream the running operation waits for, */
    uint64_t blocked_through;    /* up to this number (an expedite is passed on to it) */
    int worker;                  /* its worker thread was started */
    int capture;                 /* CU_STREAM_CAPTURE_STATUS_* */
    struct graph *graph;         /* the graph being captured */
};

enum op_kind { OP_COPY, OP_COPY_3D, OP_BATCH, OP_HOST_FN, OP_RECORD, OP_WAIT };

/* An operation on a stream; a captured graph's nodes are operations too. */
struct op {
    struct op *next;
    size_t bytes;                /* its allocation, batch arrays included (graphs clone it) */
    enum op_kind kind;
    uint64_t seq;                /* its number */
    uint64_t not_before;         /* CLOCK_MONOTONIC ns: when it may start unless expedited */
    int after_legacy;            /* on a blocking stream: after the legacy stream's older ops */
    int after_blocking;          /* on the legacy stream: after every blocking stream's older ops */
    struct stream *after;        /* OP_WAIT (cuStreamWaitEvent): after this stream's ops */
    uint64_t after_through;      /* numbered up to this one */
    struct event *event;         /* OP_RECORD, OP_WAIT */
    void *staging;               /* OP_COPY from pageable memory: the source, copied at the call */
    size_t staging_bytes;
    union {
        struct { void *dst; const void *src; size_t n; } copy;
        CUDA_MEMCPY3D c3;        /* 2D copies too, as one layer */
        struct { void (*fn)(void *); void *user; } host;
        size_t batch_count;      /* followed in `batch` by dsts, srcs and sizes */
    } u;
    unsigned long long batch[];
};

/* A graph captured from a stream: its operations, in order (linear graphs only). An
 * executable graph is a copy of one. */
struct graph {
    unsigned magic;
    struct op *head, *tail;
};
#define GRAPH_MAGIC 0x47525048u
#define EXEC_MAGIC 0x45584543u

/* An event is the number of the operation recorded last into it, on its stream. */
struct event {
    unsigned magic;
    struct stream *stream;       /* NULL until recorded */
    uint64_t seq;
};
#define EVENT_MAGIC 0x45564e54u

static struct stream legacy_stream;
static _Atomic(struct stream *) all_streams;   /* the list, newest first; pushed under streams_lock */
static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;   /* numbering and enqueueing */
static pthread_mutex_t event_lock = PTHREAD_MUTEX_INITIALIZER;   /* events' (stream, seq) */
static atomic_ulong last_seq;
static pthread_key_t thread_stream_key;
static __thread struct stream *thread_stream;  /* this thread's per-thread default stream */
static __thread int on_worker;                 /* this thread is a stream's worker */
static __thread int capture_mode;              /* cuThreadExchangeStreamCaptureMode */

static void stream_init_sync(struct stream *s) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, &attr);
    pthread_cond_init(&s->done, &attr);
    pthread_condattr_destroy(&attr);
}

static void push_stream(struct stream *s) {
    pthread_mutex_lock(&streams_lock);
    s->next_all = atomic_load(&all_streams);
    atomic_store(&all_streams, s);
    pthread_mutex_unlock(&streams_lock);
}

/* Legacy-stream rules: the legacy stream and the blocking streams (created without
 * CU_STREAM_NON_BLOCKING; per-thread default streams are blocking) wait for each other. */
static int is_blocking(const struct stream *s) {
    return s->kind != STREAM_LEGACY && !(s->flags & CU_STREAM_NON_BLOCKING);
}

static void release_thread_stream(void *p);

/* Workers do not survive fork: in the child every stream is without one (one starts when the
 * child waits for or enqueues work) and the locks start afresh. Nothing here waits, so a
 * child that never calls CUDA cannot deadlock. An operation running at the fork is lost. */
static void after_fork_in_child(void) {
    pthread_mutex_init(&ranges_lock, NULL);
    pthread_mutex_init(&streams_lock, NULL);
    pthread_mutex_init(&order_lock, NULL);
    pthread_mutex_init(&event_lock, NULL);
    for (struct stream *s = atomic_load(&all_streams); s; s = s->next_all) {
        stream_init_sync(s);
        s->worker = 0;
        s->blocked_on = NULL;
        if (s->running) {
            s->running = 0;
            atomic_fetch_sub(&s->busy, 1);
        }
    }
}

static void init(void) {
    read_config();
    stream_init_sync(&legacy_stream);
    legacy_stream.kind = STREAM_LEGACY;
    legacy_stream.in_use = 1;
    push_stream(&legacy_stream);
    pthread_key_create(&thread_stream_key, release_thread_stream);
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

/* A stream of `kind`: a destroyed one reused, or a new one. */
static struct stream *new_stream(enum stream_kind kind, unsigned flags) {
    struct stream *s;
    pthread_mutex_lock(&streams_lock);
    for (s = atomic_load(&all_streams); s; s = s->next_all)
        if (!s->in_use && s->kind != STREAM_LEGACY) break;
    if (s) {
        s->in_use = 1;
        s->kind = kind;
        s->flags = flags;
    }
    pthread_mutex_unlock(&streams_lock);
    if (s) return s;
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
    stream_init_sync(s);
    s->kind = kind;
    s->flags = flags;
    s->in_use = 1;
    push_stream(s);
    return s;
}

static struct stream *this_thread_stream(void) {
    if (!thread_stream) {
        thread_stream = new_stream(STREAM_PER_THREAD, 0);
        if (thread_stream) pthread_setspecific(thread_stream_key, thread_stream);
    }
    return thread_stream;
}

/* The stream a handle names. Stream 0 is the legacy stream, or with a _ptsz entry point the
 * thread's per-thread stream; NULL for a handle that names no live stream. */
static struct stream *resolve(CUstream h, int ptsz) {
    pthread_once(&init_once, init);
    if (h == NULL) return ptsz ? this_thread_stream() : &legacy_stream;
    if (h == CU_STREAM_LEGACY) return &legacy_stream;
    if (h == CU_STREAM_PER_THREAD) return this_thread_stream();
    for (struct stream *s = atomic_load(&all_streams); s; s = s->next_all)
        if ((CUstream)s == h && s->kind == STREAM_CREATED && s->in_use) return s;
    return NULL;
}

static struct op *new_op(enum op_kind kind, size_t extra) {
    struct op *op = calloc(1, sizeof *op + extra);
    if (op) op->kind = kind, op->bytes = sizeof *op + extra;
    return op;
}

static void free_op(struct op *op) {
    if (op->staging) munmap(op->staging, op->staging_bytes);
    free(op);
}

/* Copies rows of bytes, layer by layer; c is valid (checked at the call). */
static void copy_rows(const CUDA_MEMCPY3D *c) {
    const char *src = c->srcMemoryType == CU_MEMORYTYPE_HOST ? c->srcHost : D(c->srcDevice);
    char *dst = c->dstMemoryType == CU_MEMORYTYPE_HOST ? c->dstHost : D(c->dstDevice);
    for (size_t z = 0; z < c->Depth; z++)
        for (size_t row = 0; row < c->Height; row++)
            memmove(dst + ((c->dstZ + z) * c->dstHeight + c->dstY + row) * c->dstPitch + c->dstXInBytes,
                    src + ((c->srcZ + z) * c->srcHeight + c->srcY + row) * c->srcPitch + c->srcXInBytes,
                    c->WidthInBytes);
}

/* What an operation does, on its stream's worker. Device memory is host memory here. */
static void run_op(struct op *op) {
    size_t n = op->u.batch_count;
    switch (op->kind) {
    case OP_COPY: memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.n); break;
    case OP_COPY_3D: copy_rows(&op->u.c3); break;
    case OP_BATCH:
        for (size_t i = 0; i < n; i++) memmove(D(op->batch[i]), D(op->batch[n + i]), op->batch[2 * n + i]);
        break;
    case OP_HOST_FN: op->u.host.fn(op->u.host.user); break;
    case OP_RECORD:
    case OP_WAIT: break;
    }
}

/* Whether every operation of s numbered up to `through` has finished. Under s->lock. */
static int done_through(const struct stream *s, uint64_t through) {
    if (s->running && s->running <= through) return 0;
    return !s->head || s->head->seq > through;
}

/* Lets s's operations numbered up to `through` run without delay, and what they wait for. */
static void expedite(struct stream *s, uint64_t through, int depth) {
    pthread_mutex_lock(&s->lock);
    if (through > s->expedite_through) s->expedite_through = through;
    struct stream *next = s->blocked_on;
    uint64_t next_through = s->blocked_through;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    if (next && depth < 32) expedite(next, next_through, depth + 1);
}

static void start_worker(struct stream *s);

/* Waits until s finished its operations numbered up to `through`. */
static void wait_through(struct stream *s, uint64_t through) {
    start_worker(s);
    pthread_mutex_lock(&s->lock);
    while (!done_through(s, through)) pthread_cond_wait(&s->done, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

/* On s's worker, before `op` runs: waits for `other`'s operations up to `through`, passing
 * on an expedite that reaches op while it waits. */
static void await_stream(struct stream *s, const struct op *op, struct stream *other, uint64_t through) {
    pthread_mutex_lock(&other->lock);
    int done = done_through(other, through);
    pthread_mutex_unlock(&other->lock);
    if (done) return;
    pthread_mutex_lock(&s->lock);
    s->blocked_on = other;
    s->blocked_through = through;
    int urgent = op->seq <= s->expedite_through;
    pthread_mutex_unlock(&s->lock);
    if (urgent) expedite(other, through, 1);
    wait_through(other, through);
    pthread_mutex_lock(&s->lock);
    s->blocked_on = NULL;
    pthread_mutex_unlock(&s->lock);
}

/* What must finish before `op` starts on s: the legacy-stream rules and cuStreamWaitEvent. */
static void await_dependencies(struct stream *s, const struct op *op) {
    if (op->after_legacy) await_stream(s, op, &legacy_stream, op->seq - 1);
    if (op->after_blocking)
        for (struct stream *b = atomic_load(&all_streams); b; b = b->next_all)
            if (b != s && is_blocking(b)) await_stream(s, op, b, op->seq - 1);
    if (op->after) await_stream(s, op, op->after, op->after_through);
}

/* Runs s's oldest operation. Called and returns with s->lock held. */
static void run_oldest(struct stream *s) {
    struct op *op = s->head;
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    s->running = op->seq;
    pthread_mutex_unlock(&s->lock);
    await_dependencies(s, op);
    run_op(op);
    pthread_mutex_lock(&s->lock);
    s->running = 0;
    atomic_fetch_sub(&s->busy, 1);
    pthread_cond_broadcast(&s->done);
    pthread_mutex_unlock(&s->lock);
    free_op(op);
    pthread_mutex_lock(&s->lock);
}

/* A stream's worker: runs its operations in order, each once its delay passed or expedited. */
static void *worker_main(void *arg) {
    struct stream *s = arg;
    on_worker = 1;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        struct op *op = s->head;
        if (!op) {
            pthread_cond_wait(&s->work, &s->lock);
        } else if (op->seq > s->expedite_through && now_ns() < op->not_before) {
            struct timespec at = {(time_t)(op->not_before / 1000000000ull), (long)(op->not_before % 1000000000ull)};
            pthread_cond_timedwait(&s->work, &s->lock, &at);
        } else {
            run_oldest(s);
        }
    }
    return NULL;
}

/* Starts s's worker if it has work and none yet (first use, or in a forked child). Its
 * signals are blocked: they go to the program's threads. Without a thread, the caller runs
 * the work itself. */
static void start_worker(struct stream *s) {
    pthread_mutex_lock(&s->lock);
    int start = !s->worker && s->head;
    if (start) s->worker = 1;
    pthread_mutex_unlock(&s->lock);
    if (!start) return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    int failed = pthread_create(&thread, &attr, worker_main, s);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!failed) return;
    pthread_mutex_lock(&s->lock);
    s->worker = 0;
    while (s->head) run_oldest(s);
    pthread_mutex_unlock(&s->lock);
}

/* Host-side waits. A CUDA call made on a worker (from a host function, which CUDA forbids, or
 * from an interposed free() there) does not wait: it could wait for itself. */
static void wait_idle(struct stream *s) {
    if (on_worker || atomic_load(&s->busy) == 0) return;
    uint64_t through = atomic_load(&last_seq);
    expedite(s, through, 0);
    wait_through(s, through);
}

/* Waits for the legacy stream and every other stream (every blocking one if blocking_only). */
static void wait_streams(int blocking_only) {
    for (struct stream *s = atomic_load(&all_streams); s; s = s->next_all)
        if (s->kind == STREAM_LEGACY || !blocking_only || is_blocking(s)) wait_idle(s);
}

/* Waits for operation `seq` of s, at once. */
static void wait_op(struct stream *s, uint64_t seq) {
    if (on_worker) return;
    expedite(s, seq, 0);
    wait_through(s, seq);
}

/* Numbers op and queues it on s, with its legacy-stream dependencies. Under order_lock and
 * s->lock. Records and waits are markers: they have no delay of their own. */
static void number_and_queue(struct stream *s, struct op *op) {
    op->seq = atomic_load(&last_seq) + 1;
    atomic_store(&last_seq, op->seq);
    int marker = op->kind == OP_RECORD || op->kind == OP_WAIT;
    op->not_before = marker ? 0 : now_ns() + delay_ns;
    op->after_legacy = is_blocking(s);
    op->after_blocking = s->kind == STREAM_LEGACY;
    if (op->kind == OP_RECORD || op->kind == OP_WAIT) {
        /* A record makes its event stand for s's work up to it; a wait waits for what the
         * event stands for now. */
        pthread_mutex_lock(&event_lock);
        if (op->kind == OP_RECORD) op->event->stream = s, op->event->seq = op->seq;
        else op->after = op->event->stream, op->after_through = op->event->seq;
        pthread_mutex_unlock(&event_lock);
    }
    op->next = NULL;
    if (s->tail) s->tail->next = op;
    else s->head = op;
    s->tail = op;
    atomic_fetch_add(&s->busy, 1);
    pthread_cond_signal(&s->work);
}

static void graph_append(struct graph *g, struct op *op) {
    op->next = NULL;
    if (g->tail) g->tail->next = op;
    else g->head = op;
    g->tail = op;
}

static void graph_free(struct graph *g) {
    if (!g) return;
    while (g->head) {
        struct op *op = g->head;
        g->head = op->next;
        free_op(op);
    }
    g->magic = 0;
    free(g);
}

/* Enqueues op on s (or, while s captures, adds it to the graph). *seq: its number, 0 if
 * captured. Takes op, failed or not. */
static CUresult submit(struct stream *s, struct op *op, uint64_t *seq) {
    CUresult r = CUDA_SUCCESS;
    int queued = 0;
    if (seq) *seq = 0;
    pthread_mutex_lock(&order_lock);
    pthread_mutex_lock(&s->lock);
    if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        graph_append(s->graph, op);
    } else if (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else {
        number_and_queue(s, op);
        if (seq) *seq = op->seq;
        queued = 1;
    }
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&order_lock);
    if (r) free_op(op);
    if (queued) start_worker(s);
    return r;
}

/* Enqueues op on s and waits for it: a copy that CUDA makes synchronous. On a worker, runs it
 * there and then. */
static CUresult submit_and_wait(struct stream *s, struct op *op) {
    if (on_worker) {
        run_op(op);
        free_op(op);
        return CUDA_SUCCESS;
    }
    uint64_t seq;
    CUresult r = submit(s, op, &seq);
    if (r == CUDA_SUCCESS && seq) wait_op(s, seq);
    return r;
}

/* A pageable copy, or a synchronisation, on a capturing stream: CUDA refuses it and
 * invalidates the capture (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), and refuses anything on
 * an invalidated one. 0 if s is not capturing. */
static CUresult refuse_if_capturing(struct stream *s) {
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&s->lock);
    if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* ---- Memory management -------------------------------------------------------------------- */

EXPORT CUresult cuInit(unsigned int flags) {
    (void)flags;
    return check_device();
}

EXPORT CUresult cuDriverGetVersion(int *version) {
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = 13000;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = check_device() == CUDA_SUCCESS ? 1 : 0;
    return CUDA_SUCCESS;
}

/* Device memory: host pages, in the table as device memory. */
static CUresult device_pages(CUdeviceptr *dptr, size_t bytes, int managed) {
    CUresult r = check_device();
    if (r) return r;
    if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    void *p = alloc_pages(bytes, 0);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!ranges_add(p, bytes, RANGE_DEVICE, 0, managed)) {
        free_pages(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) { return device_pages(dptr, bytesize, 0); }

/* CUDA's frees synchronise: they first wait until every stream is idle. */
EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    CUresult r = check_device();
    if (r) return r;
    if (!dptr) return CUDA_SUCCESS;
    wait_streams(0);
    ranges_remove(D(dptr), RANGE_DEVICE, NULL);
    free_pages(D(dptr));
    return CUDA_SUCCESS;
}

static CUresult host_alloc(void **pp, size_t bytesize, unsigned flags) {
    CUresult r = check_device();
    if (r) return r;
    if (!pp || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (pin_should_fail()) return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = alloc_pages(bytesize, 1);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!ranges_add(p, bytesize, RANGE_HOST_ALLOC, flags, 0)) {
        free_pages(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { return host_alloc(pp, bytesize, 0); }

EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags) {
    return host_alloc(pp, bytesize, flags);
}

EXPORT CUresult cuMemFreeHost(void *p) {
    CUresult r = check_device();
    if (r) return r;
    if (!p) return CUDA_SUCCESS;
    wait_streams(0);
    size_t size;
    if (ranges_remove(p, RANGE_HOST_ALLOC, &size)) ranges_remove_inside(p, size, RANGE_REGISTERED);
    free_pages(p);
    return CUDA_SUCCESS;
}

/* A test witness, not CUDA: on the H100 a registration made while the process's large
 * copies are inside CUDA takes hundreds of ms and holds every other call (docs/benchmarks.md),
 * so hotpin's pinner thread, with turns, must not make one then (preload/src/turns.rs).
 * standinCallsBesideCopies() answers how many registration or unregistration calls had a
 * copy call of at least 1 MiB running beside them, at their start or starting during them:
 * each call counted once (the stand-in's own export; CUDA has none). */
#define LARGE_COPY (1u << 20)
static atomic_int large_copies_in_call, pin_calls_in_call;
static atomic_long calls_beside_copies, pin_call_seq, beside_seq_counted;

EXPORT long standinCallsBesideCopies(void) { return atomic_load(&calls_beside_copies); }

/* Counts the latest registration call as beside a copy, once. */
static void count_beside(void) {
    long seq = atomic_load(&pin_call_seq);
    long counted = atomic_load(&beside_seq_counted);
    while (counted < seq)
        if (atomic_compare_exchange_weak(&beside_seq_counted, &counted, seq)) {
            atomic_fetch_add(&calls_beside_copies, 1);
            return;
        }
}

static void large_copy_enter(size_t n) {
    if (n < LARGE_COPY) return;
    atomic_fetch_add(&large_copies_in_call, 1);
    if (atomic_load(&pin_calls_in_call) > 0) count_beside();
}
static void large_copy_leave(size_t n) {
    if (n >= LARGE_COPY) atomic_fetch_sub(&large_copies_in_call, 1);
}
static void pin_call_enter(void) {
    atomic_fetch_add(&pin_call_seq, 1);
    atomic_fetch_add(&pin_calls_in_call, 1);
    if (atomic_load(&large_copies_in_call) > 0) count_beside();
}
static void pin_call_leave(void) { atomic_fetch_sub(&pin_calls_in_call, 1); }

static CUresult host_register(void *p, size_t bytesize, unsigned int flags);
static CUresult host_unregister(void *p);

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags) {
    pin_call_enter();
    CUresult r = host_register(p, bytesize, flags);
    pin_call_leave();
    return r;
}

EXPORT CUresult cuMemHostUnregister(void *p) {
    pin_call_enter();
    CUresult r = host_unregister(p);
    pin_call_leave();
    return r;
}

/* Registers [p, p + bytesize): pinned from now on, also inside a block CUDA allocated; one
 * that overlaps an earlier registration is refused. */
static CUresult host_register(void *p, size_t bytesize, unsigned int flags) {
    CUresult r = check_device();
    if (r) return r;
    if (!p || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (pin_should_fail()) return CUDA_ERROR_OUT_OF_MEMORY;
    if (atomic_exchange(&hold_next, 0)) {
        /* Held until the test's other thread has seen it under way and released it (10 s at
         * most), then HOTPIN_STANDIN_REGISTER_DELAY_US more: that thread's call lands inside. */
        atomic_fetch_add(&registering, 1);
        for (int waited = 0; !atomic_load(&released) && waited < 10000; waited++) usleep(1000);
        struct timespec d = {(time_t)(register_delay_ns / 1000000000ull),
                             (long)(register_delay_ns % 1000000000ull)};
        while (nanosleep(&d, &d) != 0) {}
        atomic_fetch_sub(&registering, 1);
    }
    pthread_mutex_lock(&ranges_lock);
    for (size_t i = 0; i < ranges_len && !r; i++)
        if (ranges[i].type == RANGE_REGISTERED && overlaps(&ranges[i], (uintptr_t)p, bytesize))
            r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    struct range *slot = r ? NULL : free_slot();
    if (!r && (!slot || mlock(p, bytesize) != 0)) {
        if (slot) slot->type = RANGE_FREE;
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!r) *slot = (struct range){(uintptr_t)p, bytesize, RANGE_REGISTERED, flags, 0, next_range_id++};
    pthread_mutex_unlock(&ranges_lock);
    return r;
}

/* Not CUDA, for a test's race: the next host registration is held until released; how many
 * are held or in their HOTPIN_STANDIN_REGISTER_DELAY_US wait; the release. */
EXPORT void hotpin_standin_hold_next_registration(void) { atomic_store(&hold_next, 1); }
EXPORT int hotpin_standin_registering(void) { return atomic_load(&registering); }
EXPORT void hotpin_standin_release_registration(void) { atomic_store(&released, 1); }

static CUresult host_unregister(void *p) {
    CUresult r = check_device();
    if (r) return r;
    wait_streams(0);
    size_t size;
    if (!ranges_remove(p, RANGE_REGISTERED, &size)) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    munlock(p, size);
    return CUDA_SUCCESS;
}

/* Rows are padded to 512 bytes, as the real driver pads them to its pitch alignment. */
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int element) {
    (void)element;
    if (!pitch || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
    size_t padded = (width + 511) & ~(size_t)511;
    CUresult r = device_pages(dptr, padded * height, 0);
    if (r == CUDA_SUCCESS) *pitch = padded;
    return r;
}
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags) { (void)flags; return device_pages(dptr, bytes, 1); }
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s) { (void)s; return device_pages(dptr, bytes, 0); }
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream s) { (void)s; return device_pages(dptr, bytes, 0); }
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, void *pool, CUstream s) { (void)pool; (void)s; return device_pages(dptr, bytes, 0); }
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes, void *pool, CUstream s) { (void)pool; (void)s; return device_pages(dptr, bytes, 0); }
EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) { (void)s; return cuMemFree_v2(dptr); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) { (void)s; return cuMemFree_v2(dptr); }

/* ---- Copies ------------------------------------------------------------------------------- */

/* CUDA's rules depend on the host side of a copy: pinned memory (or device memory, or no host
 * side at all) is copied asynchronously; pageable memory is not. */
enum side { SIDE_DEVICE, SIDE_PINNED, SIDE_PAGEABLE };

static enum side host_side(const void *p) {
    switch (lookup(p, NULL)) {
    case MEMORY_PAGEABLE: return SIDE_PAGEABLE;
    case MEMORY_PINNED: return SIDE_PINNED;
    case MEMORY_DEVICE: break;
    }
    return SIDE_DEVICE;
}

/* A side of a 2D/3D copy: host memory, "device" memory (host memory here), or unified. */
static enum side typed_side(CUmemorytype type, const void *host, CUdeviceptr device) {
    if (type == CU_MEMORYTYPE_HOST) return host_side(host);
    if (type == CU_MEMORYTYPE_UNIFIED) return host_side(D(device));
    return SIDE_DEVICE;
}

/* CUDA refuses (invalid value) a copy whose host range starts in a registration and runs
 * past its end: seen on the H100, a PyTorch copy across two registrations. */
static int crosses_registration(const void *p, size_t n) {
    struct range r;
    if (!p || !n || lookup(p, &r) != MEMORY_PINNED || r.type != RANGE_REGISTERED) return 0;
    return (uintptr_t)p - r.start + n > r.size;
}

/* With HOTPIN_STANDIN_PAGEABLE_GBPS: a call that copied n bytes of pageable memory, begun at
 * `began`, returns no sooner than that bandwidth allows. */
static void pace_pageable(uint64_t began, size_t n) {
    if (pageable_gbps <= 0) return;
    uint64_t until = began + (uint64_t)((double)n / pageable_gbps), now = now_ns();
    if (now >= until) return;
    struct timespec t = {(time_t)((until - now) / 1000000000ull), (long)((until - now) % 1000000000ull)};
    while (nanosleep(&t, &t) != 0) {}
}

/* Synchronous copies run on the legacy stream: after it and every blocking stream is idle,
 * at call time. */
static CUresult copy(void *dst, const void *src, size_t n) {
    CUresult r = check_device();
    if (r) return r;
    if ((!dst || !src) && n) return CUDA_ERROR_INVALID_VALUE;
    if (crosses_registration(dst, n) || crosses_registration(src, n)) return CUDA_ERROR_INVALID_VALUE;
    large_copy_enter(n);
    wait_streams(1);
    uint64_t began = now_ns();
    if (n) memmove(dst, src, n);
    if (pageable_gbps > 0 && (host_side(dst) == SIDE_PAGEABLE || host_side(src) == SIDE_PAGEABLE))
        pace_pageable(began, n);
    large_copy_leave(n);
    return CUDA_SUCCESS;
}

/* Copies the source now into a staging buffer (mmap, not malloc: nothing an interposer
 * could pin), from which the enqueued copy reads. */
static int stage(struct op *op, const void *src, size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 0;
    memcpy(p, src, n);
    op->staging = p;
    op->staging_bytes = n;
    op->u.copy.src = p;
    return 1;
}

/* An async copy of n bytes on stream h, by its sides' kinds:
 *   neither side pageable: enqueued, copied later by the stream's worker;
 *   pageable destination (device to pageable host): synchronous, after the stream's work;
 *   pageable source (pageable host to device): staged now, the staged copy enqueued.
 * A pageable copy on a capturing stream is refused. */
static CUresult copy_async_in_call(CUstream h, int ptsz, void *dst, const void *src, size_t n, enum side dst_side, enum side src_side);

static CUresult copy_async(CUstream h, int ptsz, void *dst, const void *src, size_t n, enum side dst_side, enum side src_side) {
    large_copy_enter(n);
    CUresult r = copy_async_in_call(h, ptsz, dst, src, n, dst_side, src_side);
    large_copy_leave(n);
    return r;
}

static CUresult copy_async_in_call(CUstream h, int ptsz, void *dst, const void *src, size_t n, enum side dst_side, enum side src_side) {
    if ((!dst || !src) && n) return CUDA_ERROR_INVALID_VALUE;
    if ((dst_side == SIDE_PINNED && crosses_registration(dst, n)) || (src_side == SIDE_PINNED && crosses_registration(src, n)))
        return CUDA_ERROR_INVALID_VALUE;
    struct stream *s = resolve(h, ptsz);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    if (dst_side == SIDE_PAGEABLE || src_side == SIDE_PAGEABLE) {
        CUresult r = refuse_if_capturing(s);
        if (r) return r;
    }
    if (n == 0) return CUDA_SUCCESS;
    struct op *op = new_op(OP_COPY, 0);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.copy.dst = dst, op->u.copy.src = src, op->u.copy.n = n;
    uint64_t began = now_ns();
    if (dst_side == SIDE_PAGEABLE) {
        CUresult done = submit_and_wait(s, op);
        pace_pageable(began, n);
        return done;
    }
    if (src_side == SIDE_PAGEABLE) {
        if (!stage(op, src, n)) {
            free_op(op);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        pace_pageable(began, n);
    }
    return submit(s, op, NULL);
}

static CUresult htod_async(CUdeviceptr dst, const void *src, size_t n, CUstream s, int ptsz) {
    CUresult r = check_device();
    return r ? r : copy_async(s, ptsz, D(dst), src, n, SIDE_DEVICE, host_side(src));
}
static CUresult dtoh_async(void *dst, CUdeviceptr src, size_t n, CUstream s, int ptsz) {
    CUresult r = check_device();
    return r ? r : copy_async(s, ptsz, dst, D(src), n, host_side(dst), SIDE_DEVICE);
}
/* Unified pointers: each side is what the table says it is. */
static CUresult unified_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int ptsz) {
    CUresult r = check_device();
    return r ? r : copy_async(s, ptsz, D(dst), D(src), n, host_side(D(dst)), host_side(D(src)));
}
static CUresult dtod_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int ptsz) {
    CUresult r = check_device();
    return r ? r : copy_async(s, ptsz, D(dst), D(src), n, SIDE_DEVICE, SIDE_DEVICE);
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { return copy(D(dst), src, n); }
EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n) { return copy(D(dst), src, n); }
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { return copy(dst, D(src), n); }
EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n) { return copy(dst, D(src), n); }
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) { return htod_async(dst, src, n, s, 0); }
EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s) { return htod_async(dst, src, n, s, 1); }
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) { return dtoh_async(dst, src, n, s, 0); }
EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s) { return dtoh_async(dst, src, n, s, 1); }
EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return unified_async(dst, src, n, s, 0); }
EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return unified_async(dst, src, n, s, 1); }

/* A 2D copy is a 3D copy of one layer. */
static CUDA_MEMCPY3D as_3d(const CUDA_MEMCPY2D *c) {
    CUDA_MEMCPY3D t = {0};
    t.srcXInBytes = c->srcXInBytes, t.srcY = c->srcY, t.srcMemoryType = c->srcMemoryType;
    t.srcHost = c->srcHost, t.srcDevice = c->srcDevice, t.srcArray = c->srcArray;
    t.srcPitch = c->srcPitch, t.srcHeight = c->Height;
    t.dstXInBytes = c->dstXInBytes, t.dstY = c->dstY, t.dstMemoryType = c->dstMemoryType;
    t.dstHost = c->dstHost, t.dstDevice = c->dstDevice, t.dstArray = c->dstArray;
    t.dstPitch = c->dstPitch, t.dstHeight = c->Height;
    t.WidthInBytes = c->WidthInBytes, t.Height = c->Height, t.Depth = 1;
    return t;
}

static CUresult check_3d(const CUDA_MEMCPY3D *c) {
    if (c->WidthInBytes > c->srcPitch || c->WidthInBytes > c->dstPitch) return CUDA_ERROR_INVALID_VALUE;
    if (c->Height > c->srcHeight || c->Height > c->dstHeight) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult copy_3d_sync(const CUDA_MEMCPY3D *c) {
    CUresult r = check_3d(c);
    if (r) return r;
    wait_streams(1);
    copy_rows(c);
    return CUDA_SUCCESS;
}

/* An async 2D/3D copy: enqueued unless a host side is pageable; then (stronger than CUDA's
 * staging, and allowed) synchronous after the stream's earlier work. */
static CUresult copy_3d_async(const CUDA_MEMCPY3D *c, CUstream h, int ptsz) {
    CUresult r = check_3d(c);
    if (r) return r;
    struct stream *s = resolve(h, ptsz);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    int pageable = typed_side(c->srcMemoryType, c->srcHost, c->srcDevice) == SIDE_PAGEABLE
        || typed_side(c->dstMemoryType, c->dstHost, c->dstDevice) == SIDE_PAGEABLE;
    if (pageable && (r = refuse_if_capturing(s))) return r;
    struct op *op = new_op(OP_COPY_3D, 0);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.c3 = *c;
    return pageable ? submit_and_wait(s, op) : submit(s, op, NULL);
}

static CUresult copy_2d(const CUDA_MEMCPY2D *c) {
    CUresult r = check_device();
    if (r) return r;
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY3D t = as_3d(c);
    return copy_3d_sync(&t);
}

static CUresult copy_2d_async(const CUDA_MEMCPY2D *c, CUstream s, int ptsz) {
    CUresult r = check_device();
    if (r) return r;
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY3D t = as_3d(c);
    return copy_3d_async(&t, s, ptsz);
}

EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c) { return copy_2d(c); }
EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *c) { return copy_2d(c); }
EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *c) { return copy_2d(c); }
EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *c) { return copy_2d(c); }
EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream s) { return copy_2d_async(c, s, 0); }
EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *c, CUstream s) { return copy_2d_async(c, s, 1); }

static CUresult copy_3d(const CUDA_MEMCPY3D *c) {
    CUresult r = check_device();
    if (r) return r;
    return c ? copy_3d_sync(c) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult copy_3d_on(const CUDA_MEMCPY3D *c, CUstream s, int ptsz) {
    CUresult r = check_device();
    if (r) return r;
    return c ? copy_3d_async(c, s, ptsz) : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *c) { return copy_3d(c); }
EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *c) { return copy_3d(c); }
EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *c, CUstream s) { return copy_3d_on(c, s, 0); }
EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *c, CUstream s) { return copy_3d_on(c, s, 1); }

/* A batch of copies between unified pointers (CUDA 12.8's form has failIdx before the stream,
 * 13.0's _v2 not): one operation; synchronous if any side of any copy is pageable. */
static CUresult copy_batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUstream h, int ptsz) {
    CUresult r = check_device();
    if (r) return r;
    if (!dsts || !srcs || !sizes || !count || count > SIZE_MAX / (4 * sizeof(unsigned long long)))
        return CUDA_ERROR_INVALID_VALUE;
    int pageable = 0;
    for (size_t i = 0; i < count; i++) {
        if ((!dsts[i] || !srcs[i]) && sizes[i]) return CUDA_ERROR_INVALID_VALUE;
        if (sizes[i] && !pageable)
            pageable = host_side(D(dsts[i])) == SIDE_PAGEABLE || host_side(D(srcs[i])) == SIDE_PAGEABLE;
    }
    struct stream *s = resolve(h, ptsz);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    if (pageable && (r = refuse_if_capturing(s))) return r;
    struct op *op = new_op(OP_BATCH, 3 * count * sizeof(unsigned long long));
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.batch_count = count;
    for (size_t i = 0; i < count; i++)
        op->batch[i] = dsts[i], op->batch[count + i] = srcs[i], op->batch[2 * count + i] = sizes[i];
    return pageable ? submit_and_wait(s, op) : submit(s, op, NULL);
}
EXPORT CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, void *attrs, size_t *attr_idxs, size_t num_attrs, size_t *fail_idx, CUstream s) { (void)attrs; (void)attr_idxs; (void)num_attrs; (void)fail_idx; return copy_batch(dsts, srcs, sizes, count, s, 0); }
EXPORT CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, void *attrs, size_t *attr_idxs, size_t num_attrs, size_t *fail_idx, CUstream s) { (void)attrs; (void)attr_idxs; (void)num_attrs; (void)fail_idx; return copy_batch(dsts, srcs, sizes, count, s, 1); }
EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, void *attrs, size_t *attr_idxs, size_t num_attrs, CUstream s) { (void)attrs; (void)attr_idxs; (void)num_attrs; return copy_batch(dsts, srcs, sizes, count, s, 0); }
EXPORT CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, void *attrs, size_t *attr_idxs, size_t num_attrs, CUstream s) { (void)attrs; (void)attr_idxs; (void)num_attrs; return copy_batch(dsts, srcs, sizes, count, s, 1); }

/* Device-to-device copies, peer ones included (one "device" here). */
EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, void *dctx, CUdeviceptr src, void *sctx, size_t n) { (void)dctx; (void)sctx; return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, void *dctx, CUdeviceptr src, void *sctx, size_t n) { (void)dctx; (void)sctx; return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void *dctx, CUdeviceptr src, void *sctx, size_t n, CUstream s) { (void)dctx; (void)sctx; return dtod_async(dst, src, n, s, 0); }
EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, void *dctx, CUdeviceptr src, void *sctx, size_t n, CUstream s) { (void)dctx; (void)sctx; return dtod_async(dst, src, n, s, 1); }
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return dtod_async(dst, src, n, s, 0); }
EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return dtod_async(dst, src, n, s, 1); }

/* Prefetch: `location` is a CUmemLocation {type, id} passed by value (CUDA 12.2+ / 13). */
typedef struct { int type; int id; } CUmemLocation;
EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s) { (void)p; (void)n; (void)loc; (void)flags; (void)s; return check_device(); }
EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s) { (void)p; (void)n; (void)loc; (void)flags; (void)s; return check_device(); }

/* ---- Streams, events and host functions --------------------------------------------------- */

/* cuCtxSynchronize waits for every stream. It synchronises capturing streams too, which CUDA
 * refuses: their captures are invalidated. */
EXPORT CUresult cuCtxSynchronize(void) {
    CUresult r = check_device();
    if (r) return r;
    for (struct stream *s = atomic_load(&all_streams); s; s = s->next_all) {
        pthread_mutex_lock(&s->lock);
        if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
            s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
        pthread_mutex_unlock(&s->lock);
    }
    if (r) return r;
    wait_streams(0);
    return CUDA_SUCCESS;
}

static CUresult stream_create(CUstream *out, unsigned flags) {
    CUresult r = check_device();
    if (r) return r;
    if (!out || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    struct stream *s = new_stream(STREAM_CREATED, flags);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUstream)s;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamCreate(CUstream *out, unsigned int flags) { return stream_create(out, flags); }
EXPORT CUresult cuStreamCreateWithPriority(CUstream *out, unsigned int flags, int priority) { (void)priority; return stream_create(out, flags); }

/* CUDA returns at once and lets the work finish; the stand-in waits for it (its stream is
 * then reused). Work captured on it is dropped. */
static void retire_stream(struct stream *s) {
    wait_idle(s);
    pthread_mutex_lock(&streams_lock);
    pthread_mutex_lock(&s->lock);
    struct graph *g = s->graph;
    s->graph = NULL;
    s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
    s->in_use = 0;
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&streams_lock);
    graph_free(g);
}

/* A thread's per-thread stream, as the thread exits. */
static void release_thread_stream(void *p) { retire_stream(p); }

EXPORT CUresult cuStreamDestroy_v2(CUstream h) {
    CUresult r = check_device();
    if (r) return r;
    struct stream *s = h && h != CU_STREAM_LEGACY && h != CU_STREAM_PER_THREAD ? resolve(h, 0) : NULL;
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    retire_stream(s);
    return CUDA_SUCCESS;
}
/* The name without _v2 (CUDA 3.x), same signature. */
EXPORT CUresult cuStreamDestroy(CUstream h) { return cuStreamDestroy_v2(h); }

/* Waits for the stream's work. The legacy stream's includes every blocking stream's. */
static CUresult stream_sync(CUstream h, int ptsz) {
    CUresult r = check_device();
    if (r) return r;
    struct stream *s = resolve(h, ptsz);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    if ((r = refuse_if_capturing(s))) return r;
    if (s->kind == STREAM_LEGACY) wait_streams(1);
    else wait_idle(s);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(CUstream s) { return stream_sync(s, 0); }
EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) { return stream_sync(s, 1); }

/* CUDA_ERROR_NOT_READY while the stream has work that has not finished. Expedites nothing. */
static CUresult stream_query(CUstream h, int ptsz) {
    CUresult r = check_device();
    if (r) return r;
    struct stream *s = resolve(h, ptsz);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    if ((r = refuse_if_capturing(s))) return r;
    return atomic_load(&s->busy) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

EXPORT CUresult cuStreamQuery(CUstream s) { return stream_query(s, 0); }
EXPORT CUresult cuStreamQuery_ptsz(CUstream s) { return stream_query(s, 1); }

static struct event *valid_event(CUevent h) {
    struct event *e = (struct event *)h;
    return e && e->magic == EVENT_MAGIC ? e : NULL;
}

EXPORT CUresult cuEventCreate(CUevent *out, unsigned int flags) {
    (void)flags;
    CUresult r = check_device();
    if (r) return r;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    struct event *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = EVENT_MAGIC;
    *out = (CUevent)e;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent h) {
    CUresult r = check_device();
    if (r) return r;
    struct event *e = valid_event(h);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    e->magic = 0;
    free(e);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventDestroy(CUevent h) { return cuEventDestroy_v2(h); }

static CUresult event_record(CUevent h, CUstream sh, int ptsz) {
    CUresult r = check_device();
    if (r) return r;
    struct event *e = valid_event(h);
    struct stream *s = resolve(sh, ptsz);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    struct op *op = new_op(OP_RECORD, 0);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    op->event = e;
    return submit(s, op, NULL);
}

EXPORT CUresult cuEventRecord(CUevent e, CUstream s) { return event_record(e, s, 0); }
EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return event_record(e, s, 1); }

/* The stream and operation number an event stands for; stream NULL if never recorded. */
static struct stream *event_target(struct event *e, uint64_t *seq) {
    pthread_mutex_lock(&event_lock);
    struct stream *s = e->stream;
    *seq = e->seq;
    pthread_mutex_unlock(&event_lock);
    return s;
}

/* Waits until the event's stream reached the record (expedited). */
EXPORT CUresult cuEventSynchronize(CUevent h) {
    CUresult r = check_device();
    if (r) return r;
    struct event *e = valid_event(h);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    uint64_t seq;
    struct stream *s = event_target(e, &seq);
    if (s) wait_op(s, seq);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventQuery(CUevent h) {
    CUresult r = check_device();
    if (r) return r;
    struct event *e = valid_event(h);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    uint64_t seq;
    struct stream *s = event_target(e, &seq);
    if (!s) return CUDA_SUCCESS;
    pthread_mutex_lock(&s->lock);
    int done = done_through(s, seq);
    pthread_mutex_unlock(&s->lock);
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

/* Work enqueued on the stream after this waits for the event's record (as it is now). */
static CUresult stream_wait_event(CUstream sh, CUevent h, int ptsz) {
    CUresult r = check_device();
    if (r) return r;
    struct event *e = valid_event(h);
    struct stream *s = resolve(sh, ptsz);
    if (!e || !s) return CUDA_ERROR_INVALID_HANDLE;
    struct op *op = new_op(OP_WAIT, 0);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    op->event = e;
    return submit(s, op, NULL);
}

EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) { (void)flags; return stream_wait_event(s, e, 0); }
EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags) { (void)flags; return stream_wait_event(s, e, 1); }

/* fn(user) runs on the stream's worker, in order: the stand-in's kernels. */
static CUresult launch_host_func(CUstream sh, CUhostFn fn, void *user, int ptsz) {
    CUresult r = check_device();
    if (r) return r;
    if (!fn) return CUDA_ERROR_INVALID_VALUE;
    struct stream *s = resolve(sh, ptsz);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    struct op *op = new_op(OP_HOST_FN, 0);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.host.fn = fn, op->u.host.user = user;
    return submit(s, op, NULL);
}

EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user) { return launch_host_func(s, fn, user, 0); }
EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *user) { return launch_host_func(s, fn, user, 1); }

/* ---- Stream capture and graphs ------------------------------------------------------------ */

/* While a stream captures, what would be enqueued on it goes into a graph instead (see
 * submit); a pageable copy or a synchronisation invalidates the capture. */
static CUresult begin_capture(CUstream h, int mode, int ptsz) {
    CUresult r = check_device();
    if (r) return r;
    struct stream *s = resolve(h, ptsz);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    if (s->kind == STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
    struct graph *g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    g->magic = GRAPH_MAGIC;
    pthread_mutex_lock(&s->lock);
    if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) r = CUDA_ERROR_ILLEGAL_STATE;
    else s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE, s->graph = g;
    pthread_mutex_unlock(&s->lock);
    if (r) graph_free(g);
    return r;
}

EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, int mode) { return begin_capture(s, mode, 0); }
EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, int mode) { return begin_capture(s, mode, 1); }
/* The name without _v2 is CUDA 10.0's, which had no mode: global. */
EXPORT CUresult cuStreamBeginCapture(CUstream s) { return begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, 0); }
EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream s) { return begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, 1); }

/* Ends the capture: the graph, or CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and none. */
static CUresult end_capture(CUstream h, CUgraph *out, int ptsz) {
    CUresult r = check_device();
    if (r) return r;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    struct stream *s = resolve(h, ptsz);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&s->lock);
    int status = s->capture;
    struct graph *g = s->graph;
    s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
    s->graph = NULL;
    pthread_mutex_unlock(&s->lock);
    *out = NULL;
    if (status == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
    if (status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
        graph_free(g);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *out = (CUgraph)g;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *out) { return end_capture(s, out, 0); }
EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *out) { return end_capture(s, out, 1); }

static CUresult is_capturing(CUstream h, int *status, int ptsz) {
    CUresult r = check_device();
    if (r) return r;
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    struct stream *s = resolve(h, ptsz);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&s->lock);
    *status = s->capture;
    pthread_mutex_unlock(&s->lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status) { return is_capturing(s, status, 0); }
EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, int *status) { return is_capturing(s, status, 1); }

/* The thread's capture mode, swapped. The stand-in keeps it and nothing more. */
EXPORT CUresult cuThreadExchangeStreamCaptureMode(int *mode) {
    CUresult r = check_device();
    if (r) return r;
    if (!mode || *mode < CU_STREAM_CAPTURE_MODE_GLOBAL || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    int old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

static struct op *clone_op(const struct op *op) {
    struct op *c = malloc(op->bytes);
    if (c) memcpy(c, op, op->bytes), c->next = NULL;
    return c;
}

/* A copy of g's operations, with `magic`; NULL if out of memory. */
static struct graph *clone_graph(const struct graph *g, unsigned magic) {
    struct graph *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->magic = magic;
    for (const struct op *op = g->head; op; op = op->next) {
        struct op *node = clone_op(op);
        if (!node) {
            graph_free(c);
            return NULL;
        }
        graph_append(c, node);
    }
    return c;
}

static CUresult instantiate(CUgraphExec *out, CUgraph h) {
    CUresult r = check_device();
    if (r) return r;
    const struct graph *g = (const struct graph *)h;
    if (!out || !g || g->magic != GRAPH_MAGIC) return CUDA_ERROR_INVALID_VALUE;
    struct graph *exec = clone_graph(g, EXEC_MAGIC);
    if (!exec) return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUgraphExec)exec;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph g, unsigned long long flags) { (void)flags; return instantiate(out, g); }
/* The name without WithFlags is the older form (error node and log buffer). */
EXPORT CUresult cuGraphInstantiate(CUgraphExec *out, CUgraph g, void *error_node, char *log, size_t log_size) { (void)error_node; (void)log; (void)log_size; return instantiate(out, g); }

/* Enqueues the graph's operations on the stream, in order: copies happen later, on its
 * worker, as pinned copies do (a captured graph holds no pageable copy). */
static CUresult graph_launch(CUgraphExec h, CUstream sh, int ptsz) {
    CUresult r = check_device();
    if (r) return r;
    const struct graph *exec = (const struct graph *)h;
    if (!exec || exec->magic != EXEC_MAGIC) return CUDA_ERROR_INVALID_VALUE;
    struct stream *s = resolve(sh, ptsz);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    for (const struct op *node = exec->head; node && !r; node = node->next) {
        struct op *op = clone_op(node);
        r = op ? submit(s, op, NULL) : CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) { return graph_launch(exec, s, 0); }
EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) { return graph_launch(exec, s, 1); }

static CUresult destroy_graph(void *h, unsigned magic) {
    CUresult r = check_device();
    if (r) return r;
    struct graph *g = h;
    if (!g || g->magic != magic) return CUDA_ERROR_INVALID_VALUE;
    graph_free(g);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) { return destroy_graph(exec, EXEC_MAGIC); }
EXPORT CUresult cuGraphDestroy(CUgraph g) { return destroy_graph(g, GRAPH_MAGIC); }

/* ---- Pointer attributes ------------------------------------------------------------------- */

static char primary_context;   /* what CU_POINTER_ATTRIBUTE_CONTEXT names */

/* Attribute `attr` of ptr, which lies in range r of kind `kind`, written to data (its
 * size: unsigned int for types and flags, int for the ordinal, 8 bytes for the rest). For
 * pageable memory (and a device block's host pointer) cuPointerGetAttribute fails, while
 * cuPointerGetAttributes (`lenient`) writes the attribute's null value. */
static CUresult pointer_attribute(void *data, int attr, CUdeviceptr ptr, enum memory_kind kind, const struct range *r, int lenient) {
    int known = kind != MEMORY_PAGEABLE;
    int host = kind == MEMORY_PINNED || (kind == MEMORY_DEVICE && r->managed);
    if (!known && !lenient) return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(void **)data = known ? &primary_context : NULL; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = !known ? 0 : kind == MEMORY_PINNED ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = known ? ptr : 0; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (known && !host && !lenient) return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = host ? D(ptr) : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = known ? r->id : 0; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned *)data = known && r->managed; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = known ? 0 : -2; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = known ? r->start : 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = known ? r->size : 0; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(unsigned *)data = known; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr) {
    CUresult r = check_device();
    if (r) return r;
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    struct range range;
    enum memory_kind kind = lookup(D(ptr), &range);
    return pointer_attribute(data, attribute, ptr, kind, &range, 0);
}

EXPORT CUresult cuPointerGetAttributes(unsigned int count, int *attributes, void **data, CUdeviceptr ptr) {
    CUresult r = check_device();
    if (r) return r;
    if (!attributes || !data) return CUDA_ERROR_INVALID_VALUE;
    struct range range;
    enum memory_kind kind = lookup(D(ptr), &range);
    for (unsigned i = 0; i < count && !r; i++)
        r = data[i] ? pointer_attribute(data[i], attributes[i], ptr, kind, &range, 1) : CUDA_ERROR_INVALID_VALUE;
    return r;
}

/* The flags a pinned block was allocated or registered with (a registration's, inside an
 * allocated block). */
EXPORT CUresult cuMemHostGetFlags(unsigned int *flags, void *p) {
    CUresult r = check_device();
    if (r) return r;
    struct range range;
    if (!flags || lookup(p, &range) != MEMORY_PINNED) return CUDA_ERROR_INVALID_VALUE;
    *flags = range.flags;
    return CUDA_SUCCESS;
}

/* Pinned memory is mapped at the same address on the "device". */
EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *out, void *p, unsigned int flags) {
    CUresult r = check_device();
    if (r) return r;
    if (!out || flags || lookup(p, NULL) != MEMORY_PINNED) return CUDA_ERROR_INVALID_VALUE;
    *out = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* ---- The virtual memory API --------------------------------------------------------------- */

/* A reservation is address space no one may touch until mapped; physical memory is a handle
 * with a size; mapping makes the range readable and writable, and device memory. */
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
    (void)alignment; (void)flags;
    CUresult r = check_device();
    if (r) return r;
    if (!ptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap((void *)(uintptr_t)addr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    CUresult r = check_device();
    if (r) return r;
    return munmap((void *)(uintptr_t)ptr, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
static atomic_ullong next_handle = 1;
EXPORT CUresult cuMemCreate(unsigned long long *handle, size_t size, const void *prop, unsigned long long flags) {
    (void)prop; (void)flags;
    CUresult r = check_device();
    if (r) return r;
    if (!handle || size == 0) return CUDA_ERROR_INVALID_VALUE;
    *handle = atomic_fetch_add(&next_handle, 1);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemRelease(unsigned long long handle) { (void)handle; return check_device(); }
EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, unsigned long long handle, unsigned long long flags) {
    (void)offset; (void)handle; (void)flags;
    CUresult r = check_device();
    if (r) return r;
    if (mprotect((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE) != 0) return CUDA_ERROR_INVALID_VALUE;
    return ranges_add(D(ptr), size, RANGE_DEVICE, 0, 0) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    CUresult r = check_device();
    if (r) return r;
    if (mprotect((void *)(uintptr_t)ptr, size, PROT_NONE) != 0) return CUDA_ERROR_INVALID_VALUE;
    ranges_remove_inside(D(ptr), size, RANGE_DEVICE);
    return CUDA_SUCCESS;
}

/* Contexts and device attributes: one device, one context, current on every thread once the
 * device exists. The attributes a program (or hotpin) asks about platforms can be set for
 * tests: HOTPIN_STANDIN_ATTRIBUTES="ATTR=VALUE,..." (cuda.h's numbers: 18 integrated, 99
 * host register supported, 100 pageable memory access uses host page tables). */
static int the_context;

EXPORT CUresult cuCtxGetCurrent(void **ctx) {
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    *ctx = check_device() == CUDA_SUCCESS ? (void *)&the_context : NULL;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(int *device) {
    CUresult r = check_device();
    if (r) return r;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(int *device, int ordinal) {
    CUresult r = check_device();
    if (r) return r;
    if (!device || ordinal != 0) return CUDA_ERROR_INVALID_VALUE;
    *device = 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxGetState(int device, unsigned *flags, int *active) {
    if (device != 0 || !flags || !active) return CUDA_ERROR_INVALID_VALUE;
    *flags = 0;
    *active = check_device() == CUDA_SUCCESS;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int device) {
    if (device != 0 || !ctx) return CUDA_ERROR_INVALID_VALUE;
    return cuCtxGetCurrent(ctx);
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int device) {
    return device == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuCtxPushCurrent_v2(void *ctx) {
    return ctx == &the_context ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuCtxPopCurrent_v2(void **ctx) {
    if (ctx) *ctx = &the_context;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute, int device) {
    CUresult r = check_device();
    if (r) return r;
    if (!value || device != 0) return CUDA_ERROR_INVALID_VALUE;
    *value = attribute == 99 ? 1 : 0; /* a discrete GPU that registers host memory */
    const char *set = getenv("HOTPIN_STANDIN_ATTRIBUTES");
    while (set && *set) {
        char *end;
        long a = strtol(set, &end, 10);
        if (*end != '=') break;
        long v = strtol(end + 1, &end, 10);
        if (a == attribute) *value = (int)v;
        set = *end == ',' ? end + 1 : NULL;
    }
    return CUDA_SUCCESS;
}

/* cuGetProcAddress: the driver's own function for a base name, in the newest version this
 * stand-in has, and its per-thread default stream flavour when flags ask for it
 * (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1). Like CUDA's, the answer is the
 * driver's own function, never one an LD_PRELOAD library defines under the same name: the
 * table holds hidden aliases, bound inside this file (a plain `&cuMemcpyDtoH_v2` would be
 * resolved through the GOT, to the interposer's). CUDA picks the version by the caller's
 * CUDA version too; here the newest is always given. The copies and pinned-memory calls an
 * interposer wraps are in the table. */
#define OWN(name) extern __typeof(name) own_##name __attribute__((alias(#name), visibility("hidden")));
OWN(cuMemcpyHtoD_v2) OWN(cuMemcpyHtoD_v2_ptds) OWN(cuMemcpyDtoH_v2) OWN(cuMemcpyDtoH_v2_ptds)
OWN(cuMemcpy) OWN(cuMemcpy_ptds) OWN(cuMemcpyHtoDAsync_v2) OWN(cuMemcpyHtoDAsync_v2_ptsz)
OWN(cuMemcpyDtoHAsync_v2) OWN(cuMemcpyDtoHAsync_v2_ptsz) OWN(cuMemcpyAsync) OWN(cuMemcpyAsync_ptsz)
OWN(cuMemHostAlloc) OWN(cuMemFreeHost) OWN(cuMemHostRegister_v2)
OWN(cuMemcpy2D_v2) OWN(cuMemcpy2D_v2_ptds)
static const struct {
    const char *base;
    int per_thread;
    void *function;
} own_functions[] = {
    {"cuMemcpyHtoD", 0, (void *)own_cuMemcpyHtoD_v2},
    {"cuMemcpyHtoD", 1, (void *)own_cuMemcpyHtoD_v2_ptds},
    {"cuMemcpyDtoH", 0, (void *)own_cuMemcpyDtoH_v2},
    {"cuMemcpyDtoH", 1, (void *)own_cuMemcpyDtoH_v2_ptds},
    {"cuMemcpy", 0, (void *)own_cuMemcpy},
    {"cuMemcpy", 1, (void *)own_cuMemcpy_ptds},
    {"cuMemcpyHtoDAsync", 0, (void *)own_cuMemcpyHtoDAsync_v2},
    {"cuMemcpyHtoDAsync", 1, (void *)own_cuMemcpyHtoDAsync_v2_ptsz},
    {"cuMemcpyDtoHAsync", 0, (void *)own_cuMemcpyDtoHAsync_v2},
    {"cuMemcpyDtoHAsync", 1, (void *)own_cuMemcpyDtoHAsync_v2_ptsz},
    {"cuMemcpyAsync", 0, (void *)own_cuMemcpyAsync},
    {"cuMemcpyAsync", 1, (void *)own_cuMemcpyAsync_ptsz},
    {"cuMemcpy2D", 0, (void *)own_cuMemcpy2D_v2},
    {"cuMemcpy2D", 1, (void *)own_cuMemcpy2D_v2_ptds},
    {"cuMemHostAlloc", -1, (void *)own_cuMemHostAlloc},
    {"cuMemFreeHost", -1, (void *)own_cuMemFreeHost},
    {"cuMemHostRegister", -1, (void *)own_cuMemHostRegister_v2},
};

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                    unsigned long long flags, int *status) {
    (void)version;
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    int per_thread = (flags & 1) != 0;
    *pfn = NULL;
    for (size_t i = 0; i < sizeof own_functions / sizeof own_functions[0]; i++)
        if (strcmp(own_functions[i].base, symbol) == 0 &&
            (own_functions[i].per_thread < 0 || own_functions[i].per_thread == per_thread))
            *pfn = own_functions[i].function;
    if (status) *status = *pfn ? 0 /* CU_GET_PROC_ADDRESS_SUCCESS */ : 1 /* SYMBOL_NOT_FOUND */;
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
