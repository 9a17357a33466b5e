package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"flywheel/internal/pgtest"
)

// gql posts a GraphQL operation to /graphql as the wandb SDK does (HTTP
// basic auth, user "api", password the key) and returns data[field] and the
// first error's message.
func (e *env) gql(key, query string, vars map[string]any) (any, string) {
	e.t.Helper()
	b, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest("POST", e.url+"/graphql", bytes.NewReader(b))
	req.SetBasicAuth("api", key)
	r := e.must(e.send(req), 200)
	if errs, _ := r.body["errors"].([]any); len(errs) > 0 {
		return nil, fmt.Sprint(errs[0].(map[string]any)["message"])
	}
	data, _ := r.body["data"].(map[string]any)
	for _, v := range data {
		return v, ""
	}
	return nil, ""
}

// put PUTs data to an upload URL (no key, as the SDK does).
func (e *env) put(url, data string) int {
	e.t.Helper()
	req, _ := http.NewRequest("PUT", url, strings.NewReader(data))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// The wandb SDK's artifact operations (wandb-core 0.28's mutations).
const (
	qCreateArtifact = `mutation CreateArtifact($input: CreateArtifactInput!) { createArtifact(input: $input) { artifact { id state versionIndex } } }`
	qManifest       = `mutation CreateArtifactManifest($artifactID: ID!) { createArtifactManifest(input: {artifactID: $artifactID}) { artifactManifest { id file { uploadUrl } } } }`
	qFiles          = `mutation CreateArtifactFiles($artifactFiles: [CreateArtifactFileSpecInput!]!) { createArtifactFiles(input: {artifactFiles: $artifactFiles}) { files { edges { node { uploadUrl } } } } }`
	qCommit         = `mutation CommitArtifact($artifactID: ID!) { commitArtifact(input: {artifactID: $artifactID}) { artifact { id state } } }`
	qByID           = `query ArtifactByID($id: ID!) { artifact(id: $id) { id state versionIndex artifactSequence { name project { name entity { name } } } } }`
)

const sftLine = `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}` + "\n"

// logArtifact logs a one-file artifact as the SDK does and returns its id
// and version.
func (e *env) logArtifact(key, entity, project, name, data string) (string, float64) {
	e.t.Helper()
	a, msg := e.gql(key, qCreateArtifact, map[string]any{"input": map[string]any{"entityName": entity, "projectName": project,
		"artifactCollectionName": name, "artifactTypeName": "dataset", "digest": "d"}})
	if msg != "" {
		e.t.Fatalf("createArtifact: %s", msg)
	}
	art := a.(map[string]any)["artifact"].(map[string]any)
	id := art["id"].(string)
	if art["state"] != "PENDING" {
		e.t.Fatalf("createArtifact: %v", art)
	}
	m, msg := e.gql(key, qManifest, map[string]any{"artifactID": id})
	if msg != "" {
		e.t.Fatalf("createArtifactManifest: %s", msg)
	}
	murl := m.(map[string]any)["artifactManifest"].(map[string]any)["file"].(map[string]any)["uploadUrl"].(string)
	f, msg := e.gql(key, qFiles, map[string]any{"artifactFiles": []any{map[string]any{"artifactID": id, "name": "train.jsonl", "md5": "x"}}})
	if msg != "" {
		e.t.Fatalf("createArtifactFiles: %s", msg)
	}
	furl := f.(map[string]any)["files"].(map[string]any)["edges"].([]any)[0].(map[string]any)["node"].(map[string]any)["uploadUrl"].(string)
	if !strings.HasPrefix(furl, e.url+"/wandb/uploads/") || !strings.HasPrefix(murl, e.url+"/wandb/uploads/") {
		e.t.Fatalf("upload URLs %s %s", furl, murl)
	}
	if st := e.put(murl, `{"version": 1, "contents": {}}`); st != 200 {
		e.t.Fatalf("manifest PUT: %d", st)
	}
	if st := e.put(furl, data); st != 200 {
		e.t.Fatalf("file PUT: %d", st)
	}
	c, msg := e.gql(key, qCommit, map[string]any{"artifactID": id})
	if msg != "" || c.(map[string]any)["artifact"].(map[string]any)["state"] != "COMMITTED" {
		e.t.Fatalf("commitArtifact: %v %s", c, msg)
	}
	if st := e.put(furl, data); st != 404 {
		e.t.Errorf("an upload URL after the commit: %d, want 404", st)
	}
	return id, art["versionIndex"].(float64)
}

// model.train_sft's path: the SDK logs the JSONL as an artifact of the
// key's entity, and an SFT job takes its wandb-artifact:/// URL; versions
// count up per name; another entity's artifact is not there for a key.
// Over SQLite and PostgreSQL (internal/pgtest).
func TestWandBArtifactSFT(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testWandBArtifactSFT(t, "") })
	t.Run("postgres", func(t *testing.T) { testWandBArtifactSFT(t, pgtest.DSN(t)) })
}

