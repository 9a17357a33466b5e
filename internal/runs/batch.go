package runs

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"

	"flywheel/internal/engine"
	"flywheel/internal/train"
)

// tokenBatch is a checked TokenMatrixBatch made into the engine's packed
// batch: the matrices' token sequences packed as a prefix tree (the job
// trainer's packing, train.PackPrefixes: a group's shared prompt runs once),
// and one row per (position, candidate) of target_token_ids, predicting
// target_token_ids[t][k] from tokens[0..t].
// Per row it holds what the loss reads.
type tokenBatch struct {
	b        *engine.Batch
	ids      []string // matrix ids, in order
	lens     []int    // tokens per matrix
	widths   []int    // candidates per position (K) per matrix
	matrix   []int    // per row: its matrix
	w, a, bl []float64
	// active[m][t]: position t of matrix m bears loss (its coefficient row,
	// advantages or loss_weights, is nonzero there).
	active   [][]bool
	policy   [][]int64 // per matrix, per position (nil: no policy_version row)
	accepted int       // active positions
	tokens   int       // logical tokens
}

var rowNameRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// decodedRow is a row's values, dense and row-major.
type decodedRow struct {
	dtype string
	shape []int
	v     []float64
}

func (d decodedRow) width() int {
	if len(d.shape) == 2 {
		return d.shape[1]
	}
	return 1
}

// rowsFor says which rows a loss requires and which it also accepts (the
// client's _loss_rows; a forward without loss needs targets only).
func rowsFor(loss string) (required, optional []string) {
	switch loss {
	case "cross_entropy":
		return []string{"target_token_ids", "loss_weights"}, []string{"policy_version"}
	case "importance_sampling", "cispo":
		return []string{"target_token_ids", "behavior_logprobs", "advantages"}, []string{"policy_version", "loss_weights"}
	case "dpo":
		return []string{"target_token_ids", "loss_weights", "behavior_logprobs"}, []string{"policy_version"}
	}
	return []string{"target_token_ids"}, []string{"policy_version"}
}

// maxBatchValues bounds the values of a batch's rows once expanded
// (spans make a small body a large row): 16 Mi values, 128 MiB.
const maxBatchValues = 16 << 20

func decodeRow(param string, r *Row, budget *int) (decodedRow, error) {
	d := decodedRow{dtype: r.Dtype, shape: r.Shape}
	switch r.Dtype {
	case "int32", "int64", "float32":
	case "bool":
		return d, invalid(param+".dtype", "row %q: bool rows are not used by any loss", r.Name)
	case "":
		return d, missing(param + ".dtype")
	default:
		return d, invalid(param+".dtype", "dtype must be bool, int32, int64 or float32, got %q", r.Dtype)
	}
	if len(r.Shape) < 1 || len(r.Shape) > 2 {
		return d, invalid(param+".shape", "shape must have 1 or 2 dimensions, got %d", len(r.Shape))
	}
	n := 1
	for i, s := range r.Shape {
		if s < 1 {
			return d, invalid(fmt.Sprintf("%s.shape[%d]", param, i), "row dimensions must be positive, got %d", s)
		}
		if s > maxMatrixTokens {
			return d, invalid(fmt.Sprintf("%s.shape[%d]", param, i), "row dimension %d exceeds the limit %d", s, maxMatrixTokens)
		}
		n *= s
		if n > *budget {
			return d, invalid(param+".shape", "the batch's rows exceed %d values", maxBatchValues)
		}
	}
	*budget -= n
	T, width := r.Shape[0], d.width()
	switch r.Values.Encoding {
	case "dense", "":
		if len(r.Values.Data) != n {
			return d, invalid(param+".values.data", "dense row %q has %d values, its shape %v needs %d", r.Name, len(r.Values.Data), r.Shape, n)
		}
		d.v = r.Values.Data
	case "spans":
		def, err := element(param+".values.default", r.Values.Default, width)
		if err != nil {
			return d, err
		}
		d.v = make([]float64, 0, n)
		for t := 0; t < T; t++ {
			d.v = append(d.v, def...)
		}
		prev := 0
		for i, raw := range r.Values.Spans {
			sp := fmt.Sprintf("%s.values.spans[%d]", param, i)
			var s struct {
				Start *int            `json:"start"`
				End   *int            `json:"end"`
				Value json.RawMessage `json:"value"`
			}
			if err := json.Unmarshal(raw, &s); err != nil || s.Start == nil || s.End == nil {
				return d, invalid(sp, "a span is an object with integer start and end and a value")
			}
			if *s.Start < 0 || *s.End <= *s.Start {
				return d, invalid(sp, "span [%d, %d) is empty or negative", *s.Start, *s.End)
			}
			if *s.Start < prev {
				return d, invalid(sp, "row spans must be sorted and non-overlapping")
			}
			if *s.End > T {
				return d, invalid(sp+".end", "span end %d exceeds the row's %d tokens", *s.End, T)
			}
			val, err := element(sp+".value", s.Value, width)
			if err != nil {
				return d, err
			}
			for t := *s.Start; t < *s.End; t++ {
				copy(d.v[t*width:(t+1)*width], val)
			}
			prev = *s.End
		}
	default:
		return d, invalid(param+".values.encoding", "encoding must be dense or spans, got %q", r.Values.Encoding)
	}
	for i, x := range d.v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return d, invalid(param+".values", "row %q value %d is not finite", r.Name, i)
		}
		if r.Dtype != "float32" && (x != math.Trunc(x) || math.Abs(x) > 1<<53) {
			return d, invalid(param+".values", "%s row %q value %d (%v) is not an integer", r.Dtype, r.Name, i, x)
		}
	}
	return d, nil
}

