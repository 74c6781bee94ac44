/* stubvisor.fastpath: the BLS path's wire: a call's InferExec encoded and
 * sent, the frames of the answers decoded (fastpath_bls.c says what the
 * BLS path in C is). */
#include "fastpath_bls.h"

/* One value of the kinds a BLS request holds: 1 written, 0 when the
 * Python path must encode it (another type, an int past 64 bits, a str
 * that is not UTF-8), -1 on an error. */
static int wb_value(wbuf *b, PyObject *o)
{
    if (o == Py_None)
        return wb_byte(b, 0xC0) < 0 ? -1 : 1;
    if (o == Py_False || o == Py_True)
        return wb_byte(b, o == Py_True ? 0xC3 : 0xC2) < 0 ? -1 : 1;
    if (PyLong_CheckExact(o)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(o);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                return 0;
            }
            return wb_uint(b, u) < 0 ? -1 : 1;
        }
        if (overflow < 0)
            return 0;
        return wb_int(b, v) < 0 ? -1 : 1;
    }
    if (PyUnicode_CheckExact(o)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(o, &n);
        if (s == NULL) {
            PyErr_Clear();
            return 0;
        }
        return wb_str(b, s, n) < 0 ? -1 : 1;
    }
    if (PyList_CheckExact(o) || PyTuple_CheckExact(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        if (wb_array(b, n) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            /* Items of str and int only (a list a finalizer could change
             * holds nothing that runs code when read). */
            int rc = wb_value(b, PySequence_Fast_ITEMS(o)[i]);
            if (rc <= 0)
                return rc;
            if (n != PySequence_Fast_GET_SIZE(o))
                return 0;
        }
        return 1;
    }
    return 0;
}

/* One input as _write_tensor writes the usual small one:
 * [name, dtype, shape, LOC_INLINE, 0, size, <its bytes>]; 1, 0 for the
 * Python path (an array in the arena, BYTES, empty, a scalar, no room
 * left), -1 on an error. */
static int wb_input(wbuf *b, PyObject *t, Py_ssize_t *room)
{
    if (!Py_IS_TYPE(t, tensor_type))
        return 0;
    PyObject *array = SLOT(t, t_np), *name = SLOT(t, t_name), *code = SLOT(t, t_dtype);
    if (array == NULL || name == NULL || code == NULL || !Py_IS_TYPE(array, ndarray_type) || !PyUnicode_CheckExact(name)
        || !PyLong_CheckExact(code))
        return 0;
    int overflow;
    long c = PyLong_AsLongAndOverflow(code, &overflow);
    if (overflow || c < 0 || c == bytes_code)
        return 0;
    Py_buffer view;
    if (PyObject_GetBuffer(array, &view, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 0;
    }
    int rc = 0;
    if (view.ndim == 0 || view.len == 0 || view.len > inline_max || view.len > *room)
        goto done;
    rc = -1;
    if (wb_byte(b, 0x97) < 0 || wb_value(b, name) != 1
        || wb_inline_tensor(b, (unsigned long long)c, view.ndim, view.shape, view.len) < 0
        || wb_bin(b, view.buf, view.len) < 0)
        goto done;
    *room -= view.len;
    rc = 1;
done:
    PyBuffer_Release(&view);
    return rc;
}

/* The parts of a request's InferExec around its call id:
 * [KIND_INFER_EXEC, id, <head: model name, version>, [id, <tail: the
 * request's fields, its inputs, decoupled False>]]. 1 when encoded, 0 for
 * the Python path, -1 on an error. */
int encode_request(PyObject *req, wbuf *head, wbuf *tail)
{
    if (!Py_IS_TYPE(req, request_type))
        return 0;
    PyObject *inputs = SLOT(req, r_inputs), *trace = SLOT(req, r_trace);
    if (inputs == NULL || !PyList_CheckExact(inputs) || trace != default_trace)
        return 0; /* another trace may carry a context: the Python path */
    int rc;
    if ((rc = wb_value(head, SLOT(req, r_model_name) ? SLOT(req, r_model_name) : Py_Ellipsis)) != 1
        || (rc = wb_value(head, SLOT(req, r_model_version) ? SLOT(req, r_model_version) : Py_Ellipsis)) != 1)
        return rc;
    Py_ssize_t offs[] = {r_id, r_correlation_id, r_flags};
    for (int i = 0; i < 3; i++)
        if ((rc = wb_value(tail, SLOT(req, offs[i]) ? SLOT(req, offs[i]) : Py_Ellipsis)) != 1)
            return rc;
    Py_ssize_t n = PyList_GET_SIZE(inputs), room = hc.inline_room;
    if (wb_array(tail, n) < 0)
        return -1;
    Py_INCREF(inputs);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i >= PyList_GET_SIZE(inputs) || (rc = wb_input(tail, PyList_GET_ITEM(inputs, i), &room)) != 1) {
            Py_DECREF(inputs);
            return i >= PyList_GET_SIZE(inputs) ? 0 : rc;
        }
    }
    Py_DECREF(inputs);
    Py_ssize_t rest[] = {r_requested, r_params, r_timeout};
    for (int i = 0; i < 3; i++)
        if ((rc = wb_value(tail, SLOT(req, rest[i]) ? SLOT(req, rest[i]) : Py_Ellipsis)) != 1)
            return rc;
    return wb_byte(tail, 0xC2) < 0 ? -1 : 1; /* decoupled: False */
}

