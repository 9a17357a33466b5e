package runs

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"

	"flywheel/internal/httpx"
)

// The wire of the training-run API, as OpenPipe ART's serverless client
// (src/art/serverless/client.py, art/training/contracts.py,
// token_matrix.py) sends and reads it. Unknown fields are ignored, as
// everywhere on the wire; every value the server uses is checked, and an
// error names its JSON path (param).

// Operation kinds on the wire (the URL's last segment).
const (
	KindForward         = "forward"
	KindForwardBackward = "forward_backward"
	KindOptimStep       = "optim_step"
	KindSaveState       = "save_state"
	KindLoadState       = "load_state"
	KindSaveSampler     = "save_weights_for_sampler"
)

// Bounds of a request (those of the client's contracts, and the server's).
const (
	maxIdentifier   = 255
	maxMatrixTokens = 1 << 20
	maxMatrixRows   = 32
	maxCandidates   = 256
	maxTargetMods   = 256
)

// Spec is a run's spec on the wire; echoed exactly.
type Spec struct {
	BaseModel         string   `json:"base_model"`
	Dtype             string   `json:"dtype"`
	LoRARank          int      `json:"lora_rank"`
	LoRATargetModules []string `json:"lora_target_modules"`
	Seed              *int64   `json:"seed"`
}

// CheckpointSource names learner state to start from or load.
type CheckpointSource struct {
	Kind         string `json:"kind"` // service_checkpoint | wandb_artifact
	CheckpointID string `json:"checkpoint_id,omitempty"`
	Artifact     string `json:"artifact,omitempty"`
}

// InitialState is a run's optional starting state.
type InitialState struct {
	Source           *CheckpointSource `json:"source"`
	RestoreOptimizer bool              `json:"restore_optimizer"`
}

// ResolveRequest is POST /v1/training/runs:resolve.
type ResolveRequest struct {
	RequestID    string        `json:"request_id"`
	RunName      *string       `json:"run_name"`
	Spec         *Spec         `json:"spec"`
	InitialState *InitialState `json:"initial_state"`
}

// command is what every run command carries.
type command struct {
	RequestID  string `json:"request_id"`
	SequenceID *int   `json:"sequence_id"`
}

// Loss is a forward's named loss. The client's wire flattens the loss's
// values (clip thresholds) into the object; beta and matrix_pairs (dpo)
// are accepted the same way.
type Loss struct {
	Name                string       `json:"name"`
	NormalizeAdvantages *bool        `json:"normalize_advantages"`
	ClipLow             *float64     `json:"clip_low_threshold"`
	ClipHigh            *float64     `json:"clip_high_threshold"`
	Beta                *float64     `json:"beta"`
	MatrixPairs         []MatrixPair `json:"matrix_pairs"`
}

// MatrixPair is one dpo comparison.
type MatrixPair struct {
	ComponentID      string `json:"component_id"`
	ChosenMatrixID   string `json:"chosen_matrix_id"`
	RejectedMatrixID string `json:"rejected_matrix_id"`
}

// ForwardRequest is forward and forward_backward.
type ForwardRequest struct {
	command
	Batch                *Batch `json:"batch"`
	Loss                 *Loss  `json:"loss"`
	ReturnTokenLogprobs  *bool  `json:"return_token_logprobs"`
	CollectPackingShapes bool   `json:"collect_packing_shapes"`
	RetainPackedInput    bool   `json:"retain_packed_input"`
}

// Batch is a TokenMatrixBatch.
type Batch struct {
	Kind     string            `json:"kind"`
	Matrices []Matrix          `json:"matrices"`
	Routes   []json.RawMessage `json:"routes"`
}

// Matrix is one TokenMatrix: named rows over one token axis.
type Matrix struct {
	Kind     string `json:"kind"`
	MatrixID string `json:"matrix_id"`
	Rows     []Row  `json:"rows"`
}

// Row is one TokenRow.
type Row struct {
	Name   string    `json:"name"`
	Dtype  string    `json:"dtype"`
	Shape  []int     `json:"shape"`
	Values RowValues `json:"values"`
}

// RowValues is dense (row-major data) or spans (piecewise constant).
type RowValues struct {
	Encoding string            `json:"encoding"`
	Data     []float64         `json:"data"`
	Default  json.RawMessage   `json:"default"`
	Spans    []json.RawMessage `json:"spans"`
}

