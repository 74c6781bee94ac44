/* stubvisor.fastpath: the calling stub's BLS path (stubvisor/bls.py).
 *
 * A model's BLS call is pb_utils.InferenceRequest(...) then exec() or
 * async_exec(), then get_output_tensor_by_name on the result. In Python
 * each of those is a few hundred bytecodes of glue around the work: the
 * constructor's checks, the InferExec message built as lists and packed,
 * the wait on the ring through the host's condition, the InferResult
 * dispatched and turned into pb_utils objects. Here, for the usual call (a
 * model that is not decoupled calling one that is not, small inputs that
 * travel in the message, small fixed-size outputs that come back in it),
 * the same steps run in C: the frame is the bytes msgpack.Packer makes of
 * the Python path's message (python/tests/test_fastpath.py compares them),
 * the objects have the same slots. Anything else (decoupled calls, arena
 * tensors, BYTES, trace contexts, another thread reading the ring, a
 * malformed answer) is handed to the Python code, which stays the
 * reference; stubvisor/native_bls.py installs these functions in place of
 * the Python ones it keeps. */
#include "fastpath.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* --- what setup_bls hands over ---------------------------------------------- */

static PyTypeObject *call_type, *mixin_type, *bls_loop_type, *deque_type;
static Py_ssize_t c_host, c_id, c_queue, c_done, c_waker;
static PyObject *pb_dict, *forked, *error_type, *wire_dtypes, *element_sizes, *get_running_loop;
static PyObject *py_init, *py_exec, *py_async_exec, *py_response, *py_get_output;
static long k_infer_exec, k_infer_result, flag_final_bls;
static long long pump_slice_ns, wait_slice_ns, preempt_gap_ns, min_budget_ns;
static PyObject *empty_str, *zero, *one, *minus_one;

/* Interned names. */
static PyObject *n_runtime, *n_initialized, *n_finalizing, *n_decoupled, *n_main_waiting, *n_async_open, *n_ch,
    *n_cond, *n_lock, *n_waiters, *n_calls, *n_reader, *n_call_ids, *n_inline_room, *n_fast_in, *n_fast_out, *n_in,
    *n_cursor, *n_closed, *n_ppid, *n_spin_ns, *n_budget, *n_acquire, *n_release, *n_notify_all, *n_create_future,
    *n_wake_due, *n_send_frame, *n_dispatch, *n_wait, *n_len, *n_append, *n_popleft, *n_params_kw[11];

/* --- the host, looked up once ----------------------------------------------- */

/* The host's objects that never change after its __init__ (one Host per
 * process; tests make several, one after another). */
static struct {
    PyObject *host, *ch, *cond, *cond_acquire, *cond_release, *cond_waiters, *calls, *reader_acquire,
        *reader_release, *call_ids;
    Py_ssize_t inline_room;
} hc;

static void host_forget(void)
{
    Py_CLEAR(hc.host);
    Py_CLEAR(hc.ch);
    Py_CLEAR(hc.cond);
    Py_CLEAR(hc.cond_acquire);
    Py_CLEAR(hc.cond_release);
    Py_CLEAR(hc.cond_waiters);
    Py_CLEAR(hc.calls);
    Py_CLEAR(hc.reader_acquire);
    Py_CLEAR(hc.reader_release);
    Py_CLEAR(hc.call_ids);
}

/* 0 when hc describes host, -1 with an exception. */
static int host_cache(PyObject *host)
{
    if (hc.host == host)
        return 0;
    host_forget();
    PyObject *lock = NULL, *reader = NULL, *room = NULL;
    hc.ch = PyObject_GetAttr(host, n_ch);
    hc.cond = hc.ch ? PyObject_GetAttr(host, n_cond) : NULL;
    lock = hc.cond ? PyObject_GetAttr(hc.cond, n_lock) : NULL;
    hc.cond_waiters = lock ? PyObject_GetAttr(hc.cond, n_waiters) : NULL;
    hc.cond_acquire = hc.cond_waiters ? PyObject_GetAttr(lock, n_acquire) : NULL;
    hc.cond_release = hc.cond_acquire ? PyObject_GetAttr(lock, n_release) : NULL;
    hc.calls = hc.cond_release ? PyObject_GetAttr(host, n_calls) : NULL;
    reader = hc.calls ? PyObject_GetAttr(host, n_reader) : NULL;
    hc.reader_acquire = reader ? PyObject_GetAttr(reader, n_acquire) : NULL;
    hc.reader_release = hc.reader_acquire ? PyObject_GetAttr(reader, n_release) : NULL;
    hc.call_ids = hc.reader_release ? PyObject_GetAttr(host, n_call_ids) : NULL;
    room = hc.call_ids ? PyObject_GetAttr(host, n_inline_room) : NULL;
    Py_XDECREF(lock);
    Py_XDECREF(reader);
    if (room == NULL) {
        host_forget();
        return -1;
    }
    hc.inline_room = PyLong_AsSsize_t(room);
    Py_DECREF(room);
    if (hc.inline_room == -1 && PyErr_Occurred()) {
        host_forget();
        return -1;
    }
    if (!PyDict_CheckExact(hc.calls) || !Py_IS_TYPE(hc.cond_waiters, deque_type) || !PyIter_Check(hc.call_ids)) {
        host_forget();
        PyErr_SetString(PyExc_TypeError, "fastpath: the host is not laid out as bls.py reads it");
        return -1;
    }
    hc.host = Py_NewRef(host);
    return 0;
}

