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
#include "fastpath_bls.h"

/* --- what setup_bls hands over ---------------------------------------------- */

PyTypeObject *call_type, *mixin_type, *bls_loop_type, *deque_type;
Py_ssize_t c_host, c_id, c_queue, c_done, c_waker;
PyObject *pb_dict, *forked, *error_type, *wire_dtypes, *element_sizes, *get_running_loop, *peer_dead, *exit_now;
PyObject *py_init, *py_exec, *py_async_exec, *py_response, *py_get_output, *py_loop_read;
long k_infer_exec, k_infer_result, flag_final_bls;
long long pump_slice_ns, wait_slice_ns, preempt_gap_ns, min_budget_ns;
PyObject *bls_empty, *bls_zero, *bls_one, *bls_minus_one;
static PyObject *future_type, *kw_loop;
PyObject *n_runtime, *n_initialized, *n_finalizing, *n_main_waiting, *n_async_open, *n_ch, *n_cond,
    *n_lock, *n_waiters, *n_calls, *n_reader, *n_call_ids, *n_inline_room, *n_fast_in, *n_fast_out, *n_in, *n_cursor,
    *n_closed, *n_ppid, *n_spin_ns, *n_budget, *n_acquire, *n_release, *n_notify_all, *n_wake_due,
    *n_send_frame, *n_dispatch, *n_wait, *n_len, *n_append, *n_popleft, *n_params_kw[11], *n_async_ready,
    *n_loop_reading, *n_cond_waiters, *n_async_done, *n_return_blocks, *n_cancelled, *n_set_result, *n_recv_held,
    *n_clear, *n_hand_over, *n_loop_reads, *n_main_wake, *n_set;

/* --- the host, looked up once ----------------------------------------------- */

host_objects hc;

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
    Py_CLEAR(hc.async_ready);
}

/* 0 when hc describes host, -1 with an exception. */
int host_cache(PyObject *host)
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
    hc.async_ready = hc.call_ids ? PyObject_GetAttr(host, n_async_ready) : NULL;
    room = hc.async_ready ? PyObject_GetAttr(host, n_inline_room) : NULL;
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
    if (!PyDict_CheckExact(hc.calls) || !PyDict_CheckExact(hc.async_ready) || !Py_IS_TYPE(hc.cond_waiters, deque_type) || !PyIter_Check(hc.call_ids)) {
        host_forget();
        PyErr_SetString(PyExc_TypeError, "fastpath: the host is not laid out as bls.py reads it");
        return -1;
    }
    hc.host = Py_NewRef(host);
    return 0;
}

