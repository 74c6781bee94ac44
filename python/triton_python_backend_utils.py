"""triton_python_backend_utils ("pb_utils") as stubvisor provides it.

Python-backend models import this module by this name and run unchanged:
it reproduces the public API of Triton's module of the same name, with the
same behaviour and the same error texts, because models and their tests
match on them.

The module is pure Python and importable on its own (the unit tests do
that). Everything that needs the supervisor (sending responses, logging to
the server log, BLS, cancellation) goes through ``_runtime``, which the
stub host (package ``stubvisor``) sets when it starts; without it, logging
falls back to stderr and calls that need the server raise
TritonModelException.

Hot-path note: the host builds requests, tensors and responses through the
private constructors at the end of this file, which set slots directly, so
a request costs a handful of attribute stores, not a dict of everything.
"""

import asyncio
import ctypes
import enum
import functools
import json
import os
import struct
import sys
import threading
import time
import weakref

import numpy as np

_ndarray = np.ndarray

# ---------------------------------------------------------------------------
# Constants.

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class MemoryType(enum.IntEnum):
    """Where a BLS caller prefers its outputs (PreferredMemory)."""

    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU
_MEMORY_DEFAULT = 2

# Triton data type codes (TRITONSERVER_DataType); the same numbers cross the
# stub protocol.
_BOOL, _UINT8, _UINT16, _UINT32, _UINT64 = 1, 2, 3, 4, 5
_INT8, _INT16, _INT32, _INT64 = 6, 7, 8, 9
_FP16, _FP32, _FP64, _BYTES, _BF16 = 10, 11, 12, 13, 14

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

_NUMPY_OF = {
    _BOOL: np.bool_,
    _UINT8: np.uint8,
    _UINT16: np.uint16,
    _UINT32: np.uint32,
    _UINT64: np.uint64,
    _INT8: np.int8,
    _INT16: np.int16,
    _INT32: np.int32,
    _INT64: np.int64,
    _FP16: np.float16,
    _FP32: np.float32,
    _FP64: np.float64,
    _BYTES: np.object_,
}

# Wire dtypes of fixed-size elements (little-endian, as the protocol says).
# BF16 has no numpy type: its bytes are kept as uint16.
_WIRE_DTYPE = {code: np.dtype(t).newbyteorder("<") for code, t in _NUMPY_OF.items() if code != _BYTES}
_WIRE_DTYPE[_BF16] = np.dtype("<u2")

# numpy dtype -> Triton code, for the Tensor constructor's fast path.
_CODE_OF = {np.dtype(t): code for code, t in _NUMPY_OF.items()}

_ELEMENT_SIZE = {code: dt.itemsize for code, dt in _WIRE_DTYPE.items()}


def triton_to_numpy_type(data_type):
    """Return the numpy type for a Triton type code (None for BYTES-less
    codes numpy cannot represent, such as BF16)."""
    return _NUMPY_OF.get(data_type)


def numpy_to_triton_type(data_type):
    """Return the Triton type code for a numpy dtype or type, or None."""
    try:
        dt = np.dtype(data_type)
    except TypeError:
        return None
    code = _CODE_OF.get(dt)
    if code is None and dt.type is np.bytes_:
        return _BYTES
    return code


def triton_string_to_numpy(triton_type_string):
    return TRITON_STRING_TO_NUMPY[triton_type_string]


# ---------------------------------------------------------------------------
# BYTES tensors: each element is a 4-byte little-endian length followed by
# its bytes, elements in C order.

_LEN = struct.Struct("<I")


# stubvisor.fastpath.serialize_bytes and bytes_array when the stub's
# compiled fast path loaded (stubvisor/native.py): _serialize and
# deserialize_bytes_tensor in C for the usual arrays (None: not theirs).
_serialize_fast = None
_bytes_array = None


def _serialize(array):
    """Serialise an object or bytes array to the wire form (b"" when empty)."""
    if _serialize_fast is not None:
        data = _serialize_fast(array)
        if data is not None:
            return data
    if array.size == 0:
        return b""
    items = array.ravel(order="C").tolist()
    if set(map(type, items)) != _ONLY_BYTES:
        items = [item if isinstance(item, bytes) else str(item).encode("utf-8") for item in items]
    # Length prefixes and elements interleaved, with no Python-level loop;
    # the prefixes of short elements come from a table.
    parts = [b""] * (2 * len(items))
    try:
        parts[0::2] = map(_PREFIX.__getitem__, map(len, items))
    except IndexError:
        parts[0::2] = map(_LEN.pack, map(len, items))
    parts[1::2] = items
    return b"".join(parts)


_ONLY_BYTES = {bytes}
_PREFIX = [_LEN.pack(n) for n in range(1024)]


