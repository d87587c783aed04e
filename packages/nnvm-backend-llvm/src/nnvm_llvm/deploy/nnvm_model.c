/* NNVM standalone model runtime: the executor of an exported llvm model, in C.
 *
 * Compiled by `nnvm export-c` together with the generated `nnvm_model_data.h` (the executor
 * plan as static tables) and `nnvm_model_blobs.S` (the weights and the kernel library as
 * read-only data) into ONE libnnvm_model.so that needs libc, libm and pthreads only.
 *
 * Why the kernel library is embedded and mapped at create time: the kernels exist only as
 * the model's TVM-built shared library (lib.so in the .nnvm artifact; apache-tvm is not
 * needed to export it, so a deployment machine can export a downloaded artifact). A shared
 * library cannot be relinked into another one, so it travels inside libnnvm_model.so as a
 * read-only blob and is mapped once per process (memfd_create + dlopen, else a private
 * file in $TMPDIR removed right after mapping). Its only undefined non-libc symbol,
 * TVMFFIErrorSetRaisedFromCStrParts (how a TVM kernel reports an error), is defined below;
 * this library makes itself globally visible before mapping it so the kernels bind to it.
 *
 * Thread safety: every nnvm_model owns its activation arena and tensor table; the only
 * process-wide state is the read-only weight blob, the kernel table (filled once under
 * pthread_once) and the kernel library's thread pool, whose launches are serialised by its
 * own mutex (a launch that finds the pool busy runs its tasks inline on the calling thread).
 * So one nnvm_model per thread is safe; one nnvm_model must not be used by two threads at
 * the same time. The pool is process-wide: nnvm_model_create(n) with n > 0 resizes it for
 * every model of this library.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <dlpack/dlpack.h>
#include <tvm/ffi/c_api.h>

#include "nnvm_executor.h"
#include "nnvm_model.h"
#include "nnvm_model_data.h"

#define NNVM_ALIGN 64
#define NNVM_ERR_LEN 1024

extern const unsigned char nnvm_blob_weights[];
extern const unsigned char nnvm_blob_kernels[];
extern const unsigned char nnvm_blob_kernels_end[];

struct nnvm_model {
  void *arena;
  DLTensor tensors[NNVM_NUM_TENSORS];
  /* every step's kernel arguments, packed once at create (kernels never write them) */
  TVMFFIAny args[NNVM_NUM_STEP_ARGS > 0 ? NNVM_NUM_STEP_ARGS : 1];
  char err[NNVM_ERR_LEN];
};

/* ---- process-wide, written once ---------------------------------------------------------- */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static nnvm_kernel g_kernels[NNVM_NUM_FUNCS];  /* raw symbols: self = NULL */
static TVMFFISafeCallType g_config;
static char g_load_err[NNVM_ERR_LEN];
static __thread char t_kernel_err[NNVM_ERR_LEN];

/* The one libtvm_ffi entry TVM-generated kernels call (only on failure, e.g. a shape check). */
__attribute__((visibility("default")))
void TVMFFIErrorSetRaisedFromCStrParts(const char *kind, const char **parts, int32_t n) {
  size_t len = 0;
  len += (size_t)snprintf(t_kernel_err, sizeof t_kernel_err, "%s: ", kind ? kind : "Error");
  for (int32_t i = 0; i < n && len < sizeof t_kernel_err; ++i)
    len += (size_t)snprintf(t_kernel_err + len, sizeof t_kernel_err - len, "%s",
                            parts[i] ? parts[i] : "");
}

static int write_all(int fd, const unsigned char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) { if (errno == EINTR) continue; return -1; }
    p += w; n -= (size_t)w;
  }
  return 0;
}