/* Call a bound method with no arguments and drop its result. */
int call0(PyObject *f)
{
    PyObject *r = PyObject_CallNoArgs(f);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Truth of an attribute; -1 with an exception. */
int attr_true(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

PyObject *py_fallback(PyObject *f, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (f == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "fastpath: bls not set up");
        return NULL;
    }
    return PyObject_Vectorcall(f, args, nargs, kwnames);
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
        PyObject *flags = PyObject_GetItem(wire, bls_one);
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
    return py_fallback(py_exec, args, nargs, kwnames);
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
    int rc = encode_request(args[0], &head, &tail);
    if (rc < 0)
        goto fail;
    if (rc == 0)
        goto python;
    /* loop.create_future(), as BaseEventLoop's: Future(loop=loop). */
    PyObject *future = PyObject_Vectorcall(future_type, &loop, 0, kw_loop);
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
    return py_fallback(py_async_exec, args, nargs, kwnames);
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
    PyObject *id = a[A_ID] ? a[A_ID] : bls_empty, *corr = a[A_CORR] ? a[A_CORR] : bls_zero;
    PyObject *version = a[A_VERSION] ? a[A_VERSION] : bls_minus_one, *flags = a[A_FLAGS] ? a[A_FLAGS] : bls_zero;
    PyObject *timeout = a[A_TIMEOUT] ? a[A_TIMEOUT] : bls_zero;
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
    Py_XSETREF(SLOT(r, r_handle), Py_NewRef(bls_zero));
    Py_XSETREF(SLOT(r, r_id), Py_NewRef(id));
    Py_XSETREF(SLOT(r, r_correlation_id), Py_NewRef(corr));
    Py_XSETREF(SLOT(r, r_flags), Py_NewRef(flags));
    Py_XSETREF(SLOT(r, r_inputs), copy);
    Py_XSETREF(SLOT(r, r_requested), requested);
    Py_XSETREF(SLOT(r, r_params), Py_NewRef(bls_empty));
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
    return py_fallback(py_init, args, nargs, kwnames);
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
    return py_fallback(py_get_output, args, nargs, NULL);
}

/* --- setup ---------------------------------------------------------------- */

static int get_num(PyObject *d, const char *key, long long *dst, double scale)
{
    PyObject *v = NULL;
    if (fp_get_obj(d, key, &v) < 0)
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
    if (fp_get_obj(d, key, &o) < 0)                                                                        \
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
    if (fp_get_obj(d, "pb_dict", &pb_dict) < 0 || fp_get_obj(d, "_FORKED", &forked) < 0
        || fp_get_obj(d, "TritonError", &error_type) < 0 || fp_get_obj(d, "_WIRE_DTYPE", &wire_dtypes) < 0
        || fp_get_obj(d, "_ELEMENT_SIZE", &element_sizes) < 0 || fp_get_obj(d, "get_running_loop", &get_running_loop) < 0
        || fp_get_obj(d, "init", &py_init) < 0 || fp_get_obj(d, "exec", &py_exec) < 0
        || fp_get_obj(d, "async_exec", &py_async_exec) < 0 || fp_get_obj(d, "bls_response", &py_response) < 0
        || fp_get_obj(d, "get_output_tensor_by_name", &py_get_output) < 0 || fp_get_obj(d, "PeerDead", &peer_dead) < 0
        || fp_get_obj(d, "_exit_now", &exit_now) < 0
        || fp_get_obj(d, "loop_read", &py_loop_read) < 0 || fp_get_obj(d, "Future", &future_type) < 0)
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
    if (fp_get_obj(d, "BLSMixin", &o) < 0)
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
    {"loop_read", (PyCFunction)(void (*)(void))fp_loop_read, METH_FASTCALL,
     "loop_read(host, loop, timeout): BLSMixin._loop_read."},
    {"resolve_ready", (PyCFunction)(void (*)(void))fp_resolve_ready, METH_FASTCALL,
     "resolve_ready(host, loop): BLSMixin._resolve_ready."},
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
    INTERN(n_wake_due, "_wake_due")
    INTERN(n_send_frame, "_send_frame")
    INTERN(n_dispatch, "_dispatch")
    INTERN(n_wait, "_wait")
    INTERN(n_len, "__len__")
    INTERN(n_append, "append")
    INTERN(n_popleft, "popleft")
    INTERN(n_async_ready, "_async_ready")
    INTERN(n_loop_reading, "_loop_reading")
    INTERN(n_cond_waiters, "_cond_waiters")
    INTERN(n_async_done, "_async_done")
    INTERN(n_return_blocks, "_return_blocks")
    INTERN(n_cancelled, "cancelled")
    INTERN(n_set_result, "set_result")
    INTERN(n_recv_held, "recv_held")
    INTERN(n_clear, "clear")
    INTERN(n_hand_over, "_hand_over")
    INTERN(n_loop_reads, "_loop_reads")
    INTERN(n_main_wake, "_main_wake")
    INTERN(n_set, "set")
    INTERN(bls_empty, "")
#undef INTERN
    for (int j = 0; j < A_N; j++)
        if ((n_params_kw[j] = PyUnicode_InternFromString(arg_names[j])) == NULL)
            return -1;
    kw_loop = Py_BuildValue("(s)", "loop");
    if (kw_loop == NULL)
        return -1;
    bls_zero = PyLong_FromLong(0);
    bls_one = PyLong_FromLong(1);
    bls_minus_one = PyLong_FromLong(-1);
    if (bls_zero == NULL || bls_one == NULL || bls_minus_one == NULL)
        return -1;
    return PyModule_AddFunctions(m, bls_methods);
}
