package chattmpl

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

func (st *state) callMethod(m *boundMethod, args []any, kw map[string]any) (any, error) {
	switch r := m.recv.(type) {
	case *Dict:
		return dictMethod(r, m.name, args, kw)
	case string:
		return strMethod(r, m.name, args, kw)
	case []any:
		return listMethod(st, r, m.name, args)
	case *loopInfo:
		switch m.name {
		case "cycle":
			if len(args) == 0 {
				return nil, rerr("no items for cycling given")
			}
			return args[r.index0%len(args)], nil
		case "changed":
			v := Tuple(args)
			if r.hasLast && equal(st, r.last, v) {
				return false, nil
			}
			r.last, r.hasLast = v, true
			return true, nil
		}
	}
	return nil, rerr("'%s' object has no attribute '%s'", typeName(m.recv), m.name)
}

func dictMethod(d *Dict, name string, args []any, kw map[string]any) (any, error) {
	switch name {
	case "items":
		return dictItems(d), nil
	case "keys":
		return append([]any{}, d.keys...), nil
	case "values":
		out := make([]any, len(d.keys))
		for i := range d.keys {
			out[i] = d.vals[i]
		}
		return out, nil
	case "get":
		if len(args) == 0 {
			return nil, rerr("get expected at least 1 argument, got 0")
		}
		if v, ok := d.Get(args[0]); ok {
			return v, nil
		}
		if len(args) > 1 {
			return args[1], nil
		}
		return nil, nil
	case "copy":
		c := NewDict()
		for i, k := range d.keys {
			c.Set(k, d.vals[i])
		}
		return c, nil
	}
	return nil, rerr("'dict' object has no attribute '%s'", name)
}

func listMethod(st *state, l []any, name string, args []any) (any, error) {
	switch name {
	case "index":
		if len(args) > 0 {
			for i, x := range l {
				if equal(st, x, args[0]) {
					return i, nil
				}
			}
		}
		return nil, rerr("value is not in list")
	case "count":
		n := 0
		if len(args) > 0 {
			for _, x := range l {
				if equal(st, x, args[0]) {
					n++
				}
			}
		}
		return n, nil
	case "copy":
		return append([]any{}, l...), nil
	}
	return nil, rerr("'list' object has no attribute '%s'", name)
}

func strArg(args []any, i int) (string, bool, error) {
	if i >= len(args) || args[i] == nil {
		return "", false, nil
	}
	s, ok := args[i].(string)
	if !ok {
		return "", false, rerr("argument must be str or None, not %s", typeName(args[i]))
	}
	return s, true, nil
}

