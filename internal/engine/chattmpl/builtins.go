package chattmpl

import (
	"errors"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

var globals map[string]any

func init() {
	globals = map[string]any{
		"range":           builtinFunc(fnRange),
		"namespace":       builtinFunc(fnNamespace),
		"dict":            builtinFunc(fnDict),
		"raise_exception": builtinFunc(fnRaise),
		"strftime_now":    builtinFunc(fnStrftimeNow),
	}
}

// kwOrderKey stores the call-site order of keyword arguments in a kwargs map
// (Python keeps it; dict(b=1, a=2) prints in that order).
const kwOrderKey = "\x00order"

// orderedKeys lists keyword argument names in call order.
func orderedKeys(m map[string]any) []string {
	if o, ok := m[kwOrderKey].([]string); ok {
		return o
	}
	return sortedKeys(m)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func fnRange(st *state, args []any, kw map[string]any) (any, error) {
	var ints []int
	for _, a := range args {
		i, ok := asInt(a)
		if !ok {
			return nil, rerr("'%s' object cannot be interpreted as an integer", typeName(a))
		}
		ints = append(ints, i)
	}
	start, stop, step := 0, 0, 1
	switch len(ints) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	default:
		return nil, rerr("range expected 1 to 3 arguments")
	}
	if step == 0 {
		return nil, rerr("range() arg 3 must not be zero")
	}
	out := []any{}
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		out = append(out, i)
		if len(out) > 1_000_000 {
			return nil, rerr("range too big")
		}
	}
	return out, nil
}

func fnNamespace(st *state, args []any, kw map[string]any) (any, error) {
	ns := &Namespace{vals: NewDict()}
	for _, a := range args {
		d, ok := a.(*Dict)
		if !ok {
			return nil, rerr("namespace() positional argument must be a mapping")
		}
		for i, k := range d.keys {
			ns.vals.Set(k, d.vals[i])
		}
	}
	for _, k := range orderedKeys(kw) {
		ns.vals.Set(k, kw[k])
	}
	return ns, nil
}

func fnDict(st *state, args []any, kw map[string]any) (any, error) {
	d := NewDict()
	for _, a := range args {
		src, ok := a.(*Dict)
		if !ok {
			return nil, rerr("dict() positional argument must be a mapping")
		}
		for i, k := range src.keys {
			d.Set(k, src.vals[i])
		}
	}
	for _, k := range orderedKeys(kw) {
		d.Set(k, kw[k])
	}
	return d, nil
}

func fnRaise(st *state, args []any, kw map[string]any) (any, error) {
	msg := ""
	if len(args) > 0 {
		msg = pyStr(args[0])
	}
	return nil, &RaisedError{Msg: msg}
}

func fnStrftimeNow(st *state, args []any, kw map[string]any) (any, error) {
	if len(args) != 1 {
		return nil, rerr("strftime_now() takes exactly one argument")
	}
	f, ok := args[0].(string)
	if !ok {
		return nil, rerr("strftime_now() argument must be str")
	}
	return strftime(st.now(), f), nil
}

// ---------------------------------------------------------------- filters

type filterFunc func(st *state, v any, args []any, kw map[string]any) (any, error)

