package rl

import (
	"flywheel/internal/httpx"
	"flywheel/internal/jsonlex"
)

// Summary is what Validate extracts from an RL training-job body: enough
// to look up the model, resolve experimental_config (ResolveJob) and log the
// job's size. The body itself is stored as sent and parsed again by the
// trainer (ParseRequest).
type Summary struct {
	ModelID            string
	ExperimentalConfig []byte // raw JSON object, aliasing the body; nil when absent or null
	Groups             int    // trajectory groups
	Trajectories       int    // trajectories over all groups
}

// Validate checks an RL training-job request body against the wire
// contract (api.md) in one pass over the bytes: required fields, types,
// non-empty groups, finite rewards, and that every
// element of messages_and_choices is either a chat message or a choice.
// Errors are *httpx.Error naming the JSON path. experimental_config is
// only checked to be an object here and returned raw for ResolveJob: it
// is small, and its ranges depend on the base model's default learning rate.
func Validate(data []byte) (Summary, error) {
	s := &scanner{data: data, full: data, path: jsonlex.MakePathStack(16)}
	return s.rl()
}

// ValidateStream is Validate on a body that is still arriving, so that
// validation overlaps reading it: arrived delivers the length of the filled
// prefix of body as it grows (the final value len(body)), and is closed
// when reading stops. The result is always Validate's on the whole body.
// A scan that fails while it sees only part of the body may have failed on
// a token cut by the window edge (or one longer than fillAhead), so it is
// repeated over the whole body once it has arrived.
func ValidateStream(body []byte, arrived <-chan int) (Summary, error) {
	return validateStreamAhead(body, arrived, fillAhead)
}

// validateStreamAhead is ValidateStream keeping ahead bytes in the
// window (tests use tiny values to cut tokens at every position).
func validateStreamAhead(body []byte, arrived <-chan int, ahead int) (Summary, error) {
	s := &scanner{data: body[:0], full: body, more: arrived, ahead: ahead, path: jsonlex.MakePathStack(16)}
	req, err := s.rl()
	if err != nil && len(s.data) < len(body) {
		s.wait(len(body))
		if len(s.data) == len(body) {
			return Validate(body)
		}
	}
	return req, err
}

// rl validates an RL training-job request (see Validate).
func (s *scanner) rl() (Summary, error) {
	var req Summary
	s.fill()
	if c := s.peek(); c != '{' {
		if c == 0 {
			return req, httpx.Invalid("", "invalid_json", "request body is empty; expected a JSON object")
		}
		if c == '[' || c == '"' || c == 't' || c == 'f' || c == 'n' || c == '-' || c >= '0' && c <= '9' {
			return req, httpx.Invalid("", "invalid_type", "request body must be a JSON object, got %s", jsonlex.KindOf(c))
		}
		return req, s.syntaxErr("expected a JSON object")
	}
	var haveModel, haveGroups bool
	err := s.object(func(key []byte) error {
		switch string(key) {
		case "model_id":
			s.push("model_id")
			b, err := s.wantString(false)
			if err != nil {
				return err
			}
			req.ModelID, haveModel = string(b), true
			s.pop()
		case "trajectory_groups":
			s.push("trajectory_groups")
			n, err := s.wantArray(false, func(i int) error { return s.group(&req) })
			if err != nil {
				return err
			}
			if n == 0 {
				return s.invalid("invalid_value", "must contain at least one trajectory group")
			}
			req.Groups, haveGroups = n, true
			s.pop()
		case "experimental_config":
			s.push("experimental_config")
			start := s.pos
			if err := s.wantObject(true, func([]byte) error { return s.skip() }); err != nil {
				return err
			}
			if raw := s.data[jsonlex.SkipSpace(s.data, start):s.pos]; len(raw) > 0 && raw[0] == '{' {
				req.ExperimentalConfig = raw
			}
			s.pop()
		default:
			return s.skip()
		}
		return nil
	})
	if err != nil {
		return req, err
	}
	s.wait(len(s.full))
	if len(s.data) < len(s.full) {
		return req, httpx.Invalid("", "invalid_json", "request body is shorter than its Content-Length")
	}
	if err := s.end(); err != nil {
		return req, err
	}
	if !haveModel {
		return req, httpx.Invalid("model_id", "missing_field", "model_id is required")
	}
	if req.ModelID == "" {
		return req, httpx.Invalid("model_id", "invalid_value", "model_id must not be empty")
	}
	if !haveGroups {
		return req, httpx.Invalid("trajectory_groups", "missing_field", "trajectory_groups is required")
	}
	return req, nil
}

// group validates one TrajectoryGroup.
func (s *scanner) group(req *Summary) error {
	have := false
	err := s.wantObject(false, func(key []byte) error {
		if string(key) != "trajectories" {
			return s.skip()
		}
		have = true
		s.push("trajectories")
		n, err := s.wantArray(false, func(int) error { return s.trajectory() })
		if err != nil {
			return err
		}
		if n == 0 {
			return s.invalid("invalid_value", "a trajectory group must contain at least one trajectory")
		}
		req.Trajectories += n
		s.pop()
		return nil
	})
	if err != nil {
		return err
	}
	if !have {
		return s.missing("trajectories")
	}
	return nil
}

