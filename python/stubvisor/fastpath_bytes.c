/* stubvisor.fastpath: BYTES (TYPE_STRING) tensors.
 *
 * A BYTES tensor travels as its elements in C order, each a little-endian
 * u32 length and its bytes (pb_utils._serialize). On the way out the model
 * hands an ndarray of dtype object (bytes, numpy.bytes_ or str elements) or
 * of a numpy.bytes_ dtype ("S<n>", each element without its trailing NULs,
 * as tolist() gives it); on the way in it gets a writable object array of
 * bytes. Both arrays are reached through the buffer protocol (numpy exports
 * an object array as format "O", an array of PyObject pointers), so the
 * module needs no numpy headers and keeps working with any numpy that
 * exports them so. Anything else (another element type, a str UTF-8 cannot
 * encode, a non-contiguous array) is left to pb_utils' Python code, which
 * stays the reference: every function here returns "not mine" for it. */
#include "fastpath.h"

static PyObject *object_dtype;       /* numpy.dtype(object) */
static PyTypeObject *npbytes_type;   /* numpy.bytes_ */

/* setup_bytes(object_dtype, bytes_type): numpy's object dtype, to make the
 * input arrays, and numpy.bytes_, an element type written as bytes. */
PyObject *fp_setup_bytes(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "fastpath.setup_bytes(object_dtype, bytes_type)");
        return NULL;
    }
    Py_XSETREF(object_dtype, Py_NewRef(args[0]));
    Py_XSETREF(npbytes_type, (PyTypeObject *)Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

/* --- serializing ------------------------------------------------------------ */

/* How a view's elements are stored: 'O' (PyObject pointers), 's' (fixed
 * width bytes, NUL-padded), or 0 for anything else. */
static char element_kind(const Py_buffer *view)
{
    const char *f = view->format;
    if (f == NULL || (view->buf == NULL && view->len != 0))
        return 0;
    if (f[0] == 'O' && f[1] == '\0' && view->itemsize == (Py_ssize_t)sizeof(PyObject *))
        return 'O';
    while (*f >= '0' && *f <= '9')
        f++;
    if (f[0] == 's' && f[1] == '\0' && view->itemsize > 0)
        return 's';
    return 0;
}

/* The bytes of one element of an object array: 0, or -1 (no exception)
 * for an element the Python code must take. A str's UTF-8 form is the one
 * CPython keeps with the str (PyUnicode_AsUTF8AndSize): ASCII str have it
 * already, others get it made once. */
static inline int element(PyObject *o, const char **p, Py_ssize_t *n)
{
    if (o == NULL)
        return -1;
    PyTypeObject *tp = Py_TYPE(o);
    if (tp == &PyBytes_Type || tp == npbytes_type) {
        *p = PyBytes_AS_STRING(o);
        *n = PyBytes_GET_SIZE(o);
        return 0;
    }
    if (tp == &PyUnicode_Type) {
        *p = PyUnicode_AsUTF8AndSize(o, n);
        if (*p == NULL) {
            PyErr_Clear(); /* (lone surrogates) pb_utils raises its own error */
            return -1;
        }
        return 0;
    }
    return -1;
}

/* The length of a fixed-width element without its trailing NULs. */
static inline Py_ssize_t stripped(const char *p, Py_ssize_t width)
{
    while (width > 0 && p[width - 1] == '\0')
        width--;
    return width;
}

/* The serialized size of a BYTES array seen through view (C-contiguous,
 * with its format), or -1 (no exception) when the Python code must
 * serialize it or the size passes max. Nothing here runs Python code, so
 * the elements are the same for fp_bytes_write right after. */
Py_ssize_t fp_bytes_size(const Py_buffer *view, Py_ssize_t max)
{
    char kind = element_kind(view);
    if (kind == 0 || npbytes_type == NULL)
        return -1;
    Py_ssize_t count = view->len / view->itemsize, size = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t n;
        if (kind == 'O') {
            const char *p;
            if (element(((PyObject **)view->buf)[i], &p, &n) < 0)
                return -1;
        } else {
            n = stripped((const char *)view->buf + i * view->itemsize, view->itemsize);
        }
        if ((unsigned long long)n > 0xFFFFFFFFULL)
            return -1; /* pb_utils' struct.pack raises */
        size += 4 + n;
        if (size > max)
            return -1;
    }
    return size;
}

/* Write the elements fp_bytes_size measured to dst, length-prefixed. */
void fp_bytes_write(const Py_buffer *view, char *dst)
{
    char kind = element_kind(view);
    Py_ssize_t count = view->len / view->itemsize;
    for (Py_ssize_t i = 0; i < count; i++) {
        const char *p = NULL;
        Py_ssize_t n = 0;
        if (kind == 'O') {
            element(((PyObject **)view->buf)[i], &p, &n); /* succeeded in fp_bytes_size */
        } else {
            p = (const char *)view->buf + i * view->itemsize;
            n = stripped(p, view->itemsize);
        }
        uint32_t len = (uint32_t)n;
        dst[0] = (char)len;
        dst[1] = (char)(len >> 8);
        dst[2] = (char)(len >> 16);
        dst[3] = (char)(len >> 24);
        memcpy(dst + 4, p, n);
        dst += 4 + n;
    }
}

/* serialize_bytes(array): pb_utils._serialize of an ndarray (the bytes of
 * its elements, length-prefixed, b"" when it has none), or None for what
 * the Python code must do. */
