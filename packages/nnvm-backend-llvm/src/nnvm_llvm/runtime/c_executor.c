/* The C executor behind Python's lib.run() on the llvm target: one FFI call per run.
 *
 * Why: a Python loop of `fn(*tensors)` calls costs about a microsecond of interpreter and
 * FFI work per kernel, which on small streaming models (a VAD or wake-word step of a few
 * dozen tiny kernels) is as much as the kernels themselves. This executor holds the same
 * tables as the exported C library (deploy/nnvm_model.c): one DLTensor per buffer, the
 * steps and their tensor ids, and runs them with the same loop (deploy/nnvm_executor.h).
 *
 * The buffers stay NumPy arrays owned by the Python module (same addresses for its life).
 * A kernel is called through its own symbol in the module's library (self = NULL, as the
 * exported C library calls it: the tvm_ffi Function's safe_call would add a C++ closure, an
 * exception guard and a result check, ~4 ns of a one-element kernel's 13 ns), or, where
 * the symbol cannot be had, through the Function's TVMFFIFunctionCell as TVMFFIFunctionCall
 * would; either way the library stays alive with the Python module. Loaded with tvm_ffi,
 * so the functions below are packed functions and errors travel as TVM FFI errors (the
 * Python caller sees the kernel's own message). One nnvm_exec serves one module; the
 * module's lock serialises its runs; each kernel's arguments are packed once, at create
 * (kernels only read them), and nothing else is written during a run, so different modules
 * run concurrently.
 *
 * Measured and not taken: kernels built without TVM's argument checks (PassContext
 * "tirx.disable_assert"; the executor's tensors are right by construction) ran no faster
 * through this loop (one-element Relu 6.6 ns, AveragePool 2x3x6x1 9.4 -> 10.9, MaxPool
 * 2x10x4 12.0 -> 11.4: the predicted branches overlap the kernel), and a failing kernel would
 * then write out of bounds instead of raising.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dlpack/dlpack.h>
#include <tvm/ffi/c_api.h>

#include "nnvm_executor.h"

#define NNVM_EXPORT __attribute__((visibility("default")))

typedef struct {
  int32_t num_tensors, num_steps, num_funcs;
  int32_t failed_step;
  DLTensor *tensors;
  int64_t *shapes;
  nnvm_kernel *kernels;
  nnvm_step_desc *steps;
  TVMFFIAny *args; /* every step's arguments, packed once (nnvm_pack_args) */
} nnvm_exec;

static int set_error(const char *kind, const char *msg) {
  const char *parts[1] = {msg};
  TVMFFIErrorSetRaisedFromCStrParts(kind, parts, 1);
  return -1;
}

static int64_t arg_int(const TVMFFIAny *args, int i) { return args[i].v_int64; }

static int return_int(TVMFFIAny *ret, int64_t v) {
  ret->type_index = kTVMFFIInt;
  ret->zero_padding = 0;
  ret->v_int64 = v;
  return 0;
}

static void exec_free(nnvm_exec *e) {
  if (!e) return;
  free(e->tensors);
  free(e->shapes);
  free(e->kernels);
  free(e->steps);
  free(e->args);
  free(e);
}

static void *copy_of(int64_t src, size_t nbytes) {
  void *p = malloc(nbytes ? nbytes : 1);
  if (p && nbytes) memcpy(p, (const void *)(intptr_t)src, nbytes);
  return p;
}

/* nnvm_exec_create(num_tensors, tensors, shapes, num_shapes, num_funcs, funcs, num_steps,
 *                  steps, step_args, num_step_args) -> handle
 * All array arguments are addresses of C-contiguous arrays, copied here:
 *   tensors:   int64[num_tensors][5]  data address, ndim, offset into shapes, dtype code, bits
 *   shapes:    int64[num_shapes]
 *   funcs:     int64[num_funcs][2]    (address, is_symbol): a kernel's own symbol when
 *                                     is_symbol, else a tvm_ffi Function handle (both kept
 *                                     alive by the caller)
 *   steps:     int32[num_steps][3]    func, nargs, offset into step_args
 *   step_args: int32[num_step_args]   tensor ids */