/* Call a bound method with no arguments and drop its result. */
static int call0(PyObject *f)
{
    PyObject *r = PyObject_CallNoArgs(f);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Truth of an attribute; -1 with an exception. */
static int attr_true(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* The host pb_utils calls into, when it is one whose BLS path this file
 * knows and it allows BLS now (execute runs); NULL without an exception
 * for the Python path (which raises what Python raises). */
static PyObject *usual_host(void)
{
    if (!ready || mixin_type == NULL || PyList_GET_SIZE(forked) != 0)
        return NULL;
    PyObject *rt = PyDict_GetItemWithError(pb_dict, n_runtime);
    if (rt == NULL || !PyObject_TypeCheck(rt, mixin_type)) {
        PyErr_Clear();
        return NULL;
    }
    int init = attr_true(rt, n_initialized), fin = init > 0 ? attr_true(rt, n_finalizing) : 1;
    if (init <= 0 || fin != 0 || host_cache(rt) < 0) {
        PyErr_Clear();
        return NULL;
    }
    return rt;
}

/* --- msgpack, as msgpack.Packer(use_bin_type=True) writes it --------------- */

typedef struct {
    char *p;
    Py_ssize_t len, cap;
    char stack[1024];
} wbuf;

static void wb_init(wbuf *b)
{
    b->p = b->stack;
    b->len = 0;
    b->cap = sizeof(b->stack);
}

static void wb_free(wbuf *b)
{
    if (b->p != b->stack)
        PyMem_Free(b->p);
}

static int wb_room(wbuf *b, Py_ssize_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    Py_ssize_t cap = 2 * b->cap + more;
    char *p = PyMem_Malloc(cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(p, b->p, b->len);
    wb_free(b);
    b->p = p;
    b->cap = cap;
    return 0;
}

static int wb_put(wbuf *b, const void *src, Py_ssize_t n)
{
    if (wb_room(b, n) < 0)
        return -1;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

/* A header byte and an n-byte big-endian value. */
static int wb_be(wbuf *b, unsigned char head, unsigned long long v, int n)
{
    if (wb_room(b, 1 + n) < 0)
        return -1;
    char *p = b->p + b->len;
    p[0] = (char)head;
    for (int i = 0; i < n; i++)
        p[1 + i] = (char)(v >> (8 * (n - 1 - i)));
    b->len += 1 + n;
    return 0;
}

static int wb_byte(wbuf *b, unsigned char c)
{
    if (wb_room(b, 1) < 0)
        return -1;
    b->p[b->len++] = (char)c;
    return 0;
}

static int wb_uint(wbuf *b, unsigned long long v)
{
    if (v < 128)
        return wb_byte(b, (unsigned char)v);
    if (v < 0x100)
        return wb_be(b, 0xCC, v, 1);
    if (v < 0x10000)
        return wb_be(b, 0xCD, v, 2);
    if (v < 0x100000000ULL)
        return wb_be(b, 0xCE, v, 4);
    return wb_be(b, 0xCF, v, 8);
}

static int wb_int(wbuf *b, long long v)
{
    if (v >= 0)
        return wb_uint(b, (unsigned long long)v);
    if (v >= -32)
        return wb_byte(b, (unsigned char)(v & 0xFF));
    if (v >= -128)
        return wb_be(b, 0xD0, (unsigned long long)v, 1);
    if (v >= -32768)
        return wb_be(b, 0xD1, (unsigned long long)v, 2);
    if (v >= -2147483648LL)
        return wb_be(b, 0xD2, (unsigned long long)v, 4);
    return wb_be(b, 0xD3, (unsigned long long)v, 8);
}

static int wb_array(wbuf *b, Py_ssize_t n)
{
    if (n < 16)
        return wb_byte(b, (unsigned char)(0x90 | n));
    if (n < 0x10000)
        return wb_be(b, 0xDC, (unsigned long long)n, 2);
    return wb_be(b, 0xDD, (unsigned long long)n, 4);
}

static int wb_bin(wbuf *b, const void *p, Py_ssize_t n)
{
    int rc = n < 0x100 ? wb_be(b, 0xC4, (unsigned long long)n, 1)
        : n < 0x10000  ? wb_be(b, 0xC5, (unsigned long long)n, 2)
                       : wb_be(b, 0xC6, (unsigned long long)n, 4);
    return rc < 0 ? -1 : wb_put(b, p, n);
}

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
        int rc = n < 32 ? wb_byte(b, (unsigned char)(0xA0 | n))
            : n < 0x100 ? wb_be(b, 0xD9, (unsigned long long)n, 1)
            : n < 0x10000 ? wb_be(b, 0xDA, (unsigned long long)n, 2)
                          : wb_be(b, 0xDB, (unsigned long long)n, 4);
        return rc < 0 || wb_put(b, s, n) < 0 ? -1 : 1;
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
    if (PyObject_GetBuffer(array, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return 0;
    }
    int rc = 0;
    if (view.ndim == 0 || view.len == 0 || view.len > inline_max || view.len > *room)
        goto done;
    rc = -1;
    if (wb_byte(b, 0x97) < 0 || wb_value(b, name) != 1 || wb_uint(b, (unsigned long long)c) < 0
        || wb_array(b, view.ndim) < 0)
        goto done;
    for (int k = 0; k < view.ndim; k++)
        if (wb_uint(b, (unsigned long long)view.shape[k]) < 0)
            goto done;
    if (wb_uint(b, (unsigned long long)loc_inline) < 0 || wb_byte(b, 0) < 0
        || wb_uint(b, (unsigned long long)view.len) < 0 || wb_bin(b, view.buf, view.len) < 0)
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
static int encode_request(PyObject *req, wbuf *head, wbuf *tail)
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
                PyObject *m = n ? PyNumber_Subtract(n, one) : NULL;
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
static PyObject *send_call(wbuf *head, wbuf *tail, PyObject *waker, PyObject *loop)
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
        PyObject *m = n ? PyNumber_Add(n, one) : NULL;
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

/* --- waiting for the answer ----------------------------------------------- */

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline uint32_t xchg4(uint32_t *p, uint32_t v)
{
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}

/* The channel's message poll budget (ch._budget[0]) and spin_ns. */
static int get_budget(long long *budget, long long *limit)
{
    PyObject *b = PyObject_GetAttr(hc.ch, n_budget), *l = PyObject_GetAttr(hc.ch, n_spin_ns);
    int rc = -1;
    if (b != NULL && l != NULL && PyList_CheckExact(b) && PyList_GET_SIZE(b) >= 1) {
        *budget = PyLong_AsLongLong(PyList_GET_ITEM(b, 0));
        *limit = PyLong_AsLongLong(l);
        rc = PyErr_Occurred() ? -1 : 0;
    } else if (b != NULL && l != NULL) {
        PyErr_SetString(PyExc_TypeError, "fastpath: channel budget is not a list");
    }
    Py_XDECREF(b);
    Py_XDECREF(l);
    return rc;
}

static int set_budget(long long v)
{
    PyObject *b = PyObject_GetAttr(hc.ch, n_budget);
    if (b == NULL)
        return -1;
    PyObject *x = PyLong_FromLongLong(v);
    int rc = x == NULL ? -1 : PyList_SetItem(b, 0, x); /* steals x */
    Py_DECREF(b);
    return rc;
}

/* Channel._learn for a message wait. */
static int learn(long long budget, long long waited, long long limit)
{
    long long b = waited < limit ? (2 * waited < limit ? 2 * waited : limit) : budget / 2;
    return set_budget(b >= min_budget_ns ? b : 0);
}

/* recv_held(_PUMP_SLICE)'s wait for a message on an empty ring, as
 * Channel._wait_change does it (poll while the budget says it pays, then
 * sleep on the futex in WAIT_SLICE slices, the sleep announced in the
 * reader's flag), with the GIL released. The caller holds the reader lock
 * (close takes it too: the mapping stays). 1 when the tail moved, 0 when
 * the slice passed, -1 for the Python path (the channel closed or the
 * supervisor gone: recv_held raises PeerDead there) or an error. */
static int wait_tail(fp_ring_words *w, uint64_t old)
{
    long long budget, limit;
    if (get_budget(&budget, &limit) < 0)
        return -1;
    long long start = now_ns(), deadline = start + pump_slice_ns;
    if (budget > 0) {
        long long end = start + (budget < pump_slice_ns ? budget : pump_slice_ns), t = start, last = start;
        int moved = 0, preempted = 0;
        Py_BEGIN_ALLOW_THREADS
        for (;;) {
            for (int i = 0; i < 8; i++)
                if (__atomic_load_n(w->tail, __ATOMIC_ACQUIRE) != old) {
                    moved = 1;
                    break;
                }
            if (moved)
                break;
            t = now_ns();
            if (t - last > preempt_gap_ns) {
                preempted = 1;
                break;
            }
            last = t;
            if (__atomic_load_n(w->dead, __ATOMIC_ACQUIRE) || t >= end)
                break;
        }
        if (moved)
            t = now_ns();
        Py_END_ALLOW_THREADS
        if (moved) {
            long long twice = 2 * (t - start), b = budget > twice ? budget : twice;
            return set_budget(b < limit ? b : limit) < 0 ? -1 : 1;
        }
        if (preempted && set_budget(0) < 0)
            return -1;
        if (get_budget(&budget, &limit) < 0)
            return -1;
    }
    for (;;) {
        int closed = attr_true(hc.ch, n_closed);
        if (closed != 0 || __atomic_load_n(w->dead, __ATOMIC_ACQUIRE))
            return -1;
        PyObject *ppid = PyObject_GetAttr(hc.ch, n_ppid);
        if (ppid == NULL)
            return -1;
        long want = PyLong_AsLong(ppid);
        Py_DECREF(ppid);
        if (getppid() != want)
            return -1;
        long long rem = deadline - now_ns();
        if (rem <= 0) {
            if (now_ns() - start >= limit && learn(budget, limit, limit) < 0)
                return -1;
            return __atomic_load_n(w->tail, __ATOMIC_ACQUIRE) != old;
        }
        long long wait = rem < wait_slice_ns ? rem : wait_slice_ns;
        xchg4(w->reader_sleeping, 1);
        if (__atomic_load_n(w->dead, __ATOMIC_SEQ_CST)) {
            xchg4(w->reader_sleeping, 0);
            continue;
        }
        if (__atomic_load_n(w->tail, __ATOMIC_SEQ_CST) != old) {
            xchg4(w->reader_sleeping, 0);
            return learn(budget, now_ns() - start, limit) < 0 ? -1 : 1;
        }
        struct timespec ts = {(time_t)(wait / 1000000000LL), (long)(wait % 1000000000LL)};
        Py_BEGIN_ALLOW_THREADS
        syscall(SYS_futex, (void *)w->tail, FUTEX_WAIT, (uint32_t)old, &ts, NULL, 0);
        Py_END_ALLOW_THREADS
        xchg4(w->reader_sleeping, 0);
        if (__atomic_load_n(w->tail, __ATOMIC_ACQUIRE) != old)
            return learn(budget, now_ns() - start, limit) < 0 ? -1 : 1;
    }
}

/* Handle an InferResult for call as Host._dispatch does, when it is the
 * plain one: [KIND_INFER_RESULT, call's id, wire] with an int flags word,
 * for a call without a waker. 1 done, 0 for _dispatch, -1 on an error. */
static int take_result(PyObject *call, PyObject *msg)
{
    if (!PyList_CheckExact(msg) || PyList_GET_SIZE(msg) < 3)
        return 0;
    PyObject *kind = PyList_GET_ITEM(msg, 0), *id = PyList_GET_ITEM(msg, 1), *wire = PyList_GET_ITEM(msg, 2);
    if (!PyLong_CheckExact(kind) || PyLong_AsLong(kind) != k_infer_result || !PyLong_CheckExact(id)
        || !PyList_CheckExact(wire) || PyList_GET_SIZE(wire) < 2 || !PyLong_CheckExact(PyList_GET_ITEM(wire, 1)))
        return 0;
    PyErr_Clear();
    int same = PyObject_RichCompareBool(id, SLOT(call, c_id), Py_EQ);
    if (same <= 0)
        return same;
    long flags = PyLong_AsLong(PyList_GET_ITEM(wire, 1));
    if (flags == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (call0(hc.cond_acquire) < 0)
        return -1;
    int rc = 0;
    PyObject *open_ = PyDict_GetItemWithError(hc.calls, id);
    if (open_ == call) {
        PyObject *r = PyObject_CallMethodOneArg(SLOT(call, c_queue), n_append, wire);
        rc = r == NULL ? -1 : 1;
        Py_XDECREF(r);
        if (rc == 1 && (flags & flag_final_bls) && PyDict_DelItem(hc.calls, id) < 0)
            rc = -1;
        if (rc == 1 && PyObject_Length(hc.cond_waiters) > 0) {
            PyObject *n = PyObject_CallMethodNoArgs(hc.cond, n_notify_all);
            rc = n == NULL ? -1 : 1;
            Py_XDECREF(n);
        }
    } else if (open_ == NULL && PyErr_Occurred()) {
        rc = -1;
    }
    if (call0(hc.cond_release) < 0)
        return -1;
    return rc;
}

/* Notify the threads asleep on the host's condition, if any (_wait, after
 * a read). */
static int notify_waiters(void)
{
    if (PyObject_Length(hc.cond_waiters) <= 0)
        return 0;
    if (call0(hc.cond_acquire) < 0)
        return -1;
    PyObject *n = PyObject_CallMethodNoArgs(hc.cond, n_notify_all);
    Py_XDECREF(n);
    return call0(hc.cond_release) < 0 || n == NULL ? -1 : 0;
}

/* Host._wait(lambda: call.queue) for the main thread's sync call: read
 * the ring until the call's queue has a response. The usual turn (the
 * reader lock free, the answer the next frame) is C; anything else goes
 * to the Python _wait, which does the same the long way. */
static int wait_answer(PyObject *call)
{
    PyObject *queue = SLOT(call, c_queue);
    for (;;) {
        if (PyObject_Length(queue) > 0)
            return 0;
        int busy = attr_true(hc.host, n_main_waiting);
        if (busy < 0)
            return -1;
        PyObject *got = busy ? Py_NewRef(Py_False) : PyObject_CallOneArg(hc.reader_acquire, Py_False);
        if (got == NULL)
            return -1;
        int have = got == Py_True;
        Py_DECREF(got);
        if (!have)
            break;
        PyObject *msg = NULL;
        int python = 0;
        if (PyObject_Length(queue) > 0) {
            call0(hc.reader_release);
            return 0;
        }
        PyObject *fast = PyObject_GetAttr(hc.ch, n_fast_in), *in = NULL, *cursor = NULL;
        fp_ring_words w;
        if (fast == NULL || fast == Py_None || fp_ring_get_words(fast, &w) < 0) {
            python = 1;
            goto released;
        }
        int closed = attr_true(hc.ch, n_closed);
        if (closed != 0) {
            python = 1;
            goto released;
        }
        msg = fp_ring_pop(fast);
        if (msg == Py_None) {
            Py_CLEAR(msg);
            in = PyObject_GetAttr(hc.ch, n_in);
            cursor = in ? PyObject_GetAttr(in, n_cursor) : NULL;
            uint64_t head = cursor ? PyLong_AsUnsignedLongLong(cursor) : 0;
            if (cursor == NULL || PyErr_Occurred()) {
                python = 1;
                goto released;
            }
            uint64_t tail = __atomic_load_n(w.tail, __ATOMIC_ACQUIRE);
            if (tail != head) {
                python = 1; /* a wrap marker or a bad frame: recv_held sorts it out */
                goto released;
            }
            int moved = wait_tail(&w, tail);
            if (moved < 0)
                python = 1;
            else if (moved)
                msg = fp_ring_pop(fast);
            if (msg == Py_None) {
                Py_CLEAR(msg);
                python = 1;
            }
        }
    released:
        Py_XDECREF(fast);
        Py_XDECREF(in);
        Py_XDECREF(cursor);
        if (PyErr_Occurred()) {
            /* A budget or a cursor that is not an int: the Python path. */
            PyErr_Clear();
            python = 1;
        }
        if (call0(hc.reader_release) < 0) {
            Py_XDECREF(msg);
            return -1;
        }
        if (msg != NULL) {
            int rc = take_result(call, msg);
            if (rc == 0) {
                PyObject *r = PyObject_CallMethodOneArg(hc.host, n_dispatch, msg);
                rc = r == NULL ? -1 : 1;
                Py_XDECREF(r);
            }
            Py_DECREF(msg);
            if (rc < 0)
                return -1;
        }
        if (notify_waiters() < 0)
            return -1;
        if (python)
            break;
    }
    PyObject *len = PyObject_GetAttr(queue, n_len);
    PyObject *r = len ? PyObject_CallMethodOneArg(hc.host, n_wait, len) : NULL;
    Py_XDECREF(len);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* --- the answer as pb_utils objects --------------------------------------- */

/* The array of one small fixed-size output that came in the message: a
 * writable copy of its bytes, as _bls_response makes it (frombuffer of a
 * bytearray, reshaped), or NULL without an exception for the Python path
 * (which raises what it raises for a malformed one). */
static PyObject *inline_array(PyObject *code, PyObject *shape, PyObject *data, PyObject *size)
{
    if (!PyBytes_CheckExact(data) || !PyList_CheckExact(shape) || !PyLong_CheckExact(size))
        return NULL;
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    if (n == 0 || PyLong_AsSsize_t(size) != n) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *dtype = PyDict_GetItemWithError(wire_dtypes, code), *itemsize = NULL;
    if (dtype == NULL || (itemsize = PyDict_GetItemWithError(element_sizes, code)) == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(itemsize);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(shape); i++) {
        PyObject *d = PyList_GET_ITEM(shape, i);
        Py_ssize_t v = PyLong_CheckExact(d) ? PyLong_AsSsize_t(d) : -1;
        if (v <= 0 || count > n / v) {
            PyErr_Clear();
            return NULL;
        }
        count *= v;
    }
    if (count != n)
        return NULL;
    PyObject *buffer = PyByteArray_FromStringAndSize(PyBytes_AS_STRING(data), n);
    if (buffer == NULL)
        return NULL;
    PyObject *argv[3] = {shape, dtype, buffer};
    PyObject *array = PyObject_Vectorcall((PyObject *)ndarray_type, argv, 3, NULL);
    Py_DECREF(buffer);
    return array;
}

/* _bls_response for the usual answer: outputs that all came in the
 * message, fixed-size and not empty. NULL without an exception for the
 * Python method. */
static PyObject *usual_response(PyObject *wire)
{
    if (!PyList_CheckExact(wire) || PyList_GET_SIZE(wire) < 4)
        return NULL;
    PyObject *error = PyList_GET_ITEM(wire, 2), *outs = PyList_GET_ITEM(wire, 3);
    PyObject *params = PyList_GET_SIZE(wire) > 4 ? PyList_GET_ITEM(wire, 4) : empty_str;
    if (!PyList_CheckExact(outs) || !PyUnicode_CheckExact(params))
        return NULL;
    PyObject *err = Py_None;
    if (error != Py_None) {
        if (!PyList_CheckExact(error) || PyList_GET_SIZE(error) < 2)
            return NULL;
        PyObject *argv[2] = {PyList_GET_ITEM(error, 1), PyList_GET_ITEM(error, 0)};
        err = PyObject_Vectorcall(error_type, argv, 2, NULL);
        if (err == NULL) {
            PyErr_Clear();
            return NULL;
        }
    } else {
        Py_INCREF(err);
    }
    Py_ssize_t n = PyList_GET_SIZE(outs);
    PyObject *outputs = PyList_New(n);
    if (outputs == NULL) {
        Py_DECREF(err);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(outs, i);
        if (!PyList_CheckExact(t) || PyList_GET_SIZE(t) < 7)
            goto python;
        PyObject **f = ((PyListObject *)t)->ob_item;
        if (!PyLong_CheckExact(f[3]) || PyLong_AsLong(f[3]) != loc_inline || !PyLong_CheckExact(f[1])
            || PyLong_AsLong(f[1]) == bytes_code) {
            PyErr_Clear();
            goto python;
        }
        PyObject *array = inline_array(f[1], f[2], f[6], f[5]);
        if (array == NULL)
            goto python;
        PyObject *x = tensor_type->tp_alloc(tensor_type, 0);
        if (x == NULL) {
            Py_DECREF(array);
            goto python;
        }
        SLOT(x, t_name) = Py_NewRef(f[0]);
        SLOT(x, t_dtype) = Py_NewRef(f[1]);
        SLOT(x, t_np) = array;
        SLOT(x, t_shape) = Py_NewRef(Py_None);
        SLOT(x, t_src) = Py_NewRef(Py_None);
        PyList_SET_ITEM(outputs, i, x);
    }
    PyObject *r = response_type->tp_alloc(response_type, 0);
    if (r == NULL)
        goto python;
    SLOT(r, s_outputs) = outputs;
    SLOT(r, s_error) = err;
    /* `wire[4] if len(wire) > 4 and wire[4] else ""` */
    SLOT(r, s_params) = Py_NewRef(PyUnicode_GET_LENGTH(params) ? params : empty_str);
    SLOT(r, s_release) = Py_NewRef(Py_None);
    return r;
python:
    PyErr_Clear();
    Py_DECREF(outputs);
    Py_DECREF(err);
    return NULL;
}

/* bls_response(host, wire): BLSMixin._bls_response. */
static PyObject *fp_bls_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs == 2 && ready && py_response != NULL) {
        PyObject *r = usual_response(args[1]);
        if (r != NULL || PyErr_Occurred())
            return r;
    }
    if (py_response == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "fastpath: bls not set up");
        return NULL;
    }
    return PyObject_Vectorcall(py_response, args, nargs, NULL);
}

static PyObject *response(PyObject *wire)
{
    PyObject *r = usual_response(wire);
    if (r != NULL || PyErr_Occurred())
        return r;
    PyObject *argv[2] = {hc.host, wire};
    return PyObject_Vectorcall(py_response, argv, 2, NULL);
}

/* --- exec and async_exec ---------------------------------------------------- */

/* decoupled=False as exec's and async_exec's arguments give it: 1, 0 for
 * anything else. */
static int not_decoupled(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs == 1 && nkw == 0)
        return 1;
    if (nargs + nkw != 2)
        return 0;
    if (nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "decoupled") != 0)
        return 0;
    return args[1] == Py_False;
}

/* InferenceRequest.exec(self, decoupled=False): BLSMixin.bls for the usual
 * call; the rest is the Python method's. */
static PyObject *fp_request_exec(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *host;
    wbuf head, tail;
    wb_init(&head);
    wb_init(&tail);
    if (nargs < 1 || !not_decoupled(args, nargs, kwnames) || (host = usual_host()) == NULL)
        goto python;
    int rc = encode_request(args[0], &head, &tail);
    if (rc < 0)
        goto fail;
    if (rc == 0)
        goto python;
    PyObject *call = send_call(&head, &tail, Py_None, NULL);
    wb_free(&head);
    wb_free(&tail);
    if (call == NULL)
        return NULL;
    /* bls(): the first response, or a later one with outputs or an error,
     * once the final one is in. */
    PyObject *result = NULL;
    for (;;) {
        if (wait_answer(call) < 0)
            break;
        PyObject *wire = PyObject_CallMethodNoArgs(SLOT(call, c_queue), n_popleft);
        if (wire == NULL)
            break;
        PyObject *resp = response(wire);
        if (resp == NULL) {
            Py_DECREF(wire);
            break;
        }
        int take = result == NULL;
        if (!take && Py_IS_TYPE(resp, response_type)) {
            PyObject *outs = SLOT(resp, s_outputs), *err = SLOT(resp, s_error);
            take = (err != NULL && err != Py_None) || (outs != NULL && PyObject_IsTrue(outs) > 0);
        } else if (!take) {
            take = 1;
        }
        if (take)
            Py_XSETREF(result, resp);
        else
            Py_DECREF(resp);
        PyObject *flags = PyObject_GetItem(wire, one);
        Py_DECREF(wire);
        PyObject *fin = flags ? PyNumber_And(flags, PyLong_FromLong(flag_final_bls)) : NULL;
        Py_XDECREF(flags);
        int final = fin == NULL ? -1 : PyObject_IsTrue(fin);
        Py_XDECREF(fin);
        if (final < 0)
            break;
        if (final) {
            Py_DECREF(call);
            return result;
        }
    }
    Py_XDECREF(result);
    Py_DECREF(call);
    return NULL;
python:
    wb_free(&head);
    wb_free(&tail);
    if (PyErr_Occurred())
        return NULL;
    return PyObject_Vectorcall(py_exec, args, nargs, kwnames);
fail:
    wb_free(&head);
    wb_free(&tail);
    return NULL;
}

/* InferenceRequest.async_exec(self, decoupled=False): bls_async for the
 * usual call from the stub's own loop (BLSLoop); the rest is the Python
 * method's. */
static PyObject *fp_request_async_exec(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *host, *loop = NULL;
    wbuf head, tail;
    wb_init(&head);
    wb_init(&tail);
    if (nargs < 1 || !not_decoupled(args, nargs, kwnames))
        goto python;
    loop = PyObject_CallNoArgs(get_running_loop);
    if (loop == NULL)
        goto fail; /* no running loop: asyncio's RuntimeError, as in Python */
    if (!Py_IS_TYPE(loop, bls_loop_type) || (host = usual_host()) == NULL)
        goto python;
    int dec = attr_true(host, n_decoupled);
    if (dec != 0) {
        PyErr_Clear();
        goto python;
    }
    int rc = encode_request(args[0], &head, &tail);
    if (rc < 0)
        goto fail;
    if (rc == 0)
        goto python;
    PyObject *future = PyObject_CallMethodNoArgs(loop, n_create_future);
    PyObject *waker = future ? PyTuple_Pack(2, loop, future) : NULL;
    PyObject *call = waker ? send_call(&head, &tail, waker, loop) : NULL;
    Py_XDECREF(waker);
    wb_free(&head);
    wb_free(&tail);
    Py_DECREF(loop);
    if (call == NULL) {
        Py_XDECREF(future);
        return NULL;
    }
    Py_DECREF(call);
    return future;
python:
    Py_XDECREF(loop);
    wb_free(&head);
    wb_free(&tail);
    if (PyErr_Occurred())
        return NULL;
    return PyObject_Vectorcall(py_async_exec, args, nargs, kwnames);
fail:
    Py_XDECREF(loop);
    wb_free(&head);
    wb_free(&tail);
    return NULL;
}

/* --- pb_utils: the InferenceRequest constructor, get_output_tensor_by_name - */

enum { A_ID, A_CORR, A_INPUTS, A_REQUESTED, A_MODEL, A_VERSION, A_FLAGS, A_TIMEOUT, A_MEMORY, A_TRACE, A_PARAMS, A_N };
static const char *const arg_names[A_N] = {"request_id", "correlation_id", "inputs", "requested_output_names",
                                           "model_name", "model_version", "flags", "timeout", "preferred_memory",
                                           "trace", "parameters"};

/* InferenceRequest.__init__ for the usual BLS request: the arguments of
 * the signature, a str model name and request id, a list of Tensors, a
 * list of str output names, int ids, version, flags and timeout, no
 * parameters. The rest (its checks, conversions and errors) is the Python
 * __init__'s. */
static PyObject *fp_request_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *a[A_N] = {NULL};
    if (!ready || nargs < 1 || nargs > 1 + A_N || !Py_IS_TYPE(args[0], request_type))
        goto python;
    for (Py_ssize_t i = 1; i < nargs; i++)
        a[i - 1] = args[i];
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int j = 0;
        while (j < A_N && key != n_params_kw[j])
            j++;
        if (j == A_N)
            for (j = 0; j < A_N && PyUnicode_CompareWithASCIIString(key, arg_names[j]) != 0; j++)
                ;
        if (j == A_N || a[j] != NULL)
            goto python;
        a[j] = args[nargs + k];
    }
    PyObject *id = a[A_ID] ? a[A_ID] : empty_str, *corr = a[A_CORR] ? a[A_CORR] : zero;
    PyObject *version = a[A_VERSION] ? a[A_VERSION] : minus_one, *flags = a[A_FLAGS] ? a[A_FLAGS] : zero;
    PyObject *timeout = a[A_TIMEOUT] ? a[A_TIMEOUT] : zero;
    PyObject *memory = a[A_MEMORY] ? a[A_MEMORY] : default_memory, *trace = a[A_TRACE] ? a[A_TRACE] : default_trace;
    PyObject *inputs = a[A_INPUTS], *names = a[A_REQUESTED], *model = a[A_MODEL];
    if ((a[A_PARAMS] != NULL && a[A_PARAMS] != Py_None) || inputs == NULL || !PyList_CheckExact(inputs)
        || names == NULL || !PyList_CheckExact(names) || model == NULL || !PyUnicode_CheckExact(model)
        || !PyUnicode_CheckExact(id) || !(PyLong_CheckExact(corr) || PyUnicode_CheckExact(corr))
        || !PyLong_CheckExact(version) || !PyLong_CheckExact(flags) || !PyLong_CheckExact(timeout) || memory == Py_None
        || trace == Py_None)
        goto python;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(inputs); i++)
        if (!Py_IS_TYPE(PyList_GET_ITEM(inputs, i), tensor_type))
            goto python;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(names); i++)
        if (!PyUnicode_CheckExact(PyList_GET_ITEM(names, i)))
            goto python;
    PyObject *copy = PyList_GetSlice(inputs, 0, PyList_GET_SIZE(inputs)), *requested = PyList_New(0);
    if (copy == NULL || requested == NULL) {
        Py_XDECREF(copy);
        Py_XDECREF(requested);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(names); i++) {
        PyObject *name = PyList_GET_ITEM(names, i);
        int in = PySequence_Contains(requested, name);
        if (in < 0 || (!in && PyList_Append(requested, name) < 0)) {
            Py_DECREF(copy);
            Py_DECREF(requested);
            return NULL;
        }
    }
    PyObject *r = args[0];
    Py_XSETREF(SLOT(r, r_handle), Py_NewRef(zero));
    Py_XSETREF(SLOT(r, r_id), Py_NewRef(id));
    Py_XSETREF(SLOT(r, r_correlation_id), Py_NewRef(corr));
    Py_XSETREF(SLOT(r, r_flags), Py_NewRef(flags));
    Py_XSETREF(SLOT(r, r_inputs), copy);
    Py_XSETREF(SLOT(r, r_requested), requested);
    Py_XSETREF(SLOT(r, r_params), Py_NewRef(empty_str));
    Py_XSETREF(SLOT(r, r_timeout), Py_NewRef(timeout));
    Py_XSETREF(SLOT(r, r_model_name), Py_NewRef(model));
    Py_XSETREF(SLOT(r, r_model_version), Py_NewRef(version));
    Py_XSETREF(SLOT(r, r_preferred_memory), Py_NewRef(memory));
    Py_XSETREF(SLOT(r, r_trace), Py_NewRef(trace));
    Py_XSETREF(SLOT(r, r_sender), Py_NewRef(Py_None));
    Py_XSETREF(SLOT(r, r_send_state), Py_NewRef(Py_None));
    Py_XSETREF(SLOT(r, r_release_flags), Py_NewRef(release_all));
    Py_XSETREF(SLOT(r, r_rt), Py_NewRef(Py_None));
    Py_XSETREF(SLOT(r, r_final), Py_NewRef(Py_False));
    Py_RETURN_NONE;
