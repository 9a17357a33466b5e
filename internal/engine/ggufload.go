package engine

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"unsafe"

	"flywheel/internal/engine/chattmpl"
	"flywheel/internal/engine/gguf"
	"flywheel/internal/engine/params"
	"flywheel/internal/engine/tokenizer"
	"flywheel/internal/safetensors"
)

// GGUF base models.
//
// A .gguf file carries in one file what a Hugging Face folder spreads over
// config.json, tokenizer.json, tokenizer_config.json and the safetensors
// weights: hyper-parameters under "<arch>.*" keys, the tokenizer under
// "tokenizer.ggml.*", the chat template under "tokenizer.chat_template",
// and the tensors under llama.cpp's names ("blk.N.attn_q.weight"). This
// file maps them onto the same Config, Weights, tokenizer and template as
// Load does, so everything downstream (serving, training, adapters) is the
// same. Matrices are copied from the mapping into one arena in their stored
// type (F32, F16, BF16, or quantized blocks that the kernels dequantise as
// they multiply); norms and biases are copied as float32; the file is
// unmapped once the model is built.

// ggufArchs maps GGUF's general.architecture to the engine's architectures.
var ggufArchs = func() map[string]string {
	m := map[string]string{}
	for arch, name := range params.GGUFArch {
		m[name] = arch
	}
	return m
}()

// meta reads typed metadata values, remembering the first error.
type meta struct {
	f   *gguf.File
	err error
}

func (m *meta) fail(format string, a ...any) {
	if m.err == nil {
		m.err = fmt.Errorf(format, a...)
	}
}

// int returns a non-negative integer value (def when absent and !required).
func (m *meta) int(key string, def int, required bool) int {
	v, ok := m.f.Get(key)
	if !ok {
		if required {
			m.fail("metadata %s is missing", key)
		}
		return def
	}
	u, ok := v.Uint()
	if !ok || u > math.MaxInt32 {
		m.fail("metadata %s: want a non-negative integer below 2^31, have a %v", key, v.Type)
		return def
	}
	return int(u)
}

func (m *meta) float(key string, def float64) float64 {
	v, ok := m.f.Get(key)
	if !ok {
		return def
	}
	x, ok := v.Float()
	if !ok || math.IsNaN(x) || math.IsInf(x, 0) {
		m.fail("metadata %s: want a finite number, have a %v", key, v.Type)
		return def
	}
	if v.Type == gguf.TypeFloat32 {
		// The shortest decimal that reads back as this float32 (1e-06, not
		// 9.99999997e-07): the value config.json would have said.
		x, _ = strconv.ParseFloat(strconv.FormatFloat(x, 'g', -1, 32), 64)
	}
	return x
}

func (m *meta) str(key string) string {
	v, ok := m.f.Get(key)
	if !ok {
		return ""
	}
	s, ok := v.Str()
	if !ok {
		m.fail("metadata %s: want a string, have a %v", key, v.Type)
	}
	return s
}

func (m *meta) bool(key string, def bool) bool {
	v, ok := m.f.Get(key)
	if !ok {
		return def
	}
	b, ok := v.Bool()
	if !ok {
		m.fail("metadata %s: want a bool, have a %v", key, v.Type)
	}
	return b
}

