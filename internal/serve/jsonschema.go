package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// The JSON-schema subset of structured outputs, after OpenAI's strict mode:
// type (string, number, integer, boolean, null, object, array, or a list of
// them), properties with required, additionalProperties, items, enum,
// const, anyOf, $ref (a JSON pointer into the same document: #, #/$defs/x,
// #/definitions/x, ...) with $defs/definitions, and the annotations title,
// description, $comment, default, examples, $schema and $id. Any other
// keyword (pattern, format, minimum, minItems, oneOf, ...) is refused with
// the path of the keyword, rather than silently ignored: the output would
// not be guaranteed to validate.
//
// Strict mode (strict: true) also requires what OpenAI requires of every
// object: additionalProperties false and every property listed in
// required. Without strict, properties not in required may be left out
// (they are generated in schema order when present) and
// additionalProperties may be true or a schema (no extra property is ever
// generated, which every such schema allows).

const (
	maxSchemaNodes = 10000 // grammar nodes compiled from one schema
	maxSchemaDepth = 64    // nesting of schema objects
	maxEnumValues  = 1000
)

// schemaError is a schema the grammar cannot enforce, at path.
type schemaError struct {
	path, msg string
}

func (e *schemaError) Error() string { return e.path + ": " + e.msg }

var schemaAnnotations = map[string]bool{"title": true, "description": true, "$comment": true, "default": true, "examples": true, "$schema": true, "$id": true}

var schemaKeywords = map[string]bool{"type": true, "properties": true, "required": true, "additionalProperties": true, "items": true,
	"enum": true, "const": true, "anyOf": true, "$ref": true, "$defs": true, "definitions": true}

type schemaCompiler struct {
	root    json.RawMessage
	base    string // the root schema's path
	strict  bool
	lenient bool // ignore what the subset does not support (non-strict tool parameters)
	refs    map[string]*jnode
	nodes   []*jnode
}

// compileSchema compiles a JSON schema to its grammar; errors are
// *schemaError with paths under path.
func compileSchema(raw json.RawMessage, strict bool, path string) (*jnode, error) {
	return compileSchemaMode(raw, strict, false, path)
}

// compileSchemaMode is compileSchema, lenient or not: a lenient compile
// (the parameters of a tool without strict) ignores keywords outside the
// subset, takes oneOf as anyOf and anyOf beside other keywords alone, and
// reads a missing or malformed schema as any value.
func compileSchemaMode(raw json.RawMessage, strict, lenient bool, path string) (*jnode, error) {
	if lenient && isNull(raw) {
		return anyGrammar().value, nil
	}
	c := &schemaCompiler{root: raw, base: path, strict: strict, lenient: lenient, refs: map[string]*jnode{}}
	n, err := c.compile(raw, path, 0)
	if err != nil {
		return nil, err
	}
	for ref, r := range c.refs {
		t := r
		for k := 0; t != nil && t.kind == jRef; k++ {
			if k > len(c.refs) {
				return nil, &schemaError{path, fmt.Sprintf("$ref %q refers to itself without a value in between", ref)}
			}
			t = t.ref
		}
	}
	finishCosts(c.nodes)
	if n.minCost >= infCost {
		return nil, &schemaError{path, "the schema has no finite instance (a required property recurses without end)"}
	}
	return n, nil
}

func (c *schemaCompiler) node(n *jnode) (*jnode, error) {
	c.nodes = append(c.nodes, n)
	return n, nil
}

func (c *schemaCompiler) lit(s string) *jnode {
	n := &jnode{kind: jLit, lit: s}
	c.nodes = append(c.nodes, n)
	return n
}