// Optimizer is optim_step's AdamW configuration (defaults as the client's
// AdamConfig).
type Optimizer struct {
	LearningRate *float64 `json:"learning_rate"`
	Beta1        *float64 `json:"beta1"`
	Beta2        *float64 `json:"beta2"`
	Eps          *float64 `json:"eps"`
	WeightDecay  *float64 `json:"weight_decay"`
	GradClipNorm *float64 `json:"grad_clip_norm"`
}

// OptimStepRequest is optim_step.
type OptimStepRequest struct {
	command
	Optimizer *Optimizer `json:"optimizer"`
}

// Publication says where save_weights_for_sampler publishes.
type Publication struct {
	Target     string `json:"target"` // active | saved_generation
	ModelAlias string `json:"model_alias"`
}

// SaveSamplerRequest is save_weights_for_sampler.
type SaveSamplerRequest struct {
	command
	CheckpointName string       `json:"checkpoint_name"`
	TTLSeconds     *int         `json:"ttl_seconds"`
	Publication    *Publication `json:"publication"`
}

// SaveStateRequest is save_state.
type SaveStateRequest struct {
	command
	CheckpointName string `json:"checkpoint_name"`
	TTLSeconds     *int   `json:"ttl_seconds"`
	Overwrite      bool   `json:"overwrite"`
}

// LoadStateRequest is load_state.
type LoadStateRequest struct {
	command
	Source           *CheckpointSource `json:"source"`
	RestoreOptimizer bool              `json:"restore_optimizer"`
}

// RequestIDOnly is close and result:release.
type RequestIDOnly struct {
	RequestID string `json:"request_id"`
}

func invalid(param, format string, args ...any) error {
	return httpx.Invalid(param, "invalid_value", format, args...)
}

func missing(param string) error {
	return httpx.Invalid(param, "missing_field", "%s is required", param)
}

func checkIdentifier(param, v string) error {
	if v == "" {
		return missing(param)
	}
	if len(v) > maxIdentifier {
		return invalid(param, "%s is longer than %d characters", param, maxIdentifier)
	}
	return nil
}

func (c *command) check() error {
	if err := checkIdentifier("request_id", c.RequestID); err != nil {
		return err
	}
	if c.SequenceID == nil {
		return missing("sequence_id")
	}
	if *c.SequenceID < 0 {
		return invalid("sequence_id", "sequence_id must be nonnegative")
	}
	return nil
}

var artifactRe = regexp.MustCompile(`^[^/:\\\x00-\x1f]+/[^/:\\\x00-\x1f]+/[^/:\\\x00-\x1f]+:v(0|[1-9][0-9]*)$`)

func (s *CheckpointSource) check(param string) error {
	if s == nil {
		return missing(param)
	}
	switch s.Kind {
	case "service_checkpoint":
		if s.CheckpointID == "" {
			return missing(param + ".checkpoint_id")
		}
		if len(s.CheckpointID) > 128 {
			return invalid(param+".checkpoint_id", "checkpoint_id is longer than 128 characters")
		}
	case "wandb_artifact":
		if !artifactRe.MatchString(s.Artifact) {
			return invalid(param+".artifact", "artifact must be entity/project/name:vN, got %q", s.Artifact)
		}
	case "":
		return missing(param + ".kind")
	default:
		return invalid(param+".kind", "source kind must be service_checkpoint or wandb_artifact, got %q", s.Kind)
	}
	return nil
}

func finiteIn(param string, v *float64, def, lo, hi float64, loOpen, hiOpen bool) (float64, error) {
	if v == nil {
		return def, nil
	}
	x := *v
	if math.IsNaN(x) || math.IsInf(x, 0) || x < lo || x > hi || (loOpen && x == lo) || (hiOpen && x == hi) {
		l, r := "[", "]"
		if loOpen {
			l = "("
		}
		if hiOpen {
			r = ")"
		}
		return 0, invalid(param, "%s must be a finite number in %s%g, %g%s, got %v", param, l, lo, hi, r, x)
	}
	return x, nil
}