// ggufConfig reads the model's hyper-parameters from f's metadata and
// tensor list, with the rules ParseConfig applies to config.json.
func ggufConfig(f *gguf.File) (*Config, error) {
	m := &meta{f: f}
	name := m.str("general.architecture")
	if m.err != nil {
		return nil, m.err
	}
	arch, ok := ggufArchs[name]
	if !ok {
		if name == "" {
			return nil, fmt.Errorf("metadata general.architecture is missing")
		}
		return nil, fmt.Errorf("unsupported architecture %q (supported: llama, mistral, qwen2, qwen3)", name)
	}
	p := name + "."
	c := &Config{
		Architecture:          arch,
		ModelType:             name,
		HiddenSize:            m.int(p+"embedding_length", 0, true),
		IntermediateSize:      m.int(p+"feed_forward_length", 0, true),
		NumLayers:             m.int(p+"block_count", 0, true),
		NumHeads:              m.int(p+"attention.head_count", 0, true),
		MaxPositionEmbeddings: m.int(p+"context_length", 2048, false),
		RMSNormEps:            m.float(p+"attention.layer_norm_rms_epsilon", 1e-6),
		RopeTheta:             m.float(p+"rope.freq_base", 10000),
		BOSTokenID:            -1,
		SlidingWindow:         m.int(p+"attention.sliding_window", 0, false),
	}
	c.NumKVHeads = m.int(p+"attention.head_count_kv", c.NumHeads, false)
	if m.err != nil {
		return nil, m.err
	}
	if n := m.int(p+"expert_count", 0, false); n > 0 {
		return nil, fmt.Errorf("unsupported mixture of experts (%sexpert_count %d)", p, n)
	}
	switch {
	case c.HiddenSize <= 0 || c.NumHeads <= 0 || c.NumLayers <= 0 || c.IntermediateSize <= 0:
		return nil, fmt.Errorf("%sembedding_length, feed_forward_length, block_count and attention.head_count must be positive", p)
	case c.NumKVHeads <= 0 || c.NumHeads%c.NumKVHeads != 0:
		return nil, fmt.Errorf("%sattention.head_count %d is not a multiple of attention.head_count_kv %d", p, c.NumHeads, c.NumKVHeads)
	case c.NumLayers > 1<<12 || c.NumHeads > 1<<12:
		return nil, fmt.Errorf("%sblock_count %d or attention.head_count %d is implausibly large", p, c.NumLayers, c.NumHeads)
	}
	c.HeadDim = m.int(p+"attention.key_length", 0, false)
	if c.HeadDim == 0 {
		if c.HiddenSize%c.NumHeads != 0 {
			return nil, fmt.Errorf("%sembedding_length %d is not a multiple of attention.head_count %d", p, c.HiddenSize, c.NumHeads)
		}
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if vl := m.int(p+"attention.value_length", c.HeadDim, false); vl != c.HeadDim {
		return nil, fmt.Errorf("unsupported %sattention.value_length %d different from key_length %d", p, vl, c.HeadDim)
	}
	if c.HeadDim%2 != 0 {
		return nil, fmt.Errorf("head dimension %d must be even for RoPE", c.HeadDim)
	}
	if rd := m.int(p+"rope.dimension_count", c.HeadDim, false); rd != c.HeadDim {
		return nil, fmt.Errorf("unsupported %srope.dimension_count %d (only the whole head, %d)", p, rd, c.HeadDim)
	}
	switch st := m.str(p + "rope.scaling.type"); st {
	case "", "none":
	case "linear":
		fac := m.float(p+"rope.scaling.factor", 0)
		if !(fac > 0) {
			return nil, fmt.Errorf("%srope.scaling.type linear needs a positive rope.scaling.factor", p)
		}
		if fac != 1 {
			c.RopeScaling = &RopeScaling{RopeType: "linear", Factor: fac}
		}
	default:
		return nil, fmt.Errorf("unsupported %srope.scaling.type %q (supported: none, linear)", p, st)
	}
	if f.Tensor("rope_freqs.weight") != nil { // not a parameter the engine has
		return nil, fmt.Errorf("unsupported tensor rope_freqs.weight (per-frequency RoPE factors, as Llama 3.1 files carry)")
	}
	if arch != ArchMistral && c.SlidingWindow > 0 {
		return nil, fmt.Errorf("unsupported %sattention.sliding_window for %s", p, name)
	}
	if m.err != nil {
		return nil, m.err
	}
	embName := params.GGUFName(params.Embed, -1)
	emb := f.Tensor(embName)
	if emb == nil {
		return nil, fmt.Errorf("missing tensor %s", embName)
	}
	if len(emb.Dims) != 2 || emb.Dims[0] != uint64(c.HiddenSize) || emb.Dims[1] > math.MaxInt32 {
		return nil, fmt.Errorf("tensor %s has dimensions %v, want [%d, vocabulary]", embName, emb.Dims, c.HiddenSize)
	}
	c.VocabSize = int(emb.Dims[1])
	if n := m.int(p+"vocab_size", c.VocabSize, false); n != c.VocabSize {
		return nil, fmt.Errorf("%svocab_size %d differs from %s's %d rows", p, n, embName, c.VocabSize)
	}
	c.TieWordEmbeddings = f.Tensor(params.GGUFName(params.LMHead, -1)) == nil
	// The architecture's optional parameters; GGUF has no attention_bias
	// key, so Llama's and Qwen3's biases are read off the first layer.
	feat, _ := params.ArchFeatures(arch, nil)
	c.AttentionBias, c.QKNorm = feat.QKVBias, feat.QKNorm
	if arch == ArchLlama || arch == ArchQwen3 {
		c.AttentionBias = f.Tensor(params.GGUFName(params.Bq, 0)) != nil
		c.OutputBias = f.Tensor(params.GGUFName(params.Bo, 0)) != nil
	}
	if m.int(p+"context_length", 1, false) == 0 {
		c.MaxPositionEmbeddings = 2048
	}
	c.BOSTokenID = -1
	if _, ok := f.Get("tokenizer.ggml.bos_token_id"); ok {
		c.BOSTokenID = m.int("tokenizer.ggml.bos_token_id", -1, false)
	}
	for _, k := range []string{"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"} {
		if _, ok := f.Get(k); ok {
			if id := m.int(k, 0, false); !containsInt(c.EOSTokenIDs, id) {
				c.EOSTokenIDs = append(c.EOSTokenIDs, id)
			}
		}
	}
	for _, id := range append([]int{c.BOSTokenID}, c.EOSTokenIDs...) {
		if id >= c.VocabSize {
			return nil, fmt.Errorf("special token id %d outside the vocabulary of %d", id, c.VocabSize)
		}
	}
	return c, m.err
}

// readGGUFConfig reads the Config of a GGUF file.
func readGGUFConfig(path string) (*Config, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	defer f.Close()
	cfg, err := ggufConfig(f)
	if err != nil {
		return nil, fmt.Errorf("engine: %s: %w", path, err)
	}
	return cfg, nil
}

// ggufTokenizer builds the tokenizer from tokenizer.ggml.* (byte-level BPE:
// tokenizer.ggml.model "gpt2").
func ggufTokenizer(f *gguf.File) (*tokenizer.Tokenizer, error) {
	m := &meta{f: f}
	if model := m.str("tokenizer.ggml.model"); model != "gpt2" {
		if m.err != nil {
			return nil, m.err
		}
		return nil, fmt.Errorf("unsupported tokenizer.ggml.model %q (only gpt2: byte-level BPE)", model)
	}
	strs := func(key string) ([]string, error) {
		v, ok := f.Get(key)
		if !ok {
			return nil, fmt.Errorf("metadata %s is missing", key)
		}
		a, ok := v.Array()
		if !ok {
			return nil, fmt.Errorf("metadata %s: want an array of strings, have a %v", key, v.Type)
		}
		s, ok := a.Strings()
		if !ok {
			return nil, fmt.Errorf("metadata %s: want an array of strings, have one of %v", key, a.Elem)
		}
		return s, nil
	}
	l := tokenizer.BPELists{BOS: -1, EOS: -1}
	var err error
	if l.Tokens, err = strs("tokenizer.ggml.tokens"); err != nil {
		return nil, err
	}
	if l.Merges, err = strs("tokenizer.ggml.merges"); err != nil {
		return nil, err
	}
	if v, ok := f.Get("tokenizer.ggml.token_type"); ok {
		a, ok := v.Array()
		var kinds []int64
		if ok {
			kinds, ok = a.Ints()
		}
		if !ok || len(kinds) != len(l.Tokens) {
			return nil, fmt.Errorf("metadata tokenizer.ggml.token_type: want %d integers, one per token", len(l.Tokens))
		}
		l.Kinds = make([]int, len(kinds))
		for i, k := range kinds {
			l.Kinds[i] = int(k)
		}
	}
	l.Pre = m.str("tokenizer.ggml.pre")
	if _, ok := f.Get("tokenizer.ggml.bos_token_id"); ok {
		l.BOS = m.int("tokenizer.ggml.bos_token_id", -1, false)
	}
	if _, ok := f.Get("tokenizer.ggml.eos_token_id"); ok {
		l.EOS = m.int("tokenizer.ggml.eos_token_id", -1, false)
	}
	l.AddBOS = m.bool("tokenizer.ggml.add_bos_token", false)
	l.AddEOS = m.bool("tokenizer.ggml.add_eos_token", false)
	if m.err != nil {
		return nil, m.err
	}
	return tokenizer.FromBPELists(l)
}

// ggufTemplate parses tokenizer.chat_template, with the bos/eos tokens the
// template may name; nil and the reason when there is none.
func ggufTemplate(f *gguf.File, tok *tokenizer.Tokenizer, cfg *Config) (*chattmpl.Template, error) {
	m := &meta{f: f}
	src := m.str("tokenizer.chat_template")
	if m.err != nil {
		return nil, m.err
	}
	if src == "" {
		return nil, fmt.Errorf("no tokenizer.chat_template")
	}
	var bos, eos string
	if cfg.BOSTokenID >= 0 {
		bos = tok.IDToToken(cfg.BOSTokenID)
	}
	if id := m.int("tokenizer.ggml.eos_token_id", -1, false); id >= 0 {
		eos = tok.IDToToken(id)
	}
	return chattmpl.Parse(src, bos, eos)
}

// LoadGGUF loads a GGUF file as a base model (see the comment at the top
// of this file). The ID is the file's base name; Registry.Get sets it to
// the id under the models dir. A file without a chat template loads with
// Template nil and TemplateErr set.
func LoadGGUF(path string) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	fail := func(what string, err error) (*Model, error) {
		f.Close()
		if what != "" {
			return nil, fmt.Errorf("engine: %s: %s: %w", path, what, err)
		}
		return nil, fmt.Errorf("engine: %s: %w", path, err)
	}
	cfg, err := ggufConfig(f)
	if err != nil {
		return fail("", err)
	}
	tok, err := ggufTokenizer(f)
	if err != nil {
		return fail("tokenizer", err)
	}
	if tok.VocabSize() > cfg.VocabSize {
		return fail("", fmt.Errorf("tokenizer has %d tokens, token_embd.weight only %d rows", tok.VocabSize(), cfg.VocabSize))
	}
	w, err := ggufWeights(f, cfg)
	if err != nil {
		return fail("", err)
	}
	tmpl, terr := ggufTemplate(f, tok, cfg)
	repackWeights(w, cfg, true) // before NewModel: in place in the loader's arena
	m := NewModel(filepath.Base(path), cfg, w, tok, tmpl)
	m.Dir = path
	if tmpl == nil {
		m.TemplateErr = fmt.Errorf("engine: %s: chat template: %w", path, terr)
	}
	m.Gen = DefaultGenerationConfig(cfg)
	// Everything the model holds is a copy (weights in the arena, norms
	// and biases, the tokenizer's and template's strings): the mapping is
	// not needed any more, and pages of it left mapped would count in the
	// resident set (a file just written sits in the page cache as large
	// folios, and one fault maps a whole folio).
	f.Close()
	return m, nil
}

