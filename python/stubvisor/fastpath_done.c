/* stubvisor.fastpath: the usual ExecuteDone frame and BYTES splitting. */
#include "fastpath.h"

/* --- the ExecuteDone frame ------------------------------------------------ */

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
static int put_output(wbuf *b, PyObject *t, Py_ssize_t *total)
{
    PyObject *array = SLOT(t, t_np), *name = SLOT(t, t_name), *dtype = SLOT(t, t_dtype);
    if (array == NULL || name == NULL || dtype == NULL || !Py_IS_TYPE(array, ndarray_type) || !PyUnicode_CheckExact(name))
        return 0;
    unsigned long long code;
    if (as_u64(dtype, &code) < 0)
        return 0;
    Py_ssize_t name_len;
    const char *name_utf8 = PyUnicode_AsUTF8AndSize(name, &name_len);
    if (name_utf8 == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_buffer view;
    /* A BYTES output's bytes are its elements serialized (fastpath_bytes.c),
     * which the view's format tells how to read (numpy makes it on demand). */
    int rc = 0, text = code == (unsigned long long)bytes_code;
    if (PyObject_GetBuffer(array, &view, PyBUF_C_CONTIGUOUS | (text ? PyBUF_FORMAT : 0)) < 0) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t size = text ? fp_bytes_size(&view, inline_max) : view.len;
    if (size <= 0 || size > inline_max || (view.ndim == 0 && !text))
        goto done;
    rc = -1;
    if (wb_byte(b, 0x97) < 0 || wb_str(b, name_utf8, name_len) < 0
        || wb_inline_tensor(b, code, view.ndim, view.shape, size) < 0 || wb_bin_header(b, size) < 0
        || wb_room(b, size) < 0)
        goto done;
    if (text)
        fp_bytes_write(&view, b->p + b->len);
    else
        memcpy(b->p + b->len, view.buf, size);
    b->len += size;
    *total += size;
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
PyObject *fp_usual_done(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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
    wbuf b;
    wb_init(&b);
    Py_ssize_t total = 0;
    PyObject *held_req = NULL, *held_resp = NULL;
    if (wb_byte(&b, 0x94) < 0 || wb_uint(&b, (unsigned long long)kind_execute_done) < 0 || wb_uint(&b, batch_id) < 0
        || wb_byte(&b, 0xC0) < 0 || wb_array(&b, n) < 0)
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
        if (wb_byte(&b, 0x95) < 0 || wb_uint(&b, handle) < 0 || wb_uint(&b, (unsigned long long)flag_final) < 0
            || wb_byte(&b, 0xC0) < 0 || wb_array(&b, no) < 0) {
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
        if (wb_byte(&b, 0xA0) < 0)
            goto fail;
    }
    if (total > room)
        goto python;
    PyObject *frame = PyBytes_FromStringAndSize(b.p, b.len);
    wb_free(&b);
    Py_XDECREF(held_req);
    Py_XDECREF(held_resp);
    return frame;
python:
    wb_free(&b);
    Py_XDECREF(held_req);
    Py_XDECREF(held_resp);
    Py_RETURN_NONE;
fail:
    wb_free(&b);
    Py_XDECREF(held_req);
    Py_XDECREF(held_resp);
    return NULL;
}

/* --- BYTES tensors --------------------------------------------------------- */

/* split_bytes(buffer): the elements of a serialized BYTES tensor (each a
 * little-endian u32 length and its bytes) as a list of bytes, with the
 * ValueError texts of pb_utils.deserialize_bytes_tensor. */
PyObject *fp_split_bytes(PyObject *self, PyObject *arg)
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
        Py_ssize_t start = offset + 4, n = fp_bytes_next(p, end, &offset);
        if (n < 0)
            goto fail;
        PyObject *item = PyBytes_FromStringAndSize((const char *)p + start, n);
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
