package httpserve

import (
	"bytes"
	"net/http"
	"net/url"
)

// What one bridged request allocates (fastEngine.bridge). A request's own
// parts (its http.Request, URL, body reader, ResponseWriter, and the value
// slices of up to bridgeHeaders headers) are one allocation, made fresh for
// each request: a handler may keep any of them after it returns, as under
// net/http. The strings that repeat from one request to the next on a
// connection (the remote address, the host, the URI, header values) are
// reused from the previous request when their bytes are the same; a string
// cannot change, so a handler that kept one sees nothing move.

// bridgeHeaders is how many request headers' value slices come with the
// request's own allocation; more allocate one each.
const bridgeHeaders = 8

// internHeaders bounds how many header values a connection remembers.
const internHeaders = 32

// bridgeReq is one bridged request's parts, allocated together.
type bridgeReq struct {
	req  http.Request
	url  url.URL
	body bridgeBody
	w    bridgeWriter
	rd   bytes.Reader
	vals [bridgeHeaders]string
}

// interned returns b as a string, the one in *last when it has the same
// bytes, and leaves it in *last for the next request.
func interned(last *string, b []byte) string {
	if *last != string(b) {
		*last = string(b)
	}
	return *last
}

// headerValue returns the i'th header value of a request on c as a string,
// reused from the previous request's i'th when the bytes are the same.
func (c *conn) headerValue(i int, v []byte) string {
	switch {
	case c == nil || i >= internHeaders:
		return string(v)
	case i < len(c.lastVals):
		return interned(&c.lastVals[i], v)
	}
	s := string(v)
	c.lastVals = append(c.lastVals, s)
	return s
}

// remoteAddr is the connection's peer as http.Request.RemoteAddr has it,
// worked out once.
func (c *conn) remoteAddr() string {
	if c.remote == "" {
		c.remote = c.Conn.RemoteAddr().String()
	}
	return c.remote
}

// methodString returns the common methods without a copy.
func methodString(m []byte) string {
	switch string(m) {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodPost:
		return http.MethodPost
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPut:
		return http.MethodPut
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodOptions:
		return http.MethodOptions
	}
	return string(m)
}

// parseRequestURI fills u as url.ParseRequestURI(s) would, without its
// allocation for the usual URI: an absolute path of characters that need
// no escaping, then at most a query of printable bytes. Anything else goes
// to url.ParseRequestURI.
func parseRequestURI(s string, u *url.URL) error {
	if plainRequestURI(s) {
		*u = url.URL{Path: s}
		for i := 0; i < len(s); i++ {
			if s[i] == '?' {
				u.Path, u.RawQuery = s[:i], s[i+1:]
				break
			}
		}
		return nil
	}
	p, err := url.ParseRequestURI(s)
	if err != nil {
		return err
	}
	*u = *p
	return nil
}

// plainRequestURI reports whether url.ParseRequestURI would take s as
// Path up to its first '?' and RawQuery after it, with nothing else set:
// s starts with '/', its path has only characters a path keeps unescaped
// (so RawPath stays empty), its query has no control bytes, and it does
// not end with a lone '?' (ForceQuery).
func plainRequestURI(s string) bool {
	if len(s) == 0 || s[0] != '/' {
		return false
	}
	i := 0
	for ; i < len(s) && s[i] != '?'; i++ {
		if !pathByte(s[i]) {
			return false
		}
	}
	if i == len(s) {
		return true
	}
	if i == len(s)-1 {
		return false // a lone trailing '?' sets ForceQuery
	}
	for i++; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// pathByte reports whether c stands in a URL path as itself: unreserved,
// or one of the delimiters a path leaves unescaped.
func pathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '_', '.', '~', '$', '&', '+', ',', '/', ':', ';', '=', '@':
		return true
	}
	return false
}
