// Unmodified CUDA C++ program (runtime API only) that checks its own results: malloc'd host
// memory used as CUDA's rules for pageable memory allow, and cudaMallocHost memory used as
// only pinned memory can be (mapped into the device, captured into a graph). No hotpin code.
//
// Build: nvcc -O2 -cudart shared -o c_checks c_checks.cu   (shared: so that an LD_PRELOAD
// interposer can stand in front of the runtime's functions)
//
// Checks, each step counted (a mismatch is a step whose data was wrong):
//   (a) h2d_overwrite: cudaMemcpyAsync H2D from malloc memory on a created stream, the source
//       overwritten at once (a copy from pageable memory has staged it on return);
//   (b) d2h_read_at_once: cudaMemcpyAsync D2H into malloc memory read at once, no sync (a copy
//       into pageable memory is complete on return);
//   (c) free_then_alloc: after an async H2D from a malloc'd block, the block freed, a new one
//       of the same size malloc'd and filled at once; the device must hold the first's data;
//   (d) pointer_attributes / host_get_flags: cudaPointerGetAttributes of malloc memory says
//       cudaMemoryTypeUnregistered (0), cudaHostGetFlags of it fails; of cudaMallocHost memory
//       says cudaMemoryTypeHost (1) and succeeds. The codes are printed under "observed";
//   (g) threads_*: 8 threads, each with its own stream and malloc buffers, doing (a) and (b)
//       20 times;
//   (e) zero_copy: a cudaMallocHost buffer read by a kernel through cudaHostGetDevicePointer;
//   (f) graph_capture: copies from and to cudaMallocHost buffers and a kernel captured into a
//       graph, replayed with new contents.
// Before each asynchronous copy the stream is kept busy (a spinning kernel), so that a copy
// that is really asynchronous has not started when the program touches the memory.
//
// Prints one JSON line: {"program", "seconds", "checks": {name: [checks, mismatches]},
// "observed", "copies", "details"}. Exits 0 when every check ran; 2 when a CUDA call that
// must not fail failed (its message on stderr).
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#define CK(call)                                                                       \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "c_checks: %s:%d: %s: %s (%d)\n", __FILE__, __LINE__, #call,     \
              cudaGetErrorString(e_), (int)e_);                                        \
      exit(2);                                                                         \
    }                                                                                  \
  } while (0)

static const size_t N = (8u << 20) / sizeof(int);  // 8 MiB buffers
static const size_t BYTES = N * sizeof(int);
static const int STEPS = 16;
static const long long DELAY = 10000000LL;         // ~6 ms of spin at 1.75 GHz
static const long long THREAD_DELAY = 3000000LL;
static const int THREADS = 8, THREAD_STEPS = 20;

// Keeps a pointer observable, so that the compiler keeps writes to the block it names.
static void* volatile g_escape;

__host__ __device__ inline int pattern(size_t i, int salt) {
  return (int)((i * 7u) % 1000003u) + salt;
}

__global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

__global__ void fill(int* p, size_t n, int salt) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = pattern(i, salt);
}

__global__ void add(int* p, size_t n, int v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] += v;
}

__global__ void add_from(int* out, const int* in, size_t n, int v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = in[i] + v;
}

static const int GRID = 1024, BLOCK = 256;

struct Tally {
  std::mutex m;
  std::map<std::string, std::pair<long, long>> checks;
  std::map<std::string, std::vector<std::string>> details;
  std::map<std::string, std::string> observed;  // name -> JSON value
  std::atomic<long> h2d{0}, d2h{0}, h2d_bytes{0}, d2h_bytes{0};

  void count(const std::string& name, long bad, const std::string& where) {
    std::lock_guard<std::mutex> g(m);
    auto& c = checks[name];
    c.first += 1;
    if (bad != 0) {
      c.second += 1;
      auto& d = details[name];
      if (d.size() < 5) d.push_back(where + ": " + std::to_string(bad) + " bad");
    }
  }
  void observe(const std::string& name, long value) {
    std::lock_guard<std::mutex> g(m);
    observed[name] = std::to_string(value);
  }
  void copied_h2d(size_t bytes) { h2d += 1; h2d_bytes += (long)bytes; }
  void copied_d2h(size_t bytes) { d2h += 1; d2h_bytes += (long)bytes; }
};
static Tally T;

