package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"flywheel/internal/engine/kernels"
	"flywheel/internal/engine/params"
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
}

func openTensors(dir string) (*tensorSource, error) {
	src := &tensorSource{files: map[string]*safetensors.File{}}
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

func (s *tensorSource) close() {
	for _, f := range s.files {
		_ = f.Close()
	}
}

// loadJob is one tensor to fetch: its name, expected shape and destination
// (f32 for norms and biases, always float32; mat for matrices).
type loadJob struct {
	name  string
	shape []int
	f32   *[]float32
	mat   *Mat
	into  Mat // set: copy (or convert) into this buffer (fused q/k/v, gate/up)
}

// SettingsFile is the model-folder file of flywheel's own per-model
// settings, e.g. {"weights_dtype": "float32"}.
const SettingsFile = "flywheel.json"

// Settings are a model folder's flywheel settings (SettingsFile).
type Settings struct {
	// WeightsDType is "stored" (default: F32 as float32, BF16 and F16 kept
	// in their 16-bit precision) or "float32" (BF16 and F16 widened to
	// float32 at load, e.g. for exact-parity tests).
	WeightsDType string `json:"weights_dtype"`
}

// ReadSettings reads dir/flywheel.json (absent: defaults).
func ReadSettings(dir string) (Settings, error) {
	var st Settings
	path := filepath.Join(dir, SettingsFile)
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("engine: %w", err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("engine: %s: %w", path, err)
	}
	switch st.WeightsDType {
	case "", "stored", "float32":
	default:
		return st, fmt.Errorf("engine: %s: weights_dtype %q: want \"stored\" or \"float32\"", path, st.WeightsDType)
	}
	return st, nil
}

// halfType is the kernels' type of a safetensors dtype (0 for F32).
func halfType(dtype string) kernels.HalfType {
	switch dtype {
	case "BF16":
		return kernels.BF16
	case "F16":
		return kernels.F16
	}
	return 0
}

// LoadWeights reads the weights of a model folder (model.safetensors or a
// sharded model.safetensors.index.json) for cfg. Matrices are copied from
// the memory mapping into one arena (see arena: decode streams them from
// huge pages) in their stored precision (F32 as float32, BF16 and F16 as
// 16-bit values the kernels widen as they multiply; read-only: never write
// into them), unless the folder's flywheel.json says "weights_dtype":
// "float32", which widens BF16/F16 to float32 once. Norms and biases are
// copied as float32, and the files are unmapped. Each layer's q/k/v and
// gate/up matrices lie back to back as one buffer (in their precision when
// the parts share it), so the forward pass multiplies them as one matrix;
// the file pages of copied tensors are dropped from the resident set. With tied
// embeddings the LM head is the embedding matrix. A missing tensor or a
// wrong shape is an error naming the tensor.
func LoadWeights(dir string, cfg *Config) (*Weights, error) {
	if err := checkArch(cfg); err != nil {
		return nil, err
	}
	set, err := ReadSettings(dir)
	if err != nil {
		return nil, err
	}
	widen := set.WeightsDType == "float32"
	src, err := openTensors(dir)
	if err != nil {
		return nil, err
	}
	w := &Weights{Layers: make([]Layer, cfg.NumLayers)}
	ps := cfg.Params()
	jobs := make([]loadJob, len(ps))
	for i, p := range ps {
		vec, mat, _ := w.slot(p)
		jobs[i] = loadJob{name: p.HF, shape: p.Shape, f32: vec, mat: mat}
	}
	// q/k/v and gate/up are copied into one buffer each per layer, so that
	// the forward pass can run them as one matrix product (see fuse).
	groups := w.fuseGroups(ps)
	// Check presence and shapes first, so errors come before any work.
	ts := make([]*safetensors.Tensor, len(jobs))
	for i, j := range jobs {
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
		ts[i] = t
	}
	// Every matrix is copied into one arena (see arena): the fused
	// buffers 16-bit when every part is in the same half precision (and
	// kept), float32 otherwise; the other matrices in their precision.
	like := func(dtype string) Mat {
		if ht := halfType(dtype); ht != 0 && !widen {
			return Mat{Half: []uint16{}, HalfType: ht}
		}
		return Mat{}
	}
	type region struct {
		like Mat
		n    int
	}
	fused := make([]region, len(groups))
	size := 0
	inGroup := make([]bool, len(jobs))
	for gi, g := range groups {
		dt := ts[g.parts[0]].DType
		for _, ji := range g.parts {
			if ts[ji].DType != dt {
				dt = "F32"
			}
			fused[gi].n += ts[ji].NumElements()
			inGroup[ji] = true
		}
		fused[gi].like = like(dt)
		size += arenaBytes(matBytes(fused[gi].like, fused[gi].n))
	}
	for i, j := range jobs {
		if j.mat != nil && !inGroup[i] {
			size += arenaBytes(matBytes(like(ts[i].DType), ts[i].NumElements()))
		}
	}
	a := newArena(size)
	for gi, g := range groups {
		buf := a.mat(fused[gi].like, fused[gi].n)
		*g.dst = buf
		lens := make([]int, len(g.parts))
		for k, ji := range g.parts {
			lens[k] = ts[ji].NumElements()
		}
		for k, part := range buf.parts(lens...) {
			jobs[g.parts[k]].into = part
		}
	}
	for i, j := range jobs {
		if j.mat != nil && !inGroup[i] {
			jobs[i].into = a.mat(like(ts[i].DType), ts[i].NumElements())
		}
	}
	// Copy and convert in parallel (F16/BF16 conversion dominates loading
	// time when widening).
	var (
		mu       sync.Mutex
		firstErr error
	)
	par.Tasks(len(jobs), false, func(_, i int) {
		j, t := jobs[i], ts[i]
		var err error
		switch {
		case j.f32 != nil:
			v := make([]float32, t.NumElements())
			err = t.Float32Into(v)
			*j.f32 = v
		case j.into.Half != nil:
			var h []uint16
			if h, err = t.Uint16(); err == nil {
				copy(j.into.Half, h)
				*j.mat = j.into
			}
		default:
			err = t.Float32Into(j.into.F32)
			*j.mat = j.into
		}
		src.fileOf(j.name).DropPages(t)
		if err != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}
	})
	if firstErr != nil {
		src.close()
		return nil, fmt.Errorf("engine: %s: %w", dir, firstErr)
	}
	if cfg.TieWordEmbeddings {
		w.LMHead = w.Embed
	}
	src.close() // everything is copied: no mapping is needed any more
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
	if _, ok := params.ArchFeatures(cfg.Architecture, nil); !ok {
		return fmt.Errorf("engine: %w", params.UnsupportedArch(cfg.Architecture))
	}
	return nil
}

