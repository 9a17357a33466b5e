package chattmpl

import (
	"fmt"
	"strconv"
)

// ---------------------------------------------------------------- AST

type node interface{}

type (
	textNode   struct{ s string }
	outputNode struct{ e expr }
	ifNode     struct {
		conds  []expr
		bodies [][]node
		els    []node
	}
	forNode struct {
		target    target
		iter      expr
		cond      expr
		body, els []node
		recursive bool
	}
	setNode struct {
		target target
		e      expr
	}
	setBlockNode struct {
		target  target
		filters []*filterExpr // applied in order to the captured body
		body    []node
	}
	macroNode struct {
		name string
		m    *macroDef
	}
	callBlockNode struct {
		caller *macroDef
		call   *callExpr
	}
	filterBlockNode struct {
		filters []*filterExpr
		body    []node
	}
	generationNode struct{ body []node }
	withNode       struct {
		names []string
		vals  []expr
		body  []node
	}
	breakNode    struct{}
	continueNode struct{}
)

type macroDef struct {
	name     string
	params   []string
	defaults []expr // len(params); nil = required
	body     []node
}

// target is an assignment target: a name, ns.attr or a tuple of names.
type target struct {
	name  string
	attr  string // for ns.attr
	names []string
}

type expr interface{}

type (
	constExpr   struct{ v any }
	nameExpr    struct{ name string }
	listExpr    struct{ items []expr }
	tupleExpr   struct{ items []expr }
	dictExpr    struct{ keys, vals []expr }
	getattrExpr struct {
		obj  expr
		attr string
	}
	getitemExpr struct {
		obj expr
		key expr
	}
	sliceExpr struct {
		obj               expr
		start, stop, step expr
	}
	callExpr struct {
		fn                 expr
		args               []expr
		kwargs             []kwarg
		dynArgs, dynKwargs expr
	}
	filterExpr struct {
		obj    expr // nil in filter blocks
		name   string
		args   []expr
		kwargs []kwarg
	}
	testExpr struct {
		obj    expr
		name   string
		args   []expr
		kwargs []kwarg
		negate bool
	}
	binExpr struct {
		op   string
		l, r expr
	}
	unaryExpr struct {
		op string
		e  expr
	}
	condExpr struct {
		cond, yes, no expr // no may be nil
	}
	concatExpr  struct{ items []expr }
	compareExpr struct {
		first expr
		ops   []string
		rest  []expr
	}
)

type kwarg struct {
	name string
	e    expr
}

// ---------------------------------------------------------------- parser

type parser struct {
	toks  []token
	pos   int
	depth int // recursion of the parser itself, bounded by MaxParseDepth
}

// enter counts one level of parser recursion; leave undoes it.
func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxParseDepth {
		return &LimitError{Limit: "parse_depth", Max: MaxParseDepth}
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

func (p *parser) cur() token  { return p.toks[p.pos] }
func (p *parser) next() token { t := p.toks[p.pos]; p.pos++; return t }
func (p *parser) peek(n int) token {
	if p.pos+n < len(p.toks) {
		return p.toks[p.pos+n]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) errf(format string, a ...any) error {
	return &TemplateSyntaxError{p.cur().line, fmt.Sprintf(format, a...)}
}

func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.kind == tOp && t.val == op
}

func (p *parser) isName(n string) bool {
	t := p.cur()
	return t.kind == tName && t.val == n
}

func (p *parser) expectOp(op string) error {
	if !p.isOp(op) {
		return p.errf("expected '%s', got %s", op, p.cur())
	}
	p.pos++
	return nil
}

func (p *parser) expectKind(k tokKind) (token, error) {
	t := p.cur()
	if t.kind != k {
		want := token{kind: k}
		if k == tName {
			return t, p.errf("expected name, got %s", t)
		}
		return t, p.errf("expected %s, got %s", want, t)
	}
	p.pos++
	return t, nil
}

func (p *parser) expectName(n string) error {
	if !p.isName(n) {
		return p.errf("expected '%s', got %s", n, p.cur())
	}
	p.pos++
	return nil
}

func parse(toks []token) ([]node, error) {
	p := &parser{toks: toks}
	body, end, err := p.subparse(nil)
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errf("unexpected '%s'", end)
	}
	// Operator, filter and attribute chains are parsed by loops, not
	// recursion, yet evaluate recursively: bound the tree's depth too.
	if nodesDepth(body, 0) > MaxParseDepth {
		return nil, &LimitError{Limit: "parse_depth", Max: MaxParseDepth}
	}
	return body, nil
}

