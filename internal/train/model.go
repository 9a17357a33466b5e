package train

import (
	"flywheel/internal/engine"
)

// The model is defined once, in the engine (engine/net.go: each layer's
// forward and backward side by side); serving runs the same layer code. The
// trainer only packs batches, asks the engine for a forward that keeps its
// activations, and hands the loss gradient back to it.

// batch and seg are the engine's packed training batch and its sequences.
type (
	batch = engine.Batch
	seg   = engine.Segment
)

// model is what one training session runs: the base model's definition in
// float32, the adapter being trained (its factors alias the session's
// engine.Adapter, so the optimizer's updates are what gets saved) with its
// gradients, and the memory budgets of a pass.
type model struct {
	net     *engine.Net[float32]
	lora    *engine.LoRA[float32]
	budgets engine.Budgets
}

// newModel prepares base for training ad.
func newModel(base *engine.Model, ad *engine.Adapter, activationBudget int64) (*model, error) {
	if err := ad.Check(base.Config); err != nil {
		return nil, err
	}
	b := engine.DefaultBudgets
	if activationBudget > 0 {
		b.Activations = activationBudget
	}
	return &model{net: base.Net(), lora: engine.NewLoRA[float32](ad, true), budgets: b}, nil
}

func (m *model) zeroGrads() { m.lora.ZeroGrads() }

// forward runs the batch, keeping what the backward needs.
func (m *model) forward(b *batch) (*engine.Pass[float32], error) {
	return m.net.ForwardBatch(b, m.lora, m.budgets)
}