static void *map_kernels(void) {
  const unsigned char *so = nnvm_blob_kernels;
  size_t n = (size_t)(nnvm_blob_kernels_end - nnvm_blob_kernels);
  char path[4096];
  void *h = NULL;
#ifdef SYS_memfd_create
  /* The fd stays open for the process lifetime: dlopen identifies a library by its path
   * string, and a reused fd number would hand back another model's kernels. */
  int fd = (int)syscall(SYS_memfd_create, "nnvm_model_kernels", 1u /* MFD_CLOEXEC */);
  if (fd >= 0) {
    if (write_all(fd, so, n) == 0) {
      snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
      h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (h) return h;
    close(fd);
  }
#endif
  const char *tmp = getenv("NNVM_NATIVE_DIR");
  if (!tmp || !*tmp) tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  snprintf(path, sizeof path, "%s/nnvm_model_kernels-XXXXXX", tmp);
  int tfd = mkstemp(path);
  if (tfd < 0) {
    snprintf(g_load_err, sizeof g_load_err, "nnvm_model_create -> cannot map the kernel "
             "library: memfd failed and mkstemp in %s failed (%s) -> set NNVM_NATIVE_DIR to a "
             "writable directory mounted without noexec", tmp, strerror(errno));
    return NULL;
  }
  if (write_all(tfd, so, n) == 0) h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  const char *why = h ? NULL : dlerror();
  close(tfd);
  unlink(path);
  if (!h)
    snprintf(g_load_err, sizeof g_load_err, "nnvm_model_create -> cannot map the kernel "
             "library -> dlopen(%s): %s -> if it says 'failed to map segment', the directory "
             "is mounted noexec: set NNVM_NATIVE_DIR to one that is not; if it names a symbol "
             "or an ELF class, the library was built for another CPU/OS", path,
             why ? why : "?");
  return h;
}

static void load_once(void) {
  /* Make this library's symbols (TVMFFIErrorSetRaisedFromCStrParts) visible to the kernel
   * library even when the application dlopen'ed us RTLD_LOCAL (Python's ctypes does). */
  Dl_info info;
  if (dladdr((void *)&nnvm_model_create, &info) && info.dli_fname)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  void *h = map_kernels();
  if (!h) return;
  g_config = (TVMFFISafeCallType)dlsym(h, "__tvm_ffi_nnvm_runtime_config");
  for (int i = 0; i < NNVM_NUM_FUNCS; ++i) {
    g_kernels[i].call = (TVMFFISafeCallType)dlsym(h, nnvm_func_names[i]);
    g_kernels[i].self = NULL;
    if (!g_kernels[i].call) {
      snprintf(g_load_err, sizeof g_load_err, "nnvm_model_create -> the embedded kernel "
               "library has no function '%s' -> re-export the model", nnvm_func_names[i]);
      g_config = NULL;
      return;
    }
  }
  if (!g_config)
    snprintf(g_load_err, sizeof g_load_err, "nnvm_model_create -> the embedded kernel library "
             "has no thread pool (nnvm_runtime_config) -> re-export with this nnvm version");
}

/* ---- API ----------------------------------------------------------------------------------- */
nnvm_model *nnvm_model_create(int num_threads) {
  pthread_once(&g_once, load_once);
  if (!g_config) return NULL;
  TVMFFIAny arg, res;
  memset(&arg, 0, sizeof arg);
  memset(&res, 0, sizeof res);
  arg.type_index = kTVMFFIInt;
  arg.v_int64 = num_threads;
  if (g_config(NULL, &arg, 1, &res) != 0) {
    snprintf(g_load_err, sizeof g_load_err, "nnvm_model_create -> thread pool setup failed");
    return NULL;
  }
  nnvm_model *m = (nnvm_model *)calloc(1, sizeof *m);
  if (!m) return NULL;
  if (NNVM_ARENA_BYTES > 0 && posix_memalign(&m->arena, NNVM_ALIGN, NNVM_ARENA_BYTES) != 0) {
    free(m);
    snprintf(g_load_err, sizeof g_load_err, "nnvm_model_create -> out of memory (%llu bytes "
             "of activations)", (unsigned long long)NNVM_ARENA_BYTES);
    return NULL;
  }
  if (NNVM_ARENA_BYTES > 0) memset(m->arena, 0, NNVM_ARENA_BYTES);
  for (int i = 0; i < NNVM_NUM_TENSORS; ++i) {
    const nnvm_tensor_desc *d = &nnvm_tensors[i];
    nnvm_tensor_init(&m->tensors[i],
                     d->in_blob ? (void *)(nnvm_blob_weights + d->offset)
                                : (void *)((unsigned char *)m->arena + d->offset),
                     d->ndim, (int64_t *)(nnvm_shapes + d->shape_off), d->code, d->bits);
  }
  nnvm_pack_args(nnvm_step_args, NNVM_NUM_STEP_ARGS, m->tensors, m->args);
  return m;
}

void nnvm_model_destroy(nnvm_model *m) {
  if (!m) return;
  free(m->arena);
  free(m);
}

int nnvm_model_num_inputs(const nnvm_model *m) { (void)m; return NNVM_NUM_INPUTS; }
int nnvm_model_num_outputs(const nnvm_model *m) { (void)m; return NNVM_NUM_OUTPUTS; }

static const nnvm_tensor_desc *io_desc(int is_out, int i) {
  if (i < 0 || i >= (is_out ? NNVM_NUM_OUTPUTS : NNVM_NUM_INPUTS)) return NULL;
  return &nnvm_tensors[is_out ? nnvm_output_tensor[i] : nnvm_input_tensor[i]];
}

const char *nnvm_model_input_name(const nnvm_model *m, int i) {
  (void)m;
  return io_desc(0, i) ? nnvm_input_names[i] : NULL;
}
const char *nnvm_model_output_name(const nnvm_model *m, int i) {
  (void)m;
  return io_desc(1, i) ? nnvm_output_names[i] : NULL;
}
size_t nnvm_model_input_nbytes(const nnvm_model *m, int i) {
  (void)m;
  const nnvm_tensor_desc *d = io_desc(0, i);
  return d ? (size_t)d->nbytes : 0;
}
size_t nnvm_model_output_nbytes(const nnvm_model *m, int i) {
  (void)m;
  const nnvm_tensor_desc *d = io_desc(1, i);
  return d ? (size_t)d->nbytes : 0;
}
int nnvm_model_input_ndim(const nnvm_model *m, int i) {
  (void)m;
  const nnvm_tensor_desc *d = io_desc(0, i);
  return d ? d->ndim : -1;
}
int nnvm_model_output_ndim(const nnvm_model *m, int i) {
  (void)m;
  const nnvm_tensor_desc *d = io_desc(1, i);
  return d ? d->ndim : -1;
}
const int64_t *nnvm_model_input_shape(const nnvm_model *m, int i) {
  (void)m;
  const nnvm_tensor_desc *d = io_desc(0, i);
  return d ? nnvm_shapes + d->shape_off : NULL;
}
const int64_t *nnvm_model_output_shape(const nnvm_model *m, int i) {
  (void)m;
  const nnvm_tensor_desc *d = io_desc(1, i);
  return d ? nnvm_shapes + d->shape_off : NULL;
}
const char *nnvm_model_input_dtype(const nnvm_model *m, int i) {
  (void)m;
  const nnvm_tensor_desc *d = io_desc(0, i);
  return d ? d->dtype : NULL;
}
const char *nnvm_model_output_dtype(const nnvm_model *m, int i) {
  (void)m;
  const nnvm_tensor_desc *d = io_desc(1, i);
  return d ? d->dtype : NULL;
}

int nnvm_model_set_input(nnvm_model *m, int i, const void *data, size_t nbytes) {
  if (!m) return -1;
  const nnvm_tensor_desc *d = io_desc(0, i);
  if (!d) {
    snprintf(m->err, sizeof m->err, "nnvm_model_set_input -> input index %d out of range -> "
             "expected 0..%d -> use nnvm_model_num_inputs", i, NNVM_NUM_INPUTS - 1);
    return -1;
  }
  if (nbytes != (size_t)d->nbytes || (!data && nbytes)) {
    snprintf(m->err, sizeof m->err, "nnvm_model_set_input(%d '%s') -> wrong size -> expected "
             "%llu bytes (%s, row-major) vs got %llu -> see nnvm_model_input_nbytes", i,
             nnvm_input_names[i], (unsigned long long)d->nbytes, d->dtype,
             (unsigned long long)nbytes);
    return -1;
  }
  memcpy(m->tensors[nnvm_input_tensor[i]].data, data, nbytes);
  return 0;
}

int nnvm_model_get_output(nnvm_model *m, int i, void *data, size_t nbytes) {
  if (!m) return -1;
  const nnvm_tensor_desc *d = io_desc(1, i);
  if (!d) {
    snprintf(m->err, sizeof m->err, "nnvm_model_get_output -> output index %d out of range "
             "-> expected 0..%d -> use nnvm_model_num_outputs", i, NNVM_NUM_OUTPUTS - 1);
    return -1;
  }
  if (nbytes != (size_t)d->nbytes || (!data && nbytes)) {
    snprintf(m->err, sizeof m->err, "nnvm_model_get_output(%d '%s') -> wrong size -> expected "
             "%llu bytes (%s, row-major) vs got %llu -> see nnvm_model_output_nbytes", i,
             nnvm_output_names[i], (unsigned long long)d->nbytes, d->dtype,
             (unsigned long long)nbytes);
    return -1;
  }
  memcpy(data, m->tensors[nnvm_output_tensor[i]].data, nbytes);
  return 0;
}

int nnvm_model_run(nnvm_model *m) {
  if (!m) return -1;
  t_kernel_err[0] = '\0';
  int s = nnvm_run_packed(g_kernels, nnvm_steps, m->args, 0, NNVM_NUM_STEPS);
  if (s >= 0) {
    snprintf(m->err, sizeof m->err, "nnvm_model_run -> kernel %s (step %d) failed: %s -> "
             "the inputs are checked by size only; this is a bug or memory corruption, "
             "report it with the model", nnvm_func_names[nnvm_steps[s].func] + 9, s,
             t_kernel_err[0] ? t_kernel_err : "(no message)");
    return -1;
  }
  return 0;
}

const char *nnvm_model_last_error(const nnvm_model *m) {
  return m ? m->err : g_load_err;
}
