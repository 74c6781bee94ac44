package modelconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// jsonSource names config JSON in error messages.
const jsonSource = "model config JSON"

// FromJSON reads the JSON form of a ModelConfig, as a repository load
// request's "config" parameter carries it. Like Triton (protobuf's JSON
// parser with case_insensitive_enum_parsing and unknown fields rejected):
// field names may be the proto names ("max_batch_size") or their lowerCamel
// JSON names, enum values match whatever their case ("type_fp32"), 64-bit
// integers may be numbers or strings, and an unknown field is an error
// naming the message it was found in.
func FromJSON(data []byte) (*inferencepb.ModelConfig, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, newError(ErrParse, backendapi.InvalidArg, "%s: empty document", jsonSource)
	}
	cfg := &inferencepb.ModelConfig{}
	fixed, err := checkJSON(data, cfg.ProtoReflect().Descriptor())
	if err != nil {
		return nil, err
	}
	if err := protojson.Unmarshal(fixed, cfg); err != nil {
		m := errPosition.FindStringSubmatch(err.Error())
		if m == nil {
			return nil, newError(ErrParse, backendapi.InvalidArg, "%s: %s", jsonSource, strings.TrimSpace(trimProtoPrefix(err.Error())))
		}
		if m[1] != "" {
			return nil, newError(ErrParse, backendapi.InvalidArg, "%s:%s: syntax error: %s", jsonSource, m[2], m[4])
		}
		return nil, newError(ErrParse, backendapi.InvalidArg, "%s:%s: %s", jsonSource, m[2], protoFieldNames(m[4]))
	}
	return cfg, nil
}

// jsonFieldRef matches the field protojson names in its messages
// ("invalid value for enum field dataType: ...").
var jsonFieldRef = regexp.MustCompile(`(field )([A-Za-z0-9_]+)`)

// protoFieldNames rewrites the lowerCamel JSON field names in a protojson
// message to the proto names ("data_type") that configs and Triton use.
func protoFieldNames(msg string) string {
	return jsonFieldRef.ReplaceAllStringFunc(msg, func(ref string) string {
		name := strings.TrimPrefix(ref, "field ")
		if proto, ok := jsonToProtoName()[name]; ok {
			return "field " + proto
		}
		return ref
	})
}

// jsonToProtoName maps every JSON field name of ModelConfig and the
// messages it contains to its proto name.
var jsonToProtoName = sync.OnceValue(func() map[string]string {
	names := map[string]string{}
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			names[fd.JSONName()] = string(fd.Name())
			if fd.Message() != nil {
				walk(fd.Message())
			}
		}
	}
	walk((&inferencepb.ModelConfig{}).ProtoReflect().Descriptor())
	return names
})

// checkJSON walks a config JSON document along the message descriptors. It
// rejects unknown fields (naming the message, which protojson's error does
// not) and rewrites enum names given in another case to their declared
// spelling. The rewrite happens in place in a copy of data, which is
// possible because an enum name matched case-insensitively has the same
// length; so positions in later error messages still point into the text
// the client sent. Everything else (types, ranges, syntax) is left to
// protojson, whose errors are more precise.
func checkJSON(data []byte, root protoreflect.MessageDescriptor) ([]byte, error) {
	w := &jsonWalker{src: data, out: bytes.Clone(data), dec: json.NewDecoder(bytes.NewReader(data))}
	w.dec.UseNumber()
	tok, err := w.dec.Token()
	if err != nil {
		return data, nil // let protojson describe the syntax error
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return data, nil
	}
	if err := w.message(root); err != nil {
		if errors.Is(err, errStopWalk) {
			return data, nil
		}
		return nil, err
	}
	return w.out, nil
}

// errStopWalk ends the walk when the document does not have the expected
// shape; protojson then reports the problem.
var errStopWalk = errors.New("stop")

type jsonWalker struct {
	src, out []byte
	dec      *json.Decoder
}

func (w *jsonWalker) token() (json.Token, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return nil, errStopWalk
	}
	return tok, nil
}

// members walks the members of an object whose '{' was just read, calling
// member with each key token, up to the closing '}'.
func (w *jsonWalker) members(member func(key json.Token) error) error {
	for {
		tok, err := w.token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok && d == '}' {
			return nil
		}
		if err := member(tok); err != nil {
			return err
		}
	}
}