// quantRows checks that a quantized matrix's rows of cols values are whole
// blocks and its bytes whole blocks (nil for float matrices).
func quantRows(name string, m Mat, cols int) error {
	if m.Quant == nil {
		return nil
	}
	t := m.QuantType
	if t.BlockElems() == 0 {
		return fmt.Errorf("engine: weights: %s: unknown quantization type %v", name, t)
	}
	if cols%t.BlockElems() != 0 || len(m.Quant)%t.BlockBytes() != 0 {
		return fmt.Errorf("engine: weights: %s: %v needs rows of whole %d-value blocks, rows have %d values (%d bytes)",
			name, t, t.BlockElems(), cols, len(m.Quant))
	}
	return nil
}

// Check verifies that w has the shapes cfg asks for: every parameter of
// cfg.Params() and the LM head (tied or not) with its number of values,
// quantized matrices in rows of whole blocks, and the layer count.
func (w *Weights) Check(cfg *Config) error {
	if len(w.Layers) != cfg.NumLayers {
		return fmt.Errorf("engine: weights: %d layers, want %d", len(w.Layers), cfg.NumLayers)
	}
	shape := cfg.ParamShape()
	shape.Tied = false // a tied LM head (the embedding) has the lm_head shape too
	for _, p := range params.List(shape) {
		vec, mat, _ := w.slot(p)
		n := 0
		if vec != nil {
			n = len(*vec)
		} else {
			n = mat.Len()
		}
		if n != p.Len() {
			return fmt.Errorf("engine: weights: %s has %d values, want %d", p.HF, n, p.Len())
		}
		if mat != nil {
			if err := quantRows(p.HF, *mat, p.Shape[1]); err != nil {
				return err
			}
		}
	}
	return nil
}
