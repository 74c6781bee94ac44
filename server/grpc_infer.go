package server

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/stubvisor/stubvisor/backendapi"
	pb "github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// Texts and keys of Triton's gRPC inference handlers (infer_handler.cc,
// stream_infer_handler.cc).
const (
	msgDecoupledGRPC = "ModelInfer RPC doesn't support models with decoupled transaction policy"
	// paramEnableEmptyFinalResponse asks for an empty response carrying
	// only the final flag when a decoupled model completes a request
	// without a response.
	paramEnableEmptyFinalResponse = "triton_enable_empty_final_response"
	// paramFinalResponse is set on every streamed response: true on the
	// last one of a request.
	paramFinalResponse = "triton_final_response"
	// headerGRPCError is the stream metadata key that, set to "true", makes
	// the first error end the stream with a gRPC status instead of an
	// in-band error_message.
	headerGRPCError = "triton_grpc_error"
)

// Shared memory parameters of inputs and outputs.
const (
	paramShmRegion   = "shared_memory_region"
	paramShmOffset   = "shared_memory_offset"
	paramShmByteSize = "shared_memory_byte_size"
	paramClassify    = "classification"
)

// grpcInferOptions are the request settings that only the gRPC front end
// acts on.
type grpcInferOptions struct {
	emptyFinal bool
}

// parseGRPCInfer turns a ModelInferRequest into ir. Input data is aliased,
// not copied: raw_input_contents entries and fixed-size typed contents of
// the right width become InputTensor.Data directly, so ir is valid only
// while req is.
//
// When the codec read req's raw inputs into a buffer the backend lent,
// ir.InputBuffer is that buffer, which the caller releases once the
// request is done, whether or not parsing succeeded.
func parseGRPCInfer(req *pb.ModelInferRequest, ir *backendapi.InferRequest) (grpcInferOptions, error) {
	var opts grpcInferOptions
	ir.InputBuffer = takeStaged(req)
	model := req.GetModelName()
	version, err := parseModelVersion(req.GetModelVersion())
	if err != nil {
		return opts, err
	}
	ir.ModelName, ir.ModelVersion, ir.ID = model, version, req.GetId()
	for key, p := range req.GetParameters() {
		if err := applyGRPCParameter(ir, &opts, key, p); err != nil {
			return opts, err
		}
	}
	raw := req.GetRawInputContents()
	next := 0
	ir.Inputs = make([]backendapi.InputTensor, len(req.GetInputs()))
	for i, io := range req.GetInputs() {
		in := &ir.Inputs[i]
		in.Name = io.GetName()
		in.DataType = parseWireDataType(io.GetDatatype())
		in.Shape = io.GetShape()
		if in.Shape == nil {
			in.Shape = []int64{}
		}
		shm, err := grpcShmRef(io.GetParameters(), in.Name)
		if err != nil {
			return opts, err
		}
		switch {
		case shm != nil:
			if io.Contents != nil {
				return opts, invalidArg("unexpected 'content' provided when using shared memory for input tensor '%s' for model '%s'", in.Name, model)
			}
			in.SharedMemory = shm
		case io.Contents != nil && len(raw) > 0:
			return opts, invalidArg("contents field must not be specified when using raw_input_contents for '%s' for model '%s'", in.Name, model)
		case io.Contents != nil:
			if in.Data, err = contentsToBinary(io.Contents, in.DataType, in.Name, model); err != nil {
				return opts, err
			}
		case next < len(raw):
			in.Data = raw[next]
			if in.Data == nil {
				in.Data = []byte{}
			}
			next++
		default:
			return opts, invalidArg("unable to find data for input tensor '%s' for model '%s' in request.", in.Name, model)
		}
	}
	if len(req.GetOutputs()) > 0 {
		ir.Outputs = make([]backendapi.RequestedOutput, len(req.GetOutputs()))
		for i, o := range req.GetOutputs() {
			if err := checkDuplicateOutput(ir.Outputs[:i], o.GetName()); err != nil {
				return opts, err
			}
			out := &ir.Outputs[i]
			out.Name = o.GetName()
			if p, ok := o.GetParameters()[paramClassify]; ok {
				v, ok := p.GetParameterChoice().(*pb.InferParameter_Int64Param)
				if !ok || v.Int64Param < 0 {
					return opts, invalidArg("invalid value type for '%s' parameter, expected int64_param.", paramClassify)
				}
				out.Classification = uint32(min(v.Int64Param, math.MaxUint32))
			}
			if out.SharedMemory, err = grpcShmRef(o.GetParameters(), out.Name); err != nil {
				return opts, err
			}
			if out.SharedMemory != nil && out.Classification > 0 {
				return opts, invalidArg("Output can't set both 'shared_memory_region' and 'classification'")
			}
		}
	}
	return opts, nil
}

