"""Two C-like dialects written from attributes only, and a conv + dense graph, shared by
the codegen tests (a sibling module, as tests/backends/opencl_devices.py)."""

import numpy as np

import nnvm
from nnvm import sym
from nnvm_codegen_c import CLikeRenderer


class CudaLike(CLikeRenderer):
    """A CUDA-flavoured dialect written from attributes only."""

    dialect = "cuda"
    kernel_prefix = 'extern "C" __global__'
    buffer_prefix = ""
    smem_prefix = "__shared__ "
    barrier = "__syncthreads();"
    restrict = "__restrict__"
    global_id = "(blockIdx.{d}*blockDim.{d}+threadIdx.{d})"
    local_id = "threadIdx.{d}"
    group_id = "blockIdx.{d}"
    dim_names = ("x", "y", "z")
    type_map = {**CLikeRenderer.type_map, "int64": "long long", "uint8": "unsigned char",
                "bool": "unsigned char"}
    math_names = {"clampi": "nnvm_clampi"}


class OpenCLLike(CLikeRenderer):
    dialect = "opencl"
    kernel_prefix = "__kernel"
    buffer_prefix = "__global "
    smem_prefix = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    global_id = "get_global_id({d})"
    local_id = "get_local_id({d})"
    group_id = "get_group_id({d})"


CPU_LIMITS = {"device_type": "cpu", "preferred_vector_width_float": 8,
              "max_work_group_size": 4096, "local_mem_size": 1 << 20}



def conv_dense_graph():
    x = sym.Variable("x")
    y = sym.relu(sym.conv2d(x, channels=16, kernel_size=(3, 3), padding=(1, 1), name="c"))
    y = sym.dense(sym.flatten(y), units=10, name="fc")
    rng = np.random.default_rng(0)
    params = {"c_weight": rng.standard_normal((16, 3, 3, 3)).astype("float32"),
              "c_bias": rng.standard_normal(16).astype("float32"),
              "fc_weight": rng.standard_normal((10, 16 * 8 * 8)).astype("float32"),
              "fc_bias": rng.standard_normal(10).astype("float32")}
    return nnvm.compiler.optimize(y, shape={"x": (1, 3, 8, 8)}, params=params,
                                  opt_level=2)[0]
