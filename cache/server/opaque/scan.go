package opaque

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// parts are the top-level pieces of a JSON object, as slices of its text.
type parts struct {
	apiVersion, kind string
	// meta is the metadata object's text; nil when absent or null.
	meta []byte
	// body is every other member, comma-separated, without braces.
	body []byte
}

// split cuts a JSON object into apiVersion, kind, metadata and the rest. It
// trusts data to be valid JSON (callers validate untrusted input first) and
// checks only the shape it depends on. body aliases data when the other
// members are contiguous, which they are in everything this package writes.
func split(data []byte) (parts, error) {
	var p parts
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return p, fmt.Errorf("expected a JSON object")
	}
	i = skipSpace(data, i+1)
	// first and last delimit the contiguous run of other members; spans
	// collects them when they are not contiguous.
	first, last := -1, -1
	var spans [][2]int
	// interrupted: one of apiVersion, kind, metadata came after another member.
	contiguous, interrupted := true, false
	for i < len(data) && data[i] != '}' {
		keyStart := i
		keyEnd, err := skipString(data, i)
		if err != nil {
			return p, err
		}
		i = skipSpace(data, keyEnd)
		if i >= len(data) || data[i] != ':' {
			return p, fmt.Errorf("expected ':' after an object key at offset %d", i)
		}
		valStart := skipSpace(data, i+1)
		valEnd, err := skipValue(data, valStart)
		if err != nil {
			return p, err
		}
		key := data[keyStart+1 : keyEnd-1]
		switch string(key) {
		case "apiVersion":
			if p.apiVersion, err = stringValue(data[valStart:valEnd], "apiVersion"); err != nil {
				return p, err
			}
			interrupted = first >= 0
		case "kind":
			if p.kind, err = stringValue(data[valStart:valEnd], "kind"); err != nil {
				return p, err
			}
			interrupted = first >= 0
		case "metadata":
			switch data[valStart] {
			case '{':
				p.meta = data[valStart:valEnd]
			case 'n':
				p.meta = nil
			default:
				return p, fmt.Errorf("metadata must be an object")
			}
			interrupted = first >= 0
		default:
			if first < 0 {
				first = keyStart
			}
			if interrupted {
				contiguous = false
			}
			last = valEnd
			spans = append(spans, [2]int{keyStart, valEnd})
		}
		i = skipSpace(data, valEnd)
		if i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
		} else if i >= len(data) || data[i] != '}' {
			return p, fmt.Errorf("expected ',' or '}' at offset %d", i)
		}
	}
	if i >= len(data) {
		return p, fmt.Errorf("unexpected end of JSON object")
	}
	switch {
	case first < 0:
	case contiguous:
		p.body = data[first:last]
	default:
		var b bytes.Buffer
		for n, s := range spans {
			if n > 0 {
				b.WriteByte(',')
			}
			b.Write(data[s[0]:s[1]])
		}
		p.body = b.Bytes()
	}
	return p, nil
}

func stringValue(v []byte, name string) (string, error) {
	if len(v) > 0 && v[0] == 'n' {
		return "", nil
	}
	if len(v) < 2 || v[0] != '"' {
		return "", fmt.Errorf("%s must be a string", name)
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the offset just after the string starting at i.
func skipString(data []byte, i int) (int, error) {
	if i >= len(data) || data[i] != '"' {
		return 0, fmt.Errorf("expected a string at offset %d", i)
	}
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string")
}

// skipValue returns the offset just after the value starting at i.
func skipValue(data []byte, i int) (int, error) {
	if i >= len(data) {
		return 0, fmt.Errorf("unexpected end of JSON")
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for ; i < len(data); i++ {
			switch data[i] {
			case '"':
				end, err := skipString(data, i)
				if err != nil {
					return 0, err
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unterminated object or array")
	default:
		for ; i < len(data); i++ {
			switch data[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i, nil
			}
		}
		return i, nil
	}
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
