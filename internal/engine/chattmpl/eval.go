package chattmpl

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// RaisedError is returned when a template calls raise_exception(msg).
type RaisedError struct{ Msg string }

func (e *RaisedError) Error() string { return "chattmpl: template raised: " + e.Msg }

// RenderError is any other failure while rendering (type errors, undefined
// values used in operations, ...).
type RenderError struct{ Msg string }

func (e *RenderError) Error() string { return "chattmpl: render error: " + e.Msg }

func rerr(format string, a ...any) error { return &RenderError{fmt.Sprintf(format, a...)} }

func undefinedErr(u Undefined) error {
	if u.name == "" {
		return rerr("value is undefined")
	}
	return rerr("'%s' is undefined", u.name)
}

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

const maxDepth = MaxRecursionDepth

type frame struct {
	vars   map[string]any
	parent *frame
}

func (f *frame) lookup(name string) (any, bool) {
	for ; f != nil; f = f.parent {
		if v, ok := f.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

func newFrame(parent *frame) *frame { return &frame{vars: map[string]any{}, parent: parent} }

// state is the per-render evaluation state.
type state struct {
	now      func() time.Time
	steps    int
	depth    int
	genSpans []span
	out      *strings.Builder // the top-level output (generation offsets refer to it)
	b        budget
	work64   int64 // units of work within steps (see work)
	visits   int64 // nodes visited by comparisons (see visit)
}

type span struct{ start, end int }

type macro struct {
	name    string
	def     *macroDef
	closure *frame
}

type loopInfo struct {
	items   []any
	index0  int
	depth0  int
	loopFn  *forNode
	fr      *frame
	last    any // for changed()
	hasLast bool
}

type boundMethod struct {
	recv any
	name string
}

type builtinFunc func(st *state, args []any, kw map[string]any) (any, error)

// ---------------------------------------------------------------- statements

func (st *state) exec(nodes []node, fr *frame, out *strings.Builder) error {
	for _, n := range nodes {
		if err := st.execNode(n, fr, out); err != nil {
			return err
		}
	}
	return nil
}

func (st *state) execNode(n node, fr *frame, out *strings.Builder) error {
	if err := st.step(); err != nil {
		return err
	}
	switch n := n.(type) {
	case *textNode:
		return st.write(out, n.s)
	case *outputNode:
		v, err := st.eval(n.e, fr)
		if err != nil {
			return err
		}
		if s, ok := v.(string); ok {
			return st.write(out, s)
		} else if _, ok := v.(Undefined); !ok {
			return st.write(out, pyRepr(v))
		}
	case *ifNode:
		for i, c := range n.conds {
			v, err := st.eval(c, fr)
			if err != nil {
				return err
			}
			if truthy(v) {
				return st.exec(n.bodies[i], fr, out)
			}
		}
		return st.exec(n.els, fr, out)
	case *forNode:
		it, err := st.eval(n.iter, fr)
		if err != nil {
			return err
		}
		return st.execFor(n, it, fr, out, 0)
	case *setNode:
		v, err := st.eval(n.e, fr)
		if err != nil {
			return err
		}
		return st.assign(n.target, v, fr)
	case *setBlockNode:
		var b strings.Builder
		if err := st.exec(n.body, fr, &b); err != nil {
			return err
		}
		var v any = b.String()
		if err := st.account(v); err != nil {
			return err
		}
		for _, f := range n.filters {
			var err error
			v, err = st.applyFilter(f, v, fr)
			if err != nil {
				return err
			}
		}
		return st.assign(n.target, v, fr)
	case *macroNode:
		fr.vars[n.name] = &macro{name: n.name, def: n.m, closure: fr}
	case *callBlockNode:
		caller := &macro{name: "caller", def: n.caller, closure: fr}
		v, err := st.evalCall(n.call, fr, caller)
		if err != nil {
			return err
		}
		return st.write(out, pyStr(v))
	case *filterBlockNode:
		var b strings.Builder
		if err := st.exec(n.body, fr, &b); err != nil {
			return err
		}
		var v any = b.String()
		if err := st.account(v); err != nil {
			return err
		}
		for _, f := range n.filters {
			var err error
			v, err = st.applyFilter(f, v, fr)
			if err != nil {
				return err
			}
		}
		return st.write(out, pyStr(v))
	case *generationNode:
		start := out.Len()
		if err := st.exec(n.body, fr, out); err != nil {
			return err
		}
		if out == st.out {
			st.genSpans = append(st.genSpans, span{start, out.Len()})
		}
	case *withNode:
		inner := newFrame(fr)
		for i, name := range n.names {
			v, err := st.eval(n.vals[i], fr)
			if err != nil {
				return err
			}
			inner.vars[name] = v
		}
		return st.exec(n.body, inner, out)
	case *breakNode:
		return errBreak
	case *continueNode:
		return errContinue
	default:
		return rerr("unknown node %T", n)
	}
	return nil
}

func (st *state) assign(t target, v any, fr *frame) error {
	switch {
	case t.attr != "":
		obj, ok := fr.lookup(t.name)
		ns, isNS := obj.(*Namespace)
		if !ok || !isNS {
			return rerr("cannot assign attribute on non-namespace object")
		}
		ns.vals.Set(t.attr, v)
	case t.names != nil:
		items, err := iterate(v)
		if err != nil {
			return err
		}
		if len(items) != len(t.names) {
			return rerr("cannot unpack %d values into %d names", len(items), len(t.names))
		}
		for i, name := range t.names {
			fr.vars[name] = items[i]
		}
	default:
		fr.vars[t.name] = v
	}
	return nil
}

func (st *state) execFor(n *forNode, it any, fr *frame, out *strings.Builder, depth0 int) error {
	items, err := iterate(it)
	if err != nil {
		return err
	}
	if n.cond != nil {
		var kept []any
		for _, item := range items {
			if err := st.step(); err != nil {
				return err
			}
			inner := newFrame(fr)
			if err := st.assign(n.target, item, inner); err != nil {
				return err
			}
			c, err := st.eval(n.cond, inner)
			if err != nil {
				return err
			}
			if truthy(c) {
				kept = append(kept, item)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return st.exec(n.els, fr, out)
	}
	st.depth++
	defer func() { st.depth-- }()
	if st.depth > maxDepth {
		return &LimitError{Limit: "recursion_depth", Max: maxDepth}
	}
	loop := &loopInfo{items: items, depth0: depth0, loopFn: n, fr: fr}
	for i, item := range items {
		if err := st.step(); err != nil {
			return err
		}
		loop.index0 = i
		inner := &frame{vars: make(map[string]any, 4), parent: fr}
		if err := st.assign(n.target, item, inner); err != nil {
			return err
		}
		inner.vars["loop"] = loop
		err := st.exec(n.body, inner, out)
		if err == errBreak {
			break
		}
		if err == errContinue {
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// iterate lists the items Python's iter(v) would produce.
func iterate(v any) ([]any, error) {
	switch t := v.(type) {
	case []any:
		return t, nil
	case Tuple:
		return t, nil
	case *Dict:
		return append([]any(nil), t.keys...), nil
	case string:
		if len(t) > maxParts && utf8.RuneCountInString(t) > maxParts {
			return nil, valueLimit()
		}
		out := make([]any, 0, len(t))
		for _, r := range t {
			out = append(out, string(r))
		}
		return out, nil
	case Undefined:
		return nil, nil
	}
	return nil, rerr("'%s' object is not iterable", typeName(v))
}

// ---------------------------------------------------------------- expressions

func (st *state) eval(e expr, fr *frame) (any, error) {
	switch e.(type) {
	case *constExpr, *nameExpr:
	default:
		// Every operation is a step, so that no expression (a flat
		// concatenation of a million costly items) runs unbounded.
		if err := st.step(); err != nil {
			return nil, err
		}
	}
	switch e := e.(type) {
	case *constExpr:
		return e.v, nil
	case *nameExpr:
		if v, ok := fr.lookup(e.name); ok {
			return v, nil
		}
		if g, ok := globals[e.name]; ok {
			return g, nil
		}
		return Undefined{e.name}, nil
	case *getattrExpr:
		obj, err := st.eval(e.obj, fr)
		if err != nil {
			return nil, err
		}
		return getattr(obj, e.attr)
	case *getitemExpr:
		obj, err := st.eval(e.obj, fr)
		if err != nil {
			return nil, err
		}
		k, err := st.eval(e.key, fr)
		if err != nil {
			return nil, err
		}
		return getitem(obj, k)
	case *sliceExpr:
		obj, err := st.eval(e.obj, fr)
		if err != nil {
			return nil, err
		}
		var idx [3]any
		for i, x := range []expr{e.start, e.stop, e.step} {
			if x == nil {
				continue
			}
			idx[i], err = st.eval(x, fr)
			if err != nil {
				return nil, err
			}
		}
		return slice(obj, idx[0], idx[1], idx[2])
	case *listExpr:
		l := make([]any, len(e.items))
		for i, x := range e.items {
			v, err := st.eval(x, fr)
			if err != nil {
				return nil, err
			}
			l[i] = v
		}
		return l, st.account(l)
	case *tupleExpr:
		l := make(Tuple, len(e.items))
		for i, x := range e.items {
			v, err := st.eval(x, fr)
			if err != nil {
				return nil, err
			}
			l[i] = v
		}
		return l, st.account(l)
	case *dictExpr:
		d := NewDict()
		for i := range e.keys {
			k, err := st.eval(e.keys[i], fr)
			if err != nil {
				return nil, err
			}
			if !hashable(k) {
				return nil, rerr("unhashable type: '%s'", typeName(k))
			}
			v, err := st.eval(e.vals[i], fr)
			if err != nil {
				return nil, err
			}
			d.Set(k, v)
		}
		return d, st.account(d)
	case *callExpr:
		return st.accounted(st.evalCall(e, fr, nil))
	case *filterExpr:
		v, err := st.eval(e.obj, fr)
		if err != nil {
			return nil, err
		}
		return st.accounted(st.applyFilter(e, v, fr))
	case *testExpr:
		v, err := st.eval(e.obj, fr)
		if err != nil {
			return nil, err
		}
		args, kw, err := st.evalArgs(e.args, e.kwargs, nil, nil, fr)
		if err != nil {
			return nil, err
		}
		ok, err := st.runTest(e.name, v, args, kw)
		if err != nil {
			return nil, err
		}
		return ok != e.negate, nil
	case *unaryExpr:
		v, err := st.eval(e.e, fr)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "not":
			return !truthy(v), nil
		case "-":
			switch t := v.(type) {
			case int:
				return -t, nil
			case bool:
				if t {
					return -1, nil
				}
				return 0, nil
			case float64:
				return -t, nil
			case Undefined:
				return nil, undefinedErr(t)
			}
			return nil, rerr("bad operand type for unary -: '%s'", typeName(v))
		case "+":
			if _, ok := num(v); ok {
				if b, ok := v.(bool); ok {
					if b {
						return 1, nil
					}
					return 0, nil
				}
				return v, nil
			}
			return nil, rerr("bad operand type for unary +: '%s'", typeName(v))
		}
	case *binExpr:
		l, err := st.eval(e.l, fr)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "and":
			if !truthy(l) {
				return l, nil
			}
			return st.eval(e.r, fr)
		case "or":
			if truthy(l) {
				return l, nil
			}
			return st.eval(e.r, fr)
		}
		r, err := st.eval(e.r, fr)
		if err != nil {
			return nil, err
		}
		return st.accounted(binop(e.op, l, r))
	case *concatExpr:
		var b strings.Builder
		for _, x := range e.items {
			v, err := st.eval(x, fr)
			if err != nil {
				return nil, err
			}
			if err := st.write(&b, pyStr(v)); err != nil {
				return nil, err
			}
		}
		return st.accounted(b.String(), nil)
	case *compareExpr:
		l, err := st.eval(e.first, fr)
		if err != nil {
			return nil, err
		}
		for i, op := range e.ops {
			r, err := st.eval(e.rest[i], fr)
			if err != nil {
				return nil, err
			}
			ok, err := compareOp(st, op, l, r)
			if err != nil {
				return nil, err
			}
			if !ok {
				return false, nil
			}
			l = r
		}
		return true, nil
	case *condExpr:
		c, err := st.eval(e.cond, fr)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return st.eval(e.yes, fr)
		}
		if e.no == nil {
			return Undefined{}, nil
		}
		return st.eval(e.no, fr)
	}
	return nil, rerr("unknown expression %T", e)
}

func compareOp(st *state, op string, l, r any) (bool, error) {
	switch op {
	case "==":
		return equal(st, l, r), nil
	case "!=":
		return !equal(st, l, r), nil
	case "in":
		return contains(st, r, l)
	case "notin":
		ok, err := contains(st, r, l)
		return !ok, err
	}
	if u, ok := l.(Undefined); ok {
		return false, undefinedErr(u)
	}
	if u, ok := r.(Undefined); ok {
		return false, undefinedErr(u)
	}
	c, err := compare(st, l, r)
	if err != nil {
		return false, rerr("%s", strings.Replace(err.Error(), "'<'", "'"+op+"'", 1))
	}
	switch op {
	case "<":
		return c < 0, nil
	case ">":
		return c > 0, nil
	case "<=":
		return c <= 0, nil
	case ">=":
		return c >= 0, nil
	}
	return false, rerr("bad operator %s", op)
}

func contains(st *state, container, item any) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			if u, ok := item.(Undefined); ok {
				return false, undefinedErr(u)
			}
			return false, rerr("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(c, s), nil
	case []any:
		for _, x := range c {
			if equal(st, x, item) {
				return true, nil
			}
		}
		return false, nil
	case Tuple:
		for _, x := range c {
			if equal(st, x, item) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		if !hashable(item) {
			return false, rerr("unhashable type: '%s'", typeName(item))
		}
		_, ok := c.Get(item)
		return ok, nil
	case Undefined:
		return false, nil
	case *Namespace:
		return false, rerr("argument of type 'Namespace' is not iterable")
	}
	return false, rerr("argument of type '%s' is not iterable", typeName(container))
}

func binop(op string, l, r any) (any, error) {
	if u, ok := l.(Undefined); ok {
		return nil, undefinedErr(u)
	}
	if u, ok := r.(Undefined); ok {
		return nil, undefinedErr(u)
	}
	switch op {
	case "+":
		switch a := l.(type) {
		case string:
			if b, ok := r.(string); ok {
				if len(b) > MaxValueBytes-len(a) {
					return nil, valueLimit()
				}
				return a + b, nil
			}
			return nil, rerr("can only concatenate str (not \"%s\") to str", typeName(r))
		case []any:
			if b, ok := r.([]any); ok {
				if !fits(len(a)+len(b), 16, 0) {
					return nil, valueLimit()
				}
				out := make([]any, 0, len(a)+len(b))
				return append(append(out, a...), b...), nil
			}
			return nil, rerr("can only concatenate list (not \"%s\") to list", typeName(r))
		case Tuple:
			if b, ok := r.(Tuple); ok {
				if !fits(len(a)+len(b), 16, 0) {
					return nil, valueLimit()
				}
				out := make(Tuple, 0, len(a)+len(b))
				return append(append(out, a...), b...), nil
			}
			return nil, rerr("can only concatenate tuple (not \"%s\") to tuple", typeName(r))
		}
	case "*":
		if s, ok := l.(string); ok {
			if n, ok := asInt(r); ok {
				return repeatString(s, n)
			}
		}
		if s, ok := r.(string); ok {
			if n, ok := asInt(l); ok {
				return repeatString(s, n)
			}
		}
		if s, ok := l.([]any); ok {
			if n, ok := asInt(r); ok {
				if n <= 0 || len(s) == 0 {
					return []any{}, nil
				}
				if !fits(n, 16*len(s), 0) {
					return nil, valueLimit()
				}
				out := make([]any, 0, n*len(s))
				for i := 0; i < n; i++ {
					out = append(out, s...)
				}
				return out, nil
			}
		}
	}
	if op == "%" {
		if f, ok := l.(string); ok {
			return pyPercent(f, r)
		}
	}
	ia, aInt := asInt(l)
	ib, bInt := asInt(r)
	fa, aNum := num(l)
	fb, bNum := num(r)
	if !aNum || !bNum {
		return nil, rerr("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
	}
	bothInt := aInt && bInt
	switch op {
	case "+":
		if bothInt {
			return ia + ib, nil
		}
		return fa + fb, nil
	case "-":
		if bothInt {
			return ia - ib, nil
		}
		return fa - fb, nil
	case "*":
		if bothInt {
			return ia * ib, nil
		}
		return fa * fb, nil
	case "/":
		if fb == 0 {
			return nil, rerr("division by zero")
		}
		return fa / fb, nil
	case "//":
		if fb == 0 {
			return nil, rerr("integer division or modulo by zero")
		}
		if bothInt {
			q := ia / ib
			if (ia%ib != 0) && ((ia < 0) != (ib < 0)) {
				q--
			}
			return q, nil
		}
		return math.Floor(fa / fb), nil
	case "%":
		if fb == 0 {
			return nil, rerr("integer division or modulo by zero")
		}
		if bothInt {
			m := ia % ib
			if m != 0 && ((m < 0) != (ib < 0)) {
				m += ib
			}
			return m, nil
		}
		m := math.Mod(fa, fb)
		if m != 0 && ((m < 0) != (fb < 0)) {
			m += fb
		}
		return m, nil
	case "**":
		if bothInt && ib >= 0 {
			// By squaring: the same result modulo 2^64 as ib multiplications.
			res, base := 1, ia
			for e := ib; e > 0; e >>= 1 {
				if e&1 == 1 {
					res *= base
				}
				base *= base
			}
			return res, nil
		}
		return math.Pow(fa, fb), nil
	}
	return nil, rerr("unsupported operator %s", op)
}

func repeatString(s string, n int) (any, error) {
	if n <= 0 {
		return "", nil
	}
	if !fits(n, len(s), 0) {
		return nil, valueLimit()
	}
	return strings.Repeat(s, n), nil
}

// ---------------------------------------------------------------- attribute and item access

var dictMethods = map[string]bool{"items": true, "keys": true, "values": true, "get": true, "copy": true}
var dictUnsafe = map[string]bool{"pop": true, "popitem": true, "update": true, "clear": true, "setdefault": true, "fromkeys": true}
var strMethods = map[string]bool{
	"strip": true, "lstrip": true, "rstrip": true, "split": true, "rsplit": true, "splitlines": true,
	"startswith": true, "endswith": true, "lower": true, "upper": true, "title": true, "capitalize": true,
	"replace": true, "find": true, "rfind": true, "index": true, "count": true, "join": true, "format": true,
	"isdigit": true, "isalpha": true, "isalnum": true, "isspace": true, "islower": true, "isupper": true,
	"swapcase": true, "casefold": true, "removeprefix": true, "removesuffix": true, "partition": true,
	"rpartition": true, "zfill": true, "center": true, "ljust": true, "rjust": true, "encode": false,
}
var listMethods = map[string]bool{"index": true, "count": true, "copy": true}

func getattr(obj any, name string) (any, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, undefinedErr(o)
	case *Dict:
		if dictMethods[name] {
			return &boundMethod{o, name}, nil
		}
		if dictUnsafe[name] {
			return nil, rerr("access to attribute '%s' of 'dict' object is unsafe", name)
		}
		if v, ok := o.Get(name); ok {
			return v, nil
		}
		return Undefined{name}, nil
	case string:
		if strMethods[name] {
			return &boundMethod{o, name}, nil
		}
	case []any:
		if listMethods[name] {
			return &boundMethod{o, name}, nil
		}
		if name == "append" || name == "pop" || name == "extend" || name == "insert" || name == "remove" || name == "sort" || name == "reverse" || name == "clear" {
			return nil, rerr("access to attribute '%s' of 'list' object is unsafe", name)
		}
	case *Namespace:
		if v, ok := o.vals.Get(name); ok {
			return v, nil
		}
	case *loopInfo:
		return o.attr(name), nil
	}
	return Undefined{name}, nil
}

func getitem(obj any, k any) (any, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, undefinedErr(o)
	case *Dict:
		if hashable(k) {
			if v, ok := o.Get(k); ok {
				return v, nil
			}
		}
	case []any:
		if i, ok := asInt(k); ok {
			if i < 0 {
				i += len(o)
			}
			if i >= 0 && i < len(o) {
				return o[i], nil
			}
			return Undefined{}, nil
		}
	case Tuple:
		if i, ok := asInt(k); ok {
			if i < 0 {
				i += len(o)
			}
			if i >= 0 && i < len(o) {
				return o[i], nil
			}
			return Undefined{}, nil
		}
	case string:
		if i, ok := asInt(k); ok {
			if i < 0 {
				i += utf8.RuneCountInString(o)
			}
			if i >= 0 && i < len(o) { // the i-th rune, without converting the string
				for _, r := range o {
					if i == 0 {
						return string(r), nil
					}
					i--
				}
			}
			return Undefined{}, nil
		}
	case *loopInfo:
		if s, ok := k.(string); ok {
			return o.attr(s), nil
		}
	}
	if s, ok := k.(string); ok {
		return getattr(obj, s)
	}
	return Undefined{}, nil
}

func sliceIndices(n int, start, stop, step any) (int, int, int, error) {
	st := 1
	if step != nil {
		s, ok := asInt(step)
		if !ok {
			return 0, 0, 0, rerr("slice indices must be integers or None")
		}
		if s == 0 {
			return 0, 0, 0, rerr("slice step cannot be zero")
		}
		st = s
	}
	conv := func(v any, def int) (int, error) {
		if v == nil {
			return def, nil
		}
		i, ok := asInt(v)
		if !ok {
			return 0, rerr("slice indices must be integers or None")
		}
		if i < 0 {
			i += n
			if i < 0 {
				if st < 0 {
					i = -1
				} else {
					i = 0
				}
			}
		} else if i >= n {
			if st < 0 {
				i = n - 1
			} else {
				i = n
			}
		}
		return i, nil
	}
	var a, b int
	var err error
	if st > 0 {
		if a, err = conv(start, 0); err != nil {
			return 0, 0, 0, err
		}
		if b, err = conv(stop, n); err != nil {
			return 0, 0, 0, err
		}
	} else {
		if a, err = conv(start, n-1); err != nil {
			return 0, 0, 0, err
		}
		if b, err = conv(stop, -1); err != nil {
			return 0, 0, 0, err
		}
	}
	return a, b, st, nil
}

func sliceList(l []any, start, stop, step any) ([]any, error) {
	a, b, st, err := sliceIndices(len(l), start, stop, step)
	if err != nil {
		return nil, err
	}
	out := []any{}
	if st > 0 {
		for i := a; i < b; i += st {
			out = append(out, l[i])
		}
	} else {
		for i := a; i > b; i += st {
			out = append(out, l[i])
		}
	}
	return out, nil
}

func slice(obj, start, stop, step any) (any, error) {
	switch o := obj.(type) {
	case []any:
		return sliceList(o, start, stop, step)
	case Tuple:
		l, err := sliceList(o, start, stop, step)
		return Tuple(l), err
	case string:
		if step == nil && isASCII(o) {
			a, b, _, err := sliceIndices(len(o), start, stop, nil)
			if err != nil {
				return nil, err
			}
			if a >= b {
				return "", nil
			}
			return o[a:b], nil
		}
		if len(o) > maxParts && utf8.RuneCountInString(o) > maxParts {
			return nil, valueLimit()
		}
		rs := []rune(o)
		l := make([]any, len(rs))
		for i, r := range rs {
			l[i] = r
		}
		out, err := sliceList(l, start, stop, step)
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		for _, r := range out {
			b.WriteRune(r.(rune))
		}
		return b.String(), nil
	case Undefined:
		return nil, undefinedErr(o)
	}
	return nil, rerr("'%s' object is not subscriptable", typeName(obj))
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func (l *loopInfo) attr(name string) any {
	n := len(l.items)
	switch name {
	case "index0":
		return l.index0
	case "index":
		return l.index0 + 1
	case "revindex":
		return n - l.index0
	case "revindex0":
		return n - l.index0 - 1
	case "first":
		return l.index0 == 0
	case "last":
		return l.index0 == n-1
	case "length":
		return n
	case "depth":
		return l.depth0 + 1
	case "depth0":
		return l.depth0
	case "previtem":
		if l.index0 > 0 {
			return l.items[l.index0-1]
		}
		return Undefined{"previtem"}
	case "nextitem":
		if l.index0+1 < n {
			return l.items[l.index0+1]
		}
		return Undefined{"nextitem"}
	case "cycle", "changed":
		return &boundMethod{l, name}
	}
	return Undefined{name}
}

// ---------------------------------------------------------------- calls

func (st *state) evalArgs(argExprs []expr, kwExprs []kwarg, dynArgs, dynKw expr, fr *frame) ([]any, map[string]any, error) {
	var args []any
	for _, a := range argExprs {
		v, err := st.eval(a, fr)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, v)
	}
	if dynArgs != nil {
		v, err := st.eval(dynArgs, fr)
		if err != nil {
			return nil, nil, err
		}
		items, err := iterate(v)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, items...)
	}
	var kw map[string]any
	if len(kwExprs) > 0 || dynKw != nil {
		kw = map[string]any{}
	}
	var order []string
	for _, k := range kwExprs {
		v, err := st.eval(k.e, fr)
		if err != nil {
			return nil, nil, err
		}
		if _, dup := kw[k.name]; !dup {
			order = append(order, k.name)
		}
		kw[k.name] = v
	}
	if dynKw != nil {
		v, err := st.eval(dynKw, fr)
		if err != nil {
			return nil, nil, err
		}
		d, ok := v.(*Dict)
		if !ok {
			return nil, nil, rerr("argument after ** must be a mapping")
		}
		for i, k := range d.keys {
			if s, ok := k.(string); ok {
				if _, dup := kw[s]; !dup {
					order = append(order, s)
				}
				kw[s] = d.vals[i]
			}
		}
	}
	if len(order) > 1 {
		kw[kwOrderKey] = order
	}
	return args, kw, nil
}

func (st *state) evalCall(e *callExpr, fr *frame, caller *macro) (any, error) {
	fn, err := st.eval(e.fn, fr)
	if err != nil {
		return nil, err
	}
	args, kw, err := st.evalArgs(e.args, e.kwargs, e.dynArgs, e.dynKwargs, fr)
	if err != nil {
		return nil, err
	}
	if caller != nil {
		if kw == nil {
			kw = map[string]any{}
		}
		kw["caller"] = caller
	}
	return st.call(fn, args, kw)
}

func (st *state) call(fn any, args []any, kw map[string]any) (any, error) {
	switch f := fn.(type) {
	case *macro:
		return st.callMacro(f, args, kw)
	case builtinFunc:
		return f(st, args, kw)
	case *boundMethod:
		return st.callMethod(f, args, kw)
	case *loopInfo:
		if !f.loopFn.recursive || len(args) != 1 {
			return nil, rerr("'LoopContext' object is not callable")
		}
		var b strings.Builder
		if err := st.execFor(f.loopFn, args[0], f.fr, &b, f.depth0+1); err != nil {
			return nil, err
		}
		return b.String(), nil
	case Undefined:
		return nil, undefinedErr(f)
	}
	return nil, rerr("'%s' object is not callable", typeName(fn))
}

func (st *state) callMacro(m *macro, args []any, kw map[string]any) (any, error) {
	if err := st.step(); err != nil {
		return nil, err
	}
	st.depth++
	defer func() { st.depth-- }()
	if st.depth > maxDepth {
		return nil, &LimitError{Limit: "recursion_depth", Max: maxDepth}
	}
	fr := newFrame(m.closure)
	d := m.def
	var varargs []any
	for i, a := range args {
		if i < len(d.params) {
			fr.vars[d.params[i]] = a
		} else {
			varargs = append(varargs, a)
		}
	}
	kwargs := NewDict()
	for _, k := range orderedKeys(kw) {
		v := kw[k]
		if k == "caller" {
			fr.vars["caller"] = v
			continue
		}
		found := false
		for _, p := range d.params {
			if p == k {
				found = true
				break
			}
		}
		if found {
			fr.vars[k] = v
		} else {
			kwargs.Set(k, v)
		}
	}
	for i, p := range d.params {
		if _, ok := fr.vars[p]; ok {
			continue
		}
		if d.defaults[i] != nil {
			v, err := st.eval(d.defaults[i], fr)
			if err != nil {
				return nil, err
			}
			fr.vars[p] = v
		} else {
			fr.vars[p] = Undefined{p}
		}
	}
	if varargs == nil {
		varargs = []any{}
	}
	fr.vars["varargs"] = Tuple(varargs)
	fr.vars["kwargs"] = kwargs
	var b strings.Builder
	if err := st.exec(d.body, fr, &b); err != nil {
		if err == errBreak || err == errContinue {
			return nil, rerr("break/continue outside loop")
		}
		return nil, err
	}
	return b.String(), nil
}

// accounted charges a result to the allocation budget.
func (st *state) accounted(v any, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return v, st.account(v)
}