// applyGRPCParameter applies one request-level parameter with the typing
// rules of Triton's gRPC front end, then defers to applyRequestParameter,
// which both front ends share.
func applyGRPCParameter(ir *backendapi.InferRequest, opts *grpcInferOptions, key string, p *pb.InferParameter) error {
	var value any
	switch v := p.GetParameterChoice().(type) {
	case *pb.InferParameter_BoolParam:
		value = v.BoolParam
	case *pb.InferParameter_Int64Param:
		value = v.Int64Param
	case *pb.InferParameter_Uint64Param:
		value = v.Uint64Param
	case *pb.InferParameter_StringParam:
		value = v.StringParam
	case *pb.InferParameter_DoubleParam:
		value = v.DoubleParam
	}
	wrongType := func(expected string) error {
		return invalidArg("invalid value type for '%s' parameter, expected %s.", key, expected)
	}
	switch key {
	case paramSequenceID:
		switch value.(type) {
		case int64, string:
		default:
			return wrongType("int64_param or string_param")
		}
	case paramSequenceStart, paramSequenceEnd:
		if _, ok := value.(bool); !ok {
			return wrongType("bool_param")
		}
	case paramPriority:
		switch v := value.(type) {
		case int64:
			if v < 0 {
				return invalidArg("invalid value for 'priority', expected value >= 0.")
			}
		case uint64:
		default:
			return wrongType("int64_param or uint64_param")
		}
	case paramTimeout:
		v, ok := value.(int64)
		if !ok {
			return wrongType("int64_param")
		}
		value = uint64(max(v, 0))
	case paramEnableEmptyFinalResponse:
		b, ok := value.(bool)
		if !ok {
			return wrongType("bool_param")
		}
		opts.emptyFinal = b
		return nil
	default:
		if len(key) >= 7 && key[:7] == "triton_" {
			return invalidArg("parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: %s", paramEnableEmptyFinalResponse)
		}
		switch value.(type) {
		case int64, bool, string, float64:
		default:
			return wrongType("int64_param, bool_param, or string_param")
		}
	}
	return applyRequestParameter(ir, key, value)
}

// grpcShmRef reads the shared memory parameters of an input or output, or
// returns nil when it has none.
func grpcShmRef(params map[string]*pb.InferParameter, tensor string) (*backendapi.SharedMemoryRef, error) {
	p, ok := params[paramShmRegion]
	if !ok {
		return nil, nil
	}
	region, ok := p.GetParameterChoice().(*pb.InferParameter_StringParam)
	if !ok {
		return nil, invalidArg("invalid value type for '%s' parameter for '%s', expected string_param.", paramShmRegion, tensor)
	}
	ref := &backendapi.SharedMemoryRef{Region: region.StringParam}
	readInt := func(key string, required bool) (uint64, error) {
		p, ok := params[key]
		if !ok {
			if required {
				return 0, invalidArg("'%s' must be specified along with '%s' for '%s'", key, paramShmRegion, tensor)
			}
			return 0, nil
		}
		switch v := p.GetParameterChoice().(type) {
		case *pb.InferParameter_Int64Param:
			if v.Int64Param >= 0 {
				return uint64(v.Int64Param), nil
			}
		case *pb.InferParameter_Uint64Param:
			return v.Uint64Param, nil
		}
		return 0, invalidArg("invalid value type for '%s' parameter for '%s', expected int64_param.", key, tensor)
	}
	var err error
	if ref.ByteSize, err = readInt(paramShmByteSize, true); err != nil {
		return nil, err
	}
	if ref.Offset, err = readInt(paramShmOffset, false); err != nil {
		return nil, err
	}
	return ref, nil
}