def serialize_byte_tensor(input_tensor):
    """Serialise a BYTES tensor (dtype object or bytes_) to length-prefixed
    bytes in C order. Returns () for an empty tensor and None for other
    dtypes, as Triton's version does."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype == np.object_ or input_tensor.dtype.type == np.bytes_:
        return _serialize(input_tensor)
    return None


# stubvisor.fastpath.split_bytes when the stub's compiled fast path loaded
# (stubvisor/native.py): the loop below in C, with the same errors.
_split_bytes = None


def deserialize_bytes_tensor(encoded_tensor):
    """Deserialise length-prefixed bytes into a 1-D object array of bytes."""
    if _bytes_array is not None:
        array = _bytes_array(encoded_tensor)
        if array is not None:
            return array
    if _split_bytes is not None:
        return _object_array(_split_bytes(encoded_tensor))
    # One copy into bytes: slicing bytes makes each element directly.
    data = memoryview(encoded_tensor).tobytes()
    items = []
    append = items.append
    unpack = _LEN.unpack_from
    offset = 0
    end = len(data)
    while offset < end:
        start = offset + 4
        if start > end:
            raise ValueError("truncated BYTES tensor: incomplete length prefix at offset %d" % offset)
        offset = start + unpack(data, offset)[0]
        if offset > end:
            raise ValueError("truncated BYTES tensor: element of %d bytes at offset %d overruns %d bytes"
                             % (offset - start, start, end))
        append(data[start:offset])
    return _object_array(items)


def _object_array(items):
    """A 1-D object array of items (fromiter is the cheaper way where
    numpy has it for objects, 1.23 on)."""
    try:
        return np.fromiter(items, dtype=np.object_, count=len(items))
    except (TypeError, ValueError):
        out = np.empty(len(items), dtype=np.object_)
        out[:] = items
        return out


# ---------------------------------------------------------------------------
# Lookup helpers.


def get_input_tensor_by_name(inference_request, name):
    """Return the request's input called name, or None (optional inputs)."""
    if type(inference_request) is InferenceRequest:
        # Every model calls this per input per request: read the slots
        # instead of calling inputs() and name() (a request's inputs are
        # always Tensors, checked when it was made).
        for tensor in inference_request._inputs:
            if tensor._name == name:
                return tensor
        return None
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response, name):
    """Return the response's output called name, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config, name):
    for properties in model_config.get("input", ()):
        if properties["name"] == name:
            return properties
    return None


def get_output_config_by_name(model_config, name):
    for properties in model_config.get("output", ()):
        if properties["name"] == name:
            return properties
    return None


def using_decoupled_model_transaction_policy(model_config):
    policy = model_config.get("model_transaction_policy")
    if policy is None:
        return False
    return bool(policy.get("decoupled", False))


# ---------------------------------------------------------------------------
# Errors.


class TritonModelException(Exception):
    """Raised by pb_utils calls that fail, and by models to fail a hook."""

    def __init__(self, msg=None):
        super().__init__(msg)
        self._msg = msg

    def __str__(self):
        return "" if self._msg is None else str(self._msg)

    def message(self):
        return self._msg


class TritonError:
    """An error a model puts in an InferenceResponse. The codes are
    TRITONSERVER_Error_Code values, passed to the client unchanged."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    __slots__ = ("_message", "_code")

    def __init__(self, message, code=1):
        if message is None:
            raise TypeError("TritonError(): message must not be None")
        if code is None or isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 7:
            raise TypeError("TritonError(): code must be one of the TritonError codes, got %r" % (code,))
        self._message = str(message)
        self._code = int(code)

    def code(self):
        return self._code

    def message(self):
        return self._message

    def __str__(self):
        return self._message

    def __repr__(self):
        return "TritonError(%r, code=%d)" % (self._message, self._code)


# ---------------------------------------------------------------------------
# ModelConfig: the object auto_complete_config receives and returns. The
# ValueError texts are Triton's, word for word.


class ModelConfig:
    """The model configuration handed to auto_complete_config."""

    def __init__(self, model_config):
        self._model_config = json.loads(model_config)

    def _name(self):
        return self._model_config.get("name", "")

    def as_dict(self):
        return self._model_config

    def set_max_batch_size(self, max_batch_size):
        current = self._model_config.get("max_batch_size", 0)
        if current > max_batch_size:
            raise ValueError(
                "configuration specified max_batch_size "
                + str(current)
                + ", but in auto-complete-config function for model '"
                + self._name()
                + "' specified max_batch_size "
                + str(max_batch_size)
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        found = None
        if "sequence_batching" in self._model_config:
            found = "sequence_batching"
        elif "ensemble_scheduling" in self._model_config:
            found = "ensemble_scheduling"
        if found is not None:
            raise ValueError(
                "Configuration specified scheduling_choice as '"
                + found
                + "', but auto-complete-config function for model '"
                + self._name()
                + "' tries to set scheduling_choice as 'dynamic_batching'"
            )
        if "dynamic_batching" not in self._model_config:
            self._model_config["dynamic_batching"] = {}

    def _add_tensor(self, kind, tensor, valid):
        name = self._name()
        for prop in tensor:
            if prop not in valid:
                if kind == "input":
                    allowed = "'name', 'data_type', 'dims' and 'optional'"
                else:
                    allowed = "'name', 'data_type' and 'dims'"
                raise ValueError(
                    kind + " '" + str(tensor.get("name", "")) + "' in auto-complete-config function for model '"
                    + name + "' contains property other than " + allowed + "."
                )
        if "name" not in tensor:
            raise ValueError(kind + " in auto-complete-config function for model '" + name + "' is missing 'name' property.")
        for prop in ("data_type", "dims"):
            if prop not in tensor:
                raise ValueError(
                    kind + " '" + tensor["name"] + "' in auto-complete-config function for model '"
                    + name + "' is missing '" + prop + "' property."
                )
        existing = self._model_config.setdefault(kind, [])
        for current in existing:
            if current.get("name") != tensor["name"]:
                continue
            current_type = current.get("data_type", "TYPE_INVALID")
            current_dims = current.get("dims", [])
            if current_type != "TYPE_INVALID" and current_type != tensor["data_type"]:
                raise ValueError(
                    "unable to load model '" + name + "', configuration expects datatype " + current_type
                    + " for " + kind + " '" + tensor["name"] + "', model provides " + tensor["data_type"]
                )
            if current_dims and current_dims != tensor["dims"]:
                raise ValueError(
                    "model '" + name + "', tensor '" + tensor["name"] + "': the model expects dims "
                    + str(tensor["dims"]) + " but the model configuration specifies dims " + str(current_dims)
                )
            if kind == "input" and "optional" in current and "optional" in tensor and current["optional"] != tensor["optional"]:
                raise ValueError(
                    "model '" + name + "', tensor '" + tensor["name"] + "': the model expects optional "
                    + str(tensor["optional"]) + " but the model configuration specifies optional "
                    + str(current["optional"])
                )
            current["data_type"] = tensor["data_type"]
            current["dims"] = tensor["dims"]
            if kind == "input" and "optional" in tensor:
                current["optional"] = tensor["optional"]
            return
        existing.append(tensor)

    def add_input(self, input):
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output):
        self._add_tensor("output", output, ("name", "data_type", "dims"))

    def set_model_transaction_policy(self, transaction_policy_dict):
        name = self._name()
        for prop in transaction_policy_dict:
            if prop != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model '"
                    + name + "' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            if "decoupled" in policy and policy["decoupled"] != transaction_policy_dict["decoupled"]:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model '"
                    + name + "', which is already set to '" + str(policy["decoupled"]) + "'."
                )
            policy["decoupled"] = transaction_policy_dict["decoupled"]