// subparse parses nodes until a block tag whose name is in ends (returned, with
// the parser positioned after the name) or EOF.
func (p *parser) subparse(ends []string) ([]node, string, error) {
	if err := p.enter(); err != nil {
		return nil, "", err
	}
	defer p.leave()
	var body []node
	for {
		t := p.cur()
		switch t.kind {
		case tEOF:
			if ends != nil {
				return nil, "", p.errf("unexpected end of template, expected one of %v", ends)
			}
			return body, "", nil
		case tText:
			p.pos++
			body = append(body, &textNode{t.val})
		case tVarBegin:
			p.pos++
			e, err := p.parseTuple(false)
			if err != nil {
				return nil, "", err
			}
			if _, err := p.expectKind(tVarEnd); err != nil {
				return nil, "", err
			}
			body = append(body, &outputNode{e})
		case tBlockBegin:
			p.pos++
			nt := p.cur()
			if nt.kind != tName {
				return nil, "", p.errf("expected statement name, got %s", nt)
			}
			for _, e := range ends {
				if nt.val == e {
					p.pos++
					return body, e, nil
				}
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, "", err
			}
			body = append(body, n)
		default:
			return nil, "", p.errf("unexpected %s", t)
		}
	}
}

func (p *parser) endBlock() error {
	_, err := p.expectKind(tBlockEnd)
	return err
}

func (p *parser) parseStatement() (node, error) {
	t := p.next()
	switch t.val {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor()
	case "set":
		return p.parseSet()
	case "macro":
		return p.parseMacro()
	case "call":
		return p.parseCallBlock()
	case "filter":
		return p.parseFilterBlock()
	case "generation":
		if err := p.endBlock(); err != nil {
			return nil, err
		}
		body, _, err := p.subparse([]string{"endgeneration"})
		if err != nil {
			return nil, err
		}
		return &generationNode{body}, p.endBlock()
	case "with":
		return p.parseWith()
	case "break":
		return &breakNode{}, p.endBlock()
	case "continue":
		return &continueNode{}, p.endBlock()
	}
	p.pos--
	return nil, p.errf("unknown tag '%s'", t.val)
}

func (p *parser) parseIf() (node, error) {
	n := &ifNode{}
	for {
		c, err := p.parseTuple(false)
		if err != nil {
			return nil, err
		}
		if err := p.endBlock(); err != nil {
			return nil, err
		}
		body, end, err := p.subparse([]string{"elif", "else", "endif"})
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, c)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.endBlock(); err != nil {
				return nil, err
			}
			n.els, _, err = p.subparse([]string{"endif"})
			if err != nil {
				return nil, err
			}
		}
		return n, p.endBlock()
	}
}

func (p *parser) parseAssignTarget(allowAttr bool) (target, error) {
	t, err := p.expectKind(tName)
	if err != nil {
		return target{}, err
	}
	if allowAttr && p.isOp(".") {
		p.pos++
		a, err := p.expectKind(tName)
		if err != nil {
			return target{}, err
		}
		return target{name: t.val, attr: a.val}, nil
	}
	if !p.isOp(",") {
		return target{name: t.val}, nil
	}
	names := []string{t.val}
	for p.isOp(",") {
		p.pos++
		if p.cur().kind != tName {
			break
		}
		names = append(names, p.next().val)
	}
	return target{names: names}, nil
}

