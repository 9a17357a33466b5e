package engine

// The layers of the Llama-family decoder, each forward next to its backward,
// in the style of llm.c. Serving and training run these same functions (see
// net.go); only training calls the backwards. Activations are row-major
// [N, C] over the N rows of a pass; weights use the Hugging Face [out, in]
// layout. Every backward takes the upstream gradient dY of its forward's
// output and produces dX (added to the destination when accumulate is set,
// because several branches feed one tensor) plus the gradients of the
// trainable parameters (only LoRA A/B: the base model is frozen).
//
// Shape letters: N rows, H hidden, I intermediate, D head dim, nh query
// heads, nkv key/value heads, Q = nh·D, KV = nkv·D, V vocabulary, r LoRA rank.

import (
	"math"

	"flywheel/internal/engine/kernels"
	"flywheel/internal/par"
)

// ---------------------------------------------------------------- embedding

// embedForward: x[t,:] = E[tok[t],:]. E [V,H], x [N,H].
func embedForward[T Float](E wmat[T], H int, toks []int, x []T) {
	for t, id := range toks {
		if E.q != nil {
			kernels.DequantEmbedRow(E.qt, any(x[t*H:(t+1)*H]).([]float32), E.q, id)
			continue
		}
		if E.h != nil {
			kernels.HalfToFloat32(E.ht, any(x[t*H:(t+1)*H]).([]float32), E.h[id*H:(id+1)*H])
			continue
		}
		copy(x[t*H:(t+1)*H], E.f[id*H:(id+1)*H])
	}
}

// embedBackward: dE[tok[t],:] += dx[t,:]. (The embedding is frozen in LoRA
// training, so the trainer never calls it; it is here, tested, for
// completeness of the backward pass.)
func embedBackward[T Float](dE []T, H int, toks []int, dx []T) {
	for t, id := range toks {
		row := dE[id*H : (id+1)*H]
		for i, g := range dx[t*H : (t+1)*H] {
			row[i] += g
		}
	}
}

// ---------------------------------------------------------------- RMSNorm

// rmsnormForward: y = x · rinv · w with rinv = 1/sqrt(mean(x²) + eps), per
// row. x, y [n,c] (y may be x); w [c]; rinv [n] is saved for the backward
// (nil: not saved).
func rmsnormForward[T Float](x, w []T, n, c int, eps float64, y, rinv []T) {
	if x32, ok := any(x).([]float32); ok {
		y32, w32 := any(y).([]float32), any(w).([]float32)
		r32, _ := any(rinv).([]float32)
		if par.Serial(n, c) { // a decode step: no closure to allocate
			rmsnormRows32(0, n, c, x32, w32, float32(eps), y32, r32)
			return
		}
		par.Range(n, c, func(lo, hi int) { rmsnormRows32(lo, hi, c, x32, w32, float32(eps), y32, r32) })
		return
	}
	par.Range(n, c, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			xr := x[t*c : (t+1)*c]
			var ss float64
			for _, v := range xr {
				ss += float64(v) * float64(v)
			}
			ri := T(1 / math.Sqrt(ss/float64(c)+eps))
			if rinv != nil {
				rinv[t] = ri
			}
			yr := y[t*c : (t+1)*c]
			for i, v := range xr {
				yr[i] = v * ri * w[i]
			}
		}
	})
}

// rmsnormRows32 is rmsnormForward's float32 rows [lo, hi).
func rmsnormRows32(lo, hi, c int, x, w []float32, eps float32, y, rinv []float32) {
	for t := lo; t < hi; t++ {
		ri := kernels.RMSNorm(y[t*c:(t+1)*c], x[t*c:(t+1)*c], w, eps)
		if rinv != nil {
			rinv[t] = ri
		}
	}
}

// rmsnormBackward: with g = w⊙dy,
// dx = base + g·rinv − x · rinv³ · (g·x)/c (base nil: none; base may be dx,
// to accumulate; the residual branch's gradient otherwise).
func rmsnormBackward[T Float](x, w, rinv, dy []T, n, c int, dx, base []T) {
	par.Range(n, c, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			xr, dyr, dxr := x[t*c:(t+1)*c], dy[t*c:(t+1)*c], dx[t*c:(t+1)*c]
			ri := rinv[t]
			var dot T
			for i := range xr {
				dot += w[i] * dyr[i] * xr[i]
			}
			k := ri * ri * ri * dot / T(c)
			for i := range xr {
				g := w[i]*dyr[i]*ri - xr[i]*k
				if base != nil {
					g += base[t*c+i]
				}
				dxr[i] = g
			}
		}
	})
}

// ---------------------------------------------------------------- linear

// linearForward: y [n,out] (row stride ldy) = x [n,in]·Wᵀ + b (b may be nil).
func linearForward[T Float](x []T, n, in int, W wmat[T], b []T, out int, y []T, ldy int) {
	mulNT(n, out, in, x, in, W, 0, y, ldy)
	if b != nil {
		addBias(y, n, ldy, b)
	}
}