# ---------------------------------------------------------------------------
# The runtime the stub host installs. None outside a stub.

_runtime = None


def _require_runtime(what):
    rt = _runtime
    if rt is None:
        raise TritonModelException(what + " is only available inside a model that the server has loaded.")
    return rt


def get_model_dir():
    """Return the directory of the model file (the version directory)."""
    return _require_runtime("get_model_dir()").model_dir


# The model loading API: the server's repository operations, from a model
# (initialize or execute). Load and unload need explicit model-control
# mode, as the repository endpoints do; errors raise TritonModelException.


def load_model(model_name, config="", files=None):
    """Load or reload model_name; config (model config JSON) and files
    ({"file:<version>/<name>": bytes}) override the repository's."""
    if model_name is None or config is None:
        raise TypeError("load_model(): arguments must not be None")
    name = _text(model_name, "model_name", "load_model")
    options = {"config": _text(config, "config", "load_model")}
    if files:
        if not isinstance(files, dict):
            raise TypeError("load_model(): files must be a dict of str to bytes")
        options["files"] = {_text(k, "files", "load_model"): bytes(v) for k, v in files.items()}
    _require_runtime("load_model()").model_control("load", name, options)


def unload_model(model_name, unload_dependents=False):
    """Unload model_name (and, when asked, the models that depend on it)."""
    if model_name is None or unload_dependents is None:
        raise TypeError("unload_model(): arguments must not be None")
    name = _text(model_name, "model_name", "unload_model")
    _require_runtime("unload_model()").model_control("unload", name, {"unload_dependents": bool(unload_dependents)})


def is_model_ready(model_name, model_version=""):
    """Whether model_name (the version given as a string, or the latest)
    is loaded and can serve."""
    if model_name is None or model_version is None:
        raise TypeError("is_model_ready(): arguments must not be None")
    name = _text(model_name, "model_name", "is_model_ready")
    version = _text(model_version, "model_version", "is_model_ready")
    return bool(_require_runtime("is_model_ready()").model_control("is_ready", name, {"version": version}))


# ---------------------------------------------------------------------------
# Parameters (request and response): str keys, bool/int/str values.


def _parameters_json(parameters):
    if parameters is None:
        return ""
    if not isinstance(parameters, dict):
        raise TritonModelException("Expect dict, got " + str(type(parameters)))
    if not parameters:
        return ""
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException("Expect parameters keys to have type str, found type " + str(type(key)))
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                "Expect parameters values to have type bool/int/str, found type " + str(type(value))
            )
    return json.dumps(parameters)


# ---------------------------------------------------------------------------
# DLPack on CPU, through ctypes, so that every dtype (BOOL and BF16
# included, which numpy cannot export) crosses it the same way.

_kDLCPU, _kDLCUDA, _kDLCUDAHost = 1, 2, 3
_kDLInt, _kDLUInt, _kDLFloat, _kDLBfloat, _kDLBool = 0, 1, 2, 4, 6

_DL_OF = {
    _BOOL: (_kDLBool, 8),
    _UINT8: (_kDLUInt, 8),
    _UINT16: (_kDLUInt, 16),
    _UINT32: (_kDLUInt, 32),
    _UINT64: (_kDLUInt, 64),
    _INT8: (_kDLInt, 8),
    _INT16: (_kDLInt, 16),
    _INT32: (_kDLInt, 32),
    _INT64: (_kDLInt, 64),
    _FP16: (_kDLFloat, 16),
    _FP32: (_kDLFloat, 32),
    _FP64: (_kDLFloat, 64),
    _BF16: (_kDLBfloat, 16),
}
_CODE_OF_DL = {v: k for k, v in _DL_OF.items()}
_CODE_OF_DL[(_kDLInt, 1)] = _BOOL  # how Triton itself labels BOOL


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_DL_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DL_DELETER)]


_DLTENSOR_NAME = b"dltensor"
_USED_DLTENSOR_NAME = b"used_dltensor"
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)
# The destructor runs while the capsule is being freed: it must not touch
# the capsule as a Python object, so these take a raw pointer.
_capsule_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)

# Exported tensors stay alive here until their consumer calls the deleter
# (or the capsule dies unconsumed): address of the managed struct ->
# (struct, shape array, the numpy array that owns the data).
_dl_exports = {}
_dl_exports_lock = threading.Lock()


@_DL_DELETER
def _dl_export_deleter(address):
    with _dl_exports_lock:
        _dl_exports.pop(address, None)


@ctypes.PYFUNCTYPE(None, ctypes.c_void_p)
def _dl_capsule_destructor(capsule):
    if _capsule_is_valid_raw(capsule, _DLTENSOR_NAME):
        address = _capsule_get_pointer_raw(capsule, _DLTENSOR_NAME)
        if address:
            _dl_export_deleter(address)


_dl_capsule_destructor_ptr = ctypes.cast(_dl_capsule_destructor, ctypes.c_void_p).value


def _dl_export(array, code):
    data = array.__array_interface__["data"][0] if array.size else None
    return _dl_export_raw(data, array.shape, code, _kDLCPU, 0, array)


def _dl_export_raw(data, dims, code, device_type, device_id, owner):
    """A "dltensor" capsule for data (an address on the device) that keeps
    owner alive until the consumer calls the deleter."""
    managed = _DLManagedTensor()
    ndim = len(dims)
    shape = (ctypes.c_int64 * max(ndim, 1))(*dims)
    t = managed.dl_tensor
    t.data = data
    t.device = _DLDevice(device_type, device_id)
    t.ndim = ndim
    dl_code, bits = _DL_OF[code]
    t.dtype = _DLDataType(dl_code, bits, 1)
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = None
    t.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _dl_export_deleter
    address = ctypes.addressof(managed)
    with _dl_exports_lock:
        _dl_exports[address] = (managed, shape, owner)
    return _capsule_new(address, _DLTENSOR_NAME, _dl_capsule_destructor_ptr)


