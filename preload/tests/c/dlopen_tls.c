/* A program that loads, with dlopen, libraries whose initialisers allocate above the
 * interposer's floor and which have thread-local storage of their own (built from
 * tests/c/dlopen_tls_lib.c as DIR/libtls_0.so ... libtls_{N-1}.so): what importing a Python
 * extension such as scikit-learn's does. From a second thread too, which loads half of them.
 * Each library's tls_check is checked, and the result printed as JSON.
 * Usage: dlopen_tls DIR N. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct range {
    const char *dir;
    int from, to;
    long checks, mismatches;
};

static void *load(void *arg) {
    struct range *r = arg;
    for (int i = r->from; i < r->to; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/libtls_%d.so", r->dir, i);
        void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
            exit(4);
        }
        long (*check)(void) = (long (*)(void))dlsym(handle, "tls_check");
        if (!check) exit(5);
        r->checks++;
        r->mismatches += check() != 2L * i + 1;
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) return 1;
    int n = atoi(argv[2]);
    struct range first = {argv[1], 0, n / 2, 0, 0}, second = {argv[1], n / 2, n, 0, 0};
    pthread_t thread;
    if (pthread_create(&thread, NULL, load, &second)) return 6;
    load(&first);
    pthread_join(thread, NULL);
    printf("{\"libraries\": %d, \"checks\": %ld, \"mismatches\": %ld}\n", n,
           first.checks + second.checks, first.mismatches + second.mismatches);
    return 0;
}
