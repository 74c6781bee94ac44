"""The calling stub's BLS path in C (fastpath_bls.c), installed over the
Python functions it stands in for, which stay here as the reference (and
the fallback for every call the C code does not take: decoupled calls,
tensors in the arena, BYTES, trace contexts, malformed answers).

native.py calls install() once the compiled module loaded; without it
(STUBVISOR_PY_FASTPATH=0, another interpreter) nothing changes."""

import asyncio
import collections

import triton_python_backend_utils as pb

from . import bls, common, ipc

PY_REQUEST_INIT = pb.InferenceRequest.__init__
PY_EXEC = pb.InferenceRequest.exec
PY_ASYNC_EXEC = pb.InferenceRequest.async_exec
PY_BLS_RESPONSE = bls.BLSMixin._bls_response
PY_GET_OUTPUT = pb.get_output_tensor_by_name
PY_LOOP_READ = bls.BLSMixin._loop_read
PY_RESOLVE_READY = bls.BLSMixin._resolve_ready


def install(fastpath):
    """Point pb_utils and BLSMixin at the compiled functions; False (the
    Python path kept) when this build of the module has none."""
    if not hasattr(fastpath, "setup_bls"):
        return False
    fastpath.setup_bls({
        "_Call": bls._Call, "BLSLoop": bls.BLSLoop, "BLSMixin": bls.BLSMixin, "deque": collections.deque,
        "pb_dict": vars(pb), "_FORKED": common._FORKED, "TritonError": pb.TritonError,
        "_WIRE_DTYPE": pb._WIRE_DTYPE, "_ELEMENT_SIZE": pb._ELEMENT_SIZE,
        "get_running_loop": asyncio.get_running_loop, "Future": asyncio.Future,
        "init": PY_REQUEST_INIT, "exec": PY_EXEC, "async_exec": PY_ASYNC_EXEC, "bls_response": PY_BLS_RESPONSE,
        "get_output_tensor_by_name": PY_GET_OUTPUT, "loop_read": PY_LOOP_READ,
        "PeerDead": common._PeerDead, "_exit_now": common._exit_now,
        "KIND_INFER_EXEC": ipc.KIND_INFER_EXEC, "KIND_INFER_RESULT": ipc.KIND_INFER_RESULT, "FINAL": common._FINAL,
        "PUMP_SLICE": common._PUMP_SLICE, "WAIT_SLICE": ipc.WAIT_SLICE, "PREEMPT_GAP_NS": ipc._PREEMPT_GAP_NS,
        "MIN_BUDGET_NS": ipc._MIN_BUDGET_NS,
    })
    method = fastpath.method
    pb.InferenceRequest.__init__ = method(fastpath.request_init)
    pb.InferenceRequest.exec = method(fastpath.request_exec)
    pb.InferenceRequest.async_exec = method(fastpath.request_async_exec)
    pb.get_output_tensor_by_name = fastpath.get_output_tensor_by_name
    bls.BLSMixin._bls_response = method(fastpath.bls_response)
    bls.BLSMixin._loop_read = method(fastpath.loop_read)
    bls.BLSMixin._resolve_ready = method(fastpath.resolve_ready)
    return True


def uninstall():
    """The Python functions back (tests compare both paths)."""
    pb.InferenceRequest.__init__ = PY_REQUEST_INIT
    pb.InferenceRequest.exec = PY_EXEC
    pb.InferenceRequest.async_exec = PY_ASYNC_EXEC
    pb.get_output_tensor_by_name = PY_GET_OUTPUT
    bls.BLSMixin._bls_response = PY_BLS_RESPONSE
    bls.BLSMixin._loop_read = PY_LOOP_READ
    bls.BLSMixin._resolve_ready = PY_RESOLVE_READY
