package intake

// validJSON, the intake's JSON validity check: what encoding/json.Valid
// decides, in one pass without a per-byte state function, so that a 1 KiB
// body costs a fraction of a microsecond (docs/architecture.md, Request
// flow).

// maxJSONDepth is encoding/json's nesting limit: deeper is invalid.
const maxJSONDepth = 10000

// The 400 messages for a body validJSON refuses (invalidJSONMessage).
const (
	msgInvalidJSON = "body is not valid JSON"
	msgJSONTooDeep = "body nests arrays and objects deeper than 10000 levels"
)

// invalidJSONMessage is the 400 message for a body validJSON refused: a body
// refused for its nesting alone may be well-formed JSON, and "not valid
// JSON" would send its sender looking for a syntax error that is not there.
// It scans b again; only a refused body pays for that.
func invalidJSONMessage(b []byte) string {
	if scanJSON(b) == jsonTooDeep {
		return msgJSONTooDeep
	}
	return msgInvalidJSON
}

// What scanJSON found.
const (
	jsonValid   = iota
	jsonInvalid // not one JSON value
	jsonTooDeep // nests deeper than maxJSONDepth (whatever follows)
)

// validJSON reports whether b is exactly one JSON value (RFC 8259) with
// optional white space around it. It agrees with encoding/json.Valid on
// every input: string bytes are not checked as UTF-8, and nesting deeper
// than maxJSONDepth is invalid. It never allocates and never recurses.
func validJSON(b []byte) bool { return scanJSON(b) == jsonValid }

// scanJSON is validJSON, saying why b is refused: jsonInvalid, or
// jsonTooDeep as soon as it nests deeper than maxJSONDepth.
func scanJSON(b []byte) int {
	var objects [maxJSONDepth/64 + 1]uint64 // bit d: the container at depth d is an object
	depth := 0
	i := skipJSONSpace(b, 0)
value:
	for {
		if i >= len(b) {
			return jsonInvalid
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if depth == maxJSONDepth {
				return jsonTooDeep
			}
			if c == '{' {
				objects[depth>>6] |= 1 << (depth & 63)
			} else {
				objects[depth>>6] &^= 1 << (depth & 63)
			}
			depth++
			i = skipJSONSpace(b, i+1)
			if i < len(b) && (b[i] == '}' && c == '{' || b[i] == ']' && c == '[') {
				depth--
				i++
				break
			}
			if c == '{' {
				if i = scanJSONKey(b, i); i < 0 {
					return jsonInvalid
				}
			}
			continue value
		case c == '"':
			if i = scanJSONString(b, i); i < 0 {
				return jsonInvalid
			}
		case c == '-' || '0' <= c && c <= '9':
			if i = scanJSONNumber(b, i); i < 0 {
				return jsonInvalid
			}
		case c == 't':
			if i = scanJSONLiteral(b, i, "true"); i < 0 {
				return jsonInvalid
			}
		case c == 'f':
			if i = scanJSONLiteral(b, i, "false"); i < 0 {
				return jsonInvalid
			}
		case c == 'n':
			if i = scanJSONLiteral(b, i, "null"); i < 0 {
				return jsonInvalid
			}
		default:
			return jsonInvalid
		}
		// After a value: close containers, or go on to the next element.
		for {
			i = skipJSONSpace(b, i)
			if depth == 0 {
				if i != len(b) {
					return jsonInvalid
				}
				return jsonValid
			}
			if i >= len(b) {
				return jsonInvalid
			}
			object := objects[(depth-1)>>6]&(1<<((depth-1)&63)) != 0
			switch b[i] {
			case ',':
				i = skipJSONSpace(b, i+1)
				if object {
					if i = scanJSONKey(b, i); i < 0 {
						return jsonInvalid
					}
				}
				continue value
			case '}':
				if !object {
					return jsonInvalid
				}
			case ']':
				if object {
					return jsonInvalid
				}
			default:
				return jsonInvalid
			}
			depth--
			i++
		}
	}
}

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// scanJSONKey reads `"key" :` and the white space after it, from b[i]; it
// returns the index of the value, or -1.
func scanJSONKey(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = scanJSONString(b, i); i < 0 {
		return -1
	}
	i = skipJSONSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipJSONSpace(b, i+1)
}

// scanJSONString reads the string whose quote is b[i]; it returns the index
// after the closing quote, or -1.
func scanJSONString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return -1
				}
				for _, h := range b[i+1 : i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		case c < 0x20:
			return -1
		}
	}
	return -1
}

// scanJSONNumber reads the number that starts at b[i]; it returns the index
// after it, or -1.
func scanJSONNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = skipJSONDigits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := skipJSONDigits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipJSONDigits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func skipJSONDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// scanJSONLiteral reads lit (true, false, null) at b[i]; it returns the
// index after it, or -1.
func scanJSONLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}