// contentsToBinary converts the typed contents of an input to the binary
// tensor form. Exactly one typed field may hold data, and it must be the
// field of the input's datatype (int_contents for INT8/16/32,
// uint_contents for UINT8/16/32); FP16 and BF16 have no typed field.
func contentsToBinary(c *pb.InferTensorContents, dt backendapi.DataType, name, model string) ([]byte, error) {
	data := []byte{}
	set := false
	for _, f := range contentFields(c, dt) {
		if f.n == 0 {
			continue
		}
		if set {
			return nil, invalidArg("unexpected explicit tensor data for input tensor '%s' for model '%s', binary data was already supplied.", name, model)
		}
		set = true
		if f.typ != dt {
			return nil, invalidArg("unexpected explicit tensor data for input tensor '%s' for model '%s' of type '%s', expected datatype '%s'", name, model, f.typ, dt)
		}
		data = f.bytes()
	}
	return data, nil
}

// contentField is one typed field of InferTensorContents: how many
// elements it holds, the datatype it carries for a tensor of type dt (the
// 32-bit fields also carry the narrower integers), and its little-endian
// bytes.
type contentField struct {
	n     int
	typ   backendapi.DataType
	bytes func() []byte
}

func contentFields(c *pb.InferTensorContents, dt backendapi.DataType) []contentField {
	le := binary.LittleEndian
	narrow := func(wide, small1, small2 backendapi.DataType) backendapi.DataType {
		if dt == small1 || dt == small2 {
			return dt
		}
		return wide
	}
	bools, ints, int64s := c.GetBoolContents(), c.GetIntContents(), c.GetInt64Contents()
	uints, uint64s := c.GetUintContents(), c.GetUint64Contents()
	fp32s, fp64s, elems := c.GetFp32Contents(), c.GetFp64Contents(), c.GetBytesContents()
	return []contentField{
		{len(bools), backendapi.TypeBool, func() []byte {
			data := make([]byte, len(bools))
			for i, b := range bools {
				if b {
					data[i] = 1
				}
			}
			return data
		}},
		{len(ints), narrow(backendapi.TypeInt32, backendapi.TypeInt8, backendapi.TypeInt16), func() []byte {
			return appendInts(make([]byte, 0, len(ints)*dt.Size()), ints, dt.Size())
		}},
		{len(int64s), backendapi.TypeInt64, func() []byte {
			data := make([]byte, 0, len(int64s)*8)
			for _, x := range int64s {
				data = le.AppendUint64(data, uint64(x))
			}
			return data
		}},
		{len(uints), narrow(backendapi.TypeUint32, backendapi.TypeUint8, backendapi.TypeUint16), func() []byte {
			data := make([]byte, 0, len(uints)*dt.Size())
			for _, x := range uints {
				switch dt.Size() {
				case 1:
					data = append(data, byte(x))
				case 2:
					data = le.AppendUint16(data, uint16(x))
				default:
					data = le.AppendUint32(data, x)
				}
			}
			return data
		}},
		{len(uint64s), backendapi.TypeUint64, func() []byte {
			data := make([]byte, 0, len(uint64s)*8)
			for _, x := range uint64s {
				data = le.AppendUint64(data, x)
			}
			return data
		}},
		{len(fp32s), backendapi.TypeFP32, func() []byte {
			data := make([]byte, 0, len(fp32s)*4)
			for _, x := range fp32s {
				data = le.AppendUint32(data, math.Float32bits(x))
			}
			return data
		}},
		{len(fp64s), backendapi.TypeFP64, func() []byte {
			data := make([]byte, 0, len(fp64s)*8)
			for _, x := range fp64s {
				data = le.AppendUint64(data, math.Float64bits(x))
			}
			return data
		}},
		{len(elems), backendapi.TypeBytes, func() []byte {
			n := 0
			for _, e := range elems {
				n += 4 + len(e)
			}
			data := make([]byte, 0, n)
			for _, e := range elems {
				data = appendBytesElement(data, e)
			}
			return data
		}},
	}
}

func appendInts(dst []byte, v []int32, size int) []byte {
	for _, x := range v {
		switch size {
		case 1:
			dst = append(dst, byte(x))
		case 2:
			dst = binary.LittleEndian.AppendUint16(dst, uint16(x))
		default:
			dst = binary.LittleEndian.AppendUint32(dst, uint32(x))
		}
	}
	return dst
}

// grpcParameter converts a response parameter value.
func grpcParameter(v any) *pb.InferParameter {
	switch x := v.(type) {
	case bool:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: x}}
	case int64:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: x}}
	case int:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(x)}}
	case uint64:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: x}}
	case float64:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: x}}
	case string:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: x}}
	}
	return nil
}