func (c *schemaCompiler) compile(raw json.RawMessage, path string, depth int) (*jnode, error) {
	if depth > maxSchemaDepth {
		return nil, &schemaError{path, fmt.Sprintf("the schema nests deeper than %d levels", maxSchemaDepth)}
	}
	if len(c.nodes) >= maxSchemaNodes {
		return nil, &schemaError{path, fmt.Sprintf("the schema is too large (more than %d grammar nodes)", maxSchemaNodes)}
	}
	raw = bytes.TrimSpace(raw)
	if string(raw) == "true" {
		return anyGrammar().value, nil
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, &schemaError{path, "expected a schema object"}
	}
	keys, vals, err := orderedObject(raw)
	if err != nil {
		if c.lenient {
			return anyGrammar().value, nil
		}
		return nil, &schemaError{path, "expected a schema object"}
	}
	kw := map[string]json.RawMessage{}
	for i, k := range keys {
		if schemaAnnotations[k] {
			continue
		}
		if c.lenient {
			if k == "oneOf" && kw["anyOf"] == nil {
				k = "anyOf"
			}
			if !schemaKeywords[k] {
				continue
			}
		}
		if !schemaKeywords[k] {
			return nil, &schemaError{path + "." + k, fmt.Sprintf("keyword %q is not supported by structured outputs (supported: type, properties, required, additionalProperties, items, enum, const, anyOf, $ref, $defs)", k)}
		}
		kw[k] = vals[i]
	}
	delete(kw, "$defs")
	delete(kw, "definitions")
	if ref, ok := kw["$ref"]; ok {
		if len(kw) > 1 {
			return nil, &schemaError{path + ".$ref", "$ref cannot be combined with other keywords"}
		}
		return c.ref(ref, path+".$ref", depth)
	}
	if v, ok := kw["const"]; ok {
		if len(kw) > 1 && !(len(kw) == 2 && kw["type"] != nil) && !c.lenient {
			return nil, &schemaError{path + ".const", "const cannot be combined with other keywords than type"}
		}
		return c.literal(v), nil
	}
	if v, ok := kw["anyOf"]; ok {
		if len(kw) > 1 && !c.lenient {
			return nil, &schemaError{path + ".anyOf", "anyOf cannot be combined with other keywords"}
		}
		var branches []json.RawMessage
		if err := json.Unmarshal(v, &branches); err != nil || len(branches) == 0 {
			return nil, &schemaError{path + ".anyOf", "expected a non-empty array of schemas"}
		}
		alt := &jnode{kind: jAlt}
		for i, b := range branches {
			n, err := c.compile(b, fmt.Sprintf("%s.anyOf[%d]", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			alt.items = append(alt.items, n)
		}
		return c.node(alt)
	}
	var types []string
	if v, ok := kw["type"]; ok {
		var one string
		if json.Unmarshal(v, &one) == nil {
			types = []string{one}
		} else if err := json.Unmarshal(v, &types); err != nil || len(types) == 0 {
			return nil, &schemaError{path + ".type", "expected a type name or a non-empty array of them"}
		}
		for _, t := range types {
			switch t {
			case "string", "number", "integer", "boolean", "null", "object", "array":
			default:
				if c.lenient {
					return anyGrammar().value, nil
				}
				return nil, &schemaError{path + ".type", fmt.Sprintf("unknown type %q", t)}
			}
		}
	}
	if v, ok := kw["enum"]; ok {
		var vals []json.RawMessage
		if err := json.Unmarshal(v, &vals); err != nil || len(vals) == 0 {
			return nil, &schemaError{path + ".enum", "expected a non-empty array"}
		}
		if len(vals) > maxEnumValues {
			return nil, &schemaError{path + ".enum", fmt.Sprintf("at most %d values are supported", maxEnumValues)}
		}
		lits := make([]string, len(vals))
		for i, e := range vals {
			if types != nil && !typeAllows(types, e) && !c.lenient {
				return nil, &schemaError{fmt.Sprintf("%s.enum[%d]", path, i), "the value is not of the schema's type"}
			}
			lits[i] = c.literal(e).lit
		}
		return c.node(newChoice(lits, nil))
	}
	if types == nil {
		switch {
		case kw["properties"] != nil || kw["required"] != nil || kw["additionalProperties"] != nil:
			types = []string{"object"}
		case kw["items"] != nil:
			types = []string{"array"}
		default:
			if len(kw) > 0 && !c.lenient {
				return nil, &schemaError{path, "the schema needs a type"}
			}
			return anyGrammar().value, nil
		}
	}
	var alts []*jnode
	for _, t := range types {
		var n *jnode
		var err error
		switch t {
		case "string":
			n, err = c.node(&jnode{kind: jStr})
		case "number", "integer":
			n, err = c.node(&jnode{kind: jNum, intOnly: t == "integer"})
		case "boolean":
			n, err = c.node(&jnode{kind: jAlt, items: []*jnode{c.lit("true"), c.lit("false")}})
		case "null":
			n = c.lit("null")
		case "object":
			n, err = c.object(kw, path, depth)
		case "array":
			n, err = c.array(kw, path, depth)
		}
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	for k := range kw {
		if k == "type" {
			continue
		}
		objKw := k == "properties" || k == "required" || k == "additionalProperties"
		if (objKw && !contains(types, "object") || k == "items" && !contains(types, "array")) && !c.lenient {
			return nil, &schemaError{path + "." + k, fmt.Sprintf("%s needs type %q", k, map[bool]string{true: "object", false: "array"}[objKw])}
		}
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return c.node(&jnode{kind: jAlt, items: alts})
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// literal is a node of the exact JSON value v (compacted).
func (c *schemaCompiler) literal(v json.RawMessage) *jnode {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		b.Reset()
		b.Write(bytes.TrimSpace(v))
	}
	return c.lit(b.String())
}

// typeAllows reports whether the JSON value v has one of types.
func typeAllows(types []string, v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return false
	}
	var t string
	switch v[0] {
	case '"':
		t = "string"
	case '{':
		t = "object"
	case '[':
		t = "array"
	case 't', 'f':
		t = "boolean"
	case 'n':
		t = "null"
	default:
		t = "number"
		if _, err := strconv.ParseInt(string(v), 10, 64); err == nil && contains(types, "integer") {
			return true
		}
	}
	return contains(types, t)
}

func (c *schemaCompiler) object(kw map[string]json.RawMessage, path string, depth int) (*jnode, error) {
	keys, vals, err := orderedObject(kw["properties"])
	if err != nil && !c.lenient {
		return nil, &schemaError{path + ".properties", "expected an object of schemas"}
	}
	var required []string
	if r, ok := kw["required"]; ok {
		if err := json.Unmarshal(r, &required); err != nil && !c.lenient {
			return nil, &schemaError{path + ".required", "expected an array of property names"}
		}
	}
	req := map[string]bool{}
	for i, r := range required {
		if !contains(keys, r) && !c.lenient {
			return nil, &schemaError{fmt.Sprintf("%s.required[%d]", path, i), fmt.Sprintf("%q is not among the properties", r)}
		}
		req[r] = true
	}
	addl := bytes.TrimSpace(kw["additionalProperties"])
	closed := string(addl) == "false"
	if c.strict {
		if !closed {
			return nil, &schemaError{path + ".additionalProperties", "strict mode requires additionalProperties: false on every object"}
		}
		for _, k := range keys {
			if !req[k] {
				return nil, &schemaError{path + ".required", fmt.Sprintf("strict mode requires every property in required; %q is not", k)}
			}
		}
	}
	if len(addl) > 0 && !closed && string(addl) != "true" && addl[0] != '{' && !c.lenient {
		return nil, &schemaError{path + ".additionalProperties", "expected a boolean or a schema"}
	}
	if len(keys) == 0 {
		if closed {
			return c.lit("{}"), nil
		}
		return anyGrammar().object, nil
	}
	n := &jnode{kind: jProps}
	for i, k := range keys {
		v, err := c.compile(vals[i], path+".properties."+k, depth+1)
		if err != nil {
			return nil, err
		}
		var kb bytes.Buffer
		writeJSON(&kb, k)
		kb.WriteString(": ")
		p := jprop{val: v, required: req[k]}
		p.key[0], p.key[1] = c.lit(kb.String()), c.lit(", "+kb.String())
		n.props = append(n.props, p)
	}
	return c.node(n)
}

func (c *schemaCompiler) array(kw map[string]json.RawMessage, path string, depth int) (*jnode, error) {
	item := anyGrammar().value
	if it, ok := kw["items"]; ok {
		var err error
		if item, err = c.compile(it, path+".items", depth+1); err != nil {
			return nil, err
		}
	} else if c.strict {
		return nil, &schemaError{path + ".items", "strict mode requires items on every array"}
	}
	return c.node(&jnode{kind: jList, open: '[', close: ']', item: item})
}

// ref compiles a $ref: a JSON pointer into the schema document.
func (c *schemaCompiler) ref(raw json.RawMessage, path string, depth int) (*jnode, error) {
	var ref string
	if err := json.Unmarshal(raw, &ref); err != nil || !strings.HasPrefix(ref, "#") {
		return nil, &schemaError{path, "only references within the schema (#/...) are supported"}
	}
	if n, ok := c.refs[ref]; ok {
		return n, nil
	}
	target, err := resolvePointer(c.root, ref[1:])
	if err != nil {
		return nil, &schemaError{path, fmt.Sprintf("$ref %q: %v", ref, err)}
	}
	n, _ := c.node(&jnode{kind: jRef})
	c.refs[ref] = n
	t, err := c.compile(target, strings.TrimSuffix(c.base+strings.ReplaceAll(ref[1:], "/", "."), "."), depth+1)
	if err != nil {
		return nil, err
	}
	n.ref = t
	return n, nil
}

// resolvePointer follows a JSON pointer ("" or "/a/b") into doc.
func resolvePointer(doc json.RawMessage, ptr string) (json.RawMessage, error) {
	if ptr == "" {
		return doc, nil
	}
	if ptr[0] != '/' {
		return nil, fmt.Errorf("not a JSON pointer")
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		cur = bytes.TrimSpace(cur)
		if len(cur) > 0 && cur[0] == '[' {
			var arr []json.RawMessage
			i, err := strconv.Atoi(tok)
			if json.Unmarshal(cur, &arr) != nil || err != nil || i < 0 || i >= len(arr) {
				return nil, fmt.Errorf("no %q in the schema", tok)
			}
			cur = arr[i]
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(cur, &m); err != nil {
			return nil, fmt.Errorf("no %q in the schema", tok)
		}
		v, ok := m[tok]
		if !ok {
			return nil, fmt.Errorf("no %q in the schema", tok)
		}
		cur = v
	}
	return cur, nil
}

// finishCosts computes the minimal instance length of nodes (a fixpoint:
// $ref cycles) and the sequences' suffix costs.
func finishCosts(nodes []*jnode) {
	for _, n := range nodes {
		n.minCost = infCost
	}
	for changed := true; changed; {
		changed = false
		for _, n := range nodes {
			if c := nodeCost(n); c < n.minCost {
				n.minCost, changed = c, true
			}
		}
	}
	for _, n := range nodes {
		if n.kind == jSeq {
			n.suffix = make([]int, len(n.items)+1)
			for i := len(n.items) - 1; i >= 0; i-- {
				n.suffix[i] = min(infCost, n.suffix[i+1]+n.items[i].minCost)
			}
		}
	}
}

func nodeCost(n *jnode) int {
	switch n.kind {
	case jLit:
		return len(n.lit)
	case jSeq:
		c := 0
		for _, it := range n.items {
			c = min(infCost, c+it.minCost)
		}
		return c
	case jAlt:
		c := infCost
		for _, it := range n.items {
			c = min(c, it.minCost)
		}
		return c
	case jAny:
		return min(n.anyOf[0].minCost, n.anyOf[1].minCost, n.anyOf[2].minCost)
	case jStr:
		return 2
	case jNum:
		return 1
	case jList:
		return 2
	case jProps:
		return min(infCost, 1+propsCost(n, 0, true))
	case jRef:
		return n.ref.minCost
	case jChoice:
		return choiceCost(n, 0, 0, len(n.lits))
	}
	return infCost
}

// newChoice is a jChoice of literals, each followed by then[k] (nil: no
// node follows any); a literal given twice keeps its first follower.
func newChoice(lits []string, then []*jnode) *jnode {
	idx := make([]int, len(lits))
	for k := range idx {
		idx[k] = k
	}
	sort.SliceStable(idx, func(a, b int) bool { return lits[idx[a]] < lits[idx[b]] })
	n := &jnode{kind: jChoice}
	for _, k := range idx {
		if len(n.lits) > 0 && n.lits[len(n.lits)-1] == lits[k] {
			continue
		}
		n.lits = append(n.lits, lits[k])
		var t *jnode
		if then != nil {
			t = then[k]
		}
		n.then = append(n.then, t)
	}
	return n
}

// jsonAny is the grammar of any JSON value, and of any JSON object.
type jsonAny struct {
	value, object *jnode
}

var (
	anyOnce sync.Once
	anyG    jsonAny
)

// anyGrammar returns the shared grammar of any JSON value (json_object's
// values, schemas that allow anything).
func anyGrammar() jsonAny {
	anyOnce.Do(func() {
		str := &jnode{kind: jStr}
		lits := []*jnode{{kind: jLit, lit: "true"}, {kind: jLit, lit: "false"}, {kind: jLit, lit: "null"}}
		scalar := &jnode{kind: jAlt, items: []*jnode{str, {kind: jNum}, lits[0], lits[1], lits[2]}}
		value := &jnode{kind: jAny}
		sep := &jnode{kind: jLit, lit: ": "}
		member := &jnode{kind: jSeq, items: []*jnode{str, sep, value}}
		obj := &jnode{kind: jList, open: '{', close: '}', item: member}
		arr := &jnode{kind: jList, open: '[', close: ']', item: value}
		value.anyOf = [3]*jnode{obj, arr, scalar}
		nodes := append([]*jnode{str, scalar, value, sep, member, obj, arr, scalar.items[1]}, lits...)
		finishCosts(nodes)
		anyG = jsonAny{value: value, object: obj}
	})
	return anyG
}

// orderedObject returns the keys and values of a JSON object in document order.
func orderedObject(raw json.RawMessage) ([]string, []json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, nil, err
	}
	var keys []string
	var vals []json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys = append(keys, k)
		vals = append(vals, v)
	}
	return keys, vals, nil
}