PyObject *fp_serialize_bytes(PyObject *self, PyObject *array)
{
    if (!ready || !Py_IS_TYPE(array, ndarray_type))
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(array, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *out = NULL;
    Py_ssize_t size = fp_bytes_size(&view, PY_SSIZE_T_MAX);
    if (size < 0) {
        out = Py_NewRef(Py_None);
    } else {
        out = PyBytes_FromStringAndSize(NULL, size);
        if (out != NULL)
            fp_bytes_write(&view, PyBytes_AS_STRING(out));
    }
    PyBuffer_Release(&view);
    return out;
}

/* --- deserializing ---------------------------------------------------------- */

/* The next element of a serialized BYTES tensor p[0:end] at *offset:
 * its length, its bytes starting at *offset + 4, and *offset moved past
 * it; or -1 with pb_utils.deserialize_bytes_tensor's ValueError where the
 * tensor is cut short. */
Py_ssize_t fp_bytes_next(const unsigned char *p, Py_ssize_t end, Py_ssize_t *offset)
{
    Py_ssize_t at = *offset, start = at + 4;
    if (start > end) {
        PyErr_Format(PyExc_ValueError, "truncated BYTES tensor: incomplete length prefix at offset %zd", at);
        return -1;
    }
    uint32_t n = (uint32_t)p[at] | (uint32_t)p[at + 1] << 8 | (uint32_t)p[at + 2] << 16 | (uint32_t)p[at + 3] << 24;
    if (start + (Py_ssize_t)n > end) {
        PyErr_Format(PyExc_ValueError, "truncated BYTES tensor: element of %zd bytes at offset %zd overruns %zd bytes",
                     (Py_ssize_t)n, start, end);
        return -1;
    }
    *offset = start + (Py_ssize_t)n;
    return (Py_ssize_t)n;
}

/* The number of elements of a serialized BYTES tensor, or -1 with
 * pb_utils.deserialize_bytes_tensor's ValueError. */
static Py_ssize_t count_elements(const unsigned char *p, Py_ssize_t end)
{
    Py_ssize_t offset = 0, count = 0;
    while (offset < end) {
        if (fp_bytes_next(p, end, &offset) < 0)
            return -1;
        count++;
    }
    return count;
}

/* A new object array of the given shape holding the count elements at p
 * (checked by count_elements) as bytes. numpy fills a new object array
 * with None; each slot's reference is swapped for the element's. */
static PyObject *fill_array(PyObject *shape, const unsigned char *p, Py_ssize_t count)
{
    PyObject *argv[2] = {shape, object_dtype};
    PyObject *array = PyObject_Vectorcall((PyObject *)ndarray_type, argv, 2, NULL);
    if (array == NULL)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(array, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        Py_DECREF(array);
        return NULL;
    }
    if (element_kind(&view) != 'O' || view.len != count * (Py_ssize_t)sizeof(PyObject *)) {
        PyBuffer_Release(&view);
        Py_DECREF(array);
        PyErr_SetString(PyExc_RuntimeError, "fastpath: numpy made an object array of another layout");
        return NULL;
    }
    PyObject **slots = view.buf;
    Py_ssize_t offset = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint32_t n = (uint32_t)p[offset] | (uint32_t)p[offset + 1] << 8 | (uint32_t)p[offset + 2] << 16
            | (uint32_t)p[offset + 3] << 24;
        PyObject *item = PyBytes_FromStringAndSize((const char *)p + offset + 4, (Py_ssize_t)n);
        if (item == NULL) {
            PyBuffer_Release(&view);
            Py_DECREF(array);
            return NULL;
        }
        Py_XSETREF(slots[i], item);
        offset += 4 + (Py_ssize_t)n;
    }
    PyBuffer_Release(&view);
    return array;
}

/* bytes_array(buffer): pb_utils.deserialize_bytes_tensor, the elements of
 * a serialized BYTES tensor as a 1-D object array of bytes, with its
 * ValueError texts; None before setup_bytes. */
PyObject *fp_bytes_array(PyObject *self, PyObject *arg)
{
    if (!ready || object_dtype == NULL)
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *array = NULL;
    Py_ssize_t count = count_elements(view.buf, view.len);
    if (count >= 0) {
        PyObject *shape = Py_BuildValue("(n)", count);
        if (shape != NULL) {
            array = fill_array(shape, view.buf, count);
            Py_DECREF(shape);
        }
    }
    PyBuffer_Release(&view);
    return array;
}

/* The array of an input whose serialized BYTES came in the message (data),
 * in the input's shape (a list or tuple of ints): what Tensor.as_numpy
 * makes of it. NULL without an exception where the Python code must
 * decide (a shape that does not hold the elements, not set up); with one
 * for pb_utils' ValueError of a malformed tensor. */
PyObject *fp_bytes_input(PyObject *data, PyObject *shape)
{
    if (object_dtype == NULL || !PyBytes_CheckExact(data) || !(PyList_CheckExact(shape) || PyTuple_CheckExact(shape)))
        return NULL;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t count = count_elements(p, PyBytes_GET_SIZE(data));
    if (count < 0)
        return NULL;
    Py_ssize_t want = 1, nd = PySequence_Fast_GET_SIZE(shape);
    PyObject **dims = PySequence_Fast_ITEMS(shape);
    for (Py_ssize_t k = 0; k < nd; k++) {
        if (!PyLong_CheckExact(dims[k]))
            return NULL;
        Py_ssize_t d = PyLong_AsSsize_t(dims[k]);
        if (d < 0 || (d > 0 && want > PY_SSIZE_T_MAX / d)) {
            PyErr_Clear();
            return NULL;
        }
        want *= d;
    }
    if (want != count)
        return NULL; /* pb_utils' reshape says why */
    return fill_array(shape, p, count);
}
