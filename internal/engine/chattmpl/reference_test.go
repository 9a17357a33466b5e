package chattmpl

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// TestJinjaReference checks the small feature templates of
// testdata/jinja_reference.json (rendered by Python Jinja2 via
// testdata/gen_reference.py) byte for byte, and that failing cases fail.
func TestJinjaReference(t *testing.T) {
	b, err := os.ReadFile("testdata/jinja_reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Context map[string]json.RawMessage `json:"context"`
		Cases   []struct {
			Name     string  `json:"name"`
			Template string  `json:"template"`
			Output   *string `json:"output"`
			Error    string  `json:"error"`
			Message  string  `json:"message"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	vars := map[string]any{}
	for k, v := range ref.Context {
		vars[k] = v
	}
	for _, c := range ref.Cases {
		t.Run(c.Name, func(t *testing.T) {
			tmpl, perr := Parse(c.Template, "", "")
			if c.Error == "syntax" {
				var se *TemplateSyntaxError
				if !errors.As(perr, &se) {
					t.Fatalf("want syntax error, got %v", perr)
				}
				return
			}
			if perr != nil {
				t.Fatal(perr)
			}
			got, err := tmpl.Execute(vars, pinned2024)
			if c.Output == nil {
				if err == nil {
					t.Fatalf("want error %s (%s), got output %q", c.Error, c.Message, got)
				}
				if c.Error == "TemplateError" {
					var re *RaisedError
					if !errors.As(err, &re) || re.Msg != c.Message {
						t.Fatalf("want RaisedError %q, got %v", c.Message, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != *c.Output {
				t.Errorf("mismatch\n got: %q\nwant: %q", got, *c.Output)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	tmpl, err := Parse(`{{ raise_exception("nope: " ~ messages|length) }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(Input{Messages: []json.RawMessage{json.RawMessage(`{"role":"user","content":"x"}`)}})
	var re *RaisedError
	if !errors.As(err, &re) || re.Msg != "nope: 1" || !strings.Contains(err.Error(), "nope: 1") {
		t.Fatalf("got %v", err)
	}
}

// TestVariants renders every template (hfjs + the five main ones) with the
// extra conversations of testdata/variants.json.gz (Python Jinja2 output,
// made by testdata/gen_variants.py).
func TestVariants(t *testing.T) {
	f, err := os.Open("testdata/variants.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var data struct {
		Templates map[string]string `json:"templates"`
		Cases     []struct {
			Template string                     `json:"template"`
			Variant  string                     `json:"variant"`
			Context  map[string]json.RawMessage `json:"context"`
			Output   *string                    `json:"output"`
			Error    string                     `json:"error"`
			Message  string                     `json:"message"`
		} `json:"cases"`
	}
	if err := json.NewDecoder(zr).Decode(&data); err != nil {
		t.Fatal(err)
	}
	parsed := map[string]*Template{}
	for name, src := range data.Templates {
		tmpl, err := Parse(src, "", "")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		parsed[name] = tmpl
	}
	pass := 0
	for _, c := range data.Cases {
		ok := t.Run(c.Template+"/"+c.Variant, func(t *testing.T) {
			vars := map[string]any{}
			for k, v := range c.Context {
				vars[k] = v
			}
			got, err := parsed[c.Template].Execute(vars, pinned2025)
			if c.Output == nil {
				if err == nil {
					t.Fatalf("want error %s (%s), got output %q", c.Error, c.Message, got)
				}
				var re *RaisedError
				if c.Error == "TemplateError" && (!errors.As(err, &re) || re.Msg != c.Message) {
					t.Fatalf("want RaisedError %q, got %v", c.Message, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != *c.Output {
				t.Errorf("mismatch\n%s", firstDiff(got, *c.Output))
			}
		})
		if ok {
			pass++
		}
	}
	t.Logf("variants: %d/%d pass", pass, len(data.Cases))
}
