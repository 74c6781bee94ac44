/* The Python stub's per-request hot path in C (stubvisor.fastpath).
 *
 * Two steps of every execute that are pure overhead in Python: turning the
 * decoded Execute message into pb_utils InferenceRequest and Tensor objects
 * (execute.py, ExecuteMixin._requests), and encoding the usual ExecuteDone
 * (ExecuteMixin._usual_done). Each function does exactly what its Python
 * twin does for the usual message and returns None for anything else, so
 * the Python code, which stays the reference, handles every rare shape,
 * check and error text. stubvisor/native.py loads this module when it can
 * (STUBVISOR_PY_FASTPATH=0 turns it off); without it the stub runs the same
 * Python path, only slower.
 *
 * The objects are filled through the member slots of the classes' __slots__
 * (offsets read once in setup), as object.__new__ and slot assignments in
 * Python would, without the interpreter around them. The frame bytes are
 * what msgpack.Packer(use_bin_type=True) makes of the same lists
 * (fastwire.py; python/tests/test_fastpath.py compares both paths).
 *
 * The module is these files: this one (setup, the requests), fastpath_done.c
 * (the ExecuteDone frame, BYTES splitting), fastpath_msgpack.c (its msgpack
 * writer, which the BLS path shares), fastpath_pb.c (pb_utils' calls
 * and constructors), fastpath_ring.c (the rings) and fastpath_bytes.c
 * (BYTES tensors' elements), sharing fastpath.h. The calling stub's BLS
 * path is four more (fastpath_bls.c says what).
 *
 * CPython C API only, built by the Makefile against the interpreter the
 * stub runs on (its EXT_SUFFIX names the ABI, so another interpreter never
 * loads it). */
#include "fastpath.h"

long loc_client, loc_cuda, loc_inline, bytes_code, inline_max, kind_execute_done, flag_final;
PyTypeObject *tensor_type, *request_type, *response_type, *ndarray_type;
PyObject *default_trace, *default_memory, *release_all;
Py_ssize_t t_name, t_dtype, t_np, t_shape, t_src;
Py_ssize_t r_handle, r_id, r_correlation_id, r_flags, r_inputs, r_requested, r_params, r_timeout, r_model_name,
    r_model_version, r_preferred_memory, r_trace, r_sender, r_send_state, r_release_flags, r_rt, r_final;
Py_ssize_t s_outputs, s_error, s_params, s_release;
int ready;

/* The offset of a __slots__ member of tp, or -1 with an exception set. */
static Py_ssize_t slot_offset(PyTypeObject *tp, const char *name)
{
    PyObject *d = PyDict_GetItemString(tp->tp_dict, name);
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "fastpath: %s.%s is not a slot", tp->tp_name, name);
        return -1;
    }
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    if (m->type != T_OBJECT_EX || (m->flags & READONLY)) {
        PyErr_Format(PyExc_TypeError, "fastpath: %s.%s is not a plain object slot", tp->tp_name, name);
        return -1;
    }
    return m->offset;
}

Py_ssize_t fp_slot_offset(PyTypeObject *tp, const char *name)
{
    return slot_offset(tp, name);
}

static int set_type(PyTypeObject **dst, PyObject *o)
{
    if (!PyType_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "fastpath: setup expects classes");
        return -1;
    }
    Py_INCREF(o);
    Py_XSETREF(*dst, (PyTypeObject *)o);
    return 0;
}

static int get_long(PyObject *consts, const char *key, long *dst)
{
    PyObject *v = PyDict_GetItemString(consts, key);
    if (v == NULL || !PyLong_Check(v)) {
        PyErr_Format(PyExc_KeyError, "fastpath: setup lacks the int %s", key);
        return -1;
    }
    *dst = PyLong_AsLong(v);
    return PyErr_Occurred() ? -1 : 0;
}

/* *dst = consts[key] (a new reference), or -1 with KeyError; setup_bls
 * (fastpath_bls.c) reads its dict with it too. */
int fp_get_obj(PyObject *consts, const char *key, PyObject **dst)
{
    PyObject *v = PyDict_GetItemString(consts, key);
    if (v == NULL) {
        PyErr_Format(PyExc_KeyError, "fastpath: setup lacks %s", key);
        return -1;
    }
    Py_INCREF(v);
    Py_XSETREF(*dst, v);
    return 0;
}