func strMethod(s, name string, args []any, kw map[string]any) (any, error) {
	switch name {
	case "strip", "lstrip", "rstrip":
		chars, has, err := strArg(args, 0)
		if err != nil {
			return nil, err
		}
		if !has {
			switch name {
			case "strip":
				return pyStrip(s), nil
			case "lstrip":
				return pyLStrip(s), nil
			}
			return pyRStrip(s), nil
		}
		switch name {
		case "strip":
			return strings.Trim(s, chars), nil
		case "lstrip":
			return strings.TrimLeft(s, chars), nil
		}
		return strings.TrimRight(s, chars), nil
	case "split", "rsplit":
		sep, has, err := strArg(args, 0)
		if v, ok := kw["sep"]; ok && !has {
			sep, has = pyStr(v), v != nil
		}
		if err != nil {
			return nil, err
		}
		maxsplit := -1
		if v := arg(args, kw, 1, "maxsplit", nil); v != nil {
			maxsplit, _ = asInt(v)
		}
		var parts []string
		if !has {
			if len(s) > maxParts && countFields(s) > maxParts {
				return nil, valueLimit()
			}
			parts = splitWhitespace(s, maxsplit, name == "rsplit")
		} else {
			if sep == "" {
				return nil, rerr("empty separator")
			}
			if len(s) > maxParts && strings.Count(s, sep) >= maxParts {
				return nil, valueLimit()
			}
			if maxsplit < 0 {
				parts = strings.Split(s, sep)
			} else if name == "split" {
				parts = strings.SplitN(s, sep, maxsplit+1)
			} else {
				parts = rsplitN(s, sep, maxsplit)
			}
		}
		out := make([]any, len(parts))
		for i, p := range parts {
			out[i] = p
		}
		return out, nil
	case "splitlines":
		parts := pySplitLines(s)
		out := make([]any, len(parts))
		for i, p := range parts {
			out[i] = p
		}
		return out, nil
	case "startswith", "endswith":
		if len(args) == 0 {
			return nil, rerr("%s takes at least 1 argument", name)
		}
		sub := s
		if len(args) > 1 {
			v, err := slice(s, args[1], arg(args, nil, 2, "", nil), nil)
			if err != nil {
				return nil, err
			}
			sub = v.(string)
		}
		var cands []any
		switch p := args[0].(type) {
		case string:
			cands = []any{p}
		case Tuple:
			cands = p
		case []any:
			return nil, rerr("%s first arg must be str or a tuple of str, not list", name)
		default:
			return nil, rerr("%s first arg must be str or a tuple of str, not %s", name, typeName(args[0]))
		}
		for _, c := range cands {
			cs, ok := c.(string)
			if !ok {
				return nil, rerr("tuple for %s must only contain str", name)
			}
			if (name == "startswith" && strings.HasPrefix(sub, cs)) || (name == "endswith" && strings.HasSuffix(sub, cs)) {
				return true, nil
			}
		}
		return false, nil
	case "lower", "casefold":
		return pyLower(s), nil
	case "upper":
		return pyUpper(s), nil
	case "title":
		return pyTitle(s), nil
	case "capitalize":
		return pyCapitalize(s), nil
	case "swapcase":
		var b strings.Builder
		for _, r := range s {
			if unicode.IsUpper(r) {
				b.WriteRune(unicode.ToLower(r))
			} else {
				b.WriteRune(unicode.ToUpper(r))
			}
		}
		return b.String(), nil
	case "replace":
		if len(args) < 2 {
			return nil, rerr("replace expected at least 2 arguments")
		}
		cnt := -1
		if len(args) > 2 {
			cnt, _ = asInt(args[2])
		}
		return replaceBounded(s, pyStr(args[0]), pyStr(args[1]), cnt)
	case "find", "rfind", "index":
		sub, _, err := strArg(args, 0)
		if err != nil {
			return nil, err
		}
		var i int
		if name == "rfind" {
			i = strings.LastIndex(s, sub)
		} else {
			i = strings.Index(s, sub)
		}
		if i >= 0 {
			i = utf8.RuneCountInString(s[:i])
		} else if name == "index" {
			return nil, rerr("substring not found")
		}
		return i, nil
	case "count":
		sub, _, err := strArg(args, 0)
		if err != nil {
			return nil, err
		}
		if sub == "" {
			return utf8.RuneCountInString(s) + 1, nil
		}
		return strings.Count(s, sub), nil
	case "join":
		if len(args) != 1 {
			return nil, rerr("join takes exactly one argument")
		}
		items, err := iterate(args[0])
		if err != nil {
			return nil, err
		}
		parts := make([]string, len(items))
		for i, it := range items {
			p, ok := it.(string)
			if !ok {
				return nil, rerr("sequence item %d: expected str instance, %s found", i, typeName(it))
			}
			parts[i] = p
		}
		return joinBounded(parts, s)
	case "format":
		return pyFormat(s, args, kw)
	case "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper":
		if s == "" {
			return false, nil
		}
		if name == "islower" || name == "isupper" {
			cased := false
			for _, r := range s {
				if unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) {
					cased = true
					if (name == "islower" && !unicode.IsLower(r)) || (name == "isupper" && !unicode.IsUpper(r)) {
						return false, nil
					}
				}
			}
			return cased, nil
		}
		for _, r := range s {
			ok := false
			switch name {
			case "isdigit":
				ok = unicode.IsDigit(r)
			case "isalpha":
				ok = unicode.IsLetter(r)
			case "isalnum":
				ok = unicode.IsLetter(r) || unicode.IsNumber(r)
			case "isspace":
				ok = pyWhitespace(r)
			}
			if !ok {
				return false, nil
			}
		}
		return true, nil
	case "removeprefix":
		p, _, err := strArg(args, 0)
		if err != nil {
			return nil, err
		}
		return strings.TrimPrefix(s, p), nil
	case "removesuffix":
		p, _, err := strArg(args, 0)
		if err != nil {
			return nil, err
		}
		return strings.TrimSuffix(s, p), nil
	case "partition", "rpartition":
		sep, _, err := strArg(args, 0)
		if err != nil {
			return nil, err
		}
		var i int
		if name == "partition" {
			i = strings.Index(s, sep)
		} else {
			i = strings.LastIndex(s, sep)
		}
		if i < 0 {
			if name == "partition" {
				return Tuple{s, "", ""}, nil
			}
			return Tuple{"", "", s}, nil
		}
		return Tuple{s[:i], sep, s[i+len(sep):]}, nil
	case "zfill", "center", "ljust", "rjust":
		w, _ := asInt(arg(args, kw, 0, "width", 0))
		fill := " "
		if len(args) > 1 {
			fill = pyStr(args[1])
		}
		n := utf8.RuneCountInString(s)
		if w <= n {
			return s, nil
		}
		pad := w - n
		if !fits(pad, max(len(fill), 1), len(s)) {
			return nil, valueLimit()
		}
		switch name {
		case "zfill":
			if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
				return s[:1] + strings.Repeat("0", pad) + s[1:], nil
			}
			return strings.Repeat("0", pad) + s, nil
		case "ljust":
			return s + strings.Repeat(fill, pad), nil
		case "rjust":
			return strings.Repeat(fill, pad) + s, nil
		}
		left := pad / 2
		if pad%2 == 1 && w%2 == 1 {
			left++
		}
		return strings.Repeat(fill, left) + s + strings.Repeat(fill, pad-left), nil
	}
	return nil, rerr("'str' object has no attribute '%s'", name)
}