class _Keep:
    """Owns foreign memory presented to numpy through __array_interface__.

    numpy records a non-array base as is, so every view derived from the
    array keeps this object alive; a weakref.finalize on it runs exactly
    when the last view is gone (used to call a DLPack deleter, or to hand
    a BLS output block back to the supervisor)."""

    __slots__ = ("__array_interface__", "owner", "__weakref__")


def _foreign_array(address, shape, dtype, owner):
    keep = _Keep()
    keep.owner = owner
    keep.__array_interface__ = {
        "version": 3,
        "shape": tuple(shape),
        "typestr": dtype.str,
        "data": (address, False),
    }
    return keep, np.asarray(keep)


def _dl_call_deleter(deleter, address):
    deleter(address)


def _gpu_to_host(device_id, array, pointer):
    try:
        from stubvisor import cuda as stub_cuda

        driver = stub_cuda.driver()
    except Exception:
        raise TritonModelException(
            "DLPack capsule passed pointer to memory allocated on GPU device, when GPU is not available"
        ) from None
    driver.to_host(device_id, array.ctypes.data, pointer, array.nbytes)


def _dl_import(name, capsule):
    if not _capsule_is_valid(capsule, _DLTENSOR_NAME):
        raise TritonModelException("Provided DLPack capsule is not valid or has already been consumed.")
    address = _capsule_get_pointer(capsule, _DLTENSOR_NAME)
    managed = _DLManagedTensor.from_address(address)
    t = managed.dl_tensor
    ndim = t.ndim
    shape = [t.shape[i] for i in range(ndim)]
    if t.strides:
        expected = 1
        for i in range(ndim - 1, -1, -1):
            if shape[i] != 1 and t.strides[i] != expected:
                raise TritonModelException(
                    "DLPack tensor is not contiguous. Only contiguous DLPack "
                    "tensors that are stored in C-Order are supported."
                )
            expected *= shape[i]
    device = t.device.device_type
    if device not in (_kDLCPU, _kDLCUDAHost, _kDLCUDA):
        raise TritonModelException("DLDevice type " + str(device) + " is not support by Python backend.")
    code = _CODE_OF_DL.get((t.dtype.code, t.dtype.bits)) if t.dtype.lanes == 1 else None
    if code is None:
        raise TritonModelException(
            "DLPack dtype (code %d, bits %d, lanes %d) is not supported by Python backend."
            % (t.dtype.code, t.dtype.bits, t.dtype.lanes)
        )
    _capsule_set_name(capsule, _USED_DLTENSOR_NAME)
    dtype = _WIRE_DTYPE[code]
    count = 1
    for d in shape:
        count *= d
    data = (t.data or 0) + t.byte_offset
    if count == 0 or not data:
        if managed.deleter:
            managed.deleter(address)
        array = np.empty(shape, dtype=dtype)
    elif device == _kDLCUDA:
        # A GPU tensor (torch, CuPy) is copied to host memory with the CUDA
        # driver the stub uses for client CUDA regions; the server moves it
        # on to a client's CUDA region when the output goes to one.
        array = np.empty(shape, dtype=dtype)
        try:
            _gpu_to_host(t.device.device_id, array, data)
        finally:
            if managed.deleter:
                managed.deleter(address)
    else:
        keep, array = _foreign_array(data, shape, dtype, capsule)
        if managed.deleter:
            weakref.finalize(keep, _dl_call_deleter, managed.deleter, address)
    return _tensor_from_array(name, code, array)


# ---------------------------------------------------------------------------
# Tensor.

# Set by the host: view(loc, offset, size) -> writable memoryview.
_view = None

# Inputs in a client's CUDA region (stubvisor.ipc.LOC_CUDA) live on the
# device: their _src is (_LOC_CUDA, (region_id, offset), size). The host
# sets _cuda to its CUDA regions (place(region_id, offset, size) ->
# (device, pointer); lease(region_id) -> an object that keeps the memory
# mapped while it lives).
_LOC_CUDA = 4
# A small input's bytes came in the message (stubvisor.ipc.LOC_INLINE): its
# _src is (_LOC_INLINE, bytes, len(bytes)), and the model gets a writable
# copy of them, as it gets a writable view of the pool.
_LOC_INLINE = 5
_cuda = None


