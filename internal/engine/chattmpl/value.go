package chattmpl

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"flywheel/internal/jsonlex"
)

// Template values follow Python's data model as Jinja2 sees it:
//
//	nil        -> None
//	Undefined  -> jinja2.Undefined
//	bool, int, float64, string
//	[]any      -> list
//	Tuple      -> tuple
//	*Dict      -> dict (insertion ordered, like Python dicts)
//	*Namespace, *macro, *loopInfo, builtinFunc, *boundMethod: callables and helpers.

// Undefined is the value of a missing variable, key or attribute.
type Undefined struct{ name string }

// Tuple is a Python tuple.
type Tuple []any

// Dict is an insertion-ordered mapping, like a Python dict. Keys are
// comparable Go values (string, int, float64, bool, nil).
type Dict struct {
	keys []any
	vals []any
	idx  map[any]int // built once the dict grows past a few keys
}

// NewDict returns an empty Dict.
func NewDict() *Dict { return &Dict{} }

const dictIndexMin = 8

func (d *Dict) find(k any) int {
	if d.idx != nil {
		if i, ok := d.idx[k]; ok {
			return i
		}
		return -1
	}
	for i, kk := range d.keys {
		if kk == k {
			return i
		}
	}
	return -1
}

// Set stores k=v, keeping the first insertion position of k.
func (d *Dict) Set(k, v any) {
	k = normKey(k)
	if i := d.find(k); i >= 0 {
		d.vals[i] = v
		return
	}
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	if d.idx != nil {
		d.idx[k] = len(d.keys) - 1
	} else if len(d.keys) > dictIndexMin {
		d.idx = make(map[any]int, len(d.keys)*2)
		for i, kk := range d.keys {
			d.idx[kk] = i
		}
	}
}

// Get returns the value stored under k.
func (d *Dict) Get(k any) (any, bool) {
	if !hashable(k) {
		return nil, false
	}
	if i := d.find(normKey(k)); i >= 0 {
		return d.vals[i], true
	}
	return nil, false
}

// Keys returns the keys in insertion order.
func (d *Dict) Keys() []any { return d.keys }

// Len is the number of entries.
func (d *Dict) Len() int { return len(d.keys) }

func normKey(k any) any {
	// Python: 1 == 1.0 == True hash alike; keep it simple but fold integral floats.
	if f, ok := k.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1e18 {
		return int(f)
	}
	return k
}

func hashable(k any) bool {
	switch k.(type) {
	case nil, bool, int, float64, string:
		return true
	}
	return false
}

// Namespace is the object returned by namespace(): mutable attributes.
type Namespace struct {
	vals *Dict
}

// ---------------------------------------------------------------- JSON in

// ParseJSON decodes JSON into template values keeping object key order
// (objects become *Dict, arrays []any, integers int, other numbers float64).
// Strings with invalid UTF-8 get one U+FFFD for each run of bad bytes, and
// lone surrogate escapes U+FFFD.
func ParseJSON(data []byte) (any, error) {
	r := jsonlex.Reader{Data: data, Mode: jsonlex.ReplaceRuns, MaxDepth: maxJSONDepth}
	v, err := jsonValue(&r)
	if err == nil {
		err = r.End()
	}
	if err != nil {
		return nil, fmt.Errorf("chattmpl: %w", err)
	}
	return v, nil
}

// maxJSONDepth bounds the nesting of parsed JSON, as encoding/json does.
const maxJSONDepth = 10_000

// jsonValue builds the template value at the reader.
func jsonValue(r *jsonlex.Reader) (any, error) {
	switch c := r.Peek(); {
	case c == '{':
		d := NewDict()
		err := r.Object(func(k string) error {
			v, err := jsonValue(r)
			d.Set(k, v)
			return err
		})
		return d, err
	case c == '[':
		l := []any{}
		err := r.Array(func(int) error {
			v, err := jsonValue(r)
			l = append(l, v)
			return err
		})
		return l, err
	case c == '"':
		return r.String()
	case c == 't':
		return true, r.Literal("true")
	case c == 'f':
		return false, r.Literal("false")
	case c == 'n':
		return nil, r.Literal("null")
	case c == '-' || c >= '0' && c <= '9':
		text, isFloat, err := r.Number()
		if err != nil {
			return nil, err
		}
		if !isFloat {
			if i, err := strconv.ParseInt(string(text), 10, 64); err == nil {
				return int(i), nil
			}
		}
		f, err := strconv.ParseFloat(string(text), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, r.Errorf("invalid number " + string(text))
		}
		return f, nil
	case c == 0:
		return nil, r.Errorf("unexpected end of input")
	}
	return nil, r.Errorf("expected a value")
}

