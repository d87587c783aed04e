/* Example program for an exported NNVM model (see nnvm_model.h and docs/deploy.md).
 *
 *   cc example.c -I. -L. -lnnvm_model -Wl,-rpath,'$ORIGIN' -o example
 *   ./example IN_DIR OUT_DIR [NUM_THREADS]
 *
 * reads IN_DIR/input_<i>.bin (raw row-major bytes of input i, dtype and shape as listed in
 * nnvm_model.h), runs the model once and writes OUT_DIR/output_<i>.bin the same way.
 */
#include <stdio.h>
#include <stdlib.h>

#include "nnvm_model.h"

static void *read_file(const char *path, size_t want) {
  FILE *f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "example: cannot open %s\n", path); return NULL; }
  void *buf = malloc(want ? want : 1);
  size_t got = buf ? fread(buf, 1, want, f) : 0;
  int extra = fgetc(f) != EOF;
  fclose(f);
  if (!buf || got != want || extra) {
    fprintf(stderr, "example: %s must hold exactly %zu bytes\n", path, want);
    free(buf);
    return NULL;
  }
  return buf;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s IN_DIR OUT_DIR [NUM_THREADS]\n", argv[0]);
    return 2;
  }
  int threads = argc > 3 ? atoi(argv[3]) : 0;
  nnvm_model *m = nnvm_model_create(threads);
  if (!m) {
    fprintf(stderr, "example: %s\n", nnvm_model_last_error(NULL));
    return 1;
  }
  char path[4096];
  for (int i = 0; i < nnvm_model_num_inputs(m); ++i) {
    size_t n = nnvm_model_input_nbytes(m, i);
    snprintf(path, sizeof path, "%s/input_%d.bin", argv[1], i);
    void *buf = read_file(path, n);
    if (!buf) return 1;
    if (nnvm_model_set_input(m, i, buf, n) != 0) {
      fprintf(stderr, "example: %s\n", nnvm_model_last_error(m));
      return 1;
    }
    free(buf);
  }
  if (nnvm_model_run(m) != 0) {
    fprintf(stderr, "example: %s\n", nnvm_model_last_error(m));
    return 1;
  }
  for (int i = 0; i < nnvm_model_num_outputs(m); ++i) {
    size_t n = nnvm_model_output_nbytes(m, i);
    void *buf = malloc(n ? n : 1);
    if (!buf || nnvm_model_get_output(m, i, buf, n) != 0) {
      fprintf(stderr, "example: %s\n", buf ? nnvm_model_last_error(m) : "out of memory");
      return 1;
    }
    snprintf(path, sizeof path, "%s/output_%d.bin", argv[2], i);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0) {
      fprintf(stderr, "example: cannot write %s\n", path);
      return 1;
    }
    printf("output %d '%s' (%s, %zu bytes) -> %s\n", i, nnvm_model_output_name(m, i),
           nnvm_model_output_dtype(m, i), n, path);
    free(buf);
  }
  nnvm_model_destroy(m);
  return 0;
}
