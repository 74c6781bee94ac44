package server

// The readers of request objects (the infer header, its inputs, outputs and
// parameters, the generate request, the admin bodies) share one way of
// walking an object, so that every one of them reports errors alike: a
// syntax error anywhere ends the read at once and wins; a content error is
// noted, the rest of the document is still checked for syntax, and the
// first content error is what the client gets.

// members reads the object whose '{' is at the scanner's position, calling
// member once for each key with the scanner at the member's value, which
// starts at offset at. member reads or skips the value; an error it returns
// ends the walk, so a content error that should not is passed through keep.
func (s *jsonScanner) members(member func(key []byte, at int) error) error {
	s.enter()
	for first := true; ; first = false {
		key, ok, err := s.objectKey(first)
		if err != nil || !ok {
			return err
		}
		if err := member(key, s.pos); err != nil {
			return err
		}
	}
}

// keep handles the outcome err of reading the member value that started at
// offset at: a syntax error is returned; a content error is kept in *slot
// (the first one wins) and the value is skipped, so that the walk goes on
// and still finds a syntax error further on.
func (s *jsonScanner) keep(slot *error, at int, err error) error {
	if err == nil || isSyntaxError(err) {
		return err
	}
	if *slot == nil {
		*slot = err
	}
	s.pos = at
	return s.skipValue()
}

// skipWith skips the value at the scanner's position, which is of the wrong
// kind, and returns err, the content error that says so, unless the value
// is not even well-formed JSON.
func (s *jsonScanner) skipWith(err error) error {
	if serr := s.skipValue(); serr != nil {
		return serr
	}
	return err
}