// ggufJob is one tensor to load: its parameter, expected ggml dimensions,
// and where it goes (f32 for norms and biases, mat for matrices).
type ggufJob struct {
	p       params.Param
	dims    []int // ggml order: row length first
	f32     *[]float32
	mat     *Mat
	permute int // > 0: undo llama.cpp's q/k row permutation, with this many heads
}

// ggufWeights loads f's tensors for cfg.
func ggufWeights(f *gguf.File, cfg *Config) (*Weights, error) {
	permuted := params.GGUFPermuted(cfg.Architecture)
	w := &Weights{Layers: make([]Layer, cfg.NumLayers)}
	ps := cfg.Params()
	jobs := make([]ggufJob, len(ps))
	for i, p := range ps {
		j := ggufJob{p: p}
		for d := len(p.Shape) - 1; d >= 0; d-- {
			j.dims = append(j.dims, p.Shape[d])
		}
		j.f32, j.mat, _ = w.slot(p)
		if permuted {
			j.permute = p.RoPEHeads
		}
		jobs[i] = j
	}
	ts := make([]*gguf.Tensor, len(jobs))
	for i, j := range jobs {
		name := j.p.GGUF
		t := f.Tensor(name)
		if t == nil {
			return nil, fmt.Errorf("missing tensor %s", name)
		}
		if !ggufDimsEqual(t.Dims, j.dims) {
			return nil, fmt.Errorf("tensor %s has dimensions %v, want %v", name, t.Dims, j.dims)
		}
		if j.f32 != nil && t.Type != gguf.F32 && t.Type != gguf.F16 && t.Type != gguf.BF16 {
			return nil, fmt.Errorf("tensor %s: unsupported type %s for a norm or bias (want F32, F16 or BF16)", name, t.Type)
		}
		if j.mat != nil {
			if _, err := ggufMatType(t); err != nil {
				return nil, err
			}
		}
		ts[i] = t
	}
	// Every matrix is copied into one arena (see arena), permuted where
	// llama.cpp permuted it, and its file pages dropped; each layer's
	// q/k/v and gate/up lie back to back as one buffer when the parts
	// share a type (files may quantize v more finely than q and k: those
	// stay apart), the layout the forward pass multiplies as one matrix.
	groups := w.fuseGroups(ps)
	fused := make([]bool, len(groups))
	dst := make([][]byte, len(jobs))
	size := 0
	for gi, g := range groups {
		fused[gi] = true
		n := 0
		for _, i := range g.parts {
			fused[gi] = fused[gi] && ts[i].Type == ts[g.parts[0]].Type
			n += len(ts[i].Data)
		}
		if fused[gi] {
			size += arenaBytes(n)
		}
	}
	inGroup := make([]bool, len(jobs)) // placed with its fused group
	for gi, g := range groups {
		for _, i := range g.parts {
			inGroup[i] = fused[gi]
		}
	}
	for i, j := range jobs {
		if j.mat != nil && !inGroup[i] {
			size += arenaBytes(len(ts[i].Data))
		}
	}
	// The arena is sized exactly: Go zeroes a reused allocation, which
	// would make unused huge pages resident.
	a := newArena(size)
	bufs := make([][]byte, len(groups))
	for gi, g := range groups {
		if !fused[gi] {
			continue
		}
		n := 0
		for _, i := range g.parts {
			n += len(ts[i].Data)
		}
		bufs[gi] = a.take(n)
		off := 0
		for _, i := range g.parts {
			end := off + len(ts[i].Data)
			dst[i] = bufs[gi][off:end:end]
			off = end
		}
	}
	for i, j := range jobs {
		if j.mat != nil && !inGroup[i] {
			dst[i] = a.take(len(ts[i].Data))
		}
	}
	for i, j := range jobs {
		t := ts[i]
		var err error
		switch {
		case j.f32 != nil:
			st := ggufFloat32(t)
			if j.permute > 0 { // q/k biases are permuted like their rows
				buf := make([]byte, len(t.Data))
				permuteRows(buf, t.Data, j.permute, len(t.Data)/j.dims[0])
				st.Data = buf
			}
			v := make([]float32, t.NumElements())
			err = st.Float32Into(v)
			*j.f32 = v
		default:
			if j.permute > 0 {
				permuteRows(dst[i], t.Data, j.permute, len(t.Data)/j.dims[1])
			} else {
				copy(dst[i], t.Data)
			}
			f.DropPages(t)
			*j.mat, err = ggufMatOf(t, dst[i])
		}
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", j.p.GGUF, err)
		}
	}
	for gi, g := range groups {
		if fused[gi] {
			*g.dst = matOver(*jobs[g.parts[0]].mat, bufs[gi])
		}
	}
	if cfg.TieWordEmbeddings {
		w.LMHead = w.Embed
	}
	return w, nil
}