func (p *parser) parseFor() (node, error) {
	var tg target
	var err error
	if p.isOp("(") {
		p.pos++
		tg, err = p.parseAssignTarget(false)
		if err == nil {
			err = p.expectOp(")")
		}
		if tg.names == nil && err == nil {
			tg = target{names: []string{tg.name}}
		}
	} else {
		tg, err = p.parseAssignTarget(false)
	}
	if err != nil {
		return nil, err
	}
	if err := p.expectName("in"); err != nil {
		return nil, err
	}
	iter, err := p.parseTupleNoCond()
	if err != nil {
		return nil, err
	}
	n := &forNode{target: tg, iter: iter}
	if p.isName("if") {
		p.pos++
		n.cond, err = p.parseExpr(true)
		if err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		p.pos++
		n.recursive = true
	}
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	body, end, err := p.subparse([]string{"else", "endfor"})
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.endBlock(); err != nil {
			return nil, err
		}
		n.els, _, err = p.subparse([]string{"endfor"})
		if err != nil {
			return nil, err
		}
	}
	return n, p.endBlock()
}

// parseTupleNoCond parses the iterable of a for loop, where a trailing "if"
// belongs to the loop rather than a conditional expression.
func (p *parser) parseTupleNoCond() (expr, error) {
	first, err := p.parseExpr(false)
	if err != nil {
		return nil, err
	}
	if !p.isOp(",") {
		return first, nil
	}
	items := []expr{first}
	for p.isOp(",") {
		p.pos++
		if p.cur().kind == tBlockEnd || p.isName("if") {
			break
		}
		e, err := p.parseExpr(false)
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	return &tupleExpr{items}, nil
}

func (p *parser) parseSet() (node, error) {
	tg, err := p.parseAssignTarget(true)
	if err != nil {
		return nil, err
	}
	if p.isOp("=") {
		p.pos++
		e, err := p.parseTuple(false)
		if err != nil {
			return nil, err
		}
		return &setNode{tg, e}, p.endBlock()
	}
	n := &setBlockNode{target: tg}
	for p.isOp("|") {
		p.pos++
		f, err := p.parseFilterCall(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
	}
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	n.body, _, err = p.subparse([]string{"endset"})
	if err != nil {
		return nil, err
	}
	return n, p.endBlock()
}

func (p *parser) parseSignature() ([]string, []expr, error) {
	var params []string
	var defs []expr
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	for !p.isOp(")") {
		if len(params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		t, err := p.expectKind(tName)
		if err != nil {
			return nil, nil, err
		}
		var d expr
		if p.isOp("=") {
			p.pos++
			d, err = p.parseExpr(true)
			if err != nil {
				return nil, nil, err
			}
		}
		params = append(params, t.val)
		defs = append(defs, d)
	}
	p.pos++
	return params, defs, nil
}

func (p *parser) parseMacro() (node, error) {
	t, err := p.expectKind(tName)
	if err != nil {
		return nil, err
	}
	params, defs, err := p.parseSignature()
	if err != nil {
		return nil, err
	}
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	body, _, err := p.subparse([]string{"endmacro"})
	if err != nil {
		return nil, err
	}
	if p.cur().kind == tName { // {% endmacro name %}
		p.pos++
	}
	return &macroNode{t.val, &macroDef{t.val, params, defs, body}}, p.endBlock()
}

func (p *parser) parseCallBlock() (node, error) {
	var params []string
	var defs []expr
	var err error
	if p.isOp("(") {
		params, defs, err = p.parseSignature()
		if err != nil {
			return nil, err
		}
	}
	e, err := p.parseExpr(true)
	if err != nil {
		return nil, err
	}
	call, ok := e.(*callExpr)
	if !ok {
		return nil, p.errf("expected call")
	}
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	body, _, err := p.subparse([]string{"endcall"})
	if err != nil {
		return nil, err
	}
	return &callBlockNode{&macroDef{"caller", params, defs, body}, call}, p.endBlock()
}

func (p *parser) parseFilterBlock() (node, error) {
	n := &filterBlockNode{}
	for {
		f, err := p.parseFilterCall(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
		if !p.isOp("|") {
			break
		}
		p.pos++
	}
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	var err error
	n.body, _, err = p.subparse([]string{"endfilter"})
	if err != nil {
		return nil, err
	}
	return n, p.endBlock()
}

func (p *parser) parseWith() (node, error) {
	n := &withNode{}
	for p.cur().kind != tBlockEnd {
		if len(n.names) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		t, err := p.expectKind(tName)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		e, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		n.names = append(n.names, t.val)
		n.vals = append(n.vals, e)
	}
	if err := p.endBlock(); err != nil {
		return nil, err
	}
	var err error
	n.body, _, err = p.subparse([]string{"endwith"})
	if err != nil {
		return nil, err
	}
	return n, p.endBlock()
}

// ---------------------------------------------------------------- expressions

// parseTuple parses an expression, or an unparenthesised tuple "a, b".
func (p *parser) parseTuple(explicitParens bool) (expr, error) {
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if !p.isOp(",") {
				break
			}
			p.pos++
			isTuple = true
		}
		if p.cur().kind == tVarEnd || p.cur().kind == tBlockEnd || (explicitParens && p.isOp(")")) {
			break
		}
		e, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	if !isTuple {
		if len(items) == 0 {
			if explicitParens {
				return &tupleExpr{}, nil
			}
			return nil, p.errf("expected an expression, got %s", p.cur())
		}
		return items[0], nil
	}
	return &tupleExpr{items}, nil
}

func (p *parser) parseExpr(withCond bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	if !withCond {
		return p.parseOr()
	}
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.isName("if") {
		p.pos++
		c, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var no expr
		if p.isName("else") {
			p.pos++
			no, err = p.parseExpr(true)
			if err != nil {
				return nil, err
			}
		}
		e = &condExpr{c, e, no}
	}
	return e, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.isName("or") {
		p.pos++
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &binExpr{"or", l, r}
	}
	return l, nil
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.isName("and") {
		p.pos++
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		l = &binExpr{"and", l, r}
	}
	return l, nil
}

func (p *parser) parseNot() (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	if p.isName("not") {
		p.pos++
		e, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{"not", e}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{first: first}
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == ">" || t.val == "<=" || t.val == ">="):
			op = t.val
			p.pos++
		case p.isName("in"):
			op = "in"
			p.pos++
		case p.isName("not") && p.peek(1).kind == tName && p.peek(1).val == "in":
			op = "notin"
			p.pos += 2
		default:
			if len(c.ops) == 0 {
				return first, nil
			}
			return c, nil
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
}

func (p *parser) parseMath1() (expr, error) {
	l, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		op := p.next().val
		r, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op, l, r}
	}
	return l, nil
}

func (p *parser) parseConcat() (expr, error) {
	first, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	if !p.isOp("~") {
		return first, nil
	}
	items := []expr{first}
	for p.isOp("~") {
		p.pos++
		e, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	return &concatExpr{items}, nil
}

func (p *parser) parseMath2() (expr, error) {
	l, err := p.parsePow()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		op := p.next().val
		r, err := p.parsePow()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op, l, r}
	}
	return l, nil
}