// stepConfig checks the optimizer and fills its defaults.
func (o *Optimizer) stepConfig() (stepHyper, error) {
	var h stepHyper
	var err error
	if o == nil {
		return h, missing("optimizer")
	}
	if o.LearningRate == nil {
		return h, missing("optimizer.learning_rate")
	}
	big := math.MaxFloat64
	if h.LR, err = finiteIn("optimizer.learning_rate", o.LearningRate, 0, 0, big, false, false); err != nil {
		return h, err
	}
	if h.Beta1, err = finiteIn("optimizer.beta1", o.Beta1, 0.9, 0, 1, false, true); err != nil {
		return h, err
	}
	if h.Beta2, err = finiteIn("optimizer.beta2", o.Beta2, 0.99, 0, 1, false, true); err != nil {
		return h, err
	}
	if h.Eps, err = finiteIn("optimizer.eps", o.Eps, 1e-13, 0, big, true, false); err != nil {
		return h, err
	}
	if h.WeightDecay, err = finiteIn("optimizer.weight_decay", o.WeightDecay, 0.1, 0, big, false, false); err != nil {
		return h, err
	}
	if h.GradClip, err = finiteIn("optimizer.grad_clip_norm", o.GradClipNorm, 0.1, 0, big, false, false); err != nil {
		return h, err
	}
	return h, nil
}

// stepHyper is a checked optimizer configuration.
type stepHyper struct {
	LR, Beta1, Beta2, Eps, WeightDecay, GradClip float64
}

// lossSpec is a checked loss.
type lossSpec struct {
	Name              string
	ClipLow, ClipHigh float64 // cispo
	Beta              float64 // dpo
	Pairs             []MatrixPair
}

// contractID is the loss's contract on the wire (NamedLossOutcome).
func (l lossSpec) contractID() string { return l.Name + "_v1" }

func (l *Loss) check() (lossSpec, error) {
	if l == nil {
		return lossSpec{}, missing("loss")
	}
	s := lossSpec{Name: l.Name}
	switch l.Name {
	case "cross_entropy", "importance_sampling", "cispo", "dpo":
	case "":
		return s, missing("loss.name")
	default:
		return s, invalid("loss.name", "unknown loss %q: expected cross_entropy, importance_sampling, cispo or dpo", l.Name)
	}
	if l.Name != "cispo" && (l.ClipLow != nil || l.ClipHigh != nil) {
		param := "loss.clip_low_threshold"
		if l.ClipLow == nil {
			param = "loss.clip_high_threshold"
		}
		return s, invalid(param, "clip thresholds apply to cispo only, not %s", l.Name)
	}
	if l.Name != "dpo" && (l.Beta != nil || len(l.MatrixPairs) > 0) {
		param := "loss.beta"
		if l.Beta == nil {
			param = "loss.matrix_pairs"
		}
		return s, invalid(param, "%s applies to dpo only, not %s", param, l.Name)
	}
	if (l.Name == "importance_sampling" || l.Name == "cispo") && (l.NormalizeAdvantages == nil || *l.NormalizeAdvantages) {
		return s, invalid("loss.normalize_advantages", "normalize_advantages=true is not supported: send advantages already normalized and normalize_advantages=false (the ART client does)")
	}
	var err error
	big := math.MaxFloat64
	if l.Name == "cispo" {
		if s.ClipLow, err = finiteIn("loss.clip_low_threshold", l.ClipLow, 0, -big, big, false, false); err != nil {
			return s, err
		}
		if s.ClipHigh, err = finiteIn("loss.clip_high_threshold", l.ClipHigh, 4, -big, big, false, false); err != nil {
			return s, err
		}
		if s.ClipLow > s.ClipHigh {
			return s, invalid("loss.clip_low_threshold", "clip_low_threshold (%g) must not exceed clip_high_threshold (%g)", s.ClipLow, s.ClipHigh)
		}
	}
	if l.Name == "dpo" {
		if s.Beta, err = finiteIn("loss.beta", l.Beta, 0.1, 0, big, true, false); err != nil {
			return s, err
		}
		if len(l.MatrixPairs) == 0 {
			return s, invalid("loss.matrix_pairs", "dpo requires at least one chosen/rejected matrix pair")
		}
		seen := map[string]bool{}
		for i, p := range l.MatrixPairs {
			param := fmt.Sprintf("loss.matrix_pairs[%d]", i)
			for _, f := range []struct{ name, v string }{{"component_id", p.ComponentID}, {"chosen_matrix_id", p.ChosenMatrixID}, {"rejected_matrix_id", p.RejectedMatrixID}} {
				if err := checkIdentifier(param+"."+f.name, f.v); err != nil {
					return s, err
				}
			}
			if p.ChosenMatrixID == p.RejectedMatrixID {
				return s, invalid(param, "a matrix pair requires distinct matrices")
			}
			if seen[p.ComponentID] {
				return s, invalid(param+".component_id", "matrix pair component IDs must be unique")
			}
			seen[p.ComponentID] = true
		}
		s.Pairs = l.MatrixPairs
	}
	return s, nil
}
