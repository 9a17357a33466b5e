package chattmpl

import (
	"context"
	"errors"
	"flywheel/internal/cputime"
	"fmt"
	"strings"
	"testing"
	"time"
)

// hostileTemplates are templates a model folder could carry to kill or hang
// the process (issue 12), each with the limit that must stop it.
func hostileTemplates() []struct{ name, src, limit string } {
	return []struct{ name, src, limit string }{
		{"center", `{{ 'x'.center(1000000000000) }}`, "value_bytes"},
		{"center filter", `{{ 'x'|center(1000000000000) }}`, "value_bytes"},
		{"ljust fill", `{{ 'x'.ljust(9223372036854775807, 'ab') }}`, "value_bytes"},
		{"zfill", `{{ '1'.zfill(1000000000000) }}`, "value_bytes"},
		{"indent", `{{ 'x'|indent(1000000000000, true) }}`, "value_bytes"},
		{"indent lines", `{{ ('a\n' * 20000000)|indent(100) }}`, "value_bytes"},
		{"tojson indent", `{{ {'a': [1, {'b': 2}]}|tojson(indent=1000000000000) }}`, "value_bytes"},
		{"tojson indent depth", `{{ [[[[[[[[[[1]]]]]]]]]]|tojson(indent=10000000) }}`, "value_bytes"},
		{"list repetition overflow", `{{ ([1, 1] * 4611686018427387904)|length }}`, "value_bytes"},
		{"list repetition", `{{ ([1] * 100000000)|length }}`, "value_bytes"},
		{"string repetition", `{{ 'ab' * 4611686018427387904 }}`, "value_bytes"},
		{"60 MB printed 100 times", `{% set s = 'x' * 60000000 %}{% for i in range(100) %}{{ s }}{% endfor %}`, "output_bytes"},
		{"doubling through namespace", `{% set ns = namespace(s='x' * 1000000) %}{% for i in range(12) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}`, "value_bytes"},
		{"doubling a list", `{% set ns = namespace(l=[1] * 100000) %}{% for i in range(12) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}`, "value_bytes"},
		{"many live strings", `{% set ns = namespace(l=[]) %}{% for i in range(100) %}{% set ns.l = ns.l + [('x' * 20000000) ~ i] %}{% endfor %}{{ ns.l|length }}`, "alloc_bytes"},
		{"repr of repeated references", `{% set s = 'x' * 1000000 %}{{ ([s] * 1000)|string|length }}`, "value_bytes"},
		{"join of repeated references", `{% set s = 'x' * 1000000 %}{{ ([s] * 1000)|join }}`, "value_bytes"},
		{"join method", `{% set s = 'x' * 1000000 %}{{ ','.join([s] * 1000) }}`, "value_bytes"},
		{"concat of repeated references", `{% set s = 'x' * 40000000 %}{{ s ~ s ~ s }}`, "value_bytes"},
		{"format", `{% set s = 'x' * 40000000 %}{{ '{0}{0}{0}'.format(s) }}`, "value_bytes"},
		{"percent", `{% set s = 'x' * 40000000 %}{{ '%s%s%s' % (s, s, s) }}`, "value_bytes"},
		{"replace", `{{ ('x' * 1000000)|replace('x', 'y' * 1000) }}`, "value_bytes"},
		{"replace method", `{{ ('x' * 1000000).replace('', 'y' * 1000) }}`, "value_bytes"},
		{"escape", `{{ ('<' * 30000000)|e }}`, "value_bytes"},
		{"batch fill", `{{ [1]|batch(1000000000000, 0) }}`, "value_bytes"},
		{"iterate a huge string", `{{ ('x' * 60000000)|list|length }}`, "value_bytes"},
		{"slice with a step", `{{ ('x' * 60000000)[::2]|length }}`, "value_bytes"},
		{"split", `{{ ('x' * 60000000).split('x')|length }}`, "value_bytes"},
		{"split whitespace", `{{ ('a ' * 30000000).split()|length }}`, "value_bytes"},
		{"splitlines", `{{ ('\n' * 60000000).splitlines()|length }}`, "value_bytes"},
		{"nested parentheses", `{{ ` + strings.Repeat("(", 2_000_000) + `1` + strings.Repeat(")", 2_000_000) + ` }}`, "parse_depth"},
		{"nested lists", `{{ ` + strings.Repeat("[", 1_000_000) + strings.Repeat("]", 1_000_000) + ` }}`, "parse_depth"},
		{"operator chain", `{{ 1` + strings.Repeat(" + 1", 1_000_000) + ` }}`, "parse_depth"},
		{"attribute chain", `{{ x` + strings.Repeat(".a", 1_000_000) + ` }}`, "parse_depth"},
		{"filter chain", `{{ x` + strings.Repeat("|string", 500_000) + ` }}`, "parse_depth"},
		{"unary chain", `{{ ` + strings.Repeat("-", 1_000_000) + `1 }}`, "parse_depth"},
		{"not chain", `{{ ` + strings.Repeat("not ", 1_000_000) + `1 }}`, "parse_depth"},
		{"nested blocks", strings.Repeat("{% if true %}", 100_000) + strings.Repeat("{% endif %}", 100_000), "parse_depth"},
		{"nested empty loops", `{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}`, "steps"},
		{"filtered empty loops", `{% for i in range(1000000) %}{% for j in range(1000000) if false %}{% endfor %}{% endfor %}`, "steps"},
		{"map over repeated references", `{% set s = 'x' * 30000000 %}{{ ([s] * 1000000)|map('upper')|list|length }}`, "alloc_bytes"},
		{"unique", `{{ range(1000000)|unique|length }}`, "steps"},
		{"sum of lists", `{{ ([[1] * 1000] * 1000000)|sum(start=[])|length }}`, "alloc_bytes"},
		{"exponential macro", `{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}`, "steps"},
		{"deep macro recursion", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, "recursion_depth"},
		{"self-containing namespace", `{% set ns = namespace() %}{% set ns.x = ns %}{{ ns }}`, "recursion_depth"},
	}
}

