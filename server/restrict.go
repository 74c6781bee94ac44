package server

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// APIGroup is one of Triton's restricted API groups: a set of endpoints
// (HTTP) or RPCs (gRPC) that --http-restricted-api and
// --grpc-restricted-protocol can put behind a header.
type APIGroup int

// Triton's groups (restricted_features.h), in its order.
const (
	GroupHealth APIGroup = iota
	GroupMetadata
	GroupInference
	GroupSharedMemory
	GroupModelConfig
	GroupModelRepository
	GroupStatistics
	GroupTrace
	GroupLogging
	numGroups
)

// groupNames are the names the flags use.
var groupNames = [numGroups]string{
	"health", "metadata", "inference", "shared-memory", "model-config",
	"model-repository", "statistics", "trace", "logging",
}

func (g APIGroup) String() string {
	if g < 0 || g >= numGroups {
		return fmt.Sprintf("APIGroup(%d)", int(g))
	}
	return groupNames[g]
}

// grpcRestrictedPrefix is what Triton puts before the header a
// --grpc-restricted-protocol names: the client sends the metadata key
// "triton-grpc-protocol-<header>".
const grpcRestrictedPrefix = "triton-grpc-protocol-"

// restriction is the header and value a group requires.
type restriction struct {
	header string // as the error message shows it
	value  string
}

// Restrictions says which groups require which header. The zero value
// restricts nothing. It is a flag.Value: each Set adds one
// "<group>[,<group>...]:<header>=<value>", as tritonserver parses it.
// Build one with NewHTTPRestrictions or NewGRPCRestrictions; it must not
// change once a server uses it.
type Restrictions struct {
	feature string // "api" (HTTP) or "protocol" (gRPC), as Triton's messages say
	refusal string // the refusal's wording: "API" or "protocol"
	prefix  string // put before the header name (gRPC)
	rules   [numGroups]*restriction
}

// NewHTTPRestrictions returns the empty set of --http-restricted-api.
func NewHTTPRestrictions() *Restrictions { return &Restrictions{feature: "api", refusal: "API"} }

// NewGRPCRestrictions returns the empty set of --grpc-restricted-protocol.
func NewGRPCRestrictions() *Restrictions {
	return &Restrictions{feature: "protocol", refusal: "protocol", prefix: grpcRestrictedPrefix}
}

// String lists the restricted groups and their headers, never the values.
func (r *Restrictions) String() string {
	if r == nil {
		return ""
	}
	var parts []string
	for g, rule := range r.rules {
		if rule != nil {
			parts = append(parts, groupNames[g]+":"+rule.header)
		}
	}
	return strings.Join(parts, ";")
}

// Set adds one "<group>[,<group>...]:<header>=<value>". An unknown group,
// a group already restricted, or an empty part is an error, with
// tritonserver's wording.
func (r *Restrictions) Set(spec string) error {
	colon := strings.Index(spec, ":")
	eq := -1
	if colon >= 0 {
		if i := strings.Index(spec[colon+1:], "="); i >= 0 {
			eq = colon + 1 + i
		}
	}
	flagName := "http-restricted-api"
	if r.feature == "protocol" {
		flagName = "grpc-restricted-protocol"
	}
	if colon < 0 || eq < 0 || colon == 0 || eq == colon+1 || eq == len(spec)-1 {
		return fmt.Errorf("--%s option format is '<config name>:<setting>=<value>'. Got %s", flagName, spec)
	}
	rule := &restriction{header: r.prefix + spec[colon+1:eq], value: spec[eq+1:]}
	var groups []APIGroup
	for _, name := range strings.Split(spec[:colon], ",") {
		g := groupByName(name)
		if g < 0 {
			return fmt.Errorf("unknown restricted %s '%s'", r.feature, name)
		}
		if r.rules[g] != nil {
			return fmt.Errorf("restricted %s '%s' can not be specified in multiple config groups", r.feature, name)
		}
		groups = append(groups, g)
	}
	for _, g := range groups {
		r.rules[g] = rule
	}
	return nil
}

func groupByName(name string) APIGroup {
	for g, n := range groupNames {
		if n == name {
			return APIGroup(g)
		}
	}
	return -1
}

// Refusal returns "" when a request of the named group with headers get
// may go on, else the text to refuse it with. A front end that does not
// import this package (the OpenAI API) applies the same rules through it;
// a group name that is not Triton's is refused, never let through.
func (r *Restrictions) Refusal(group string, get func(header string) string) string {
	g := groupByName(group)
	if g < 0 {
		return fmt.Sprintf("unknown restricted api '%s'", group)
	}
	return r.check(g, get)
}

// Empty reports whether nothing is restricted.
func (r *Restrictions) Empty() bool {
	if r == nil {
		return true
	}
	for _, rule := range r.rules {
		if rule != nil {
			return false
		}
	}
	return true
}

// check returns "" when a request of group g may go on, given get, which
// returns the request's value of a header (the first, "" if none); else
// the message to refuse it with. The value is compared in constant time.
func (r *Restrictions) check(g APIGroup, get func(header string) string) string {
	if r == nil {
		return ""
	}
	rule := r.rules[g]
	if rule == nil {
		return ""
	}
	got := get(rule.header)
	if got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(rule.value)) == 1 {
		return ""
	}
	return fmt.Sprintf("This %s is restricted, expecting header '%s'", r.refusal, rule.header)
}

// admitHTTP replies 403 {"error":"This API is restricted, expecting header
// '<header>'"} and returns false unless the request may use group g.
func (s *Server) admitHTTP(w http.ResponseWriter, r *http.Request, g APIGroup) bool {
	msg := s.restrict.check(g, r.Header.Get)
	if msg == "" {
		return true
	}
	writeErrorStatus(w, http.StatusForbidden, msg)
	return false
}

// grpcRefusal returns nil when an RPC of group g with metadata get may go
// on; else Triton's refusal: UNAVAILABLE "This protocol is restricted,
// expecting header 'triton-grpc-protocol-<header>'".
func (r *Restrictions) grpcRefusal(g APIGroup, get func(header string) string) error {
	msg := r.check(g, get)
	if msg == "" {
		return nil
	}
	return status.Error(codes.Unavailable, msg)
}
