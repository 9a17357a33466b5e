package chattmpl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Chat templates come from model folders, which operators download: they are
// untrusted code. Every render is bounded so a hostile template fails its own
// render with a *LimitError instead of exhausting memory, a core or the stack:
//
//   - Limits.MaxOutputBytes: the rendered text;
//   - MaxValueBytes: any one string or list the template builds (a list
//     counts 16 bytes per element), checked before the memory is taken and
//     without integer overflow;
//   - Limits.MaxAllocBytes: all strings and lists one render builds, together;
//   - Limits.MaxSteps: statements, loop iterations (empty bodies too), macro
//     and filter calls;
//   - Limits.Timeout and the render's context (a client that leaves cancels
//     its render);
//   - MaxRecursionDepth (macros, recursive loops) and MaxParseDepth (nesting in
//     the template source, checked when it is parsed).

// Limits bound one render. A zero field takes its DefaultLimits value.
type Limits struct {
	MaxOutputBytes int           // rendered text, bytes
	MaxAllocBytes  int64         // strings and lists built by one render, bytes in all
	MaxSteps       int           // statements, loop iterations and calls
	Timeout        time.Duration // wall clock for one render (besides the context)
}

// DefaultLimits are far above what real chat templates need (a few dozen steps
// and a few copies of the prompt per message) and far below what hurts.
var DefaultLimits = Limits{
	MaxOutputBytes: 32 << 20,
	MaxAllocBytes:  512 << 20,
	MaxSteps:       5_000_000,
	Timeout:        5 * time.Second,
}

const (
	// MaxValueBytes bounds any one string or list built during a render.
	MaxValueBytes = 64 << 20
	// maxParts bounds the elements of one list (16 bytes each).
	maxParts = MaxValueBytes / 16
	// MaxRecursionDepth bounds nested macro calls and recursive loops.
	MaxRecursionDepth = 200
	// MaxParseDepth bounds the nesting of the template source: brackets,
	// operator chains, filters, attribute chains and blocks (Python's Jinja2
	// fails on far less through its own recursion limit).
	MaxParseDepth = 256
)

// withDefaults fills the zero fields of l.
func (l Limits) withDefaults() Limits {
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = DefaultLimits.MaxOutputBytes
	}
	if l.MaxAllocBytes <= 0 {
		l.MaxAllocBytes = DefaultLimits.MaxAllocBytes
	}
	if l.MaxSteps <= 0 {
		l.MaxSteps = DefaultLimits.MaxSteps
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultLimits.Timeout
	}
	return l
}

// LimitError is returned when a render (or a parse) hits one of the limits.
// Limit names it: "output_bytes", "value_bytes", "alloc_bytes", "steps",
// "timeout", "canceled", "recursion_depth", "parse_depth".
type LimitError struct {
	Limit string
	Max   int64 // the limit's value (bytes, steps, levels, milliseconds)
	cause error // the context's error for "canceled"
}

// limitMessages phrase each limit; %d is its value.
var limitMessages = map[string]string{
	"output_bytes":    "template output exceeds the limit of %d bytes",
	"value_bytes":     "template builds a value larger than the limit of %d bytes",
	"alloc_bytes":     "template allocates more than the limit of %d bytes",
	"steps":           "template exceeds the limit of %d execution steps",
	"timeout":         "template render exceeds the time limit of %d ms",
	"recursion_depth": "template recursion exceeds the limit of %d levels",
	"parse_depth":     "template nesting exceeds the limit of %d levels",
}

func (e *LimitError) Error() string {
	if e.Limit == "canceled" {
		return fmt.Sprintf("chattmpl: template render canceled (canceled): %v", e.cause)
	}
	if f, ok := limitMessages[e.Limit]; ok {
		return "chattmpl: " + fmt.Sprintf(f, e.Max) + " (" + e.Limit + ")"
	}
	return fmt.Sprintf("chattmpl: template limit %s (%d) exceeded", e.Limit, e.Max)
}

func (e *LimitError) Unwrap() error { return e.cause }

// IsLimit reports whether err is (or wraps) a *LimitError, and returns it.
func IsLimit(err error) (*LimitError, bool) {
	var le *LimitError
	ok := errors.As(err, &le)
	return le, ok
}