static void host_fill(int* p, int salt) {
  for (size_t i = 0; i < N; i++) p[i] = pattern(i, salt);
}

static long count_bad(const int* p, int salt, int extra) {
  long bad = 0;
  for (size_t i = 0; i < N; i++) bad += p[i] != pattern(i, salt) + extra;
  return bad;
}

static int salt_of(int step, int which) { return (step + 1) * 1009 + which * 100003; }

static std::string at(int step) { return "step " + std::to_string(step); }

// (a): async H2D from a reused malloc buffer, overwritten at once.
static void h2d_overwrite(cudaStream_t s, int* src, int* back, int* dev) {
  for (int step = 0; step < STEPS; step++) {
    int salt = salt_of(step, 1);
    host_fill(src, salt);
    spin<<<1, 1, 0, s>>>(DELAY);
    CK(cudaMemcpyAsync(dev, src, BYTES, cudaMemcpyHostToDevice, s));
    T.copied_h2d(BYTES);
    memset(src, 0xff, BYTES);  // allowed at once: staged
    CK(cudaStreamSynchronize(s));
    add<<<GRID, BLOCK, 0, s>>>(dev, N, step);
    CK(cudaMemcpyAsync(back, dev, BYTES, cudaMemcpyDeviceToHost, s));
    T.copied_d2h(BYTES);
    CK(cudaStreamSynchronize(s));
    T.count("h2d_overwrite", count_bad(back, salt, step), at(step));
  }
}

// (b): async D2H into a reused malloc buffer, read at once.
static void d2h_read_at_once(cudaStream_t s, int* dst, int* dev) {
  memset(dst, 0, BYTES);
  for (int step = 0; step < STEPS; step++) {
    int salt = salt_of(step, 2);
    fill<<<GRID, BLOCK, 0, s>>>(dev, N, salt);
    spin<<<1, 1, 0, s>>>(DELAY);
    CK(cudaMemcpyAsync(dst, dev, BYTES, cudaMemcpyDeviceToHost, s));
    T.copied_d2h(BYTES);
    T.count("d2h_read_at_once", count_bad(dst, salt, 0), at(step));  // no sync: complete
    CK(cudaStreamSynchronize(s));
  }
}

// (c): async H2D, the source freed, a new block malloc'd and filled at once.
static void free_then_alloc(cudaStream_t s, int* back, int* dev) {
  for (int step = 0; step < STEPS; step++) {
    int salt = salt_of(step, 3);
    int* p = (int*)malloc(BYTES);
    if (!p) { fprintf(stderr, "c_checks: malloc failed\n"); exit(2); }
    host_fill(p, salt);
    spin<<<1, 1, 0, s>>>(DELAY);
    CK(cudaMemcpyAsync(dev, p, BYTES, cudaMemcpyHostToDevice, s));
    T.copied_h2d(BYTES);
    free(p);  // allowed: staged
    int* q = (int*)malloc(BYTES);
    if (!q) { fprintf(stderr, "c_checks: malloc failed\n"); exit(2); }
    g_escape = q;
    memset(q, 0xab, BYTES);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(back, dev, BYTES, cudaMemcpyDeviceToHost));
    T.copied_d2h(BYTES);
    T.count("free_then_alloc", count_bad(back, salt, 0), at(step));
    free(q);
  }
}

// (d): what CUDA says about malloc memory and cudaMallocHost memory.
static void attributes(const char* label, void* p, bool pinned) {
  cudaPointerAttributes a;
  memset(&a, 0, sizeof a);
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  cudaGetLastError();
  T.observe(std::string(label) + "_attr_err", (long)e);
  T.observe(std::string(label) + "_attr_type", e == cudaSuccess ? (long)a.type : -1);
  long want = pinned ? (long)cudaMemoryTypeHost : (long)cudaMemoryTypeUnregistered;
  T.count("pointer_attributes", (e == cudaSuccess && (long)a.type == want) ? 0 : 1, label);
  unsigned int flags = 0;
  cudaError_t f = cudaHostGetFlags(&flags, p);
  cudaGetLastError();
  T.observe(std::string(label) + "_host_get_flags_err", (long)f);
  T.count("host_get_flags", ((f == cudaSuccess) == pinned) ? 0 : 1, label);
}

