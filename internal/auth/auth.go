// Package auth defines who is calling: the Principal that the HTTP layer
// resolves from an API key and hands to every handler through the request
// context. It knows nothing of storage; the store resolves keys.
package auth

import "context"

// Principal is an authenticated caller: a user and the entities it belongs to.
type Principal struct {
	UserID         string   // the user's id (uuid)
	UserName       string   // the user's name, e.g. "admin"
	PersonalEntity string   // the user's personal entity name (same as UserName)
	Entities       []string // names of every entity the user is a member of, personal one included
	KeyID          string   // id of the API key used
}

// Member reports whether the principal belongs to the named entity.
func (p *Principal) Member(entity string) bool {
	if p == nil {
		return false
	}
	for _, e := range p.Entities {
		if e == entity {
			return true
		}
	}
	return false
}

type ctxKey struct{}

// WithPrincipal returns a context that carries p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal stored by WithPrincipal, if any.
func FromContext(ctx context.Context) (*Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(*Principal)
	return p, ok && p != nil
}
