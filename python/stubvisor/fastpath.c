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
 * CPython C API only, built by the Makefile against the interpreter the
 * stub runs on (its EXT_SUFFIX names the ABI, so another interpreter never
 * loads it). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Bumped whenever a function here changes its contract: native.py loads
 * only the ABI it was written for, so a stale build is never used. */
#define FASTPATH_ABI 4

/* Wire constants (stubvisor/ipc.py), given to setup. */
static long loc_client, loc_cuda, loc_inline, bytes_code, inline_max, kind_execute_done, flag_final;

static PyTypeObject *tensor_type, *request_type, *response_type, *ndarray_type;
static PyObject *default_trace, *default_memory, *release_all;

/* Member offsets of the pb_utils classes' slots. */
static Py_ssize_t t_name, t_dtype, t_np, t_shape, t_src;
static Py_ssize_t r_handle, r_id, r_correlation_id, r_flags, r_inputs, r_requested, r_params, r_timeout,
    r_model_name, r_model_version, r_preferred_memory, r_trace, r_sender, r_send_state, r_release_flags, r_rt,
    r_final;
static Py_ssize_t s_outputs, s_error, s_params, s_release;

static int ready;

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

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

static int get_obj(PyObject *consts, const char *key, PyObject **dst)
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
    if (get_obj(consts, "default_trace", &default_trace) < 0 || get_obj(consts, "default_memory", &default_memory) < 0
        || get_obj(consts, "release_all", &release_all) < 0 || get_long(consts, "LOC_CLIENT", &loc_client) < 0
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

/* --- the ExecuteDone frame ------------------------------------------------ */

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} buf;