python:
    if (py_init == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "fastpath: bls not set up");
        return NULL;
    }
    return PyObject_Vectorcall(py_init, args, nargs, kwnames);
}

/* get_output_tensor_by_name(response, name): the output called name, or
 * None; a response that is not a plain InferenceResponse goes to the
 * Python function. */
static PyObject *fp_get_output(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !ready || py_get_output == NULL || !Py_IS_TYPE(args[0], response_type))
        goto python;
    PyObject *outputs = SLOT(args[0], s_outputs);
    if (outputs == NULL || !PyList_CheckExact(outputs))
        goto python;
    Py_INCREF(outputs);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(outputs); i++) {
        PyObject *t = PyList_GET_ITEM(outputs, i);
        if (!Py_IS_TYPE(t, tensor_type) || SLOT(t, t_name) == NULL) {
            Py_DECREF(outputs);
            goto python;
        }
        Py_INCREF(t);
        int eq = PyObject_RichCompareBool(SLOT(t, t_name), args[1], Py_EQ);
        if (eq != 0) {
            Py_DECREF(outputs);
            if (eq < 0) {
                Py_DECREF(t);
                return NULL;
            }
            return t;
        }
        Py_DECREF(t);
    }
    Py_DECREF(outputs);
    Py_RETURN_NONE;