// FromGo converts ordinary Go values (maps, slices, json.RawMessage, numbers)
// into template values. Maps with string keys are sorted by key since Go maps
// carry no order; pass *Dict or json.RawMessage to keep an order.
func FromGo(v any) (any, error) {
	switch t := v.(type) {
	case nil, bool, string, float64, int, Undefined, *Dict, Tuple, *Namespace:
		return t, nil
	case json.RawMessage:
		return ParseJSON(t)
	case int64:
		return int(t), nil
	case int32:
		return int(t), nil
	case uint:
		return int(t), nil
	case uint32:
		return int(t), nil
	case uint64:
		return int(t), nil
	case float32:
		return float64(t), nil
	case json.Number:
		return ParseJSON([]byte(t))
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			c, err := FromGo(e)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case []string:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = e
		}
		return out, nil
	case []json.RawMessage:
		out := make([]any, len(t))
		for i, e := range t {
			c, err := ParseJSON(e)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := NewDict()
		for _, k := range keys {
			c, err := FromGo(t[k])
			if err != nil {
				return nil, err
			}
			d.Set(k, c)
		}
		return d, nil
	}
	// Fallback: round-trip through encoding/json (structs etc.).
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("chattmpl: cannot convert %T: %w", v, err)
	}
	return ParseJSON(b)
}

// ---------------------------------------------------------------- truthiness, str, repr

func truthy(v any) bool {
	switch t := v.(type) {
	case nil, Undefined:
		return false
	case bool:
		return t
	case int:
		return t != 0
	case float64:
		return t != 0
	case string:
		return t != ""
	case []any:
		return len(t) > 0
	case Tuple:
		return len(t) > 0
	case *Dict:
		return t.Len() > 0
	}
	return true
}

// pyStr is Python's str(v) (Undefined renders as "").
func pyStr(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case Undefined:
		return ""
	}
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

func pyRepr(v any) string {
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

// maxValueDepth bounds the nesting of values printed or serialised (a
// namespace can hold itself).
const maxValueDepth = 10_100

func writeRepr(b *strings.Builder, v any) { writeReprD(b, v, 0) }

// writeReprD writes repr(v), within MaxValueBytes (panicking with the limit,
// which run recovers, past it).
func writeReprD(b *strings.Builder, v any, depth int) {
	checkLen(b.Len())
	if depth > maxValueDepth {
		panic(limitPanic{&LimitError{Limit: "recursion_depth", Max: maxValueDepth}})
	}
	switch t := v.(type) {
	case nil:
		b.WriteString("None")
	case Undefined:
		b.WriteString("Undefined")
	case bool:
		if t {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int:
		b.WriteString(strconv.Itoa(t))
	case float64:
		b.WriteString(pyFloat(t))
	case string:
		writeStrRepr(b, t)
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteString(", ")
			}
			writeReprD(b, e, depth+1)
		}
		b.WriteByte(']')
	case Tuple:
		b.WriteByte('(')
		for i, e := range t {
			if i > 0 {
				b.WriteString(", ")
			}
			writeReprD(b, e, depth+1)
		}
		if len(t) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case *Dict:
		b.WriteByte('{')
		for i, k := range t.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeReprD(b, k, depth+1)
			b.WriteString(": ")
			writeReprD(b, t.vals[i], depth+1)
		}
		b.WriteByte('}')
	case *Namespace:
		b.WriteString("<Namespace ")
		writeReprD(b, t.vals, depth+1)
		b.WriteString(">")
	case *macro:
		fmt.Fprintf(b, "<Macro '%s'>", t.name)
	default:
		fmt.Fprintf(b, "%v", t)
	}
}

func writeStrRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for i := 0; i < len(s); {
		checkLen(b.Len())
		j := i // a run of printable ASCII needing no escape, written at once
		for j < len(s) && s[j] >= 0x20 && s[j] < 0x7f && s[j] != q && s[j] != '\\' {
			j++
		}
		if j > i {
			b.WriteString(s[i:j])
			i = j
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == ' ' || (r < utf8.RuneSelf && r >= 0x20 && r != 0x7f):
			b.WriteRune(r)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
}

// pyFloat is Python's repr(float).
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	i := strings.LastIndexByte(e, 'e')
	exp, _ := strconv.Atoi(e[i+1:])
	if exp < -4 || exp >= 16 {
		return e
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}

// ---------------------------------------------------------------- JSON out (Python json.dumps)

type jsonOpts struct {
	indent      *string // nil: compact single line
	itemSep     string
	keySep      string
	ensureASCII bool
	sortKeys    bool
}

func pyJSONDumps(v any, o jsonOpts) (string, error) {
	var b strings.Builder
	if err := writeJSON(&b, v, o, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeJSON(b *strings.Builder, v any, o jsonOpts, depth int) error {
	if b.Len() > MaxValueBytes {
		return valueLimit()
	}
	if depth > maxValueDepth {
		return &LimitError{Limit: "recursion_depth", Max: maxValueDepth}
	}
	switch t := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if t {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int:
		b.WriteString(strconv.Itoa(t))
	case float64:
		switch {
		case math.IsNaN(t):
			b.WriteString("NaN")
		case math.IsInf(t, 1):
			b.WriteString("Infinity")
		case math.IsInf(t, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(pyFloat(t))
		}
	case string:
		writeJSONString(b, t, o.ensureASCII)
	case []any:
		return writeJSONList(b, t, o, depth)
	case Tuple:
		return writeJSONList(b, []any(t), o, depth)
	case *Dict:
		if t.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := t.keys
		if o.sortKeys {
			keys = append([]any(nil), keys...)
			var serr error
			sort.SliceStable(keys, func(i, j int) bool {
				c, err := compare(nil, keys[i], keys[j]) // keys: strings or scalars
				if err != nil {
					serr = err
				}
				return c < 0
			})
			if serr != nil {
				return serr
			}
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newlineIndent(b, o, depth+1)
			var ks string
			switch kk := k.(type) {
			case string:
				ks = kk
			case nil:
				ks = "null"
			case bool:
				if kk {
					ks = "true"
				} else {
					ks = "false"
				}
			case int:
				ks = strconv.Itoa(kk)
			case float64:
				ks = pyFloat(kk)
			default:
				return fmt.Errorf("keys must be str, int, float, bool or None, not %s", typeName(k))
			}
			writeJSONString(b, ks, o.ensureASCII)
			b.WriteString(o.keySep)
			v, _ := t.Get(k)
			if err := writeJSON(b, v, o, depth+1); err != nil {
				return err
			}
		}
		newlineIndent(b, o, depth)
		b.WriteByte('}')
	default:
		return &RenderError{Msg: "Object of type " + typeName(v) + " is not JSON serializable"}
	}
	return nil
}

func writeJSONList(b *strings.Builder, l []any, o jsonOpts, depth int) error {
	if len(l) == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteByte('[')
	for i, e := range l {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		newlineIndent(b, o, depth+1)
		if err := writeJSON(b, e, o, depth+1); err != nil {
			return err
		}
	}
	newlineIndent(b, o, depth)
	b.WriteByte(']')
	return nil
}

func newlineIndent(b *strings.Builder, o jsonOpts, depth int) {
	if o.indent == nil {
		return
	}
	if !fits(depth, len(*o.indent), b.Len()+1) {
		panic(limitPanic{valueLimit().(*LimitError)})
	}
	b.WriteByte('\n')
	for i := 0; i < depth; i++ {
		b.WriteString(*o.indent)
	}
}

const hexdigits = "0123456789abcdef"

func writeJSONString(b *strings.Builder, s string, ascii bool) {
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); {
		if i&4095 == 0 {
			checkLen(b.Len())
		}
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && (c < 0x7f || !ascii) {
			i++
			continue
		}
		b.WriteString(s[start:i])
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if c < 0x20 {
				writeU(b, rune(c))
				break
			}
			r, n := utf8.DecodeRuneInString(s[i:])
			if r >= 0x10000 {
				r1, r2 := utf16.EncodeRune(r)
				writeU(b, r1)
				writeU(b, r2)
			} else {
				writeU(b, r)
			}
			i += n
			start = i
			continue
		}
		i++
		start = i
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}

func writeU(b *strings.Builder, r rune) {
	b.WriteString(`\u`)
	b.WriteByte(hexdigits[(r>>12)&15])
	b.WriteByte(hexdigits[(r>>8)&15])
	b.WriteByte(hexdigits[(r>>4)&15])
	b.WriteByte(hexdigits[r&15])
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case Undefined:
		return "Undefined"
	case bool:
		return "bool"
	case int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case Tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case *Namespace:
		return "Namespace"
	case *macro:
		return "Macro"
	case *loopInfo:
		return "LoopContext"
	}
	return "function"
}

// ---------------------------------------------------------------- equality and ordering

// equal is Python's ==. st (nil outside a render) counts the nodes it visits:
// values can share parts (a list holding the same list twice, n times over,
// has 2^n leaves), so a comparison is not bounded by the values' sizes and is
// on the render's clock instead (see visit).
func equal(st *state, a, b any) bool {
	st.visit()
	switch x := a.(type) {
	case nil:
		return b == nil
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool, int, float64:
		fa, ok1 := num(a)
		fb, ok2 := num(b)
		if !ok1 || !ok2 {
			return false
		}
		ia, aInt := asInt(a)
		ib, bInt := asInt(b)
		if aInt && bInt {
			return ia == ib
		}
		return fa == fb
	case []any:
		var y []any
		switch t := b.(type) {
		case []any:
			y = t
		default:
			return false
		}
		return listEq(st, x, y)
	case Tuple:
		y, ok := b.(Tuple)
		return ok && listEq(st, x, y)
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for i, k := range x.keys {
			v2, ok := y.Get(k)
			if !ok || !equal(st, x.vals[i], v2) {
				return false
			}
		}
		return true
	}
	return a == b
}

func listEq(st *state, x, y []any) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if !equal(st, x[i], y[i]) {
			return false
		}
	}
	return true
}