func (p *parser) parsePow() (expr, error) {
	l, err := p.parseUnary(true)
	if err != nil {
		return nil, err
	}
	for p.isOp("**") {
		p.pos++
		r, err := p.parseUnary(true)
		if err != nil {
			return nil, err
		}
		l = &binExpr{"**", l, r}
	}
	return l, nil
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var e expr
	var err error
	if p.isOp("-") || p.isOp("+") {
		op := p.next().val
		e, err = p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &unaryExpr{op, e}
	} else {
		e, err = p.parsePrimary()
		if err != nil {
			return nil, err
		}
	}
	e, err = p.parsePostfix(e)
	if err != nil {
		return nil, err
	}
	if withFilter {
		e, err = p.parseFilterExpr(e)
	}
	return e, err
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tName:
		p.pos++
		switch t.val {
		case "true", "True":
			return &constExpr{true}, nil
		case "false", "False":
			return &constExpr{false}, nil
		case "none", "None":
			return &constExpr{nil}, nil
		}
		return &nameExpr{t.val}, nil
	case tString:
		p.pos++
		s := t.val
		for p.cur().kind == tString {
			s += p.next().val
		}
		return &constExpr{s}, nil
	case tInt:
		p.pos++
		i, err := strconv.ParseInt(t.val, 10, 64)
		if err != nil {
			f, _ := strconv.ParseFloat(t.val, 64)
			return &constExpr{f}, nil
		}
		return &constExpr{int(i)}, nil
	case tFloat:
		p.pos++
		f, err := strconv.ParseFloat(t.val, 64)
		if err != nil {
			return nil, p.errf("bad float %s", t.val)
		}
		return &constExpr{f}, nil
	case tOp:
		switch t.val {
		case "(":
			p.pos++
			e, err := p.parseTuple(true)
			if err != nil {
				return nil, err
			}
			return e, p.expectOp(")")
		case "[":
			p.pos++
			l := &listExpr{}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				e, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, e)
			}
			p.pos++
			return l, nil
		case "{":
			p.pos++
			d := &dictExpr{}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			p.pos++
			return d, nil
		}
	}
	return nil, p.errf("unexpected %s", t)
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("."):
			p.pos++
			t := p.next()
			switch t.kind {
			case tName:
				e = &getattrExpr{e, t.val}
			case tInt:
				i, _ := strconv.Atoi(t.val)
				e = &getitemExpr{e, &constExpr{i}}
			default:
				return nil, p.errf("expected name or number after '.'")
			}
		case p.isOp("["):
			p.pos++
			var err error
			e, err = p.parseSubscript(e)
			if err != nil {
				return nil, err
			}
		case p.isOp("("):
			var err error
			e, err = p.parseCall(e)
			if err != nil {
				return nil, err
			}
		default:
			return e, nil
		}
	}
}