/* --- sending a call ------------------------------------------------------- */

/* The frame: head and tail around the call id; -1 on an error. */
static int frame_bytes(unsigned long long id, wbuf *head, wbuf *tail, wbuf *out)
{
    wb_init(out);
    if (wb_byte(out, 0x96) < 0 || wb_uint(out, (unsigned long long)k_infer_exec) < 0 || wb_uint(out, id) < 0
        || wb_put(out, head->p, head->len) < 0 || wb_byte(out, 0x98) < 0 || wb_uint(out, id) < 0
        || wb_put(out, tail->p, tail->len) < 0)
        return -1;
    return 0;
}

/* Drop a call that could not be sent (as _send_call's except clause). */
static void unregister(PyObject *id, int async_call)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (call0(hc.cond_acquire) == 0) {
        PyObject *was = PyDict_GetItemWithError(hc.calls, id);
        if (was != NULL) {
            PyDict_DelItem(hc.calls, id);
            if (async_call) {
                PyObject *n = PyObject_GetAttr(hc.host, n_async_open);
                PyObject *m = n ? PyNumber_Subtract(n, bls_one) : NULL;
                if (m != NULL)
                    PyObject_SetAttr(hc.host, n_async_open, m);
                Py_XDECREF(n);
                Py_XDECREF(m);
            }
        }
        call0(hc.cond_release);
    }
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

/* Send an encoded request as a new call (_send_call, the usual case) and
 * return its _Call, registered with waker (None, or (loop, future) of an
 * async_exec on the stub's own loop, whose turn wakes the supervisor). */
PyObject *send_call(wbuf *head, wbuf *tail, PyObject *waker, PyObject *loop)
{
    PyObject *id = PyIter_Next(hc.call_ids);
    if (id == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "fastpath: call ids ran out");
        return NULL;
    }
    unsigned long long idv = PyLong_AsUnsignedLongLong(id);
    if (idv == (unsigned long long)-1 && PyErr_Occurred()) {
        Py_DECREF(id);
        return NULL;
    }
    PyObject *queue = PyObject_CallNoArgs((PyObject *)deque_type);
    PyObject *call = queue ? call_type->tp_alloc(call_type, 0) : NULL;
    if (call == NULL) {
        Py_XDECREF(queue);
        Py_DECREF(id);
        return NULL;
    }
    SLOT(call, c_host) = Py_NewRef(hc.host);
    SLOT(call, c_id) = Py_NewRef(id);
    SLOT(call, c_queue) = queue;
    SLOT(call, c_done) = Py_NewRef(Py_False);
    SLOT(call, c_waker) = Py_NewRef(waker);
    int async_call = waker != Py_None;
    if (call0(hc.cond_acquire) < 0)
        goto fail;
    int rc = PyDict_SetItem(hc.calls, id, call);
    if (rc == 0 && async_call) {
        PyObject *n = PyObject_GetAttr(hc.host, n_async_open);
        PyObject *m = n ? PyNumber_Add(n, bls_one) : NULL;
        rc = m ? PyObject_SetAttr(hc.host, n_async_open, m) : -1;
        Py_XDECREF(n);
        Py_XDECREF(m);
    }
    if (call0(hc.cond_release) < 0 || rc < 0)
        goto fail;
    wbuf out;
    if (frame_bytes(idv, head, tail, &out) < 0) {
        wb_free(&out);
        goto sent_fail;
    }
    PyObject *fast = PyObject_GetAttr(hc.ch, n_fast_out);
    int pushed = fast == NULL ? -1 : fast == Py_None ? 0 : fp_ring_push_buf(fast, out.p, out.len, !async_call);
    Py_XDECREF(fast);
    if (pushed == 0) {
        /* Wrap, wait for room, a closed channel, a dead peer: _send_frame
         * does it (and ends the process when the supervisor is gone). */
        PyObject *data = PyBytes_FromStringAndSize(out.p, out.len);
        PyObject *r = data ? PyObject_CallMethodOneArg(hc.host, n_send_frame, data) : NULL;
        Py_XDECREF(data);
        pushed = r == NULL ? -1 : 1;
        Py_XDECREF(r);
    }
    wb_free(&out);
    if (pushed < 0)
        goto sent_fail;
    if (async_call && PyObject_SetAttr(loop, n_wake_due, Py_True) < 0)
        goto fail;
    Py_DECREF(id);
    return call;