class Tensor:
    """A named tensor: an input of a request or an output of a response.

    Inputs the server hands to execute are zero-copy views of the shared
    pool (or, at most 1 KiB, writable copies of the bytes that came in the
    message), made on the first as_numpy(). Outputs keep the numpy array they
    were made from (C-contiguous) until the host copies it into the pool.
    """

    __slots__ = ("_name", "_dtype", "_np", "_shape", "_src", "__weakref__")

    def __init__(self, name, numpy_array):
        # The usual tensor first, in one test: a C-contiguous array of a
        # type Triton knows, under a non-empty name.
        if type(numpy_array) is _ndarray and type(name) is str and name:
            code = _CODE_OF.get(numpy_array.dtype)
            if code is not None and numpy_array.flags.c_contiguous:
                self._name = name
                self._dtype = code
                self._np = numpy_array
                self._shape = None
                self._src = None
                return
        self._check_and_set(name, numpy_array)

    def _check_and_set(self, name, numpy_array):
        if type(name) is not str:
            raise TypeError("Tensor(): name must be a str, got " + str(type(name)))
        array = numpy_array
        if type(array) is not _ndarray:
            if array is None:
                raise TypeError("Tensor(): numpy_array must be a numpy array, got None")
            if not name:
                raise TritonModelException("Tensor name cannot be an empty string.")
            array = np.asarray(array)
        elif not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        code = _CODE_OF.get(array.dtype)
        if code is None:
            code, array = _coerce(array)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        self._name = name
        self._dtype = code
        self._np = array
        self._shape = None
        self._src = None

    def name(self):
        return self._name

    def triton_dtype(self):
        return self._dtype

    def shape(self):
        if self._shape is not None:
            return list(self._shape)
        return list(self._np.shape)

    def is_cpu(self):
        src = self._src
        return src is None or src[0] != _LOC_CUDA

    def as_numpy(self):
        code = self._dtype
        if code == _BF16:
            raise TritonModelException(
                "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and from_dlpack() instead."
            )
        array = self._np
        if array is not None:
            return array
        # The first call on an input: a view of its bytes in the pool, or a
        # writable copy of those that came in the message (the usual
        # fixed-size case here, the rest in _materialize).
        loc, offset, size = self._src
        if size and code != _BYTES and loc != _LOC_CUDA:
            array = self._np = _ndarray(self._shape, _WIRE_DTYPE[code],
                                        bytearray(offset) if loc == _LOC_INLINE else _view(loc, offset, size))
            return array
        if loc == _LOC_CUDA:
            raise TritonModelException("Tensor is stored in GPU and cannot be converted to NumPy.")
        return self._materialize()

    def _materialize(self):
        loc, offset, size = self._src
        if loc == _LOC_INLINE:
            buf = bytearray(offset)  # writable, as a view of the pool is
        else:
            buf = _view(loc, offset, size) if size else memoryview(b"")
        code = self._dtype
        if code == _BYTES:
            array = deserialize_bytes_tensor(buf)
            shape = self._shape
            if len(shape) != 1 or shape[0] != len(array):
                array = array.reshape(shape)
        else:
            array = _ndarray(self._shape, _WIRE_DTYPE[code], buf)
        self._np = array
        return array

    def to_dlpack(self):
        if self._dtype == _BYTES:
            raise TritonModelException("DLPack does not have support for string tensors.")
        array = self._np
        if array is None:
            if self._src[0] == _LOC_CUDA:
                return self._cuda_export()
            array = self._materialize()
        return _dl_export(array, self._dtype)

    def _cuda_export(self):
        _, (region_id, offset), size = self._src
        device, pointer = _cuda.place(region_id, offset, size)
        return _dl_export_raw(pointer if size else None, self._shape, self._dtype, _kDLCUDA, device,
                              _cuda.lease(region_id))

    def __dlpack__(self, stream=None):
        return self.to_dlpack()

    def __dlpack_device__(self):
        src = self._src
        if self._np is None and src[0] == _LOC_CUDA:
            device, _ = _cuda.place(src[1][0], src[1][1], src[2])
            return (_kDLCUDA, device)
        return (_kDLCPU, 0)

    @staticmethod
    def from_dlpack(name, tensor):
        if type(name) is not str:
            raise TypeError("from_dlpack(): name must be a str, got " + str(type(name)))
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        if isinstance(tensor, np.ndarray):
            if not tensor.flags.c_contiguous:
                raise TritonModelException(
                    "DLPack tensor is not contiguous. Only contiguous DLPack "
                    "tensors that are stored in C-Order are supported."
                )
            return Tensor(name, tensor)
        if type(tensor).__name__ == "PyCapsule":
            return _dl_import(name, tensor)
        if not hasattr(tensor, "__dlpack__") or not hasattr(tensor, "__dlpack_device__"):
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule "
                "or have `__dlpack__` and `__dlpack_device__` attributes"
            )
        device, _ = tensor.__dlpack_device__()
        if device not in (_kDLCPU, _kDLCUDAHost, _kDLCUDA):
            raise TritonModelException("DLDevice type " + str(device) + " is not support by Python backend.")
        # Stream 1 is CUDA's legacy default stream, which the driver's
        # synchronous copy to host runs on: the producer orders its work
        # before it.
        return _dl_import(name, tensor.__dlpack__(stream=1 if device == _kDLCUDA else None))

    def __repr__(self):
        return "Tensor(name=%r, dtype=%d, shape=%r)" % (self._name, self._dtype, self.shape())

    # The host's view of an output: (bytes-like, nbytes, shape list).
    def _payload(self):
        array = self._np
        if array is None:
            loc, offset, size = self._src
            if loc == _LOC_INLINE:
                return offset, size, list(self._shape)
            return (_view(loc, offset, size) if size else b""), size, list(self._shape)
        if self._dtype == _BYTES:
            data = _serialize(array)
            return data, len(data), list(array.shape)
        size = array.nbytes
        if size == 0:
            return b"", 0, list(array.shape)
        return memoryview(array).cast("B") if array.ndim else array.tobytes(), size, list(array.shape)


def _coerce(array):
    """The slow path of the Tensor constructor: bytes_ arrays, non-native
    byte order, and the dtypes Triton refuses."""
    dtype = array.dtype
    if dtype.type is np.bytes_:
        return _BYTES, array
    if dtype.byteorder == ">" and dtype.newbyteorder("=") in _CODE_OF:
        native = dtype.newbyteorder("=")
        return _CODE_OF[native], array.astype(native)
    raise TritonModelException("NumPy dtype is not supported.")


_new_tensor = Tensor.__new__


def _tensor(name, code, array, shape, src):
    """A Tensor made without the constructor's checks: from an array
    already checked (array), or, for an input described by the wire, from
    its shape and src (loc, offset, size), its numpy view made on demand."""
    t = _new_tensor(Tensor)
    t._name = name
    t._dtype = code
    t._np = array
    t._shape = shape
    t._src = src
    return t


def _tensor_from_array(name, code, array):
    return _tensor(name, code, array, None, None)


def _input_tensor(name, code, shape, loc, offset, size):
    return _tensor(name, code, None, shape, (loc, offset, size))


# ---------------------------------------------------------------------------
# Requests, responses, senders.


class PreferredMemory:
    def __init__(self, preferred_memory_type, preferred_device_id=0):
        if preferred_memory_type is None or preferred_device_id is None:
            raise TypeError("PreferredMemory(): arguments must not be None")
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    def __init__(self, context=""):
        self._context = context or ""

    def get_context(self):
        return self._context or None


_DEFAULT_PREFERRED_MEMORY = PreferredMemory(_MEMORY_DEFAULT, 0)
_DEFAULT_TRACE = InferenceTrace()
_MISSING = object()


