/* NNVM LLVM backend: a tiny thread pool linked into every exported lib.so.
 *
 * TVM-generated code reaches its runtime through context pointers
 * (__TVMBackendParallelLaunch, __TVMBackendAllocWorkspace, __TVMBackendFreeWorkspace) that
 * libtvm_runtime fills when it loads a library. A deployment without apache-tvm loads the
 * library with tvm_ffi alone, which fills none of them, so parallel kernels would jump to
 * NULL. This file gives the library its own implementation; the packed function
 * `nnvm_runtime_config(num_threads)` installs it and sizes the pool, in either environment,
 * so a model behaves the same with or without apache-tvm installed.
 *
 * Workers spin briefly on a generation counter (kernel launches come back-to-back) and then
 * sleep on a condition variable. A launch is cut into NNVM_CHUNKS tasks per thread, dealt
 * into one shard of consecutive tasks per thread; every thread, the caller included, claims
 * the tasks of its own shard first and then steals from the others, each claim an atomic
 * step on a shard counter tagged with the launch's generation. The caller waits only for
 * claimed tasks to finish, never for a worker to wake: on a loaded machine a descheduled
 * worker costs nothing, the caller runs its share (a static split made 2-thread runs slower
 * than 1-thread ones under load). Why shards: a task covers the same slice of every
 * kernel's output (TVM cuts a parallel loop by task index), so a thread that keeps its
 * shard from kernel to kernel reads what it wrote into its own core's cache; with one shared
 * counter the slices landed on either thread at random (onnxruntime's pool shards its loop
 * counter per thread the same way).
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <tvm/ffi/c_api.h>

typedef struct { void* sync_handle; int32_t num_task; } NNVMParallelEnv;
typedef int (*NNVMParallelLambda)(int task_id, NNVMParallelEnv* penv, void* cdata);

extern void* __TVMBackendParallelLaunch __attribute__((weak));
extern void* __TVMBackendAllocWorkspace __attribute__((weak));
extern void* __TVMBackendFreeWorkspace __attribute__((weak));

#define NNVM_MAX_THREADS 256
#define NNVM_SPIN 20000
#define NNVM_CHUNKS 4

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t g_launch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t g_workers[NNVM_MAX_THREADS];
static int g_num_threads = 1;     /* including the calling thread */
static int g_num_workers = 0;
static volatile int g_stop = 0;
static uint64_t g_gen = 0;        /* bumped once per launch */
static uint64_t g_start_gen = 0;
static int g_sleepers = 0;
/* one cache line per shard: (generation << 32) | (next task << 16) | end of the shard */
#define NNVM_MAX_SHARDS 64
#define NNVM_MAX_SHARDED_TASKS 0xffff
typedef struct { uint64_t word; char pad[56]; } __attribute__((aligned(64))) NNVMShard;
static NNVMShard g_shards[NNVM_MAX_SHARDS];
static int g_num_shards = 1;
static int g_done = 0;           /* tasks of the current launch finished */
static int g_failed = 0;
static NNVMParallelLambda g_fn;
static void* g_cdata;
static NNVMParallelEnv g_env;
static __thread int t_in_pool = 0;
static __thread int t_home = 0;   /* this thread's shard: the caller's 0, worker i's i */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Claim and run tasks of launch `gen`, the shard `home` first, until none is left (or a
 * newer launch began). A successful claim of `gen` pins the launch: its caller waits for the
 * claimed task, so g_fn, g_cdata and g_env read after the claim are that launch's. */
