package train

import (
	"fmt"

	"flywheel/internal/engine"
)

// Learner is one adapter trained one call at a time, for the training-run
// API (internal/runs): forward/backward passes whose gradients accumulate
// until Step applies AdamW. It is the job trainer's learner (the same
// model, clipping, optimizer and checkpoint files), driven from outside.
// Not safe for concurrent use.
type Learner struct {
	s         *session
	baseModel string
}

// StepConfig is one optimizer step's hyper-parameters. GradClipNorm 0
// disables clipping.
type StepConfig struct {
	LearningRate, Beta1, Beta2, Eps, WeightDecay, GradClipNorm float64
}

// NewLearner trains ad on base model baseModel (from reg), with optimizer
// state opt (nil: fresh).
func NewLearner(reg *engine.Registry, baseModel string, ad *engine.Adapter, opt *AdamW) (*Learner, error) {
	base, err := reg.Get(baseModel)
	if err != nil {
		return nil, fmt.Errorf("load base model %s: %w", baseModel, err)
	}
	m, err := newModel(base, ad, 0)
	if err != nil {
		return nil, err
	}
	if opt == nil {
		opt = NewAdamW()
	}
	s := &session{base: base, ad: ad, m: m, opt: opt, params: adapterParams(m), maxLen: base.Config.MaxPositionEmbeddings}
	return &Learner{s: s, baseModel: baseModel}, nil
}

// OpenLearner loads the adapter and, when withOptimizer, the optimizer
// state saved in dir (Save, or a model checkpoint).
func OpenLearner(reg *engine.Registry, baseModel, dir string, withOptimizer bool) (*Learner, error) {
	base, err := reg.Get(baseModel)
	if err != nil {
		return nil, fmt.Errorf("load base model %s: %w", baseModel, err)
	}
	ad, err := engine.LoadAdapter(dir, base.Config)
	if err != nil {
		return nil, err
	}
	var opt *AdamW
	if withOptimizer {
		if opt, err = LoadAdamW(dir); err != nil {
			return nil, err
		}
	}
	return NewLearner(reg, baseModel, ad, opt)
}

// Config is the base model's configuration.
func (l *Learner) Config() *engine.Config { return l.s.base.Config }

// Forward runs b and returns each row's logprob; no gradient is kept.
func (l *Learner) Forward(b *engine.Batch) ([]float64, error) {
	p, err := l.s.m.forward(b)
	if err != nil {
		return nil, err
	}
	return p.LogProb, nil
}

// ForwardBackward runs b, asks loss for the loss and its gradient with
// respect to each row's logprob, and adds the adapter's gradients to those
// accumulated since the last Step. It returns the rows' logprobs and the
// loss. A non-finite loss is an error and adds nothing.
func (l *Learner) ForwardBackward(b *engine.Batch, loss func(lp []float64) (float64, []float64)) ([]float64, float64, error) {
	p, err := l.s.m.forward(b)
	if err != nil {
		return nil, 0, err
	}
	v, g := loss(p.LogProb)
	if !isFinite(v) {
		return nil, 0, &DivergedError{What: fmt.Sprintf("the loss is %v", v)}
	}
	p.Backward(g)
	return p.LogProb, v, nil
}

// Step clips the accumulated gradients, applies one AdamW step and zeroes
// the gradients. It returns the gradient norm before clipping. After an
// error the learner's weights may be partly updated: discard it.
func (l *Learner) Step(c StepConfig) (float64, error) {
	s := l.s
	var gn float64
	if c.GradClipNorm > 0 {
		gn = clipGradNorm(s.params, c.GradClipNorm)
	} else {
		gn = gradNorm(s.params)
	}
	if !isFinite(gn) {
		return gn, &DivergedError{What: fmt.Sprintf("the gradient norm is %v", gn)}
	}
	s.opt.Beta1, s.opt.Beta2, s.opt.Eps, s.opt.WeightDecay = c.Beta1, c.Beta2, c.Eps, c.WeightDecay
	s.opt.update(s.params, c.LearningRate)
	s.m.zeroGrads()
	if name, ok := nonFiniteParam(s.params); !ok {
		return gn, &DivergedError{What: "weight " + name + " is not finite after the update"}
	}
	return gn, nil
}

// OptimizerSteps is how many optimizer steps the optimizer state holds.
func (l *Learner) OptimizerSteps() int { return l.s.opt.Step }

// Save writes the adapter and the optimizer state into dir.
func (l *Learner) Save(dir string) error { return l.s.save(dir, l.baseModel) }

// SaveAdapter writes only the adapter into dir (what a sampler needs).
func (l *Learner) SaveAdapter(dir string) error {
	if err := l.s.ad.Save(dir, l.baseModel); err != nil {
		return fmt.Errorf("save adapter: %w", err)
	}
	return nil
}