/* setup(consts): the classes, defaults and wire constants, by name. */
static PyObject *fp_setup(PyObject *self, PyObject *consts)
{
    PyObject *o;
    ready = 0;
    if (!PyDict_Check(consts)) {
        PyErr_SetString(PyExc_TypeError, "fastpath: setup expects a dict");
        return NULL;
    }
#define TYPE(key, dst)                                                                                   \
    if ((o = PyDict_GetItemString(consts, key)) == NULL) {                                               \
        PyErr_Format(PyExc_KeyError, "fastpath: setup lacks %s", key);                                   \
        return NULL;                                                                                     \
    }                                                                                                    \
    if (set_type(&dst, o) < 0)                                                                           \
        return NULL;
    TYPE("Tensor", tensor_type)
    TYPE("InferenceRequest", request_type)
    TYPE("InferenceResponse", response_type)
    TYPE("ndarray", ndarray_type)
#undef TYPE
    if (fp_get_obj(consts, "default_trace", &default_trace) < 0 || fp_get_obj(consts, "default_memory", &default_memory) < 0
        || fp_get_obj(consts, "release_all", &release_all) < 0 || get_long(consts, "LOC_CLIENT", &loc_client) < 0
        || get_long(consts, "LOC_CUDA", &loc_cuda) < 0 || get_long(consts, "LOC_INLINE", &loc_inline) < 0
        || get_long(consts, "BYTES", &bytes_code) < 0 || get_long(consts, "INLINE_MAX", &inline_max) < 0
        || get_long(consts, "KIND_EXECUTE_DONE", &kind_execute_done) < 0
        || get_long(consts, "FLAG_FINAL", &flag_final) < 0)
        return NULL;
#define OFF(tp, dst, name)                                                                               \
    if ((dst = slot_offset(tp, name)) < 0)                                                              \
        return NULL;
    OFF(tensor_type, t_name, "_name")
    OFF(tensor_type, t_dtype, "_dtype")
    OFF(tensor_type, t_np, "_np")
    OFF(tensor_type, t_shape, "_shape")
    OFF(tensor_type, t_src, "_src")
    OFF(request_type, r_handle, "_handle")
    OFF(request_type, r_id, "_id")
    OFF(request_type, r_correlation_id, "_correlation_id")
    OFF(request_type, r_flags, "_flags")
    OFF(request_type, r_inputs, "_inputs")
    OFF(request_type, r_requested, "_requested")
    OFF(request_type, r_params, "_params")
    OFF(request_type, r_timeout, "_timeout")
    OFF(request_type, r_model_name, "_model_name")
    OFF(request_type, r_model_version, "_model_version")
    OFF(request_type, r_preferred_memory, "_preferred_memory")
    OFF(request_type, r_trace, "_trace")
    OFF(request_type, r_sender, "_sender")
    OFF(request_type, r_send_state, "_send_state")
    OFF(request_type, r_release_flags, "_release_flags")
    OFF(request_type, r_rt, "_rt")
    OFF(request_type, r_final, "_final")
    OFF(response_type, s_outputs, "_outputs")
    OFF(response_type, s_error, "_error")
    OFF(response_type, s_params, "_params")
    OFF(response_type, s_release, "_release")
#undef OFF
    ready = 1;
    Py_RETURN_NONE;
}

/* A new instance of tp, as object.__new__(tp) makes it (every slot unset). */
static PyObject *new_instance(PyTypeObject *tp)
{
    return tp->tp_alloc(tp, 0);
}

/* Store a new reference to v in a slot of a fresh object (no old value). */
static inline void put(PyObject *o, Py_ssize_t off, PyObject *v)
{
    Py_INCREF(v);
    SLOT(o, off) = v;
}

/* The Tensor of one input descriptor [name, data_type, shape, loc, offset,
 * size(, region id or bytes)], or NULL without an exception where the
 * Python path must take the message (or NULL with one: out of memory). */
static PyObject *input_tensor(PyObject *t)
{
    if (!PyList_CheckExact(t))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(t);
    if (n != 6 && n != 7)
        return NULL;
    PyObject **f = ((PyListObject *)t)->ob_item;
    PyObject *loc = f[3], *extra = n == 7 ? f[6] : Py_None;
    if (!PyLong_CheckExact(loc))
        return NULL;
    int overflow;
    long lv = PyLong_AsLongAndOverflow(loc, &overflow);
    if (overflow || lv == loc_cuda)
        return NULL; /* CUDA inputs: the Python path collects them */
    PyObject *src;
    if (lv == loc_inline) {
        if (!PyBytes_CheckExact(extra))
            return NULL;
        PyObject *len = PyLong_FromSsize_t(PyBytes_GET_SIZE(extra));
        if (len == NULL)
            return NULL;
        src = PyTuple_Pack(3, loc, extra, len);
        Py_DECREF(len);
    } else if (lv < loc_client) {
        src = PyTuple_Pack(3, loc, f[4], f[5]);
    } else {
        PyObject *where = PyTuple_Pack(2, extra, f[4]);
        if (where == NULL)
            return NULL;
        src = PyTuple_Pack(3, loc, where, f[5]);
        Py_DECREF(where);
    }
    if (src == NULL)
        return NULL;
    PyObject *x = new_instance(tensor_type);
    if (x == NULL) {
        Py_DECREF(src);
        return NULL;
    }
    put(x, t_name, f[0]);
    put(x, t_dtype, f[1]);
    put(x, t_shape, f[2]);
    put(x, t_np, Py_None);
    SLOT(x, t_src) = src;
    return x;
}

/* requests(wire_requests, host, model_name, model_version): the
 * InferenceRequests of an Execute message's requests, or None where the
 * Python path must build them (a request with output targets or a trace
 * context, a CUDA input, anything unexpected). */