static int grow(buf *b, Py_ssize_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap * 2;
    if (cap < b->len + more)
        cap = b->len + more + 256;
    char *p = PyMem_Realloc(b->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int put_bytes(buf *b, const void *src, Py_ssize_t n)
{
    if (grow(b, n) < 0)
        return -1;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static inline int put_byte(buf *b, unsigned char c)
{
    if (grow(b, 1) < 0)
        return -1;
    b->p[b->len++] = (char)c;
    return 0;
}

/* A header byte and an n-byte big-endian value. */
static int put_be(buf *b, unsigned char head, unsigned long long v, int n)
{
    if (grow(b, 1 + n) < 0)
        return -1;
    char *p = b->p + b->len;
    p[0] = (char)head;
    for (int i = 0; i < n; i++)
        p[1 + i] = (char)(v >> (8 * (n - 1 - i)));
    b->len += 1 + n;
    return 0;
}

/* A non-negative int in msgpack's shortest form (fastwire.uint). */
static int put_uint(buf *b, unsigned long long v)
{
    if (v < 128)
        return put_byte(b, (unsigned char)v);
    if (v < 0x100)
        return put_be(b, 0xCC, v, 1);
    if (v < 0x10000)
        return put_be(b, 0xCD, v, 2);
    if (v < 0x100000000ULL)
        return put_be(b, 0xCE, v, 4);
    return put_be(b, 0xCF, v, 8);
}

static int put_array_header(buf *b, Py_ssize_t n)
{
    if (n < 16)
        return put_byte(b, (unsigned char)(0x90 | n));
    if (n < 0x10000)
        return put_be(b, 0xDC, (unsigned long long)n, 2);
    return put_be(b, 0xDD, (unsigned long long)n, 4);
}

static int put_str(buf *b, const char *s, Py_ssize_t n)
{
    int rc;
    if (n < 32)
        rc = put_byte(b, (unsigned char)(0xA0 | n));
    else if (n < 0x100)
        rc = put_be(b, 0xD9, (unsigned long long)n, 1);
    else if (n < 0x10000)
        rc = put_be(b, 0xDA, (unsigned long long)n, 2);
    else
        rc = put_be(b, 0xDB, (unsigned long long)n, 4);
    return rc < 0 ? -1 : put_bytes(b, s, n);
}

static int put_bin_header(buf *b, Py_ssize_t n)
{
    if (n < 0x100)
        return put_be(b, 0xC4, (unsigned long long)n, 1);
    if (n < 0x10000)
        return put_be(b, 0xC5, (unsigned long long)n, 2);
    return put_be(b, 0xC6, (unsigned long long)n, 4);
}

/* The value of a non-negative exact int, or -1 (no exception) for anything else. */
static int as_u64(PyObject *o, unsigned long long *v)
{
    if (!PyLong_CheckExact(o) || _PyLong_Sign(o) < 0)
        return -1;
    *v = PyLong_AsUnsignedLongLong(o);
    if (*v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* Truthiness of a slot; -1 (no exception) when it is unset or truth fails. */
static int truth(PyObject *o)
{
    if (o == NULL)
        return -1;
    int t = PyObject_IsTrue(o);
    if (t < 0)
        PyErr_Clear();
    return t;
}

/* One output: [name, dtype, shape, LOC_INLINE, 0, size, <bin>]. 1 when
 * written, 0 where the Python path must decide, -1 on an error. */
static int put_output(buf *b, PyObject *t, Py_ssize_t *total)
{
    PyObject *array = SLOT(t, t_np), *name = SLOT(t, t_name), *dtype = SLOT(t, t_dtype);
    if (array == NULL || name == NULL || dtype == NULL || !Py_IS_TYPE(array, ndarray_type) || !PyUnicode_CheckExact(name))
        return 0;
    unsigned long long code;
    if (as_u64(dtype, &code) < 0 || code == (unsigned long long)bytes_code)
        return 0;
    Py_ssize_t name_len;
    const char *name_utf8 = PyUnicode_AsUTF8AndSize(name, &name_len);
    if (name_utf8 == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(array, &view, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 0;
    }
    int rc = 0;
    if (view.ndim == 0 || view.len == 0 || view.len > inline_max)
        goto done;
    rc = -1;
    if (put_byte(b, 0x97) < 0 || put_str(b, name_utf8, name_len) < 0 || put_uint(b, code) < 0
        || put_array_header(b, view.ndim) < 0)
        goto done;
    for (int k = 0; k < view.ndim; k++)
        if (put_uint(b, (unsigned long long)view.shape[k]) < 0)
            goto done;
    if (put_uint(b, (unsigned long long)loc_inline) < 0 || put_byte(b, 0) < 0
        || put_uint(b, (unsigned long long)view.len) < 0 || put_bin_header(b, view.len) < 0
        || put_bytes(b, view.buf, view.len) < 0)
        goto done;
    *total += view.len;
    rc = 1;
done:
    PyBuffer_Release(&view);
    return rc;
}

/* The outputs of one response the usual frame carries: all of them, or
 * those named in the request's requested outputs. New reference; NULL
 * without an exception where the Python path must decide. */
static PyObject *wanted_outputs(PyObject *req, PyObject *outputs)
{
    PyObject *requested = SLOT(req, r_requested);
    int filter = truth(requested);
    if (filter < 0 || !PyList_CheckExact(outputs))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(outputs);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!Py_IS_TYPE(PyList_GET_ITEM(outputs, i), tensor_type))
            return NULL;
    if (!filter) {
        Py_INCREF(outputs);
        return outputs;
    }
    PyObject *kept = PyList_New(0);
    if (kept == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(outputs); i++) {
        PyObject *t = PyList_GET_ITEM(outputs, i);
        PyObject *name = SLOT(t, t_name);
        int in = name == NULL ? -1 : PySequence_Contains(requested, name);
        if (in < 0 || (in && PyList_Append(kept, t) < 0)) {
            PyErr_Clear();
            Py_DECREF(kept);
            return NULL;
        }
    }
    return kept;
}

/* usual_done(batch_id, requests, returned, inline_room): the bytes of the
 * usual ExecuteDone (ExecuteMixin._usual_done; the caller has checked the
 * model is not decoupled and no request has output targets), or None for
 * anything else. */
static PyObject *fp_usual_done(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "fastpath.usual_done takes 4 arguments");
        return NULL;
    }
    PyObject *requests = args[1], *returned = args[2];
    unsigned long long batch_id;
    Py_ssize_t room = PyLong_AsSsize_t(args[3]);
    if (room == -1 && PyErr_Occurred())
        return NULL;
    if (!ready || !PyList_CheckExact(requests) || !PyList_CheckExact(returned) || as_u64(args[0], &batch_id) < 0)
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(returned);
    if (n != PyList_GET_SIZE(requests))
        Py_RETURN_NONE;
    buf b = {NULL, 0, 0};
    if (grow(&b, 256) < 0)
        return NULL;
    Py_ssize_t total = 0;
    PyObject *held_req = NULL, *held_resp = NULL;
    if (put_byte(&b, 0x94) < 0 || put_uint(&b, (unsigned long long)kind_execute_done) < 0 || put_uint(&b, batch_id) < 0
        || put_byte(&b, 0xC0) < 0 || put_array_header(&b, n) < 0)
        goto fail;
    for (Py_ssize_t i = 0; i < n && i < PyList_GET_SIZE(returned) && i < PyList_GET_SIZE(requests); i++) {
        PyObject *req = PyList_GET_ITEM(requests, i), *resp = PyList_GET_ITEM(returned, i);
        if (!Py_IS_TYPE(resp, response_type) || !Py_IS_TYPE(req, request_type))
            goto python;
        /* Held for the iteration: a comparison below may run Python code. */
        Py_XSETREF(held_req, Py_NewRef(req));
        Py_XSETREF(held_resp, Py_NewRef(resp));
        PyObject *error = SLOT(resp, s_error), *params = SLOT(resp, s_params), *flags = SLOT(req, r_release_flags);
        if (error != Py_None || truth(params) != 0 || SLOT(req, r_send_state) != Py_None || flags == NULL)
            goto python;
        if (flags != release_all) {
            int ne = PyObject_RichCompareBool(flags, release_all, Py_NE);
            if (ne != 0) {
                PyErr_Clear();
                goto python;
            }
        }
        /* As the Python path: the request is final from here on, even if
         * the general path takes the batch after all. */
        Py_XSETREF(SLOT(req, r_final), Py_NewRef(Py_True));
        unsigned long long handle;
        PyObject *outputs = SLOT(resp, s_outputs);
        if (outputs == NULL || as_u64(SLOT(req, r_handle) ? SLOT(req, r_handle) : Py_None, &handle) < 0)
            goto python;
        PyObject *kept = wanted_outputs(req, outputs);
        if (kept == NULL)
            goto python;
        Py_ssize_t no = PyList_GET_SIZE(kept);
        if (put_byte(&b, 0x95) < 0 || put_uint(&b, handle) < 0 || put_uint(&b, (unsigned long long)flag_final) < 0
            || put_byte(&b, 0xC0) < 0 || put_array_header(&b, no) < 0) {
            Py_DECREF(kept);
            goto fail;
        }
        for (Py_ssize_t j = 0; j < no; j++) {
            int rc = put_output(&b, PyList_GET_ITEM(kept, j), &total);
            if (rc <= 0) {
                Py_DECREF(kept);
                if (rc < 0)
                    goto fail;
                goto python;
            }
        }
        Py_DECREF(kept);
        if (put_byte(&b, 0xA0) < 0)
            goto fail;
    }
    if (total > room)
        goto python;
    PyObject *frame = PyBytes_FromStringAndSize(b.p, b.len);
    PyMem_Free(b.p);
    Py_XDECREF(held_req);
    Py_XDECREF(held_resp);
    return frame;
python:
    PyMem_Free(b.p);
    Py_XDECREF(held_req);
    Py_XDECREF(held_resp);
    Py_RETURN_NONE;
fail:
    PyMem_Free(b.p);
    Py_XDECREF(held_req);
    Py_XDECREF(held_resp);
    return NULL;
}

/* --- pb_utils' per-input calls ---------------------------------------------- */

static PyObject *wire_dtype, *as_numpy_py, *get_input_py;
static long bf16_code;

/* Tensor.as_numpy (pb_utils): the first call on an input whose bytes came
 * in the message makes a writable array over a copy of them, as the
 * Python method does; everything else is the Python method's. */
static PyObject *fp_as_numpy(PyObject *self, PyObject *t)
{
    if (!ready || !Py_IS_TYPE(t, tensor_type) || as_numpy_py == NULL)
        goto python;
    PyObject *array = SLOT(t, t_np), *src = SLOT(t, t_src), *code = SLOT(t, t_dtype), *shape = SLOT(t, t_shape);
    if (array == NULL || code == NULL || !PyLong_CheckExact(code))
        goto python;
    int overflow;
    long c = PyLong_AsLongAndOverflow(code, &overflow);
    if (overflow || c == bf16_code)
        goto python;
    if (array != Py_None)
        return Py_NewRef(array);
    if (src == NULL || shape == NULL || !PyTuple_CheckExact(src) || PyTuple_GET_SIZE(src) != 3 || c == bytes_code)
        goto python;
    PyObject *loc = PyTuple_GET_ITEM(src, 0), *data = PyTuple_GET_ITEM(src, 1), *size = PyTuple_GET_ITEM(src, 2);
    if (!PyLong_CheckExact(loc) || PyLong_AsLongAndOverflow(loc, &overflow) != loc_inline || overflow
        || !PyBytes_CheckExact(data) || !PyLong_CheckExact(size) || _PyLong_Sign(size) == 0)
        goto python;
    PyObject *dtype = PyDict_GetItemWithError(wire_dtype, code);
    if (dtype == NULL) {
        if (PyErr_Occurred())
            return NULL;
        goto python;
    }
    PyObject *buffer = PyByteArray_FromObject(data);
    if (buffer == NULL)
        return NULL;
    PyObject *argv[3] = {shape, dtype, buffer};
    array = PyObject_Vectorcall((PyObject *)ndarray_type, argv, 3, NULL);
    Py_DECREF(buffer);
    if (array == NULL)
        return NULL;
    Py_XSETREF(SLOT(t, t_np), Py_NewRef(array));
    return array;
python:
    if (as_numpy_py == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "fastpath: as_numpy not set up");
        return NULL;
    }
    return PyObject_CallOneArg(as_numpy_py, t);
}

/* pb_utils.get_input_tensor_by_name: the input of a request the server
 * handed to execute called name, or None; other requests go to the Python
 * function. */
static PyObject *fp_get_input(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !ready || get_input_py == NULL || !Py_IS_TYPE(args[0], request_type))
        goto python;
    PyObject *inputs = SLOT(args[0], r_inputs);
    if (inputs == NULL || !PyList_CheckExact(inputs))
        goto python;
    Py_INCREF(inputs);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(inputs); i++) {
        PyObject *t = PyList_GET_ITEM(inputs, i);
        if (!Py_IS_TYPE(t, tensor_type) || SLOT(t, t_name) == NULL) {
            Py_DECREF(inputs);
            goto python;
        }
        Py_INCREF(t);
        int eq = PyObject_RichCompareBool(SLOT(t, t_name), args[1], Py_EQ);
        if (eq != 0) {
            Py_DECREF(inputs);
            if (eq < 0) {
                Py_DECREF(t);
                return NULL;
            }
            return t;
        }
        Py_DECREF(t);
    }
    Py_DECREF(inputs);
    Py_RETURN_NONE;
python:
    if (get_input_py == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "fastpath: get_input_tensor_by_name not set up");
        return NULL;
    }
    return PyObject_Vectorcall(get_input_py, args, nargs, NULL);
}