func ggufDimsEqual(a []uint64, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != uint64(b[i]) {
			return false
		}
	}
	return true
}

// ggufFloat32 views a plain-typed tensor as a safetensors tensor, whose
// conversions (in place for aligned F32) the loader reuses.
func ggufFloat32(t *gguf.Tensor) *safetensors.Tensor {
	dt := map[gguf.GGMLType]string{gguf.F32: "F32", gguf.F16: "F16", gguf.BF16: "BF16"}[t.Type]
	return &safetensors.Tensor{Name: t.Name, DType: dt, Shape: []int{int(t.NumElements())}, Data: t.Data}
}

// ggufMatOf makes the Mat of tensor t's type over data (t's bytes, or a
// permuted copy of them).
func ggufMatOf(t *gguf.Tensor, data []byte) (Mat, error) {
	st := *ggufFloat32(t)
	st.Data = data
	switch t.Type {
	case gguf.F32:
		v, err := st.Float32()
		return Mat{F32: v}, err
	case gguf.F16, gguf.BF16:
		h, err := st.Uint16()
		return Mat{Half: h, HalfType: halfType(st.DType)}, err
	}
	return quantMat(t, data)
}

// ggufMatType checks that the engine computes with t's type.
func ggufMatType(t *gguf.Tensor) (gguf.GGMLType, error) {
	switch t.Type {
	case gguf.F32, gguf.F16, gguf.BF16:
		return t.Type, nil
	}
	if err := checkQuant(t); err != nil {
		return 0, err
	}
	return t.Type, nil
}

// permuteRows writes src's rows into dst undoing llama.cpp's permutation
// of q/k (convert_hf_to_gguf.py, LlamaModel.permute): within each of the
// heads' D rows, the file's row 2j+i is Hugging Face's row i*D/2+j. Rows
// are moved whole, so this holds for any row type, quantized included.
func permuteRows(dst, src []byte, heads, rowBytes int) {
	rows := len(src) / rowBytes
	D := rows / heads
	for h := 0; h < heads; h++ {
		for i := 0; i < 2; i++ {
			for j := 0; j < D/2; j++ {
				to := (h*D + i*D/2 + j) * rowBytes
				from := (h*D + 2*j + i) * rowBytes
				copy(dst[to:to+rowBytes], src[from:from+rowBytes])
			}
		}
	}
}

// byteView is the bytes of a Mat's values (for row copies).
func byteView(m Mat) []byte {
	switch {
	case m.Half != nil:
		if len(m.Half) == 0 {
			return nil
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(&m.Half[0])), 2*len(m.Half))
	case m.F32 != nil:
		if len(m.F32) == 0 {
			return nil
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(&m.F32[0])), 4*len(m.F32))
	}
	return quantBytes(m)
}
