package modelconfig

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/backendapi/inferencepb"
)

// ConfigFileName is the name of the configuration file in a model directory.
const ConfigFileName = "config.pbtxt"

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// Parse reads a config.pbtxt. path only names the file in error messages,
// which look like
//
//	config.pbtxt:7: unknown field "dimz" in inference.ModelInput
//
// The protobuf text format already gives Triton's habits their meaning:
// `#` comments, `input [ {...}, {...} ]` lists, several `input [...]` blocks
// (they append), optional `:` before a message and `,`/`;` separators. An
// empty file is an empty config (Normalize then names it after its
// directory). A UTF-8 byte-order mark, which some editors write, is skipped.
func Parse(path string, data []byte) (*inferencepb.ModelConfig, error) {
	data = bytes.TrimPrefix(data, utf8BOM)
	cfg := &inferencepb.ModelConfig{}
	if err := prototext.Unmarshal(data, cfg); err != nil {
		return nil, textError(path, data, cfg.ProtoReflect().Descriptor(), err)
	}
	return cfg, nil
}

// errPosition picks the position and reason out of a protobuf-go decoding
// error: "proto: (line 7:3): unknown field: dimz" or
// "proto: syntax error (line 7:3): unexpected token: }". The package's
// "proto:" prefix varies (it is deliberately unstable), so only the part
// from the position on is relied upon.
var errPosition = regexp.MustCompile(`(syntax error )?\(line (\d+):(\d+)\): (.*)$`)

// textError turns a prototext error into a configError naming the file,
// line and enclosing message type.
func textError(path string, data []byte, root protoreflect.MessageDescriptor, err error) error {
	m := errPosition.FindStringSubmatch(err.Error())
	if m == nil {
		return newError(ErrParse, backendapi.InvalidArg, "%s: %s", path, strings.TrimSpace(trimProtoPrefix(err.Error())))
	}
	line, _ := strconv.Atoi(m[2])
	col, _ := strconv.Atoi(m[3])
	reason := m[4]
	if m[1] != "" {
		return newError(ErrParse, backendapi.InvalidArg, "%s:%d: syntax error: %s", path, line, reason)
	}
	ctx := textContextAt(data, offsetOf(data, line, col), root)
	msg := "<unknown>"
	if ctx.msg != nil {
		msg = string(ctx.msg.FullName())
	}
	switch {
	case strings.HasPrefix(reason, "unknown field: "):
		reason = fmt.Sprintf("unknown field %q in %s", strings.TrimPrefix(reason, "unknown field: "), msg)
	case strings.HasPrefix(reason, "non-repeated field "):
		name := strings.TrimSuffix(strings.TrimPrefix(reason, "non-repeated field "), " is repeated")
		reason = fmt.Sprintf("field %s is specified more than once in %s", name, msg)
	case strings.HasPrefix(reason, "error parsing ") && strings.Contains(reason, ", oneof "):
		// "error parsing "x", oneof inference.ModelConfig.scheduling_choice is already set"
		name := strings.TrimPrefix(reason[:strings.Index(reason, ", oneof ")], "error parsing ")
		oneof := reason[strings.Index(reason, ", oneof ")+len(", oneof "):]
		oneof = strings.TrimSuffix(oneof, " is already set")
		reason = fmt.Sprintf("field %s conflicts with another field of oneof %s already set in %s",
			name, oneof[strings.LastIndex(oneof, ".")+1:], msg)
	case strings.HasPrefix(reason, "invalid value for ") && ctx.field != nil:
		// "invalid value for enum type: TYPE_FLOAT"
		value := reason[strings.Index(reason, ": ")+2:]
		reason = fmt.Sprintf("invalid value %s for field %q (%s) in %s", value, ctx.field.Name(), kindName(ctx.field), msg)
	default:
		reason = fmt.Sprintf("%s in %s", reason, msg)
	}
	return newError(ErrParse, backendapi.InvalidArg, "%s:%d: %s", path, line, reason)
}

func trimProtoPrefix(s string) string {
	if i := strings.Index(s, "proto:"); i == 0 {
		return s[len("proto:"):]
	}
	return s
}

