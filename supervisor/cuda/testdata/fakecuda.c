/*
 * fakecuda.c: a TEST FIXTURE, not a CUDA driver.
 *
 * It exports the few CUDA driver API symbols stubvisor binds (supervisor/cuda
 * in Go, python/stubvisor/cuda.py in Python) and implements them with host
 * memory, so the whole CUDA shared-memory path (purego and ctypes calls,
 * IPC handles passed by value, register/infer/unregister, bounds checks)
 * runs on machines without a GPU. Tests compile it with
 *
 *     gcc -shared -fPIC -O1 -o libfakecuda.so fakecuda.c
 *
 * and point STUBVISOR_LIBCUDA at the result. Nothing ships it.
 *
 * Model: "device memory" is a memfd mapped in the allocating process; a
 * device pointer is the address of that mapping. An IPC handle's 64 bytes
 * carry a magic, the owner's pid, the memfd's number and the size, so a
 * second process opens "/proc/<pid>/fd/<fd>" and maps it (the owner must
 * still be alive, as with real CUDA IPC). memcpy functions are memcpy
 * after a range check against the known allocations and mappings.
 * Functions that need a context fail with CUDA_ERROR_INVALID_CONTEXT unless
 * the calling thread made a primary context current, as the real driver
 * does: that catches callers that forget thread affinity.
 *
 * FAKECUDA_DEVICES (default 1) sets the device count; 0 makes cuInit fail
 * with CUDA_ERROR_NO_DEVICE.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct { char reserved[64]; } CUipcMemHandle;

enum {
	OK = 0,
	INVALID_VALUE = 1,
	OUT_OF_MEMORY = 2,
	NOT_INITIALIZED = 3,
	NO_DEVICE = 100,
	INVALID_DEVICE = 101,
	INVALID_CONTEXT = 201,
	MAP_FAILED_ = 205,
	INVALID_HANDLE = 400,
};

static const char magic[8] = "FAKECUDA";

struct block {
	uintptr_t ptr;
	size_t size;
	int fd;    /* allocations: the memfd; mappings: -1 */
	int owned; /* 1: cuMemAlloc, 0: cuIpcOpenMemHandle */
};

/* Every call but cuInit fails like the driver before cuInit, and on a
 * device ordinal the machine does not have. */
#define NEED_INIT()                         \
	do {                                \
		if (!initialized)           \
			return NOT_INITIALIZED; \
	} while (0)
#define NEED_DEVICE(d)                                  \
	do {                                            \
		NEED_INIT();                            \
		if ((d) < 0 || (d) >= devices)          \
			return INVALID_DEVICE;          \
	} while (0)

#define MAX_BLOCKS 256
static struct block blocks[MAX_BLOCKS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static int devices;
static __thread CUcontext current;

static int need_ctx(void) {
	NEED_INIT();
	return current ? OK : INVALID_CONTEXT;
}

#define NEED_CTX()                      \
	do {                            \
		CUresult rc_ = need_ctx(); \
		if (rc_)                \
			return rc_;     \
	} while (0)

/* find returns the block holding [p, p+n), or NULL. Caller holds mu. */
static struct block *find(uintptr_t p, size_t n) {
	for (int i = 0; i < MAX_BLOCKS; i++) {
		struct block *b = &blocks[i];
		if (b->ptr && p >= b->ptr && p - b->ptr <= b->size && n <= b->size - (p - b->ptr))
			return b;
	}
	return NULL;
}

static struct block *slot(void) {
	for (int i = 0; i < MAX_BLOCKS; i++)
		if (!blocks[i].ptr)
			return &blocks[i];
	return NULL;
}

CUresult cuInit(unsigned int flags) {
	if (flags != 0)
		return INVALID_VALUE;
	const char *env = getenv("FAKECUDA_DEVICES");
	devices = env ? atoi(env) : 1;
	if (devices <= 0)
		return NO_DEVICE;
	initialized = 1;
	return OK;
}

CUresult cuDeviceGetCount(int *count) {
	NEED_INIT();
	if (!count)
		return INVALID_VALUE;
	*count = devices;
	return OK;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
	NEED_DEVICE(ordinal);
	*dev = ordinal;
	return OK;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
	NEED_DEVICE(dev);
	*ctx = (CUcontext)(uintptr_t)(0x1000 + dev);
	return OK;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
	NEED_DEVICE(dev);
	return OK;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
	NEED_INIT();
	current = ctx;
	return OK;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
	NEED_CTX();
	if (!dptr || size == 0)
		return INVALID_VALUE;
	int fd = memfd_create("fakecuda", MFD_CLOEXEC);
	if (fd < 0)
		return OUT_OF_MEMORY;
	if (ftruncate(fd, (off_t)size) != 0) {
		close(fd);
		return OUT_OF_MEMORY;
	}
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&mu);
	struct block *b = slot();
	if (b) {
		b->ptr = (uintptr_t)p;
		b->size = size;
		b->fd = fd;
		b->owned = 1;
	}
	pthread_mutex_unlock(&mu);
	if (!b) {
		munmap(p, size);
		close(fd);
		return OUT_OF_MEMORY;
	}
	*dptr = (CUdeviceptr)(uintptr_t)p;
	return OK;
}