func testWandBArtifactSFT(t *testing.T, database string) {
	e := newEnv(t, envOpts{noTrain: true, wandb: true, database: database})
	model := e.createModel("m")
	id, v := e.logArtifact(e.alice, "alice", "proj", "m-sft-data-1", sftLine)
	if v != 0 {
		t.Errorf("first version %v, want 0", v)
	}
	a, _ := e.gql(e.alice, qByID, map[string]any{"id": id})
	am, _ := a.(map[string]any)
	seq, _ := am["artifactSequence"].(map[string]any)
	if am["state"] != "COMMITTED" || am["versionIndex"] != 0.0 || seq["name"] != "m-sft-data-1" ||
		seq["project"].(map[string]any)["entity"].(map[string]any)["name"] != "alice" {
		t.Errorf("artifact(id): %v", a)
	}
	if a, msg := e.gql(e.bob, qByID, map[string]any{"id": id}); a != nil || msg != "" {
		t.Errorf("bob reads alice's artifact: %v %s", a, msg)
	}
	if _, v := e.logArtifact(e.alice, "alice", "proj", "m-sft-data-1", sftLine); v != 1 {
		t.Errorf("second version %v, want 1", v)
	}
	if _, v := e.logArtifact(e.alice, "team", "proj", "m-sft-data-1", sftLine); v != 0 {
		t.Errorf("team's first version %v, want 0", v)
	}

	// wandb 0.25's checks before log_artifact: the name's type, the schema probes.
	qType := `query ArtifactType($entity: String!, $project: String!, $name: String!) { project(name: $project, entityName: $entity) { artifact(name: $name) { artifactType { name } } } }`
	for name, want := range map[string]any{"m-sft-data-1:latest": map[string]any{"artifactType": map[string]any{"name": "dataset"}}, "other:latest": nil} {
		p, msg := e.gql(e.alice, qType, map[string]any{"entity": "alice", "project": "proj", "name": name})
		if got := p.(map[string]any)["artifact"]; msg != "" || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("type of %s: %v %s", name, p, msg)
		}
	}
	if _, msg := e.gql(e.bob, qType, map[string]any{"entity": "alice", "project": "proj", "name": "x:latest"}); !strings.Contains(msg, `"alice"`) {
		t.Errorf("bob's type query in alice: %q", msg)
	}
	ti, _ := e.gql(e.alice, `query InputFields($typeName: String!) { TypeInfo: __type(name: $typeName) { inputFields { name } } }`, map[string]any{"typeName": "CreateArtifactInput"})
	if fmt.Sprint(ti) != "map[fields:[] inputFields:[]]" {
		t.Errorf("TypeInfo: %v", ti)
	}

	url := "wandb-artifact:///alice/proj/m-sft-data-1:v1"
	job := e.must(e.do("POST", "/v1/preview/sft-training-jobs", e.alice, map[string]any{"model_id": model, "training_data_url": url}), 200)
	rec := e.must(e.do("GET", "/v1/preview/training-jobs/"+job.body["id"].(string), e.alice, nil), 200).body
	if !strings.HasPrefix(fmt.Sprint(rec["training_data_url"]), "file-wandb") {
		t.Errorf("job's training_data_url %v", rec["training_data_url"])
	}

	// bob: a model of his own, alice's artifact URL is unknown to him.
	bobModel := e.must(e.do("POST", "/v1/preview/models", e.bob, map[string]any{"name": "b", "project": "p", "entity": "bob",
		"base_model": "test/base"}), 200).body["id"].(string)
	for _, c := range []struct{ key, model, url, msg string }{
		{e.bob, bobModel, url, "no such W&B artifact"},
		{e.bob, bobModel, id, "not a file you uploaded"}, // the artifact's file id, directly
		{e.alice, model, id, "not a file you uploaded"},  // named only by its URL
		{e.alice, model, "wandb-artifact:///alice/proj/m-sft-data-1:v9", "no such W&B artifact"},
		{e.alice, model, "wandb-artifact:///alice/proj/m-sft-data-1", "expected entity/project/name:vN"},
		{e.alice, model, "wandb-artifact:///alice/m-sft-data-1:v0", "expected entity/project/name:vN"},
		{e.alice, model, "wandb-artifact:///alice/proj/m-sft-data-1:v01", "expected a version"},
	} {
		r := e.do("POST", "/v1/preview/sft-training-jobs", c.key, map[string]any{"model_id": c.model, "training_data_url": c.url})
		if r.status != 400 || r.errParam() != "training_data_url" || !strings.Contains(fmt.Sprint(r.errField("message")), c.msg) {
			t.Errorf("%s: %d %s", c.url, r.status, r.raw)
		}
	}

	// An artifact whose file is not JSONL for SFT: the job names the line.
	e.logArtifact(e.alice, "alice", "proj", "bad", `{"messages": "x"}`+"\n")
	r := e.do("POST", "/v1/preview/sft-training-jobs", e.alice, map[string]any{"model_id": model, "training_data_url": "wandb-artifact:///alice/proj/bad:v0"})
	if r.status != 400 || r.errParam() != "training_data_url" || !strings.Contains(fmt.Sprint(r.errField("message")), "line 1") {
		t.Errorf("bad artifact: %d %s", r.status, r.raw)
	}
}