var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"tojson":     fTojson,
		"trim":       fTrim,
		"length":     fLength,
		"count":      fLength,
		"string":     func(st *state, v any, a []any, kw map[string]any) (any, error) { return pyStr(v), nil },
		"safe":       func(st *state, v any, a []any, kw map[string]any) (any, error) { return v, nil },
		"e":          fEscape,
		"escape":     fEscape,
		"join":       fJoin,
		"upper":      strFilter(pyUpper),
		"lower":      strFilter(pyLower),
		"title":      strFilter(jinjaTitle),
		"capitalize": strFilter(pyCapitalize),
		"items":      fItems,
		"list":       fList,
		"first":      fFirst,
		"last":       fLast,
		"default":    fDefault,
		"d":          fDefault,
		"int":        fInt,
		"float":      fFloat,
		"abs":        fAbs,
		"indent":     fIndent,
		"replace":    fReplace,
		"select":     selectFilter(false, false),
		"reject":     selectFilter(true, false),
		"selectattr": selectFilter(false, true),
		"rejectattr": selectFilter(true, true),
		"map":        fMap,
		"unique":     fUnique,
		"reverse":    fReverse,
		"sort":       fSort,
		"dictsort":   fDictsort,
		"sum":        fSum,
		"min":        fMinMax(true),
		"max":        fMinMax(false),
		"round":      fRound,
		"wordcount":  strFilter(func(s string) string { return strconv.Itoa(countFields(s)) }),
		"center":     fCenter,
		"batch":      fBatch,
		"attr":       fAttr,
		"format": func(st *state, v any, a []any, kw map[string]any) (any, error) {
			if len(kw) > 0 {
				d := NewDict()
				for _, k := range orderedKeys(kw) {
					d.Set(k, kw[k])
				}
				return pyPercent(pyStr(v), d)
			}
			return pyPercent(pyStr(v), Tuple(a))
		},
	}
}

func (st *state) applyFilter(f *filterExpr, v any, fr *frame) (any, error) {
	fn, ok := filters[f.name]
	if !ok {
		return nil, rerr("no filter named '%s'", f.name)
	}
	args, kw, err := st.evalArgs(f.args, f.kwargs, nil, nil, fr)
	if err != nil {
		return nil, err
	}
	return fn(st, v, args, kw)
}

func (st *state) callFilter(name string, v any, args []any, kw map[string]any) (any, error) {
	fn, ok := filters[name]
	if !ok {
		return nil, rerr("no filter named '%s'", name)
	}
	return fn(st, v, args, kw)
}

// arg returns positional argument i or keyword name, or def.
func arg(args []any, kw map[string]any, i int, name string, def any) any {
	if i < len(args) {
		return args[i]
	}
	if v, ok := kw[name]; ok {
		return v
	}
	return def
}

func strFilter(fn func(string) string) filterFunc {
	return func(st *state, v any, a []any, kw map[string]any) (any, error) {
		return fn(pyStr(v)), nil
	}
}

func fTojson(st *state, v any, args []any, kw map[string]any) (any, error) {
	o := jsonOpts{itemSep: ", ", keySep: ": "}
	o.ensureASCII = truthy(arg(args, kw, 0, "ensure_ascii", false))
	ind := arg(args, kw, 1, "indent", nil)
	switch t := ind.(type) {
	case nil:
	case string:
		o.indent = &t
	default:
		n, ok := asInt(t)
		if !ok {
			return nil, rerr("tojson: bad indent %s", pyRepr(ind))
		}
		if n > MaxValueBytes {
			return nil, valueLimit()
		}
		s := strings.Repeat(" ", max(n, 0))
		o.indent = &s
	}
	if o.indent != nil {
		o.itemSep = ","
	}
	if sep := arg(args, kw, 2, "separators", nil); sep != nil {
		l, ok := asList(sep)
		if !ok || len(l) != 2 {
			return nil, rerr("tojson: separators must be a pair")
		}
		a, ok1 := l[0].(string)
		b, ok2 := l[1].(string)
		if !ok1 || !ok2 {
			return nil, rerr("tojson: separators must be strings")
		}
		o.itemSep, o.keySep = a, b
	}
	o.sortKeys = truthy(arg(args, kw, 3, "sort_keys", false))
	s, err := pyJSONDumps(v, o)
	if err != nil {
		var re *RenderError
		if _, ok := IsLimit(err); ok || errors.As(err, &re) {
			return nil, err
		}
		return nil, rerr("%s", err.Error())
	}
	return s, nil
}

func fTrim(st *state, v any, args []any, kw map[string]any) (any, error) {
	s := pyStr(v)
	chars := arg(args, kw, 0, "chars", nil)
	if c, ok := chars.(string); ok {
		return strings.Trim(s, c), nil
	}
	return pyStrip(s), nil
}

func length(v any) (int, error) {
	switch t := v.(type) {
	case string:
		return utf8.RuneCountInString(t), nil
	case []any:
		return len(t), nil
	case Tuple:
		return len(t), nil
	case *Dict:
		return t.Len(), nil
	case Undefined:
		return 0, nil
	case *Namespace:
		return t.vals.Len(), nil
	}
	return 0, rerr("object of type '%s' has no len()", typeName(v))
}

