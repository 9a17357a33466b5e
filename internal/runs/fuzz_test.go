package runs

import (
	"encoding/json"
	"testing"

	"flywheel/internal/engine"
	"flywheel/internal/httpx"
)

// FuzzForwardBody: any body is answered by a check, never a panic, and a
// body the checks accept gives a batch the engine accepts.
func FuzzForwardBody(f *testing.F) {
	for _, seed := range []string{
		`{"request_id":"r","sequence_id":0,"loss":{"name":"cross_entropy"},"batch":{"matrices":[{"matrix_id":"m","rows":[{"name":"token_ids","dtype":"int64","shape":[3],"values":{"encoding":"dense","data":[1,2,3]}},{"name":"target_token_ids","dtype":"int64","shape":[3,2],"values":{"encoding":"spans","default":[4,5],"spans":[{"start":1,"end":2,"value":[6,7]}]}},{"name":"loss_weights","dtype":"float32","shape":[3,2],"values":{"encoding":"dense","data":[1,0,1,0,1,1]}}]}]}}`,
		`{"request_id":"r","sequence_id":0,"loss":{"name":"dpo","matrix_pairs":[{"component_id":"c","chosen_matrix_id":"a","rejected_matrix_id":"b"}]},"batch":{"matrices":[]}}`,
		`{"loss":{"name":"cispo","normalize_advantages":false,"clip_low_threshold":2,"clip_high_threshold":1}}`,
		`{"batch":{"matrices":[{"matrix_id":"m","rows":[{"name":"token_ids","dtype":"int64","shape":[0],"values":{"encoding":"spans","default":1,"spans":[{"start":-1,"end":99}]}}]}]}}`,
	} {
		f.Add([]byte(seed))
	}
	cfg := &engine.Config{VocabSize: 64, MaxPositionEmbeddings: 32}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req ForwardRequest
		if err := httpx.UnmarshalJSON(body, &req); err != nil {
			return
		}
		ls, err := req.Loss.check()
		if err != nil {
			return
		}
		tb, err := buildBatch(req.Batch, &ls, cfg)
		if err != nil {
			if _, ok := err.(*httpx.Error); !ok {
				t.Fatalf("not a 4xx: %v", err)
			}
			return
		}
		if len(tb.b.Rows) != len(tb.w) || len(tb.b.Targets) != len(tb.b.Rows) || len(tb.matrix) != len(tb.b.Rows) {
			t.Fatalf("rows disagree: %d rows, %d targets, %d weights", len(tb.b.Rows), len(tb.b.Targets), len(tb.w))
		}
		lp := make([]float64, len(tb.b.Rows))
		for i := range lp {
			lp[i] = -1
		}
		lossAndGrad(ls, tb, lp)
		_, _ = json.Marshal(tb.policyCounts())
	})
}
