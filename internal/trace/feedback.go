package trace

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
)

// Feedback: scores, reactions, notes and annotations on a ref (a call or an
// object) of the project, as the Weave SDKs write them (/feedback/create,
// /feedback/batch/create; call.feedback.add_reaction, EvaluationLogger's
// scores) and read them (/feedback/query), and /feedback/purge.

// Default bound of a feedback payload (Options.MaxFeedbackBytes), and the
// most items of one /feedback/batch/create.
const (
	DefaultMaxFeedbackBytes = 1 << 20
	maxFeedbackBatch        = 1000
	maxNoteChars            = 1024
)

// feedbackFields are feedback's fields (and columns) with their kind, for
// /feedback/query's query, fields and sort_by.
var feedbackFields = map[string]byte{
	"id": 't', "weave_ref": 't', "wb_user_id": 't', "creator": 't', "created_at": 'd', "feedback_type": 't',
	"annotation_ref": 't', "runnable_ref": 't', "call_ref": 't', "trigger_ref": 't',
}

// feedbackOrder is the order of a feedback row's keys in responses.
var feedbackOrder = []string{"id", "project_id", "weave_ref", "wb_user_id", "creator", "created_at", "feedback_type",
	"payload", "annotation_ref", "runnable_ref", "call_ref", "trigger_ref"}

type feedbackIn struct {
	ProjectID     string          `json:"project_id"`
	ID            *string         `json:"id"`
	WeaveRef      *string         `json:"weave_ref"`
	Creator       *string         `json:"creator"`
	FeedbackType  *string         `json:"feedback_type"`
	Payload       json.RawMessage `json:"payload"`
	AnnotationRef *string         `json:"annotation_ref"`
	RunnableRef   *string         `json:"runnable_ref"`
	CallRef       *string         `json:"call_ref"`
	TriggerRef    *string         `json:"trigger_ref"`
}

// feedbackRow is a validated feedback, ready to store.
type feedbackRow struct {
	entity, name                                 string
	id, weaveRef, feedbackType, userID           string
	creator, annotationRef, runnableRef, callRef *string
	triggerRef                                   *string
	payload                                      []byte
	createdAt                                    int64
}

func (s *Service) maxFeedbackBytes() int {
	if s.opts.MaxFeedbackBytes > 0 {
		return s.opts.MaxFeedbackBytes
	}
	return DefaultMaxFeedbackBytes
}

// parseFeedback validates one feedback (path prefixes field names).
func (s *Service) parseFeedback(p *auth.Principal, in *feedbackIn, path string) (*feedbackRow, error) {
	entity, name, err := authorize(p, in.ProjectID, joinPath(path, "project_id"))
	if err != nil {
		return nil, err
	}
	f := &feedbackRow{entity: entity, name: name, userID: p.UserID, createdAt: s.now().UnixMicro()}
	if in.ID != nil {
		if !validID(*in.ID) {
			return nil, httpx.Invalid(joinPath(path, "id"), "invalid_value", "invalid feedback id %q: expected a UUID", *in.ID)
		}
		f.id = *in.ID
	} else {
		f.id = NewUUIDv7()
	}
	if in.WeaveRef == nil || *in.WeaveRef == "" {
		return nil, httpx.Invalid(joinPath(path, "weave_ref"), "missing_field", "required: the ref the feedback is about")
	}
	// the ref must be of this project: feedback is read by project
	if prefix := "weave:///" + entity + "/" + name + "/"; !strings.HasPrefix(*in.WeaveRef, prefix) {
		return nil, httpx.Invalid(joinPath(path, "weave_ref"), "invalid_value", "the ref must be of project %s/%s (start with %s)", entity, name, prefix)
	}
	f.weaveRef = *in.WeaveRef
	if in.FeedbackType == nil || *in.FeedbackType == "" {
		return nil, httpx.Invalid(joinPath(path, "feedback_type"), "missing_field", "required: a string (wandb.reaction.1, wandb.note.1, ...)")
	}
	f.feedbackType = *in.FeedbackType
	for _, t := range []struct {
		v    *string
		name string
	}{{in.WeaveRef, "weave_ref"}, {in.FeedbackType, "feedback_type"}, {in.Creator, "creator"}, {in.AnnotationRef, "annotation_ref"},
		{in.RunnableRef, "runnable_ref"}, {in.CallRef, "call_ref"}, {in.TriggerRef, "trigger_ref"}} {
		if err := checkText(t.v, joinPath(path, t.name)); err != nil {
			return nil, err
		}
	}
	f.creator, f.annotationRef, f.runnableRef, f.callRef, f.triggerRef = in.Creator, in.AnnotationRef, in.RunnableRef, in.CallRef, in.TriggerRef
	ppath := joinPath(path, "payload")
	if jsonKindOf(in.Payload) != 'o' {
		return nil, httpx.Invalid(ppath, "invalid_type", "required: a JSON object")
	}
	if f.payload, err = Canonicalize(in.Payload); err != nil {
		return nil, httpx.Invalid(ppath, "invalid_json", "%s", err.Error())
	}
	if limit := s.maxFeedbackBytes(); len(f.payload) > limit {
		return nil, &httpx.Error{Status: http.StatusRequestEntityTooLarge, Param: ppath, Code: "payload_too_large",
			Message: fmt.Sprintf("%s: the payload is %d bytes as stored JSON; the limit is %d bytes", ppath, len(f.payload), limit)}
	}
	// the payload shapes Weave checks for its own feedback types
	switch f.feedbackType {
	case "wandb.reaction.1":
		if err := onlyString(f.payload, "emoji", ppath, 0); err != nil {
			return nil, err
		}
	case "wandb.note.1":
		if err := onlyString(f.payload, "note", ppath, maxNoteChars); err != nil {
			return nil, err
		}
	}
	if strings.HasPrefix(f.feedbackType, "wandb.runnable.") && f.runnableRef == nil {
		return nil, httpx.Invalid(joinPath(path, "runnable_ref"), "missing_field", "required for feedback of type %s", f.feedbackType)
	}
	if strings.HasPrefix(f.feedbackType, "wandb.annotation.") && f.annotationRef == nil {
		return nil, httpx.Invalid(joinPath(path, "annotation_ref"), "missing_field", "required for feedback of type %s", f.feedbackType)
	}
	return f, nil
}

