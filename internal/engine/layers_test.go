package engine

import (
	"math"
	"math/rand/v2"
	"testing"
)

// A layer case maps inputs to an output y and, given the upstream gradient
// gy, returns the gradients of the objective J = Σ gy·y for every input.
type layerCase[T Float] func(in [][]T, gy []T) (y []T, grads [][]T)

func to[T Float](x []float64) []T {
	out := make([]T, len(x))
	for i, v := range x {
		out[i] = T(v)
	}
	return out
}

// checkLayer runs the float64 case against central differences (tol64) and
// the float32 case's analytic gradient against the same float64 differences
// (tol32).
func checkLayer(t *testing.T, name string, f64 layerCase[float64], f32 layerCase[float32], in [][]float64, tol64, tol32 float64) {
	t.Helper()
	y, _ := f64(in, nil)
	rng := rand.New(rand.NewPCG(11, 12))
	gy := make([]float64, len(y))
	for i := range gy {
		gy[i] = rng.NormFloat64()
	}
	J := func() float64 {
		y, _ := f64(in, nil)
		var s float64
		for i := range y {
			s += gy[i] * y[i]
		}
		return s
	}
	_, g64 := f64(in, gy)
	in32 := make([][]float32, len(in))
	for i := range in {
		in32[i] = to[float32](in[i])
	}
	_, g32 := f32(in32, to[float32](gy))
	const h = 1e-5
	var w64, w32 float64
	for k := range in {
		for i := range in[k] {
			orig := in[k][i]
			in[k][i] = orig + h
			fp := J()
			in[k][i] = orig - h
			fm := J()
			in[k][i] = orig
			num := (fp - fm) / (2 * h)
			den := math.Max(math.Abs(num), 1e-2)
			r64 := math.Abs(g64[k][i]-num) / den
			r32 := math.Abs(float64(g32[k][i])-num) / den
			w64, w32 = max(w64, r64), max(w32, r32)
			if r64 > tol64 || r32 > tol32 {
				t.Fatalf("%s: input %d[%d]: numeric %.9g, float64 %.9g (rel %.2g), float32 %.9g (rel %.2g)",
					name, k, i, num, g64[k][i], r64, g32[k][i], r32)
			}
		}
	}
	t.Logf("%s: max rel err float64 %.2g, float32 %.2g", name, w64, w32)
}

func rvec(rng *rand.Rand, n int, s float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64() * s
	}
	return v
}

func caseEmbed[T Float](in [][]T, gy []T) ([]T, [][]T) {
	const H = 3
	toks := []int{2, 0, 2, 1}
	y := make([]T, len(toks)*H)
	embedForward(wmat[T]{f: in[0]}, H, toks, y)
	if gy == nil {
		return y, nil
	}
	dE := make([]T, len(in[0]))
	embedBackward(dE, H, toks, gy)
	return y, [][]T{dE}
}

func caseRMSNorm[T Float](in [][]T, gy []T) ([]T, [][]T) {
	const n, c = 3, 5
	w := to[T]([]float64{1.1, 0.9, 1.3, 0.7, 1})
	y, rinv := make([]T, n*c), make([]T, n)
	rmsnormForward(in[0], w, n, c, 1e-5, y, rinv)
	if gy == nil {
		return y, nil
	}
	dx := make([]T, n*c)
	rmsnormBackward(in[0], w, rinv, gy, n, c, dx, nil)
	return y, [][]T{dx}
}