// missing reports a required field absent from the object at the current path.
func (s *scanner) missing(key string) error {
	s.push(key)
	defer s.pop()
	p := s.pathString()
	return httpx.Invalid(p, "missing_field", "%s is required", p)
}

// trajectory validates one Trajectory. Its reward may be absent, meaning
// 0: ART 0.5.18+ serialise a trajectory without the fields that equal their
// defaults (pydantic's exclude_defaults), and the reward's default is 0.0.
func (s *scanner) trajectory() error {
	var haveMC bool
	err := s.wantObject(false, func(key []byte) error {
		switch k := string(key); k {
		case "messages_and_choices", "tools":
			return s.historyKey(key, &haveMC)
		case "reward":
			return s.numberAt("reward", false)
		case "additional_histories":
			return s.arrayAt("additional_histories", true, func(int) error { return s.history() })
		case "initial_policy_version", "final_policy_version":
			return s.numberAt(constKey(k), true)
		case "metrics", "auto_metrics", "metadata":
			return s.objectAt(constKey(k), true, s.skipKey)
		case "logs":
			return s.arrayAt("logs", true, func(int) error { return s.skip() })
		}
		return s.skip()
	})
	if err != nil {
		return err
	}
	if !haveMC {
		return s.missing("messages_and_choices")
	}
	return nil
}

// constKey maps a key seen in a switch back to its constant, so the path
// stack never holds a string that aliases the request buffer.
func constKey(k string) string {
	switch k {
	case "initial_policy_version":
		return "initial_policy_version"
	case "final_policy_version":
		return "final_policy_version"
	case "metrics":
		return "metrics"
	case "auto_metrics":
		return "auto_metrics"
	case "metadata":
		return "metadata"
	}
	return "?"
}

func (s *scanner) skipKey([]byte) error { return s.skip() }

// history validates one element of additional_histories.
func (s *scanner) history() error {
	have := false
	if err := s.wantObject(false, func(key []byte) error { return s.historyKey(key, &have) }); err != nil {
		return err
	}
	if !have {
		return s.missing("messages_and_choices")
	}
	return nil
}

// historyKey validates one key of a history, the keys a trajectory shares
// with its additional histories (messages_and_choices, tools); others are
// skipped. have is set when messages_and_choices is seen.
func (s *scanner) historyKey(key []byte, have *bool) error {
	switch string(key) {
	case "messages_and_choices":
		*have = true
		return s.arrayAt("messages_and_choices", false, func(int) error { return s.messageOrChoice() })
	case "tools":
		return s.arrayAt("tools", true, func(int) error { return s.wantObject(false, s.skipKey) })
	}
	return s.skip()
}

// at runs check on the value of key, where the scanner stands, with key
// on the path for the errors check reports.
func (s *scanner) at(key string, check func() error) error {
	s.push(key)
	if err := check(); err != nil {
		return err
	}
	s.pop()
	return nil
}

// numberAt validates the value of key as a finite number (or null when
// nullable).
func (s *scanner) numberAt(key string, nullable bool) error {
	return s.at(key, func() error { _, err := s.wantNumber(nullable); return err })
}

// arrayAt validates the value of key as an array (or null when nullable),
// calling fn for each element.
func (s *scanner) arrayAt(key string, nullable bool, fn func(i int) error) error {
	return s.at(key, func() error { _, err := s.wantArray(nullable, fn); return err })
}

// objectAt validates the value of key as an object (or null when
// nullable), calling fn for each member.
func (s *scanner) objectAt(key string, nullable bool, fn func(key []byte) error) error {
	return s.at(key, func() error { return s.wantObject(nullable, fn) })
}

// field records where a known key's value starts and its kind.
type field struct {
	pos  int  // offset of the value, -1 when absent
	kind byte // first byte of the value
}

// mcFields are the known keys of a chat message or a choice.
type mcFields struct {
	role, content, name, toolCalls, toolCallID field
	message, finish, index, logprobs           field
	lpChecked                                  bool  // logprobs validated during the walk
	lpErr                                      error // its schema error, if any
}

// scanFields walks an object recording the known keys of mcFields; the
// values are only syntax-checked.
func (s *scanner) scanFields(m *mcFields) error {
	*m = mcFields{}
	for _, f := range []*field{&m.role, &m.content, &m.name, &m.toolCalls, &m.toolCallID, &m.message, &m.finish, &m.index, &m.logprobs} {
		f.pos = -1
	}
	return s.object(func(key []byte) error {
		var f *field
		switch string(key) {
		case "role":
			f = &m.role
		case "content":
			f = &m.content
		case "name":
			f = &m.name
		case "tool_calls":
			f = &m.toolCalls
		case "tool_call_id":
			f = &m.toolCallID
		case "message":
			f = &m.message
		case "finish_reason":
			f = &m.finish
		case "index":
			f = &m.index
		case "logprobs":
			f = &m.logprobs
		}
		if f == nil {
			return s.skip()
		}
		f.kind = s.peek()
		f.pos = s.pos
		if f == &m.logprobs && m.role.pos < 0 && f.kind == '{' {
			// Most of a payload is choices' logprobs: check them with the
			// choice schema in this pass rather than walking them twice. A
			// schema error is kept until the element turns out a choice.
			return s.eagerLogprobs(m)
		}
		return s.skip()
	})
}

