package main

import (
	"fmt"
	"os"
	"strconv"

	"flywheel/internal/api"
	"flywheel/internal/engine"
	"flywheel/internal/serve"
	"flywheel/internal/trace"
	"flywheel/internal/train"
)

// wireService builds the parts that plug into the service: one engine
// registry (each base model loaded once, shared by training and inference),
// the call store on the same database, the trainer, and the inference server.
//
// Configuration by environment (see README.md):
//
//	FLYWHEEL_PRICES_FILE            default-level prices for the call store (JSON)
//	FLYWHEEL_SERVICE_PRICE_PROMPT   price per prompt token of the service's own models
//	FLYWHEEL_SERVICE_PRICE_COMPLETION  price per completion token of the service's own models
//	FLYWHEEL_TOKENS_PER_STEP        training packing budget per gradient step
func wireService(env serveEnv) (wired, error) {
	reg := engine.NewRegistry(env.ModelsDir)

	topts := trace.Options{PricesFile: os.Getenv("FLYWHEEL_PRICES_FILE"), Logger: env.Logger}
	if bases, err := reg.List(); err == nil {
		topts.BaseModels = bases
	}
	pp, cp := os.Getenv("FLYWHEEL_SERVICE_PRICE_PROMPT"), os.Getenv("FLYWHEEL_SERVICE_PRICE_COMPLETION")
	if pp != "" || cp != "" {
		prompt, err1 := strconv.ParseFloat(pp, 64)
		completion, err2 := strconv.ParseFloat(cp, 64)
		if err1 != nil || err2 != nil || prompt < 0 || completion < 0 {
			return wired{}, fmt.Errorf("FLYWHEEL_SERVICE_PRICE_PROMPT and FLYWHEEL_SERVICE_PRICE_COMPLETION must both be non-negative numbers")
		}
		topts.DefaultServicePrice = &trace.TokenPrice{Prompt: prompt, Completion: completion}
	}
	calls, err := trace.New(env.Store.DB(), topts)
	if err != nil {
		return wired{}, fmt.Errorf("call store: %w", err)
	}

	trOpts := train.Options{}
	if v := os.Getenv("FLYWHEEL_TOKENS_PER_STEP"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return wired{}, fmt.Errorf("FLYWHEEL_TOKENS_PER_STEP must be a positive integer, got %q", v)
		}
		trOpts.TokensPerStep = n
	}
	trainer := train.New(reg, trOpts)

	chat := serve.New(reg, serve.NewStoreResolver(env.Store), calls, serve.Options{Logger: env.Logger})
	if env.Registry != nil {
		if err := env.Registry.Register(chat); err != nil {
			env.Logger.Warn("serve metrics not registered", "err", err)
		}
	}
	return wired{
		Trainer:    trainer,
		Registrars: []api.Registrar{chat, calls},
		Close: func() {
			chat.Close()
			_ = calls.Close()
		},
	}, nil
}
