/* online: a program for auto mode (the CUDA stand-in, a test fixture, not CUDA). No hotpin
 * code. Every copy's data is checked: each step fills a host buffer with a pattern of the
 * step, copies it to the device (cudaMemcpyAsync then synchronise, or cudaMemcpy), copies it
 * back into a result buffer and checks every byte.
 *   shift [MIB]: four malloc'd buffers of MIB MiB (default 8); buffers 0 and 1 are copied in
 *          the first 10 steps, buffers 2 and 3 in the next 40 (the hot set changes halfway),
 *          a cold one once; the result buffer is copied into at every step.
 *   slice: a 160 MiB malloc'd block of which one 8 MiB slice (at 72 MiB) is copied 20 times, a
 *          cudaHostAlloc'd 8 MiB buffer copied 20 times (served pageable, then pinned), and a
 *          cudaHostAlloc'd 96 MiB dataset of which one 8 MiB slice (at 40 MiB) is copied 20
 *          times; then copies across the edges of what was copied so far (24 MiB of the block
 *          from 64 MiB, the whole dataset), and 20 more steps of the wider slice and the
 *          first. The result buffer is 160 MiB (malloc'd), copied into from its start.
 *   fresh [MIB] [temp]: one malloc'd buffer of MIB MiB copied to the device at every step
 *          (40), and a fresh malloc'd result each step that the device's copy is brought back
 *          into, made before the last one is freed (two results alive at once, as `y =
 *          x.cpu()` in a loop keeps them); with `temp`, after the last result is freed, a
 *          temporary of the same size, written and never copied, alive until the next
 *          step's.
 *   offload [MIB]: activation offload, shaped as PyTorch's: every step (30) makes 8 activations
 *          on the device and brings each back to the host, then reloads them, last first. The
 *          even ones land in 5 long-lived malloc'd buffers taken in turn (a caching host
 *          allocator's blocks), the odd ones in 4 fresh malloc'd blocks made every step and
 *          freed at its end. Each activation reloaded is checked.
 *   shared [MIB]: one malloc'd buffer of MIB MiB, filled once, copied whole to the device and
 *          back by two threads at once (60 times each, on streams, device memory and results
 *          of their own): asynchronously and synchronously in turn, and every 5th time to the
 *          device by one 2D copy (asynchronous in one thread, synchronous in the other).
 *   evict [MIB]: two malloc'd buffers of MIB MiB, under a budget that holds one. One thread
 *          copies the first to the device 80 times, 10 ms apart, overwriting it as soon as
 *          each copy returns (allowed for pageable memory) and checking the device's copy of
 *          its first and last 64 KiB; after 200 ms another thread copies the second 300 times
 *          without pause, so that it displaces the first from the budget while the first is
 *          being copied.
 *   steady [MIB] [MS] [PERIOD_MS] [WAIT_MS]: after WAIT_MS ms (default 0; time for a tracer
 *          to attach, once the CUDA libraries are loaded and a context made), two malloc'd
 *          buffers of MIB MiB, each copied there and back (async) every PERIOD_MS ms (default
 *          20) for MS ms (default 2000): a steady hot set
 *          whose density the period sets (for the node's leases: two such programs at once).
 *   pool [MIB] [MS] [PERIOD_MS] [WAIT_MS]: as steady, but the two buffers are pinned
 *          requests (cudaHostAlloc, no flags), as a framework's pinned pool makes them: what
 *          auto mode keeps pinned from a history, and must lease from the node's arbiter.
 *   beside: two malloc'd blocks of 2 MiB (above the floor: tracked, never copied) with 16
 *          buffers of 16 KiB and a result buffer of 16 KiB made between them, all from the
 *          heap (mallopt: no mmap under 64 MiB), so that every small buffer shares a 2 MiB
 *          region with a tracked block, as PyTorch's small CPU tensors share the heap with
 *          larger ones; each small buffer copied there and back 100 times (3,200 copies);
 *          with a third argument `async`, each copy is cudaMemcpyAsync and a stream sync, as
 *          PyTorch makes them; with `questions`, each buffer is also asked about
 *          (cudaPointerGetAttributes, as `tensor.is_pinned()` asks) before it is copied, and
 *          must be answered unregistered memory (1,600 questions).
 *   scalar [MIB]: a pinned request of 4 bytes (cudaHostAlloc, no flags), kept to the end, as
 *          PyTorch's `.item()` reads a scalar through one from its caching host allocator: at
 *          every step (40) a malloc'd buffer of MIB MiB is copied there and back, and a scalar
 *          brought back into the 4 bytes and checked.
 *   portable [MIB] [MS] [PERIOD_MS] [WAIT_MS]: as pool, but the requests are portable
 *          (cudaHostAllocPortable), as CuPy's pinned memory pool makes them; cudaHostGetFlags
 *          must answer portable for each.
 *   sigwait [MIB] [MS]: SIGTERM blocked in every thread, one buffer copied there and back
 *          every 5 ms for MS ms (default 5000) or until a SIGTERM is taken with sigtimedwait
 *          (a graceful stop): detail took_sigterm.
 *   layers [MIB] [N] [STEPS] [IDLE_MS] [BEFORE_MS]: N malloc'd buffers of MIB MiB (default
 *          6), made by one call site, BEFORE_MS ms (default 0) before the first step, each
 *          copied whole there and back at every step (STEPS, default 4), as layers streamed
 *          from CPU memory are; then, for IDLE_MS ms (default 0), only another buffer is
 *          copied, every 20 ms (the layers idle, as a model moved once is).
 *   moveto [MIB] [N] [STEPS] [BEFORE_MS]: `module.to("cuda")` / `.to("cpu")` per layer: N
 *          malloc'd layers of MIB MiB (default 8), filled once BEFORE_MS ms (default 0) before
 *          the first step (a model built before it runs); at every step (STEPS, default 4) each layer is
 *          copied to the device and freed, and brought back into a fresh malloc'd block
 *          (asynchronously and synchronously in turn), which is checked and becomes the layer.
 *   chunks [MIB]: two malloc'd buffers of MIB MiB, each copied whole there and back at every
 *          step (30): asynchronously and synchronously in turn, and at every 6th step to the
 *          device by one 2D copy (rows of MIB/8 MiB) instead: asynchronous for the first,
 *          synchronous for the second. A third buffer is copied there and back every step,
 *          never by a 2D copy, then freed.
 *   believed [MIB]: two malloc'd buffers of MIB MiB, copied to the device whole and checked
 *          by reading back their first and last 64 KiB (below the floor: never pinned), under
 *          a budget that holds one. The first is copied 10 times, then registered by the
 *          program (cudaHostRegister) and copied once more; the second is copied 40 times
 *          (it displaces the first from the budget) and freed. Then a stream capture of a
 *          copy of the first (memory the program registered, so the capture must succeed),
 *          the graph replayed after new data is written into it, and the first
 *          unregistered. With a third argument `half`, the program registers, captures and
 *          checks only the first half of the first buffer; with `after`, once the first is
 *          unregistered (still allocated), a third buffer is copied 40 times; with `racing`
 *          (run with HOTPIN_STANDIN_REGISTER_DELAY_US), the capture is thread-local and
 *          another thread unregisters the first while the registration its copy needs is
 *          being made (the stand-in holds it until that thread has seen it): that
 *          unregistration must succeed, the
 *          capture too, and the first then read as unregistered; no graph is replayed.
 *   freeracing [MIB]: a cudaHostAlloc'd buffer of MIB MiB (served pageable under `--mode
 *          pin-none`) filled, and a thread-local capture of a copy of it (so it is registered
 *          on demand; run with HOTPIN_STANDIN_REGISTER_DELAY_US) while another thread
 *          cudaFreeHost's it once that registration is under way: the free must succeed,
 *          and the capture too. No graph is replayed.
 * Then cudaGetLastError must be cudaSuccess: nothing hotpin did may leave an error behind.
 * Prints one JSON line: checks, mismatches, details (on the stand-in, its count of
 * registration calls made beside a large copy call too: calls_beside_copies). */