NNVM_EXPORT int __tvm_ffi_nnvm_exec_create(void *self, const TVMFFIAny *args, int32_t n,
                                           TVMFFIAny *ret) {
  (void)self;
  if (n != 10) return set_error("TypeError", "nnvm_exec_create takes 10 integer arguments");
  for (int i = 0; i < n; ++i)
    if (args[i].type_index != kTVMFFIInt)
      return set_error("TypeError", "nnvm_exec_create: every argument is an integer");
  nnvm_exec *e = (nnvm_exec *)calloc(1, sizeof *e);
  if (!e) return set_error("MemoryError", "nnvm_exec_create: out of memory");
  e->num_tensors = (int32_t)arg_int(args, 0);
  int64_t num_shapes = arg_int(args, 3);
  e->num_funcs = (int32_t)arg_int(args, 4);
  e->num_steps = (int32_t)arg_int(args, 6);
  int64_t num_step_args = arg_int(args, 9);
  const int64_t *tab = (const int64_t *)(intptr_t)arg_int(args, 1);
  const int64_t *funcs = (const int64_t *)(intptr_t)arg_int(args, 5);
  e->shapes = (int64_t *)copy_of(arg_int(args, 2), (size_t)num_shapes * sizeof(int64_t));
  e->steps = (nnvm_step_desc *)copy_of(arg_int(args, 7),
                                       (size_t)e->num_steps * sizeof(nnvm_step_desc));
  const int32_t *step_args = (const int32_t *)(intptr_t)arg_int(args, 8);
  e->args = (TVMFFIAny *)calloc((size_t)num_step_args + 1, sizeof(TVMFFIAny));
  e->tensors = (DLTensor *)calloc((size_t)e->num_tensors + 1, sizeof(DLTensor));
  e->kernels = (nnvm_kernel *)calloc((size_t)e->num_funcs + 1, sizeof(nnvm_kernel));
  if (!e->shapes || !e->steps || !e->args || !e->tensors || !e->kernels) {
    exec_free(e);
    return set_error("MemoryError", "nnvm_exec_create: out of memory");
  }
  for (int32_t i = 0; i < e->num_tensors; ++i) {
    const int64_t *d = tab + 5 * i;
    if (d[2] < 0 || d[2] + d[1] > num_shapes) {
      exec_free(e);
      return set_error("ValueError", "nnvm_exec_create: a tensor's shape lies outside shapes");
    }
    nnvm_tensor_init(&e->tensors[i], (void *)(intptr_t)d[0], (int32_t)d[1],
                     e->shapes + d[2], (uint8_t)d[3], (uint8_t)d[4]);
  }
  for (int32_t i = 0; i < e->num_funcs; ++i) {
    void *addr = (void *)(intptr_t)funcs[2 * i];
    if (!addr) {
      exec_free(e);
      return set_error("ValueError", "nnvm_exec_create: a kernel address is NULL");
    }
    if (funcs[2 * i + 1]) { /* the symbol itself: TVM's packed convention, self unused */
      e->kernels[i].call = (TVMFFISafeCallType)addr;
      e->kernels[i].self = NULL;
      continue;
    }
    /* A Function object is a TVMFFIObject header followed by its TVMFFIFunctionCell. */
    TVMFFIFunctionCell *cell = (TVMFFIFunctionCell *)((char *)addr + sizeof(TVMFFIObject));
    e->kernels[i].call = cell->safe_call;
    e->kernels[i].self = addr;
  }
  for (int32_t s = 0; s < e->num_steps; ++s) {
    const nnvm_step_desc *st = &e->steps[s];
    if (st->func < 0 || st->func >= e->num_funcs || st->nargs < 0 || st->args_off < 0 ||
        (int64_t)st->args_off + st->nargs > num_step_args) {
      exec_free(e);
      return set_error("ValueError", "nnvm_exec_create: a step names a kernel or arguments "
                                 "outside the tables");
    }
    for (int a = 0; a < st->nargs; ++a) {
      int32_t t = step_args[st->args_off + a];
      if (t < 0 || t >= e->num_tensors) {
        exec_free(e);
        return set_error("ValueError", "nnvm_exec_create: a step argument is not a tensor id");
      }
    }
  }
  nnvm_pack_args(step_args, (int32_t)num_step_args, e->tensors, e->args);
  e->failed_step = -1;
  return return_int(ret, (int64_t)(intptr_t)e);
}

