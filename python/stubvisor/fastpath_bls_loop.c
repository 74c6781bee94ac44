/* stubvisor.fastpath: the answers of async_exec calls, read on the stub's
 * own event loop and handed to their futures (fastpath_bls.c says what
 * the BLS path in C is). */
#include "fastpath_bls.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* --- async_exec answers on the stub's own loop ------------------------------ */

/* Truth of o.name(); -1 with an exception. */
static int attr_call_true(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_CallMethodNoArgs(o, name);
    if (v == NULL)
        return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* The result of an async_exec call whose final response is in, as bls's
 * loop picks it from its responses (None when it has none). */
static PyObject *call_result(PyObject *call)
{
    PyObject *wires = PySequence_List(SLOT(call, c_queue)), *result = NULL;
    if (wires == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(wires); i++) {
        PyObject *resp = response(PyList_GET_ITEM(wires, i));
        if (resp == NULL) {
            Py_XDECREF(result);
            Py_DECREF(wires);
            return NULL;
        }
        int take = result == NULL || !Py_IS_TYPE(resp, response_type);
        if (!take) {
            PyObject *outs = SLOT(resp, s_outputs), *err = SLOT(resp, s_error);
            take = (err != NULL && err != Py_None) || (outs != NULL && PyObject_IsTrue(outs) > 0);
        }
        if (take)
            Py_XSETREF(result, resp);
        else
            Py_DECREF(resp);
    }
    Py_DECREF(wires);
    return result != NULL ? result : Py_NewRef(Py_None);
}

/* As _resolve_ready once no async_exec call is open: a decoupled model's
 * main thread reads the channel again (_await_loop). 0, or -1 with an
 * exception. */
static int calls_ended(void)
{
    int reads = attr_true(hc.host, n_loop_reads);
    if (reads <= 0)
        return reads;
    PyObject *wake = PyObject_GetAttr(hc.host, n_main_wake);
    PyObject *n = wake ? PyObject_CallMethodNoArgs(wake, n_set) : NULL;
    Py_XDECREF(wake);
    Py_XDECREF(n);
    return n == NULL ? -1 : 0;
}

/* _resolve_ready on the loop's thread: the calls of loop whose final
 * response is in, each future resolved with its result. */
static int resolve(PyObject *loop)
{
    if (call0(hc.cond_acquire) < 0)
        return -1;
    PyObject *calls = PyDict_GetItemWithError(hc.async_ready, loop);
    int rc = 0;
    Py_XINCREF(calls);
    if (calls != NULL) {
        rc = PyDict_DelItem(hc.async_ready, loop);
        Py_ssize_t n = PyObject_Length(calls);
        PyObject *open_ = rc < 0 || n < 0 ? NULL : PyObject_GetAttr(hc.host, n_async_open);
        PyObject *count = open_ ? PyLong_FromSsize_t(n) : NULL;
        PyObject *left = count ? PyNumber_Subtract(open_, count) : NULL;
        rc = left == NULL ? -1 : PyObject_SetAttr(hc.host, n_async_open, left);
        if (rc == 0) {
            int none = PyObject_Not(left);
            rc = none < 0 || (none && calls_ended() < 0) ? -1 : 0;
        }
        Py_XDECREF(open_);
        Py_XDECREF(count);
        Py_XDECREF(left);
    } else if (PyErr_Occurred()) {
        rc = -1;
    }
    if (call0(hc.cond_release) < 0)
        rc = -1;
    if (calls == NULL || rc < 0) {
        Py_XDECREF(calls);
        return rc;
    }
    PyObject *seq = PySequence_Fast(calls, "fastpath: ready calls not a sequence");
    Py_DECREF(calls);
    if (seq == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && rc == 0; i++) {
        PyObject *call = PySequence_Fast_GET_ITEM(seq, i), *waker = SLOT(call, c_waker);
        if (!Py_IS_TYPE(call, call_type) || waker == NULL || !PyTuple_CheckExact(waker) || PyTuple_GET_SIZE(waker) < 2) {
            PyErr_SetString(PyExc_TypeError, "fastpath: a ready call without its (loop, future)");
            rc = -1;
            break;
        }
        PyObject *future = PyTuple_GET_ITEM(waker, 1), *result = call_result(call);
        if (result == NULL) {
            rc = -1;
            break;
        }
        PyObject *r = PyObject_CallMethodNoArgs(SLOT(call, c_queue), n_clear);
        int cancelled = r == NULL ? -1 : attr_call_true(future, n_cancelled);
        Py_XDECREF(r);
        if (cancelled == 0) {
            r = PyObject_CallMethodOneArg(future, n_set_result, result);
            cancelled = r == NULL ? -1 : 1;
            Py_XDECREF(r);
        }
        Py_DECREF(result);
        if (cancelled < 0)
            rc = -1;
    }
    Py_DECREF(seq);
    return rc;
}

/* resolve_ready(host, loop): BLSMixin._resolve_ready. */
PyObject *fp_resolve_ready(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "fastpath.resolve_ready(host, loop)");
        return NULL;
    }
    if (host_cache(args[0]) < 0 || resolve(args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* The sleep of Channel.wait_message(wait) on an empty ring whose tail is
 * old (the caller holds the reader lock): 0, or -1 for the Python path
 * (the supervisor gone or the channel closed: it raises PeerDead). */
static int sleep_for_message(fp_ring_words *w, uint64_t old, long long wait)
{
    if (__atomic_load_n(w->dead, __ATOMIC_ACQUIRE) || attr_true(hc.ch, n_closed) != 0)
        return -1;
    PyObject *ppid = PyObject_GetAttr(hc.ch, n_ppid);
    long want = ppid ? PyLong_AsLong(ppid) : -1;
    Py_XDECREF(ppid);
    if (PyErr_Occurred() || getppid() != want)
        return -1;
    xchg4(w->reader_sleeping, 1);
    if (__atomic_load_n(w->tail, __ATOMIC_SEQ_CST) == old && !__atomic_load_n(w->dead, __ATOMIC_SEQ_CST)) {
        struct timespec ts = {(time_t)(wait / 1000000000LL), (long)(wait % 1000000000LL)};
        Py_BEGIN_ALLOW_THREADS
        syscall(SYS_futex, (void *)w->tail, FUTEX_WAIT, (uint32_t)old, &ts, NULL, 0);
        Py_END_ALLOW_THREADS
    }
    xchg4(w->reader_sleeping, 0);
    return 0;
}

/* The ring's head (its _Ring's cursor); -1 with an exception. */
static int ring_head(uint64_t *head)
{
    PyObject *in = PyObject_GetAttr(hc.ch, n_in);
    PyObject *cursor = in ? PyObject_GetAttr(in, n_cursor) : NULL;
    Py_XDECREF(in);
    if (cursor == NULL)
        return -1;
    *head = PyLong_AsUnsignedLongLong(cursor);
    Py_DECREF(cursor);
    return PyErr_Occurred() ? -1 : 0;
}

/* What _loop_read reads under the reader lock: up to 64 messages, after a
 * wait of up to wait ns for the first. NULL with an exception, or with
 * none for the Python path. */
static PyObject *read_messages(long long wait)
{
    PyObject *fast = PyObject_GetAttr(hc.ch, n_fast_in), *msgs = NULL;
    fp_ring_words w;
    uint64_t head;
    if (fast == NULL || fast == Py_None || fp_ring_get_words(fast, &w) < 0 || attr_true(hc.ch, n_closed) != 0
        || ring_head(&head) < 0)
        goto python;
    uint64_t tail = __atomic_load_n(w.tail, __ATOMIC_ACQUIRE);
    PyObject *host = hc.host;
    if (tail == head && wait > 0 && (sleep_for_message(&w, tail, wait) < 0 || host_cache(host) < 0))
        goto python; /* host_cache: as in wait_answer */
    msgs = PyList_New(0);
    while (msgs != NULL && PyList_GET_SIZE(msgs) < 64) {
        if (ring_head(&head) < 0 || __atomic_load_n(w.tail, __ATOMIC_ACQUIRE) == head)
            break;
        PyObject *msg = fp_ring_pop(fast, decode_msg);
        if (msg == Py_None) {
            /* A wrap marker or a bad frame: recv_held sorts it out. */
            Py_DECREF(msg);
            msg = PyObject_CallMethodOneArg(hc.ch, n_recv_held, bls_zero);
        }
        if (msg == Py_None) {
            Py_DECREF(msg);
            break;
        }
        if (msg != NULL)
            msg = hand_over(msg);
        if (msg == Py_None) {
            Py_DECREF(msg); /* a command, queued for the main thread */
            continue;
        }
        if (msg == NULL || PyList_Append(msgs, msg) < 0) {
            Py_XDECREF(msg);
            Py_CLEAR(msgs);
            break;
        }
        Py_DECREF(msg);
    }
    Py_DECREF(fast);
    return msgs;
python:
    PyErr_Clear();
    Py_XDECREF(fast);
    return NULL;
}

/* loop_read(host, loop, timeout): BLSMixin._loop_read, the read of the
 * stub's own loop while its async_exec calls are open: wait up to timeout
 * (None: a slice) for the ring, take what came, resolve the calls it
 * ended. False when another thread reads. */
PyObject *fp_loop_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "fastpath.loop_read(host, loop, timeout)");
        return NULL;
    }
    PyObject *host = args[0], *loop = args[1], *timeout = args[2];
    if (!ready || host_cache(host) < 0) {
        PyErr_Clear();
        goto python;
    }
    long long wait = pump_slice_ns;
    if (timeout != Py_None) {
        double t = PyFloat_AsDouble(timeout);
        if (t == -1.0 && PyErr_Occurred())
            return NULL;
        if (t * 1e9 < (double)pump_slice_ns)
            wait = t <= 0 ? 0 : (long long)(t * 1e9);
    }
    int busy = attr_true(host, n_main_waiting);
    if (busy != 0)
        return busy < 0 ? NULL : Py_NewRef(Py_False);
    PyObject *got = PyObject_CallOneArg(hc.reader_acquire, Py_False);
    if (got == NULL)
        return NULL;
    int have = got == Py_True;
    Py_DECREF(got);
    if (!have)
        Py_RETURN_FALSE;
    PyObject *msgs = read_messages(wait);
    int failed = msgs == NULL && PyErr_Occurred();
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    if (failed)
        PyErr_Fetch(&type, &value, &tb);
    if (call0(hc.reader_release) < 0) {
        Py_XDECREF(msgs);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return NULL;
    }
    if (failed) {
        if (type != NULL && PyErr_GivenExceptionMatches(type, peer_dead)) {
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
            return PyObject_CallOneArg(exit_now, bls_one);
        }
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    if (msgs == NULL)
        goto python;
    int rc = PyObject_SetAttr(host, n_loop_reading, Py_True);
    for (Py_ssize_t i = 0; rc >= 0 && i < PyList_GET_SIZE(msgs); i++)
        rc = dispatch(PyList_GET_ITEM(msgs, i), loop);
    Py_DECREF(msgs);
    PyObject *type2, *value2, *tb2;
    PyErr_Fetch(&type2, &value2, &tb2);
    if (PyObject_SetAttr(host, n_loop_reading, Py_False) < 0)
        rc = -1;
    if (type2 != NULL)
        PyErr_Restore(type2, value2, tb2);
    if (rc < 0)
        return NULL;
    int pending = PyDict_Contains(hc.async_ready, loop);
    if (pending < 0 || (pending && resolve(loop) < 0))
        return NULL;
    int waiters = attr_true(host, n_cond_waiters);
    if (waiters < 0)
        return NULL;
    if (waiters) {
        /* As _wait: a thread that waits for the reader lock looks again. */
        if (call0(hc.cond_acquire) < 0)
            return NULL;
        PyObject *n = PyObject_CallMethodNoArgs(hc.cond, n_notify_all);
        Py_XDECREF(n);
        if (call0(hc.cond_release) < 0 || n == NULL)
            return NULL;
    }
    Py_RETURN_TRUE;
python:
    return py_fallback(py_loop_read, args, nargs, NULL);
}