python:
    if (py_get_output == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "fastpath: bls not set up");
        return NULL;
    }
    return PyObject_Vectorcall(py_get_output, args, nargs, NULL);
}

/* --- setup ---------------------------------------------------------------- */

static int get_item(PyObject *d, const char *key, PyObject **dst)
{
    PyObject *v = PyDict_GetItemString(d, key);
    if (v == NULL) {
        PyErr_Format(PyExc_KeyError, "fastpath: setup_bls lacks %s", key);
        return -1;
    }
    Py_XSETREF(*dst, Py_NewRef(v));
    return 0;
}

static int get_num(PyObject *d, const char *key, long long *dst, double scale)
{
    PyObject *v = NULL;
    if (get_item(d, key, &v) < 0)
        return -1;
    double x = PyFloat_AsDouble(v);
    Py_DECREF(v);
    if (x == -1.0 && PyErr_Occurred())
        return -1;
    *dst = (long long)(x * scale + 0.5);
    return 0;
}

/* setup_bls(things): bls.py's and pb_utils' classes, functions and
 * constants, by name (native_bls.py). */
static PyObject *fp_setup_bls(PyObject *self, PyObject *d)
{
    PyObject *o = NULL;
    long long v;
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "fastpath.setup_bls expects a dict");
        return NULL;
    }
    mixin_type = NULL; /* off until the end */
