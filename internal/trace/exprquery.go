package trace

import (
	"encoding/json"
	"fmt"
	"strings"

	"flywheel/internal/httpx"
)

// The query language of /cost/query, /cost/purge and /feedback/query,
// compiled here into SQL conditions over one table's fields.
//
// The Mongo-like form trace clients send: {"$expr": E} where E is
// {"$and": [E...]}, {"$or": [E...]}, {"$not": [E]}, {"$eq"|"$gt"|"$gte"|"$lt"|"$lte": [A, B]},
// {"$in": [A, [B...]]}, A/B being {"$getField": "<field>"} or {"$literal": value}.

// querySQL compiles a {"$expr": E} query over the fields of one table
// (name -> kind: 't' text, 'n' number, 'd' time as Unix microseconds; the
// SQL column has the field's name) into a condition and its arguments.
func querySQL(raw json.RawMessage, path string, fields map[string]byte) (string, []any, error) {
	var q struct {
		Expr json.RawMessage `json:"$expr"`
	}
	if err := decodeAt(raw, &q, path); err != nil {
		return "", nil, err
	}
	if jsonKindOf(q.Expr) != 'o' {
		return "", nil, httpx.Invalid(path+".$expr", "missing_field", "required: an expression object")
	}
	return exprSQL(q.Expr, path+".$expr", fields)
}

