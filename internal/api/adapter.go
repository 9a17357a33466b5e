package api

import (
	"fmt"

	"flywheel/internal/engine"
	"flywheel/internal/store"
)

// defaultLoRA is the adapter shape of a model created without "lora": the
// engine's default.
func defaultLoRA() store.LoRA {
	lc := engine.DefaultLoRAConfig()
	return store.LoRA{Rank: lc.Rank, Alpha: lc.Alpha, TargetModules: lc.TargetModules}
}

// validateLoRA checks an adapter shape with the engine's rules.
func validateLoRA(l store.LoRA) error {
	return engine.LoRAConfig{Rank: l.Rank, Alpha: l.Alpha, TargetModules: l.TargetModules}.Validate()
}

// writeInitialAdapter writes the untrained adapter of a new model (step 0:
// B = 0, so the adapted model equals the base) in PEFT layout into dir.
func writeInitialAdapter(baseModelDir, baseModel string, l store.LoRA, seed uint64, dir string) error {
	cfg, err := engine.ReadConfig(baseModelDir)
	if err != nil {
		return fmt.Errorf("read base model config: %w", err)
	}
	a, err := engine.NewAdapter(cfg, engine.LoRAConfig{Rank: l.Rank, Alpha: l.Alpha, TargetModules: l.TargetModules}, seed)
	if err != nil {
		return fmt.Errorf("make adapter: %w", err)
	}
	if err := a.Save(dir, baseModel); err != nil {
		return fmt.Errorf("save adapter: %w", err)
	}
	return nil
}