// num reports v as a float (bool, int, float).
func num(v any) (float64, bool) {
	switch t := v.(type) {
	case bool:
		if t {
			return 1, true
		}
		return 0, true
	case int:
		return float64(t), true
	case float64:
		return t, true
	}
	return 0, false
}

func asInt(v any) (int, bool) {
	switch t := v.(type) {
	case bool:
		if t {
			return 1, true
		}
		return 0, true
	case int:
		return t, true
	}
	return 0, false
}

// compare orders a and b as Python's < does, erroring on unorderable types;
// st is as for equal.
func compare(st *state, a, b any) (int, error) {
	st.visit()
	if sa, ok := a.(string); ok {
		if sb, ok := b.(string); ok {
			return strings.Compare(sa, sb), nil
		}
	}
	if ia, ok := asInt(a); ok {
		if ib, ok := asInt(b); ok {
			switch {
			case ia < ib:
				return -1, nil
			case ia > ib:
				return 1, nil
			}
			return 0, nil
		}
	}
	fa, ok1 := num(a)
	fb, ok2 := num(b)
	if ok1 && ok2 {
		switch {
		case fa < fb:
			return -1, nil
		case fa > fb:
			return 1, nil
		}
		return 0, nil
	}
	la, ok1 := asList(a)
	lb, ok2 := asList(b)
	if ok1 && ok2 {
		for i := 0; i < len(la) && i < len(lb); i++ {
			if equal(st, la[i], lb[i]) {
				continue
			}
			return compare(st, la[i], lb[i])
		}
		return compare(st, len(la), len(lb))
	}
	return 0, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func asList(v any) ([]any, bool) {
	switch t := v.(type) {
	case []any:
		return t, true
	case Tuple:
		return t, true
	}
	return nil, false
}

// pyWhitespace reports whether r is whitespace for Python's str.strip().
func pyWhitespace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, 0x85:
		return true
	}
	if r < 0x80 {
		return false
	}
	return unicode.IsSpace(r) || unicode.Is(unicode.Zs, r) || r == 0x2028 || r == 0x2029
}

func pyStrip(s string) string  { return strings.TrimFunc(s, pyWhitespace) }
func pyLStrip(s string) string { return strings.TrimLeftFunc(s, pyWhitespace) }
func pyRStrip(s string) string { return strings.TrimRightFunc(s, pyWhitespace) }