/* setup_pb(as_numpy, get_input_tensor_by_name, wire_dtypes, bf16): the
 * Python functions the two above fall back to, and the wire dtypes. */
static PyObject *fp_setup_pb(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_CheckExact(args[2]) || !PyLong_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "fastpath.setup_pb(as_numpy, get_input_tensor_by_name, wire_dtypes, bf16)");
        return NULL;
    }
    long bf16 = PyLong_AsLong(args[3]);
    if (bf16 == -1 && PyErr_Occurred())
        return NULL;
    bf16_code = bf16;
    Py_XSETREF(as_numpy_py, Py_NewRef(args[0]));
    Py_XSETREF(get_input_py, Py_NewRef(args[1]));
    Py_XSETREF(wire_dtype, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* method(function): function bound as a method when set on a class. */
static PyObject *fp_method(PyObject *self, PyObject *func)
{
    return PyInstanceMethod_New(func);
}

/* --- pb_utils' constructors ------------------------------------------------- */

static PyObject *tensor_init_py, *response_init_py, *code_of, *str_dtype, *str_flags, *str_c_contiguous;

/* The Python __init__ with the same arguments. */
static PyObject *init_python(PyObject *init, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (init == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "fastpath: constructors not set up");
        return NULL;
    }
    return PyObject_Vectorcall(init, args, nargs, kwnames);
}

