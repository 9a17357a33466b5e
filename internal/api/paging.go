package api

import (
	"net/http"
	"strconv"

	"flywheel/internal/httpx"
	"flywheel/internal/store"
)

// parsePage reads the list query of the contract: after (exclusive cursor),
// limit (1..100, default 20) and, when withOrder, order (asc|desc).
func parsePage(r *http.Request, withOrder bool) (store.Page, error) {
	q := r.URL.Query()
	p := store.Page{After: q.Get("after"), Limit: 20}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return p, httpx.Invalid("limit", "invalid_value", "limit must be an integer in 1..100, got %q", v)
		}
		p.Limit = n
	}
	if withOrder {
		switch v := q.Get("order"); v {
		case "", "asc":
		case "desc":
			p.Desc = true
		default:
			return p, httpx.Invalid("order", "invalid_value", "order must be \"asc\" or \"desc\", got %q", v)
		}
	}
	return p, nil
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