# _NO_OUTPUTS is InferenceResponse's default for output_tensors, so that an
# explicit None is told apart and refused as in Triton.
_NO_OUTPUTS = ()


class InferenceResponse:
    """A response: output tensors, or an error; optional parameters."""

    __slots__ = ("_outputs", "_error", "_params", "_release", "__weakref__")

    def __init__(self, output_tensors=_NO_OUTPUTS, error=None, parameters=None):
        if type(output_tensors) is list and error is None and parameters is None:
            # The usual response: a list of Tensors and nothing else.
            for t in output_tensors:
                if type(t) is not Tensor:
                    break
            else:
                self._outputs = output_tensors
                self._error = None
                self._params = ""
                self._release = None
                return
        if output_tensors is _NO_OUTPUTS:
            output_tensors = []
        elif output_tensors is None:
            raise TypeError("InferenceResponse(): output_tensors must be a list of Tensor, got None")
        elif not isinstance(output_tensors, list):
            if not isinstance(output_tensors, tuple):
                raise TypeError("InferenceResponse(): output_tensors must be a list of Tensor")
            output_tensors = list(output_tensors)
        for t in output_tensors:
            if t is None:
                # Triton's text for a None in the list.
                raise TritonModelException("Tensor is None")
            if not isinstance(t, Tensor):
                raise TypeError("InferenceResponse(): output_tensors must be a list of Tensor, found " + str(type(t)))
        if error is not None and not isinstance(error, TritonError):
            raise TypeError("InferenceResponse(): error must be a TritonError, found " + str(type(error)))
        self._outputs = output_tensors
        self._error = error
        self._params = _parameters_json(parameters) if parameters is not None else ""
        self._release = None

    def output_tensors(self):
        return self._outputs

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error

    def parameters(self):
        return self._params or "{}"


_SEND_FLAG_TEXT = "Unable to send response. Unsupported flag provided."
_SEND_NONE_TEXT = "Inference Response object must be provided when the response flags is set to zero."


class _SendState:
    """What has been sent for one request. It belongs to the request, so
    every sender of the request shares it: a request holds its sender only
    weakly (the sender holds the request), so that a sender the model drops
    is freed at once and not at the next cyclic collection."""

    __slots__ = ("lock", "closed", "sent")

    def __init__(self, closed):
        self.lock = threading.Lock()
        self.closed = closed
        self.sent = 0


class InferenceResponseSender:
    """Sends responses for one request, from any thread. Decoupled models
    send 0..N responses and then FINAL; other models may send exactly one
    response (then FINAL) instead of returning it from execute."""

    __slots__ = ("_rt", "_request", "_decoupled", "_state", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError("InferenceResponseSender cannot be created directly; use request.get_response_sender()")

    def _update(self, response, flags):
        # Triton's UpdateStateAndCounters, with its texts.
        state = self._state
        with state.lock:
            if not self._decoupled:
                if response is not None and state.sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than one response."
                    )
                if response is None and flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL and state.sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete final before sending a response."
                    )
            if state.closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            if flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                state.closed = True
            state.sent += 1

    def send(self, response=None, flags=0):
        if flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL and flags != 0:
            raise TritonModelException(_SEND_FLAG_TEXT)
        if flags == 0 and response is None:
            raise TritonModelException(_SEND_NONE_TEXT)
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError("send(): response must be an InferenceResponse, found " + str(type(response)))
        self._update(response, flags)
        self._rt.send_response(self._request, response, flags)

    def is_cancelled(self):
        return self._request.is_cancelled()

    def _close(self):
        with self._state.lock:
            self._state.closed = True

    def _is_closed(self):
        return self._state.closed