static void run_tasks(uint32_t gen, int home) {
  int shards = g_num_shards;
  for (int k = 0; k < shards; ++k) {
    NNVMShard* shard = &g_shards[(home + k) % shards];
    for (;;) {
      uint64_t cur = __atomic_load_n(&shard->word, __ATOMIC_ACQUIRE);
      if ((uint32_t)(cur >> 32) != gen) return;
      uint32_t next = (uint32_t)(cur >> 16) & 0xffff, end = (uint32_t)cur & 0xffff;
      if (next >= end) break;  /* this shard is used up: steal from the next one */
      if (!__atomic_compare_exchange_n(&shard->word, &cur, cur + (1u << 16), 0,
                                       __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        continue;
      if (g_fn((int)next, &g_env, g_cdata) != 0) __atomic_store_n(&g_failed, 1, __ATOMIC_RELAXED);
      __atomic_add_fetch(&g_done, 1, __ATOMIC_ACQ_REL);
    }
  }
}

static void ws_release_thread(void);

static void* worker_main(void* arg) {
  int home = (int)(intptr_t)arg;  /* this worker's shard (the caller's is 0) */
  uint64_t seen = g_start_gen;  /* a launch may bump g_gen before this thread first runs */
  t_in_pool = 1;
  t_home = home;
  for (;;) {
    int spins = 0;
    while (__atomic_load_n(&g_gen, __ATOMIC_ACQUIRE) == seen && !g_stop) {
      if (++spins < NNVM_SPIN) {
        /* a spinning worker gives its core away now and then: on a machine with more
         * runnable threads than cores it would otherwise take time from the thread that
         * will launch the next kernel (idle, sched_yield returns at once) */
        if ((spins & 63) == 0) sched_yield(); else cpu_relax();
        continue;
      }
      pthread_mutex_lock(&g_mu);
      __atomic_add_fetch(&g_sleepers, 1, __ATOMIC_SEQ_CST);
      while (__atomic_load_n(&g_gen, __ATOMIC_SEQ_CST) == seen && !g_stop)
        pthread_cond_wait(&g_cv, &g_mu);
      __atomic_sub_fetch(&g_sleepers, 1, __ATOMIC_SEQ_CST);
      pthread_mutex_unlock(&g_mu);
    }
    if (g_stop) {
      ws_release_thread();  /* a stopped worker's cached scratch blocks go back to libc */
      return NULL;
    }
    seen = __atomic_load_n(&g_gen, __ATOMIC_ACQUIRE);
    run_tasks((uint32_t)seen, home % g_num_shards);
  }
}

static void stop_workers(void) {
  pthread_mutex_lock(&g_mu);
  g_stop = 1;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  for (int i = 0; i < g_num_workers; ++i) pthread_join(g_workers[i], NULL);
  g_num_workers = 0;
  g_stop = 0;
}

static void start_workers(int num_threads) {
  g_num_threads = num_threads;
  g_num_shards = num_threads < NNVM_MAX_SHARDS ? num_threads : NNVM_MAX_SHARDS;
  g_start_gen = __atomic_load_n(&g_gen, __ATOMIC_ACQUIRE);
  for (int i = 1; i < num_threads; ++i) {
    if (pthread_create(&g_workers[i - 1], NULL, worker_main, (void*)(intptr_t)i) != 0) {
      g_num_threads = i;
      break;
    }
    g_num_workers = i;
  }
}

static int nnvm_parallel_launch(NNVMParallelLambda fn, void* cdata, int num_task) {
  NNVMParallelEnv env = {NULL, num_task > 0 ? num_task : g_num_threads * NNVM_CHUNKS};
  if (t_in_pool || g_num_threads <= 1 || env.num_task == 1 ||
      env.num_task > NNVM_MAX_SHARDED_TASKS || pthread_mutex_trylock(&g_launch_mu) != 0) {
    env.num_task = num_task > 0 ? num_task : 1;
    for (int t = 0; t < env.num_task; ++t)  /* nested or concurrent launch: run inline */
      if (fn(t, &env, cdata) != 0) return -1;
    return 0;
  }
  uint32_t gen = (uint32_t)(g_gen + 1);
  g_fn = fn; g_cdata = cdata; g_env = env; g_failed = 0;
  __atomic_store_n(&g_done, 0, __ATOMIC_RELEASE);
  for (int s = 0, n = env.num_task, shards = g_num_shards; s < shards; ++s) {
    uint64_t begin = (uint64_t)s * n / shards, end = (uint64_t)(s + 1) * n / shards;
    __atomic_store_n(&g_shards[s].word, ((uint64_t)gen << 32) | (begin << 16) | end,
                     __ATOMIC_RELEASE);
  }
  __atomic_store_n(&g_gen, g_gen + 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&g_sleepers, __ATOMIC_SEQ_CST) > 0) {
    pthread_mutex_lock(&g_mu);
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
  }
  t_in_pool = 1;
  run_tasks(gen, 0);
  t_in_pool = 0;
  for (int spins = 0; __atomic_load_n(&g_done, __ATOMIC_ACQUIRE) < env.num_task; ++spins) {
    if (spins < 2000) cpu_relax(); else sched_yield();  /* a claimed task still running */
  }
  int failed = g_failed;
  pthread_mutex_unlock(&g_launch_mu);
  return failed ? -1 : 0;
}

/* The steps of a recurrence inside ONE launch (recurrent_loop's claimed steps): each step's
 * units are cut into `parts`, and every task of the launch loops over the steps, claiming
 * parts of the current step until none is left, then waiting for the step's claimed parts
 * to finish. Why not a launch per step: on a 64-step 128-unit GRU the launch and the
 * claims of its tasks (two contended atomics a task) cost about what the split step saved
 * (2 threads no faster than 1). Why not a barrier that waits for every task (TVM's
 * TVMBackendParallelBarrier): this pool lets one thread run a launch's tasks in turn when
 * a worker is late (asleep or descheduled), so a task waiting for all the others could
 * wait for one its own thread has yet to run. Here a thread waits only for parts someone
 * claimed, which a running thread is computing; a late worker finds the parts it would
 * have taken done by the others and joins at the step they reached. The state is one word
 * in the kernel's own buffer, zeroed before the launch:
 * (step << 32) | (mask of claimed parts << 16) | count of parts done. */
#define NNVM_STEP_PARTS_MAX 8

/* Parts a step is cut into: one per pool thread (at most NNVM_STEP_PARTS_MAX and `units`);
 * 1 (run the steps serially, no launch) at one thread or inside another launch's task. */
int32_t nnvm_step_parts(int32_t units) {
  int n = t_in_pool ? 1 : g_num_threads;
  if (n > NNVM_STEP_PARTS_MAX) n = NNVM_STEP_PARTS_MAX;
  return units < n ? units : n;
}

/* A part of `step` for the calling thread, its own (shard index mod parts) first so each
 * core keeps reading the same weight rows from its own cache; -1 when every part is taken
 * or the step is over. */
int32_t nnvm_step_claim(uint64_t* state, int32_t step, int32_t parts) {
  uint64_t cur = __atomic_load_n(state, __ATOMIC_ACQUIRE);
  uint32_t all = (1u << parts) - 1, home = 1u << (t_home % parts);
  for (;;) {
    if ((uint32_t)(cur >> 32) != (uint32_t)step) return -1;
    uint32_t free = ~(uint32_t)(cur >> 16) & all;
    if (free == 0) return -1;
    uint32_t pick = (free & home) ? home : (free & (0u - free));
    if (__atomic_compare_exchange_n(state, &cur, cur | ((uint64_t)pick << 16), 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return __builtin_ctz(pick);
  }
}

/* A claimed part of `step` is finished (its writes released); the last one opens the next
 * step. */
int32_t nnvm_step_done(uint64_t* state, int32_t step, int32_t parts) {
  uint64_t cur = __atomic_load_n(state, __ATOMIC_RELAXED);
  for (;;) {
    uint64_t next = (cur & 0xffff) + 1 == (uint64_t)parts
        ? (uint64_t)(uint32_t)(step + 1) << 32 : cur + 1;
    if (__atomic_compare_exchange_n(state, &cur, next, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED))
      return 0;
  }
}

/* Wait until `step` is over (every part of it done); returns the step now open, which is
 * past `step` by more than one when this thread joined late. */
int32_t nnvm_step_wait(uint64_t* state, int32_t step) {
  for (int spins = 0;; ++spins) {
    uint64_t cur = __atomic_load_n(state, __ATOMIC_ACQUIRE);
    if ((uint32_t)(cur >> 32) != (uint32_t)step) return (int32_t)(cur >> 32);
    if (spins < 2000) cpu_relax(); else sched_yield();  /* a claimed part still running */
  }
}

/* Workspace (a kernel's materialised intermediates, e.g. conv padding): freed blocks are
 * kept for the next call. Plain malloc/free would mmap and unmap large blocks on every
 * kernel call, and the page faults cost more than the kernel. */
#define NNVM_WS_SLOTS 64
typedef struct { void* ptr; uint64_t size; } NNVMBlock;
static NNVMBlock g_ws_free[NNVM_WS_SLOTS];
static int g_ws_count = 0;
static pthread_mutex_t g_ws_mu = PTHREAD_MUTEX_INITIALIZER;

/* Each block carries its size in a 64-byte header (alignment kept), and every thread keeps
 * its own few freed blocks: kernels allocate their register-tile scratch inside parallel
 * loops, once per iteration, and one mutex around a shared free list made 2-thread
 * depthwise convolutions 3x slower than 1-thread ones (measured with perf: futex waits). */
#define NNVM_WS_HEADER 64
#define NNVM_TLS_SLOTS 8
static __thread NNVMBlock t_ws_free[NNVM_TLS_SLOTS];
static __thread int t_ws_count = 0;

static void ws_release_thread(void) {
  while (t_ws_count > 0) free(t_ws_free[--t_ws_count].ptr);
}

static void* ws_user(void* block, uint64_t size) {
  *(uint64_t*)block = size;
  return (char*)block + NNVM_WS_HEADER;
}

/* The thread's own list is kept in order of freeing, newest last: a block is looked for
 * from the newest, and a free into a full list pushes the oldest block out to the shared
 * list. Why: kernels free and reallocate the same scratch size once per loop iteration, so
 * the newest block is the one wanted next. The list used to keep its first eight blocks
 * forever and send every later free to the shared, locked list; in a process whose list
 * had filled with blocks of other kernels' sizes, every per-iteration allocation of both
 * threads then went through the mutex (perf: ~20% of samples in pthread_mutex_lock and
 * futex calls), and a 2-thread MNASNet run took 6.5 ms instead of 2.7 ms in some
 * processes and not in others. */
static int ws_fits(uint64_t have, uint64_t want) { return have >= want && have <= 2 * want; }

static void* nnvm_alloc_workspace(int device_type, int device_id, uint64_t nbytes,
                                  int dtype_code, int dtype_bits) {
  void* ptr = NULL;
  (void)device_type; (void)device_id; (void)dtype_code; (void)dtype_bits;
  if (nbytes == 0) nbytes = 64;
  for (int i = t_ws_count - 1; i >= 0; --i) {
    if (ws_fits(t_ws_free[i].size, nbytes)) {
      NNVMBlock hit = t_ws_free[i];
      memmove(&t_ws_free[i], &t_ws_free[i + 1], (size_t)(t_ws_count - 1 - i) * sizeof(NNVMBlock));
      --t_ws_count;
      return ws_user(hit.ptr, hit.size);
    }
  }
  pthread_mutex_lock(&g_ws_mu);
  for (int i = g_ws_count - 1; i >= 0; --i) {
    if (ws_fits(g_ws_free[i].size, nbytes)) {
      NNVMBlock hit = g_ws_free[i];
      g_ws_free[i] = g_ws_free[--g_ws_count];
      pthread_mutex_unlock(&g_ws_mu);
      return ws_user(hit.ptr, hit.size);
    }
  }
  pthread_mutex_unlock(&g_ws_mu);
  if (posix_memalign(&ptr, 64, nbytes + NNVM_WS_HEADER) != 0) return NULL;
  return ws_user(ptr, nbytes);
}

/* A block pushed out of a thread's list goes to the shared list, or back to libc when that
 * is full too. */
static void ws_release_shared(NNVMBlock b) {
  pthread_mutex_lock(&g_ws_mu);
  if (g_ws_count < NNVM_WS_SLOTS) {
    g_ws_free[g_ws_count++] = b;
    b.ptr = NULL;
  }
  pthread_mutex_unlock(&g_ws_mu);
  free(b.ptr);
}

static int nnvm_free_workspace(int device_type, int device_id, void* ptr) {
  (void)device_type; (void)device_id;
  if (ptr == NULL) return 0;
  void* block = (char*)ptr - NNVM_WS_HEADER;
  if (t_ws_count == NNVM_TLS_SLOTS) {
    NNVMBlock oldest = t_ws_free[0];
    memmove(&t_ws_free[0], &t_ws_free[1], (size_t)(NNVM_TLS_SLOTS - 1) * sizeof(NNVMBlock));
    --t_ws_count;
    ws_release_shared(oldest);
  }
  t_ws_free[t_ws_count].ptr = block;
  t_ws_free[t_ws_count].size = *(uint64_t*)block;
  ++t_ws_count;
  return 0;
}

static int default_threads(void) {
  const char* env = getenv("TVM_NUM_THREADS");
  if (!env || !*env) env = getenv("OMP_NUM_THREADS");
  int n = env && *env ? atoi(env) : (int)sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (n > NNVM_MAX_THREADS ? NNVM_MAX_THREADS : n);
}

/* Packed function: nnvm_runtime_config(num_threads: int) -> int (threads in use).
 * 0 or less picks TVM_NUM_THREADS, then OMP_NUM_THREADS, then the online CPU count. */
int __tvm_ffi_nnvm_runtime_config(void* self, const TVMFFIAny* args, int32_t num_args,
                                  TVMFFIAny* result) {
  (void)self;
  int want = 0;
  if (num_args > 0 && args[0].type_index == kTVMFFIInt) want = (int)args[0].v_int64;
  if (want <= 0) want = default_threads();
  if (want > NNVM_MAX_THREADS) want = NNVM_MAX_THREADS;
  if (&__TVMBackendParallelLaunch) __TVMBackendParallelLaunch = (void*)nnvm_parallel_launch;
  if (&__TVMBackendAllocWorkspace) __TVMBackendAllocWorkspace = (void*)nnvm_alloc_workspace;
  if (&__TVMBackendFreeWorkspace) __TVMBackendFreeWorkspace = (void*)nnvm_free_workspace;
  pthread_mutex_lock(&g_launch_mu);
  if (want != g_num_threads) {
    stop_workers();
    start_workers(want);
  }
  pthread_mutex_unlock(&g_launch_mu);
  result->type_index = kTVMFFIInt;
  result->zero_padding = 0;
  result->v_int64 = g_num_threads;
  return 0;
}
