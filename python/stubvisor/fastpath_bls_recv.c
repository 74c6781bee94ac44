/* stubvisor.fastpath: a BLS call's answer, waited for, read and made into
 * pb_utils objects (fastpath_bls.c says what the BLS path in C is). */
#include "fastpath_bls.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* --- waiting for the answer ----------------------------------------------- */

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
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

/* Host._dispatch of an InferResult, when it is a plain one:
 * [KIND_INFER_RESULT, id, wire] with an int flags word. loop is the
 * BLSLoop whose thread reads it (loop_read, with _loop_reading set), or
 * NULL. 1 done, 0 for _dispatch, -1 on an error. */
static int dispatch_result(PyObject *msg, PyObject *loop)
{
    if (!PyList_CheckExact(msg) || PyList_GET_SIZE(msg) < 3)
        return 0;
    PyObject *kind = PyList_GET_ITEM(msg, 0), *id = PyList_GET_ITEM(msg, 1), *wire = PyList_GET_ITEM(msg, 2);
    if (!PyLong_CheckExact(kind) || PyLong_AsLong(kind) != k_infer_result || !PyLong_CheckExact(id)
        || !PyList_CheckExact(wire) || PyList_GET_SIZE(wire) < 2 || !PyLong_CheckExact(PyList_GET_ITEM(wire, 1))) {
        PyErr_Clear();
        return 0;
    }
    long flags = PyLong_AsLong(PyList_GET_ITEM(wire, 1));
    if (flags == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    Py_INCREF(msg); /* holds id and wire */
    if (call0(hc.cond_acquire) < 0) {
        Py_DECREF(msg);
        return -1;
    }
    int rc = 1;
    PyObject *call = PyDict_GetItemWithError(hc.calls, id);
    Py_XINCREF(call);
    if (call != NULL) {
        PyObject *r = PyObject_CallMethodOneArg(SLOT(call, c_queue), n_append, wire);
        rc = r == NULL ? -1 : 1;
        Py_XDECREF(r);
        if (rc == 1 && (flags & flag_final_bls)) {
            PyObject *waker = SLOT(call, c_waker);
            rc = PyDict_DelItem(hc.calls, id) < 0 ? -1 : 1;
            if (rc == 1 && waker != NULL && waker != Py_None) {
                if (loop != NULL && PyTuple_CheckExact(waker) && PyTuple_GET_SIZE(waker) == 2
                    && PyTuple_GET_ITEM(waker, 0) == loop) {
                    /* _async_done on the loop's thread while it reads:
                     * loop_read resolves it, with no callback. */
                    PyObject *list = PyDict_GetItemWithError(hc.async_ready, loop);
                    if (list != NULL)
                        rc = PyList_Append(list, call) < 0 ? -1 : 1;
                    else if (PyErr_Occurred())
                        rc = -1;
                    else {
                        list = PyList_New(1);
                        if (list == NULL)
                            rc = -1;
                        else {
                            PyList_SET_ITEM(list, 0, Py_NewRef(call));
                            rc = PyDict_SetItem(hc.async_ready, loop, list) < 0 ? -1 : 1;
                            Py_DECREF(list);
                        }
                    }
                } else {
                    PyObject *d = PyObject_CallMethodOneArg(hc.host, n_async_done, call);
                    rc = d == NULL ? -1 : 1;
                    Py_XDECREF(d);
                }
            }
        }
        if (rc == 1 && PyObject_Length(hc.cond_waiters) > 0) {
            PyObject *n = PyObject_CallMethodNoArgs(hc.cond, n_notify_all);
            rc = n == NULL ? -1 : 1;
            Py_XDECREF(n);
        }
    } else if (PyErr_Occurred()) {
        rc = -1;
    }
    if (call0(hc.cond_release) < 0)
        rc = -1;
    if (rc == 1 && call == NULL) {
        /* Nobody waits for it any more. */
        PyObject *d = PyObject_CallMethodOneArg(hc.host, n_return_blocks, wire);
        rc = d == NULL ? -1 : 1;
        Py_XDECREF(d);
    }
    Py_XDECREF(call);
    Py_DECREF(msg);
    return rc;
}

/* dispatch_result, or Host._dispatch for anything else. */
int dispatch(PyObject *msg, PyObject *loop)
{
    int rc = dispatch_result(msg, loop);
    if (rc != 0)
        return rc;
    PyObject *r = PyObject_CallMethodOneArg(hc.host, n_dispatch, msg);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* Host._hand_over of a message read with the reader lock held, before
 * the lock goes: a command is queued for the main thread now. InferResults,
 * the usual message, need no look. Steals msg; returns msg, None (queued)
 * or NULL with an exception. */
PyObject *hand_over(PyObject *msg)
{
    if (PyList_CheckExact(msg) && PyList_GET_SIZE(msg) > 0) {
        PyObject *kind = PyList_GET_ITEM(msg, 0);
        if (PyLong_CheckExact(kind) && PyLong_AsLong(kind) == k_infer_result)
            return msg;
        PyErr_Clear();
    }
    PyObject *r = PyObject_CallMethodOneArg(hc.host, n_hand_over, msg);
    Py_DECREF(msg);
    return r;
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
int wait_answer(PyObject *call)
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
        msg = fp_ring_pop(fast, decode_msg);
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
            PyObject *host = hc.host;
            int moved = wait_tail(&w, tail);
            /* The GIL was released: another thread may have looked up
             * another host meanwhile (tests make several). */
            if (moved >= 0 && host_cache(host) < 0)
                moved = -1;
            if (moved < 0)
                python = 1;
            else if (moved)
                msg = fp_ring_pop(fast, decode_msg);
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
        if (msg != NULL && (msg = hand_over(msg)) == NULL) {
            call0(hc.reader_release);
            return -1;
        }
        if (msg == Py_None)
            Py_CLEAR(msg);
        if (call0(hc.reader_release) < 0) {
            Py_XDECREF(msg);
            return -1;
        }
        if (msg != NULL) {
            int rc = dispatch(msg, NULL);
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
    PyObject *params = PyList_GET_SIZE(wire) > 4 ? PyList_GET_ITEM(wire, 4) : bls_empty;
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
    SLOT(r, s_params) = Py_NewRef(PyUnicode_GET_LENGTH(params) ? params : bls_empty);
    SLOT(r, s_release) = Py_NewRef(Py_None);
    return r;
python:
    PyErr_Clear();
    Py_DECREF(outputs);
    Py_DECREF(err);
    return NULL;
}

/* bls_response(host, wire): BLSMixin._bls_response. */
PyObject *fp_bls_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs == 2 && ready && py_response != NULL) {
        PyObject *r = usual_response(args[1]);
        if (r != NULL || PyErr_Occurred())
            return r;
    }
    return py_fallback(py_response, args, nargs, NULL);
}

PyObject *response(PyObject *wire)
{
    PyObject *r = usual_response(wire);
    if (r != NULL || PyErr_Occurred())
        return r;
    PyObject *argv[2] = {hc.host, wire};
    return PyObject_Vectorcall(py_response, argv, 2, NULL);
}