func splitWhitespace(s string, maxsplit int, fromRight bool) []string {
	if maxsplit < 0 {
		return strings.FieldsFunc(s, pyWhitespace)
	}
	if fromRight {
		// rsplit with maxsplit: split from the right.
		fields := strings.FieldsFunc(s, pyWhitespace)
		if len(fields) <= maxsplit+1 {
			return fields
		}
		// Find the start of the (len-maxsplit)th field from the left boundary.
		t := pyRStrip(s)
		out := []string{}
		for i := 0; i < maxsplit; i++ {
			j := strings.LastIndexFunc(t, pyWhitespace)
			out = append([]string{t[j+1:]}, out...)
			t = pyRStrip(t[:j])
		}
		return append([]string{t}, out...)
	}
	var out []string
	t := pyLStrip(s)
	for i := 0; i < maxsplit && t != ""; i++ {
		j := strings.IndexFunc(t, pyWhitespace)
		if j < 0 {
			break
		}
		out = append(out, t[:j])
		t = pyLStrip(t[j:])
	}
	if t != "" {
		out = append(out, t)
	}
	return out
}

func rsplitN(s, sep string, maxsplit int) []string {
	var out []string
	for i := 0; i < maxsplit; i++ {
		j := strings.LastIndex(s, sep)
		if j < 0 {
			break
		}
		out = append([]string{s[j+len(sep):]}, out...)
		s = s[:j]
	}
	return append([]string{s}, out...)
}

