package api

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"flywheel/internal/atomicfile"
	"flywheel/internal/auth"
	"flywheel/internal/httpx"
	"flywheel/internal/store"
)

// W&B artifacts, the part of W&B's API that the wandb SDK (0.25, 0.28)
// uses to log a one-file dataset artifact — what OpenPipe ART's
// model.train_sft does before it posts the artifact's URL as an SFT job's
// training_data_url. The GraphQL fields are served on the call store's one
// /graphql endpoint (trace.Service.ExtendGraphQL); the uploads on
// PUT /wandb/uploads/{token}. The flow (wandb-core's artifact saver):
//
//   - createArtifact(entityName, projectName, artifactCollectionName,
//     artifactTypeName, digest): a pending artifact, version vN (the first
//     version of that name not yet committed). The caller must be a member of
//     the entity.
//   - createArtifactManifest / createArtifactFiles: upload URLs on this
//     server (one-use random tokens, kept in this node's memory for an hour).
//     An artifact holds one file (ART's train.jsonl); a second is refused.
//   - PUT to those URLs: the file's bytes go to the uploads storage (the
//     manifest is read, bounded, and not kept: the one file is the artifact).
//   - commitArtifact: the file is recorded as a flywheel file (purpose
//     "wandb-artifact", named entity/project/name:vN/file) whose id is
//     derived from entity/project/name:vN, which is also the artifact's id.
//   - artifact(id): the committed artifact, as ArtifactByID asks it.
//
// upsertBucket (a run) and model/bucket (RunResumeStatus) are answered from
// the request, with membership checked: flywheel keeps no W&B runs. Run
// files (createRunFiles) are refused; the run's file_stream is accepted and
// dropped (resolveArtifactFile and the SFT route are what use artifacts).

const (
	wandbPrefix          = "wandb-artifact:///"
	maxPendingArtifacts  = 256
	pendingArtifactTTL   = time.Hour
	maxArtifactVersions  = 100
	maxManifestBytes     = 1 << 20
	maxFileStreamBytes   = 16 << 20
	wandbArtifactPurpose = "wandb-artifact"
)