// element decodes a span's value: a number, or an array of width numbers.
func element(param string, raw json.RawMessage, width int) ([]float64, error) {
	if len(raw) == 0 {
		return nil, missing(param)
	}
	var x float64
	if err := json.Unmarshal(raw, &x); err == nil {
		if width != 1 {
			return nil, invalid(param, "value must be an array of %d numbers (the row's trailing shape)", width)
		}
		return []float64{x}, nil
	}
	var xs []float64
	if err := json.Unmarshal(raw, &xs); err != nil {
		return nil, invalid(param, "value must be a number or an array of numbers")
	}
	if len(xs) != width {
		return nil, invalid(param, "value has %d numbers, the row's trailing shape needs %d", len(xs), width)
	}
	return xs, nil
}

// buildBatch checks b for loss (lossName "" for a forward's outputs only)
// against the model cfg and makes it a tokenBatch.
func buildBatch(b *Batch, ls *lossSpec, cfg *engine.Config) (*tokenBatch, error) {
	if b == nil {
		return nil, missing("batch")
	}
	switch b.Kind {
	case "token_matrix", "":
	case "input_object", "captured":
		return nil, invalid("batch.kind", "batch kind %q is not supported: send the TokenMatrixBatch inline", b.Kind)
	default:
		return nil, invalid("batch.kind", "batch kind must be token_matrix, got %q", b.Kind)
	}
	if len(b.Matrices) == 0 {
		return nil, invalid("batch.matrices", "batch.matrices must not be empty")
	}
	if len(b.Routes) > 0 {
		return nil, invalid("batch.routes", "MoE routing replay is not supported: the served models are dense")
	}
	lossName := ""
	if ls != nil {
		lossName = ls.Name
	}
	required, optional := rowsFor(lossName)
	permitted := map[string]bool{"token_ids": true}
	for _, n := range append(append([]string(nil), required...), optional...) {
		permitted[n] = true
	}
	tb := &tokenBatch{}
	var seqs [][]int          // token ids per matrix
	var rowPos, targets []int // per row: its position in its matrix, its target
	budget := maxBatchValues
	seen := map[string]bool{}
	anyPolicy, nonePolicy := false, false
	for mi := range b.Matrices {
		m := &b.Matrices[mi]
		mp := fmt.Sprintf("batch.matrices[%d]", mi)
		if m.Kind != "" && m.Kind != "matrix" {
			return nil, invalid(mp+".kind", "only token matrices are supported (kind matrix), got %q", m.Kind)
		}
		if err := checkIdentifier(mp+".matrix_id", m.MatrixID); err != nil {
			return nil, err
		}
		if seen[m.MatrixID] {
			return nil, invalid(mp+".matrix_id", "matrix_id %q is used twice", m.MatrixID)
		}
		seen[m.MatrixID] = true
		if len(m.Rows) == 0 || len(m.Rows) > maxMatrixRows {
			return nil, invalid(mp+".rows", "a matrix has 1 to %d rows, got %d", maxMatrixRows, len(m.Rows))
		}
		rows := map[string]decodedRow{}
		rowIdx := map[string]int{}
		for ri := range m.Rows {
			r := &m.Rows[ri]
			rp := fmt.Sprintf("%s.rows[%d]", mp, ri)
			if !rowNameRe.MatchString(r.Name) {
				return nil, invalid(rp+".name", "row name must be lower snake case, got %q", r.Name)
			}
			if r.Name == "learner_logprobs" {
				return nil, invalid(rp+".name", "learner_logprobs is produced by the server and cannot be supplied")
			}
			if _, dup := rows[r.Name]; dup {
				return nil, invalid(rp+".name", "row %q appears twice", r.Name)
			}
			if !permitted[r.Name] {
				return nil, invalid(rp+".name", "row %q is not used by loss %q", r.Name, lossName)
			}
			d, err := decodeRow(rp, r, &budget)
			if err != nil {
				return nil, err
			}
			rows[r.Name], rowIdx[r.Name] = d, ri
		}
		rowParam := func(name string) string { return fmt.Sprintf("%s.rows[%d]", mp, rowIdx[name]) }
		tok, ok := rows["token_ids"]
		if !ok {
			return nil, invalid(mp+".rows", "matrix %q has no token_ids row", m.MatrixID)
		}
		if tok.dtype != "int64" || len(tok.shape) != 1 {
			return nil, invalid(rowParam("token_ids"), "token_ids must be int64 with shape [T]")
		}
		T := tok.shape[0]
		for name, d := range rows {
			if d.shape[0] != T {
				return nil, invalid(rowParam(name)+".shape", "row %q has %d tokens, token_ids has %d: all rows share the token axis", name, d.shape[0], T)
			}
		}
		for _, name := range required {
			if _, ok := rows[name]; !ok {
				return nil, invalid(mp+".rows", "matrix %q is missing row %q (loss %q)", m.MatrixID, name, lossName)
			}
		}
		tg := rows["target_token_ids"]
		if tg.dtype != "int64" || len(tg.shape) != 2 {
			return nil, invalid(rowParam("target_token_ids"), "target_token_ids must be int64 with shape [T,K]")
		}
		K := tg.shape[1]
		if K > maxCandidates {
			return nil, invalid(rowParam("target_token_ids")+".shape", "target_token_ids has %d candidates, at most %d", K, maxCandidates)
		}
		if lossName != "" && lossName != "cross_entropy" && K != 1 {
			return nil, invalid(rowParam("target_token_ids")+".shape", "%s requires one target per token position, got %d", lossName, K)
		}
		for _, name := range []string{"loss_weights", "advantages", "behavior_logprobs"} {
			if d, ok := rows[name]; ok && (d.dtype != "float32" || len(d.shape) != 2 || d.shape[1] != K) {
				return nil, invalid(rowParam(name), "%s must be float32 with the shape of target_token_ids [%d,%d], got %s %v", name, T, K, d.dtype, d.shape)
			}
		}
		if T > cfg.MaxPositionEmbeddings {
			return nil, invalid(rowParam("token_ids")+".shape", "matrix %q has %d tokens, the model's context is %d", m.MatrixID, T, cfg.MaxPositionEmbeddings)
		}
		for i, x := range tok.v {
			if x < 0 || x >= float64(cfg.VocabSize) {
				return nil, invalid(rowParam("token_ids")+".values", "token id %v at %d is outside the model's vocabulary (size %d)", x, i, cfg.VocabSize)
			}
		}
		for i, x := range tg.v {
			if x < 0 || x >= float64(cfg.VocabSize) {
				return nil, invalid(rowParam("target_token_ids")+".values", "target token id %v at %d is outside the model's vocabulary (size %d)", x, i, cfg.VocabSize)
			}
		}
		tb.tokens += T
		if tb.tokens > maxMatrixTokens {
			return nil, invalid("batch.matrices", "the batch exceeds %d tokens", maxMatrixTokens)
		}
		// loss-bearing positions
		coef := "loss_weights"
		if lossName == "importance_sampling" || lossName == "cispo" {
			coef = "advantages"
		}
		act := make([]bool, T)
		nact := 0
		if c, ok := rows[coef]; ok && lossName != "" {
			for t := 0; t < T; t++ {
				for k := 0; k < K; k++ {
					if c.v[t*K+k] != 0 {
						act[t] = true
					}
				}
				if act[t] {
					nact++
				}
			}
			if nact == 0 {
				return nil, invalid(rowParam(coef)+".values", "matrix %q has no loss-bearing target (every %s is 0)", m.MatrixID, coef)
			}
		}
		var pol []int64
		if p, ok := rows["policy_version"]; ok {
			if p.dtype != "int64" || !(len(p.shape) == 1 || p.shape[1] == 1) {
				return nil, invalid(rowParam("policy_version"), "policy_version must be int64 with shape [T] or [T,1]")
			}
			pol = make([]int64, T)
			for t := 0; t < T; t++ {
				pol[t] = int64(p.v[t])
				if act[t] && pol[t] < 0 {
					return nil, invalid(rowParam("policy_version")+".values", "matrix %q has a negative policy_version at accepted position %d", m.MatrixID, t)
				}
			}
			anyPolicy = true
		} else if nact > 0 {
			nonePolicy = true
		}
		tb.ids = append(tb.ids, m.MatrixID)
		tb.lens = append(tb.lens, T)
		tb.widths = append(tb.widths, K)
		tb.active = append(tb.active, act)
		tb.policy = append(tb.policy, pol)
		tb.accepted += nact
		ids := make([]int, T)
		for t := range ids {
			ids[t] = int(tok.v[t])
		}
		seqs = append(seqs, ids)
		lw, hasW := rows["loss_weights"]
		adv, hasA := rows["advantages"]
		blp, hasB := rows["behavior_logprobs"]
		for t := 0; t < T; t++ {
			for k := 0; k < K; k++ {
				i := t*K + k
				rowPos = append(rowPos, t)
				targets = append(targets, int(tg.v[i]))
				tb.matrix = append(tb.matrix, mi)
				w, a, bl := 1.0, 0.0, 0.0
				if hasW {
					w = lw.v[i]
				}
				if hasA {
					a = adv.v[i]
				}
				if hasB {
					bl = blp.v[i]
				}
				tb.w, tb.a, tb.bl = append(tb.w, w), append(tb.a, a), append(tb.bl, bl)
			}
		}
	}
	// matrices sharing a prefix (a group's prompt) share its computation
	pp := train.PackPrefixes(seqs)
	tb.b = pp.Batch
	tb.b.Rows = make([]int, len(rowPos))
	tb.b.Targets = targets
	for i, t := range rowPos {
		tb.b.Rows[i] = pp.Row(tb.matrix[i], t)
	}
	if anyPolicy && nonePolicy {
		return nil, invalid("batch.matrices", "policy_version must cover every accepted position or be omitted")
	}
	if ls != nil && ls.Name == "dpo" {
		index := map[string]int{}
		for i, id := range tb.ids {
			index[id] = i
		}
		used := map[string]bool{}
		for i, p := range ls.Pairs {
			for _, id := range []string{p.ChosenMatrixID, p.RejectedMatrixID} {
				if _, ok := index[id]; !ok {
					return nil, invalid(fmt.Sprintf("loss.matrix_pairs[%d]", i), "matrix pair references unknown matrix %q", id)
				}
				if used[id] {
					return nil, invalid(fmt.Sprintf("loss.matrix_pairs[%d]", i), "matrix %q belongs to more than one pair", id)
				}
				used[id] = true
			}
		}
		if len(used) != len(tb.ids) {
			return nil, invalid("loss.matrix_pairs", "every dpo matrix must belong to one matrix pair")
		}
	}
	return tb, nil
}

// policyCounts is accepted positions per policy version, sorted (nil
// without policy_version rows).
func (tb *tokenBatch) policyCounts() []policyCount {
	counts := map[int64]int{}
	has := false
	for m, pol := range tb.policy {
		if pol == nil {
			continue
		}
		has = true
		for t, a := range tb.active[m] {
			if a {
				counts[pol[t]]++
			}
		}
	}
	if !has {
		return nil
	}
	out := make([]policyCount, 0, len(counts))
	for v, n := range counts {
		out = append(out, policyCount{PolicyVersion: v, Accepted: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PolicyVersion < out[j].PolicyVersion })
	return out
}

type policyCount struct {
	PolicyVersion int64 `json:"policy_version"`
	Accepted      int   `json:"accepted_trainable_tokens"`
}
