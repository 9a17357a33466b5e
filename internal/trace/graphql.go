package trace

import (
	"encoding/json"
	"net/http"
	"regexp"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
)

// POST /graphql: the few questions Weave's Python SDK asks W&B's GraphQL API
// (at WANDB_BASE_URL) before it logs anything, answered from flywheel's own
// users and entities. It is not a GraphQL server: the operation is
// recognised by its root field, and anything else is a GraphQL error saying
// so. The answers (weave 0.54, weave/compat/wandb/wandb_thin/internal_api.py):
//
//   - project(name, entityName) {name}: the project, when the caller is a
//     member of the entity (flywheel creates call-store projects on first
//     write, so every name of a member's entity exists); else a
//     PERMISSION_ERROR, which the SDK reports as "no permission".
//   - upsertModel(input: {name, entityName}) {model {name}}: the same.
//   - viewer {username, defaultEntity {name}}: the caller's user name and
//     personal entity (weave.init("project") without an entity uses it).
//   - serverInfo {frontendHost}: "" (there is no W&B frontend).

// graphqlRoot finds the root field of the operation (after the first "{").
var graphqlRoot = regexp.MustCompile(`^[^{]*\{\s*([A-Za-z_][A-Za-z0-9_]*)`)

// maxGraphQLBytes bounds a /graphql request (the SDK's are a few hundred bytes).
const maxGraphQLBytes = 64 << 10

func (s *Service) handleGraphQL(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	if len(body) > maxGraphQLBytes {
		return &httpx.Error{Status: http.StatusRequestEntityTooLarge, Param: "query", Code: "body_too_large",
			Message: "a /graphql request is at most 64 KiB"}
	}
	var req struct {
		Query     string         `json:"query"`
		Variables map[string]any `json:"variables"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	m := graphqlRoot.FindStringSubmatch(req.Query)
	if m == nil {
		return httpx.Invalid("query", "invalid_value", "expected a GraphQL operation")
	}
	str := func(k string) string {
		v, _ := req.Variables[k].(string)
		return v
	}
	var data any
	op := m[1]
	if _, weave := req.Variables["entityName"]; op == "project" && !weave {
		op = "" // the wandb SDK's project(entityName: $entity, ...): ExtendGraphQL's
	}
	switch op {
	case "project", "upsertModel":
		entity, name := str("entityName"), str("name")
		if m[1] == "upsertModel" {
			entity = str("entity")
		}
		if _, _, err := authorize(p, entity+"/"+name, "variables"); err != nil {
			return graphqlError(w, err.Error(), "PERMISSION_ERROR")
		}
		if m[1] == "project" {
			data = map[string]any{"project": map[string]any{"name": name}}
		} else {
			data = map[string]any{"upsertModel": map[string]any{"model": map[string]any{"name": name, "description": nil}}}
		}
	case "viewer":
		data = map[string]any{"viewer": map[string]any{"id": p.UserID, "username": p.UserName, "entity": p.PersonalEntity,
			"defaultEntity": map[string]any{"name": p.PersonalEntity}, "flags": "{}", "teams": map[string]any{"edges": []any{}}}}
	case "serverInfo":
		data = map[string]any{"serverInfo": map[string]any{"frontendHost": "", "features": []any{}}}
	default:
		if s.extra != nil {
			d, ok, err := s.extra(r, p, m[1], req.Variables)
			if err != nil {
				return graphqlError(w, err.Error(), "BAD_REQUEST")
			}
			if ok {
				data = map[string]any{m[1]: d}
				break
			}
		}
		s.log.Debug("graphql operation not served", "field", m[1])
		return graphqlError(w, "flywheel answers only the GraphQL operations Weave's SDK and wandb's artifact upload need, not "+m[1], "NOT_SERVED")
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"data": data})
	return nil
}

// GraphQLField answers the GraphQL root field op with its data (ok=false:
// not a field it serves); an error becomes a GraphQL error naming it.
type GraphQLField func(r *http.Request, p *auth.Principal, op string, vars map[string]any) (data any, ok bool, err error)

// ExtendGraphQL adds the root fields another package serves (W&B
// artifacts, internal/api) to this one /graphql endpoint. Call it before
// serving.
func (s *Service) ExtendGraphQL(f GraphQLField) { s.extra = f }

// graphqlError answers a GraphQL error (HTTP 200, as GraphQL servers do).
func graphqlError(w http.ResponseWriter, msg, code string) error {
	b, _ := json.Marshal(map[string]any{"data": nil, "errors": []any{map[string]any{"message": msg, "extensions": map[string]any{"code": code}}}})
	writeRaw(w, http.StatusOK, "application/json", append(b, '\n'))
	return nil
}
