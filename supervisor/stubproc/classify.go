package stubproc

import (
	"bufio"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// ReadLabels loads the label_filename of each output (one label per line,
// relative to the model directory), as Triton does for classification.
func ReadLabels(cfg *inferencepb.ModelConfig, dir string) (map[string][]string, error) {
	labels := map[string][]string{}
	for _, out := range cfg.GetOutput() {
		name := out.GetLabelFilename()
		if name == "" {
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return nil, backendapi.Errorf(backendapi.InvalidArg, "model '%s' output '%s': label_filename: %v", cfg.GetName(), out.GetName(), err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			labels[out.GetName()] = append(labels[out.GetName()], sc.Text())
		}
		f.Close()
	}
	return labels, nil
}

// maxClassificationElements bounds the outputs classified (Triton's
// kMaxClassificationElements), so a huge output cannot cost unbounded
// sorting and memory.
const maxClassificationElements = 1_000_000

// classify turns a numeric output into the classification extension's
// form: for each batch element, the top k values as BYTES elements
// "<value>:<index>[:<label>]", highest first.
func classify(out backendapi.OutputTensor, k uint32, batched bool, labels []string) (backendapi.OutputTensor, error) {
	size := out.DataType.Size()
	if out.DataType == backendapi.TypeBytes || out.DataType == backendapi.TypeBool || size == 0 {
		return out, backendapi.Errorf(backendapi.InvalidArg, "class result not available for output due to unsupported type '%s'", out.DataType)
	}
	n := len(out.Data) / size
	if n > maxClassificationElements {
		return out, backendapi.Errorf(backendapi.InvalidArg, "classification output tensor too large")
	}
	rows := 1
	if batched && len(out.Shape) > 0 {
		rows = int(out.Shape[0])
	}
	if rows <= 0 || n%rows != 0 {
		return out, backendapi.Errorf(backendapi.Internal, "output '%s' of %d elements cannot be split into %d rows", out.Name, n, rows)
	}
	per := n / rows
	top := min(int(k), per)
	var data []byte
	idx := make([]int, per)
	vals := make([]float64, per)
	for r := range rows {
		for i := range per {
			idx[i] = i
			vals[i] = elementValue(out.DataType, out.Data[(r*per+i)*size:])
		}
		sort.SliceStable(idx, func(a, b int) bool { return vals[idx[a]] > vals[idx[b]] })
		for _, i := range idx[:top] {
			s := formatValue(out.DataType, vals[i]) + ":" + strconv.Itoa(i)
			if i < len(labels) {
				s += ":" + labels[i]
			}
			data = binary.LittleEndian.AppendUint32(data, uint32(len(s)))
			data = append(data, s...)
		}
	}
	shape := []int64{int64(top)}
	if batched {
		shape = []int64{int64(rows), int64(top)}
	}
	return backendapi.OutputTensor{Name: out.Name, DataType: backendapi.TypeBytes, Shape: shape, Data: data}, nil
}

func elementValue(dt backendapi.DataType, b []byte) float64 {
	switch dt {
	case backendapi.TypeUint8:
		return float64(b[0])
	case backendapi.TypeInt8:
		return float64(int8(b[0]))
	case backendapi.TypeUint16:
		return float64(binary.LittleEndian.Uint16(b))
	case backendapi.TypeInt16:
		return float64(int16(binary.LittleEndian.Uint16(b)))
	case backendapi.TypeUint32:
		return float64(binary.LittleEndian.Uint32(b))
	case backendapi.TypeInt32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case backendapi.TypeUint64:
		return float64(binary.LittleEndian.Uint64(b))
	case backendapi.TypeInt64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case backendapi.TypeFP32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case backendapi.TypeFP64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case backendapi.TypeFP16:
		return halfToFloat(binary.LittleEndian.Uint16(b), false)
	case backendapi.TypeBF16:
		return halfToFloat(binary.LittleEndian.Uint16(b), true)
	}
	return 0
}

// halfToFloat widens an IEEE half or a bfloat16.
func halfToFloat(h uint16, bf16 bool) float64 {
	if bf16 {
		return float64(math.Float32frombits(uint32(h) << 16))
	}
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0 && frac == 0:
		return float64(math.Float32frombits(sign))
	case exp == 0: // subnormal
		return math.Copysign(float64(frac)*math.Pow(2, -24), float64(int32(sign)))
	case exp == 0x1f:
		return float64(math.Float32frombits(sign | 0x7f800000 | frac<<13))
	}
	return float64(math.Float32frombits(sign | (exp+112)<<23 | frac<<13))
}

// formatValue prints a value as Triton does (std::to_string).
func formatValue(dt backendapi.DataType, v float64) string {
	switch dt {
	case backendapi.TypeFP16, backendapi.TypeBF16, backendapi.TypeFP32, backendapi.TypeFP64:
		return strconv.FormatFloat(v, 'f', 6, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