func (p *parser) parseSubscript(obj expr) (expr, error) {
	var parts [3]expr
	idx := 0
	isSlice := false
	for !p.isOp("]") {
		if p.isOp(":") {
			p.pos++
			isSlice = true
			idx++
			if idx > 2 {
				return nil, p.errf("bad slice")
			}
			continue
		}
		e, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		if !isSlice && p.isOp(",") { // x[a, b] tuple key
			items := []expr{e}
			for p.isOp(",") {
				p.pos++
				if p.isOp("]") {
					break
				}
				e2, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				items = append(items, e2)
			}
			e = &tupleExpr{items}
		}
		parts[idx] = e
	}
	p.pos++
	if isSlice {
		return &sliceExpr{obj, parts[0], parts[1], parts[2]}, nil
	}
	if parts[0] == nil {
		return nil, p.errf("empty subscript")
	}
	return &getitemExpr{obj, parts[0]}, nil
}

func (p *parser) parseArgs() ([]expr, []kwarg, expr, expr, error) {
	var args []expr
	var kws []kwarg
	var dynArgs, dynKw expr
	if err := p.expectOp("("); err != nil {
		return nil, nil, nil, nil, err
	}
	first := true
	for !p.isOp(")") {
		if !first {
			if err := p.expectOp(","); err != nil {
				return nil, nil, nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		first = false
		switch {
		case p.isOp("*"):
			p.pos++
			e, err := p.parseExpr(true)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			dynArgs = e
		case p.isOp("**"):
			p.pos++
			e, err := p.parseExpr(true)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			dynKw = e
		case p.cur().kind == tName && p.peek(1).kind == tOp && p.peek(1).val == "=":
			name := p.next().val
			p.pos++
			e, err := p.parseExpr(true)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			kws = append(kws, kwarg{name, e})
		default:
			e, err := p.parseExpr(true)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			args = append(args, e)
		}
	}
	p.pos++
	return args, kws, dynArgs, dynKw, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	args, kws, da, dk, err := p.parseArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{fn, args, kws, da, dk}, nil
}

func (p *parser) parseFilterCall(obj expr) (*filterExpr, error) {
	t, err := p.expectKind(tName)
	if err != nil {
		return nil, err
	}
	name := t.val
	for p.isOp(".") {
		p.pos++
		t2, err := p.expectKind(tName)
		if err != nil {
			return nil, err
		}
		name += "." + t2.val
	}
	f := &filterExpr{obj: obj, name: name}
	if p.isOp("(") {
		args, kws, _, _, err := p.parseArgs()
		if err != nil {
			return nil, err
		}
		f.args, f.kwargs = args, kws
	}
	return f, nil
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.pos++
			f, err := p.parseFilterCall(e)
			if err != nil {
				return nil, err
			}
			e = f
		case p.isName("is"):
			p.pos++
			neg := false
			if p.isName("not") {
				p.pos++
				neg = true
			}
			t, err := p.expectKind(tName)
			if err != nil {
				return nil, err
			}
			name := t.val
			for p.isOp(".") {
				p.pos++
				t2, err := p.expectKind(tName)
				if err != nil {
					return nil, err
				}
				name += "." + t2.val
			}
			te := &testExpr{obj: e, name: name, negate: neg}
			c := p.cur()
			switch {
			case p.isOp("("):
				args, kws, _, _, err := p.parseArgs()
				if err != nil {
					return nil, err
				}
				te.args, te.kwargs = args, kws
			case (c.kind == tName || c.kind == tString || c.kind == tInt || c.kind == tFloat ||
				(c.kind == tOp && (c.val == "(" || c.val == "[" || c.val == "{"))) &&
				!(c.kind == tName && (c.val == "else" || c.val == "or" || c.val == "and")):
				if c.kind == tName && c.val == "is" {
					return nil, p.errf("You cannot chain multiple tests with is")
				}
				a, err := p.parsePrimary()
				if err != nil {
					return nil, err
				}
				a, err = p.parsePostfix(a)
				if err != nil {
					return nil, err
				}
				te.args = []expr{a}
			}
			e = te
		case p.isOp("("):
			var err error
			e, err = p.parseCall(e)
			if err != nil {
				return nil, err
			}
		default:
			return e, nil
		}
	}
}

