"""The compiled fast path (fastpath.c), when this interpreter can load it.

The Makefile builds stubvisor/fastpath<EXT_SUFFIX> against the Python the
server is built with, and the binary carries it. Another interpreter (a
model's EXECUTION_ENV_PATH), a binary built without it (plain go build),
a build of another version of fastpath.c, or STUBVISOR_PY_FASTPATH=0 leave
FAST None: the stub then runs the pure-Python path, which does the same.
REASON says which, for the stub's one verbose log line.
"""

import os

import numpy as np

import triton_python_backend_utils as pb

from . import ipc

_ABI = 5  # fastpath.c's FASTPATH_ABI this module was written for
ENV = "STUBVISOR_PY_FASTPATH"


PY_AS_NUMPY = pb.Tensor.as_numpy
PY_GET_INPUT = pb.get_input_tensor_by_name
PY_TENSOR_INIT = pb.Tensor.__init__
PY_RESPONSE_INIT = pb.InferenceResponse.__init__


def _load():
    if os.environ.get(ENV, "") == "0":
        return None, ENV + "=0: pure-Python path"
    try:
        from . import fastpath
    except ImportError as exc:
        return None, "compiled fast path not loaded (%s): pure-Python path" % exc
    if getattr(fastpath, "ABI", None) != _ABI:
        return None, "compiled fast path has ABI %r, want %d: pure-Python path" % (getattr(fastpath, "ABI", None), _ABI)
    try:
        fastpath.setup({
            "Tensor": pb.Tensor, "InferenceRequest": pb.InferenceRequest, "InferenceResponse": pb.InferenceResponse,
            "ndarray": np.ndarray, "default_trace": pb._DEFAULT_TRACE, "default_memory": pb._DEFAULT_PREFERRED_MEMORY,
            "release_all": pb.TRITONSERVER_REQUEST_RELEASE_ALL, "LOC_CLIENT": ipc.LOC_CLIENT, "LOC_CUDA": ipc.LOC_CUDA,
            "LOC_INLINE": ipc.LOC_INLINE, "BYTES": 13, "INLINE_MAX": ipc.INLINE_MAX,
            "KIND_EXECUTE_DONE": ipc.KIND_EXECUTE_DONE, "FLAG_FINAL": ipc.FLAG_FINAL,
        })
    except Exception as exc:  # pb_utils' classes not as fastpath.c reads them
        return None, "compiled fast path refused its setup (%s): pure-Python path" % exc
    ipc.FAST_RING = fastpath.Ring
    # pb_utils' two calls a model makes per input, each falling back to
    # the Python function it replaces (kept here) for what it does not do.
    fastpath.setup_pb(PY_AS_NUMPY, PY_GET_INPUT, pb._WIRE_DTYPE, pb._BF16)
    pb.Tensor.as_numpy = fastpath.method(fastpath.as_numpy)
    pb.get_input_tensor_by_name = fastpath.get_input_tensor_by_name
    fastpath.setup_init(PY_TENSOR_INIT, PY_RESPONSE_INIT, pb._CODE_OF)
    pb.Tensor.__init__ = fastpath.method(fastpath.tensor_init)
    pb.InferenceResponse.__init__ = fastpath.method(fastpath.response_init)
    pb._split_bytes = fastpath.split_bytes
    fastpath.setup_bytes(np.dtype(np.object_), np.bytes_)
    pb._serialize_fast, pb._bytes_array = fastpath.serialize_bytes, fastpath.bytes_array
    from . import native_bls  # the calling stub's BLS path (fastpath_bls.c)

    native_bls.install(fastpath)
    return fastpath, "compiled fast path loaded (%s)" % os.path.basename(fastpath.__file__)


FAST, REASON = _load()