func TestHostileTemplatesHitLimits(t *testing.T) {
	for _, tc := range hostileTemplates() {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			tmpl, err := Parse(tc.src, "<s>", "</s>")
			if err == nil {
				// No wall-clock limit here, so the limit named is deterministic
				// (the race detector slows the CPU-bound cases several times).
				// A fifth of the default steps keeps the CPU-bound cases quick.
				lim := DefaultLimits
				lim.Timeout = time.Minute
				lim.MaxSteps = DefaultLimits.MaxSteps / 5
				lim.MaxAllocBytes = 128 << 20
				_, err = tmpl.RenderContext(context.Background(), Input{Messages: raws(t, `[{"role":"user","content":"hi"}]`), Limits: lim})
			}
			le, ok := IsLimit(err)
			if !ok {
				t.Fatalf("want a limit error, got %v", err)
			}
			if le.Limit != tc.limit || !strings.Contains(err.Error(), "("+tc.limit+")") {
				t.Fatalf("want limit %s, got %v", tc.limit, err)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Fatalf("took %v", d)
			}
		})
	}
}

// A huge exponent is computed by squaring: Python's 1 ** n is 1, at once.
func TestPowerByHugeExponent(t *testing.T) {
	for src, want := range map[string]string{
		`{{ 1 ** 9000000000000000000 }}`:    "1",
		`{{ 2 ** 10 }}`:                     "1024",
		`{{ (-3) ** 3 }}`:                   "-27",
		`{{ 0 ** 0 }}`:                      "1",
		`{{ (-1) ** 9000000000000000001 }}`: "-1",
	} {
		tmpl, err := Parse(src, "", "")
		if err != nil {
			t.Fatal(err)
		}
		got, err := tmpl.Render(Input{})
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", src, got, err, want)
		}
	}
}

// promptly runs render up to three times and fails unless it returns want's
// limit each time and at least one run ends within bound, in wall time or in
// the process's CPU time: a machine under load can stall a run's wall time
// past any bound, while a render that is not on the clock burns CPU past it
// every time.
func promptly(t *testing.T, what string, bound time.Duration, want string, render func() error) {
	t.Helper()
	var took []string
	for range 3 {
		start := time.Now()
		cpu0, cpuOK := cputime.Process()
		err := render()
		d := time.Since(start)
		cpu1, _ := cputime.Process()
		if le, ok := IsLimit(err); !ok || le.Limit != want {
			t.Fatalf("%s: want %s, got %v", what, want, err)
		}
		// A render that ignored its limit would burn CPU past the bound
		// whatever the machine's load; one that stopped can still take long
		// in wall time on a machine busy with other work, so either within
		// the bound passes.
		if d <= bound || cpuOK && cpu1-cpu0 <= bound {
			return
		}
		took = append(took, fmt.Sprintf("%v (CPU %v)", d, cpu1-cpu0))
	}
	t.Fatalf("%s: took %v, want one of them within %v", what, took, bound)
}

