/* A process's life cycle under the tracer, with the CUDA stand-in (a test fixture, not CUDA):
 * the parent copies, forks a child that copies and exits, forks a child that execs another
 * program (transfer-bench) that copies, forks a child that copies until it is killed, unloads
 * the CUDA runtime (dlclose) and loads it again, and copies once more.
 * Usage: family RUNTIME DRIVER TRANSFER_BENCH. Prints the pids as JSON. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*memcpy_fn)(void *, const void *, size_t, int);
typedef int (*malloc_fn)(void **, size_t);

static void *device;

static memcpy_fn load(const char *runtime, void **handle) {
    *handle = dlopen(runtime, RTLD_NOW);
    if (!*handle) exit(10);
    memcpy_fn copy = (memcpy_fn)dlsym(*handle, "cudaMemcpy");
    malloc_fn alloc = (malloc_fn)dlsym(*handle, "cudaMalloc");
    if (!copy || !alloc || (!device && alloc(&device, 4096) != 0)) exit(11);
    return copy;
}

static void copies(memcpy_fn copy, int n) {
    char host[64] = {0};
    for (int i = 0; i < n; i++)
        if (copy(device, host, sizeof host, 1) != 0) exit(12);
}

int main(int argc, char **argv) {
    if (argc < 4 || !dlopen(argv[2], RTLD_NOW)) return 1;
    void *rt;
    memcpy_fn copy = load(argv[1], &rt);
    copies(copy, 10);

    pid_t worker = fork();
    if (worker == 0) {
        copies(copy, 20);
        _exit(0);
    }
    pid_t execd = fork();
    if (execd == 0) {
        execl(argv[3], argv[3], "--cudart", argv[1], "--size", "4K", "--hot", "1", "--transfers",
              "3", "--cold", "1", (char *)NULL);
        _exit(13);
    }
    pid_t killed = fork();
    if (killed == 0) {
        for (;;) copies(copy, 1);
    }
    int status;
    if (waitpid(worker, &status, 0) < 0 || status != 0) return 2;
    if (waitpid(execd, &status, 0) < 0 || status != 0) return 3;
    usleep(300 * 1000);
    kill(killed, SIGKILL);
    waitpid(killed, &status, 0);

    /* Unload the runtime and load it again: its probes must still fire. */
    dlclose(rt);
    copy = load(argv[1], &rt);
    copies(copy, 5);
    printf("{\"parent\": %d, \"worker\": %d, \"execd\": %d, \"killed\": %d}\n", getpid(), worker,
           execd, killed);
    return 0;
}