func exprSQL(raw json.RawMessage, path string, fields map[string]byte) (string, []any, error) {
	ms, ok := splitObject(raw)
	if !ok || len(ms) != 1 {
		return "", nil, httpx.Invalid(path, "invalid_value", "expected an object with one operator")
	}
	op, val := ms[0].Key, ms[0].Value
	path = path + "." + op
	var list []json.RawMessage
	if err := json.Unmarshal(val, &list); err != nil {
		return "", nil, httpx.Invalid(path, "invalid_type", "expected an array of operands")
	}
	switch op {
	case "$and", "$or", "$not":
		if len(list) == 0 || (op == "$not" && len(list) != 1) {
			return "", nil, httpx.Invalid(path, "invalid_value", "wrong number of operands")
		}
		var parts []string
		var args []any
		for i, e := range list {
			sq, a, err := exprSQL(e, fmt.Sprintf("%s[%d]", path, i), fields)
			if err != nil {
				return "", nil, err
			}
			parts = append(parts, "("+sq+")")
			args = append(args, a...)
		}
		switch op {
		case "$and":
			return strings.Join(parts, " AND "), args, nil
		case "$or":
			return strings.Join(parts, " OR "), args, nil
		}
		return "NOT " + parts[0], args, nil
	case "$eq", "$gt", "$gte", "$lt", "$lte":
		if len(list) != 2 {
			return "", nil, httpx.Invalid(path, "invalid_value", "expected two operands")
		}
		a, err := parseOperand(list[0], path+"[0]", fields)
		if err != nil {
			return "", nil, err
		}
		b, err := parseOperand(list[1], path+"[1]", fields)
		if err != nil {
			return "", nil, err
		}
		kind, err := compareKind(a, b, path)
		if err != nil {
			return "", nil, err
		}
		as, aa, err := a.sql(kind, path+"[0]")
		if err != nil {
			return "", nil, err
		}
		bs, ba, err := b.sql(kind, path+"[1]")
		if err != nil {
			return "", nil, err
		}
		sqlOp := map[string]string{"$eq": "=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}[op]
		return as + " " + sqlOp + " " + bs, append(aa, ba...), nil
	case "$in":
		if len(list) != 2 {
			return "", nil, httpx.Invalid(path, "invalid_value", "expected two operands")
		}
		a, err := parseOperand(list[0], path+"[0]", fields)
		if err != nil {
			return "", nil, err
		}
		if a.field == "" {
			return "", nil, httpx.Invalid(path+"[0]", "invalid_value", `expected {"$getField": name}`)
		}
		as, args, _ := a.sql(a.kind, path+"[0]")
		var items []json.RawMessage
		if err := json.Unmarshal(list[1], &items); err != nil {
			return "", nil, httpx.Invalid(path+"[1]", "invalid_type", "expected an array of operands")
		}
		if len(items) == 0 {
			return "1 = 0", nil, nil
		}
		var ph []string
		for i, it := range items {
			ipath := fmt.Sprintf("%s[1][%d]", path, i)
			b, err := parseOperand(it, ipath, fields)
			if err != nil {
				return "", nil, err
			}
			if _, err := compareKind(a, b, path); err != nil {
				return "", nil, err
			}
			bs, ba, err := b.sql(a.kind, ipath)
			if err != nil {
				return "", nil, err
			}
			ph = append(ph, bs)
			args = append(args, ba...)
		}
		return as + " IN (" + strings.Join(ph, ", ") + ")", args, nil
	}
	return "", nil, httpx.Invalid(path, "invalid_value", "unsupported operator %q", op)
}

// operand is one side of a comparison: a price field, or a literal (a
// string, a number or null).
type operand struct {
	field string
	kind  byte // the field's kind (see querySQL)
	lit   any  // string, float64 or nil
}

func parseOperand(raw json.RawMessage, path string, fields map[string]byte) (*operand, error) {
	ms, ok := splitObject(raw)
	if !ok || len(ms) != 1 {
		return nil, httpx.Invalid(path, "invalid_value", `expected {"$getField": name} or {"$literal": value}`)
	}
	switch ms[0].Key {
	case "$getField":
		var f string
		if err := json.Unmarshal(ms[0].Value, &f); err != nil {
			return nil, httpx.Invalid(path, "invalid_type", "expected a field name")
		}
		kind, ok := fields[f]
		if !ok {
			return nil, httpx.Invalid(path, "invalid_value", "unknown field %q", f)
		}
		return &operand{field: f, kind: kind}, nil
	case "$literal":
		var v any
		if err := json.Unmarshal(ms[0].Value, &v); err != nil {
			return nil, httpx.Invalid(path, "invalid_type", "invalid literal")
		}
		switch v.(type) {
		case string, float64, nil:
			return &operand{lit: v}, nil
		}
		return nil, httpx.Invalid(path, "invalid_value", "literal must be a string, a number or null")
	}
	return nil, httpx.Invalid(path, "invalid_value", `expected {"$getField": name} or {"$literal": value}`)
}

// compareKind checks that a comparison involves a field, and that two fields
// are of one kind; it returns the kind the comparison is made in.
func compareKind(a, b *operand, path string) (byte, error) {
	switch {
	case a.field == "" && b.field == "":
		return 0, httpx.Invalid(path, "invalid_value", `compare a field ({"$getField": name}) with a literal or a field`)
	case a.field != "" && b.field != "" && a.kind != b.kind:
		return 0, httpx.Invalid(path, "invalid_value", "cannot compare %s with %s", a.field, b.field)
	case a.field != "":
		return a.kind, nil
	}
	return b.kind, nil
}

// sql returns the operand as SQL in a comparison of the given kind: a
// column, or a placeholder whose argument has the column's type (dates as
// Unix microseconds), so both databases compare like with like. A literal of
// another type is a 400 naming it.
func (o *operand) sql(kind byte, path string) (string, []any, error) {
	if o.field != "" {
		return o.field, nil, nil
	}
	switch x := o.lit.(type) {
	case nil:
		return "?", []any{nil}, nil
	case string:
		switch kind {
		case 't':
			return "?", []any{x}, nil
		case 'd':
			if t, ok := parseTime(x); ok {
				return "?", []any{t}, nil
			}
			return "", nil, httpx.Invalid(path, "invalid_value", "invalid timestamp %q: expected RFC 3339", x)
		}
	case float64:
		if kind == 'n' {
			return "?", []any{x}, nil
		}
	}
	want := map[byte]string{'t': "a string", 'n': "a number", 'd': "an RFC 3339 timestamp"}[kind]
	return "", nil, httpx.Invalid(path, "invalid_type", "expected %s or null", want)
}

// purgeIDs accepts only a query by ids: $eq on id, $in on id, or $or of those.
func purgeIDs(raw json.RawMessage) ([]string, error) {
	var q struct {
		Expr json.RawMessage `json:"$expr"`
	}
	if err := decodeAt(raw, &q, "query"); err != nil {
		return nil, err
	}
	var ids []string
	var walk func(e json.RawMessage) bool
	walk = func(e json.RawMessage) bool {
		ms, ok := splitObject(e)
		if !ok || len(ms) != 1 {
			return false
		}
		var list []json.RawMessage
		if json.Unmarshal(ms[0].Value, &list) != nil {
			return false
		}
		isID := func(x json.RawMessage) bool {
			var g struct {
				F *string `json:"$getField"`
			}
			return json.Unmarshal(x, &g) == nil && g.F != nil && *g.F == "id"
		}
		lit := func(x json.RawMessage) (string, bool) {
			var l struct {
				L *string `json:"$literal"`
			}
			if json.Unmarshal(x, &l) != nil || l.L == nil {
				return "", false
			}
			return *l.L, true
		}
		switch ms[0].Key {
		case "$or":
			for _, x := range list {
				if !walk(x) {
					return false
				}
			}
			return len(list) > 0
		case "$eq":
			if len(list) != 2 {
				return false
			}
			a, b := list[0], list[1]
			if !isID(a) {
				a, b = b, a
			}
			v, ok := lit(b)
			if !isID(a) || !ok {
				return false
			}
			ids = append(ids, v)
			return true
		case "$in":
			if len(list) != 2 || !isID(list[0]) {
				return false
			}
			var items []json.RawMessage
			if json.Unmarshal(list[1], &items) != nil {
				return false
			}
			for _, it := range items {
				v, ok := lit(it)
				if !ok {
					return false
				}
				ids = append(ids, v)
			}
			return true
		}
		return false
	}
	if jsonKindOf(q.Expr) != 'o' || !walk(q.Expr) {
		return nil, httpx.Invalid("query", "invalid_value", "purge only supports a query by ids ($eq or $in on id, or $or of those)")
	}
	return ids, nil
}