// message walks the members of an object whose '{' was just read.
func (w *jsonWalker) message(md protoreflect.MessageDescriptor) error {
	return w.members(func(tok json.Token) error {
		key, ok := tok.(string)
		if !ok {
			return errStopWalk
		}
		fd := md.Fields().ByJSONName(key)
		if fd == nil {
			fd = md.Fields().ByTextName(key)
		}
		if fd == nil {
			line := 1 + bytes.Count(w.src[:w.dec.InputOffset()], []byte("\n"))
			return newError(ErrParse, backendapi.InvalidArg, "%s:%d: unknown field %q in %s", jsonSource, line, key, md.FullName())
		}
		return w.field(fd)
	})
}

// open reads the token that opens a list ('[') or map ('{') value; it
// reports false for null.
func (w *jsonWalker) open(delim json.Delim) (bool, error) {
	tok, err := w.token()
	if err != nil || tok == nil {
		return false, err
	}
	if d, ok := tok.(json.Delim); !ok || d != delim {
		return false, errStopWalk
	}
	return true, nil
}

// field walks the value of one field.
func (w *jsonWalker) field(fd protoreflect.FieldDescriptor) error {
	switch {
	case fd.IsList():
		if ok, err := w.open('['); !ok {
			return err
		}
		for w.dec.More() {
			if err := w.single(fd); err != nil {
				return err
			}
		}
		_, err := w.token() // ']'
		return err
	case fd.IsMap():
		if ok, err := w.open('{'); !ok {
			return err
		}
		return w.members(func(json.Token) error { return w.single(fd.MapValue()) })
	default:
		return w.single(fd)
	}
}

// single walks one value of fd's element type.
func (w *jsonWalker) single(fd protoreflect.FieldDescriptor) error {
	tok, err := w.token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if d, ok := tok.(json.Delim); ok && d == '{' {
			return w.message(fd.Message())
		}
		return errStopWalk
	case protoreflect.EnumKind:
		if s, ok := tok.(string); ok {
			w.fixEnum(fd.Enum(), s)
			return nil
		}
	}
	if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') {
		return errStopWalk // a composite where a scalar belongs
	}
	return nil
}

// fixEnum rewrites the enum name just read to its declared spelling when it
// matches one case-insensitively and was written without escapes.
func (w *jsonWalker) fixEnum(ed protoreflect.EnumDescriptor, s string) {
	if ed.Values().ByName(protoreflect.Name(s)) != nil {
		return
	}
	end := int(w.dec.InputOffset()) // just past the closing quote
	start := end - 1 - len(s)
	if start < 1 || w.src[end-1] != '"' || w.src[start-1] != '"' || string(w.src[start:end-1]) != s {
		return
	}
	values := ed.Values()
	for i := 0; i < values.Len(); i++ {
		name := string(values.Get(i).Name())
		if len(name) == len(s) && strings.EqualFold(name, s) {
			copy(w.out[start:], name)
			return
		}
	}
}

// int64AsNumber lists the 64-bit integer fields that Triton's
// ModelConfigToJson prints as JSON numbers (protobuf's JSON printer makes
// every 64-bit integer a string). Paths are proto field names joined by
// '.', with '*' standing for a map key; list indices do not appear.
//
// NOTE: the list is Triton's, including what it leaves out: the dims of
// sequence_batching.state[*].initial_state, the CUDA graph shapes and
// instance_group.secondary_devices.device_id stay strings in Triton's
// output, so they do here. Python models read the numeric ones
// (json.loads(args["model_config"])["input"][0]["dims"]).
var int64AsNumber = map[string]bool{
	"input.dims":                                    true,
	"input.reshape.shape":                           true,
	"output.dims":                                   true,
	"output.reshape.shape":                          true,
	"version_policy.specific.versions":              true,
	"dynamic_batching.max_queue_delay_microseconds": true,
	"dynamic_batching.priority_levels":              true,
	"dynamic_batching.default_priority_level":       true,
	"dynamic_batching.default_queue_policy.default_timeout_microseconds":    true,
	"dynamic_batching.priority_queue_policy.*.default_timeout_microseconds": true,
	"sequence_batching.max_sequence_idle_microseconds":                      true,
	"sequence_batching.oldest.max_queue_delay_microseconds":                 true,
	"sequence_batching.direct.max_queue_delay_microseconds":                 true,
	"sequence_batching.state.dims":                                          true,
	"ensemble_scheduling.step.model_version":                                true,
	"model_warmup.inputs.*.dims":                                            true,
}