/* nnvm_exec_run(handle, lo, hi): runs steps [lo, hi); a kernel's error is re-raised. */
NNVM_EXPORT int __tvm_ffi_nnvm_exec_run(void *self, const TVMFFIAny *args, int32_t n,
                                        TVMFFIAny *ret) {
  (void)self;
  (void)ret;
  if (n != 3) return set_error("TypeError", "nnvm_exec_run takes (handle, lo, hi)");
  nnvm_exec *e = (nnvm_exec *)(intptr_t)arg_int(args, 0);
  int lo = (int)arg_int(args, 1), hi = (int)arg_int(args, 2);
  if (!e || lo < 0 || hi > e->num_steps || lo > hi)
    return set_error("ValueError", "nnvm_exec_run: step range outside the plan");
  e->failed_step = nnvm_run_packed(e->kernels, e->steps, e->args, lo, hi);
  return e->failed_step < 0 ? 0 : -1;
}

/* nnvm_exec_time(handle, lo, hi, repeat) -> nanoseconds that `repeat` back-to-back runs of
 * steps [lo, hi) took, timed here with CLOCK_MONOTONIC: lib.benchmark's clock for
 * microsecond models, where a Python loop's own call and clock reads (~0.2 us a run) would
 * be most of what it measures. A kernel's error is re-raised as in nnvm_exec_run. */
NNVM_EXPORT int __tvm_ffi_nnvm_exec_time(void *self, const TVMFFIAny *args, int32_t n,
                                         TVMFFIAny *ret) {
  (void)self;
  if (n != 4) return set_error("TypeError", "nnvm_exec_time takes (handle, lo, hi, repeat)");
  nnvm_exec *e = (nnvm_exec *)(intptr_t)arg_int(args, 0);
  int lo = (int)arg_int(args, 1), hi = (int)arg_int(args, 2);
  int64_t repeat = arg_int(args, 3);
  if (!e || lo < 0 || hi > e->num_steps || lo > hi || repeat < 1)
    return set_error("ValueError", "nnvm_exec_time: step range outside the plan or repeat < 1");
  /* the tables in locals: a kernel could write anywhere, so the compiler reloads what it
   * reaches through `e` after every call */
  const nnvm_kernel *kernels = e->kernels;
  const nnvm_step_desc *steps = e->steps;
  const TVMFFIAny *packed = e->args;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int64_t r = 0; r < repeat; ++r) {
    int failed = nnvm_run_packed(kernels, steps, packed, lo, hi);
    if (failed >= 0) {
      e->failed_step = failed;
      return -1;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  e->failed_step = -1;
  return return_int(ret, (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 +
                             (t1.tv_nsec - t0.tv_nsec));
}

/* nnvm_exec_failed_step(handle) -> the step whose kernel failed in the latest run, or -1. */
NNVM_EXPORT int __tvm_ffi_nnvm_exec_failed_step(void *self, const TVMFFIAny *args, int32_t n,
                                                TVMFFIAny *ret) {
  (void)self;
  if (n != 1) return set_error("TypeError", "nnvm_exec_failed_step takes (handle)");
  nnvm_exec *e = (nnvm_exec *)(intptr_t)arg_int(args, 0);
  return return_int(ret, e ? e->failed_step : -1);
}

/* nnvm_exec_destroy(handle): frees the tables (never the caller's buffers or functions). */
NNVM_EXPORT int __tvm_ffi_nnvm_exec_destroy(void *self, const TVMFFIAny *args, int32_t n,
                                            TVMFFIAny *ret) {
  (void)self;
  (void)ret;
  if (n != 1) return set_error("TypeError", "nnvm_exec_destroy takes (handle)");
  exec_free((nnvm_exec *)(intptr_t)arg_int(args, 0));
  return 0;
}
