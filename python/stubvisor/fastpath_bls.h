/* Shared by the four files of the calling stub's BLS path in C
 * (fastpath_bls.c says what it is): what setup_bls hands over, the host's
 * objects looked up once, and the functions one file gives the others. */
#ifndef STUBVISOR_FASTPATH_BLS_H
#define STUBVISOR_FASTPATH_BLS_H

#include "fastpath.h"

/* fastpath_bls.c: setup_bls's classes, functions and constants. */
extern PyTypeObject *call_type, *mixin_type, *bls_loop_type, *deque_type;
extern Py_ssize_t c_host, c_id, c_queue, c_done, c_waker;
extern PyObject *pb_dict, *forked, *error_type, *wire_dtypes, *element_sizes, *get_running_loop, *peer_dead,
    *exit_now;
extern PyObject *py_init, *py_exec, *py_async_exec, *py_response, *py_get_output, *py_loop_read;
extern long k_infer_exec, k_infer_result, flag_final_bls;
extern long long pump_slice_ns, wait_slice_ns, preempt_gap_ns, min_budget_ns;
extern PyObject *bls_empty, *bls_zero, *bls_one, *bls_minus_one;

/* f, one of the py_* functions above, called with a compiled function's
 * arguments: the Python function it stands in for takes every call the C
 * code does not. */
PyObject *py_fallback(PyObject *f, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

/* Interned names. */
extern PyObject *n_runtime, *n_initialized, *n_finalizing, *n_main_waiting, *n_async_open, *n_ch,
    *n_cond, *n_lock, *n_waiters, *n_calls, *n_reader, *n_call_ids, *n_inline_room, *n_fast_in, *n_fast_out, *n_in,
    *n_cursor, *n_closed, *n_ppid, *n_spin_ns, *n_budget, *n_acquire, *n_release, *n_notify_all,
    *n_wake_due, *n_send_frame, *n_dispatch, *n_wait, *n_len, *n_append, *n_popleft, *n_params_kw[11],
    *n_async_ready, *n_loop_reading, *n_cond_waiters, *n_async_done, *n_return_blocks, *n_cancelled, *n_set_result,
    *n_recv_held, *n_clear, *n_hand_over, *n_loop_reads, *n_main_wake, *n_set;

/* The host's objects that never change after its __init__ (one Host per
 * process; tests make several, one after another). */
typedef struct {
    PyObject *host, *ch, *cond, *cond_acquire, *cond_release, *cond_waiters, *calls, *reader_acquire,
        *reader_release, *call_ids, *async_ready;
    Py_ssize_t inline_room;
} host_objects;
extern host_objects hc;

int host_cache(PyObject *host);
int call0(PyObject *f);
int attr_true(PyObject *o, PyObject *name);

/* fastpath_bls_wire.c: msgpack as msgpack.Packer(use_bin_type=True)
 * writes it, into a buffer that starts on the stack, and as unpackb reads
 * the usual frame. */
int encode_request(PyObject *req, wbuf *head, wbuf *tail);
PyObject *send_call(wbuf *head, wbuf *tail, PyObject *waker, PyObject *loop);
PyObject *decode_msg(const unsigned char *p, Py_ssize_t n);

static inline uint32_t xchg4(uint32_t *p, uint32_t v)
{
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}

/* fastpath_bls_recv.c */
int dispatch(PyObject *msg, PyObject *loop);
PyObject *hand_over(PyObject *msg);
int wait_answer(PyObject *call);
PyObject *response(PyObject *wire);
PyObject *fp_bls_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* fastpath_bls_loop.c */
PyObject *fp_loop_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *fp_resolve_ready(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
