package ui

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"flywheel/internal/httpx"
)

// TestAssetsRenderTextOnly: no asset builds HTML from strings (model outputs
// and call inputs are untrusted), the page has no inline script or style and
// loads nothing from another origin, so the CSP holds without exceptions.
func TestAssetsRenderTextOnly(t *testing.T) {
	forbidden := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function|javascript:|style=`)
	remote := regexp.MustCompile(`(src|href)="(https?:)?//`)
	err := fs.WalkDir(assets, "assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(path)
		if err != nil {
			return err
		}
		if m := forbidden.Find(b); m != nil {
			t.Errorf("%s uses %s", path, m)
		}
		if m := remote.Find(b); m != nil {
			t.Errorf("%s loads from another origin: %s", path, m)
		}
		if strings.HasSuffix(path, ".html") && (strings.Contains(string(b), "<script>") || strings.Contains(string(b), "<style")) {
			t.Errorf("%s has an inline script or style", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRegister: every /ui/ response (a missing file too) carries the CSP and
// the other headers; /ui redirects to /ui/.
func TestRegister(t *testing.T) {
	mux := http.NewServeMux()
	Register(httpx.NewRoutes(mux))
	for path, want := range map[string]int{"/ui/": 200, "/ui/app.js": 200, "/ui/chart.js": 200, "/ui/style.css": 200, "/ui/missing.js": 404, "/ui": 301} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != want {
			t.Errorf("%s: %d, want %d", path, w.Code, want)
		}
		if path == "/ui" {
			if w.Header().Get("Location") != "/ui/" {
				t.Errorf("/ui redirects to %q", w.Header().Get("Location"))
			}
			continue
		}
		h := w.Header()
		if h.Get("Content-Security-Policy") != CSP || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", path, h)
		}
	}
	if strings.Contains(CSP, "unsafe") || !strings.Contains(CSP, "script-src 'self'") || !strings.Contains(CSP, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", CSP)
	}
}