#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#include "transparency/cuda_decls.h"
#include "transparency/check.h"

static void *device;
static cudaStream_t stream;
static char *result;

/* `size` bytes of `host` copied to the device: cudaMemcpyAsync then a stream sync, or
 * cudaMemcpy. */
static void to_device(const char *host, size_t size, int async) {
    if (async) {
        CUDA_OK(cudaMemcpyAsync(device, host, size, cudaMemcpyHostToDevice, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
    } else {
        CUDA_OK(cudaMemcpy(device, host, size, cudaMemcpyHostToDevice));
    }
}

/* One round trip of `size` bytes of `host` at step `step`, checked. */
static void round_trip(struct tally *t, char *host, size_t size, unsigned step, unsigned tag,
                       int async) {
    fill(host, size, step, tag);
    to_device(host, size, async);
    if (async) {
        CUDA_OK(cudaMemcpyAsync(result, device, size, cudaMemcpyDeviceToHost, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
    } else {
        CUDA_OK(cudaMemcpy(result, device, size, cudaMemcpyDeviceToHost));
    }
    tally_check(t, step, count_wrong(result, size, step, tag));
}

/* The first and last EDGE bytes of `size` bytes filled at `step` with `tag`, as read back
 * into `back`: how many words are wrong. */
#define EDGE (64 * 1024)
static size_t edges_wrong_in(char back[2][EDGE], size_t size, unsigned step, unsigned tag) {
    size_t wrong = count_wrong(back[0], EDGE, step, tag);
    for (size_t w = 0; w < EDGE / 8; w++)
        wrong += ((uint64_t *)back[1])[w] != pattern_word((size - EDGE) / 8 + w, step, tag);
    return wrong;
}

/* `believed`: the device's copy of `size` bytes filled at `step` with `tag`, its edges read
 * back into static buffers (below the floor): how many words are wrong. */
static char edge_back[2][EDGE];
static size_t edges_wrong(size_t size, unsigned step, unsigned tag) {
    CUDA_OK(cudaMemcpy(edge_back[0], device, EDGE, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(edge_back[1], (char *)device + size - EDGE, EDGE,
                       cudaMemcpyDeviceToHost));
    return edges_wrong_in(edge_back, size, step, tag);
}

/* `believed`: `host` filled and copied whole to the device, its edges checked. */
static void edges_trip(struct tally *t, char *host, size_t size, unsigned step, unsigned tag,
                       int async) {
    fill(host, size, step, tag);
    to_device(host, size, async);
    tally_check(t, step, edges_wrong(size, step, tag));
}

/* A stand-in's hook (a test fixture's export, absent from CUDA), from the driver the runtime
 * loaded (not loaded globally): NULL where there is none. */
static void *standin_hook(const char *name) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return driver ? dlsym(driver, name) : NULL;
}

/* Holds the stand-in's next host registration until the racing thread has seen it. */
static void hold_next_registration(void) {
    void (*hold)(void) = (void (*)(void))standin_hook("hotpin_standin_hold_next_registration");
    if (hold) hold();
}

/* A capture (`mode`) of one copy of `len` bytes of `host` to the device, checked at `step`;
 * `hold`: the stand-in holds the registration the copy needs for a racing thread. The
 * captured graph, or NULL. */
static cudaGraph_t capture_copy(struct tally *t, unsigned step, const void *host, size_t len,
                                int mode, int hold) {
    cudaGraph_t graph = NULL;
    CUDA_OK(cudaStreamBeginCapture(stream, mode));
    if (hold) hold_next_registration();
    int copy_rc = (int)cudaMemcpyAsync(device, host, len, cudaMemcpyHostToDevice, stream);
    int end_rc = (int)cudaStreamEndCapture(stream, &graph);
    tally_check(t, step, copy_rc != 0 || end_rc != 0 || graph == NULL);
    if (copy_rc != 0) detail("capture_copy_rc", "%d", copy_rc);
    if (end_rc != 0) detail("capture_end_rc", "%d", end_rc);
    if (end_rc != 0 && graph) {
        CUDA_OK(cudaGraphDestroy(graph));
        graph = NULL;
    }
    return graph;
}

/* Unregisters (or cudaFreeHost's) `host` once the stand-in holds a registration, which it
 * then releases: the call lands while that registration is made. The call's result (-1: the
 * stand-in's hooks not found, -2: no registration came within 10 s). */
struct racer {
    void *host;
    int free_host; /* cudaFreeHost it, not cudaHostUnregister */
    int rc;
};
static void *unregister_racing(void *arg) {
    struct racer *me = (struct racer *)arg;
    int (*registering)(void) = (int (*)(void))standin_hook("hotpin_standin_registering");
    void (*release)(void) = (void (*)(void))standin_hook("hotpin_standin_release_registration");
    if (!registering || !release) {
        me->rc = -1;
        return NULL;
    }
    /* At most 10 s: a run in which no registration comes fails instead of hanging. */
    for (int waited = 0; registering() == 0; waited++) {
        if (waited == 50000) {
            me->rc = -2;
            return NULL;
        }
        usleep(200);
    }
    release();
    me->rc = (int)(me->free_host ? cudaFreeHost(me->host) : cudaHostUnregister(me->host));
    return NULL;
}

/* `shared`: one thread's copies of the shared buffer. */
struct sharer {
    const char *host;
    size_t size;
    int sync_2d;
    struct tally t;
};
static pthread_mutex_t tally_lock = PTHREAD_MUTEX_INITIALIZER;

static void *share(void *arg) {
    struct sharer *me = (struct sharer *)arg;
    size_t size = me->size, row = size / 8;
    cudaStream_t s;
    void *dev;
    char *back = (char *)malloc(size);
    CUDA_OK(cudaStreamCreate(&s));
    CUDA_OK(cudaMalloc(&dev, size));
    for (unsigned i = 0; i < 60; i++) {
        if (i % 5 == 4 && me->sync_2d) {
            CUDA_OK(cudaMemcpy2D(dev, row, me->host, row, row, 8, cudaMemcpyHostToDevice));
        } else if (i % 5 == 4) {
            CUDA_OK(cudaMemcpy2DAsync(dev, row, me->host, row, row, 8, cudaMemcpyHostToDevice,
                                      s));
        } else if (i % 2) {
            CUDA_OK(cudaMemcpyAsync(dev, me->host, size, cudaMemcpyHostToDevice, s));
        } else {
            CUDA_OK(cudaMemcpy(dev, me->host, size, cudaMemcpyHostToDevice));
        }
        CUDA_OK(cudaMemcpyAsync(back, dev, size, cudaMemcpyDeviceToHost, s));
        CUDA_OK(cudaStreamSynchronize(s));
        size_t wrong = count_wrong(back, size, 0, 7);
        pthread_mutex_lock(&tally_lock);
        tally_check(&me->t, i, wrong);
        pthread_mutex_unlock(&tally_lock);
    }
    CUDA_OK(cudaFree(dev));
    free(back);
    return NULL;
}

/* `evict`: the buffer overwritten as soon as each copy of it returns, and the one that
 * displaces it. */
static char *evicted, *displacer;
static size_t evict_size;
static struct tally evict_tally;
static char evict_back[2][EDGE];

static void *copy_and_overwrite(void *unused) {
    (void)unused;
    cudaStream_t s;
    void *dev;
    CUDA_OK(cudaStreamCreate(&s));
    CUDA_OK(cudaMalloc(&dev, evict_size));
    size_t edge = sizeof evict_back[0];
    for (unsigned i = 0; i < 80; i++) {
        fill(evicted, evict_size, i, 8);
        STALL(s);
        CUDA_OK(cudaMemcpyAsync(dev, evicted, evict_size, cudaMemcpyHostToDevice, s));
        fill(evicted, evict_size, i, 9); /* pageable: its copy has the old data already */
        CUDA_OK(cudaMemcpyAsync(evict_back[0], dev, edge, cudaMemcpyDeviceToHost, s));
        CUDA_OK(cudaMemcpyAsync(evict_back[1], (char *)dev + evict_size - edge, edge,
                                cudaMemcpyDeviceToHost, s));
        CUDA_OK(cudaStreamSynchronize(s));
        size_t wrong = edges_wrong_in(evict_back, evict_size, i, 8);
        pthread_mutex_lock(&tally_lock);
        tally_check(&evict_tally, i, wrong);
        pthread_mutex_unlock(&tally_lock);
        usleep(10 * 1000);
    }
    CUDA_OK(cudaFree(dev));
    return NULL;
}

static void *displace(void *unused) {
    (void)unused;
    void *dev;
    CUDA_OK(cudaMalloc(&dev, evict_size));
    usleep(200 * 1000);
    for (unsigned i = 0; i < 300; i++)
        CUDA_OK(cudaMemcpy(dev, displacer, evict_size, cudaMemcpyHostToDevice));
    CUDA_OK(cudaFree(dev));
    return NULL;
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "shift";
    program_name = which;
    CUDA_OK(cudaStreamCreate(&stream));
    size_t size = (argc > 2 ? (size_t)atoi(argv[2]) : 8) * MIB;
    CUDA_OK(cudaMalloc(&device, size));
    result = (char *)malloc(size);
    struct tally t;
    tally_init(&t, which);
    if (strcmp(which, "shift") == 0) {
        char *buffers[4], *cold = (char *)malloc(size);
        for (int i = 0; i < 4; i++) buffers[i] = (char *)malloc(size);
        round_trip(&t, cold, size, 0, 99, 1);
        for (unsigned step = 0; step < 50; step++) {
            int first = step < 10 ? 0 : 2;
            for (int i = first; i < first + 2; i++)
                round_trip(&t, buffers[i], size, step, (unsigned)i, (int)(step % 2));
        }
        for (int i = 0; i < 4; i++) free(buffers[i]);
        free(cold);
    } else if (strcmp(which, "believed") == 0) {
        char *first = (char *)malloc(size), *second = (char *)malloc(size);
        size_t mine = argc > 3 && strcmp(argv[3], "half") == 0 ? size / 2 : size;
        int racing = argc > 3 && strcmp(argv[3], "racing") == 0;
        for (unsigned step = 0; step < 10; step++)
            edges_trip(&t, first, size, step, 1, (int)(step % 2));
        CUDA_OK(cudaHostRegister(first, mine, 0));
        edges_trip(&t, first, size, 10, 1, 1);
        for (unsigned step = 11; step < 51; step++)
            edges_trip(&t, second, size, step, 2, (int)(step % 2));
        free(second);
        cudaGraphExec_t exec = NULL;
        struct racer racer = {first, 0, 0};
        pthread_t other;
        if (racing) pthread_create(&other, NULL, unregister_racing, &racer);
        cudaGraph_t graph = capture_copy(
            &t, 51, first, mine,
            racing ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeGlobal, racing);
        if (racing) {
            pthread_join(other, NULL);
            tally_check(&t, 52, racer.rc != 0);
            if (racer.rc != 0) detail("racing_unregister_rc", "%d", racer.rc);
            struct cudaPointerAttributes attributes;
            int asked = (int)cudaPointerGetAttributes(&attributes, first);
            tally_check(&t, 53, asked != 0 || attributes.type != cudaMemoryTypeUnregistered);
            if (asked == 0 && attributes.type != cudaMemoryTypeUnregistered)
                detail("racing_type_after", "%d", (int)attributes.type);
            if (graph) CUDA_OK(cudaGraphDestroy(graph));
        } else if (graph) {
            CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
            fill(first, size, 52, 1);
            CUDA_OK(cudaGraphLaunch(exec, stream));
            CUDA_OK(cudaStreamSynchronize(stream));
            tally_check(&t, 52, edges_wrong(mine, 52, 1));
            CUDA_OK(cudaGraphExecDestroy(exec));
            CUDA_OK(cudaGraphDestroy(graph));
        }
        if (!racing) CUDA_OK(cudaHostUnregister(first));
        if (argc > 3 && strcmp(argv[3], "after") == 0) {
            char *third = (char *)malloc(size);
            for (unsigned step = 53; step < 93; step++)
                edges_trip(&t, third, size, step, 3, (int)(step % 2));
            free(third);
        }
        free(first);
    } else if (strcmp(which, "freeracing") == 0) {
        char *pinned;
        CUDA_OK(cudaHostAlloc((void **)&pinned, size, 0));
        fill(pinned, size, 1, 1);
        struct racer racer = {pinned, 1, 0};
        pthread_t other;
        pthread_create(&other, NULL, unregister_racing, &racer);
        cudaGraph_t graph = capture_copy(&t, 1, pinned, size, cudaStreamCaptureModeThreadLocal, 1);
        pthread_join(other, NULL);
        tally_check(&t, 2, racer.rc != 0);
        if (racer.rc != 0) detail("racing_free_rc", "%d", racer.rc);
        if (graph) CUDA_OK(cudaGraphDestroy(graph));
    } else if (strcmp(which, "fresh") == 0) {
        int temps = argc > 3 && strcmp(argv[3], "temp") == 0;
        char *hot = (char *)malloc(size), *last = NULL, *temp = NULL;
        for (unsigned step = 0; step < 40; step++) {
            fill(hot, size, step, 1);
            CUDA_OK(cudaMemcpyAsync(device, hot, size, cudaMemcpyHostToDevice, stream));
            CUDA_OK(cudaStreamSynchronize(stream));
            char *fresh = (char *)malloc(size);
            CUDA_OK(cudaMemcpyAsync(fresh, device, size, cudaMemcpyDeviceToHost, stream));
            CUDA_OK(cudaStreamSynchronize(stream));
            tally_check(&t, step, count_wrong(fresh, size, step, 1));
            free(last);
            last = fresh;
            if (temps) {
                /* A temporary of the same size, never copied, alive until the next step's
                 * result is made. */
                free(temp);
                temp = (char *)malloc(size);
                memset(temp, (int)step, size);
            }
        }
        free(temp);
        free(last);
        free(hot);
    } else if (strcmp(which, "offload") == 0) {
        char *kept[5], *saved[8];
        for (int i = 0; i < 5; i++) kept[i] = (char *)malloc(size);
        unsigned turn = 0;
        for (unsigned step = 0; step < 30; step++) {
            for (unsigned layer = 0; layer < 8; layer++) {
                saved[layer] = layer % 2 == 0 ? kept[turn++ % 5] : (char *)malloc(size);
                fill(result, size, step, layer);
                CUDA_OK(cudaMemcpyAsync(device, result, size, cudaMemcpyHostToDevice, stream));
                CUDA_OK(cudaMemcpyAsync(saved[layer], device, size, cudaMemcpyDeviceToHost,
                                        stream));
                CUDA_OK(cudaStreamSynchronize(stream));
            }
            for (int layer = 7; layer >= 0; layer--) {
                CUDA_OK(cudaMemcpyAsync(device, saved[layer], size, cudaMemcpyHostToDevice,
                                        stream));
                CUDA_OK(cudaMemcpyAsync(result, device, size, cudaMemcpyDeviceToHost, stream));
                CUDA_OK(cudaStreamSynchronize(stream));
                tally_check(&t, step, count_wrong(result, size, step, (unsigned)layer));
                if (layer % 2 == 1) free(saved[layer]);
            }
        }
        for (int i = 0; i < 5; i++) free(kept[i]);
    } else if (strcmp(which, "sigwait") == 0) {
        /* SIGTERM blocked in every thread of the program and taken with sigtimedwait: a
         * graceful stop, which must reach the program, not end it. */
        sigset_t term;
        sigemptyset(&term);
        sigaddset(&term, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &term, NULL);
        double length = argc > 3 ? atof(argv[3]) : 5000;
        char *buffer = (char *)malloc(size);
        struct timespec none = {0, 0};
        int got = 0;
        double began = now_ms();
        for (unsigned step = 0; !got && now_ms() - began < length; step++) {
            round_trip(&t, buffer, size, step, 1, 1);
            got = sigtimedwait(&term, NULL, &none) == SIGTERM;
            usleep(5000);
        }
        detail("sigwait", "{\"took_sigterm\": %d}", got);
        free(buffer);
    } else if (strcmp(which, "layers") == 0) {
        int n = argc > 3 ? atoi(argv[3]) : 6, steps = argc > 4 ? atoi(argv[4]) : 4;
        double idle = argc > 5 ? atof(argv[5]) : 0;
        int before = argc > 6 ? atoi(argv[6]) : 0;
        char *layers[64], *other = (char *)malloc(size);
        if (n > 64) n = 64;
        for (int i = 0; i < n; i++) layers[i] = (char *)malloc(size);
        if (before > 0) usleep((useconds_t)before * 1000);
        for (int step = 0; step < steps; step++)
            for (int i = 0; i < n; i++)
                round_trip(&t, layers[i], size, (unsigned)step, (unsigned)i, 1);
        double began = now_ms();
        for (unsigned step = 0; now_ms() - began < idle; step++) {
            round_trip(&t, other, size, step, 99, 1);
            usleep(20000);
        }
        for (int i = 0; i < n; i++) free(layers[i]);
        free(other);
    } else if (strcmp(which, "moveto") == 0) {
        int n = argc > 3 ? atoi(argv[3]) : 8, steps = argc > 4 ? atoi(argv[4]) : 4;
        char *layers[64];
        if (n > 64) n = 64;
        int before = argc > 5 ? atoi(argv[5]) : 0;
        for (int i = 0; i < n; i++) {
            layers[i] = (char *)malloc(size);
            fill(layers[i], size, 0, (unsigned)i);
        }
        if (before > 0) usleep((useconds_t)before * 1000);
        for (int step = 0; step < steps; step++)
            for (int i = 0; i < n; i++) {
                int async = (step + i) % 2;
                if (async) {
                    CUDA_OK(cudaMemcpyAsync(device, layers[i], size, cudaMemcpyHostToDevice,
                                            stream));
                    CUDA_OK(cudaStreamSynchronize(stream));
                } else {
                    CUDA_OK(cudaMemcpy(device, layers[i], size, cudaMemcpyHostToDevice));
                }
                free(layers[i]);
                layers[i] = (char *)malloc(size);
                if (async) {
                    CUDA_OK(cudaMemcpyAsync(layers[i], device, size, cudaMemcpyDeviceToHost,
                                            stream));
                    CUDA_OK(cudaStreamSynchronize(stream));
                } else {
                    CUDA_OK(cudaMemcpy(layers[i], device, size, cudaMemcpyDeviceToHost));
                }
                tally_check(&t, (unsigned)step, count_wrong(layers[i], size, 0, (unsigned)i));
            }
        for (int i = 0; i < n; i++) free(layers[i]);
    } else if (strcmp(which, "chunks") == 0) {
        char *blocks[2] = {(char *)malloc(size), (char *)malloc(size)};
        char *plain = (char *)malloc(size);
        size_t row = size / 8;
        for (unsigned step = 0; step < 30; step++) {
            round_trip(&t, plain, size, step, 5, (int)(step % 2));
            for (unsigned i = 0; i < 2; i++) {
                if (step % 6 != 5) {
                    round_trip(&t, blocks[i], size, step, 1 + i, (int)(step % 2));
                    continue;
                }
                fill(blocks[i], size, step, 3 + i);
                if (i == 0) {
                    CUDA_OK(cudaMemcpy2DAsync(device, row, blocks[i], row, row, 8,
                                              cudaMemcpyHostToDevice, stream));
                } else {
                    CUDA_OK(cudaMemcpy2D(device, row, blocks[i], row, row, 8,
                                         cudaMemcpyHostToDevice));
                }
                CUDA_OK(cudaMemcpyAsync(result, device, size, cudaMemcpyDeviceToHost, stream));
                CUDA_OK(cudaStreamSynchronize(stream));
                tally_check(&t, step, count_wrong(result, size, step, 3 + i));
            }
        }
        free(blocks[0]);
        free(blocks[1]);
        free(plain);
        usleep(300 * 1000); /* time for a registration undone off the thread to end */
    } else if (strcmp(which, "shared") == 0) {
        char *host = (char *)malloc(size);
        fill(host, size, 0, 7);
        struct sharer sharers[2] = {{host, size, 0, {0}}, {host, size, 1, {0}}};
        pthread_t threads[2];
        tally_init(&sharers[0].t, "shared-async-2d");
        tally_init(&sharers[1].t, "shared-sync-2d");
        for (int i = 0; i < 2; i++) pthread_create(&threads[i], NULL, share, &sharers[i]);
        for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
        tally_detail(&sharers[0].t);
        tally_detail(&sharers[1].t);
        free(host);
    } else if (strcmp(which, "evict") == 0) {
        evict_size = size;
        evicted = (char *)malloc(size);
        displacer = (char *)malloc(size);
        memset(displacer, 1, size);
        tally_init(&evict_tally, "overwritten-at-once");
        pthread_t threads[2];
        pthread_create(&threads[0], NULL, copy_and_overwrite, NULL);
        pthread_create(&threads[1], NULL, displace, NULL);
        for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
        tally_detail(&evict_tally);
        free(evicted);
        free(displacer);
    } else if (strcmp(which, "steady") == 0) {
        double length = argc > 3 ? atof(argv[3]) : 2000, period = argc > 4 ? atof(argv[4]) : 20;
        if (argc > 5) usleep((useconds_t)(atof(argv[5]) * 1000));
        char *buffers[2] = {(char *)malloc(size), (char *)malloc(size)};
        double began = now_ms();
        for (unsigned step = 0; now_ms() - began < length; step++) {
            for (int i = 0; i < 2; i++) round_trip(&t, buffers[i], size, step, (unsigned)i, 1);
            usleep((useconds_t)(period * 1000));
        }
        free(buffers[0]);
        free(buffers[1]);
    } else if (strcmp(which, "beside") == 0) {
        enum { SMALL = 16 << 10, BUFFERS = 16 };
        mallopt(M_MMAP_THRESHOLD, 64 << 20);
        char *below = (char *)malloc(2 * MIB), *small[BUFFERS], *back = (char *)malloc(SMALL);
        for (int i = 0; i < BUFFERS; i++) small[i] = (char *)malloc(SMALL);
        char *above = (char *)malloc(2 * MIB);
        memset(below, 1, 2 * MIB);
        memset(above, 2, 2 * MIB);
        int async = argc > 3 && strcmp(argv[3], "async") == 0;
        int questions = argc > 3 && strcmp(argv[3], "questions") == 0;
        for (unsigned step = 0; step < 100; step++) {
            for (int i = 0; i < BUFFERS; i++) {
                fill(small[i], SMALL, step, (unsigned)i);
                if (questions) {
                    struct cudaPointerAttributes a;
                    memset(&a, 0xff, sizeof a);
                    CUDA_OK(cudaPointerGetAttributes(&a, small[i]));
                    tally_check(&t, step, a.type != cudaMemoryTypeUnregistered);
                }
                if (async) {
                    CUDA_OK(cudaMemcpyAsync(device, small[i], SMALL, cudaMemcpyHostToDevice, stream));
                    CUDA_OK(cudaStreamSynchronize(stream));
                    CUDA_OK(cudaMemcpyAsync(back, device, SMALL, cudaMemcpyDeviceToHost, stream));
                    CUDA_OK(cudaStreamSynchronize(stream));
                } else {
                    CUDA_OK(cudaMemcpy(device, small[i], SMALL, cudaMemcpyHostToDevice));
                    CUDA_OK(cudaMemcpy(back, device, SMALL, cudaMemcpyDeviceToHost));
                }
                tally_check(&t, step, count_wrong(back, SMALL, step, (unsigned)i));
            }
        }
        tally_check(&t, 100, below[0] != 1 || above[2 * MIB - 1] != 2);
        for (int i = 0; i < BUFFERS; i++) free(small[i]);
        free(back);
        free(below);
        free(above);
    } else if (strcmp(which, "scalar") == 0) {
        char *scalar, *buffer = (char *)malloc(size);
        CUDA_OK(cudaHostAlloc((void **)&scalar, 4, 0));
        for (unsigned step = 0; step < 40; step++) {
            round_trip(&t, buffer, size, step, 1, (int)(step % 2));
            CUDA_OK(cudaMemcpyAsync(scalar, device, 4, cudaMemcpyDeviceToHost, stream));
            CUDA_OK(cudaStreamSynchronize(stream));
            /* The first 4 bytes of the buffer's first word (count_wrong compares whole words). */
            uint64_t first = pattern_word(0, step, 1);
            tally_check(&t, step, memcmp(scalar, &first, 4) != 0);
        }
        CUDA_OK(cudaFreeHost(scalar));
        free(buffer);
    } else if (strcmp(which, "pool") == 0 || strcmp(which, "portable") == 0) {
        double length = argc > 3 ? atof(argv[3]) : 2000, period = argc > 4 ? atof(argv[4]) : 20;
        if (argc > 5) usleep((useconds_t)(atof(argv[5]) * 1000));
        unsigned asked = strcmp(which, "portable") == 0 ? cudaHostAllocPortable : 0;
        char *buffers[2];
        for (int i = 0; i < 2; i++) {
            CUDA_OK(cudaHostAlloc((void **)&buffers[i], size, asked));
            /* CUDA answers with the flags the block was allocated with. */
            unsigned flags = 0;
            CUDA_OK(cudaHostGetFlags(&flags, buffers[i]));
            tally_check(&t, 0, (flags & cudaHostAllocPortable) != asked);
        }
        double began = now_ms();
        for (unsigned step = 0; now_ms() - began < length; step++) {
            for (int i = 0; i < 2; i++) round_trip(&t, buffers[i], size, step, (unsigned)i, 1);
            usleep((useconds_t)(period * 1000));
        }
        for (int i = 0; i < 2; i++) CUDA_OK(cudaFreeHost(buffers[i]));
    } else {
        size_t big = 160 * MIB;
        CUDA_OK(cudaFree(device));
        free(result);
        CUDA_OK(cudaMalloc(&device, big));
        result = (char *)malloc(big);
        char *block = (char *)malloc(big), *pinned, *dataset;
        memset(block, 0, big);
        CUDA_OK(cudaHostAlloc((void **)&pinned, 8 * MIB, 0));
        CUDA_OK(cudaHostAlloc((void **)&dataset, 96 * MIB, 0));
        for (unsigned step = 0; step < 20; step++) {
            round_trip(&t, block + 72 * MIB, 8 * MIB, step, 1, (int)(step % 2));
            round_trip(&t, pinned, 8 * MIB, step, 2, (int)(step % 2));
            round_trip(&t, dataset + 40 * MIB, 8 * MIB, step, 3, (int)(step % 2));
        }
        round_trip(&t, block + 64 * MIB, 24 * MIB, 20, 4, 1);
        round_trip(&t, dataset, 96 * MIB, 20, 5, 0);
        for (unsigned step = 21; step < 41; step++) {
            round_trip(&t, block + 64 * MIB, 24 * MIB, step, 1, (int)(step % 2));
            round_trip(&t, dataset + 40 * MIB, 8 * MIB, step, 3, (int)(step % 2));
        }
        CUDA_OK(cudaFreeHost(pinned));
        CUDA_OK(cudaFreeHost(dataset));
        free(block);
    }
    tally_detail(&t);
    /* The stand-in's witness (a test fixture's export, absent from CUDA): registration calls
     * made while a large copy call ran, or the other way round. */
    long (*beside)(void) = (long (*)(void))standin_hook("standinCallsBesideCopies");
    if (beside) detail("calls_beside_copies", "%ld", beside());
    int error = cudaGetLastError();
    detail("last_error", "%d", error);
    checks++;
    if (error != 0) mismatches++;
    return report();
}
