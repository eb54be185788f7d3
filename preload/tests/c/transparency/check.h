/* What every transparency program shares: deterministic data, comparison, the one JSON line
 * it prints, and failing on an unexpected CUDA error. Plain C (and C++, for nvcc -x cu). */
#ifndef TRANSPARENCY_CHECK_H
#define TRANSPARENCY_CHECK_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_decls.h"

#define MIB ((size_t)1024 * 1024)

/* The 64-bit word at `index` of the data for (step, tag): never 0xEEEE... or 0. */
static inline uint64_t pattern_word(size_t index, unsigned step, unsigned tag) {
    uint64_t x = (uint64_t)index * 0x9E3779B97F4A7C15ull;
    x ^= ((uint64_t)step << 40) ^ ((uint64_t)tag << 20) ^ 0xD1B54A32D192ED03ull;
    x ^= x >> 29;
    return x | 1;
}

/* Fills `size` bytes (a multiple of 8) with the data for (step, tag). */
static inline void fill(void *buffer, size_t size, unsigned step, unsigned tag) {
    uint64_t *words = (uint64_t *)buffer;
    for (size_t i = 0; i < size / 8; i++) words[i] = pattern_word(i, step, tag);
}

/* How many of the 64-bit words of `buffer` differ from the data for (step, tag). */
static inline size_t count_wrong(const void *buffer, size_t size, unsigned step, unsigned tag) {
    const volatile uint64_t *words = (const volatile uint64_t *)buffer;
    size_t wrong = 0;
    for (size_t i = 0; i < size / 8; i++) wrong += words[i] != pattern_word(i, step, tag);
    return wrong;
}

/* The one JSON line: {"program", "checks", "mismatches", "details"}. Details are collected
 * as "key": value pairs (values already JSON) by the main thread. */
static const char *program_name = "?";
static long checks, mismatches; /* the main thread's tallies */
static char details[8192];
static size_t details_len;

static inline void detail(const char *key, const char *fmt, ...) {
    if (details_len + 8 >= sizeof details) return;
    int n = snprintf(details + details_len, sizeof details - details_len, "%s\"%s\": ",
                     details_len ? ", " : "", key);
    if (n < 0) return;
    details_len += (size_t)n;
    if (details_len >= sizeof details) { details_len = sizeof details - 1; return; }
    va_list args;
    va_start(args, fmt);
    n = vsnprintf(details + details_len, sizeof details - details_len, fmt, args);
    va_end(args);
    if (n < 0) return;
    details_len += (size_t)n;
    if (details_len >= sizeof details) details_len = sizeof details - 1;
}

static inline int report(void) {
    printf("{\"program\": \"%s\", \"checks\": %ld, \"mismatches\": %ld, \"details\": {%s}}\n",
           program_name, checks, mismatches, details);
    fflush(stdout);
    return mismatches == 0 ? 0 : 1;
}

/* One kind of check (a variant) and how it went. */
struct tally {
    const char *name;
    long checks, mismatches, wrong_words;
    long first_bad_step;
};

static inline void tally_init(struct tally *t, const char *name) {
    t->name = name;
    t->checks = t->mismatches = t->wrong_words = 0;
    t->first_bad_step = -1;
}

/* Records one check: `wrong` bad words at `step`; adds it to the program's totals. */
static inline void tally_check(struct tally *t, long step, size_t wrong) {
    t->checks++;
    checks++;
    if (wrong) {
        t->mismatches++;
        mismatches++;
        t->wrong_words += (long)wrong;
        if (t->first_bad_step < 0) t->first_bad_step = step;
    }
}

static inline void tally_detail(const struct tally *t) {
    detail(t->name, "{\"checks\": %ld, \"mismatches\": %ld, \"wrong_words\": %ld, "
           "\"first_bad_step\": %ld}", t->checks, t->mismatches, t->wrong_words,
           t->first_bad_step);
}

/* An unexpected CUDA error: the JSON line says which call, and the program exits 2. */
static inline void cuda_failed(const char *call, int code) {
    detail("cuda_error", "{\"call\": \"%s\", \"code\": %d}", call, code);
    report();
    exit(2);
}

/* A host function that keeps its stream busy for 2 ms. Launched before an asynchronous copy,
 * it makes sure that a copy which is really asynchronous (from or to pinned memory) has not
 * started when the program goes on to touch the memory, so that a program relying on the
 * pageable rules fails every time rather than by chance if its memory was pinned. Legal
 * CUDA: the host function makes no CUDA call. */
static inline void busy_stream(void *unused) {
    (void)unused;
    struct timespec pause = {0, 2 * 1000 * 1000};
    nanosleep(&pause, NULL);
}

#define STALL(stream) CUDA_OK(cudaLaunchHostFunc((stream), busy_stream, NULL))

#define CUDA_OK(call)                                                     \
    do {                                                                  \
        int cuda_ok_rc_ = (int)(call);                                    \
        if (cuda_ok_rc_ != 0) cuda_failed(#call, cuda_ok_rc_);         \
    } while (0)

#endif