// Bad input to the artifact operations is a GraphQL error naming it; a key
// acts only on its entities and its own pending artifacts.
func TestWandBArtifactErrors(t *testing.T) {
	e := newEnv(t, envOpts{noTrain: true, wandb: true})
	create := func(key, entity, name string) (string, string) {
		a, msg := e.gql(key, qCreateArtifact, map[string]any{"input": map[string]any{"entityName": entity, "projectName": "p",
			"artifactCollectionName": name, "artifactTypeName": "dataset"}})
		if msg != "" {
			return "", msg
		}
		return a.(map[string]any)["artifact"].(map[string]any)["id"].(string), ""
	}
	if _, msg := create(e.bob, "alice", "x"); !strings.Contains(msg, `entityName "alice"`) {
		t.Errorf("bob creates in alice: %q", msg)
	}
	if _, msg := create(e.alice, "alice", "a/b"); !strings.Contains(msg, "artifactCollectionName") {
		t.Errorf("bad name: %q", msg)
	}
	id, _ := create(e.alice, "alice", "x")
	if _, msg := e.gql(e.bob, qManifest, map[string]any{"artifactID": id}); !strings.Contains(msg, "artifactID") {
		t.Errorf("bob's manifest on alice's artifact: %q", msg)
	}
	mf, _ := e.gql(e.alice, qManifest, map[string]any{"artifactID": id})
	murl := mf.(map[string]any)["artifactManifest"].(map[string]any)["file"].(map[string]any)["uploadUrl"].(string)
	if st := e.put(murl, strings.Repeat("x", 1<<20+1)); st != 413 {
		t.Errorf("a manifest over 1 MiB: %d, want 413", st)
	}
	if _, msg := e.gql(e.alice, qCommit, map[string]any{"artifactID": id}); !strings.Contains(msg, "not uploaded") {
		t.Errorf("commit before upload: %q", msg)
	}
	files := func(names ...string) string {
		var specs []any
		for _, n := range names {
			specs = append(specs, map[string]any{"artifactID": id, "name": n})
		}
		_, msg := e.gql(e.alice, qFiles, map[string]any{"artifactFiles": specs})
		return msg
	}
	if msg := files("a.jsonl", "b.jsonl"); !strings.Contains(msg, "one file") {
		t.Errorf("two files: %q", msg)
	}
	if msg := files(); !strings.Contains(msg, "artifactFiles") {
		t.Errorf("no files: %q", msg)
	}
	if st := e.put(e.url+"/wandb/uploads/nope", "x"); st != 404 {
		t.Errorf("unknown upload token: %d", st)
	}
	if _, msg := e.gql(e.bob, `mutation UpsertBucket($entity: String) { upsertBucket(input: {entityName: $entity}) { bucket { id } } }`,
		map[string]any{"entity": "alice", "name": "r"}); !strings.Contains(msg, `"alice"`) {
		t.Errorf("bob upserts a run in alice: %q", msg)
	}
	qResume := `query RunResumeStatus($project: String, $entity: String, $name: String!) { model(name: $project, entityName: $entity) { entity { bucket(name: $name, missingOk: true) { name } } } }`
	m, msg := e.gql(e.alice, qResume, map[string]any{"project": "p", "name": "r"}) // no entity: the key's own
	if ent, _ := m.(map[string]any)["entity"].(map[string]any); msg != "" || ent["name"] != "alice" || ent["bucket"] != nil {
		t.Errorf("resume status: %v %s", m, msg)
	}
	if _, msg := e.gql(e.bob, qResume, map[string]any{"project": "p", "entity": "team", "name": "r"}); !strings.Contains(msg, `"team"`) {
		t.Errorf("bob's resume status in team: %q", msg)
	}
	if _, msg := e.gql(e.alice, `mutation CreateRunFiles { createRunFiles(input: {}) { files { uploadUrl } } }`, nil); !strings.Contains(msg, "not createRunFiles") {
		t.Errorf("createRunFiles: %q", msg)
	}
	post := func(key, path string) int {
		req, _ := http.NewRequest("POST", e.url+path, strings.NewReader(`{"files": {}}`))
		req.SetBasicAuth("api", key)
		return e.send(req).status
	}
	if st := post(e.alice, "/files/alice/p/r/file_stream"); st != 200 {
		t.Errorf("file_stream: %d", st)
	}
	if st := post(e.bob, "/files/alice/p/r/file_stream"); st != 404 {
		t.Errorf("bob's file_stream in alice: %d", st)
	}
	if st := post("", "/files/alice/p/r/file_stream"); st != 401 {
		t.Errorf("file_stream without a key: %d", st)
	}
}