// (g): per thread, its own stream and buffers: (a) then (b), 20 times.
static void worker(int id) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* src = (int*)malloc(BYTES);
  int* dst = (int*)malloc(BYTES);
  if (!src || !dst) { fprintf(stderr, "c_checks: malloc failed\n"); exit(2); }
  memset(dst, 0, BYTES);
  int* dev;
  CK(cudaMalloc(&dev, BYTES));
  for (int step = 0; step < THREAD_STEPS; step++) {
    int salt = salt_of(step, 10 + id);
    host_fill(src, salt);
    spin<<<1, 1, 0, s>>>(THREAD_DELAY);
    CK(cudaMemcpyAsync(dev, src, BYTES, cudaMemcpyHostToDevice, s));
    T.copied_h2d(BYTES);
    memset(src, 0xff, BYTES);  // allowed at once: staged
    add<<<GRID / 8, BLOCK, 0, s>>>(dev, N, step);
    spin<<<1, 1, 0, s>>>(THREAD_DELAY);
    CK(cudaMemcpyAsync(dst, dev, BYTES, cudaMemcpyDeviceToHost, s));
    T.copied_d2h(BYTES);
    std::string where = "thread " + std::to_string(id) + " " + at(step);
    T.count("threads_d2h_read_at_once", count_bad(dst, salt, step), where);  // no sync
    CK(cudaStreamSynchronize(s));
    // After the sync dst holds what the device holds: wrong here means the H2D was wrong.
    T.count("threads_h2d_overwrite", count_bad(dst, salt, step), where);
  }
  CK(cudaFree(dev));
  free(src);
  free(dst);
  CK(cudaStreamDestroy(s));
}

// (e): zero-copy through the mapped pointer of a cudaMallocHost buffer.
static void zero_copy(cudaStream_t s, int* back, int* dev) {
  int* h = nullptr;
  CK(cudaMallocHost((void**)&h, BYTES));
  attributes("malloc_host", h, true);
  int* mapped = nullptr;
  cudaError_t e = cudaHostGetDevicePointer((void**)&mapped, h, 0);
  cudaGetLastError();
  T.observe("host_get_device_pointer_err", (long)e);
  for (int step = 0; step < 5; step++) {
    int salt = salt_of(step, 4);
    host_fill(h, salt);
    if (e != cudaSuccess) {
      T.count("zero_copy", (long)N, at(step) + " (no device pointer)");
      continue;
    }
    add_from<<<GRID, BLOCK, 0, s>>>(dev, mapped, N, step);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(back, dev, BYTES, cudaMemcpyDeviceToHost));
    T.copied_d2h(BYTES);
    T.count("zero_copy", count_bad(back, salt, step), at(step));
  }
  CK(cudaFreeHost(h));
}

// (f): a graph captured from copies of cudaMallocHost buffers, replayed.
static void graph_capture(cudaStream_t s, int* dev) {
  int *hin = nullptr, *hout = nullptr;
  CK(cudaMallocHost((void**)&hin, BYTES));
  CK(cudaMallocHost((void**)&hout, BYTES));
  host_fill(hin, 0);
  cudaError_t err = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  cudaError_t copy_in = cudaSuccess, copy_out = cudaSuccess, end = cudaSuccess,
              inst = cudaSuccess;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (err == cudaSuccess) {
    copy_in = cudaMemcpyAsync(dev, hin, BYTES, cudaMemcpyHostToDevice, s);
    add<<<GRID, BLOCK, 0, s>>>(dev, N, 1);
    copy_out = cudaMemcpyAsync(hout, dev, BYTES, cudaMemcpyDeviceToHost, s);
    end = cudaStreamEndCapture(s, &graph);
    if (end == cudaSuccess && copy_in == cudaSuccess && copy_out == cudaSuccess && graph)
      inst = cudaGraphInstantiate(&exec, graph, 0);
  }
  cudaGetLastError();
  T.observe("graph_begin_err", (long)err);
  T.observe("graph_copy_in_err", (long)copy_in);
  T.observe("graph_copy_out_err", (long)copy_out);
  T.observe("graph_end_err", (long)end);
  T.observe("graph_instantiate_err", (long)inst);
  bool ok = err == cudaSuccess && copy_in == cudaSuccess && copy_out == cudaSuccess &&
            end == cudaSuccess && inst == cudaSuccess && exec != nullptr;
  for (int r = 0; r < 5; r++) {
    int salt = salt_of(r, 5);
    host_fill(hin, salt);
    memset(hout, 0, BYTES);
    if (!ok) {
      T.count("graph_capture", (long)N, "replay " + std::to_string(r) + " (no graph)");
      continue;
    }
    CK(cudaGraphLaunch(exec, s));
    T.copied_h2d(BYTES);
    T.copied_d2h(BYTES);
    CK(cudaStreamSynchronize(s));
    T.count("graph_capture", count_bad(hout, salt, 1), "replay " + std::to_string(r));
  }
  if (exec) CK(cudaGraphExecDestroy(exec));
  if (graph) CK(cudaGraphDestroy(graph));
  CK(cudaFreeHost(hin));
  CK(cudaFreeHost(hout));
}

