/* stubvisor.fastpath: pb_utils' per-input calls and constructors. */
#include "fastpath.h"

/* --- pb_utils' per-input calls ---------------------------------------------- */

static PyObject *wire_dtype, *as_numpy_py, *get_input_py;
static long bf16_code;

/* Tensor.as_numpy (pb_utils): the first call on an input whose bytes came
 * in the message makes a writable array over a copy of them (for BYTES,
 * an object array of its elements), as the Python method does; everything
 * else is the Python method's. */
PyObject *fp_as_numpy(PyObject *self, PyObject *t)
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
    if (src == NULL || shape == NULL || !PyTuple_CheckExact(src) || PyTuple_GET_SIZE(src) != 3)
        goto python;
    PyObject *loc = PyTuple_GET_ITEM(src, 0), *data = PyTuple_GET_ITEM(src, 1), *size = PyTuple_GET_ITEM(src, 2);
    if (!PyLong_CheckExact(loc) || PyLong_AsLongAndOverflow(loc, &overflow) != loc_inline || overflow
        || !PyBytes_CheckExact(data) || !PyLong_CheckExact(size) || _PyLong_Sign(size) == 0)
        goto python;
    if (c == bytes_code) {
        array = fp_bytes_input(data, shape);
        if (array == NULL) {
            if (PyErr_Occurred())
                return NULL;
            goto python;
        }
        Py_XSETREF(SLOT(t, t_np), Py_NewRef(array));
        return array;
    }
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
PyObject *fp_get_input(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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
PyObject *fp_setup_pb(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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
PyObject *fp_method(PyObject *self, PyObject *func)
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
PyObject *fp_tensor_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
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
PyObject *fp_response_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
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
PyObject *fp_setup_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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

/* The names the constructors read, interned once. */
int fp_pb_ready(void)
{
    str_dtype = PyUnicode_InternFromString("dtype");
    str_flags = PyUnicode_InternFromString("flags");
    str_c_contiguous = PyUnicode_InternFromString("c_contiguous");
    return str_dtype == NULL || str_flags == NULL || str_c_contiguous == NULL ? -1 : 0;
}