func caseLinear[T Float](in [][]T, gy []T) ([]T, [][]T) {
	const n, out, inD, r = 4, 5, 6, 2
	rng := rand.New(rand.NewPCG(5, 5))
	W := to[T](rvec(rng, out*inD, 0.5))
	bias := to[T](rvec(rng, out, 0.1))
	// rows 0..2 use the adapter, row 3 is a base row
	lo := &LoRA[T]{Rank: r, Scale: 1.5, Layers: make([][numModules]*Factors[T], 1)}
	f := &Factors[T]{A: in[1], B: in[2], DA: make([]T, r*inD), DB: make([]T, out*r)}
	lo.Layers[0][modGate] = f
	groups := []loraRows[T]{{R0: 0, R1: 3, L: lo}, {R0: 3, R1: 4}}
	y, xa := make([]T, n*out), make([]T, n*r)
	linearForward(in[0], n, inD, wmat[T]{f: W}, bias, out, y, out)
	loraForward(groups, 0, modGate, in[0], inD, y, out, xa, r)
	if gy == nil {
		return y, nil
	}
	dx := make([]T, n*inD)
	linearBackward(gy, n, out, wmat[T]{f: W}, inD, dx, false)
	loraBackward(groups, 0, modGate, in[0], inD, xa, r, gy, out, dx, make([]T, n*r))
	return y, [][]T{dx, f.DA, f.DB}
}

func caseRoPE[T Float](in [][]T, gy []T) ([]T, [][]T) {
	const n, heads, d = 3, 2, 4
	pos := []int{0, 5, 2}
	cos, sin := make([]T, n*d/2), make([]T, n*d/2)
	ropeRows([]float64{1, 0.1}, pos, cos, sin)
	y := append([]T(nil), in[0]...)
	ropeForward(y, n, heads, d, cos, sin)
	if gy == nil {
		return y, nil
	}
	dx := append([]T(nil), gy...)
	ropeBackward(dx, n, heads, d, cos, sin)
	return y, [][]T{dx}
}

// attnSpans are two packed sequences of 4 and 3 rows; attnTree is a prefix
// of 3 rows continued by two sequences of 2 rows each (rows 3–4 and 5–6).
var (
	attnSpans = []span{{R0: 0, N: 4}, {R0: 4, N: 3}}
	attnTree  = []span{{R0: 0, N: 3}, {R0: 3, N: 2, P0: 3, anc: []int{0}}, {R0: 5, N: 2, P0: 3, anc: []int{0}}}
	attnCase  = attnSpans
)

const attnNH, attnNKV, attnD = 4, 2, 3

// attnWin is the sliding window of caseAttention (0: none).
var attnWin = 0

func caseAttention[T Float](in [][]T, gy []T) ([]T, [][]T) {
	N := 7
	ge := attnGeom{nh: attnNH, nkv: attnNKV, d: attnD, win: attnWin}
	KV := attnNKV * attnD
	views := make([]attnView[T], len(attnCase))
	chunk := func(sp span) kvChunk[T] {
		return kvChunk[T]{K: in[1][sp.R0*KV:], V: in[2][sp.R0*KV:], RS: KV, HS: attnD, P0: sp.P0, N: sp.N, R0: sp.R0}
	}
	for i, sp := range attnCase {
		var kv []kvChunk[T]
		for _, a := range sp.anc {
			kv = append(kv, chunk(attnCase[a]))
		}
		views[i] = attnView[T]{R0: sp.R0, N: sp.N, P0: sp.P0, KV: append(kv, chunk(sp))}
	}
	scr := make([]attnScratch[T], 8)
	lse, out := make([]T, N*attnNH), make([]T, N*attnNH*attnD)
	attentionForward(in[0], views, ge, lse, out, scr, new(attnTasks))
	if gy == nil {
		return out, nil
	}
	dq, dk, dv := make([]T, len(in[0])), make([]T, len(in[1])), make([]T, len(in[2]))
	attentionBackward(in[0], lse, gy, views, ge, dq, dk, dv, make([]attnGrads[T], len(views)), scr)
	return out, [][]T{dq, dk, dv}
}

func caseSwiGLU[T Float](in [][]T, gy []T) ([]T, [][]T) {
	const n, I = 2, 5 // in[0] is gu [n, 2I]
	h := make([]T, n*I)
	swigluForward(in[0], n, I, h)
	if gy == nil {
		return h, nil
	}
	dgu := make([]T, 2*n*I)
	swigluBackward(in[0], n, I, gy, dgu)
	return h, [][]T{dgu}
}

