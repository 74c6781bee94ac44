/* stubvisor.fastpath: the rings of a stubvisor.ipc.Channel. */
#include "fastpath.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

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
static PyObject *pop_frame(RingObject *r, int fenced, fp_decode decode)
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
    PyObject *msg = decode == NULL ? NULL : decode(h + 4, (Py_ssize_t)n);
    if (msg == NULL && PyErr_Occurred())
        return NULL;
    if (msg == NULL) {
        PyObject *mv = PyMemoryView_FromMemory((char *)h + 4, (Py_ssize_t)n, PyBUF_READ);
        if (mv == NULL)
            return NULL;
        msg = PyObject_CallOneArg(r->unpack, mv);
        Py_DECREF(mv);
    }
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
    if (fenced && __atomic_load_n(r->writer_sleeping, __ATOMIC_SEQ_CST))
        futex_wake(r->head);
    return msg;
}

static PyObject *ring_pop(RingObject *r, PyObject *fenced)
{
    int f = PyObject_IsTrue(fenced);
    return f < 0 ? NULL : pop_frame(r, f, NULL);
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

static int call_lock(PyObject *f)
{
    PyObject *got = PyObject_CallNoArgs(f);
    Py_XDECREF(got);
    return got == NULL ? -1 : 0;
}

/* 1 when the channel is closed, -1 with an exception. */
static int channel_closed(RingObject *r)
{
    PyObject *closed = PyObject_GetAttr(r->channel, str_closed);
    int is_closed = closed == NULL ? -1 : PyObject_IsTrue(closed);
    Py_XDECREF(closed);
    return is_closed;
}

/* Take the send lock and queue one frame while the channel is open and the
 * peer alive: 1 when queued, 0 for the Python path, -1 with an exception. */
static int push_open(RingObject *r, Py_buffer *view, int wake)
{
    if (call_lock(r->acquire) < 0)
        return -1;
    int rc = 0, closed = channel_closed(r);
    if (closed < 0)
        rc = -1;
    else if (!closed && !__atomic_load_n(r->dead, __ATOMIC_ACQUIRE))
        rc = push_locked(r, view, wake);
    if (call_lock(r->release) < 0)
        return -1;
    return rc;
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
    int rc = push_open(r, &view, 1);
    PyBuffer_Release(&view);
    if (rc < 0)
        return NULL;
    return Py_NewRef(rc ? Py_True : Py_False);
}

/* push_held(data): push for a caller that holds the send lock, has
 * checked the channel is open, and wakes the reader itself after it
 * released the lock (Channel.send, whose caller may defer the wake-up). */
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

/* For fastpath_bls.c: the words of a Ring, push without a Py_buffer
 * (the same as push, the wake-up optional) and pop(True) trying decode
 * (NULL without an exception: not its kind of frame) before the unpacker. */
int fp_ring_get_words(PyObject *o, fp_ring_words *w)
{
    if (!Py_IS_TYPE(o, &RingType) || ((RingObject *)o)->tail == NULL)
        return -1;
    RingObject *r = (RingObject *)o;
    w->tail = r->tail;
    w->reader_sleeping = r->reader_sleeping;
    w->dead = r->dead;
    return 0;
}

int fp_ring_push_buf(PyObject *o, const void *p, Py_ssize_t n, int wake)
{
    RingObject *r = (RingObject *)o;
    if (!Py_IS_TYPE(o, &RingType) || r->acquire == NULL)
        return 0;
    Py_buffer view = {.buf = (void *)p, .len = n};
    return push_open(r, &view, wake);
}

PyObject *fp_ring_pop(PyObject *o, fp_decode decode)
{
    return pop_frame((RingObject *)o, 1, decode);
}

static PyMethodDef ring_methods[] = {
    {"pop", (PyCFunction)ring_pop, METH_O, "pop(fenced) -> the next message, or None for the Python path."},
    {"push", (PyCFunction)ring_push, METH_O, "push(data) -> True when queued, False for the Python path."},
    {"push_held", (PyCFunction)ring_push_held, METH_O,
     "push_held(data): push under the caller's send lock, without the wake-up."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject RingType = {
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

/* The names the rings read, interned once, and their type made ready. */
int fp_ring_ready(void)
{
    str_cursor = PyUnicode_InternFromString("cursor");
    str_closed = PyUnicode_InternFromString("_closed");
    if (str_cursor == NULL || str_closed == NULL)
        return -1;
    return PyType_Ready(&RingType);
}
