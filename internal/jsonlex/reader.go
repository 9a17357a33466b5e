package jsonlex

import "strconv"

// Reader walks one JSON document: the builders on top of it read objects and
// arrays with callbacks and the scalars they expect, and skip the rest.
type Reader struct {
	Data     []byte
	Pos      int
	Mode     Mode // how String and object keys decode
	MaxDepth int  // how deep objects and arrays may nest (<= 0: not at all)
	depth    int
}

// Errorf returns a SyntaxError at the reader's position.
func (r *Reader) Errorf(msg string) error { return errAt(r.Pos, msg) }

// Peek skips whitespace and returns the next byte, 0 at the end.
func (r *Reader) Peek() byte {
	r.Pos = SkipSpace(r.Data, r.Pos)
	if r.Pos >= len(r.Data) {
		return 0
	}
	return r.Data[r.Pos]
}

// Object reads an object, calling fn with each key and the reader at its
// value, which fn must consume.
func (r *Reader) Object(fn func(key string) error) error {
	return r.container('{', '}', "in object", func(int) error {
		raw, esc, err := r.RawString()
		if err != nil {
			if r.Pos < len(r.Data) && r.Data[r.Pos] != '"' {
				return r.Errorf("expected a string key")
			}
			return err
		}
		key := Unquote(raw, esc, r.Mode)
		if r.Peek() != ':' {
			return r.Errorf("expected ':' after object key")
		}
		r.Pos++
		r.Peek()
		return fn(key)
	})
}

// Array reads an array, calling fn with each element's index and the
// reader at the element, which fn must consume.
func (r *Reader) Array(fn func(i int) error) error {
	return r.container('[', ']', "in array", fn)
}

func (r *Reader) container(open, closer byte, where string, member func(i int) error) error {
	if r.Peek() != open {
		if open == '{' {
			return r.Errorf("expected an object")
		}
		return r.Errorf("expected an array")
	}
	if r.depth >= r.MaxDepth {
		return r.Errorf("nesting too deep")
	}
	r.depth++
	r.Pos++
	if r.Peek() == closer {
		r.Pos++
		r.depth--
		return nil
	}
	for i := 0; ; i++ {
		r.Peek()
		if err := member(i); err != nil {
			return err
		}
		switch r.Peek() {
		case ',':
			r.Pos++
		case closer:
			r.Pos++
			r.depth--
			return nil
		case 0:
			return r.Errorf("unexpected end of input")
		default:
			return r.Errorf("expected ',' or '" + string(closer) + "' " + where)
		}
	}
}

// RawString reads a string and returns its contents as they are in the
// input (aliasing it) and whether they hold escapes.
func (r *Reader) RawString() (raw []byte, escaped bool, err error) {
	start := SkipSpace(r.Data, r.Pos)
	end, esc, err := ScanString(r.Data, start)
	if err != nil {
		r.Pos = end
		return nil, false, err
	}
	r.Pos = end
	return r.Data[start+1 : end-1], esc, nil
}

// String reads a string and decodes it with the reader's Mode.
func (r *Reader) String() (string, error) {
	raw, esc, err := r.RawString()
	if err != nil {
		return "", err
	}
	return Unquote(raw, esc, r.Mode), nil
}

// Number reads a number and returns its text.
func (r *Reader) Number() (text []byte, isFloat bool, err error) {
	start := SkipSpace(r.Data, r.Pos)
	end, isFloat, err := ScanNumber(r.Data, start)
	r.Pos = end
	if err != nil {
		return nil, false, err
	}
	return r.Data[start:end], isFloat, nil
}

// Literal reads word (true, false or null).
func (r *Reader) Literal(word string) error {
	end, err := ScanLiteral(r.Data, SkipSpace(r.Data, r.Pos), word)
	r.Pos = end
	return err
}

// Skip checks and skips one value (within the depth left) and returns its
// text.
func (r *Reader) Skip() ([]byte, error) {
	start := SkipSpace(r.Data, r.Pos)
	end, err := SkipValue(r.Data, start, r.MaxDepth-r.depth, false)
	r.Pos = end
	if err != nil {
		return nil, err
	}
	return r.Data[start:end], nil
}