func fLength(st *state, v any, args []any, kw map[string]any) (any, error) {
	return length(v)
}

func fEscape(st *state, v any, args []any, kw map[string]any) (any, error) {
	s := pyStr(v)
	grow := 4*strings.Count(s, "&") + 3*strings.Count(s, "<") + 3*strings.Count(s, ">") + 4*strings.Count(s, "\"") + 4*strings.Count(s, "'")
	if len(s) > MaxValueBytes-grow {
		return nil, valueLimit()
	}
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\"", "&#34;", "'", "&#39;")
	return r.Replace(s), nil
}

func fJoin(st *state, v any, args []any, kw map[string]any) (any, error) {
	sep := pyStr(arg(args, kw, 0, "d", ""))
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if attr := arg(args, kw, 1, "attribute", nil); attr != nil {
		for i, it := range items {
			items[i], err = getAttrPath(it, attr)
			if err != nil {
				return nil, err
			}
		}
	}
	parts := make([]string, len(items))
	n := 0
	for i, it := range items {
		parts[i] = pyStr(it)
		if n += len(parts[i]); n > MaxValueBytes {
			return nil, valueLimit()
		}
	}
	return joinBounded(parts, sep)
}

func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		if unicode.IsLetter(r) {
			if prevCased {
				b.WriteRune(unicode.ToLower(r))
			} else {
				b.WriteRune(unicode.ToTitle(r))
			}
			prevCased = true
		} else {
			b.WriteRune(r)
			prevCased = false
		}
	}
	return b.String()
}

// upperSpecial holds Python's full (multi-character) upper-case mappings that
// Go's simple per-rune mapping lacks.
var upperSpecial = strings.NewReplacer("ß", "SS", "ŉ", "ʼN", "ǰ", "J̌", "ΐ", "Ϊ́", "ΰ", "Ϋ́", "և", "ԵՒ",
	"ﬀ", "FF", "ﬁ", "FI", "ﬂ", "FL", "ﬃ", "FFI", "ﬄ", "FFL", "ﬅ", "ST", "ﬆ", "ST")

// pyUpper is Python's str.upper().
func pyUpper(s string) string {
	if isASCII(s) {
		return strings.ToUpper(s)
	}
	return strings.ToUpper(upperSpecial.Replace(s))
}

// pyLower is Python's str.lower().
func pyLower(s string) string {
	if isASCII(s) {
		return strings.ToLower(s)
	}
	return strings.ToLower(strings.ReplaceAll(s, "İ", "i̇"))
}

// jinjaTitle is Jinja2's title filter: split before runs of "-", whitespace,
// "(", "{", "[" and "<"; upper-case the first character of every piece and
// lower-case the rest.
func jinjaTitle(s string) string {
	isSep := func(r rune) bool {
		return r == '-' || r == '(' || r == '{' || r == '[' || r == '<' || pyWhitespace(r)
	}
	var b strings.Builder
	atStart := true
	for _, r := range s {
		switch {
		case isSep(r):
			b.WriteRune(r)
			atStart = true
		case atStart:
			b.WriteRune(unicode.ToUpper(r))
			atStart = false
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToTitle(r)) + strings.ToLower(s[n:])
}

func fItems(st *state, v any, args []any, kw map[string]any) (any, error) {
	switch t := v.(type) {
	case Undefined:
		return []any{}, nil
	case *Dict:
		return dictItems(t), nil
	}
	return nil, rerr("Can only get item pairs from a mapping.")
}

func dictItems(d *Dict) []any {
	out := make([]any, len(d.keys))
	for i, k := range d.keys {
		out[i] = Tuple{k, d.vals[i]}
	}
	return out
}

func fList(st *state, v any, args []any, kw map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	return append([]any{}, items...), nil
}

func fFirst(st *state, v any, args []any, kw map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{"first"}, nil
	}
	return items[0], nil
}

