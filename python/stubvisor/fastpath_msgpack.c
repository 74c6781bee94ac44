/* stubvisor.fastpath: msgpack as msgpack.Packer(use_bin_type=True) writes
 * it, into a buffer that starts on the stack and grows on the heap: the one
 * writer of the ExecuteDone frame (fastpath_done.c) and the BLS path's
 * InferExec (fastpath_bls_wire.c). */
#include "fastpath.h"

void wb_init(wbuf *b)
{
    b->p = b->stack;
    b->len = 0;
    b->cap = sizeof(b->stack);
}

void wb_free(wbuf *b)
{
    if (b->p != b->stack)
        PyMem_Free(b->p);
}

int wb_room(wbuf *b, Py_ssize_t more)
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

int wb_put(wbuf *b, const void *src, Py_ssize_t n)
{
    if (wb_room(b, n) < 0)
        return -1;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

/* A header byte and an n-byte big-endian value. */
int wb_be(wbuf *b, unsigned char head, unsigned long long v, int n)
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

int wb_byte(wbuf *b, unsigned char c)
{
    if (wb_room(b, 1) < 0)
        return -1;
    b->p[b->len++] = (char)c;
    return 0;
}

int wb_uint(wbuf *b, unsigned long long v)
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

int wb_int(wbuf *b, long long v)
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

int wb_array(wbuf *b, Py_ssize_t n)
{
    if (n < 16)
        return wb_byte(b, (unsigned char)(0x90 | n));
    if (n < 0x10000)
        return wb_be(b, 0xDC, (unsigned long long)n, 2);
    return wb_be(b, 0xDD, (unsigned long long)n, 4);
}

int wb_bin_header(wbuf *b, Py_ssize_t n)
{
    return n < 0x100 ? wb_be(b, 0xC4, (unsigned long long)n, 1)
        : n < 0x10000 ? wb_be(b, 0xC5, (unsigned long long)n, 2)
                      : wb_be(b, 0xC6, (unsigned long long)n, 4);
}

int wb_bin(wbuf *b, const void *p, Py_ssize_t n)
{
    return wb_bin_header(b, n) < 0 ? -1 : wb_put(b, p, n);
}

int wb_str(wbuf *b, const char *s, Py_ssize_t n)
{
    int rc = n < 32 ? wb_byte(b, (unsigned char)(0xA0 | n))
        : n < 0x100 ? wb_be(b, 0xD9, (unsigned long long)n, 1)
        : n < 0x10000 ? wb_be(b, 0xDA, (unsigned long long)n, 2)
                      : wb_be(b, 0xDB, (unsigned long long)n, 4);
    return rc < 0 ? -1 : wb_put(b, s, n);
}

/* What follows an inline tensor's name in its descriptor, [name, dtype,
 * shape, LOC_INLINE, 0, size, <its bytes>], up to the bytes, which the
 * caller writes (whole, or a bin header and then in place). */
int wb_inline_tensor(wbuf *b, unsigned long long dtype, int ndim, const Py_ssize_t *shape, Py_ssize_t size)
{
    if (wb_uint(b, dtype) < 0 || wb_array(b, ndim) < 0)
        return -1;
    for (int k = 0; k < ndim; k++)
        if (wb_uint(b, (unsigned long long)shape[k]) < 0)
            return -1;
    if (wb_uint(b, (unsigned long long)loc_inline) < 0 || wb_byte(b, 0) < 0)
        return -1;
    return wb_uint(b, (unsigned long long)size);
}
