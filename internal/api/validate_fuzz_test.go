package api

import (
	"errors"
	"testing"

	"flywheel/internal/httpx"
)

// FuzzValidateSFT checks that SFT request validation never panics and that
// every error is a 400 *httpx.Error. (The RL request's fuzz target lives
// with its validation in internal/rl.)
func FuzzValidateSFT(f *testing.F) {
	f.Add([]byte(`{"model_id": "m", "training_data_url": "file-1", "config": {"batch_size": 2, "learning_rate": [1e-4]}}`))
	f.Add([]byte(`{"model_id": "m", "training_data_url": "file-1", "config": {"batch_size": "auto", "learning_rate": 1e999}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := validateSFT(data); err != nil {
			var he *httpx.Error
			if !errors.As(err, &he) || he.Status != 400 {
				t.Fatalf("error %v is not a 400 *httpx.Error", err)
			}
		}
	})
}