#define TYPE(key, dst)                                                                                   \
    if (get_item(d, key, &o) < 0)                                                                        \
        return NULL;                                                                                     \
    if (!PyType_Check(o)) {                                                                              \
        Py_DECREF(o);                                                                                    \
        PyErr_SetString(PyExc_TypeError, "fastpath.setup_bls: " key " is not a class");                  \
        return NULL;                                                                                     \
    }                                                                                                    \
    Py_XSETREF(dst, (PyTypeObject *)o);                                                                  \
    o = NULL;
    TYPE("_Call", call_type)
    TYPE("BLSLoop", bls_loop_type)
    TYPE("deque", deque_type)
#undef TYPE
    if (get_item(d, "pb_dict", &pb_dict) < 0 || get_item(d, "_FORKED", &forked) < 0
        || get_item(d, "TritonError", &error_type) < 0 || get_item(d, "_WIRE_DTYPE", &wire_dtypes) < 0
        || get_item(d, "_ELEMENT_SIZE", &element_sizes) < 0 || get_item(d, "get_running_loop", &get_running_loop) < 0
        || get_item(d, "init", &py_init) < 0 || get_item(d, "exec", &py_exec) < 0
        || get_item(d, "async_exec", &py_async_exec) < 0 || get_item(d, "bls_response", &py_response) < 0
        || get_item(d, "get_output_tensor_by_name", &py_get_output) < 0)
        return NULL;
    if (!PyDict_Check(pb_dict) || !PyList_CheckExact(forked) || !PyDict_Check(wire_dtypes)
        || !PyDict_Check(element_sizes)) {
        PyErr_SetString(PyExc_TypeError, "fastpath.setup_bls: pb_dict, _WIRE_DTYPE, _ELEMENT_SIZE or _FORKED");
        return NULL;
    }
    if (get_num(d, "KIND_INFER_EXEC", &v, 1) < 0)
        return NULL;
    k_infer_exec = (long)v;
    if (get_num(d, "KIND_INFER_RESULT", &v, 1) < 0)
        return NULL;
    k_infer_result = (long)v;
    if (get_num(d, "FINAL", &v, 1) < 0)
        return NULL;
    flag_final_bls = (long)v;
    if (get_num(d, "PUMP_SLICE", &pump_slice_ns, 1e9) < 0 || get_num(d, "WAIT_SLICE", &wait_slice_ns, 1e9) < 0
        || get_num(d, "PREEMPT_GAP_NS", &preempt_gap_ns, 1) < 0 || get_num(d, "MIN_BUDGET_NS", &min_budget_ns, 1) < 0)
        return NULL;