func TestRenderDeadlineAndCancel(t *testing.T) {
	loops := `{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}`
	tmpl, err := Parse(loops, "", "")
	if err != nil {
		t.Fatal(err)
	}
	promptly(t, "empty loops", 2*time.Second, "timeout", func() error {
		_, err := tmpl.Render(Input{Limits: Limits{MaxSteps: 1 << 60, Timeout: 100 * time.Millisecond}})
		return err
	})

	// Costly operations between steps: the clock is read every few steps.
	slow, err := Parse(`{% set s = 'é' * 20000000 %}{% for i in range(1000000) %}{{ s[-1] }}{% endfor %}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	promptly(t, "costly steps", 5*time.Second, "timeout", func() error {
		_, err := slow.Render(Input{Limits: Limits{Timeout: 200 * time.Millisecond}})
		return err
	})

	// Quadratic work inside one filter call is on the clock too.
	uniq, err := Parse(`{{ range(1000000)|batch(1)|unique|length }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	promptly(t, "quadratic filter", 5*time.Second, "timeout", func() error {
		_, err := uniq.Render(Input{Limits: Limits{MaxSteps: 1 << 60, Timeout: 200 * time.Millisecond}})
		return err
	})

	promptly(t, "cancel", 2*time.Second, "canceled", func() error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := tmpl.RenderContext(ctx, Input{Limits: Limits{MaxSteps: 1 << 60, Timeout: time.Hour}})
		if !errors.Is(err, context.Canceled) {
			return fmt.Errorf("want context.Canceled: %w", err)
		}
		return err
	})
}

// sharedStructure doubles two lists (and two dicts) 60 times over: a few
// hundred bytes each, but 2^60 leaves to walk for a comparison.
const sharedLists = `{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}`
const sharedDicts = `{% set ns = namespace(a={}, b={}) %}{% for i in range(60) %}{% set ns.a = {'x': ns.a, 'y': ns.a} %}{% set ns.b = {'x': ns.b, 'y': ns.b} %}{% endfor %}`

// Comparisons of values with shared parts (the fuzz step's stall, issue 28)
// are on the render's clock: each fails with the timeout instead of running
// for 2^60 steps.
func TestSharedStructureComparisonsOnTheClock(t *testing.T) {
	for _, src := range []string{
		sharedLists + `{{ ns.a == ns.b }}`,
		sharedLists + `{{ ns.a != ns.b }}`,
		sharedLists + `{{ ns.a in [ns.b] }}`,
		sharedLists + `{{ [ns.a, ns.b]|unique|length }}`,
		sharedLists + `{{ [ns.a, ns.b]|sort|length }}`,
		sharedLists + `{{ [ns.a, ns.b].index(ns.b) }}`,
		sharedLists + `{{ ns.a is eq ns.b }}`,
		sharedLists + `{{ ns.a < ns.b }}`,
		sharedLists + `{% for i in range(2) %}{{ loop.changed(ns.a if i == 0 else ns.b) }}{% endfor %}`,
		sharedDicts + `{{ ns.a == ns.b }}`,
	} {
		tmpl, err := Parse(src, "", "")
		if err != nil {
			t.Fatal(err)
		}
		promptly(t, src[len(src)-40:], 2*time.Second, "timeout", func() error {
			_, err := tmpl.Render(Input{Limits: Limits{Timeout: 100 * time.Millisecond}})
			return err
		})
	}
	// Small shared values still compare (and by value, as in Python).
	tmpl, err := Parse(`{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(3) %}{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }} {{ ns.a is sameas ns.b }} {{ ns.a is sameas ns.a }} {{ [ns.a, ns.b]|unique|length }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tmpl.Render(Input{}); err != nil || got != "True False True 1" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestOutputLimitIsConfigurable(t *testing.T) {
	tmpl, err := Parse(`{% for m in messages %}{{ m.content }}{% endfor %}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Messages: raws(t, `[{"role":"user","content":"0123456789"},{"role":"user","content":"0123456789"}]`)}
	if out, err := tmpl.Render(in); err != nil || len(out) != 20 {
		t.Fatalf("%q %v", out, err)
	}
	in.Limits.MaxOutputBytes = 15
	if _, err := tmpl.Render(in); err == nil || !strings.Contains(err.Error(), "output_bytes") {
		t.Fatalf("want output_bytes, got %v", err)
	}
	in.Limits = Limits{MaxAllocBytes: 5}
	tmpl, _ = Parse(`{{ messages[0].content ~ 'x' }}`, "", "")
	if _, err := tmpl.Render(in); err == nil || !strings.Contains(err.Error(), "alloc_bytes") {
		t.Fatalf("want alloc_bytes, got %v", err)
	}
}

// unique keeps its results (first of each group of equal items, in order)
// with a hash for hashable items.
func TestUniqueHashedAsBefore(t *testing.T) {
	tmpl, err := Parse(`{{ [1, 1.0, True, 'a', 'a', [1], [1], none, none, 2.5, 2.5, 0, False, 'A']|unique|list }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(Input{})
	if want := "[1, 'a', [1], None, 2.5, 0, 'A']"; err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
}