func caseLogSoftmax[T Float](in [][]T, gy []T) ([]T, [][]T) {
	z := append([]T(nil), in[0]...)
	lp, _ := logSoftmaxForward(z, 3)
	y := []T{T(lp)}
	if gy == nil {
		return y, nil
	}
	dz := make([]T, len(z))
	logSoftmaxBackward(z, 3, gy[0], dz)
	return y, [][]T{dz}
}

func TestLayerGradients(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	checkLayer(t, "embedding", caseEmbed[float64], caseEmbed[float32], [][]float64{rvec(rng, 9, 1)}, 1e-6, 1e-3)
	checkLayer(t, "rmsnorm", caseRMSNorm[float64], caseRMSNorm[float32], [][]float64{rvec(rng, 15, 1)}, 1e-6, 1e-3)
	checkLayer(t, "linear+lora", caseLinear[float64], caseLinear[float32],
		[][]float64{rvec(rng, 24, 1), rvec(rng, 12, 0.5), rvec(rng, 10, 0.5)}, 1e-6, 1e-3)
	checkLayer(t, "rope", caseRoPE[float64], caseRoPE[float32], [][]float64{rvec(rng, 24, 1)}, 1e-6, 1e-3)
	Q, KV := attnNH*attnD, attnNKV*attnD
	attnIn := [][]float64{rvec(rng, 7*Q, 1), rvec(rng, 7*KV, 1), rvec(rng, 7*KV, 1)}
	checkLayer(t, "attention", caseAttention[float64], caseAttention[float32], attnIn, 1e-6, 1e-3)
	prev := attnBlock
	attnBlock = 2 // several query blocks per segment
	checkLayer(t, "attention (blocks of 2 rows)", caseAttention[float64], caseAttention[float32], attnIn, 1e-6, 1e-3)
	attnWin = 2 // sliding window (Mistral): rows see their last 2 keys
	checkLayer(t, "attention (window 2, blocks of 2 rows)", caseAttention[float64], caseAttention[float32], attnIn, 1e-6, 1e-3)
	attnCase = attnTree // shared prefix: the continuations' key gradients reach the prefix rows
	checkLayer(t, "attention (shared prefix, window 2, blocks of 2 rows)", caseAttention[float64], caseAttention[float32], attnIn, 1e-6, 1e-3)
	attnWin = 0
	checkLayer(t, "attention (shared prefix)", caseAttention[float64], caseAttention[float32], attnIn, 1e-6, 1e-3)
	attnBlock, attnCase = prev, attnSpans
	checkLayer(t, "swiglu", caseSwiGLU[float64], caseSwiGLU[float32], [][]float64{rvec(rng, 20, 2)}, 1e-6, 1e-3)
	checkLayer(t, "log-softmax", caseLogSoftmax[float64], caseLogSoftmax[float32], [][]float64{rvec(rng, 11, 2)}, 1e-6, 1e-3)
}

// The entropy and logprob of logSoftmaxForward against a direct formula.
func TestLogSoftmaxValues(t *testing.T) {
	z := []float64{1, -2, 0.5, 3, 3}
	var sum float64
	for _, v := range z {
		sum += math.Exp(v)
	}
	var ent float64
	for _, v := range z {
		p := math.Exp(v) / sum
		ent -= p * math.Log(p)
	}
	lp, e := logSoftmaxForward(append([]float64(nil), z...), 1)
	if math.Abs(lp-(-2-math.Log(sum))) > 1e-12 || math.Abs(e-ent) > 1e-12 {
		t.Fatalf("lp %v ent %v, want %v %v", lp, e, -2-math.Log(sum), ent)
	}
}

