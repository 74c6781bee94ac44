/* Shared by the files of stubvisor.fastpath (fastpath.c says what it is):
 * the classes, constants and slot offsets fastpath.c's setup fills in, and
 * the functions each file gives the module's method table. */
#ifndef STUBVISOR_FASTPATH_H
#define STUBVISOR_FASTPATH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

/* Bumped whenever a function here changes its contract: native.py loads
 * only the ABI it was written for, so a stale build is never used. */
#define FASTPATH_ABI 5

/* Wire constants (stubvisor/ipc.py), given to setup. */
extern long loc_client, loc_cuda, loc_inline, bytes_code, inline_max, kind_execute_done, flag_final;

extern PyTypeObject *tensor_type, *request_type, *response_type, *ndarray_type;
extern PyObject *default_trace, *default_memory, *release_all;

/* Member offsets of the pb_utils classes' slots. */
extern Py_ssize_t t_name, t_dtype, t_np, t_shape, t_src;
extern Py_ssize_t r_handle, r_id, r_correlation_id, r_flags, r_inputs, r_requested, r_params, r_timeout,
    r_model_name, r_model_version, r_preferred_memory, r_trace, r_sender, r_send_state, r_release_flags, r_rt,
    r_final;
extern Py_ssize_t s_outputs, s_error, s_params, s_release;

/* Set once setup succeeded: until then every function takes the Python path. */
extern int ready;

/* A slot of an instance of one of those classes (NULL while unset). */
#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

/* fastpath.c */
int fp_get_obj(PyObject *consts, const char *key, PyObject **dst);

/* fastpath_msgpack.c: the msgpack writer. */
typedef struct {
    char *p;
    Py_ssize_t len, cap;
    char stack[1024];
} wbuf;
void wb_init(wbuf *b);
void wb_free(wbuf *b);
int wb_room(wbuf *b, Py_ssize_t more);
int wb_put(wbuf *b, const void *src, Py_ssize_t n);
int wb_be(wbuf *b, unsigned char head, unsigned long long v, int n);
int wb_byte(wbuf *b, unsigned char c);
int wb_uint(wbuf *b, unsigned long long v);
int wb_int(wbuf *b, long long v);
int wb_array(wbuf *b, Py_ssize_t n);
int wb_str(wbuf *b, const char *s, Py_ssize_t n);
int wb_bin_header(wbuf *b, Py_ssize_t n);
int wb_bin(wbuf *b, const void *p, Py_ssize_t n);
int wb_inline_tensor(wbuf *b, unsigned long long dtype, int ndim, const Py_ssize_t *shape, Py_ssize_t size);

/* fastpath_done.c */
PyObject *fp_usual_done(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *fp_split_bytes(PyObject *self, PyObject *arg);

/* fastpath_pb.c */
PyObject *fp_as_numpy(PyObject *self, PyObject *t);
PyObject *fp_get_input(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *fp_setup_pb(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *fp_method(PyObject *self, PyObject *func);
PyObject *fp_tensor_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *fp_response_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *fp_setup_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
int fp_pb_ready(void);

/* fastpath_bytes.c */
PyObject *fp_setup_bytes(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *fp_serialize_bytes(PyObject *self, PyObject *array);
PyObject *fp_bytes_array(PyObject *self, PyObject *arg);
PyObject *fp_bytes_input(PyObject *data, PyObject *shape);
Py_ssize_t fp_bytes_size(const Py_buffer *view, Py_ssize_t max);
Py_ssize_t fp_bytes_next(const unsigned char *p, Py_ssize_t end, Py_ssize_t *offset);
void fp_bytes_write(const Py_buffer *view, char *dst);

/* fastpath_ring.c */
extern PyTypeObject RingType;
int fp_ring_ready(void);
typedef struct {
    uint64_t *tail;
    uint32_t *reader_sleeping, *dead;
} fp_ring_words;
int fp_ring_get_words(PyObject *ring, fp_ring_words *w);
int fp_ring_push_buf(PyObject *ring, const void *p, Py_ssize_t n, int wake);
typedef PyObject *(*fp_decode)(const unsigned char *p, Py_ssize_t n);
PyObject *fp_ring_pop(PyObject *ring, fp_decode decode);

/* fastpath.c, fastpath_bls.c */
Py_ssize_t fp_slot_offset(PyTypeObject *tp, const char *name);
int fp_bls_ready(PyObject *module);

#endif
