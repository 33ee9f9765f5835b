package snapshot

import (
	"bytes"
	"encoding/json"
)

// ObjectMembers calls member with the key and the raw value of each member
// of the JSON object body, in order, and returns member's first error. A
// key is unescaped as encoding/json reads it; encoding/json matches it to a
// struct field's name by [bytes.EqualFold], and a repeated key decodes
// again into the same field, so the last one wins.
//
// ObjectMembers reads only the outline of body: the top level's strings,
// brackets, colons and commas, skipping the values by their strings and
// brackets without decoding them. It does not check that the values are
// valid JSON: a caller that has not checked body (with [ValidJSON]) gets
// what its members look like, not an error. ok is false when body is not
// an object or its outline is malformed, and then member may have been
// called for the members before the fault.
func ObjectMembers(body []byte, member func(key, value []byte) error) (ok bool, err error) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false, nil
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return skipSpace(body, i+1) == len(body), nil
	}
	for {
		if i >= len(body) || body[i] != '"' {
			return false, nil
		}
		end := skipString(body, i)
		if end < 0 {
			return false, nil
		}
		key := body[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var s string
			if json.Unmarshal(body[i:end], &s) != nil {
				return false, nil
			}
			key = []byte(s)
		}
		i = skipSpace(body, end)
		if i >= len(body) || body[i] != ':' {
			return false, nil
		}
		i = skipSpace(body, i+1)
		end = skipValue(body, i)
		if end < 0 {
			return false, nil
		}
		if err := member(key, body[i:end]); err != nil {
			return true, err
		}
		i = skipSpace(body, end)
		if i >= len(body) {
			return false, nil
		}
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case '}':
			return skipSpace(body, i+1) == len(body), nil
		default:
			return false, nil
		}
	}
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string whose opening quote is at
// i, or -1 when it does not end.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		escapes := 0
		for e := j - 1; e > i && b[e] == '\\'; e-- {
			escapes++
		}
		if escapes%2 == 0 {
			return j + 1
		}
	}
	return -1
}

// skipValue returns the index after the value starting at i, or -1 when
// there is none or it does not end. It follows only strings and brackets.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end := skipString(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	for j := i; j < len(b); j++ {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			if j == i {
				return -1
			}
			return j
		}
	}
	return len(b)
}
