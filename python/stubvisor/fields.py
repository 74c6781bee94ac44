"""The named fields of the wire's messages, in wire order (ipc/messages.go,
ipc/msgcodec.go, ipc/shapes.go).

A message is a msgpack array [kind, id, fields...]; the shapes nested in
messages (requests, tensors, responses, errors, output targets) are arrays
too. MESSAGES and the *_FIELDS tuples name every element; the Go drift
test (python/fields_test.go) encodes one message of each kind with the Go
codec and checks that these names label the Go struct fields they carry.

The stub's modules read elements through the position constants below
(`t[T_LOC]`, not `t[3]`): a module global costs what a literal index costs,
where a namedtuple per message would add about a microsecond per request.
test_fields.py checks that each constant is its name's position.
"""

from . import ipc

# Element 1 of every message is its id: the call, batch or handle the
# kind documents; "_" where the kind has none (it is then 0).
MESSAGES = {
    # Supervisor -> stub.
    ipc.KIND_INITIALIZE: ("initialize", ("id", "args", "options")),
    ipc.KIND_EXECUTE: ("execute", ("batch_id", "requests")),
    ipc.KIND_FINALIZE: ("finalize", ("id",)),
    ipc.KIND_RELEASE: ("release", ("_", "offsets")),
    ipc.KIND_CANCEL: ("cancel", ("handle",)),
    ipc.KIND_IS_READY: ("is_ready", ("id",)),
    ipc.KIND_AUTO_COMPLETE: ("auto_complete", ("id", "options", "config_json")),
    ipc.KIND_INFER_RESULT: ("infer_result", ("id", "response")),
    ipc.KIND_MAP_REGION: ("map_region", ("_", "region_id", "offset", "size", "cuda_handle", "device_id")),
    ipc.KIND_UNMAP_REGION: ("unmap_region", ("_", "region_id")),
    ipc.KIND_COLLECT_METRICS: ("collect_metrics", ("id",)),
    ipc.KIND_CONTROL_RESULT: ("control_result", ("id", "error", "value")),
    # Stub -> supervisor.
    ipc.KIND_HELLO: ("hello", ("_", "version", "pid", "info")),
    ipc.KIND_RESULT: ("result", ("id", "error", "value")),
    ipc.KIND_RESPONSE: ("response", ("_", "response")),
    ipc.KIND_EXECUTE_DONE: ("execute_done", ("batch_id", "error", "responses", "rescheduled", "open")),
    ipc.KIND_LOG: ("log", ("_", "level", "message", "file", "line")),
    ipc.KIND_INFER_EXEC: ("infer_exec", ("id", "model_name", "model_version", "request", "decoupled")),
    ipc.KIND_FREE: ("free", ("_", "offsets")),
    ipc.KIND_INFER_CANCEL: ("infer_cancel", ("id",)),
    ipc.KIND_MODEL_CONTROL: ("model_control", ("id", "op", "model", "options")),
}

REQUEST_FIELDS = ("handle", "id", "correlation_id", "flags", "inputs", "requested_outputs",
                  "parameters_json", "timeout_micros", "output_targets", "trace_context")
# The 7th element of a tensor is the region id of a LOC_CLIENT or LOC_CUDA
# tensor, or the bytes of a LOC_INLINE one; other tensors have six.
TENSOR_FIELDS = ("name", "data_type", "shape", "loc", "offset", "size", "region_id")
RESPONSE_FIELDS = ("handle", "flags", "error", "outputs", "parameters_json")
ERROR_FIELDS = ("code", "message")
OUTPUT_TARGET_FIELDS = ("name", "region_id", "offset", "size")

# Positions in every message.
M_KIND, M_ID = 0, 1
# Positions of the fields after the id, by message.
EXECUTE_REQUESTS = 2
RELEASE_OFFSETS = 2
INFER_RESULT_RESPONSE = 2
MAP_REGION_ID, MAP_OFFSET, MAP_SIZE, MAP_CUDA_HANDLE, MAP_DEVICE_ID = 2, 3, 4, 5, 6
UNMAP_REGION_ID = 2
CONTROL_RESULT_ERROR, CONTROL_RESULT_VALUE = 2, 3
INITIALIZE_ARGS, INITIALIZE_OPTIONS = 2, 3
AUTO_COMPLETE_OPTIONS, AUTO_COMPLETE_CONFIG_JSON = 2, 3

(R_HANDLE, R_ID, R_CORRELATION_ID, R_FLAGS, R_INPUTS, R_REQUESTED_OUTPUTS,
 R_PARAMETERS_JSON, R_TIMEOUT_MICROS, R_OUTPUT_TARGETS, R_TRACE_CONTEXT) = range(10)
T_NAME, T_DATA_TYPE, T_SHAPE, T_LOC, T_OFFSET, T_SIZE, T_REGION_ID = range(7)
T_DATA = T_REGION_ID  # LOC_INLINE
RS_HANDLE, RS_FLAGS, RS_ERROR, RS_OUTPUTS, RS_PARAMETERS_JSON = range(5)
E_CODE, E_MESSAGE = range(2)
O_NAME, O_REGION_ID, O_OFFSET, O_SIZE = range(4)


def describe():
    """The tables as plain data, for the Go drift test."""
    return {
        "messages": {str(kind): list(fields) for kind, (_, fields) in MESSAGES.items()},
        "request": list(REQUEST_FIELDS), "tensor": list(TENSOR_FIELDS), "response": list(RESPONSE_FIELDS),
        "error": list(ERROR_FIELDS), "output_target": list(OUTPUT_TARGET_FIELDS),
    }
