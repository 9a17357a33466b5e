package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"flywheel/internal/par"
	"flywheel/internal/safetensors"
)

// Weight file names in a Hugging Face model folder.
const (
	WeightsFile      = "model.safetensors"
	WeightsIndexFile = "model.safetensors.index.json"
)

// tensorSource finds tensors across one or several (sharded) safetensors
// files of a model folder.
type tensorSource struct {
	files  map[string]*safetensors.File // by file name
	byName map[string]string            // tensor name -> file name (sharded)
	single *safetensors.File
	inUse  map[*safetensors.File]bool // files whose mapping backs an F32 tensor
}

func openTensors(dir string) (*tensorSource, error) {
	src := &tensorSource{files: map[string]*safetensors.File{}, inUse: map[*safetensors.File]bool{}}
	idxPath := filepath.Join(dir, WeightsIndexFile)
	if data, err := os.ReadFile(idxPath); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(data, &idx); err != nil {
			return nil, fmt.Errorf("engine: %s: %w", idxPath, err)
		}
		if len(idx.WeightMap) == 0 {
			return nil, fmt.Errorf("engine: %s: empty weight_map", idxPath)
		}
		src.byName = idx.WeightMap
		var shards []string
		seen := map[string]bool{}
		for _, f := range idx.WeightMap {
			if !seen[f] {
				seen[f] = true
				shards = append(shards, f)
			}
		}
		sort.Strings(shards)
		for _, name := range shards {
			if filepath.Base(name) != name {
				src.close()
				return nil, fmt.Errorf("engine: %s: shard name %q is not a plain file name", idxPath, name)
			}
			f, err := safetensors.Open(filepath.Join(dir, name))
			if err != nil {
				src.close()
				return nil, fmt.Errorf("engine: %w", err)
			}
			src.files[name] = f
		}
		return src, nil
	} else if !os.IsNotExist(err) {
		return nil, fmt.Errorf("engine: %w", err)
	}
	f, err := safetensors.Open(filepath.Join(dir, WeightsFile))
	if err != nil {
		if os.IsNotExist(err) || isNotExist(err) {
			return nil, fmt.Errorf("engine: %s: no %s or %s", dir, WeightsFile, WeightsIndexFile)
		}
		return nil, fmt.Errorf("engine: %w", err)
	}
	src.single = f
	src.files[WeightsFile] = f
	return src, nil
}

