package backendapi

import "strings"

// DataType is a tensor element type. The numeric values are Triton's
// TRITONSERVER_DataType codes, which are also what triton_python_backend_utils
// uses (triton_to_numpy_type), so they cross the stub protocol unchanged.
type DataType uint8

// The tensor element types of the KServe v2 protocol.
const (
	TypeInvalid DataType = 0
	TypeBool    DataType = 1
	TypeUint8   DataType = 2
	TypeUint16  DataType = 3
	TypeUint32  DataType = 4
	TypeUint64  DataType = 5
	TypeInt8    DataType = 6
	TypeInt16   DataType = 7
	TypeInt32   DataType = 8
	TypeInt64   DataType = 9
	TypeFP16    DataType = 10
	TypeFP32    DataType = 11
	TypeFP64    DataType = 12
	TypeBytes   DataType = 13
	TypeBF16    DataType = 14
)

var dataTypeNames = [...]string{
	TypeInvalid: "INVALID",
	TypeBool:    "BOOL",
	TypeUint8:   "UINT8",
	TypeUint16:  "UINT16",
	TypeUint32:  "UINT32",
	TypeUint64:  "UINT64",
	TypeInt8:    "INT8",
	TypeInt16:   "INT16",
	TypeInt32:   "INT32",
	TypeInt64:   "INT64",
	TypeFP16:    "FP16",
	TypeFP32:    "FP32",
	TypeFP64:    "FP64",
	TypeBytes:   "BYTES",
	TypeBF16:    "BF16",
}

var dataTypeSizes = [...]int{
	TypeBool: 1, TypeUint8: 1, TypeUint16: 2, TypeUint32: 4, TypeUint64: 8,
	TypeInt8: 1, TypeInt16: 2, TypeInt32: 4, TypeInt64: 8,
	TypeFP16: 2, TypeFP32: 4, TypeFP64: 8, TypeBytes: 0, TypeBF16: 2,
}

// String returns the wire name ("FP32", "BYTES", ...).
func (d DataType) String() string {
	if int(d) < len(dataTypeNames) {
		return dataTypeNames[d]
	}
	return "INVALID"
}

// Size is the byte size of one element, or 0 for BYTES (variable length)
// and for invalid types.
func (d DataType) Size() int {
	if int(d) < len(dataTypeSizes) {
		return dataTypeSizes[d]
	}
	return 0
}

// Valid reports whether d is one of the defined element types.
func (d DataType) Valid() bool { return d > TypeInvalid && d <= TypeBF16 }

// ConfigName is the model-config spelling ("TYPE_FP32"; BYTES is "TYPE_STRING").
func (d DataType) ConfigName() string {
	if d == TypeBytes {
		return "TYPE_STRING"
	}
	return "TYPE_" + d.String()
}

// ParseDataType accepts a wire name ("FP32") or a model-config name
// ("TYPE_FP32", "TYPE_STRING"). It returns TypeInvalid for anything else.
func ParseDataType(s string) DataType {
	if s == "TYPE_STRING" {
		return TypeBytes
	}
	s = strings.TrimPrefix(s, "TYPE_")
	for i, n := range dataTypeNames {
		if i > 0 && n == s {
			return DataType(i)
		}
	}
	return TypeInvalid
}