// Decode rows (one new row over a KV cache) take attentionForward's
// split-by-keys path in float32 (blocks of attnDecodeBlock keys, merged;
// blocks of some heads split further where the workers do not divide the
// kv heads); float64 takes the blocked path. Both against each other, for
// a batch that mixes decode rows at several positions (one key, a block
// boundary, several blocks) with a prefill row block, with and without a
// sliding window, for head sizes on and off the AVX-512 kernels, 2 and 3
// kv heads, and 1 to 3 workers.
func TestDecodeAttention(t *testing.T) {
	defer func(f func() int) { attnWorkers = f }(attnWorkers)
	rng := rand.New(rand.NewPCG(9, 10))
	for _, workers := range []int{1, 2, 3} {
		attnWorkers = func() int { return workers }
		for _, nkv := range []int{2, 3} {
			for _, d := range []int{64, 20} {
				for _, win := range []int{0, 50} {
					checkDecodeAttention(t, rng, workers, nkv, d, win)
				}
			}
		}
	}
}

// checkDecodeAttention is TestDecodeAttention for one geometry, with
// decodeParts splitting for workers: decode rows at and around the block
// boundaries against the float64 attention of the general path; where the
// workers do not divide the kv heads, some heads' blocks must be split.
func checkDecodeAttention(t *testing.T, rng *rand.Rand, workers, nkv, d, win int) {
	t.Helper()
	const nh, B = 6, attnDecodeBlock
	const cp = 3 * B
	type seq struct{ p0, n int }
	seqs := []seq{{0, 1}, {3, 5}, {B - 1, 1}, {B, 1}, {B + B/3, 1}, {2*B + B/4, 1}, {3*B - 1, 1}}
	ge := attnGeom{nh: nh, nkv: nkv, d: d, win: win}
	N := 0
	for _, s := range seqs {
		N += s.n
	}
	round := func(x []float64) []float64 {
		for i, v := range x {
			x[i] = float64(float32(v))
		}
		return x
	}
	q := round(rvec(rng, N*nh*d, 1))
	caches := make([][2][]float64, len(seqs))
	for i := range seqs {
		caches[i] = [2][]float64{round(rvec(rng, nkv*cp*d, 1)), round(rvec(rng, nkv*cp*d, 1))}
	}
	views := make([]attnView[float32], len(seqs))
	r := 0
	for i, s := range seqs {
		K, V := f32s(caches[i][0]), f32s(caches[i][1])
		views[i] = attnView[float32]{R0: r, N: s.n, P0: s.p0, KV: []kvChunk[float32]{{K: K, V: V, RS: d, HS: cp * d, N: s.p0 + s.n, R0: -1}}}
		r += s.n
	}
	got := make([]float32, N*nh*d)
	at := new(attnTasks)
	attentionForward(f32s(q), views, ge, nil, got, make([]attnScratch[float32], 8), at)
	blocks, tasks := 0, 0 // the decode rows' blocks of keys, and their tasks
	for _, v := range views {
		if v.N == 1 {
			lo, hi := ge.keyRange(v.P0, 0, 1)
			blocks += nkv * ((hi - lo + B - 1) / B)
		}
	}
	for _, tk := range at.ts {
		if tk.kb >= 0 {
			tasks++
		}
	}
	// Windows of 50 keys are never split (parts of at least attnPartMin).
	if split, want := tasks > blocks, workers > 1 && nkv%workers != 0 && win == 0; split != want {
		t.Errorf("workers %d, %d kv heads, win %d: %d tasks for %d blocks: split %v, want %v", workers, nkv, win, tasks, blocks, split, want)
	}
	wviews := make([]attnView[float64], len(seqs))
	r = 0
	for i, s := range seqs {
		wviews[i] = attnView[float64]{R0: r, N: s.n, P0: s.p0, KV: []kvChunk[float64]{{K: caches[i][0], V: caches[i][1], RS: d, HS: cp * d, N: s.p0 + s.n, R0: -1}}}
		r += s.n
	}
	want := make([]float64, N*nh*d)
	attentionForward(q, wviews, ge, nil, want, make([]attnScratch[float64], 8), new(attnTasks))
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > 1e-5 {
			t.Fatalf("workers %d, %d kv heads, d=%d win=%d: out[%d] (row %d) = %g, want %g", workers, nkv, d, win, i, i/(nh*d), got[i], want[i])
		}
	}
}

// f32s rounds x to float32 and back, so float32 and float64 runs see the
// same inputs.
func f32s(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}