// nodesDepth is the depth of the deepest node or expression under nodes, at
// depth d; it stops descending past MaxParseDepth, so its own recursion is
// bounded.
func nodesDepth(nodes []node, d int) int {
	m := d
	if d > MaxParseDepth {
		return d
	}
	for _, n := range nodes {
		m = max(m, nodeDepth(n, d+1))
	}
	return m
}

func nodeDepth(n node, d int) int {
	m := d
	es := func(xs ...expr) {
		for _, x := range xs {
			m = max(m, exprDepth(x, d+1))
		}
	}
	ns := func(b []node) { m = max(m, nodesDepth(b, d+1)) }
	macro := func(md *macroDef) {
		if md != nil {
			es(md.defaults...)
			ns(md.body)
		}
	}
	switch n := n.(type) {
	case *outputNode:
		es(n.e)
	case *ifNode:
		es(n.conds...)
		for _, b := range n.bodies {
			ns(b)
		}
		ns(n.els)
	case *forNode:
		es(n.iter, n.cond)
		ns(n.body)
		ns(n.els)
	case *setNode:
		es(n.e)
	case *setBlockNode:
		for _, f := range n.filters {
			es(f)
		}
		ns(n.body)
	case *macroNode:
		macro(n.m)
	case *callBlockNode:
		macro(n.caller)
		es(n.call)
	case *filterBlockNode:
		for _, f := range n.filters {
			es(f)
		}
		ns(n.body)
	case *generationNode:
		ns(n.body)
	case *withNode:
		es(n.vals...)
		ns(n.body)
	}
	return m
}

func exprDepth(e expr, d int) int {
	if e == nil || d > MaxParseDepth {
		return d
	}
	m := d
	es := func(xs ...expr) {
		for _, x := range xs {
			m = max(m, exprDepth(x, d+1))
		}
	}
	kws := func(kw []kwarg) {
		for _, k := range kw {
			es(k.e)
		}
	}
	switch e := e.(type) {
	case *listExpr:
		es(e.items...)
	case *tupleExpr:
		es(e.items...)
	case *dictExpr:
		es(e.keys...)
		es(e.vals...)
	case *getattrExpr:
		es(e.obj)
	case *getitemExpr:
		es(e.obj, e.key)
	case *sliceExpr:
		es(e.obj, e.start, e.stop, e.step)
	case *callExpr:
		es(e.fn, e.dynArgs, e.dynKwargs)
		es(e.args...)
		kws(e.kwargs)
	case *filterExpr:
		es(e.obj)
		es(e.args...)
		kws(e.kwargs)
	case *testExpr:
		es(e.obj)
		es(e.args...)
		kws(e.kwargs)
	case *binExpr:
		es(e.l, e.r)
	case *unaryExpr:
		es(e.e)
	case *condExpr:
		es(e.cond, e.yes, e.no)
	case *concatExpr:
		es(e.items...)
	case *compareExpr:
		es(e.first)
		es(e.rest...)
	}
	return m
}
