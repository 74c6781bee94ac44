package python

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"unicode"

	"github.com/stubvisor/stubvisor/ipc"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// labelScript decodes the hex frames on stdin (one per line) and names
// every element with the tables of stubvisor.fields, printing one JSON
// object per frame: "field.nested_field" -> value (bytes as hex). An
// element past the end of a table is named "#extra".
const labelScript = `
import json, sys
from stubvisor import fields as f, ipc

NESTED = {"requests": f.REQUEST_FIELDS, "request": f.REQUEST_FIELDS, "inputs": f.TENSOR_FIELDS,
          "outputs": f.TENSOR_FIELDS, "response": f.RESPONSE_FIELDS, "responses": f.RESPONSE_FIELDS,
          "error": f.ERROR_FIELDS, "output_targets": f.OUTPUT_TARGET_FIELDS}

def label(prefix, names, arr, out):
    for i, v in enumerate(arr):
        name = names[i] if i < len(names) else "#extra"
        key = prefix + name
        if name in NESTED and isinstance(v, list) and v and isinstance(v[0], list):
            v = v[0]  # a list of shapes: the samples hold one
        if name in NESTED and isinstance(v, list):
            label(key + ".", NESTED[name], v, out)
        else:
            out[key] = v.hex() if isinstance(v, bytes) else v

for line in sys.stdin:
    msg = ipc.msgpack.unpackb(bytes.fromhex(line.strip()), raw=False, strict_map_key=False)
    out = {}
    label("", f.MESSAGES[msg[0]][1], msg[1:], out)
    out.pop("_", None) if out.get("_") == 0 else None
    print(json.dumps(out))
`

// sampler fills a message with a distinct value in every field and
// records each leaf under the snake_case path of its Go field names, the
// names the Python tables must use.
type sampler struct {
	n    int
	want map[string]any
}

func (s *sampler) fill(prefix string, v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		s.fill(prefix, v.Elem())
		return
	case reflect.Struct:
		if prefix != "" {
			prefix += "."
		}
		for i := 0; i < v.NumField(); i++ {
			name := v.Type().Field(i).Name
			if name == "Data" { // LOC_INLINE bytes share the 7th element with RegionID
				continue
			}
			s.fill(prefix+snake(name), v.Field(i))
			if v.Type().Field(i).Name == "Loc" {
				v.Field(i).SetUint(uint64(ipc.LocClient)) // a tensor with all seven elements
				s.want[prefix+"loc"] = float64(ipc.LocClient)
			}
		}
		return
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Struct {
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
			s.fill(prefix, v.Index(0))
			return
		}
	}
	s.n++
	var leaf any
	switch v.Kind() {
	case reflect.Uint8, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(s.n))
		leaf = float64(s.n)
	case reflect.Int64:
		v.SetInt(int64(1000 + s.n))
		leaf = float64(1000 + s.n)
	case reflect.Bool:
		v.SetBool(true)
		leaf = true
	case reflect.String:
		leaf = fmt.Sprintf("s%d", s.n)
		v.SetString(leaf.(string))
	case reflect.Interface:
		leaf = fmt.Sprintf("s%d", s.n)
		v.Set(reflect.ValueOf(leaf))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(reflect.ValueOf("k"), reflect.ValueOf(fmt.Sprintf("s%d", s.n)).Convert(v.Type().Elem()))
		v.Set(m)
		leaf = map[string]any{"k": fmt.Sprintf("s%d", s.n)}
	case reflect.Slice:
		switch v.Type().Elem().Kind() {
		case reflect.Uint8:
			b := []byte{byte(s.n), 0xab}
			v.SetBytes(b)
			leaf = hex.EncodeToString(b)
		case reflect.Uint64:
			v.Set(reflect.ValueOf([]uint64{uint64(s.n)}))
			leaf = []any{float64(s.n)}
		case reflect.Int64:
			v.Set(reflect.ValueOf([]int64{int64(s.n)}))
			leaf = []any{float64(s.n)}
		case reflect.String:
			v.Set(reflect.ValueOf([]string{fmt.Sprintf("s%d", s.n)}))
			leaf = []any{fmt.Sprintf("s%d", s.n)}
		}
	}
	if leaf == nil {
		panic(fmt.Sprintf("sampler: no sample for %s (%s)", prefix, v.Type()))
	}
	s.want[prefix] = leaf
}

// snake turns a Go field name into the Python tables' spelling:
// BatchID -> batch_id, CUDAHandle -> cuda_handle, PID -> pid.
func snake(name string) string {
	r := []rune(name)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// TestFieldsMatchGoMessages checks the Python stub's field tables against
// the Go message table: a message of every kind, encoded by the Go codec
// with a distinct value in each field, must come back from the tables with
// each value under its Go field's name. A field added, dropped or moved
// on either side fails it.
func TestFieldsMatchGoMessages(t *testing.T) {
	ipctest.RequirePython(t)
	msgs := []ipc.Message{
		&ipc.InitializeMsg{}, &ipc.ExecuteMsg{}, &ipc.FinalizeMsg{}, &ipc.ReleaseMsg{}, &ipc.CancelMsg{},
		&ipc.IsReadyMsg{}, &ipc.AutoCompleteMsg{}, &ipc.InferResultMsg{}, &ipc.MapRegionMsg{}, &ipc.UnmapRegionMsg{},
		&ipc.CollectMetricsMsg{}, &ipc.ControlResultMsg{}, &ipc.HelloMsg{}, &ipc.ResultMsg{}, &ipc.ResponseMsg{},
		&ipc.ExecuteDoneMsg{}, &ipc.LogMsg{}, &ipc.InferExecMsg{}, &ipc.FreeMsg{}, &ipc.InferCancelMsg{},
		&ipc.ModelControlMsg{},
	}
	enc := ipc.NewEncoder()
	var frames []string
	wants := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		s := &sampler{want: map[string]any{}}
		s.fill("", reflect.ValueOf(m).Elem())
		b, err := enc.Encode(m)
		if err != nil {
			t.Fatalf("encode %T: %v", m, err)
		}
		frames = append(frames, hex.EncodeToString(b))
		wants[i] = s.want
	}
	cmd := exec.Command(ipctest.PythonPath, "-c", labelScript)
	cmd.Env = append(cmd.Environ(), "PYTHONPATH=.")
	cmd.Stdin = strings.NewReader(strings.Join(frames, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("label script: %v\n%s", err, errText(err))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(msgs) {
		t.Fatalf("label script printed %d lines for %d messages:\n%s", len(lines), len(msgs), out)
	}
	for i, m := range msgs {
		t.Run(fmt.Sprintf("%T", m)[len("*ipc."):], func(t *testing.T) {
			var got map[string]any
			if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, wants[i]) {
				t.Errorf("python/stubvisor/fields.py names the fields\n%v\nthe Go message carries\n%v", got, wants[i])
			}
		})
	}
}
