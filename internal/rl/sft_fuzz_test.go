package rl

import (
	"errors"
	"testing"

	"flywheel/internal/httpx"
	"flywheel/internal/store"
)

// FuzzSFTRequest checks that reading and resolving an SFT request never
// panics and that every error is a 400 *httpx.Error.
func FuzzSFTRequest(f *testing.F) {
	f.Add([]byte(`{"model_id": "m", "training_data_url": "file-1", "config": {"batch_size": 2, "learning_rate": [1e-4]}}`))
	f.Add([]byte(`{"model_id": "m", "training_data_url": "file-1", "config": {"batch_size": "auto", "learning_rate": 1e999}}`))
	f.Add([]byte(`{"model_id": "m", "training_data_url": "file-1", "experimental_config": {"seed": 7}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := ParseSFTRequest(data)
		if err == nil {
			_, err = ResolveJob(store.KindSFT, "some/model", "job", req.ExperimentalConfig, req.Config)
		}
		if err != nil {
			var he *httpx.Error
			if !errors.As(err, &he) || he.Status != 400 {
				t.Fatalf("error %v is not a 400 *httpx.Error", err)
			}
		}
	})
}