// onlyString checks that payload is {key: a non-empty string} with at most
// maxChars characters (0: no bound).
func onlyString(payload []byte, key, path string, maxChars int) error {
	ms, _ := splitObject(payload)
	var v string
	if len(ms) != 1 || ms[0].Key != key || json.Unmarshal(ms[0].Value, &v) != nil || v == "" {
		return httpx.Invalid(path, "invalid_value", "expected {%q: a non-empty string}", key)
	}
	if maxChars > 0 && utf8.RuneCountInString(v) > maxChars {
		return httpx.Invalid(path+"."+key, "invalid_value", "at most %d characters", maxChars)
	}
	return nil
}

// storeFeedback writes rows in one transaction per project.
func (s *Service) storeFeedback(ctx context.Context, rows []*feedbackRow) error {
	for _, f := range rows {
		err := s.projectTx(ctx, f.entity, f.name, func(tx *sql.Tx, proj int64) error {
			res, err := tx.ExecContext(ctx, s.d.sql(`INSERT INTO trace_feedback (project, id, weave_ref, wb_user_id, creator, created_at,
				feedback_type, payload, annotation_ref, runnable_ref, call_ref, trigger_ref)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (project, id) DO NOTHING`), proj, f.id, f.weaveRef, f.userID, nullStr(f.creator), f.createdAt,
				f.feedbackType, bytesStr(f.payload), nullStr(f.annotationRef), nullStr(f.runnableRef), nullStr(f.callRef), nullStr(f.triggerRef))
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				if err == nil {
					err = httpx.Errorf(http.StatusConflict, "feedback %s already exists", f.id)
				}
				return err
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func appendFeedbackCreated(b []byte, f *feedbackRow) []byte {
	b = append(b, `{"id": `...)
	b = appendPyString(b, f.id)
	b = append(b, `, "created_at": `...)
	b = appendTime(b, f.createdAt)
	b = append(b, `, "wb_user_id": `...)
	b = appendPyString(b, f.userID)
	b = append(b, `, "payload": `...)
	b = append(b, f.payload...)
	return append(b, '}')
}

func (s *Service) handleFeedbackCreate(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var in feedbackIn
	if err := decodeAt(body, &in, ""); err != nil {
		return err
	}
	f, err := s.parseFeedback(p, &in, "")
	if err != nil {
		return err
	}
	if err := s.storeFeedback(r.Context(), []*feedbackRow{f}); err != nil {
		return err
	}
	writeRaw(w, http.StatusOK, "application/json", append(appendFeedbackCreated(nil, f), '\n'))
	return nil
}

func (s *Service) handleFeedbackBatchCreate(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req struct {
		Batch *[]feedbackIn `json:"batch"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	if req.Batch == nil {
		return httpx.Invalid("batch", "missing_field", "required: an array of feedback")
	}
	if len(*req.Batch) > maxFeedbackBatch {
		return &httpx.Error{Status: http.StatusRequestEntityTooLarge, Param: "batch", Code: "too_many_items",
			Message: fmt.Sprintf("batch: at most %d feedback per request, got %d", maxFeedbackBatch, len(*req.Batch))}
	}
	rows := make([]*feedbackRow, len(*req.Batch))
	for i := range *req.Batch {
		var err error
		if rows[i], err = s.parseFeedback(p, &(*req.Batch)[i], fmt.Sprintf("batch[%d]", i)); err != nil {
			return err
		}
	}
	if err := s.storeFeedback(r.Context(), rows); err != nil {
		return err
	}
	b := []byte(`{"res": [`)
	for i, f := range rows {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendFeedbackCreated(b, f)
	}
	writeRaw(w, http.StatusOK, "application/json", append(b, "]}\n"...))
	return nil
}

// feedbackColumns maps a field to its SELECT expression.
func feedbackColumn(field string) string {
	if field == "project_id" {
		return "id" // written from the request; a column read in its place
	}
	return field
}

func (s *Service) handleFeedbackQuery(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	req, err := decodeFieldsQuery(p, body)
	if err != nil {
		return err
	}
	entity, name := req.entity, req.name
	fields := feedbackOrder
	if len(req.Fields) > 0 { // none named: all of them
		fields = nil
		for i, f := range req.Fields {
			if _, ok := feedbackFields[f]; !ok && f != "project_id" && f != "payload" {
				return httpx.Invalid(fmt.Sprintf("fields[%d]", i), "invalid_value", "unknown feedback field %q", f)
			}
			fields = append(fields, f)
		}
	}
	where := "project = ?"
	var args []any
	if len(req.Query) > 0 && string(req.Query) != "null" {
		cond, cargs, err := querySQL(req.Query, "query", feedbackFields)
		if err != nil {
			return err
		}
		where += " AND (" + cond + ")"
		args = cargs
	}
	var order []string
	for i, sf := range req.SortBy {
		if _, ok := feedbackFields[sf.Field]; !ok {
			return httpx.Invalid(fmt.Sprintf("sort_by[%d].field", i), "invalid_value", "cannot sort feedback by %q", sf.Field)
		}
		dir, err := s.d.direction(sf.Direction, fmt.Sprintf("sort_by[%d].direction", i))
		if err != nil {
			return err
		}
		order = append(order, sf.Field+" "+dir)
	}
	order = append(order, "created_at ASC", "id ASC")
	lim, off, err := limitOffset(req.Limit, req.Offset)
	if err != nil {
		return err
	}
	ctx := r.Context()
	proj, found, err := s.lookupProject(ctx, s.db, entity, name)
	if err != nil {
		return err
	}
	if !found {
		writeRaw(w, http.StatusOK, "application/json", []byte("{\"result\": [], \"total_count\": 0}\n"))
		return nil
	}
	args = append([]any{proj}, args...)
	var total int64
	if err := s.db.QueryRowContext(ctx, s.d.dyn(`SELECT COUNT(*) FROM trace_feedback WHERE `+where), args...).Scan(&total); err != nil {
		return err
	}
	cols := make([]string, len(fields))
	for i, f := range fields {
		cols[i] = feedbackColumn(f)
	}
	rows, err := s.db.QueryContext(ctx, s.d.dyn(`SELECT `+strings.Join(cols, ", ")+` FROM trace_feedback WHERE `+where+
		` ORDER BY `+strings.Join(order, ", ")+` LIMIT ? OFFSET ?`), append(args, lim, off)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	b := []byte(`{"result": [`)
	vals := make([]sql.NullString, len(fields))
	ptrs := make([]any, len(fields))
	for n := 0; rows.Next(); n++ {
		var created sql.NullInt64
		for i, f := range fields {
			if f == "created_at" {
				ptrs[i] = &created
			} else {
				ptrs[i] = &vals[i]
			}
		}
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		if n > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '{')
		for i, f := range fields {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendPyString(b, f)
			b = append(b, ": "...)
			switch f {
			case "project_id":
				b = appendPyString(b, entity+"/"+name)
			case "payload":
				b = append(b, vals[i].String...)
			case "created_at":
				b = appendNullTime(b, created)
			default:
				b = appendNullStr(b, vals[i])
			}
		}
		b = append(b, '}')
	}
	if err := rows.Err(); err != nil {
		return err
	}
	b = append(b, `], "total_count": `...)
	b = strconv.AppendInt(b, total, 10)
	writeRaw(w, http.StatusOK, "application/json", append(b, "}\n"...))
	return nil
}

func (s *Service) handleFeedbackPurge(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	entity, name, ids, err := decodePurge(p, body)
	if err != nil {
		return err
	}
	ctx := r.Context()
	proj, found, err := s.lookupProject(ctx, s.db, entity, name)
	if err != nil {
		return err
	}
	if found && len(ids) > 0 {
		if _, err := s.exec(ctx, `DELETE FROM trace_feedback WHERE project = ? AND `+s.d.inList("id", "?"), proj, s.d.listArg(ids)); err != nil {
			return err
		}
	}
	writeRaw(w, http.StatusOK, "application/json", []byte("{}\n"))
	return nil
}
