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
// It holds messages_and_choices or exchanges (exchanges.go), not both: ART
// refuses a trajectory with exchanges and any of messages_and_choices,
// tools or additional_histories.
func (s *scanner) trajectory() error {
	var haveMC bool
	var legacy string   // the first field of the messages_and_choices form with content
	var ex jsonlex.Path // where exchanges are, when they hold a call
	exStart, exEnd := 0, 0
	err := s.wantObject(false, func(key []byte) error {
		switch k := string(key); k {
		case "messages_and_choices", "tools":
			return s.historyKey(key, &haveMC, &legacy)
		case "exchanges":
			s.push("exchanges")
			exStart = s.pos
			calls, err := s.exchanges()
			if err != nil {
				return err
			}
			if calls > 0 {
				ex = jsonlex.Path(s.pathString())
			}
			exEnd = s.pos
			s.pop()
			return nil
		case "reward":
			return s.numberAt("reward", false)
		case "additional_histories":
			return s.at("additional_histories", func() error {
				n, err := s.wantArray(true, func(int) error { return s.history() })
				if n > 0 && legacy == "" {
					legacy = "additional_histories"
				}
				return err
			})
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
	if ex != "" {
		if legacy != "" {
			p := s.pathString()
			return httpx.Invalid(p, "invalid_value", "%s: a trajectory holds exchanges or messages_and_choices (with tools and additional_histories), not both; this one has exchanges and %s", p, legacy)
		}
		_, err := exchangeHistories(string(ex), s.full[exStart:exEnd])
		return err
	}
	if !haveMC {
		s.push("messages_and_choices")
		defer s.pop()
		p := s.pathString()
		return httpx.Invalid(p, "missing_field", "%s is required (or exchanges, the calls ART's tracing captures)", p)
	}
	return nil
}

// exchanges validates a trajectory's exchanges (an object, or null) and
// returns the number of its Chat Completions calls. The other protocols ART
// captures (completions, responses, messages) are refused: they are not
// chat messages this trainer renders.
func (s *scanner) exchanges() (int, error) {
	calls := 0
	err := s.wantObject(true, func(key []byte) error {
		switch k := string(key); k {
		case "chat_completions":
			return s.arrayAt("chat_completions", true, func(int) error { calls++; return s.chatExchange() })
		case "completions", "responses", "messages":
			return s.arrayAt(constKey(k), true, func(int) error {
				return s.invalid("unsupported_value", "only Chat Completions exchanges (exchanges.chat_completions) can be trained; ART's %s exchanges are not supported", k)
			})
		}
		return s.skip()
	})
	return calls, err
}

// chatExchange validates one ChatCompletionsExchange as ART dumps it:
// start_time and end_time, the request body sent and the response
// received. What only the histories tell (the model, the choices' indices,
// the times' format) exchangeHistories checks.
func (s *scanner) chatExchange() error {
	var have [4]bool
	err := s.wantObject(false, func(key []byte) error {
		switch k := string(key); k {
		case "start_time", "end_time":
			have[0] = have[0] || k == "start_time"
			have[1] = have[1] || k == "end_time"
			return s.at(constKey(k), func() error { _, err := s.wantString(false); return err })
		case "request":
			have[2] = true
			return s.objectAt("request", false, s.chatRequestKey)
		case "response":
			have[3] = true
			return s.objectAt("response", false, s.chatResponseKey)
		case "model":
			return s.at("model", func() error { _, err := s.wantString(true); return err })
		}
		return s.skip()
	})
	if err != nil {
		return err
	}
	for i, k := range []string{"start_time", "end_time", "request", "response"} {
		if !have[i] {
			return s.missing(k)
		}
	}
	return nil
}

// chatRequestKey validates a key of a Chat Completions request body: the
// fields training reads. A request with its own chat_template is refused:
// the trainer renders with the base model's.
func (s *scanner) chatRequestKey(key []byte) error {
	switch string(key) {
	case "messages":
		return s.arrayAt("messages", false, func(int) error { return s.chatMessage() })
	case "tools":
		return s.arrayAt("tools", true, func(int) error { return s.wantObject(false, s.skipKey) })
	case "model":
		return s.at("model", func() error { _, err := s.wantString(true); return err })
	case "chat_template_kwargs":
		return s.objectAt("chat_template_kwargs", true, s.skipKey)
	case "chat_template":
		return s.at("chat_template", func() error {
			if s.peek() == 'n' {
				return s.skip()
			}
			return s.invalid("unsupported_value", "a call with its own chat_template cannot be trained faithfully: the trainer renders with the base model's chat template")
		})
	}
	return s.skip()
}

// chatResponseKey validates a key of a Chat Completions response: its
// choices (at least one) and model.
func (s *scanner) chatResponseKey(key []byte) error {
	switch string(key) {
	case "choices":
		return s.at("choices", func() error {
			n, err := s.wantArray(false, func(int) error { return s.responseChoice() })
			if err == nil && n == 0 {
				return s.invalid("invalid_value", "a response must contain at least one choice")
			}
			return err
		})
	case "model":
		return s.at("model", func() error { _, err := s.wantString(true); return err })
	}
	return s.skip()
}

// chatMessage validates a message of a request: an object with a role.
func (s *scanner) chatMessage() error {
	m, err := s.element("an object (a chat message)")
	if err != nil {
		return err
	}
	if m.role.pos < 0 {
		return s.missing("role")
	}
	return s.checkMessageFields(m.role, m.content, m.name, m.toolCalls, m.toolCallID)
}

// responseChoice validates a choice of a response.
func (s *scanner) responseChoice() error {
	m, err := s.element("an object (a choice)")
	if err != nil {
		return err
	}
	if m.message.pos < 0 {
		return s.missing("message")
	}
	return s.checkChoice(&m)
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
	case "start_time":
		return "start_time"
	case "end_time":
		return "end_time"
	case "completions":
		return "completions"
	case "responses":
		return "responses"
	case "messages":
		return "messages"
	}
	return "?"
}

func (s *scanner) skipKey([]byte) error { return s.skip() }

// history validates one element of additional_histories.
func (s *scanner) history() error {
	have, legacy := false, ""
	if err := s.wantObject(false, func(key []byte) error { return s.historyKey(key, &have, &legacy) }); err != nil {
		return err
	}
	if !have {
		return s.missing("messages_and_choices")
	}
	return nil
}

// historyKey validates one key of a history, the keys a trajectory shares
// with its additional histories (messages_and_choices, tools); others are
// skipped. have is set when messages_and_choices is seen; legacy, when
// empty, is set to the key when messages_and_choices is not empty or tools
// is not null.
func (s *scanner) historyKey(key []byte, have *bool, legacy *string) error {
	switch string(key) {
	case "messages_and_choices":
		*have = true
		return s.at("messages_and_choices", func() error {
			n, err := s.wantArray(false, func(int) error { return s.messageOrChoice() })
			if n > 0 && *legacy == "" {
				*legacy = "messages_and_choices"
			}
			return err
		})
	case "tools":
		if s.peek() != 'n' && *legacy == "" {
			*legacy = "tools"
		}
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

// element walks the object the scanner is at (want names it when it is
// not one), recording its known keys (scanFields).
func (s *scanner) element(want string) (mcFields, error) {
	var m mcFields
	if s.peek() != '{' {
		return m, s.typeErr(want)
	}
	err := s.scanFields(&m)
	return m, err
}

// messageOrChoice validates an element of messages_and_choices: a chat
// message (it has "role") or a choice (no "role", has "message"). The
// element is walked once, recording the known keys; their types are checked
// once the element's kind is known, since keys come in any order.
func (s *scanner) messageOrChoice() error {
	m, err := s.element("an object (a chat message or a choice)")
	if err != nil {
		return err
	}
	if m.role.pos >= 0 {
		return s.checkMessageFields(m.role, m.content, m.name, m.toolCalls, m.toolCallID)
	}
	if m.message.pos < 0 {
		p := s.pathString()
		return httpx.Invalid(p, "invalid_value", "%s: element is neither a chat message (no \"role\") nor a choice (no \"message\")", p)
	}
	return s.checkChoice(&m)
}

// checkChoice checks the types of a choice's known fields, walking its
// message and logprobs again with their schema; the scanner ends after the
// choice.
func (s *scanner) checkChoice(m *mcFields) error {
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