// artifactName is an artifact collection name as W&B allows it.
var artifactName = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,128}$`)

// pendingArtifact is an artifact between createArtifact and commitArtifact.
type pendingArtifact struct {
	id                     string // the file id it will be committed as
	entity, project, name  string
	version                int
	userID                 string
	typ, digest            string
	fileName, fileToken    string
	manifestToken          string
	bytes                  int64 // of the uploaded file; -1 until then
	created                time.Time
	manifestSeen, uploaded bool
}

// artifacts holds the pending artifacts of this node.
type artifacts struct {
	mu      sync.Mutex
	pending map[string]*pendingArtifact // by id
	tokens  map[string]*pendingArtifact // by upload token
}

// sweep drops the pending artifacts older than pendingArtifactTTL, and the
// bytes an abandoned one uploaded (remove).
func (a *artifacts) sweep(now time.Time, remove func(id string)) {
	for id, p := range a.pending {
		if now.Sub(p.created) > pendingArtifactTTL {
			if p.uploaded {
				remove(id)
			}
			delete(a.pending, id)
			delete(a.tokens, p.fileToken)
			delete(a.tokens, p.manifestToken)
		}
	}
}

// artifactFileID is the id of the file of entity/project/name:vN.
func artifactFileID(entity, project, name string, version int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s/%s/%s:v%d", entity, project, name, version))
	return "file-wandb" + hex.EncodeToString(h[:16])
}

func token() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// WandBGraphQL serves the W&B artifact fields of /graphql (a
// trace.GraphQLField).
func (s *Server) WandBGraphQL(r *http.Request, p *auth.Principal, op string, vars map[string]any) (any, bool, error) {
	if in, ok := vars["input"].(map[string]any); ok { // wandb-core's newer mutations take one $input
		vars = in
	}
	str := func(k string) string { v, _ := vars[k].(string); return v }
	member := func(entity string) error {
		if entity == "" || !p.Member(entity) {
			return fmt.Errorf("entity %q: not found or not yours", entity)
		}
		return nil
	}
	switch op {
	case "upsertBucket":
		entity, project := str("entity"), str("project")
		if entity == "" {
			entity = p.PersonalEntity
		}
		if err := member(entity); err != nil {
			return nil, true, err
		}
		name := str("name")
		if name == "" {
			name = str("id")
		}
		return map[string]any{"inserted": true, "bucket": map[string]any{
			"id": name, "name": name, "displayName": str("displayName"), "description": str("description"),
			"config": "{}", "sweepName": nil, "historyLineCount": 0,
			"project": map[string]any{"id": project, "name": project, "entity": map[string]any{"id": entity, "name": entity}},
		}}, true, nil
	case "model": // RunResumeStatus: no W&B run exists here
		entity := str("entity")
		if entity == "" { // W&B's default: the viewer's entity
			entity = p.PersonalEntity
		}
		if err := member(entity); err != nil {
			return nil, true, err
		}
		return map[string]any{"id": str("project"), "name": str("project"), "entity": map[string]any{"id": entity, "name": entity, "bucket": nil}}, true, nil
	case "project": // ProjectArtifactType/ArtifactType: the type of a name's latest version
		entity, project := str("entity"), str("project")
		if err := member(entity); err != nil {
			return nil, true, err
		}
		out := map[string]any{"name": project, "entity": map[string]any{"name": entity}, "artifact": nil, "artifactType": nil}
		name, _, _ := strings.Cut(str("name"), ":")
		if str("type") == "dataset" {
			out["artifactType"] = map[string]any{"__typename": "ArtifactType", "id": "dataset", "name": "dataset", "description": nil, "createdAt": nil}
		}
		if artifactName.MatchString(name) && artifactName.MatchString(project) {
			if _, err := s.st.FileByID(r.Context(), artifactFileID(entity, project, name, 0)); err == nil {
				out["artifact"] = map[string]any{"artifactType": map[string]any{"name": "dataset"}}
			}
		}
		return out, true, nil
	case "TypeInfo": // wandb-core 0.25's TypeFields/InputFields probes (aliased __type): none of the optional ones
		return map[string]any{"fields": []any{}, "inputFields": []any{}}, true, nil
	case "createArtifact":
		return s.createArtifact(r, p, vars)
	case "createArtifactManifest":
		return s.createArtifactManifest(r, vars)
	case "createArtifactFiles":
		return s.createArtifactFiles(r, vars)
	case "commitArtifact":
		return s.commitArtifact(r, vars)
	case "artifact":
		id := str("id")
		f, err := s.st.FileByID(r.Context(), id)
		if err != nil || f.Purpose != wandbArtifactPurpose {
			return nil, true, nil // GraphQL's null: not found
		}
		parts := strings.SplitN(f.Filename, "/", 4) // entity/project/name:vN/file
		entity, project, name, version, err := parseArtifactRef(strings.Join(parts[:min(3, len(parts))], "/"))
		if err != nil || member(entity) != nil {
			return nil, true, nil
		}
		return artifactJSON(id, entity, project, name, version, "COMMITTED", f.Bytes, f.CreatedAt), true, nil
	}
	return nil, false, nil
}

func artifactJSON(id, entity, project, name string, version int, state string, size int64, created time.Time) map[string]any {
	proj := map[string]any{"name": project, "entity": map[string]any{"name": entity}}
	ts := created.UTC().Format("2006-01-02T15:04:05")
	return map[string]any{
		"__typename": "Artifact", "id": id, "state": state, "versionIndex": version,
		"artifactSequence": map[string]any{"__typename": "ArtifactSequence", "id": id, "name": name, "project": proj,
			"latestArtifact": nil},
		"artifactType": map[string]any{"name": "dataset"}, "description": nil, "metadata": "{}",
		"ttlDurationSeconds": -2, "ttlIsInherited": true, "tags": []any{}, "historyStep": nil,
		"size": size, "digest": id, "commitHash": id, "fileCount": 1, "createdAt": ts, "updatedAt": ts,
		"aliases": []any{},
	}
}

func (s *Server) createArtifact(r *http.Request, p *auth.Principal, vars map[string]any) (any, bool, error) {
	str := func(k string) string { v, _ := vars[k].(string); return v }
	entity, project, name := str("entityName"), str("projectName"), str("artifactCollectionName")
	if entity == "" || !p.Member(entity) {
		return nil, true, fmt.Errorf("entityName %q: not found or not yours", entity)
	}
	if !artifactName.MatchString(project) || !artifactName.MatchString(name) {
		return nil, true, errors.New("projectName and artifactCollectionName must be 1-128 letters, digits, '_', '-', '.'")
	}
	version := -1
	for v := 0; v < maxArtifactVersions; v++ {
		if _, err := s.st.FileByID(r.Context(), artifactFileID(entity, project, name, v)); errors.Is(err, store.ErrNotFound) {
			version = v
			break
		} else if err != nil {
			return nil, true, err
		}
	}
	if version < 0 {
		return nil, true, fmt.Errorf("artifact %s/%s/%s has %d versions, the most flywheel keeps", entity, project, name, maxArtifactVersions)
	}
	pa := &pendingArtifact{id: artifactFileID(entity, project, name, version), entity: entity, project: project, name: name,
		version: version, userID: p.UserID, typ: str("artifactTypeName"), digest: str("digest"), bytes: -1,
		created: time.Now(), manifestToken: token()}
	a := &s.wandb
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sweep(pa.created, func(id string) { os.Remove(s.layout.FilePath(id)) })
	if a.pending == nil {
		a.pending, a.tokens = map[string]*pendingArtifact{}, map[string]*pendingArtifact{}
	}
	if len(a.pending) >= maxPendingArtifacts {
		return nil, true, fmt.Errorf("%d artifacts are being logged, the most flywheel holds; retry later", maxPendingArtifacts)
	}
	if old, ok := a.pending[pa.id]; ok { // the same version begun again: the last one wins
		delete(a.tokens, old.fileToken)
		delete(a.tokens, old.manifestToken)
	}
	a.pending[pa.id] = pa
	a.tokens[pa.manifestToken] = pa
	out := artifactJSON(pa.id, entity, project, name, version, "PENDING", 0, pa.created)
	return map[string]any{"artifact": out}, true, nil
}

// pendingFor returns the pending artifact of vars[key], which the caller
// began.
func (s *Server) pendingFor(r *http.Request, vars map[string]any, key string) (*pendingArtifact, error) {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return nil, perr
	}
	id, _ := vars[key].(string)
	pa, ok := s.wandb.pending[id]
	if !ok || pa.userID != caller.UserID {
		return nil, fmt.Errorf("%s %q: no artifact being logged by you", key, id)
	}
	return pa, nil
}

func uploadURL(r *http.Request, tok string) string {
	return "http://" + r.Host + "/wandb/uploads/" + tok
}

func (s *Server) createArtifactManifest(r *http.Request, vars map[string]any) (any, bool, error) {
	s.wandb.mu.Lock()
	defer s.wandb.mu.Unlock()
	pa, err := s.pendingFor(r, vars, "artifactID")
	if err != nil {
		return nil, true, err
	}
	return map[string]any{"artifactManifest": map[string]any{"id": pa.id, "file": map[string]any{
		"id": pa.id + "-manifest", "name": "wandb_manifest.json", "displayName": "wandb_manifest.json",
		"uploadUrl": uploadURL(r, pa.manifestToken), "uploadHeaders": []any{}, "artifact": map[string]any{"id": pa.id},
	}}}, true, nil
}

func (s *Server) createArtifactFiles(r *http.Request, vars map[string]any) (any, bool, error) {
	specs, _ := vars["artifactFiles"].([]any)
	if len(specs) == 0 {
		return nil, true, errors.New("artifactFiles: expected at least one file")
	}
	s.wandb.mu.Lock()
	defer s.wandb.mu.Unlock()
	var edges []any
	for i, sp := range specs {
		m, _ := sp.(map[string]any)
		pa, err := s.pendingFor(r, m, "artifactID")
		if err != nil {
			return nil, true, fmt.Errorf("artifactFiles[%d].%w", i, err)
		}
		name, _ := m["name"].(string)
		if name == "" || len(name) > 256 {
			return nil, true, fmt.Errorf("artifactFiles[%d].name: expected a file name of 1-256 bytes", i)
		}
		if pa.fileName != "" && pa.fileName != name {
			return nil, true, fmt.Errorf("artifactFiles[%d]: flywheel keeps artifacts of one file (%q already), not %q", i, pa.fileName, name)
		}
		if pa.fileName == "" {
			pa.fileName, pa.fileToken = name, token()
			s.wandb.tokens[pa.fileToken] = pa
		}
		edges = append(edges, map[string]any{"node": map[string]any{
			"id": pa.id + "-file", "name": name, "displayName": name, "storagePath": pa.id,
			"uploadUrl": uploadURL(r, pa.fileToken), "uploadHeaders": []any{}, "uploadMultipartUrls": nil,
			"artifact": map[string]any{"id": pa.id},
		}})
	}
	return map[string]any{"files": map[string]any{"edges": edges}}, true, nil
}

// handleArtifactUpload stores a PUT to an upload URL. The random token is
// the authorization (the SDK sends no key to upload URLs).
func (s *Server) handleArtifactUpload(w http.ResponseWriter, r *http.Request) error {
	tok := r.PathValue("token")
	s.wandb.mu.Lock()
	pa, ok := s.wandb.tokens[tok]
	s.wandb.mu.Unlock()
	if !ok {
		return httpx.Errorf(http.StatusNotFound, "no upload at this URL (it expired or was used)")
	}
	if tok == pa.manifestToken {
		n, err := io.Copy(io.Discard, io.LimitReader(r.Body, maxManifestBytes+1))
		if err != nil {
			return err
		}
		if n > maxManifestBytes {
			return &httpx.Error{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Message: "an artifact manifest is at most 1 MiB"}
		}
		s.wandb.mu.Lock()
		pa.manifestSeen = true
		s.wandb.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		return nil
	}
	dst := s.layout.FilePath(pa.id)
	f, err := atomicfile.Create(dst, store.FileMode)
	if err != nil {
		return err
	}
	defer f.Abort()
	n, err := io.Copy(f, r.Body) // bounded by the middleware's MaxBodyBytes
	if err != nil {
		return err
	}
	// Published under the lock, and only while the URL is live: an upload
	// that ends after its artifact's commit (or expiry) changes nothing.
	s.wandb.mu.Lock()
	defer s.wandb.mu.Unlock()
	if s.wandb.tokens[tok] != pa {
		return httpx.Errorf(http.StatusNotFound, "no upload at this URL (it expired or was used)")
	}
	if err := f.Commit(); err != nil {
		return err
	}
	pa.uploaded, pa.bytes = true, n
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) commitArtifact(r *http.Request, vars map[string]any) (any, bool, error) {
	s.wandb.mu.Lock()
	pa, err := s.pendingFor(r, vars, "artifactID")
	if err == nil && !pa.uploaded {
		err = fmt.Errorf("artifactID %q: its file was not uploaded", pa.id)
	}
	if err != nil {
		s.wandb.mu.Unlock()
		return nil, true, err
	}
	delete(s.wandb.pending, pa.id)
	delete(s.wandb.tokens, pa.fileToken)
	delete(s.wandb.tokens, pa.manifestToken)
	s.wandb.mu.Unlock()
	ref := fmt.Sprintf("%s/%s/%s:v%d", pa.entity, pa.project, pa.name, pa.version)
	rec := store.File{ID: pa.id, UserID: pa.userID, Filename: ref + "/" + pa.fileName, Purpose: wandbArtifactPurpose,
		Bytes: pa.bytes, Path: s.layout.FilePath(pa.id)}
	if err := s.st.CreateFile(r.Context(), rec); err != nil {
		return nil, true, err
	}
	return map[string]any{"artifact": artifactJSON(pa.id, pa.entity, pa.project, pa.name, pa.version, "COMMITTED", pa.bytes, time.Now())}, true, nil
}

// parseArtifactRef splits entity/project/name:vN.
func parseArtifactRef(ref string) (entity, project, name string, version int, err error) {
	parts := strings.Split(ref, "/")
	if len(parts) != 3 {
		return "", "", "", 0, errors.New("expected entity/project/name:vN")
	}
	name, v, ok := strings.Cut(parts[2], ":v")
	if !ok || parts[0] == "" || !artifactName.MatchString(parts[1]) || !artifactName.MatchString(name) {
		return "", "", "", 0, errors.New("expected entity/project/name:vN")
	}
	if _, err := fmt.Sscanf(v, "%d", &version); err != nil || fmt.Sprint(version) != v || version >= maxArtifactVersions {
		return "", "", "", 0, errors.New("expected a version vN, N < 100")
	}
	return parts[0], parts[1], name, version, nil
}

// resolveArtifactFile returns the stored file of a wandb-artifact:/// URL
// the caller may read (a member of its entity); param names the field.
func (s *Server) resolveArtifactFile(r *http.Request, url, param string) (store.File, error) {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return store.File{}, perr
	}
	entity, project, name, version, err := parseArtifactRef(strings.TrimPrefix(url, wandbPrefix))
	if err != nil {
		return store.File{}, httpx.Invalid(param, "invalid_value", "%s %q: %s", param, url, err.Error())
	}
	if caller.Member(entity) {
		f, err := s.st.FileByID(r.Context(), artifactFileID(entity, project, name, version))
		if err == nil && f.Purpose == wandbArtifactPurpose {
			return f, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return store.File{}, err
		}
	}
	return store.File{}, httpx.Invalid(param, "unknown_file", "%s %q: no such W&B artifact logged to flywheel", param, url)
}

// handleFileStream accepts a W&B run's file_stream posts (history, system
// metrics, console output) and drops them: flywheel keeps no W&B runs.
func (s *Server) handleFileStream(w http.ResponseWriter, r *http.Request) error {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return perr
	}
	if !caller.Member(r.PathValue("entity")) {
		return httpx.Errorf(http.StatusNotFound, "entity %q: not found", r.PathValue("entity"))
	}
	n, err := io.Copy(io.Discard, io.LimitReader(r.Body, maxFileStreamBytes+1))
	if err != nil {
		return err
	}
	if n > maxFileStreamBytes {
		return &httpx.Error{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Message: "a file_stream post is at most 16 MiB"}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"exitcode": nil, "limits": map[string]any{}})
	return nil
}

func (s *Server) registerWandB() {
	// Public: the path holds the upload's one-use secret token.
	s.public.Route("PUT /wandb/uploads/{token}", s.handleArtifactUpload)
	s.rt.In(httpx.WandB).MapErrors(storeErrors).Route("POST /files/{entity}/{project}/{run}/file_stream", s.handleFileStream)
}