// End checks that nothing but whitespace follows the top-level value.
func (r *Reader) End() error {
	if r.Peek() != 0 {
		return r.Errorf("unexpected data after the JSON value")
	}
	return nil
}

// Kind is the type of a JSON value. Its values are the letters the call
// store has always used for them.
type Kind byte

const (
	None    Kind = 0   // no value: the end of the input
	Object  Kind = 'o' // {...}
	Array   Kind = 'a' // [...]
	String  Kind = 's' // "..."
	Number  Kind = 'n' // 1, -2.5e3 (and Python's NaN, Infinity, -Infinity)
	Bool    Kind = 'b' // true, false
	Null    Kind = 'z' // null
	Invalid Kind = '?' // a byte no value starts with
)

// KindOf is the kind of the value whose first byte is c (0: none).
func KindOf(c byte) Kind {
	switch {
	case c == '{':
		return Object
	case c == '[':
		return Array
	case c == '"':
		return String
	case c == 't' || c == 'f':
		return Bool
	case c == 'n':
		return Null
	case c == '-' || c >= '0' && c <= '9' || c == 'N' || c == 'I':
		return Number
	case c == 0:
		return None
	}
	return Invalid
}

// KindOfValue is the kind of the value in data (whitespace around it
// allowed), judged by its first byte.
func KindOfValue(data []byte) Kind {
	if i := SkipSpace(data, 0); i < len(data) {
		return KindOf(data[i])
	}
	return None
}

// String names the kind with its article, as "expected X, got Y" errors
// say it: "an object", "a number", "null", "nothing".
func (k Kind) String() string {
	switch k {
	case Object:
		return "an object"
	case Array:
		return "an array"
	case String:
		return "a string"
	case Number:
		return "a number"
	case Bool:
		return "a boolean"
	case Null:
		return "null"
	case None:
		return "nothing"
	}
	return "a value"
}

// Path names a value inside a JSON document the way error messages do:
// members by key after a dot, elements by index in brackets,
// "messages[2].content". The empty path is the document itself. Builders
// that walk deep documents keep a PathStack and make the string only for
// an error.
type Path string

// Key is the path of member key of the object at p.
func (p Path) Key(key string) Path {
	if p == "" {
		return Path(key)
	}
	return p + "." + Path(key)
}

// Index is the path of element i of the array at p.
func (p Path) Index(i int) Path { return p + "[" + Path(strconv.Itoa(i)) + "]" }

// Mismatch is the message for a value of the wrong type at p: "p: expected
// want, got kind" ("expected ..." alone for the document itself).
func (p Path) Mismatch(want string, got Kind) string {
	if p == "" {
		return "expected " + want + ", got " + got.String()
	}
	return string(p) + ": expected " + want + ", got " + got.String()
}

// PathStack is a Path being walked: push a key or an index on the way in,
// pop on the way out; String builds the Path only when an error needs it.
type PathStack struct{ segs []seg }

type seg struct {
	key string
	idx int // -1 for a member
}

// MakePathStack is an empty stack with room for n levels before it grows.
func MakePathStack(n int) PathStack { return PathStack{segs: make([]seg, 0, n)} }

// PushKey enters member key.
func (s *PathStack) PushKey(key string) { s.segs = append(s.segs, seg{key: key, idx: -1}) }

// PushIndex enters element i (i >= 0).
func (s *PathStack) PushIndex(i int) { s.segs = append(s.segs, seg{idx: i}) }

// SetIndex moves the innermost element to index i.
func (s *PathStack) SetIndex(i int) { s.segs[len(s.segs)-1].idx = i }

// Pop leaves the innermost member or element.
func (s *PathStack) Pop() { s.segs = s.segs[:len(s.segs)-1] }

// Len is how many members and elements deep the stack is.
func (s *PathStack) Len() int { return len(s.segs) }

// Truncate goes back out to depth n (a Len taken before).
func (s *PathStack) Truncate(n int) { s.segs = s.segs[:n] }

// Path is where the stack is.
func (s *PathStack) Path() Path {
	var p Path
	for _, sg := range s.segs {
		if sg.idx >= 0 {
			p = p.Index(sg.idx)
		} else {
			p = p.Key(sg.key)
		}
	}
	return p
}
