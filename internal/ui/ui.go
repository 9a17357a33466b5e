// Package ui is the dashboard: static assets (plain HTML, CSS and JavaScript
// modules, no build step) embedded in the binary and served at /ui/. The
// pages call the same API routes as any client, with the API key the user
// signs in with (kept in the browser's session storage, sent as a Bearer
// header), so the key's tenancy applies to everything shown; there is no
// bypass for the UI (the read routes it needs, in internal/api's
// dashboard.go, take the same key and tenancy as every route). Every response carries a strict
// Content-Security-Policy: scripts, styles and connections only from the
// same origin, no inline script, no framing.
package ui

import (
	"embed"
	"io/fs"
	"net/http"

	"flywheel/internal/httpx"
)

//go:embed assets
var assets embed.FS

// CSP is the Content-Security-Policy of every /ui/ response.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Register mounts the dashboard at /ui/ (and redirects /ui there).
// The assets are public (httpx.Public); their data comes from the
// authenticated API.
func Register(rt *httpx.Routes) {
	mux := rt.In(httpx.Public)
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embed always holds assets/
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	mux.Handle("GET /ui/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
}