// pyFormat implements str.format for plain {} / {0} / {name} fields.
func pyFormat(s string, args []any, kw map[string]any) (any, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		checkLen(b.Len())
		c := s[i]
		if c == '{' {
			if i+1 < len(s) && s[i+1] == '{' {
				b.WriteByte('{')
				i++
				continue
			}
			j := strings.IndexByte(s[i:], '}')
			if j < 0 {
				return nil, rerr("Single '{' encountered in format string")
			}
			field := s[i+1 : i+j]
			if k := strings.IndexAny(field, ":!"); k >= 0 {
				field = field[:k]
			}
			var v any
			switch {
			case field == "":
				if auto >= len(args) {
					return nil, rerr("Replacement index %d out of range", auto)
				}
				v = args[auto]
				auto++
			default:
				if n, err := strconv.Atoi(field); err == nil {
					if n >= len(args) {
						return nil, rerr("Replacement index %d out of range", n)
					}
					v = args[n]
				} else {
					x, ok := kw[field]
					if !ok {
						return nil, rerr("KeyError: '%s'", field)
					}
					v = x
				}
			}
			b.WriteString(pyStr(v))
			i += j
			continue
		}
		if c == '}' && i+1 < len(s) && s[i+1] == '}' {
			i++
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

// pyPercent implements Python's printf-style "fmt % args" for the common
// conversions (%s %r %d %i %f %e %g %x %o %c %%, flags "-+ 0#", width, precision)
// with positional arguments or a mapping ("%(name)s").
func pyPercent(f string, arg any) (string, error) {
	var args []any
	mapping, isMap := arg.(*Dict)
	if t, ok := arg.(Tuple); ok {
		args = t
	} else if !isMap {
		args = []any{arg}
	}
	next := 0
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		checkLen(b.Len())
		c := f[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(f) {
			return "", rerr("incomplete format")
		}
		var v any
		haveV := false
		if f[i] == '(' {
			j := strings.IndexByte(f[i:], ')')
			if j < 0 || !isMap {
				return "", rerr("format requires a mapping")
			}
			key := f[i+1 : i+j]
			x, ok := mapping.Get(key)
			if !ok {
				return "", rerr("KeyError: '%s'", key)
			}
			v, haveV = x, true
			i += j + 1
		}
		start := i
		for i < len(f) && strings.IndexByte("-+ 0#", f[i]) >= 0 {
			i++
		}
		for i < len(f) && (isDigit(f[i]) || f[i] == '.') {
			i++
		}
		if i >= len(f) {
			return "", rerr("incomplete format")
		}
		spec, conv := f[start:i], f[i]
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		if !haveV {
			if next >= len(args) {
				return "", rerr("not enough arguments for format string")
			}
			v = args[next]
			next++
		}
		var out string
		switch conv {
		case 's':
			out = fmt.Sprintf("%"+spec+"s", pyStr(v))
		case 'r', 'a':
			out = fmt.Sprintf("%"+spec+"s", pyRepr(v))
		case 'd', 'i', 'u':
			n, ok := asInt(v)
			if !ok {
				fv, okf := v.(float64)
				if !okf {
					return "", rerr("%%%c format: a real number is required, not %s", conv, typeName(v))
				}
				n = int(fv)
			}
			out = fmt.Sprintf("%"+spec+"d", n)
		case 'f', 'F', 'e', 'E', 'g', 'G':
			fv, ok := num(v)
			if !ok {
				return "", rerr("must be real number, not %s", typeName(v))
			}
			if !strings.Contains(spec, ".") {
				spec += ".6"
			}
			out = fmt.Sprintf("%"+spec+string(conv), fv)
		case 'x', 'X', 'o':
			n, ok := asInt(v)
			if !ok {
				return "", rerr("%%%c format: an integer is required, not %s", conv, typeName(v))
			}
			out = fmt.Sprintf("%"+spec+string(conv), n)
		case 'c':
			if n, ok := asInt(v); ok {
				out = string(rune(n))
			} else {
				out = pyStr(v)
			}
		default:
			return "", rerr("unsupported format character '%c'", conv)
		}
		b.WriteString(out)
	}
	if !isMap && next < len(args) {
		return "", rerr("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

// ---------------------------------------------------------------- strftime

var (
	shortDays   = []string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	longDays    = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	shortMonths = []string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
	longMonths  = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
)

// strftime formats t like C strftime in the C/POSIX locale.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	pad := func(n, w int) string {
		s := strconv.Itoa(n)
		for len(s) < w {
			s = "0" + s
		}
		return s
	}
	for i := 0; i < len(f); i++ {
		checkLen(b.Len())
		c := f[i]
		if c != '%' || i+1 >= len(f) {
			b.WriteByte(c)
			continue
		}
		i++
		d := f[i]
		noPad := false
		if d == '-' && i+1 < len(f) { // glibc extension: %-d
			noPad = true
			i++
			d = f[i]
		}
		p := func(n, w int) string {
			if noPad {
				return strconv.Itoa(n)
			}
			return pad(n, w)
		}
		switch d {
		case 'a':
			b.WriteString(shortDays[t.Weekday()])
		case 'A':
			b.WriteString(longDays[t.Weekday()])
		case 'b', 'h':
			b.WriteString(shortMonths[t.Month()-1])
		case 'B':
			b.WriteString(longMonths[t.Month()-1])
		case 'd':
			b.WriteString(p(t.Day(), 2))
		case 'e':
			if noPad {
				b.WriteString(strconv.Itoa(t.Day()))
			} else {
				b.WriteString(strings.Repeat(" ", 2-len(strconv.Itoa(t.Day()))) + strconv.Itoa(t.Day()))
			}
		case 'm':
			b.WriteString(p(int(t.Month()), 2))
		case 'y':
			b.WriteString(p(t.Year()%100, 2))
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'H':
			b.WriteString(p(t.Hour(), 2))
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			b.WriteString(p(h, 2))
		case 'M':
			b.WriteString(p(t.Minute(), 2))
		case 'S':
			b.WriteString(p(t.Second(), 2))
		case 'f':
			b.WriteString(pad(t.Nanosecond()/1000, 6))
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'j':
			b.WriteString(p(t.YearDay(), 3))
		case 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'u':
			wd := int(t.Weekday())
			if wd == 0 {
				wd = 7
			}
			b.WriteString(strconv.Itoa(wd))
		case 'Z':
			name, _ := t.Zone()
			b.WriteString(name)
		case 'z':
			_, off := t.Zone()
			sign := "+"
			if off < 0 {
				sign = "-"
				off = -off
			}
			b.WriteString(sign + pad(off/3600, 2) + pad(off%3600/60, 2))
		case 'D':
			b.WriteString(strftime(t, "%m/%d/%y"))
		case 'F':
			b.WriteString(strftime(t, "%Y-%m-%d"))
		case 'T':
			b.WriteString(strftime(t, "%H:%M:%S"))
		case 'R':
			b.WriteString(strftime(t, "%H:%M"))
		case 'c':
			b.WriteString(strftime(t, "%a %b %e %H:%M:%S %Y"))
		case 'x':
			b.WriteString(strftime(t, "%m/%d/%y"))
		case 'X':
			b.WriteString(strftime(t, "%H:%M:%S"))
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(d)
		}
	}
	return b.String()
}

// replaceBounded is strings.Replace within MaxValueBytes.
func replaceBounded(s, old, nw string, cnt int) (any, error) {
	if len(nw) > len(old) {
		k := strings.Count(s, old)
		if old == "" {
			k = utf8.RuneCountInString(s) + 1
		}
		if cnt >= 0 && cnt < k {
			k = cnt
		}
		if !fits(k, len(nw)-len(old), len(s)) {
			return nil, valueLimit()
		}
	}
	return strings.Replace(s, old, nw, cnt), nil
}

// joinBounded is strings.Join within MaxValueBytes.
func joinBounded(parts []string, sep string) (any, error) {
	if !fits(len(parts), len(sep), 0) {
		return nil, valueLimit()
	}
	n := len(parts) * len(sep)
	for _, p := range parts {
		if len(p) > MaxValueBytes-n {
			return nil, valueLimit()
		}
		n += len(p)
	}
	return strings.Join(parts, sep), nil
}

// countFields is len(strings.Fields(s)), without building the fields.
func countFields(s string) int {
	n, in := 0, false
	for _, r := range s {
		sp := unicode.IsSpace(r)
		if !sp && !in {
			n++
		}
		in = !sp
	}
	return n
}