func fLast(st *state, v any, args []any, kw map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{"last"}, nil
	}
	return items[len(items)-1], nil
}

func fDefault(st *state, v any, args []any, kw map[string]any) (any, error) {
	def := arg(args, kw, 0, "default_value", "")
	boolean := truthy(arg(args, kw, 1, "boolean", false))
	if _, ok := v.(Undefined); ok || (boolean && !truthy(v)) {
		return def, nil
	}
	return v, nil
}

func fInt(st *state, v any, args []any, kw map[string]any) (any, error) {
	def := arg(args, kw, 0, "default", 0)
	switch t := v.(type) {
	case int:
		return t, nil
	case bool:
		i, _ := asInt(t)
		return i, nil
	case float64:
		return int(t), nil
	case string:
		s := pyStrip(t)
		if i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64); err == nil {
			return int(i), nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return int(f), nil
		}
	}
	return def, nil
}

func fFloat(st *state, v any, args []any, kw map[string]any) (any, error) {
	def := arg(args, kw, 0, "default", 0.0)
	if f, ok := num(v); ok {
		return f, nil
	}
	if s, ok := v.(string); ok {
		if f, err := strconv.ParseFloat(pyStrip(s), 64); err == nil {
			return f, nil
		}
	}
	return def, nil
}

func fAbs(st *state, v any, args []any, kw map[string]any) (any, error) {
	switch t := v.(type) {
	case int:
		if t < 0 {
			return -t, nil
		}
		return t, nil
	case float64:
		if t < 0 {
			return -t, nil
		}
		return t, nil
	}
	return nil, rerr("bad operand type for abs(): '%s'", typeName(v))
}

func fIndent(st *state, v any, args []any, kw map[string]any) (any, error) {
	s := pyStr(v)
	width := arg(args, kw, 0, "width", 4)
	first := truthy(arg(args, kw, 1, "first", false))
	blank := truthy(arg(args, kw, 2, "blank", false))
	var ind string
	if w, ok := width.(string); ok {
		ind = w
	} else {
		n, _ := asInt(width)
		if n > MaxValueBytes {
			return nil, valueLimit()
		}
		ind = strings.Repeat(" ", max(n, 0))
	}
	nl := "\n"
	s += nl
	// Jinja2: rv = newline.join(ind + line if line else line for line in s.splitlines())
	lines := pySplitLines(s)
	if !fits(len(lines)+1, len(ind)+len(nl), len(s)) {
		return nil, valueLimit()
	}
	var b strings.Builder
	if blank {
		for i, l := range lines {
			if i > 0 {
				b.WriteString(nl)
			}
			b.WriteString(ind + l)
		}
		out := b.String()
		if !first {
			out = strings.TrimPrefix(out, ind)
		}
		return out, nil
	}
	if len(lines) > 0 {
		b.WriteString(lines[0])
		for _, l := range lines[1:] {
			b.WriteString(nl)
			if l != "" {
				b.WriteString(ind)
			}
			b.WriteString(l)
		}
	}
	out := b.String()
	if first {
		out = ind + out
	}
	return out, nil
}

// pySplitLines is str.splitlines() (without keepends) for the common line breaks.
func pySplitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		brk := 0
		switch r {
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			brk = n
		case '\r':
			brk = n
			if i+1 < len(s) && s[i+1] == '\n' {
				brk = 2
			}
		}
		if brk > 0 {
			if len(out) >= maxParts {
				panic(limitPanic{valueLimit().(*LimitError)})
			}
			out = append(out, s[start:i])
			i += brk
			start = i
			continue
		}
		i += n
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func fReplace(st *state, v any, args []any, kw map[string]any) (any, error) {
	s := pyStr(v)
	old := pyStr(arg(args, kw, 0, "old", ""))
	nw := pyStr(arg(args, kw, 1, "new", ""))
	cnt := -1
	if c := arg(args, kw, 2, "count", nil); c != nil {
		cnt, _ = asInt(c)
	}
	return replaceBounded(s, old, nw, cnt)
}

