package trace

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
)

// ChoiceLink is the recorded call that sampled a choice: the call's project
// (entity/project), its id, and the choice's index in the call's output.
type ChoiceLink struct {
	ProjectID   string `json:"project_id"`
	CallID      string `json:"call_id"`
	ChoiceIndex int    `json:"choice_index"`
}

// ChoiceLinker keeps which recorded call sampled each choice, by the
// choice's rl.ChoiceFingerprint, so that a training job's choices lead back
// to their calls: the inference server links a call's choices as it records
// the call (LinkChoices), the dashboard looks them up (ChoiceLinks).
// *Service implements it.
type ChoiceLinker interface {
	LinkChoices(ctx context.Context, projectID, callID string, fingerprints []string) error
	ChoiceLinks(ctx context.Context, p *auth.Principal, fingerprints []string) (map[string]ChoiceLink, error)
}

var _ ChoiceLinker = (*Service)(nil)

// linkLookupChunk is how many fingerprints one lookup query carries.
const linkLookupChunk = 500

// LinkChoices records that call callID of project projectID (entity/project,
// already written by RecordCall) sampled choices whose fingerprints
// (rl.ChoiceFingerprint) are fingerprints, by choice index; empty
// fingerprints (choices without logprobs) are skipped.
func (s *Service) LinkChoices(ctx context.Context, projectID, callID string, fingerprints []string) error {
	entity, name, err := splitProjectID(projectID, "project_id")
	if err != nil {
		return err
	}
	proj, ok, err := s.lookupProject(ctx, s.db, entity, name)
	if err != nil {
		return fmt.Errorf("trace: link choices: %w", err)
	}
	if !ok {
		return fmt.Errorf("trace: link choices: no project %s", projectID)
	}
	at := s.now().UnixMicro()
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		for i, fp := range fingerprints {
			if fp == "" {
				continue
			}
			if _, err := tx.ExecContext(ctx, s.d.sql(`INSERT INTO trace_choice_links (fingerprint, project, call_id, choice_index, created_at) VALUES (?, ?, ?, ?, ?)`),
				fp, proj, callID, i, at); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("trace: link choices: %w", err)
	}
	return nil
}

// ChoiceLinks returns, for each fingerprint that has one, the latest call of
// a project of the caller's entities that sampled a choice with it. Calls of
// other entities are never returned (nor is their existence revealed).
func (s *Service) ChoiceLinks(ctx context.Context, p *auth.Principal, fingerprints []string) (map[string]ChoiceLink, error) {
	out := map[string]ChoiceLink{}
	if p == nil || len(p.Entities) == 0 {
		return out, nil
	}
	ents := s.d.listArg(p.Entities)
	for from := 0; from < len(fingerprints); from += linkLookupChunk {
		fps := s.d.listArg(fingerprints[from:min(from+linkLookupChunk, len(fingerprints))])
		if err := s.choiceLinks(ctx, fps, ents, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Service) choiceLinks(ctx context.Context, fps, ents any, out map[string]ChoiceLink) error {
	// One row per fingerprint, its latest link (identical samples, e.g.
	// greedy ones, share a fingerprint across many calls).
	rows, err := s.db.QueryContext(ctx, s.d.sql(`SELECT fingerprint, entity, name, call_id, choice_index FROM (
		SELECT l.fingerprint, p.entity, p.name, l.call_id, l.choice_index, ROW_NUMBER() OVER (
			PARTITION BY l.fingerprint ORDER BY l.created_at DESC, l.call_id DESC, l.choice_index DESC) AS rn
		FROM trace_choice_links l JOIN trace_projects p ON p.id = l.project
		WHERE `+s.d.inList("l.fingerprint", "?1")+` AND `+s.d.inList("p.entity", "?2")+`) latest
		WHERE rn = 1`), fps, ents)
	if err != nil {
		return fmt.Errorf("trace: choice links: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var fp, entity, name string
		var l ChoiceLink
		if err := rows.Scan(&fp, &entity, &name, &l.CallID, &l.ChoiceIndex); err != nil {
			return fmt.Errorf("trace: choice links: %w", err)
		}
		l.ProjectID = entity + "/" + name
		out[fp] = l
	}
	return rows.Err()
}

// Projects lists the call-store projects (entity/project) of the given
// entities, by name; at most limit of them.
func (s *Service) Projects(ctx context.Context, entities []string, limit int) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, s.d.sql(`SELECT entity, name FROM trace_projects WHERE `+s.d.inList("entity", "?1")+`
		ORDER BY entity, name LIMIT ?2`), s.d.listArg(entities), limit)
	if err != nil {
		return nil, fmt.Errorf("trace: projects: %w", err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var e, n string
		if err := rows.Scan(&e, &n); err != nil {
			return nil, err
		}
		out = append(out, e+"/"+n)
	}
	return out, rows.Err()
}

// handleProjects serves GET /calls/projects (an extension for the
// dashboard): {"projects": ["entity/project", ...]} of the caller's entities.
func (s *Service) handleProjects(w http.ResponseWriter, r *http.Request, p *auth.Principal, _ []byte) error {
	projects, err := s.Projects(r.Context(), p.Entities, 1000)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"projects": projects})
	return nil
}