static PyObject *fp_requests(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "fastpath.requests takes 4 arguments");
        return NULL;
    }
    PyObject *wire = args[0], *host = args[1];
    if (!ready || !PyList_CheckExact(wire))
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(wire);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *w = PyList_GET_ITEM(wire, i);
        if (!PyList_CheckExact(w) || PyList_GET_SIZE(w) != 8)
            goto python;
        PyObject **f = ((PyListObject *)w)->ob_item;
        if (!PyList_CheckExact(f[4]))
            goto python;
        Py_ssize_t ni = PyList_GET_SIZE(f[4]);
        PyObject *inputs = PyList_New(ni);
        if (inputs == NULL)
            goto fail;
        for (Py_ssize_t j = 0; j < ni; j++) {
            /* The list can change while a tensor is made only through a
             * collection running a finalizer: re-read it every time. */
            if (j >= PyList_GET_SIZE(f[4])) {
                Py_DECREF(inputs);
                goto python;
            }
            PyObject *x = input_tensor(PyList_GET_ITEM(f[4], j));
            if (x == NULL) {
                Py_DECREF(inputs);
                if (PyErr_Occurred())
                    goto fail;
                goto python;
            }
            PyList_SET_ITEM(inputs, j, x);
        }
        PyObject *r = new_instance(request_type);
        if (r == NULL) {
            Py_DECREF(inputs);
            goto fail;
        }
        put(r, r_handle, f[0]);
        put(r, r_id, f[1]);
        put(r, r_correlation_id, f[2]);
        put(r, r_flags, f[3]);
        SLOT(r, r_inputs) = inputs;
        put(r, r_requested, f[5]);
        put(r, r_params, f[6]);
        put(r, r_timeout, f[7]);
        put(r, r_model_name, args[2]);
        put(r, r_model_version, args[3]);
        put(r, r_preferred_memory, default_memory);
        put(r, r_trace, default_trace);
        put(r, r_sender, Py_None);
        put(r, r_send_state, Py_None);
        put(r, r_release_flags, release_all);
        put(r, r_rt, host);
        put(r, r_final, Py_False);
        PyList_SET_ITEM(out, i, r);
    }
    return out;
python:
    Py_DECREF(out);
    Py_RETURN_NONE;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"setup", (PyCFunction)fp_setup, METH_O, "setup(consts): the classes and constants the functions use."},
    {"requests", (PyCFunction)(void (*)(void))fp_requests, METH_FASTCALL,
     "requests(wire_requests, host, model_name, model_version) -> list of InferenceRequest, or None."},
    {"usual_done", (PyCFunction)(void (*)(void))fp_usual_done, METH_FASTCALL,
     "usual_done(batch_id, requests, returned, inline_room) -> ExecuteDone frame bytes, or None."},
    {"as_numpy", (PyCFunction)fp_as_numpy, METH_O, "as_numpy(tensor): pb_utils.Tensor.as_numpy."},
    {"get_input_tensor_by_name", (PyCFunction)(void (*)(void))fp_get_input, METH_FASTCALL,
     "get_input_tensor_by_name(request, name): pb_utils.get_input_tensor_by_name."},
    {"setup_pb", (PyCFunction)(void (*)(void))fp_setup_pb, METH_FASTCALL,
     "setup_pb(as_numpy, get_input_tensor_by_name, wire_dtypes, bf16)."},
    {"method", (PyCFunction)fp_method, METH_O, "method(function): an instancemethod of function."},
    {"tensor_init", (PyCFunction)(void (*)(void))fp_tensor_init, METH_FASTCALL | METH_KEYWORDS,
     "pb_utils.Tensor.__init__ for the usual tensor."},
    {"response_init", (PyCFunction)(void (*)(void))fp_response_init, METH_FASTCALL | METH_KEYWORDS,
     "pb_utils.InferenceResponse.__init__ for the usual response."},
    {"setup_init", (PyCFunction)(void (*)(void))fp_setup_init, METH_FASTCALL, "setup_init(tensor_init, response_init, code_of)."},
    {"split_bytes", (PyCFunction)fp_split_bytes, METH_O, "split_bytes(buffer) -> the elements of a BYTES tensor."},
    {"setup_bytes", (PyCFunction)(void (*)(void))fp_setup_bytes, METH_FASTCALL, "setup_bytes(object_dtype, bytes_type)."},
    {"serialize_bytes", (PyCFunction)fp_serialize_bytes, METH_O, "serialize_bytes(array) -> a BYTES tensor's wire bytes, or None."},
    {"bytes_array", (PyCFunction)fp_bytes_array, METH_O, "bytes_array(buffer) -> the object array of a BYTES tensor."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "stubvisor.fastpath", "The Python stub's per-request hot path in C.", -1, methods,
};

PyMODINIT_FUNC PyInit_fastpath(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (fp_pb_ready() < 0 || fp_ring_ready() < 0 || fp_bls_ready(m) < 0
        || PyModule_AddObjectRef(m, "Ring", (PyObject *)&RingType) < 0
        || PyModule_AddIntConstant(m, "ABI", FASTPATH_ABI) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
