package rl

import (
	"encoding/json"
	"fmt"
	"io"
)

// TrajectoriesFile is the file of a checkpoint folder that holds what the
// RL job that made it trained on (Trained), written by the trainer beside
// the adapter. The job's request body is deleted when the job ends; this
// summary (without per-token logprobs) is what remains, so a checkpoint
// leads to its trajectories and each choice to the call that sampled it.
const TrajectoriesFile = "trajectories.json"

// Trained is the content of TrajectoriesFile.
type Trained struct {
	JobID        string              `json:"job_id"`
	Trajectories []TrainedTrajectory `json:"trajectories"`
}

// TrainedTrajectory is one trajectory of a job: its group, reward and
// messages, with each choice reduced to TrainedChoice.
type TrainedTrajectory struct {
	Group      int               `json:"group"`
	Reward     float64           `json:"reward"`
	Histories  int               `json:"additional_histories"`
	Messages   []json.RawMessage `json:"messages_and_choices"` // a chat message as sent, or {"choice": TrainedChoice}
	NumChoices int               `json:"num_choices"`
}

// TrainedChoice is a trained-on choice without its logprobs: the message,
// the number of sampled tokens and its fingerprint (ChoiceFingerprint; ""
// when it had no logprobs).
type TrainedChoice struct {
	Content      *string         `json:"content"`
	ToolCalls    json.RawMessage `json:"tool_calls,omitempty"`
	FinishReason json.RawMessage `json:"finish_reason,omitempty"`
	NumTokens    int             `json:"num_tokens"`
	Fingerprint  string          `json:"fingerprint"`
}

// Summarize reduces a job's request to what TrajectoriesFile keeps.
func Summarize(jobID string, req Request) Trained {
	out := Trained{JobID: jobID, Trajectories: []TrainedTrajectory{}}
	for g, group := range req.TrajectoryGroups {
		for _, t := range group.Trajectories {
			// A trajectory of exchanges shows its first history (validated:
			// Histories cannot fail here) and counts the others.
			hs, _, _ := t.Histories()
			var first []json.RawMessage
			if len(hs) > 0 {
				first = hs[0].MessagesAndChoices
			}
			tt := TrainedTrajectory{Group: g, Reward: t.Reward, Histories: max(len(hs)-1, 0),
				Messages: make([]json.RawMessage, 0, len(first))}
			for _, raw := range first {
				var e Element
				if json.Unmarshal(raw, &e) != nil || !e.IsChoice() {
					tt.Messages = append(tt.Messages, raw)
					continue
				}
				c := TrainedChoice{Content: e.Message.Content, ToolCalls: e.Message.ToolCalls, FinishReason: e.FinishReason,
					NumTokens: len(e.Sampled()), Fingerprint: e.Fingerprint()}
				b, _ := json.Marshal(map[string]any{"choice": c})
				tt.Messages = append(tt.Messages, b)
				tt.NumChoices++
			}
			out.Trajectories = append(out.Trajectories, tt)
		}
	}
	return out
}

// ReadTrainedPage reads a TrajectoriesFile from r and returns its job id, the
// trajectories [offset, offset+limit) and how many there are in all. It
// decodes one trajectory at a time, so a page of a file of any size costs
// the memory of the page and of one trajectory, not of the file.
func ReadTrainedPage(r io.Reader, offset, limit int) (jobID string, page []TrainedTrajectory, total int, err error) {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return "", nil, 0, err
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", nil, 0, fmt.Errorf("%s: %w", TrajectoriesFile, err)
		}
		switch key {
		case "job_id":
			if err := dec.Decode(&jobID); err != nil {
				return "", nil, 0, fmt.Errorf("%s: job_id: %w", TrajectoriesFile, err)
			}
		case "trajectories":
			if err := expectDelim(dec, '['); err != nil {
				return "", nil, 0, err
			}
			for ; dec.More(); total++ {
				if total >= offset && total-offset < limit {
					var t TrainedTrajectory
					err = dec.Decode(&t)
					page = append(page, t)
				} else {
					var skip json.RawMessage
					err = dec.Decode(&skip)
				}
				if err != nil {
					return "", nil, 0, fmt.Errorf("%s: trajectory %d: %w", TrajectoriesFile, total, err)
				}
			}
			if err := expectDelim(dec, ']'); err != nil {
				return "", nil, 0, err
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", nil, 0, fmt.Errorf("%s: %w", TrajectoriesFile, err)
			}
		}
	}
	return jobID, page, total, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%s: %w", TrajectoriesFile, err)
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return fmt.Errorf("%s: expected %q, got %v", TrajectoriesFile, want, t)
	}
	return nil
}