// kindName describes a field's type for error messages: an enum or message
// by its name, a scalar by its kind.
func kindName(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		return "enum " + string(fd.Enum().FullName())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return "message " + string(fd.Message().FullName())
	}
	return fd.Kind().String()
}

// offsetOf converts a 1-based line and column (as protobuf-go reports them,
// columns counting bytes) to a byte offset.
func offsetOf(data []byte, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return len(data)
		}
		off += i + 1
	}
	return min(off+col-1, len(data))
}

// textContext is where a byte offset sits in a text-format message: the
// message whose fields are being listed, and the field whose value is being
// read (nil between fields).
type textContext struct {
	msg   protoreflect.MessageDescriptor
	field protoreflect.FieldDescriptor
}

// textFrame is one level of nesting while scanning: a message body or a
// list (`[ ... ]`) of values of one field.
type textFrame struct {
	msg     protoreflect.MessageDescriptor // message body; nil inside a list or unknown
	list    protoreflect.FieldDescriptor   // the field of a list frame
	isList  bool
	pending bool                         // a field name was read, its value not yet
	field   protoreflect.FieldDescriptor // that field (nil when unknown)
}

// textContextAt scans data up to off and reports the message (and field)
// being read there. It only needs to track nesting, so it tokenizes
// loosely: an identifier is a field name when no field is pending, and a
// value otherwise. It is used to explain errors, after prototext has
// already rejected the text, so it never fails; it just stops at off.
func textContextAt(data []byte, off int, root protoreflect.MessageDescriptor) textContext {
	stack := []textFrame{{msg: root}}
	top := func() *textFrame { return &stack[len(stack)-1] }
	push := func(f textFrame) { stack = append(stack, f) }
	pop := func() {
		if len(stack) > 1 {
			stack = stack[:len(stack)-1]
		}
	}
	// value marks the pending field of a message frame as consumed.
	value := func() {
		if t := top(); !t.isList {
			t.pending, t.field = false, nil
		}
	}
	i := 0
	for i < off {
		c := data[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ':' || c == ',' || c == ';':
			i++
		case c == '#':
			for i < off && data[i] != '\n' {
				i++
			}
		case c == '{' || c == '<':
			i++
			t := top()
			var md protoreflect.MessageDescriptor
			switch {
			case t.isList && t.list != nil:
				md = t.list.Message()
			case !t.isList && t.field != nil:
				md = t.field.Message()
			}
			value()
			push(textFrame{msg: md})
		case c == '}' || c == '>':
			i++
			pop()
			value()
		case c == '[':
			i++
			t := top()
			if !t.isList && t.pending {
				fd := t.field
				value()
				push(textFrame{isList: true, list: fd})
			} else {
				// An extension or Any type name: `[type.googleapis.com/x]`.
				for i < off && data[i] != ']' {
					i++
				}
				i++
			}
		case c == ']':
			i++
			pop()
		case c == '"' || c == '\'':
			i = skipQuoted(data, i, off)
			value()
		default:
			start := i
			for i < off && !isDelimiter(data[i]) {
				i++
			}
			if i == start { // a byte no rule above covers
				i++
				continue
			}
			t := top()
			if t.isList {
				continue
			}
			if t.pending {
				value()
				continue
			}
			t.pending = true
			t.field = nil
			if t.msg != nil {
				t.field = t.msg.Fields().ByTextName(string(data[start:i]))
			}
		}
	}
	t := top()
	if t.isList {
		if t.list != nil {
			return textContext{msg: t.list.ContainingMessage(), field: t.list}
		}
		return textContext{}
	}
	return textContext{msg: t.msg, field: t.field}
}

func isDelimiter(c byte) bool {
	switch c {
	case ' ', '\t', '\r', '\n', ':', ',', ';', '#', '{', '}', '<', '>', '[', ']', '"', '\'':
		return true
	}
	return false
}

// skipQuoted returns the index after the string literal starting at i.
func skipQuoted(data []byte, i, end int) int {
	q := data[i]
	i++
	for i < end {
		switch data[i] {
		case '\\':
			i += 2
			continue
		case q, '\n':
			return i + 1
		}
		i++
	}
	return i
}