/* Tensor.__init__(self, name, numpy_array) for the usual tensor: a
 * C-contiguous ndarray of a type Triton knows, under a non-empty str name
 * (the Python __init__'s first test); the rest is the Python __init__'s. */
static PyObject *fp_tensor_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (!ready || kwnames != NULL || nargs != 3 || !Py_IS_TYPE(args[0], tensor_type)
        || !Py_IS_TYPE(args[2], ndarray_type) || !PyUnicode_CheckExact(args[1]) || PyUnicode_GET_LENGTH(args[1]) == 0)
        return init_python(tensor_init_py, args, nargs, kwnames);
    PyObject *t = args[0], *array = args[2];
    PyObject *dtype = PyObject_GetAttr(array, str_dtype);
    if (dtype == NULL)
        return NULL;
    PyObject *code = PyDict_GetItemWithError(code_of, dtype);
    Py_DECREF(dtype);
    if (code == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return init_python(tensor_init_py, args, nargs, kwnames);
    }
    Py_INCREF(code);
    PyObject *flags = PyObject_GetAttr(array, str_flags);
    PyObject *contiguous = flags == NULL ? NULL : PyObject_GetAttr(flags, str_c_contiguous);
    Py_XDECREF(flags);
    int c = contiguous == NULL ? -1 : PyObject_IsTrue(contiguous);
    Py_XDECREF(contiguous);
    if (c <= 0) {
        Py_DECREF(code);
        if (c < 0)
            return NULL;
        return init_python(tensor_init_py, args, nargs, kwnames);
    }
    Py_XSETREF(SLOT(t, t_name), Py_NewRef(args[1]));
    Py_XSETREF(SLOT(t, t_dtype), code);
    Py_XSETREF(SLOT(t, t_np), Py_NewRef(array));
    Py_XSETREF(SLOT(t, t_shape), Py_NewRef(Py_None));
    Py_XSETREF(SLOT(t, t_src), Py_NewRef(Py_None));
    Py_RETURN_NONE;
}

