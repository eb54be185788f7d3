// What a fork costs a process shaped like a PyTorch one (#40 item 1, the cannot-help set's
// forks): THREADS idle threads, MIB MiB touched, then FORKS forks, each child exiting at once
// and waited for. Prints one JSON line: microseconds a fork (median of the forks), and the
// process's threads and mappings. Nothing of CUDA's: what hotpin's state adds to fork(2) itself.
// Usage: forks THREADS MIB FORKS
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static void *idle(void *arg) {
  (void)arg;
  pthread_mutex_lock(&m);
  for (;;) pthread_cond_wait(&c, &m);
  return NULL;
}
static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
int main(int argc, char **argv) {
  if (argc != 4) { fprintf(stderr, "usage: forks THREADS MIB FORKS\n"); return 2; }
  int threads = atoi(argv[1]), mib = atoi(argv[2]), forks = atoi(argv[3]);
  if (threads < 0 || mib < 0 || forks < 1) { fprintf(stderr, "forks: bad arguments\n"); return 2; }
  for (int i = 0; i < threads; i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, idle, NULL) != 0) { perror("pthread_create"); return 1; }
  }
  char *mem = malloc((size_t)mib << 20);
  if (!mem && mib) { perror("malloc"); return 1; }
  memset(mem, 1, (size_t)mib << 20);
  double *us = malloc(sizeof(double) * (size_t)forks);
  if (!us) return 1;
  int wrong = 0;
  for (int i = 0; i < forks; i++) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pid_t pid = fork();
    if (pid == 0) _exit(mem && mib ? mem[(size_t)i % ((size_t)mib << 20)] : 1);
    if (pid < 0) { perror("fork"); return 1; }
    int status;
    waitpid(pid, &status, 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    wrong += !(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    us[i] = (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3;
  }
  qsort(us, (size_t)forks, sizeof(double), cmp);
  // The process's threads and mappings as the kernel counts them (hotpin's own included).
  int now = 0, maps = 0;
  char line[512];
  FILE *f = fopen("/proc/self/status", "r");
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Threads:", 8)) now = atoi(line + 8);
  if (f) fclose(f);
  f = fopen("/proc/self/maps", "r");
  while (f && fgets(line, sizeof line, f))
    maps += strchr(line, '\n') != NULL;
  if (f) fclose(f);
  printf("{\"fork_us\": %.1f, \"threads\": %d, \"maps\": %d, \"mismatches\": %d}\n", us[forks / 2], now, maps, wrong);
  return 0;
}