func valueLimit() error { return &LimitError{Limit: "value_bytes", Max: MaxValueBytes} }

// limitPanic carries a *LimitError out of helpers that cannot return errors
// (str() of a value, repr); run recovers it.
type limitPanic struct{ err *LimitError }

// checkLen panics with the value limit when a builder has grown past it.
func checkLen(n int) {
	if n > MaxValueBytes {
		panic(limitPanic{valueLimit().(*LimitError)})
	}
}

// fits reports whether count copies of size bytes, plus extra, stay within
// MaxValueBytes, without overflowing.
func fits(count, size, extra int) bool {
	if count < 0 || size < 0 || extra < 0 || extra > MaxValueBytes {
		return count <= 0 || size == 0
	}
	if count == 0 || size == 0 {
		return true
	}
	return count <= (MaxValueBytes-extra)/size
}

// sizeOf is what a value built by the template costs, shallowly (its
// elements were counted when they were built).
func sizeOf(v any) int64 {
	switch t := v.(type) {
	case string:
		return int64(len(t))
	case []any:
		return 16 * int64(len(t))
	case Tuple:
		return 16 * int64(len(t))
	case *Dict:
		return 32 * int64(t.Len())
	}
	return 0
}

// budget is the per-render accounting.
type budget struct {
	ctx      context.Context
	lim      Limits
	deadline time.Time
	alloc    int64
}

func newBudget(ctx context.Context, lim Limits) budget {
	if ctx == nil {
		ctx = context.Background()
	}
	lim = lim.withDefaults()
	return budget{ctx: ctx, lim: lim, deadline: time.Now().Add(lim.Timeout)}
}

// step counts one step; every 16 steps it checks the clock and the context.
func (st *state) step() error {
	st.steps++
	if st.steps > st.b.lim.MaxSteps {
		return &LimitError{Limit: "steps", Max: int64(st.b.lim.MaxSteps)}
	}
	if st.steps&15 == 0 {
		return st.checkTime()
	}
	return nil
}

// visit counts one node of a structural traversal (==, in, sorting nested
// values) and every 1<<12 of them checks the clock and the context, panicking
// with the limit (run recovers it): such a traversal cannot return an error
// from every level, and shared parts make it exponential in the values' sizes.
// A nil st (outside a render) counts nothing.
func (st *state) visit() {
	if st == nil {
		return
	}
	st.visits++
	if st.visits&4095 == 0 {
		if err := st.checkTime(); err != nil {
			panic(limitPanic{err.(*LimitError)})
		}
	}
}

// work counts n units of work done inside one step (comparisons of a
// quadratic filter) and checks the clock every 1<<16 of them.
func (st *state) work(n int) error {
	before := st.work64
	st.work64 += int64(n)
	if st.work64>>16 != before>>16 {
		return st.checkTime()
	}
	return nil
}

func (st *state) checkTime() error {
	if err := st.b.ctx.Err(); err != nil {
		return &LimitError{Limit: "canceled", cause: err}
	}
	if time.Now().After(st.b.deadline) {
		return &LimitError{Limit: "timeout", Max: st.b.lim.Timeout.Milliseconds()}
	}
	return nil
}

// account charges a value the template built to the render's allocation budget.
func (st *state) account(v any) error {
	n := sizeOf(v)
	if n > MaxValueBytes {
		return valueLimit()
	}
	st.b.alloc += n
	if st.b.alloc > st.b.lim.MaxAllocBytes {
		return &LimitError{Limit: "alloc_bytes", Max: st.b.lim.MaxAllocBytes}
	}
	return nil
}

// write appends s to out, within the output limit for the render's output and
// within MaxValueBytes for a nested buffer (macro body, set block).
func (st *state) write(out *strings.Builder, s string) error {
	max := MaxValueBytes
	if out == st.out {
		max = st.b.lim.MaxOutputBytes
	}
	if len(s) > max-out.Len() {
		if out == st.out {
			return &LimitError{Limit: "output_bytes", Max: int64(max)}
		}
		return valueLimit()
	}
	out.WriteString(s)
	return nil
}