// linearBackward: dx (+)= dy·W. (W and b are frozen.)
func linearBackward[T Float](dy []T, n, out int, W wmat[T], in int, dx []T, accumulate bool) {
	var beta T
	if accumulate {
		beta = 1
	}
	mulNN(n, in, out, dy, out, W, beta, dx, in)
}

// addBias adds b to the first len(b) columns of each of n rows of y.
func addBias[T Float](y []T, n, ldy int, b []T) {
	if par.Serial(n, len(b)) { // a decode step: no closure to allocate
		biasRows(0, n, y, ldy, b)
		return
	}
	par.Range(n, len(b), func(lo, hi int) { biasRows(lo, hi, y, ldy, b) })
}

// biasRows is addBias's rows [lo, hi).
func biasRows[T Float](lo, hi int, y []T, ldy int, b []T) {
	for t := lo; t < hi; t++ {
		yr := y[t*ldy : t*ldy+len(b)]
		for i, v := range b {
			yr[i] += v
		}
	}
}

// ---------------------------------------------------------------- LoRA

// The LoRA products are skinny (one side is the rank r); they run on
// loraKernels (nil: the default backend).
var loraKernels kernels.Backend

func loraGemm[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	gemmOn(loraKernels, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// loraForward adds the low-rank update of one projection to y for the rows
// of each adapter group: xa = x·Aᵀ [rows, r] (saved in xa, row stride
// rmax), y += s·xa·Bᵀ. Rows of groups without the module are untouched.
// x [N,in], y [N,·] with row stride ldy.
func loraForward[T Float](groups []loraRows[T], l, mod int, x []T, in int, y []T, ldy int, xa []T, rmax int) {
	for _, g := range groups {
		f := g.factors(l, mod)
		if f == nil {
			continue
		}
		n, r, out := g.R1-g.R0, g.L.Rank, len(f.B)/g.L.Rank
		loraGemm(false, true, n, r, in, 1, x[g.R0*in:], in, f.A, in, 0, xa[g.R0*rmax:], rmax)
		loraGemm(false, true, n, out, r, g.L.Scale, xa[g.R0*rmax:], rmax, f.B, r, 1, y[g.R0*ldy:], ldy)
	}
}

// loraMod is one projection's LoRA update for loraForwardAll: module mod
// reads x [N,in] and adds into y (row stride ldy), keeping x·Aᵀ in xa.
type loraMod[T Float] struct {
	mod, in, ldy int
	x, y, xa     []T
}

// loraForwardAll is loraForward for the modules of one step of a layer
// (q, k and v; o; gate and up; down). In an inference pass whose adapter
// groups all have few rows (decode) every (group, module) update is one
// task of one par.Tasks call, and both its products stream the factors
// with the decode kernels (kernels.GemvNTSerial): the factors (~650 KB a
// layer at rank 16, as much as a tenth of a BF16 model's weights) are read
// by both cores with prefetches, and no core idles through serial LoRA
// work (a helper left waiting more than ~20 µs parks, and waking it costs
// the next product). xa then holds s·x·Aᵀ (inference keeps no xa).
// Otherwise (prefill, training) each module runs loraForward.
func loraForwardAll[T Float](groups []loraRows[T], l int, mods []loraMod[T], rmax int, train bool) {
	fast := !train
	tasks := 0
	for _, g := range groups {
		if g.L == nil {
			continue
		}
		if g.R1-g.R0 > kernels.StreamRows {
			fast = false
		}
		for _, m := range mods {
			if g.factors(l, m.mod) != nil {
				tasks++
			}
		}
	}
	if tasks == 0 {
		return
	}
	if _, f32 := any(mods[0].x).([]float32); !fast || !f32 {
		for _, m := range mods {
			loraForward(groups, l, m.mod, m.x, m.in, m.y, m.ldy, m.xa, rmax)
		}
		return
	}
	par.Tasks(tasks, false, func(_, ti int) {
		for _, g := range groups {
			for _, m := range mods {
				f := g.factors(l, m.mod)
				if f == nil {
					continue
				}
				if ti--; ti >= 0 {
					continue
				}
				n, r, out := g.R1-g.R0, g.L.Rank, len(f.B)/g.L.Rank
				x, y := any(m.x[g.R0*m.in:]).([]float32), any(m.y[g.R0*m.ldy:]).([]float32)
				xa := any(m.xa[g.R0*rmax:]).([]float32)
				A, B := any(f.A).([]float32), any(f.B).([]float32)
				kernels.GemvNTSerial(n, r, m.in, x, m.in, A, m.in, 0, xa, rmax)
				s := float32(g.L.Scale)
				for i := range n {
					row := xa[i*rmax : i*rmax+r]
					for j := range row {
						row[j] *= s
					}
				}
				kernels.GemvNTSerial(n, out, r, xa, rmax, B, r, 1, y, m.ldy)
				return
			}
		}
	})
}

// loraBackward is loraForward's backward: with dyB = dy·B [rows, r] (scratch),
// dx += s·dyB·A; dB += s·dyᵀ·xa; dA += s·dyBᵀ·x.
func loraBackward[T Float](groups []loraRows[T], l, mod int, x []T, in int, xa []T, rmax int, dy []T, ldy int, dx, dyB []T) {
	for _, g := range groups {
		f := g.factors(l, mod)
		if f == nil {
			continue
		}
		n, r, out := g.R1-g.R0, g.L.Rank, len(f.B)/g.L.Rank
		s := g.L.Scale
		dyg, xg, xag := dy[g.R0*ldy:], x[g.R0*in:], xa[g.R0*rmax:]
		loraGemm(false, false, n, r, out, 1, dyg, ldy, f.B, r, 0, dyB, r)
		if dx != nil {
			loraGemm(false, false, n, in, r, s, dyB, r, f.A, in, 1, dx[g.R0*in:], in)
		}
		if f.DB != nil {
			loraGemm(true, false, out, r, n, s, dyg, ldy, xag, rmax, 1, f.DB, r)
			loraGemm(true, false, r, in, n, s, dyB, r, xg, in, 1, f.DA, in)
		}
	}
}

// ---------------------------------------------------------------- RoPE

// ropeRows fills cos and sin [n, D/2] for the positions pos [n] and the
// frequencies invFreq (ropeInvFreq): row t rotates pair i by pos[t]·invFreq[i].
func ropeRows[T Float](invFreq []float64, pos []int, cos, sin []T) {
	if par.Serial(len(pos), 8*len(invFreq)) { // a decode step: no closure to allocate
		ropeTable(0, len(pos), invFreq, pos, cos, sin)
		return
	}
	par.Range(len(pos), 8*len(invFreq), func(lo, hi int) { ropeTable(lo, hi, invFreq, pos, cos, sin) })
}

// ropeTable is ropeRows's rows [lo, hi).
func ropeTable[T Float](lo, hi int, invFreq []float64, pos []int, cos, sin []T) {
	half := len(invFreq)
	for t := lo; t < hi; t++ {
		for i, f := range invFreq {
			s, c := math.Sincos(float64(pos[t]) * f)
			cos[t*half+i], sin[t*half+i] = T(c), T(s)
		}
	}
}

// ropeForward rotates x [n, heads, D] in place, row t with cos/sin row t
// (rotate_half convention): y1 = x1·cos − x2·sin, y2 = x2·cos + x1·sin
// (x1 = x[:D/2], x2 = x[D/2:]).
func ropeForward[T Float](x []T, n, heads, d int, cos, sin []T) {
	if par.Serial(n, heads*d) { // a decode step: no closure to allocate
		rotateRows(0, n, x, heads, d, cos, sin, false)
		return
	}
	par.Range(n, heads*d, func(lo, hi int) { rotateRows(lo, hi, x, heads, d, cos, sin, false) })
}

// ropeBackward applies the transposed rotation to the gradient in place:
// dx1 = dy1·cos + dy2·sin, dx2 = dy2·cos − dy1·sin.
func ropeBackward[T Float](dx []T, n, heads, d int, cos, sin []T) {
	par.Range(n, heads*d, func(lo, hi int) { rotateRows(lo, hi, dx, heads, d, cos, sin, true) })
}

// rotateRows rotates the rows [lo, hi) of x [n, heads, D] in place by
// their angles (ropeForward), or back by them (inverse: ropeBackward's
// transposed rotation, sin negated — exactly, so the same sums).
func rotateRows[T Float](lo, hi int, x []T, heads, d int, cos, sin []T, inverse bool) {
	half := d / 2
	for t := lo; t < hi; t++ {
		c, s := cos[t*half:(t+1)*half], sin[t*half:(t+1)*half]
		for h := 0; h < heads; h++ {
			v := x[(t*heads+h)*d : (t*heads+h+1)*d]
			for i := 0; i < half; i++ {
				x1, x2, si := v[i], v[i+half], s[i]
				if inverse {
					si = -si
				}
				v[i] = x1*c[i] - x2*si
				v[i+half] = x2*c[i] + x1*si
			}
		}
	}
}

// ---------------------------------------------------------------- attention

// The attention's matrix products are many small ones (per sequence, kv
// head and block of query rows) run from parallel tasks. Calling a BLAS with
// its own thread pool from several goroutines at once oversubscribes the
// cores, so they run on the pure-Go kernels, one goroutine per product (the
// tasks are the parallelism; splitting each product again only adds
// goroutines and hand-offs).
var attnKernels kernels.Backend = kernels.Go{Threads: 1}

func attnGemm[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	gemmOn(attnKernels, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// attnBlock is the number of query rows of one sequence processed at once.
// The attention never holds a whole [L, L] probability matrix: the forward
// keeps only the log-sum-exp of each row (when training), and the backward
// recomputes each block's probabilities from q, k and that (as
// FlashAttention does), so its memory is O(workers · attnBlock · L).
var attnBlock = 64

// kvChunk is a run of one sequence's keys and values for the current layer:
// positions [P0, P0+N), the key of position P0+j for kv head g at
// K[g*HS+j*RS : +D] (V alike). R0 is the chunk's first row in the pass when
// its keys are rows of the pass (training), −1 for a KV cache (serving).
type kvChunk[T Float] struct {
	K, V      []T
	RS, HS    int
	P0, N, R0 int
}

// at is the chunk's key and value rows of kv head g from position p on.
func (c *kvChunk[T]) at(g, p int) (K, V []T) {
	o := g*c.HS + (p-c.P0)*c.RS
	return c.K[o:], c.V[o:]
}

// attnView is one sequence's rows in a pass and where its keys are: rows
// [R0, R0+N) are its new tokens at positions P0..P0+N−1; each attends
// causally (to the last win keys when win > 0) to the keys at positions up
// to its own, which KV covers in order from position 0: a KV cache
// (serving), or the rows of the sequence's ancestors in a tree of shared
// prefixes followed by its own rows (training).
type attnView[T Float] struct {
	R0, N, P0 int
	KV        []kvChunk[T]
}

// attnTask is the attention of the query rows [i0, i1) of view v for kv
// head g; with kb >= 0, of its one query row over the keys [i0, i1), the
// kb-th part of its keys (a decode step, see attentionForward).
type attnTask struct{ v, g, i0, i1, kb int }

// attnTasks is attentionForward's reused storage: the task list and the
// decode blocks' partial states (per task, rep·(D+2) values: o then m, l).
type attnTasks struct {
	ts   []attnTask
	part []float32
	call any // *attnCall[T] of the calls' float type
}

// attnDecodeBlock is the keys per task of a decode row's attention: the
// keys are split into blocks so that every worker has some of the KV cache
// to stream even for one sequence (its rows are cold after the layer's
// weights streamed by), and fixed, so a sequence's result depends only on
// its own length. Each task (a kv head's block) costs a hand-off and its
// block a merge: on the real SmolLM2-135M Q4_1 file at a 128-token context
// (3 kv heads, 2 workers) 256-key blocks — three tasks a layer, no merge —
// took 19–24 % less time in attention than 64-key blocks (nine tasks,
// merged) and two equal blocks per head (six) 5–20 % more than 256, in
// alternated runs; a token 3.5–5 % less (docs/benchmarks.md). With 2
// workers the third head's block is then split in two (decodeParts): four
// tasks, one merge.
const attnDecodeBlock = 256

// decodeParts is how many parts a block of n keys of kv head g of a
// decode row is split into (of nkv heads): 1, but where the workers do
// not divide the heads (3 kv heads, 2 workers: one would wait for the
// other's second head), the blocks of the last nkv mod workers heads are
// split in one part per worker, so every worker has the same keys to
// read; parts of at least attnPartMin keys. A function of the row's
// length and the machine's worker count w only, so a sequence's result
// does not depend on the batch.
//
// On the real SmolLM2-135M Q4_1 file at a 128-token context (2 workers)
// a token took 1.9–2.1 % less time (eleven alternated runs, faster in
// nine); the Q8_0 file's the same (±1.5 %).
func decodeParts(nkv, g, n, w int) int {
	if r := nkv % w; w < 2 || r == 0 || g < nkv-r || n < attnPartMin*w {
		return 1
	}
	return w
}

// attnPartMin is the fewest keys of a part of a split decode head.
const attnPartMin = 64

// attnWorkers is the worker count decodeParts splits for (a variable for
// the tests).
var attnWorkers = par.Workers

// attnScratch is one worker's blocks: gathered queries, scores, outputs.
type attnScratch[T Float] struct{ qg, s, og, dog, dp []T }

// attnGeom is the shape of an attention call.
type attnGeom struct{ nh, nkv, d, win int }

// keyRange is the keys [lo, hi) that the query rows [i0, i1) of a view
// whose first row is at position p0 see.
func (g attnGeom) keyRange(p0, i0, i1 int) (lo, hi int) {
	hi = p0 + i1
	if g.win > 0 {
		lo = max(0, p0+i0-g.win+1)
	}
	return lo, hi
}

// rowKeys is the keys [lo, hi) that the query at position pos sees.
func (g attnGeom) rowKeys(pos int) (lo, hi int) {
	if g.win > 0 {
		lo = max(0, pos-g.win+1)
	}
	return lo, pos + 1
}

// overlap is the part [a, b) of the positions [lo, hi) that chunk c holds
// (a >= b: none).
func (c *kvChunk[T]) overlap(lo, hi int) (a, b int) {
	return max(lo, c.P0), min(hi, c.P0+c.N)
}

// gatherHeads copies rows [r0, r0+B) of the rep heads of kv head g of x
// [·, nh·D] into dst [rep·B, D], head-major (scatter=false), or back.
func gatherHeads[T Float](x []T, r0, B, g int, ge attnGeom, dst []T, scatter bool) {
	rep, d, Q := ge.nh/ge.nkv, ge.d, ge.nh*ge.d
	for hl := 0; hl < rep; hl++ {
		h := g*rep + hl
		for t := 0; t < B; t++ {
			src := x[(r0+t)*Q+h*d : (r0+t)*Q+(h+1)*d]
			blk := dst[(hl*B+t)*d : (hl*B+t+1)*d]
			if scatter {
				copy(src, blk)
			} else {
				copy(blk, src)
			}
		}
	}
}

// scores sets S [M, hi−lo] = Qg·K[lo:hi]ᵀ·scale over the chunks of v.
func scores[T Float](v *attnView[T], g, lo, hi, M, d int, scale T, qg, S []T) {
	P := hi - lo
	for ci := range v.KV {
		c := &v.KV[ci]
		a, b := c.overlap(lo, hi)
		if a >= b {
			continue
		}
		K, _ := c.at(g, a)
		attnGemm(false, true, M, b-a, d, scale, qg, d, K, c.RS, 0, S[a-lo:], P)
	}
}

// attentionForward is causal grouped-query attention of each view's rows
// over its keys. q [N,Q] (after RoPE); out [N,Q]; lse [N,nh] is saved when
// not nil. One task per (view, kv head g, block of query rows [i0,i1)); the
// rep = nh/nkv query heads sharing g are stacked into one block, so each
// key and value row is read once for all of them:
//
//	Qg [rep·B, D], S = Qg·K[lo:hi]ᵀ/√D, causal (windowed) mask,
//	lse = log Σ exp S, P = exp(S − lse), Og = P·V[lo:hi] → out.
//
// A decode row (a view with one new row over a KV cache, float32, no lse)
// is split by keys instead: one task per (kv head, block of
// attnDecodeBlock keys, part of the block: decodeParts) writes its keys'
// unnormalised softmax state (kernels.AttendBlock), and a head's parts are
// merged after (FlashDecoding).
//
// at is reused storage (so a decode step allocates nothing here).
func attentionForward[T Float](q []T, views []attnView[T], ge attnGeom, lse, out []T, scr []attnScratch[T], at *attnTasks) {
	rep, d, nh := ge.nh/ge.nkv, ge.d, ge.nh
	scale := T(1 / math.Sqrt(float64(d)))
	_, f32 := any(q).([]float32)
	ts := at.ts[:0]
	work, nd := 0, 0
	workers := attnWorkers()
	for vi, v := range views {
		if f32 && lse == nil && v.N == 1 && len(v.KV) == 1 {
			lo, hi := ge.keyRange(v.P0, 0, 1)
			for g := 0; g < ge.nkv; g++ {
				kb := 0
				for a := lo; a < hi; a += attnDecodeBlock {
					b := min(hi, a+attnDecodeBlock)
					parts := decodeParts(ge.nkv, g, b-a, workers)
					for p := range parts {
						pa, pb := a+((b-a)*p/parts)&^15, b
						if p+1 < parts {
							pb = a + ((b-a)*(p+1)/parts)&^15
						}
						ts = append(ts, attnTask{vi, g, pa, pb, kb})
						kb++
						nd++
					}
				}
			}
		} else {
			for g := 0; g < ge.nkv; g++ {
				for i0 := 0; i0 < v.N; i0 += attnBlock {
					ts = append(ts, attnTask{vi, g, i0, min(i0+attnBlock, v.N), -1})
				}
			}
		}
		work += nh * v.N * (v.P0 + v.N) * d
	}
	stride := rep * (d + 2)
	if nd > 0 {
		at.part = grow(at.part, len(ts)*stride)
	}
	at.ts = ts
	ac, _ := at.call.(*attnCall[T])
	if ac == nil {
		ac = new(attnCall[T])
		ac.run = ac.task
		at.call = ac
	}
	ac.q, ac.views, ac.ge, ac.lse, ac.out, ac.scr, ac.at, ac.scale = q, views, ge, lse, out, scr, at, scale
	par.Tasks(len(ts), work < 1<<16, ac.run)
	ac.q, ac.views, ac.lse, ac.out, ac.scr = nil, nil, nil, nil, nil // nothing kept past the call
	// Merge each decode row's blocks (a view's tasks for head g are
	// consecutive, in block order).
	for t0 := 0; t0 < len(ts) && nd > 0; {
		tk := ts[t0]
		if tk.kb < 0 {
			t0++
			continue
		}
		t1 := t0 + 1
		for t1 < len(ts) && ts[t1].v == tk.v && ts[t1].g == tk.g && ts[t1].kb > 0 {
			t1++
		}
		o32 := any(out).([]float32)
		r := views[tk.v].R0
		for hl := range rep {
			h := tk.g*rep + hl
			kernels.MergeBlocks(t1-t0, d, at.part[t0*stride+hl*d:], stride, at.part[t0*stride+rep*d+2*hl:], stride, o32[r*nh*d+h*d:r*nh*d+(h+1)*d])
		}
		t0 = t1
	}
}

// attnCall is one attentionForward call's arguments as its tasks read
// them, kept in its attnTasks with task bound to run once, so that a call
// hands par.Tasks no new closure (a decode step makes 30 calls).
type attnCall[T Float] struct {
	q, lse, out []T
	views       []attnView[T]
	ge          attnGeom
	scr         []attnScratch[T]
	at          *attnTasks
	scale       T
	run         func(w, ti int)
}

// task is attentionForward's task ti on worker w.
func (ac *attnCall[T]) task(w, ti int) {
	q, views, ge, lse, out, scr, at, scale := ac.q, ac.views, ac.ge, ac.lse, ac.out, ac.scr, ac.at, ac.scale
	rep, d, nh := ge.nh/ge.nkv, ge.d, ge.nh
	stride := rep * (d + 2)
	ts := at.ts
	tk := ts[ti]
	v := &views[tk.v]
	sc := &scr[w]
	if tk.kb >= 0 {
		a, b := tk.i0, tk.i1
		c := &v.KV[0]
		K, V := c.at(tk.g, a)
		sc.s = grow(sc.s, rep*(b-a))
		o := at.part[ti*stride : ti*stride+rep*d]
		ml := at.part[ti*stride+rep*d : (ti+1)*stride]
		r := v.R0
		kernels.AttendBlock(any(q[r*nh*d+tk.g*rep*d:r*nh*d+(tk.g+1)*rep*d]).([]float32), rep, d,
			any(K).([]float32), any(V).([]float32), c.RS, b-a, float32(scale), o, ml, any(sc.s).([]float32))
		return
	}
	B := tk.i1 - tk.i0
	lo, hi := ge.keyRange(v.P0, tk.i0, tk.i1)
	P, M := hi-lo, rep*B
	sc.qg, sc.s, sc.og = grow(sc.qg, M*d), grow(sc.s, M*P), grow(sc.og, M*d)
	gatherHeads(q, v.R0+tk.i0, B, tk.g, ge, sc.qg, false)
	scores(v, tk.g, lo, hi, M, d, scale, sc.qg, sc.s)
	for i := 0; i < M; i++ {
		hl, t := i/B, i%B
		row := sc.s[i*P : (i+1)*P]
		klo, khi := ge.rowKeys(v.P0 + tk.i0 + t)
		klo, khi = klo-lo, khi-lo
		clear(row[:klo])
		clear(row[khi:])
		m := softmaxRow(row[klo:khi], lse != nil)
		if lse != nil {
			lse[(v.R0+tk.i0+t)*nh+tk.g*rep+hl] = m
		}
	}
	var beta T
	for ci := range v.KV {
		c := &v.KV[ci]
		a, b := c.overlap(lo, hi)
		if a >= b {
			continue
		}
		_, V := c.at(tk.g, a)
		attnGemm(false, false, M, d, b-a, 1, sc.s[a-lo:], P, V, c.RS, beta, sc.og, d)
		beta = 1
	}
	gatherHeads(out, v.R0+tk.i0, B, tk.g, ge, sc.og, true)
}

// softmaxRow replaces row with softmax(row) and, when wantLSE, returns
// log Σ exp(row) (as computed before the replacement).
func softmaxRow[T Float](row []T, wantLSE bool) T {
	if r32, ok := any(row).([]float32); ok {
		if !wantLSE {
			kernels.Softmax(r32)
			return 0
		}
		mx := kernels.Max(r32)
		sum := kernels.ExpShift(r32, mx)
		kernels.Scale(1/sum, r32)
		return T(mx + float32(math.Log(float64(sum))))
	}
	mx := row[0]
	for _, v := range row[1:] {
		mx = max(mx, v)
	}
	var sum T
	for j, v := range row {
		e := exp(v - mx)
		row[j] = e
		sum += e
	}
	inv := 1 / sum
	for j := range row {
		row[j] *= inv
	}
	return mx + T(math.Log(float64(sum)))
}

// attnGrads holds, per view, the gradients of the keys and values of its
// ancestors' rows (training with shared prefixes): [P0, KV] each, added
// into the ancestors' rows once every view is done, so views sharing a
// prefix never write the same rows at once.
type attnGrads[T Float] struct{ dk, dv []T }

// attentionBackward: for training views (every chunk's keys are rows of the
// pass, the last chunk the view's own), given dout [N,Q] and the saved lse,
// per block of query rows recompute P = exp(q·kᵀ/√D − lse) (causal,
// windowed), then
//
//	dP = dout·vᵀ; dv += Pᵀ·dout; dS = P⊙(dP − rowsum(P⊙dP))/√D;
//	dq = dS·k; dk += dSᵀ·q.
//
// One task per (view, kv head): the heads sharing a kv head accumulate the
// view's own dk and dv rows in one task; gradients of ancestor rows go to
// the view's anc buffers and are summed into dk, dv afterwards in view
// order (deterministic). dq, dk, dv are overwritten.
func attentionBackward[T Float](q, lse, dout []T, views []attnView[T], ge attnGeom, dq, dk, dv []T, anc []attnGrads[T], scr []attnScratch[T]) {
	rep, d, nh, nkv := ge.nh/ge.nkv, ge.d, ge.nh, ge.nkv
	KV := nkv * d
	scale := T(1 / math.Sqrt(float64(d)))
	for vi, vw := range views {
		anc[vi].dk, anc[vi].dv = grow(anc[vi].dk, vw.P0*KV), grow(anc[vi].dv, vw.P0*KV)
	}
	par.Tasks(len(views)*nkv, false, func(w, task int) {
		vi, g := task/nkv, task%nkv
		vw := &views[vi]
		L := vw.N
		// gradient destinations, chunk by chunk: the view's own rows, or its
		// ancestor buffers
		dst := func(c *kvChunk[T], p int) (dK, dV []T) {
			if c.P0 >= vw.P0 { // own rows
				o := (c.R0+p-c.P0)*KV + g*d
				return dk[o:], dv[o:]
			}
			o := p*KV + g*d
			return anc[vi].dk[o:], anc[vi].dv[o:]
		}
		for p := 0; p < vw.P0+L; p++ {
			c := vw.chunkOf(p)
			dK, dV := dst(c, p)
			clear(dK[:d])
			clear(dV[:d])
		}
		sc := &scr[w]
		for i0 := 0; i0 < L; i0 += attnBlock {
			i1 := min(i0+attnBlock, L)
			B := i1 - i0
			lo, hi := ge.keyRange(vw.P0, i0, i1)
			P, M := hi-lo, rep*B
			sc.qg, sc.dog, sc.og = grow(sc.qg, M*d), grow(sc.dog, M*d), grow(sc.og, M*d)
			sc.s, sc.dp = grow(sc.s, M*P), grow(sc.dp, M*P)
			gatherHeads(q, vw.R0+i0, B, g, ge, sc.qg, false)
			gatherHeads(dout, vw.R0+i0, B, g, ge, sc.dog, false)
			// recompute P [M,P]
			scores(vw, g, lo, hi, M, d, scale, sc.qg, sc.s)
			for i := 0; i < M; i++ {
				hl, t := i/B, i%B
				row := sc.s[i*P : (i+1)*P]
				klo, khi := ge.rowKeys(vw.P0 + i0 + t)
				klo, khi = klo-lo, khi-lo
				m := lse[(vw.R0+i0+t)*nh+g*rep+hl]
				clear(row[:klo])
				expShift(row[klo:khi], m)
				clear(row[khi:])
			}
			for ci := range vw.KV {
				c := &vw.KV[ci]
				a, b := c.overlap(lo, hi)
				if a >= b {
					continue
				}
				_, V := c.at(g, a)
				_, dV := dst(c, a)
				// dV [b−a,D] += Pᵀ [b−a,M] · dOg [M,D]
				attnGemm(true, false, b-a, d, M, 1, sc.s[a-lo:], P, sc.dog, d, 1, dV, KV)
				// dP [M,b−a] = dOg [M,D] · Vᵀ [D,b−a]
				attnGemm(false, true, M, b-a, d, 1, sc.dog, d, V, c.RS, 0, sc.dp[a-lo:], P)
			}
			for i := 0; i < M; i++ {
				pr, dr := sc.s[i*P:(i+1)*P], sc.dp[i*P:(i+1)*P]
				var dot T
				for j, p := range pr {
					dot += p * dr[j]
				}
				for j, p := range pr {
					dr[j] = p * (dr[j] - dot) * scale
				}
			}
			var beta T
			for ci := range vw.KV {
				c := &vw.KV[ci]
				a, b := c.overlap(lo, hi)
				if a >= b {
					continue
				}
				K, _ := c.at(g, a)
				dK, _ := dst(c, a)
				// dQg [M,D] (+)= dS [M,b−a] · K [b−a,D]
				attnGemm(false, false, M, d, b-a, 1, sc.dp[a-lo:], P, K, c.RS, beta, sc.og, d)
				beta = 1
				// dK [b−a,D] += dSᵀ [b−a,M] · Qg [M,D]
				attnGemm(true, false, b-a, d, M, 1, sc.dp[a-lo:], P, sc.qg, d, 1, dK, KV)
			}
			gatherHeads(dq, vw.R0+i0, B, g, ge, sc.og, true)
		}
	})
	// ancestors' key/value gradients, in view order
	for vi := range views {
		vw := &views[vi]
		for ci := range vw.KV {
			c := &vw.KV[ci]
			if c.P0 >= vw.P0 {
				continue
			}
			for j := 0; j < c.N; j++ {
				r, p := c.R0+j, c.P0+j
				addInto(dk[r*KV:(r+1)*KV], anc[vi].dk[p*KV:(p+1)*KV])
				addInto(dv[r*KV:(r+1)*KV], anc[vi].dv[p*KV:(p+1)*KV])
			}
		}
	}
}

// chunkOf is the chunk holding position p.
func (v *attnView[T]) chunkOf(p int) *kvChunk[T] {
	for ci := range v.KV {
		if c := &v.KV[ci]; p < c.P0+c.N {
			return c
		}
	}
	panic("engine: position outside the view's keys")
}

// ---------------------------------------------------------------- SwiGLU

// swigluForward: h = silu(g) ⊙ u, silu(g) = g·σ(g), per row; gu [n, 2I]
// holds each row's g then u; h [n, I].
func swigluForward[T Float](gu []T, n, I int, h []T) {
	if par.Serial(n, 8*I) { // a decode step: no closure to allocate
		swigluRows(0, n, gu, I, h)
		return
	}
	par.Range(n, 8*I, func(lo, hi int) { swigluRows(lo, hi, gu, I, h) })
}

// swigluRows is swigluForward's rows [lo, hi).
func swigluRows[T Float](lo, hi int, gu []T, I int, h []T) {
	for t := lo; t < hi; t++ {
		g, u, hr := gu[2*t*I:(2*t+1)*I], gu[(2*t+1)*I:(2*t+2)*I], h[t*I:(t+1)*I]
		if h32, ok := any(hr).([]float32); ok {
			kernels.SwiGLU(h32, any(g).([]float32), any(u).([]float32))
			continue
		}
		for i, x := range g {
			hr[i] = x / (1 + exp(-x)) * u[i]
		}
	}
}

// swigluBackward: du = dh·silu(g); dg = dh·u·σ(g)·(1 + g·(1−σ(g))), into
// dgu [n, 2I] laid out as gu.
func swigluBackward[T Float](gu []T, n, I int, dh, dgu []T) {
	par.Range(n, 8*I, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			g, u := gu[2*t*I:(2*t+1)*I], gu[(2*t+1)*I:(2*t+2)*I]
			dg, du := dgu[2*t*I:(2*t+1)*I], dgu[(2*t+1)*I:(2*t+2)*I]
			dhr := dh[t*I : (t+1)*I]
			if dg32, ok := any(dg).([]float32); ok {
				kernels.SwiGLUBackward(dg32, any(du).([]float32), any(g).([]float32), any(u).([]float32), any(dhr).([]float32))
				continue
			}
			for i, x := range g {
				sg := 1 / (1 + exp(-x))
				du[i] = dhr[i] * x * sg
				dg[i] = dhr[i] * u[i] * sg * (1 + x*(1-sg))
			}
		}
	})
}

// ---------------------------------------------------------------- log-softmax

// logSoftmaxForward turns logits z [V] into probabilities in place and
// returns log p[target] and the entropy −Σ p·log p.
func logSoftmaxForward[T Float](z []T, target int) (lp, ent float64) {
	if z32, ok := any(z).([]float32); ok {
		return logSoftmax32(z32, target)
	}
	mx := z[0]
	for _, v := range z[1:] {
		mx = max(mx, v)
	}
	zt := float64(z[target] - mx)
	// e_i = exp(z_i − mx); log p_i = (z_i − mx) − log Σe;
	// entropy = log Σe − Σ e_i (z_i − mx) / Σe.
	var sum, sez float64
	for i, v := range z {
		d := v - mx
		e := exp(d)
		z[i] = e
		sum += float64(e)
		sez += float64(e) * float64(d)
	}
	lse := math.Log(sum)
	inv := T(1 / sum)
	for i := range z {
		z[i] *= inv
	}
	return zt - lse, lse - sez/sum
}

// logSoftmaxBackward: d log p[target] / dz = onehot(target) − p, so
// dz = g·(onehot − p) for the upstream scalar g.
func logSoftmaxBackward[T Float](p []T, target int, g T, dz []T) {
	if p32, ok := any(p).([]float32); ok && len(p) > 0 && &p[0] == &dz[0] {
		kernels.Scale(float32(-g), p32) // in place, vectorised
	} else {
		for i, v := range p {
			dz[i] = -g * v
		}
	}
	dz[target] += g
}

// parallelRows runs f(i) for each of n rows of cost floats each.
func parallelRows(n, cost int, f func(i int)) {
	par.Range(n, cost, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			f(i)
		}
	})
}

// expShift sets x[i] = exp(x[i] − shift): the kernels' vectorised exp for
// float32, math.Exp for float64.
func expShift[T Float](x []T, shift T) {
	if x32, ok := any(x).([]float32); ok {
		kernels.ExpShift(x32, float32(shift))
		return
	}
	for j, v := range x {
		x[j] = exp(v - shift)
	}
}

// logSoftmax32 is logSoftmaxForward for float32 logits with the
// exponentials vectorised (the vocabulary-wide exp dominated the head) and
// the sums in float64: e_i = exp(z_i − mx), log p_t = (z_t − mx) −
// log Σe, entropy = log Σe − Σ e_i (z_i − mx) / Σe.
func logSoftmax32(z []float32, target int) (lp, ent float64) {
	mx := kernels.Max(z)
	zt := float64(z[target] - mx)
	sum, sez := kernels.ExpShiftDot(z, mx)
	lse := math.Log(sum)
	kernels.Scale(float32(1/sum), z)
	return zt - lse, lse - sez/sum
}