sent_fail:
    unregister(id, async_call);
fail:
    Py_DECREF(id);
    Py_DECREF(call);
    return NULL;
}

/* --- the frames, decoded ------------------------------------------------- */

/* msgpack.unpackb(frame) (raw=False) for the values the usual message
 * holds: arrays, ints, nil, booleans, str and bin. NULL without an
 * exception for anything else (a map, a float, an ext, a str that is not
 * UTF-8, bytes left over), which the ring's unpacker then decodes, or
 * refuses as it would have. */
typedef struct {
    const unsigned char *p, *end;
    int depth;
} reader;

static uint64_t be_uint(const unsigned char *p, int k)
{
    uint64_t v = 0;
    for (int i = 0; i < k; i++)
        v = v << 8 | p[i];
    return v;
}

static PyObject *rd_value(reader *r);

/* The length that follows a header byte: k big-endian bytes; -1 past the end. */
static Py_ssize_t rd_len(reader *r, int k)
{
    if (r->end - r->p < k)
        return -1;
    uint64_t v = be_uint(r->p, k);
    r->p += k;
    return v > (uint64_t)(r->end - r->p) && k > 0 ? -2 : (Py_ssize_t)v;
}

static PyObject *rd_array(reader *r, Py_ssize_t n)
{
    /* Every element takes a byte at least. */
    if (n < 0 || n > r->end - r->p || ++r->depth > 32)
        return NULL;
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        PyObject *v = rd_value(r);
        if (v == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, v);
    }
    r->depth--;
    return list;
}

static PyObject *rd_bytes(reader *r, Py_ssize_t n, int text)
{
    if (n < 0 || n > r->end - r->p)
        return NULL;
    const char *s = (const char *)r->p;
    r->p += n;
    return text ? PyUnicode_DecodeUTF8(s, n, NULL) : PyBytes_FromStringAndSize(s, n);
}

static PyObject *rd_value(reader *r)
{
    if (r->p >= r->end)
        return NULL;
    unsigned char c = *r->p++;
    if (c <= 0x7F)
        return PyLong_FromLong(c);
    if (c >= 0xE0)
        return PyLong_FromLong((signed char)c);
    if ((c & 0xF0) == 0x90)
        return rd_array(r, c & 0x0F);
    if ((c & 0xE0) == 0xA0)
        return rd_bytes(r, c & 0x1F, 1);
    switch (c) {
    case 0xC0:
        Py_RETURN_NONE;
    case 0xC2:
        Py_RETURN_FALSE;
    case 0xC3:
        Py_RETURN_TRUE;
    case 0xC4:
    case 0xC5:
    case 0xC6:
        return rd_bytes(r, rd_len(r, 1 << (c - 0xC4)), 0);
    case 0xD9:
    case 0xDA:
    case 0xDB:
        return rd_bytes(r, rd_len(r, 1 << (c - 0xD9)), 1);
    case 0xDC:
        return rd_array(r, rd_len(r, 2));
    case 0xDD:
        return rd_array(r, rd_len(r, 4));
    case 0xCC:
    case 0xCD:
    case 0xCE:
    case 0xCF: {
        int k = 1 << (c - 0xCC);
        if (r->end - r->p < k)
            return NULL;
        uint64_t v = be_uint(r->p, k);
        r->p += k;
        return PyLong_FromUnsignedLongLong(v);
    }
    case 0xD0:
    case 0xD1:
    case 0xD2:
    case 0xD3: {
        int k = 1 << (c - 0xD0);
        if (r->end - r->p < k)
            return NULL;
        uint64_t v = be_uint(r->p, k);
        r->p += k;
        int shift = 64 - 8 * k;
        return PyLong_FromLongLong(shift ? (long long)(v << shift) >> shift : (long long)v);
    }
    default:
        return NULL; /* a map, a float, an ext: the unpacker's */
    }
}

PyObject *decode_msg(const unsigned char *p, Py_ssize_t n)
{
    reader r = {p, p + n, 0};
    PyObject *v = rd_value(&r);
    if (v != NULL && r.p == r.end && PyList_CheckExact(v))
        return v;
    Py_XDECREF(v);
    PyErr_Clear(); /* the unpacker decodes it again, and raises what it raises */
    return NULL;
}