// eagerLogprobs validates a logprobs value in place (see scanFields).
func (s *scanner) eagerLogprobs(m *mcFields) error {
	start, depth, n := s.pos, s.depth, s.path.Len()
	s.push("logprobs")
	err := s.object(s.logprobsKey)
	if err == nil {
		s.pop()
		m.lpChecked = true
		return nil
	}
	if he, ok := err.(*httpx.Error); ok && he.Code == "invalid_json" {
		return err
	}
	m.lpErr, m.lpChecked = err, true
	s.pos, s.depth = start, depth
	s.path.Truncate(n)
	return s.skip()
}

// messageOrChoice validates an element of messages_and_choices: a chat
// message (it has "role") or a choice (no "role", has "message"). The
// element is walked once, recording the known keys; their types are checked
// once the element's kind is known, since keys come in any order.
func (s *scanner) messageOrChoice() error {
	if s.peek() != '{' {
		return s.typeErr("an object (a chat message or a choice)")
	}
	var m mcFields
	if err := s.scanFields(&m); err != nil {
		return err
	}
	if m.role.pos >= 0 {
		return s.checkMessageFields(m.role, m.content, m.name, m.toolCalls, m.toolCallID)
	}
	if m.message.pos < 0 {
		p := s.pathString()
		return httpx.Invalid(p, "invalid_value", "%s: element is neither a chat message (no \"role\") nor a choice (no \"message\")", p)
	}
	if err := s.kindIs("finish_reason", m.finish, "a string", '"', 'n'); err != nil {
		return err
	}
	if err := s.kindIs("index", m.index, "a number", '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'n'); err != nil {
		return err
	}
	if err := s.kindIs("message", m.message, "an object", '{'); err != nil {
		return err
	}
	if err := s.kindIs("logprobs", m.logprobs, "an object", '{', 'n'); err != nil {
		return err
	}
	// The choice's message and logprobs are walked again with their schema.
	end, depth := s.pos, s.depth
	defer func() { s.pos, s.depth = end, depth }()
	s.pos = m.message.pos
	s.push("message")
	var cm mcFields
	if err := s.scanFields(&cm); err != nil {
		return err
	}
	if err := s.kindIs("role", cm.role, "a string", '"', 'n'); err != nil {
		return err
	}
	if err := s.checkMessageFields(field{pos: -1}, cm.content, cm.name, cm.toolCalls, cm.toolCallID); err != nil {
		return err
	}
	s.pop()
	if m.lpErr != nil {
		return m.lpErr
	}
	if m.logprobs.pos >= 0 && !m.lpChecked {
		s.pos = m.logprobs.pos
		return s.objectAt("logprobs", true, s.logprobsKey)
	}
	return nil
}

// checkMessageFields checks the types of a chat message's known fields;
// role is required when role.pos >= 0 is asked for (top-level messages).
func (s *scanner) checkMessageFields(role, content, name, toolCalls, toolCallID field) error {
	if role.pos >= 0 {
		if err := s.kindIs("role", role, "a string", '"'); err != nil {
			return err
		}
	}
	if err := s.kindIs("content", content, "a string or an array of content parts", '"', '[', 'n'); err != nil {
		return err
	}
	if err := s.kindIs("name", name, "a string", '"', 'n'); err != nil {
		return err
	}
	if err := s.kindIs("tool_calls", toolCalls, "an array", '[', 'n'); err != nil {
		return err
	}
	return s.kindIs("tool_call_id", toolCallID, "a string", '"', 'n')
}

// kindIs reports a type error for key when the recorded field is present
// and its kind is not among ok.
func (s *scanner) kindIs(key string, f field, want string, ok ...byte) error {
	if f.pos < 0 {
		return nil
	}
	for _, c := range ok {
		if f.kind == c {
			return nil
		}
	}
	s.push(key)
	defer s.pop()
	return httpx.TypeMismatch(s.pathString(), want, jsonlex.KindOf(f.kind))
}

// logprobsKey validates the keys of a choice's logprobs object: "content"
// is null or an array of {token: string, logprob: number, ...}.
func (s *scanner) logprobsKey(key []byte) error {
	if string(key) != "content" {
		return s.skip()
	}
	s.push("content")
	_, err := s.wantArray(true, func(int) error {
		var haveLP bool
		err := s.wantObject(false, func(k []byte) error {
			switch string(k) {
			case "token":
				return s.at("token", func() error { _, err := s.wantString(false); return err })
			case "logprob":
				haveLP = true
				return s.numberAt("logprob", false)
			}
			return s.skip()
		})
		if err != nil {
			return err
		}
		if !haveLP {
			return s.missing("logprob")
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.pop()
	return nil
}