// buildGRPCResponse copies resp into a ModelInferResponse: one outputs
// entry and one raw_output_contents entry per output, in order (empty for
// outputs written to shared memory), which is how tritonclient indexes
// them. Small outputs share one allocation; a large one is copied into a
// pooled buffer that the transport puts back once it has sent it
// (pooledCopy). resp may be released once this returns.
func buildGRPCResponse(resp *backendapi.InferResponse, ir *backendapi.InferRequest) *pb.ModelInferResponse {
	name := resp.ModelName
	if name == "" {
		name = ir.ModelName
	}
	id := resp.ID
	if id == "" {
		id = ir.ID
	}
	out := &pb.ModelInferResponse{
		ModelName:         name,
		ModelVersion:      strconv.FormatInt(resp.ModelVersion, 10),
		Id:                id,
		Outputs:           make([]*pb.ModelInferResponse_InferOutputTensor, len(resp.Outputs)),
		RawOutputContents: make([][]byte, len(resp.Outputs)),
	}
	if len(resp.Parameters) > 0 {
		out.Parameters = make(map[string]*pb.InferParameter, len(resp.Parameters)+1)
		for k, v := range resp.Parameters {
			if p := grpcParameter(v); p != nil {
				out.Parameters[k] = p
			}
		}
	}
	small := 0
	for i := range resp.Outputs {
		if n := len(resp.Outputs[i].Data); resp.Outputs[i].SharedMemory == nil && n < tensorCodecMin {
			small += n
		}
	}
	buf := make([]byte, 0, small)
	tensors := make([]pb.ModelInferResponse_InferOutputTensor, len(resp.Outputs))
	for i := range resp.Outputs {
		o := &resp.Outputs[i]
		t := &tensors[i]
		t.Name, t.Datatype, t.Shape = o.Name, o.DataType.String(), o.Shape
		out.Outputs[i] = t
		if o.SharedMemory != nil {
			out.RawOutputContents[i] = []byte{}
			continue
		}
		if len(o.Data) >= tensorCodecMin {
			out.RawOutputContents[i] = pooledCopy(out, o.Data)
			continue
		}
		at := len(buf)
		buf = append(buf, o.Data...)
		out.RawOutputContents[i] = buf[at:len(buf):len(buf)]
	}
	return out
}

// ModelInfer runs one request on a non-decoupled model.
func (g *GRPCServer) ModelInfer(ctx context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	held := int64(proto.Size(req))
	if err := g.budget.acquire(held); err != nil {
		takeStaged(req).Release()
		return nil, status.Error(codes.ResourceExhausted, err.Error())
	}
	defer g.budget.release(held)
	var ir backendapi.InferRequest
	defer func() { ir.InputBuffer.Release() }()
	v, _ := parseModelVersion(req.GetModelVersion())
	tr := g.tracer.StartGRPC(ctx, req.GetModelName(), v)
	defer tr.End()
	if _, err := parseGRPCInfer(req, &ir); err != nil {
		return nil, grpcError(g.requestError(ctx, req, err))
	}
	if err := g.forwardMetadata(ctx, &ir); err != nil {
		return nil, grpcError(err)
	}
	tr.Submit(&ir)
	resp, err := g.backend.Infer(ctx, &ir)
	if err != nil {
		if errors.Is(err, backendapi.ErrDecoupled) {
			err = backendapi.Errorf(backendapi.Unsupported, "%s", msgDecoupledGRPC)
		}
		if g.log.IsDebug() {
			g.log.Debug("grpc infer failed", "model", ir.ModelName, "error", err)
		}
		return nil, grpcError(err)
	}
	tr.Response(resp)
	out := buildGRPCResponse(resp, &ir)
	resp.Release()
	// grpc-go sends the reply after the handler returns: both send
	// timestamps mark the hand-over.
	tr.Stamp("GRPC_SEND_START")
	tr.Stamp("GRPC_SEND_END")
	return out, nil
}

// requestError picks the error to report for a request that failed to
// parse: Triton resolves the model before it reads the inputs, so an
// unknown model (or a decoupled one, on ModelInfer) wins over a malformed
// input. This costs a lookup only on the error path.
func (g *GRPCServer) requestError(ctx context.Context, req *pb.ModelInferRequest, parseErr error) error {
	version, err := parseModelVersion(req.GetModelVersion())
	if err != nil {
		return err
	}
	if _, err := g.backend.ModelConfig(ctx, req.GetModelName(), version); err != nil {
		return err
	}
	return parseErr
}