static void print_json(double seconds) {
  std::lock_guard<std::mutex> g(T.m);
  printf("{\"program\": \"c_checks\", \"steps\": %d, \"seconds\": %.6f, \"checks\": {", STEPS,
         seconds);
  bool first = true;
  for (auto& c : T.checks) {
    printf("%s\"%s\": [%ld, %ld]", first ? "" : ", ", c.first.c_str(), c.second.first,
           c.second.second);
    first = false;
  }
  printf("}, \"observed\": {");
  first = true;
  for (auto& o : T.observed) {
    printf("%s\"%s\": %s", first ? "" : ", ", o.first.c_str(), o.second.c_str());
    first = false;
  }
  printf("}, \"copies\": {\"h2d\": %ld, \"d2h\": %ld, \"h2d_bytes\": %ld, \"d2h_bytes\": %ld}",
         T.h2d.load(), T.d2h.load(), T.h2d_bytes.load(), T.d2h_bytes.load());
  printf(", \"errors\": {}, \"details\": {");
  first = true;
  for (auto& d : T.details) {
    printf("%s\"%s\": [", first ? "" : ", ", d.first.c_str());
    for (size_t i = 0; i < d.second.size(); i++)
      printf("%s\"%s\"", i ? ", " : "", d.second[i].c_str());
    printf("]");
    first = false;
  }
  printf("}}\n");
  fflush(stdout);
}

int main() {
  // Mapped pinned memory: implied on 64-bit (unified addressing); asked for anyway, before the
  // context exists. A failure here changes nothing below.
  cudaSetDeviceFlags(cudaDeviceMapHost);
  cudaGetLastError();
  CK(cudaFree(0));  // the context
  auto t0 = std::chrono::steady_clock::now();

  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* src = (int*)malloc(BYTES);
  int* back = (int*)malloc(BYTES);
  int* dst = (int*)malloc(BYTES);
  if (!src || !back || !dst) { fprintf(stderr, "c_checks: malloc failed\n"); exit(2); }
  int* dev;
  CK(cudaMalloc(&dev, BYTES));

  h2d_overwrite(s, src, back, dev);
  d2h_read_at_once(s, dst, dev);
  free_then_alloc(s, back, dev);
  attributes("malloc_copied", src, false);  // the buffer (a) copied 16 times
  int* fresh = (int*)malloc(BYTES);
  if (!fresh) { fprintf(stderr, "c_checks: malloc failed\n"); exit(2); }
  g_escape = fresh;
  memset(fresh, 1, BYTES);
  attributes("malloc_fresh", fresh, false);  // never copied
  free(fresh);

  std::vector<std::thread> threads;
  for (int i = 0; i < THREADS; i++) threads.emplace_back(worker, i);
  for (auto& t : threads) t.join();

  zero_copy(s, back, dev);
  graph_capture(s, dev);

  CK(cudaDeviceSynchronize());
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CK(cudaFree(dev));
  free(src);
  free(back);
  free(dst);
  CK(cudaStreamDestroy(s));
  print_json(seconds);
  return 0;
}