#define OFF(dst, name)                                                                                   \
    if ((dst = fp_slot_offset(call_type, name)) < 0)                                                     \
        return NULL;
    OFF(c_host, "host")
    OFF(c_id, "id")
    OFF(c_queue, "queue")
    OFF(c_done, "done")
    OFF(c_waker, "waker")
#undef OFF
    if (get_item(d, "BLSMixin", &o) < 0)
        return NULL;
    if (!PyType_Check(o)) {
        Py_DECREF(o);
        PyErr_SetString(PyExc_TypeError, "fastpath.setup_bls: BLSMixin is not a class");
        return NULL;
    }
    host_forget();
    mixin_type = (PyTypeObject *)o; /* holds the reference */
    Py_RETURN_NONE;
}

static PyMethodDef bls_methods[] = {
    {"setup_bls", (PyCFunction)fp_setup_bls, METH_O, "setup_bls(things): what the BLS functions use."},
    {"request_init", (PyCFunction)(void (*)(void))fp_request_init, METH_FASTCALL | METH_KEYWORDS,
     "pb_utils.InferenceRequest.__init__ for the usual BLS request."},
    {"request_exec", (PyCFunction)(void (*)(void))fp_request_exec, METH_FASTCALL | METH_KEYWORDS,
     "pb_utils.InferenceRequest.exec."},
    {"request_async_exec", (PyCFunction)(void (*)(void))fp_request_async_exec, METH_FASTCALL | METH_KEYWORDS,
     "pb_utils.InferenceRequest.async_exec."},
    {"bls_response", (PyCFunction)(void (*)(void))fp_bls_response, METH_FASTCALL,
     "bls_response(host, wire): BLSMixin._bls_response."},
    {"get_output_tensor_by_name", (PyCFunction)(void (*)(void))fp_get_output, METH_FASTCALL,
     "get_output_tensor_by_name(response, name): pb_utils.get_output_tensor_by_name."},
    {NULL, NULL, 0, NULL},
};

