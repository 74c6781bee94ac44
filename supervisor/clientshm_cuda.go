package supervisor

import "errors"

// errNoGPU is the reason CUDA regions are refused without a driver.
var errNoGPU = errors.New("GPUs not supported")

// cudaRegion is an opened CUDA IPC handle.
type cudaRegion struct{}

// openCUDARegion opens a CUDA IPC handle; without a CUDA driver there is
// nothing to open.
func openCUDARegion(rawHandle []byte, deviceID int64, byteSize uint64) (*cudaRegion, error) {
	return nil, errNoGPU
}

func (c *cudaRegion) close() {}

// cudaReason is the tail of Triton's register error text.
func cudaReason(err error) string {
	if errors.Is(err, errNoGPU) {
		return "GPUs not supported"
	}
	return err.Error()
}