static CUresult drop(CUdeviceptr dptr, int owned) {
	NEED_CTX();
	pthread_mutex_lock(&mu);
	struct block *b = NULL;
	for (int i = 0; i < MAX_BLOCKS; i++)
		if (blocks[i].ptr && blocks[i].ptr == (uintptr_t)dptr && blocks[i].owned == owned)
			b = &blocks[i];
	struct block copy = {0};
	if (b) {
		copy = *b;
		memset(b, 0, sizeof *b);
	}
	pthread_mutex_unlock(&mu);
	if (!copy.ptr)
		return INVALID_VALUE;
	munmap((void *)copy.ptr, copy.size);
	if (copy.fd >= 0)
		close(copy.fd);
	return OK;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) { return drop(dptr, 1); }

CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr) {
	NEED_CTX();
	pthread_mutex_lock(&mu);
	struct block *b = find((uintptr_t)dptr, 0);
	struct block copy = b ? *b : (struct block){0};
	pthread_mutex_unlock(&mu);
	if (!copy.ptr || !copy.owned)
		return INVALID_VALUE;
	memset(h, 0, sizeof *h);
	int32_t pid = getpid(), fd = copy.fd;
	uint64_t size = copy.size;
	memcpy(h->reserved, magic, 8);
	memcpy(h->reserved + 8, &pid, 4);
	memcpy(h->reserved + 12, &fd, 4);
	memcpy(h->reserved + 16, &size, 8);
	return OK;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle h, unsigned int flags) {
	NEED_CTX();
	if (!dptr || flags > 1)
		return INVALID_VALUE;
	if (memcmp(h.reserved, magic, 8) != 0)
		return INVALID_HANDLE;
	int32_t pid, fd;
	uint64_t size;
	memcpy(&pid, h.reserved + 8, 4);
	memcpy(&fd, h.reserved + 12, 4);
	memcpy(&size, h.reserved + 16, 8);
	if (pid == getpid())
		return INVALID_CONTEXT; /* CUDA refuses handles from the same process */
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
	int f = open(path, O_RDWR | O_CLOEXEC);
	if (f < 0)
		return INVALID_HANDLE;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
	close(f);
	if (p == MAP_FAILED)
		return MAP_FAILED_;
	pthread_mutex_lock(&mu);
	struct block *b = slot();
	if (b) {
		b->ptr = (uintptr_t)p;
		b->size = size;
		b->fd = -1;
		b->owned = 0;
	}
	pthread_mutex_unlock(&mu);
	if (!b) {
		munmap(p, size);
		return OUT_OF_MEMORY;
	}
	*dptr = (CUdeviceptr)(uintptr_t)p;
	return OK;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) { return drop(dptr, 0); }

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr) {
	NEED_CTX();
	pthread_mutex_lock(&mu);
	struct block *b = find((uintptr_t)dptr, 0);
	struct block copy = b ? *b : (struct block){0};
	pthread_mutex_unlock(&mu);
	if (!copy.ptr || (uintptr_t)dptr == copy.ptr + copy.size)
		return INVALID_VALUE;
	if (base)
		*base = copy.ptr;
	if (size)
		*size = copy.size;
	return OK;
}

static CUresult check(uintptr_t dev, size_t n) {
	NEED_CTX();
	pthread_mutex_lock(&mu);
	struct block *b = find(dev, n);
	pthread_mutex_unlock(&mu);
	return b ? OK : INVALID_VALUE;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
	CUresult rc = check((uintptr_t)src, n);
	if (rc == OK && n)
		memcpy(dst, (void *)(uintptr_t)src, n);
	return rc;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
	CUresult rc = check((uintptr_t)dst, n);
	if (rc == OK && n)
		memcpy((void *)(uintptr_t)dst, src, n);
	return rc;
}

CUresult cuGetErrorName(CUresult error, const char **name) {
	if (!name)
		return INVALID_VALUE;
	switch (error) {
	case OK: *name = "CUDA_SUCCESS"; break;
	case INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
	case OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
	case NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; break;
	case NO_DEVICE: *name = "CUDA_ERROR_NO_DEVICE"; break;
	case INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
	case INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; break;
	case MAP_FAILED_: *name = "CUDA_ERROR_MAP_FAILED"; break;
	case INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; break;
	default: *name = NULL; return INVALID_VALUE;
	}
	return OK;
}