/* Add the BLS functions to the module and intern their names. */
int fp_bls_ready(PyObject *m)
{
#define INTERN(var, text)                                                                                \
    if ((var = PyUnicode_InternFromString(text)) == NULL)                                                \
        return -1;
    INTERN(n_runtime, "_runtime")
    INTERN(n_initialized, "initialized")
    INTERN(n_finalizing, "finalizing")
    INTERN(n_decoupled, "decoupled")
    INTERN(n_main_waiting, "_main_waiting")
    INTERN(n_async_open, "_async_open")
    INTERN(n_ch, "ch")
    INTERN(n_cond, "_cond")
    INTERN(n_lock, "_lock")
    INTERN(n_waiters, "_waiters")
    INTERN(n_calls, "_calls")
    INTERN(n_reader, "_reader")
    INTERN(n_call_ids, "_call_ids")
    INTERN(n_inline_room, "_inline_room")
    INTERN(n_fast_in, "_fast_in")
    INTERN(n_fast_out, "_fast_out")
    INTERN(n_in, "_in")
    INTERN(n_cursor, "cursor")
    INTERN(n_closed, "_closed")
    INTERN(n_ppid, "_ppid")
    INTERN(n_spin_ns, "spin_ns")
    INTERN(n_budget, "_budget")
    INTERN(n_acquire, "acquire")
    INTERN(n_release, "release")
    INTERN(n_notify_all, "notify_all")
    INTERN(n_create_future, "create_future")
    INTERN(n_wake_due, "_wake_due")
    INTERN(n_send_frame, "_send_frame")
    INTERN(n_dispatch, "_dispatch")
    INTERN(n_wait, "_wait")
    INTERN(n_len, "__len__")
    INTERN(n_append, "append")
    INTERN(n_popleft, "popleft")
    INTERN(empty_str, "")
#undef INTERN
    for (int j = 0; j < A_N; j++)
        if ((n_params_kw[j] = PyUnicode_InternFromString(arg_names[j])) == NULL)
            return -1;
    zero = PyLong_FromLong(0);
    one = PyLong_FromLong(1);
    minus_one = PyLong_FromLong(-1);
    if (zero == NULL || one == NULL || minus_one == NULL)
        return -1;
    return PyModule_AddFunctions(m, bls_methods);
}
