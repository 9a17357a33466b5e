package api

import (
	"net/http"
	"strconv"

	"flywheel/internal/httpx"
	"flywheel/internal/store"
)

// pageRules are a list route's paging: the default and largest limit,
// whether it takes order=asc|desc, and whether it lists newest first
// unless order says otherwise.
type pageRules struct {
	limit, maxLimit int
	order, desc     bool
}

var (
	// contractPage is the contract's list paging: limit 1..100 (default
	// 20), oldest first unless order=desc.
	contractPage = pageRules{limit: 20, maxLimit: 100, order: true}
	// filesPage is OpenAI's file list: limit 1..10000 (default 10000),
	// newest first unless order=asc.
	filesPage = pageRules{limit: 10000, maxLimit: 10000, order: true, desc: true}
)

// parsePage reads a list query: after (exclusive cursor), limit and (when
// the route takes it) order, by the route's rules.
func parsePage(r *http.Request, rules pageRules) (store.Page, error) {
	q := r.URL.Query()
	p := store.Page{After: q.Get("after"), Desc: rules.desc}
	var err error
	if p.Limit, err = pageLimit(r, rules); err != nil {
		return p, err
	}
	if rules.order {
		switch v := q.Get("order"); v {
		case "":
		case "asc":
			p.Desc = false
		case "desc":
			p.Desc = true
		default:
			return p, httpx.Invalid("order", "invalid_value", "order must be \"asc\" or \"desc\", got %q", v)
		}
	}
	return p, nil
}

// pageLimit reads the query's limit by the route's rules (its default when
// absent).
func pageLimit(r *http.Request, rules pageRules) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return rules.limit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > rules.maxLimit {
		return 0, httpx.Invalid("limit", "invalid_value", "limit must be an integer in 1..%d, got %q", rules.maxLimit, v)
	}
	return n, nil
}

// writeList writes {"object": "list", "data", "first_id", "last_id", "has_more"}.
func writeList[T any](w http.ResponseWriter, items []T, id func(T) string, render func(T) any, more bool) {
	data := make([]any, 0, len(items))
	for _, it := range items {
		data = append(data, render(it))
	}
	var first, last any
	if len(items) > 0 {
		first, last = id(items[0]), id(items[len(items)-1])
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": more,
	})
}