def _text(value, arg, where="InferenceRequest"):
    """A string argument as Triton's bindings take it: str, or bytes (a
    value read from a BYTES tensor, say) decoded as UTF-8."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "surrogateescape")
    raise TypeError("%s(): argument '%s' must be a string, found %s" % (where, arg, type(value)))


class InferenceRequest:
    """A request: one the server hands to execute, or a BLS request a model
    builds to call another model with exec()/async_exec()."""

    __slots__ = (
        "_handle",
        "_id",
        "_correlation_id",
        "_flags",
        "_inputs",
        "_requested",
        "_params",
        "_timeout",
        "_model_name",
        "_model_version",
        "_preferred_memory",
        "_trace",
        "_sender",
        "_send_state",
        "_release_flags",
        "_rt",
        "_final",
        "__weakref__",
    )

    def __init__(
        self,
        request_id="",
        correlation_id=0,
        inputs=_MISSING,
        requested_output_names=_MISSING,
        model_name=_MISSING,
        model_version=-1,
        flags=0,
        timeout=0,
        preferred_memory=_DEFAULT_PREFERRED_MEMORY,
        trace=_DEFAULT_TRACE,
        parameters=None,
    ):
        # One chain of identity tests in the usual case; the loop names
        # the first argument that is missing or None.
        if (inputs is _MISSING or requested_output_names is _MISSING or model_name is _MISSING
                or request_id is None or correlation_id is None or inputs is None
                or requested_output_names is None or model_name is None or model_version is None
                or flags is None or timeout is None or preferred_memory is None or trace is None):
            _check_request_args(request_id, correlation_id, inputs, requested_output_names, model_name,
                                model_version, flags, timeout, preferred_memory, trace)
        if isinstance(correlation_id, bool) or not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        inputs = list(inputs)
        for t in inputs:
            if not isinstance(t, Tensor):
                raise TritonModelException(
                    "Input tensors of an InferenceRequest must be pb_utils.Tensor objects, found " + str(type(t))
                )
        requested = []
        for name in requested_output_names:
            name = _text(name, "requested_output_names")
            if name not in requested:
                requested.append(name)
        _fill_request(self, None, 0, _text(request_id, "request_id"), correlation_id, int(flags), inputs, requested,
                      _parameters_json(parameters), int(timeout), _text(model_name, "model_name"), int(model_version),
                      preferred_memory, trace)

    def inputs(self):
        return self._inputs

    def request_id(self):
        return self._id

    def correlation_id(self):
        return self._correlation_id

    def flags(self):
        return self._flags

    def set_flags(self, flags):
        self._flags = int(flags)

    def timeout(self):
        return self._timeout

    def parameters(self):
        return self._params or "{}"

    def trace(self):
        return self._trace

    def requested_output_names(self):
        return self._requested

    def model_name(self):
        return self._model_name

    def get_response_sender(self):
        ref = self._sender
        sender = ref() if ref is not None else None
        if sender is None:
            rt = self._rt
            if rt is None:
                raise TritonModelException(
                    "Unable to send response. Response sender has no reference to the decoupled state of the model."
                )
            sender = InferenceResponseSender.__new__(InferenceResponseSender)
            sender._rt = rt
            sender._request = self
            sender._decoupled = rt.decoupled
            state = self._send_state
            if state is None:
                # A request whose response execute already returned (or
                # whose batch failed) takes no more responses.
                state = self._send_state = _SendState(self._final)
            sender._state = state
            self._sender = weakref.ref(sender)
        return sender

    def is_cancelled(self):
        rt = self._rt
        if rt is None:
            return False
        return rt.is_cancelled(self._handle)

    def set_release_flags(self, flags):
        if flags is None:
            raise TypeError("set_release_flags(): flags must not be None")
        self._release_flags = int(flags)

    def exec(self, decoupled=False):
        if decoupled is None:
            raise TypeError("exec(): decoupled must not be None")
        rt = _runtime
        if rt is None or not rt.bls_allowed():
            raise TritonModelException("BLS is only supported during the 'execute' function.")
        return rt.bls(self, bool(decoupled))

    def async_exec(self, decoupled=False):
        if decoupled is None:
            raise TypeError("async_exec(): decoupled must not be None")
        loop = asyncio.get_running_loop()
        rt = _runtime
        if not decoupled and rt is not None and rt.bls_allowed():
            # Sent from the loop, resolved there: no executor thread.
            return rt.bls_async(self, loop)
        return loop.run_in_executor(None, functools.partial(self.exec, bool(decoupled)))


def _check_request_args(request_id, correlation_id, inputs, requested_output_names, model_name, model_version,
                        flags, timeout, preferred_memory, trace):
    """Raise Triton's TypeError for the first InferenceRequest argument
    that is missing or None."""
    for arg, value in (
        ("request_id", request_id),
        ("correlation_id", correlation_id),
        ("inputs", inputs),
        ("requested_output_names", requested_output_names),
        ("model_name", model_name),
        ("model_version", model_version),
        ("flags", flags),
        ("timeout", timeout),
        ("preferred_memory", preferred_memory),
        ("trace", trace),
    ):
        if value is _MISSING:
            raise TypeError("InferenceRequest(): missing required argument '" + arg + "'")
        if value is None:
            raise TypeError("InferenceRequest(): argument '" + arg + "' must not be None")


def _fill_request(r, rt, handle, request_id, correlation_id, flags, inputs, requested, params, timeout, model_name,
                  model_version, preferred_memory, trace):
    """Set every slot of r. rt is the host for a request the server handed
    to execute, None for BLS. The host's execute path (stubvisor/execute.py)
    sets the same slots inline; test_host checks that it sets them all."""
    r._handle = handle
    r._id = request_id
    r._correlation_id = correlation_id
    r._flags = flags
    r._inputs = inputs
    r._requested = requested
    r._params = params
    r._timeout = timeout
    r._model_name = model_name
    r._model_version = model_version
    r._preferred_memory = preferred_memory
    r._trace = trace
    r._sender = None
    r._send_state = None
    r._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
    r._rt = rt
    r._final = False
    return r


_new_request = InferenceRequest.__new__


def _incoming_request(rt, handle, request_id, correlation_id, flags, inputs, requested, params, timeout):
    """A request the server handed to execute (built by the host)."""
    return _fill_request(_new_request(InferenceRequest), rt, handle, request_id, correlation_id, flags, inputs,
                         requested, params, timeout, rt.model_name, rt.model_version, _DEFAULT_PREFERRED_MEMORY,
                         _DEFAULT_TRACE)


class ResponseIterator:
    """Iterates the responses of a decoupled BLS request. The last response
    carries the FINAL flag and may have no outputs. As in Triton, the
    iterator keeps what it has returned: once the stream has ended, a new
    iteration (iter(), a for loop) replays every response from the first,
    so their outputs stay in the arena while the iterator lives."""

    def __init__(self, *args, **kwargs):
        raise TypeError("ResponseIterator cannot be created directly; use exec(decoupled=True)")

    def __iter__(self):
        if self._ended:
            self._next = 0
        return self

    def __next__(self):
        taken = self._taken
        if self._next < len(taken):
            self._next += 1
            return taken[self._next - 1]
        response = None if self._ended else self._call.next_response()
        if response is None:
            self._ended = True
            raise StopIteration
        taken.append(response)
        self._next += 1
        return response

    def cancel(self):
        self._call.cancel()


def _response_iterator(call):
    it = ResponseIterator.__new__(ResponseIterator)
    it._call = call
    it._taken = []
    it._next = 0
    it._ended = False
    return it


# ---------------------------------------------------------------------------
# Logger.


class Logger:
    """Logs to the server log with the caller's file and line."""

    class LogLevel(enum.IntEnum):
        INFO = 0
        WARNING = 1
        ERROR = 2
        VERBOSE = 3

    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    # As in Triton, the message must be a str and the level a LogLevel (not
    # a plain int, nor None): anything else is a TypeError.

    @staticmethod
    def log(message, level=LogLevel.INFO):
        if not isinstance(level, Logger.LogLevel):
            raise TypeError("log(): level must be a pb_utils.Logger.LogLevel, got " + str(type(level)))
        _log(level, _log_message(message), sys._getframe(1))

    @staticmethod
    def log_info(message):
        _log(Logger.LogLevel.INFO, _log_message(message), sys._getframe(1))

    @staticmethod
    def log_warn(message):
        _log(Logger.LogLevel.WARNING, _log_message(message), sys._getframe(1))

    @staticmethod
    def log_error(message):
        _log(Logger.LogLevel.ERROR, _log_message(message), sys._getframe(1))

    @staticmethod
    def log_verbose(message):
        _log(Logger.LogLevel.VERBOSE, _log_message(message), sys._getframe(1))


