/* The executor loop of an NNVM llvm model: one C loop over the static memory plan.
 *
 * Shared by the two executors of a compiled model so that they cannot drift apart:
 *   - deploy/nnvm_model.c, the standalone C library written by `nnvm export-c`, where the
 *     kernels are the raw symbols of the embedded kernel library (self = NULL);
 *   - runtime/c_executor.c, which serves Python's lib.run() with one FFI call per run,
 *     where the kernels are the same raw symbols of the model's loaded library (or, where
 *     they cannot be had, tvm_ffi Function objects: their safe_call and handle).
 * Both build one DLTensor per buffer and pack every step's arguments once (nnvm_pack_args),
 * then call the kernels in plan order (nnvm_run_packed); a kernel takes DLTensor pointers
 * in TVM's packed calling convention.
 */
#ifndef NNVM_EXECUTOR_H_
#define NNVM_EXECUTOR_H_

#include <stdint.h>

#include <dlpack/dlpack.h>
#include <tvm/ffi/c_api.h>

/* One step: kernel `func` called with tensors step_args[args_off .. args_off + nargs). */
typedef struct { int32_t func; int32_t nargs; int32_t args_off; } nnvm_step_desc;

/* A callable kernel: how TVM FFI calls any packed function. */
typedef struct { TVMFFISafeCallType call; void *self; } nnvm_kernel;

/* A dense, row-major CPU tensor over `data` (shape is borrowed, not copied). */
static inline void nnvm_tensor_init(DLTensor *t, void *data, int32_t ndim, int64_t *shape,
                                    uint8_t code, uint8_t bits) {
  t->data = data;
  t->device.device_type = kDLCPU;
  t->device.device_id = 0;
  t->ndim = ndim;
  t->dtype.code = code;
  t->dtype.bits = bits;
  t->dtype.lanes = 1;
  t->shape = shape;
  t->strides = NULL;
  t->byte_offset = 0;
}

/* Fills `args` (one TVMFFIAny per entry of step_args) once: a kernel reads its arguments and
 * never writes them, so a run can pass them as they are (nnvm_run_packed). */
static inline void nnvm_pack_args(const int32_t *step_args, int32_t num_step_args,
                                  DLTensor *tensors, TVMFFIAny *args) {
  for (int32_t a = 0; a < num_step_args; ++a) {
    args[a].type_index = kTVMFFIDLTensorPtr;
    args[a].zero_padding = 0;
    args[a].v_ptr = &tensors[step_args[a]];
  }
}

/* Runs steps [lo, hi) over the arguments nnvm_pack_args filled: the loop only calls (a
 * microsecond model of tiny kernels spends a few ns per kernel in this loop). Returns -1
 * when every kernel succeeded, else the index of the step that failed (the kernel has
 * raised its error through TVMFFIErrorSetRaisedFromCStrParts; nothing after it ran). */
static inline int nnvm_run_packed(const nnvm_kernel *kernels, const nnvm_step_desc *steps,
                                  const TVMFFIAny *args, int lo, int hi) {
  for (int s = lo; s < hi; ++s) {
    const nnvm_step_desc *st = &steps[s];
    TVMFFIAny res;
    res.type_index = kTVMFFINone;
    res.zero_padding = 0;
    res.v_int64 = 0;
    const nnvm_kernel *k = &kernels[st->func];
    if (k->call(k->self, args + st->args_off, st->nargs, &res) != 0) return s;
  }
  return -1;
}

#endif /* NNVM_EXECUTOR_H_ */