/* InferenceResponse.__init__(self, output_tensors) for the usual response:
 * a list of Tensors and nothing else; the rest is the Python __init__'s. */
static PyObject *fp_response_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *outputs = NULL;
    if (!ready || !Py_IS_TYPE(args[0], response_type) || nargs < 1)
        return init_python(response_init_py, args, nargs, kwnames);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs == 2 && nkw == 0)
        outputs = args[1];
    else if (nargs == 1 && nkw == 1 && PyUnicode_CheckExact(PyTuple_GET_ITEM(kwnames, 0))
             && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "output_tensors") == 0)
        outputs = args[1];
    if (outputs == NULL || !PyList_CheckExact(outputs))
        return init_python(response_init_py, args, nargs, kwnames);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(outputs); i++)
        if (!Py_IS_TYPE(PyList_GET_ITEM(outputs, i), tensor_type))
            return init_python(response_init_py, args, nargs, kwnames);
    PyObject *r = args[0], *empty = PyUnicode_New(0, 0);
    if (empty == NULL)
        return NULL;
    Py_XSETREF(SLOT(r, s_outputs), Py_NewRef(outputs));
    Py_XSETREF(SLOT(r, s_error), Py_NewRef(Py_None));
    Py_XSETREF(SLOT(r, s_params), empty);
    Py_XSETREF(SLOT(r, s_release), Py_NewRef(Py_None));
    Py_RETURN_NONE;
}

/* setup_init(tensor_init, response_init, code_of): the Python __init__s
 * the two above fall back to, and pb_utils' dtype -> type code table. */