def _log_message(message):
    if not isinstance(message, str):
        raise TypeError("log(): message must be a str, got " + str(type(message)))
    return message


_LEVEL_NAMES = ("INFO", "WARNING", "ERROR", "VERBOSE")


def _log(level, message, frame):
    filename = os.path.basename(frame.f_code.co_filename)
    line = frame.f_lineno
    rt = _runtime
    if rt is not None:
        rt.log(_LEVEL_NAMES[level], str(message), filename, line)
        return
    # Outside a stub (or before it attached): glog-style line on stderr.
    now = time.time()
    lt = time.localtime(now)
    sys.stderr.write(
        "%s%02d%02d %02d:%02d:%02d.%06d %d %s:%d] %s\n"
        % ("IWEV"[level], lt.tm_mon, lt.tm_mday, lt.tm_hour, lt.tm_min, lt.tm_sec,
           int((now % 1) * 1e6), os.getpid(), filename, line, message)
    )


# ---------------------------------------------------------------------------
# Custom metrics. The values live in this process, so an update costs no
# message (in Triton each is a round trip to the server); the supervisor
# collects them when /metrics is scraped (_collect_metrics). The API behaves
# as Triton's does: shared families and label sets, kind rules, lifetime
# errors.


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


COUNTER = MetricKind.COUNTER
GAUGE = MetricKind.GAUGE
HISTOGRAM = MetricKind.HISTOGRAM

_metrics_lock = threading.Lock()
_metric_families = {}  # name -> _FamilyState


class _FamilyState:
    __slots__ = ("name", "description", "kind", "cells")

    def __init__(self, name, description, kind):
        self.name = name
        self.description = description
        self.kind = kind
        self.cells = {}  # labels json -> _Cell


class _Cell:
    __slots__ = ("value", "buckets", "counts", "sum", "count")

    def __init__(self, buckets):
        self.value = 0.0
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1) if buckets is not None else None
        self.sum = 0.0
        self.count = 0


_METRIC_DELETED_TEXT = (
    "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. "
    "The 'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have been deleted."
)


def _collect_metrics():
    """Every family and its label sets, in the wire form of the
    CollectMetrics reply (ipc/messages.go)."""
    with _metrics_lock:
        out = []
        for state in _metric_families.values():
            metrics = []
            for key, cell in state.cells.items():
                metrics.append([json.loads(key), cell.value, cell.buckets,
                                list(cell.counts) if cell.counts is not None else None, cell.sum, cell.count])
            out.append([state.name, state.description, int(state.kind), metrics])
        return out


class MetricFamily:
    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name, description, kind):
        if name is None or description is None or kind is None:
            raise TypeError("MetricFamily(): arguments must not be None")
        kind = MetricKind(kind)
        with _metrics_lock:
            state = _metric_families.get(name)
            if state is None:
                state = _FamilyState(name, description, kind)
                _metric_families[name] = state
            elif state.kind != kind:
                raise TritonModelException(
                    "Error when creating MetricFamily: metric family '%s' already exists with a different kind" % name
                )
        self._state = state
        self._metrics = weakref.WeakSet()

    def Metric(self, labels=None, buckets=None):
        if labels is None:
            labels = {}
        if not isinstance(labels, dict):
            raise TypeError("Metric(): labels must be a dict")
        for k, v in labels.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TritonModelException("Error when creating Metric: labels must map str to str")
        state = self._state
        if state.kind == MetricKind.HISTOGRAM:
            if buckets is None:
                raise TritonModelException("Error when creating Metric: Missing required buckets for histogram metric.")
            buckets = [float(b) for b in buckets]
            for a, b in zip(buckets, buckets[1:]):
                if not a < b:
                    raise TritonModelException(
                        "Error when creating Metric: histogram buckets must be in strictly increasing order."
                    )
        elif buckets is not None:
            raise TritonModelException("Error when creating Metric: buckets are only valid for histogram metrics.")
        key = json.dumps(labels, sort_keys=True)
        with _metrics_lock:
            cell = state.cells.get(key)
            if cell is None:
                cell = _Cell(buckets)
                state.cells[key] = cell
        metric = Metric.__new__(Metric)
        metric._cell = cell
        metric._kind = state.kind
        metric._labels = dict(labels)
        metric._deleted = False
        self._metrics.add(metric)
        return metric

    def __del__(self):
        try:
            for metric in list(self._metrics):
                metric._deleted = True
        except Exception:
            pass


class Metric:
    """One labelled series of a MetricFamily."""

    __slots__ = ("_cell", "_kind", "_labels", "_deleted", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError("Metric cannot be created directly; use MetricFamily.Metric()")

    def _check(self):
        if self._deleted:
            raise TritonModelException(_METRIC_DELETED_TEXT)

    def increment(self, value):
        self._check()
        if self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to increment metric value: histogram metrics do not support increment.")
        if self._kind == MetricKind.COUNTER and value < 0:
            raise TritonModelException("Failed to increment metric value: counters can only be incremented by non-negative values.")
        with _metrics_lock:
            self._cell.value += float(value)

    def set(self, value):
        self._check()
        if self._kind != MetricKind.GAUGE:
            raise TritonModelException("Failed to set metric value: only gauge metrics support set.")
        with _metrics_lock:
            self._cell.value = float(value)

    def observe(self, value):
        self._check()
        if self._kind != MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to observe metric value: only histogram metrics support observe.")
        value = float(value)
        cell = self._cell
        with _metrics_lock:
            cell.sum += value
            cell.count += 1
            for i, bound in enumerate(cell.buckets):
                if value <= bound:
                    cell.counts[i] += 1
            cell.counts[-1] += 1

    def value(self):
        self._check()
        if self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to get metric value: histogram metrics do not support value.")
        return self._cell.value