// getAttrPath implements Jinja's make_attrgetter: "a.b" or integer index.
func getAttrPath(v any, attr any) (any, error) {
	s, ok := attr.(string)
	if !ok {
		return getitem(v, attr)
	}
	for _, part := range strings.Split(s, ".") {
		var k any = part
		if i, err := strconv.Atoi(part); err == nil {
			k = i
		}
		var err error
		v, err = getitem(v, k)
		if err != nil {
			return nil, err
		}
	}
	return v, nil
}

func selectFilter(reject, byAttr bool) filterFunc {
	return func(st *state, v any, args []any, kw map[string]any) (any, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		var attr any
		if byAttr {
			if len(args) == 0 {
				return nil, rerr("Missing parameter for attribute name")
			}
			attr, args = args[0], args[1:]
		}
		var testName string
		var testArgs []any
		if len(args) > 0 {
			tn, ok := args[0].(string)
			if !ok {
				return nil, rerr("test name must be a string")
			}
			testName, testArgs = tn, args[1:]
		}
		out := []any{}
		for _, it := range items {
			x := it
			if byAttr {
				x, err = getAttrPath(it, attr)
				if err != nil {
					return nil, err
				}
			}
			var ok bool
			if testName == "" {
				ok = truthy(x)
			} else {
				if err := st.step(); err != nil {
					return nil, err
				}
				ok, err = st.runTest(testName, x, testArgs, nil)
				if err != nil {
					return nil, err
				}
			}
			if ok != reject {
				out = append(out, it)
			}
		}
		return out, nil
	}
}