// ToJSON prints cfg the way Triton's ModelConfigToJson does: protobuf JSON
// with the proto field names, every scalar, list and map printed even when
// empty or zero (unset sub-messages and oneof members are left out), enums
// by name, and the 64-bit integers of int64AsNumber as numbers rather than
// strings. Fields appear in declaration order. The result is compact
// (no whitespace); FromJSON reads it back.
//
// This is the body of GET /v2/models/{m}/config and the
// args["model_config"] string a Python model's initialize receives.
func ToJSON(cfg *inferencepb.ModelConfig) ([]byte, error) {
	if cfg == nil {
		cfg = &inferencepb.ModelConfig{}
	}
	raw, err := protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true}.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("modelconfig: marshal config JSON: %w", err)
	}
	r := &rewriter{dec: json.NewDecoder(bytes.NewReader(raw))}
	r.dec.UseNumber()
	r.out.Grow(len(raw))
	if err := r.expect('{'); err != nil {
		return nil, fmt.Errorf("modelconfig: rewrite config JSON: %w", err)
	}
	if err := r.message(cfg.ProtoReflect().Descriptor(), ""); err != nil {
		return nil, fmt.Errorf("modelconfig: rewrite config JSON: %w", err)
	}
	return r.out.Bytes(), nil
}

// rewriter copies protojson output to compact JSON, following the message
// descriptors so that it knows each value's field path (map keys are data,
// not field names) and turns the quoted integers at int64AsNumber paths
// into numbers.
type rewriter struct {
	dec *json.Decoder
	out bytes.Buffer
}

func (r *rewriter) expect(d json.Delim) error {
	tok, err := r.dec.Token()
	if err != nil {
		return err
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return fmt.Errorf("unexpected token %v, want %v", tok, d)
	}
	r.out.WriteRune(rune(d))
	return nil
}

// message copies the members of an object whose '{' was just copied.
func (r *rewriter) message(md protoreflect.MessageDescriptor, path string) error {
	for i := 0; r.dec.More(); i++ {
		tok, err := r.dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		fd := md.Fields().ByTextName(key)
		if fd == nil {
			return fmt.Errorf("unexpected field %q in %s", key, md.FullName())
		}
		if i > 0 {
			r.out.WriteByte(',')
		}
		writeString(&r.out, key)
		r.out.WriteByte(':')
		child := key
		if path != "" {
			child = path + "." + key
		}
		if err := r.field(fd, child); err != nil {
			return err
		}
	}
	return r.expect('}')
}

func (r *rewriter) field(fd protoreflect.FieldDescriptor, path string) error {
	switch {
	case fd.IsList():
		if err := r.expect('['); err != nil {
			return err
		}
		for i := 0; r.dec.More(); i++ {
			if i > 0 {
				r.out.WriteByte(',')
			}
			if err := r.single(fd, path); err != nil {
				return err
			}
		}
		return r.expect(']')
	case fd.IsMap():
		if err := r.expect('{'); err != nil {
			return err
		}
		for i := 0; r.dec.More(); i++ {
			tok, err := r.dec.Token()
			if err != nil {
				return err
			}
			key, _ := tok.(string)
			if i > 0 {
				r.out.WriteByte(',')
			}
			writeString(&r.out, key)
			r.out.WriteByte(':')
			if err := r.single(fd.MapValue(), path+".*"); err != nil {
				return err
			}
		}
		return r.expect('}')
	}
	return r.single(fd, path)
}

func (r *rewriter) single(fd protoreflect.FieldDescriptor, path string) error {
	if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
		if err := r.expect('{'); err != nil {
			return err
		}
		return r.message(fd.Message(), path)
	}
	tok, err := r.dec.Token()
	if err != nil {
		return err
	}
	switch v := tok.(type) {
	case string:
		if int64AsNumber[path] && isInteger(v) {
			r.out.WriteString(v)
		} else {
			writeString(&r.out, v)
		}
	case json.Number:
		r.out.WriteString(v.String())
	case bool:
		r.out.WriteString(strconv.FormatBool(v))
	case nil:
		r.out.WriteString("null")
	default:
		return fmt.Errorf("unexpected token %v for %s", tok, path)
	}
	return nil
}

func isInteger(s string) bool {
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return true
	}
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// writeString writes s as a JSON string without HTML escaping (protobuf's
// printers do not escape <, > and &).
func writeString(out *bytes.Buffer, s string) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	out.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// Clone returns a deep copy of cfg.
func Clone(cfg *inferencepb.ModelConfig) *inferencepb.ModelConfig {
	return proto.Clone(cfg).(*inferencepb.ModelConfig)
}