func isNotExist(err error) bool {
	for err != nil {
		if os.IsNotExist(err) {
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

func (s *tensorSource) lookup(name string) *safetensors.Tensor {
	if s.single != nil {
		return s.single.Tensor(name)
	}
	fn, ok := s.byName[name]
	if !ok {
		return nil
	}
	if f := s.files[fn]; f != nil {
		return f.Tensor(name)
	}
	return nil
}

func (s *tensorSource) fileOf(name string) *safetensors.File {
	if s.single != nil {
		return s.single
	}
	return s.files[s.byName[name]]
}

// closeUnused unmaps the files none of whose F32 tensors are used in place.
func (s *tensorSource) closeUnused() {
	for _, f := range s.files {
		if !s.inUse[f] {
			_ = f.Close()
		}
	}
}

func (s *tensorSource) close() {
	for _, f := range s.files {
		_ = f.Close()
	}
}

// loadJob is one tensor to fetch: its name, expected shape and destination.
type loadJob struct {
	name  string
	shape []int
	dst   *[]float32
	into  []float32 // non-nil: copy/convert into this slice (fused buffers)
}

// LoadWeights reads the weights of a model folder (model.safetensors or a
// sharded model.safetensors.index.json) for cfg. F32 tensors are used in
// place from the memory mapping (read-only: never write into them); F16
// and BF16 tensors are converted once to float32. Each layer's q/k/v and
// gate/up matrices are copied (converted) back to back into one buffer, so
// the forward pass multiplies them as one matrix; the file pages of copied
// and converted tensors are dropped from the resident set. With tied embeddings the
// LM head is the embedding matrix. A missing tensor or a wrong shape is an
// error naming the tensor.
func LoadWeights(dir string, cfg *Config) (*Weights, error) {
	if err := checkArch(cfg); err != nil {
		return nil, err
	}
	src, err := openTensors(dir)
	if err != nil {
		return nil, err
	}
	H, I, V := cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize
	Q, KV, D := cfg.QDim(), cfg.KVDim(), cfg.HeadDim
	w := &Weights{Layers: make([]Layer, cfg.NumLayers)}
	var jobs []loadJob
	add := func(name string, dst *[]float32, shape ...int) {
		jobs = append(jobs, loadJob{name: name, shape: shape, dst: dst})
	}
	// q/k/v and gate/up are copied into one buffer each per layer, so that
	// the forward pass can run them as one matrix product (see fuse).
	addInto := func(name string, dst *[]float32, into []float32, shape ...int) {
		jobs = append(jobs, loadJob{name: name, shape: shape, dst: dst, into: into})
	}
	add("model.embed_tokens.weight", &w.Embed, V, H)
	for l := range w.Layers {
		L := &w.Layers[l]
		p := "model.layers." + itoa(l) + "."
		add(p+"input_layernorm.weight", &L.AttnNorm, H)
		qkv := make([]float32, (Q+2*KV)*H)
		L.QKV = qkv
		addInto(p+"self_attn.q_proj.weight", &L.Wq, qkv[:Q*H:Q*H], Q, H)
		addInto(p+"self_attn.k_proj.weight", &L.Wk, qkv[Q*H:(Q+KV)*H:(Q+KV)*H], KV, H)
		addInto(p+"self_attn.v_proj.weight", &L.Wv, qkv[(Q+KV)*H:], KV, H)
		add(p+"self_attn.o_proj.weight", &L.Wo, H, Q)
		if cfg.AttentionBias {
			add(p+"self_attn.q_proj.bias", &L.Bq, Q)
			add(p+"self_attn.k_proj.bias", &L.Bk, KV)
			add(p+"self_attn.v_proj.bias", &L.Bv, KV)
		}
		if cfg.OutputBias {
			add(p+"self_attn.o_proj.bias", &L.Bo, H)
		}
		if cfg.QKNorm {
			add(p+"self_attn.q_norm.weight", &L.QNorm, D)
			add(p+"self_attn.k_norm.weight", &L.KNorm, D)
		}
		add(p+"post_attention_layernorm.weight", &L.MLPNorm, H)
		gu := make([]float32, 2*I*H)
		L.GateUp = gu
		addInto(p+"mlp.gate_proj.weight", &L.Wgate, gu[:I*H:I*H], I, H)
		addInto(p+"mlp.up_proj.weight", &L.Wup, gu[I*H:], I, H)
		add(p+"mlp.down_proj.weight", &L.Wdown, H, I)
	}
	add("model.norm.weight", &w.Norm, H)
	if !cfg.TieWordEmbeddings {
		add("lm_head.weight", &w.LMHead, V, H)
	}
	// Check presence and shapes first, so errors come before any work.
	for _, j := range jobs {
		t := src.lookup(j.name)
		if t == nil {
			src.close()
			return nil, fmt.Errorf("engine: %s: missing tensor %s", dir, j.name)
		}
		if !equalShape(t.Shape, j.shape) {
			src.close()
			return nil, fmt.Errorf("engine: %s: tensor %s has shape %v, want %v", dir, j.name, t.Shape, j.shape)
		}
		switch t.DType {
		case "F32", "F16", "BF16":
		default:
			src.close()
			return nil, fmt.Errorf("engine: %s: tensor %s has unsupported dtype %s (want F32, F16 or BF16)", dir, j.name, t.DType)
		}
		if t.DType == "F32" && j.into == nil {
			src.inUse[src.fileOf(j.name)] = true
		}
	}
	// Convert in parallel (F16/BF16 conversion dominates loading time).
	var (
		mu       sync.Mutex
		firstErr error
	)
	par.Tasks(len(jobs), false, func(_, i int) {
		j := jobs[i]
		t := src.lookup(j.name)
		var v []float32
		var err error
		if j.into != nil {
			err = t.Float32Into(j.into)
			v = j.into
		} else {
			v, err = t.Float32()
		}
		if j.into != nil || t.DType != "F32" {
			src.fileOf(j.name).DropPages(t)
		}
		if err != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
			return
		}
		*j.dst = v
	})
	if firstErr != nil {
		src.close()
		return nil, fmt.Errorf("engine: %s: %w", dir, firstErr)
	}
	if cfg.TieWordEmbeddings {
		w.LMHead = w.Embed
	}
	src.closeUnused()
	return w, nil
}

func equalShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func checkArch(cfg *Config) error {
	switch cfg.Architecture {
	case ArchLlama, ArchMistral, ArchQwen2, ArchQwen3:
		return nil
	}
	return fmt.Errorf("engine: unsupported architecture %q (supported: %s, %s, %s, %s)", cfg.Architecture, ArchLlama, ArchMistral, ArchQwen2, ArchQwen3)
}

type wcheck struct {
	n    string
	v    []float32
	want int
}

// Check verifies that w has the shapes cfg asks for.
func (w *Weights) Check(cfg *Config) error {
	H, I, V := cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize
	Q, KV, D := cfg.QDim(), cfg.KVDim(), cfg.HeadDim
	bad := func(name string, got, want int) error {
		return fmt.Errorf("engine: weights: %s has %d values, want %d", name, got, want)
	}
	if len(w.Embed) != V*H {
		return bad("embed_tokens", len(w.Embed), V*H)
	}
	if len(w.LMHead) != V*H {
		return bad("lm_head", len(w.LMHead), V*H)
	}
	if len(w.Norm) != H {
		return bad("norm", len(w.Norm), H)
	}
	if len(w.Layers) != cfg.NumLayers {
		return fmt.Errorf("engine: weights: %d layers, want %d", len(w.Layers), cfg.NumLayers)
	}
	for l := range w.Layers {
		L := &w.Layers[l]
		p := "layer " + itoa(l) + " "
		checks := []wcheck{
			{"input_layernorm", L.AttnNorm, H}, {"q_proj", L.Wq, Q * H}, {"k_proj", L.Wk, KV * H},
			{"v_proj", L.Wv, KV * H}, {"o_proj", L.Wo, H * Q}, {"post_attention_layernorm", L.MLPNorm, H},
			{"gate_proj", L.Wgate, I * H}, {"up_proj", L.Wup, I * H}, {"down_proj", L.Wdown, H * I},
		}
		if cfg.AttentionBias {
			checks = append(checks, wcheck{"q_proj.bias", L.Bq, Q}, wcheck{"k_proj.bias", L.Bk, KV}, wcheck{"v_proj.bias", L.Bv, KV})
		}
		if cfg.OutputBias {
			checks = append(checks, wcheck{"o_proj.bias", L.Bo, H})
		}
		if cfg.QKNorm {
			checks = append(checks, wcheck{"q_norm", L.QNorm, D}, wcheck{"k_norm", L.KNorm, D})
		}
		for _, c := range checks {
			if len(c.v) != c.want {
				return bad(p+c.n, len(c.v), c.want)
			}
		}
	}
	return nil
}