func fMap(st *state, v any, args []any, kw map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, len(items))
	if attr, ok := kw["attribute"]; ok && len(args) == 0 {
		def, hasDef := kw["default"]
		for _, it := range items {
			x, err := getAttrPath(it, attr)
			if err != nil {
				return nil, err
			}
			if _, u := x.(Undefined); u && hasDef {
				x = def
			}
			out = append(out, x)
		}
		return out, nil
	}
	if len(args) == 0 {
		return nil, rerr("map requires a filter argument")
	}
	name, ok := args[0].(string)
	if !ok {
		return nil, rerr("map filter name must be a string")
	}
	for _, it := range items {
		if err := st.step(); err != nil {
			return nil, err
		}
		x, err := st.accounted(st.callFilter(name, it, args[1:], kw))
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

func fUnique(st *state, v any, args []any, kw map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := []any{}
	seen := map[any]bool{} // hashable items, by a key equal to equal()
	var other []any        // the rest, compared one by one
	for _, it := range items {
		if err := st.step(); err != nil {
			return nil, err
		}
		if k, ok := uniqueKey(it); ok {
			if !seen[k] {
				seen[k] = true
				out = append(out, it)
			}
			continue
		}
		if err := st.work(len(other)); err != nil {
			return nil, err
		}
		dup := false
		for _, o := range other {
			if equal(st, o, it) {
				dup = true
				break
			}
		}
		if !dup {
			other = append(other, it)
			out = append(out, it)
		}
	}
	return out, nil
}

// uniqueKey is a map key for v such that two keys are equal exactly when
// equal() says the values are (True == 1, 1.0 == 1); false for values that
// have none (containers, NaN, Undefined).
func uniqueKey(v any) (any, bool) {
	switch t := v.(type) {
	case nil, string, int:
		return t, true
	case bool:
		if t {
			return 1, true
		}
		return 0, true
	case float64:
		if math.IsNaN(t) {
			return nil, false
		}
		return normKey(t), true
	}
	return nil, false
}

func fReverse(st *state, v any, args []any, kw map[string]any) (any, error) {
	if s, ok := v.(string); ok {
		rs := []rune(s)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		return string(rs), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	return out, nil
}

func sortItems(st *state, items []any, key func(any) (any, error), reverse, caseSensitive bool) ([]any, error) {
	out := append([]any{}, items...)
	keys := make([]any, len(out))
	for i, it := range out {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		if s, ok := k.(string); ok && !caseSensitive {
			k = strings.ToLower(s)
		}
		keys[i] = k
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	var serr error
	sort.SliceStable(idx, func(a, b int) bool {
		c, err := compare(st, keys[idx[a]], keys[idx[b]])
		if err != nil {
			serr = rerr("%s", err.Error())
		}
		if reverse {
			return c > 0
		}
		return c < 0
	})
	if serr != nil {
		return nil, serr
	}
	res := make([]any, len(out))
	for i, j := range idx {
		res[i] = out[j]
	}
	return res, nil
}

func fSort(st *state, v any, args []any, kw map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	reverse := truthy(arg(args, kw, 0, "reverse", false))
	cs := truthy(arg(args, kw, 1, "case_sensitive", false))
	attr := arg(args, kw, 2, "attribute", nil)
	return sortItems(st, items, func(x any) (any, error) {
		if attr == nil {
			return x, nil
		}
		return getAttrPath(x, attr)
	}, reverse, cs)
}

func fDictsort(st *state, v any, args []any, kw map[string]any) (any, error) {
	d, ok := v.(*Dict)
	if !ok {
		return nil, rerr("dictsort requires a mapping")
	}
	cs := truthy(arg(args, kw, 0, "case_sensitive", false))
	by := pyStr(arg(args, kw, 1, "by", "key"))
	reverse := truthy(arg(args, kw, 2, "reverse", false))
	pos := 0
	if by == "value" {
		pos = 1
	}
	return sortItems(st, dictItems(d), func(x any) (any, error) { return x.(Tuple)[pos], nil }, reverse, cs)
}

func fSum(st *state, v any, args []any, kw map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	attr := arg(args, kw, 0, "attribute", nil)
	var total any = arg(args, kw, 1, "start", 0)
	for _, it := range items {
		if attr != nil {
			it, err = getAttrPath(it, attr)
			if err != nil {
				return nil, err
			}
		}
		total, err = st.accounted(binop("+", total, it))
		if err != nil {
			return nil, err
		}
		if err := st.step(); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func fMinMax(isMin bool) filterFunc {
	return func(st *state, v any, args []any, kw map[string]any) (any, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{}, nil
		}
		cs := truthy(arg(args, kw, 0, "case_sensitive", false))
		attr := arg(args, kw, 1, "attribute", nil)
		sorted, err := sortItems(st, items, func(x any) (any, error) {
			if attr == nil {
				return x, nil
			}
			return getAttrPath(x, attr)
		}, false, cs)
		if err != nil {
			return nil, err
		}
		if isMin {
			return sorted[0], nil
		}
		return sorted[len(sorted)-1], nil
	}
}

func fRound(st *state, v any, args []any, kw map[string]any) (any, error) {
	f, ok := num(v)
	if !ok {
		return nil, rerr("round requires a number")
	}
	prec, _ := asInt(arg(args, kw, 0, "precision", 0))
	method := pyStr(arg(args, kw, 1, "method", "common"))
	p := 1.0
	for i := 0; i < prec; i++ {
		p *= 10
	}
	x := f * p
	switch method {
	case "floor":
		x = float64(int64(x))
		if x > f*p {
			x--
		}
	case "ceil":
		if float64(int64(x)) < x {
			x = float64(int64(x)) + 1
		} else {
			x = float64(int64(x))
		}
	default:
		if x < 0 {
			x = -float64(int64(-x + 0.5))
		} else {
			x = float64(int64(x + 0.5))
		}
	}
	return x / p, nil
}

func fCenter(st *state, v any, args []any, kw map[string]any) (any, error) {
	s := pyStr(v)
	w, _ := asInt(arg(args, kw, 0, "width", 80))
	n := utf8.RuneCountInString(s)
	if w <= n {
		return s, nil
	}
	total := w - n
	if !fits(total, 1, len(s)) {
		return nil, valueLimit()
	}
	left := total / 2
	if total%2 == 1 && w%2 == 1 {
		left++
	}
	return strings.Repeat(" ", left) + s + strings.Repeat(" ", total-left), nil
}

func fBatch(st *state, v any, args []any, kw map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	n, _ := asInt(arg(args, kw, 0, "linecount", 1))
	if n <= 0 {
		return nil, rerr("batch size must be positive")
	}
	fill := arg(args, kw, 1, "fill_with", nil)
	if fill != nil && !fits(n, 16, 0) {
		return nil, valueLimit()
	}
	out := []any{}
	for i := 0; i < len(items); i += n {
		j := min(i+n, len(items))
		row := append([]any{}, items[i:j]...)
		if fill != nil {
			for len(row) < n {
				row = append(row, fill)
			}
		}
		out = append(out, row)
	}
	return out, nil
}

func fAttr(st *state, v any, args []any, kw map[string]any) (any, error) {
	return getattr(v, pyStr(arg(args, kw, 0, "name", "")))
}

// ---------------------------------------------------------------- tests

func (st *state) runTest(name string, v any, args []any, kw map[string]any) (bool, error) {
	a0 := arg(args, kw, 0, "other", nil)
	switch name {
	case "defined":
		_, u := v.(Undefined)
		return !u, nil
	case "undefined":
		_, u := v.(Undefined)
		return u, nil
	case "none":
		return v == nil, nil
	case "string":
		_, ok := v.(string)
		return ok, nil
	case "mapping":
		_, ok := v.(*Dict)
		return ok, nil
	case "iterable":
		switch v.(type) {
		case string, []any, Tuple, *Dict, Undefined:
			return true, nil
		}
		return false, nil
	case "sequence":
		switch v.(type) {
		case string, []any, Tuple, *Dict, Undefined:
			return true, nil
		}
		return false, nil
	case "number":
		_, ok := num(v)
		return ok, nil
	case "integer":
		_, ok := v.(int)
		return ok, nil
	case "float":
		_, ok := v.(float64)
		return ok, nil
	case "boolean":
		_, ok := v.(bool)
		return ok, nil
	case "true":
		b, ok := v.(bool)
		return ok && b, nil
	case "false":
		b, ok := v.(bool)
		return ok && !b, nil
	case "callable":
		switch v.(type) {
		case *macro, builtinFunc, *boundMethod:
			return true, nil
		}
		return false, nil
	case "equalto", "eq", "==":
		return equal(st, v, a0), nil
	case "ne", "!=":
		return !equal(st, v, a0), nil
	case "sameas":
		return sameAs(v, a0), nil
	case "lt", "lessthan", "<", "gt", "greaterthan", ">", "le", "<=", "ge", ">=":
		op := map[string]string{"lt": "<", "lessthan": "<", "<": "<", "gt": ">", "greaterthan": ">", ">": ">", "le": "<=", "<=": "<=", "ge": ">=", ">=": ">="}[name]
		return compareOp(st, op, v, a0)
	case "in":
		return contains(st, a0, v)
	case "odd", "even":
		i, ok := asInt(v)
		if !ok {
			return false, rerr("%s test requires an integer", name)
		}
		odd := i%2 != 0
		return odd == (name == "odd"), nil
	case "divisibleby":
		i, ok1 := asInt(v)
		n, ok2 := asInt(a0)
		if !ok1 || !ok2 || n == 0 {
			return false, rerr("divisibleby requires integers")
		}
		return i%n == 0, nil
	case "lower":
		s := pyStr(v)
		return s == strings.ToLower(s) && s != strings.ToUpper(s), nil
	case "upper":
		s := pyStr(v)
		return s == strings.ToUpper(s) && s != strings.ToLower(s), nil
	case "escaped":
		return false, nil
	case "filter":
		_, ok := filters[pyStr(v)]
		return ok, nil
	case "test":
		switch pyStr(v) {
		case "defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer", "float", "boolean", "true", "false", "callable", "equalto", "eq", "ne", "sameas", "lt", "gt", "le", "ge", "in", "odd", "even", "divisibleby", "lower", "upper":
			return true, nil
		}
		return false, nil
	}
	return false, rerr("no test named '%s'", name)
}

// sameAs is Python's `is` (the sameas test): the same object, lists and
// tuples by their backing array (== on them would panic: slices and funcs are
// not comparable in Go).
func sameAs(a, b any) bool {
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
	case Tuple:
		y, ok := b.(Tuple)
		return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
	case builtinFunc:
		return false
	}
	switch b.(type) {
	case []any, Tuple, builtinFunc:
		return false
	}
	return a == b
}