static PyObject *fp_setup_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyDict_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "fastpath.setup_init(tensor_init, response_init, code_of)");
        return NULL;
    }
    Py_XSETREF(tensor_init_py, Py_NewRef(args[0]));
    Py_XSETREF(response_init_py, Py_NewRef(args[1]));
    Py_XSETREF(code_of, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* --- BYTES tensors --------------------------------------------------------- */

/* split_bytes(buffer): the elements of a serialized BYTES tensor (each a
 * little-endian u32 length and its bytes) as a list of bytes, with the
 * ValueError texts of pb_utils.deserialize_bytes_tensor. */
static PyObject *fp_split_bytes(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t end = view.len, offset = 0;
    PyObject *items = PyList_New(0);
    if (items == NULL)
        goto done;
    while (offset < end) {
        Py_ssize_t start = offset + 4;
        if (start > end) {
            PyErr_Format(PyExc_ValueError, "truncated BYTES tensor: incomplete length prefix at offset %zd", offset);
            goto fail;
        }
        uint32_t n = (uint32_t)p[offset] | (uint32_t)p[offset + 1] << 8 | (uint32_t)p[offset + 2] << 16
            | (uint32_t)p[offset + 3] << 24;
        offset = start + (Py_ssize_t)n;
        if (offset > end) {
            PyErr_Format(PyExc_ValueError, "truncated BYTES tensor: element of %zd bytes at offset %zd overruns %zd bytes",
                         (Py_ssize_t)n, start, end);
            goto fail;
        }
        PyObject *item = PyBytes_FromStringAndSize((const char *)p + start, (Py_ssize_t)n);
        if (item == NULL)
            goto fail;
        int rc = PyList_Append(items, item);
        Py_DECREF(item);
        if (rc < 0)
            goto fail;
    }
    goto done;
fail:
    Py_CLEAR(items);
done:
    PyBuffer_Release(&view);
    return items;
}

/* --- the rings ------------------------------------------------------------- */

/* Ring(channel, ring, unpack): the fast path of one direction of a
 * stubvisor.ipc.Channel (ipc.py says what the words mean). Its index
 * (ring.cursor) stays the Python _Ring's attribute, which the Python paths
 * (wrap markers, waits for room or frames, errors) read and write too: each
 * method does the usual case only and returns None or False for the caller's
 * Python code to do the rest. Callers hold the locks the Python paths hold:
 * pop runs under the channel's recv lock, after its check that the channel
 * is open (close unmaps under both locks); push takes the send lock itself. */
typedef struct {
    PyObject_HEAD
    PyObject *channel, *ring, *unpack, *acquire, *release;
    uint64_t *tail, *head;
    uint32_t *reader_sleeping, *writer_sleeping, *dead;
    unsigned char *data;
    uint64_t size, max_frame;
} RingObject;

static PyObject *str_cursor, *str_closed;

static long futex_wake(void *addr)
{
    /* Shared, not private: the word lives in a mapping of two processes. */
    return syscall(SYS_futex, addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int ring_traverse(RingObject *r, visitproc visit, void *arg)
{
    Py_VISIT(r->channel);
    Py_VISIT(r->ring);
    Py_VISIT(r->unpack);
    Py_VISIT(r->acquire);
    Py_VISIT(r->release);
    return 0;
}

static int ring_clear(RingObject *r)
{
    Py_CLEAR(r->channel);
    Py_CLEAR(r->ring);
    Py_CLEAR(r->unpack);
    Py_CLEAR(r->acquire);
    Py_CLEAR(r->release);
    return 0;
}

static void ring_dealloc(RingObject *r)
{
    PyObject_GC_UnTrack(r);
    ring_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static int attr_u64(PyObject *o, const char *name, uint64_t *v)
{
    PyObject *x = PyObject_GetAttrString(o, name);
    if (x == NULL)
        return -1;
    *v = PyLong_AsUnsignedLongLong(x);
    Py_DECREF(x);
    return PyErr_Occurred() ? -1 : 0;
}

static int ring_init(RingObject *r, PyObject *args, PyObject *kwds)
{
    PyObject *channel, *ring, *unpack;
    if (!PyArg_ParseTuple(args, "OOO:Ring", &channel, &ring, &unpack))
        return -1;
    uint64_t tail, head, rs, ws, data_off, size, max_frame, addr;
    if (attr_u64(ring, "tail_addr", &tail) < 0 || attr_u64(ring, "head_addr", &head) < 0
        || attr_u64(ring, "reader_sleeping_addr", &rs) < 0 || attr_u64(ring, "writer_sleeping_addr", &ws) < 0
        || attr_u64(ring, "data_off", &data_off) < 0 || attr_u64(ring, "size", &size) < 0
        || attr_u64(ring, "max_frame", &max_frame) < 0 || attr_u64(channel, "_addr", &addr) < 0)
        return -1;
    if (size == 0 || (size & (size - 1)) || (tail | head) & 7 || (rs | ws) & 3) {
        PyErr_SetString(PyExc_ValueError, "fastpath.Ring: ring not laid out as ipc.py lays it out");
        return -1;
    }
    PyObject *lock = PyObject_GetAttrString(channel, "_send_lock");
    if (lock == NULL)
        return -1;
    PyObject *acquire = PyObject_GetAttrString(lock, "acquire"), *release = PyObject_GetAttrString(lock, "release");
    Py_DECREF(lock);
    if (acquire == NULL || release == NULL) {
        Py_XDECREF(acquire);
        Py_XDECREF(release);
        return -1;
    }
    Py_XSETREF(r->acquire, acquire);
    Py_XSETREF(r->release, release);
    Py_XSETREF(r->channel, Py_NewRef(channel));
    Py_XSETREF(r->ring, Py_NewRef(ring));
    Py_XSETREF(r->unpack, Py_NewRef(unpack));
    r->tail = (uint64_t *)(uintptr_t)tail;
    r->head = (uint64_t *)(uintptr_t)head;
    r->reader_sleeping = (uint32_t *)(uintptr_t)rs;
    r->writer_sleeping = (uint32_t *)(uintptr_t)ws;
    r->dead = (uint32_t *)(uintptr_t)(addr + 0x100); /* CTL_DEAD */
    r->data = (unsigned char *)(uintptr_t)(addr + data_off);
    r->size = size;
    r->max_frame = max_frame;
    return 0;
}

/* The ring's own index (ring.cursor); -1 with an exception on failure. */
static int get_cursor(RingObject *r, uint64_t *v)
{
    PyObject *x = PyObject_GetAttr(r->ring, str_cursor);
    if (x == NULL)
        return -1;
    *v = PyLong_AsUnsignedLongLong(x);
    Py_DECREF(x);
    return PyErr_Occurred() ? -1 : 0;
}

static int set_cursor(RingObject *r, uint64_t v)
{
    PyObject *x = PyLong_FromUnsignedLongLong(v);
    if (x == NULL)
        return -1;
    int rc = PyObject_SetAttr(r->ring, str_cursor, x);
    Py_DECREF(x);
    return rc;
}

/* pop(fenced): the next message, decoded, or None when no whole frame is
 * queued or the frame is not the usual one (a wrap marker, bad indices,
 * a frame the unpacker refuses): recv_held's Python code then waits,
 * skips or raises its ProtocolError. With fenced, wake the writer if it
 * sleeps for room; otherwise the caller does (Channel.wake_writer). */
static PyObject *ring_pop(RingObject *r, PyObject *fenced)
{
    uint64_t head;
    if (get_cursor(r, &head) < 0)
        return NULL;
    uint64_t tail = __atomic_load_n(r->tail, __ATOMIC_ACQUIRE);
    uint64_t avail = tail - head, pos = head & (r->size - 1);
    if (tail == head || avail > r->size)
        Py_RETURN_NONE;
    const unsigned char *h = r->data + pos;
    uint64_t n = (uint64_t)h[0] | (uint64_t)h[1] << 8 | (uint64_t)h[2] << 16 | (uint64_t)h[3] << 24;
    uint64_t need = (n + 11) & ~(uint64_t)7;
    if (need > avail || pos + need > r->size || n > r->max_frame)
        Py_RETURN_NONE;
    PyObject *mv = PyMemoryView_FromMemory((char *)h + 4, (Py_ssize_t)n, PyBUF_READ);
    if (mv == NULL)
        return NULL;
    PyObject *msg = PyObject_CallOneArg(r->unpack, mv);
    Py_DECREF(mv);
    if (msg == NULL) {
        /* recv_held decodes it again and says what is wrong. */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    head += need;
    if (set_cursor(r, head) < 0) {
        Py_DECREF(msg);
        return NULL;
    }
    __atomic_store_n(r->head, head, __ATOMIC_SEQ_CST);
    if (PyObject_IsTrue(fenced) && __atomic_load_n(r->writer_sleeping, __ATOMIC_SEQ_CST))
        futex_wake(r->head);
    return msg;
}

/* Queue one frame (the caller holds the send lock and has checked the
 * channel is open) and, with wake, wake the reader if it sleeps: 1 when done, 0 when
 * the Python path must (the frame must wrap or wait for room, or is too
 * large), -1 on an error. */
static int push_locked(RingObject *r, Py_buffer *view, int wake)
{
    uint64_t tail;
    if (get_cursor(r, &tail) < 0)
        return -1;
    uint64_t n = (uint64_t)view->len, need = (n + 11) & ~(uint64_t)7, pos = tail & (r->size - 1);
    uint64_t head = __atomic_load_n(r->head, __ATOMIC_ACQUIRE);
    if (n > r->max_frame || pos + need > r->size || tail + need - head > r->size)
        return 0;
    unsigned char *h = r->data + pos;
    h[0] = (unsigned char)n;
    h[1] = (unsigned char)(n >> 8);
    h[2] = (unsigned char)(n >> 16);
    h[3] = (unsigned char)(n >> 24);
    memcpy(h + 4, view->buf, n);
    tail += need;
    if (set_cursor(r, tail) < 0)
        return -1;
    /* Sequentially consistent: the store is ordered before the load of the
     * reader's flag (the wake-up handshake, ipc/doc.go). */
    __atomic_store_n(r->tail, tail, __ATOMIC_SEQ_CST);
    if (wake && __atomic_load_n(r->reader_sleeping, __ATOMIC_SEQ_CST))
        futex_wake(r->tail);
    return 1;
}

/* push(data): take the send lock, queue one frame and wake the reader if
 * it sleeps; True when done, False when the Python path must (the channel
 * is closed or the peer dead, the frame must wrap or wait for room, or is
 * too large). */
static PyObject *ring_push(RingObject *r, PyObject *data)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int rc = 0;
    PyObject *got = PyObject_CallNoArgs(r->acquire);
    if (got == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_DECREF(got);
    PyObject *closed = PyObject_GetAttr(r->channel, str_closed);
    int is_closed = closed == NULL ? -1 : PyObject_IsTrue(closed);
    Py_XDECREF(closed);
    if (is_closed < 0)
        rc = -1;
    else if (!is_closed && !__atomic_load_n(r->dead, __ATOMIC_ACQUIRE))
        rc = push_locked(r, &view, 1);
    PyBuffer_Release(&view);
    got = PyObject_CallNoArgs(r->release);
    if (got == NULL)
        return NULL;
    Py_DECREF(got);
    if (rc < 0)
        return NULL;
    return Py_NewRef(rc ? Py_True : Py_False);
}

/* push_held(data): push for a caller that holds the send lock and has
 * checked the channel is open, and wakes the reader itself (Channel.send,
 * whose caller may defer the wake-up). */
static PyObject *ring_push_held(RingObject *r, PyObject *data)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int rc = push_locked(r, &view, 0);
    PyBuffer_Release(&view);
    if (rc < 0)
        return NULL;
    return Py_NewRef(rc ? Py_True : Py_False);
}

static PyMethodDef ring_methods[] = {
    {"pop", (PyCFunction)ring_pop, METH_O, "pop(fenced) -> the next message, or None for the Python path."},
    {"push", (PyCFunction)ring_push, METH_O, "push(data) -> True when queued, False for the Python path."},
    {"push_held", (PyCFunction)ring_push_held, METH_O,
     "push_held(data): push under the caller's send lock, without the wake-up."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stubvisor.fastpath.Ring",
    .tp_basicsize = sizeof(RingObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The fast path of one ring of a stubvisor.ipc.Channel.",
    .tp_traverse = (traverseproc)ring_traverse,
    .tp_clear = (inquiry)ring_clear,
    .tp_dealloc = (destructor)ring_dealloc,
    .tp_init = (initproc)ring_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = ring_methods,
};

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
    str_cursor = PyUnicode_InternFromString("cursor");
    str_closed = PyUnicode_InternFromString("_closed");
    str_dtype = PyUnicode_InternFromString("dtype");
    str_flags = PyUnicode_InternFromString("flags");
    str_c_contiguous = PyUnicode_InternFromString("c_contiguous");
    if (str_dtype == NULL || str_flags == NULL || str_c_contiguous == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    if (str_cursor == NULL || str_closed == NULL || PyType_Ready(&RingType) < 0
        || PyModule_AddObjectRef(m, "Ring", (PyObject *)&RingType) < 0
        || PyModule_AddIntConstant(m, "ABI", FASTPATH_ABI) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
