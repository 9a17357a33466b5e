package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"flywheel/internal/httpx"
	"flywheel/internal/infer"
)

// Forced tool calls are generated under the JSON grammar of structured
// outputs (jsongrammar.go): one call in the model's tool-call syntax, the
// function name one of the allowed ones, the arguments following the
// function's parameters schema. A function with strict: true has its
// schema compiled in strict mode (the structured-outputs subset, anything
// else a 400); otherwise leniently: keywords outside the subset are ignored
// (the arguments are still valid JSON of the schema's shape), oneOf is
// taken as anyOf, and a missing schema is any object.

// toolFormat is a model's tool-call syntax.
type toolFormat int

const (
	fmtHermes    toolFormat = iota // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Qwen, Hermes)
	fmtLlamaJSON                   // {"name": ..., "parameters": {...}} (Llama 3.1/3.2)
)

// toolCallGrammar builds the grammar of one call of one of fns in the
// model's syntax. A strict function's schema outside the subset is a
// *schemaError whose path starts at its tools[i] entry (index[i] is fns[i]'s
// index among the request's tools).
func toolCallGrammar(fns []ToolFunction, index []int, format toolFormat) (*jnode, error) {
	if len(fns) == 0 {
		return nil, fmt.Errorf("no functions to call")
	}
	argKey := "arguments"
	if format == fmtLlamaJSON {
		argKey = "parameters"
	}
	var nodes []*jnode
	lit := func(s string) *jnode {
		n := &jnode{kind: jLit, lit: s}
		nodes = append(nodes, n)
		return n
	}
	seq := func(items ...*jnode) *jnode {
		n := &jnode{kind: jSeq, items: items}
		nodes = append(nodes, n)
		return n
	}
	var names []string
	var args []*jnode
	for k, fn := range fns {
		strict := fn.Strict != nil && *fn.Strict
		a, err := compileSchemaMode(fn.Parameters, strict, !strict, fmt.Sprintf("tools[%d].function.parameters", index[k]))
		if err != nil {
			return nil, err
		}
		if a.kind == jAny || a.kind == jRef && a.ref.kind == jAny {
			a = anyGrammar().object // arguments are always an object
		}
		name, _ := json.Marshal(fn.Name)
		names = append(names, string(name)+", "+strconv.Quote(argKey)+": ")
		args = append(args, a)
	}
	calls := newChoice(names, args)
	nodes = append(nodes, calls)
	root := seq(lit(`{"name": `), calls, lit("}"))
	if format == fmtHermes {
		root = seq(lit(hermesOpen+"\n"), root, lit("\n"+hermesClose))
	}
	finishCosts(nodes)
	return root, nil
}

// forcedToolConstraint is the constraint of a forced tool choice, or the
// 400 of a strict function schema outside the subset.
func forcedToolConstraint(lm *servedModel, pl *chatPlan, maxTokens int) (func() infer.Constraint, error) {
	fns, index := pl.forcedFunctions()
	g, err := toolCallGrammar(fns, index, lm.format)
	if err != nil {
		var se *schemaError
		if errors.As(err, &se) {
			return nil, schemaHTTPError(err)
		}
		return nil, httpx.Invalid("tools", "unsupported_value", "cannot force a call of these tools: %v", err)
	}
	return newJSONConstraint(lm, g, maxTokens), nil
}
