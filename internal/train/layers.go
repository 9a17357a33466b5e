package train

// The layers of the Llama-family decoder, each forward next to its backward,
// in the style of llm.c. Activations are row-major [N, C] over N packed
// tokens; weights use the Hugging Face [out, in] layout. Every backward takes
// the upstream gradient dY of its forward's output and produces dX (added to
// the destination when accumulate is set, because several branches feed one
// tensor) plus the gradients of trainable parameters (only LoRA A/B here:
// the base model is frozen).
//
// Shape letters: N tokens, H hidden, I intermediate, D head dim, nh query
// heads, nkv key/value heads, Q = nh·D, KV = nkv·D, V vocabulary, r LoRA rank.

import (
	"math"

	"flywheel/internal/engine/kernels"
)

// ---------------------------------------------------------------- embedding

// embedForward: x[t,:] = E[tok[t],:]. E [V,H], x [N,H].
func embedForward[T Float](E []T, H int, toks []int, x []T) {
	for t, id := range toks {
		copy(x[t*H:(t+1)*H], E[id*H:(id+1)*H])
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
// row. x, y [n,c]; w [c]; rinv [n] is saved for the backward.
func rmsnormForward[T Float](x, w []T, n, c int, eps float64, y, rinv []T) {
	for t := 0; t < n; t++ {
		xr := x[t*c : (t+1)*c]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		ri := T(1 / math.Sqrt(ss/float64(c)+eps))
		rinv[t] = ri
		yr := y[t*c : (t+1)*c]
		for i, v := range xr {
			yr[i] = v * ri * w[i]
		}
	}
}

// rmsnormBackward: with g = w⊙dy,
// dx = g·rinv − x · rinv³ · (g·x)/c.
func rmsnormBackward[T Float](x, w, rinv, dy []T, n, c int, dx []T, accumulate bool) {
	for t := 0; t < n; t++ {
		xr, dyr, dxr := x[t*c:(t+1)*c], dy[t*c:(t+1)*c], dx[t*c:(t+1)*c]
		ri := rinv[t]
		var dot T
		for i := range xr {
			dot += w[i] * dyr[i] * xr[i]
		}
		k := ri * ri * ri * dot / T(c)
		for i := range xr {
			g := w[i]*dyr[i]*ri - xr[i]*k
			if accumulate {
				dxr[i] += g
			} else {
				dxr[i] = g
			}
		}
	}
}

// ---------------------------------------------------------------- linear + LoRA

// lora is one trainable low-rank pair with its gradients: ΔW = s·B·A.
type lora[T Float] struct {
	A, B   []T // [r,in], [out,r]
	dA, dB []T
}

// The LoRA products are skinny (one side is the rank r); they run on
// loraKernels (nil: the default backend).
var loraKernels kernels.Backend

func loraGemm[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	gemmOn(loraKernels, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// linear is a frozen projection y = x·Wᵀ + b plus an optional LoRA update
// s·(x·Aᵀ)·Bᵀ.
type linear[T Float] struct {
	W       []T // [out,in]
	Bias    []T // [out] or nil
	Out, In int
	L       *lora[T]
	R       int
	S       T // alpha / r
}

// forward: y [n,out] = x [n,in]·Wᵀ + b + s·xa·Bᵀ, xa [n,r] = x·Aᵀ is saved.
func (l *linear[T]) forward(x []T, n int, y, xa []T) {
	gemm(false, true, n, l.Out, l.In, 1, x, l.In, l.W, l.In, 0, y, l.Out)
	if l.Bias != nil {
		for t := 0; t < n; t++ {
			yr := y[t*l.Out : (t+1)*l.Out]
			for i, b := range l.Bias {
				yr[i] += b
			}
		}
	}
	if l.L != nil {
		loraGemm(false, true, n, l.R, l.In, 1, x, l.In, l.L.A, l.In, 0, xa, l.R)
		loraGemm(false, true, n, l.Out, l.R, l.S, xa, l.R, l.L.B, l.R, 1, y, l.Out)
	}
}

// backward: dx (+)= dy·W + s·(dy·B)·A; dB += s·dyᵀ·xa; dA += s·(dy·B)ᵀ·x.
// dyB [n,r] is scratch.
func (l *linear[T]) backward(x, xa, dy []T, n int, dx []T, accumulate bool, dyB []T) {
	var beta T
	if accumulate {
		beta = 1
	}
	if dx != nil {
		gemm(false, false, n, l.In, l.Out, 1, dy, l.Out, l.W, l.In, beta, dx, l.In)
	}
	if l.L == nil {
		return
	}
	loraGemm(false, false, n, l.R, l.Out, 1, dy, l.Out, l.L.B, l.R, 0, dyB, l.R)
	if dx != nil {
		loraGemm(false, false, n, l.In, l.R, l.S, dyB, l.R, l.L.A, l.In, 1, dx, l.In)
	}
	loraGemm(true, false, l.Out, l.R, n, l.S, dy, l.Out, xa, l.R, 1, l.L.dB, l.R)
	loraGemm(true, false, l.R, l.In, n, l.S, dyB, l.R, x, l.In, 1, l.L.dA, l.In)
}

// ---------------------------------------------------------------- RoPE

// ropeTables returns cos and sin [maxPos, D/2] for the frequencies invFreq
// (rotate_half convention: pairs (i, i+D/2) rotate by pos·invFreq[i]).
func ropeTables[T Float](invFreq []float64, maxPos int) (cos, sin []T) {
	half := len(invFreq)
	cos, sin = make([]T, maxPos*half), make([]T, maxPos*half)
	for p := 0; p < maxPos; p++ {
		for i, f := range invFreq {
			a := float64(p) * f
			cos[p*half+i] = T(math.Cos(a))
			sin[p*half+i] = T(math.Sin(a))
		}
	}
	return cos, sin
}

// ropeForward rotates x [n, heads, D] in place at positions pos [n]:
// y1 = x1·cos − x2·sin, y2 = x2·cos + x1·sin (x1 = x[:D/2], x2 = x[D/2:]).
func ropeForward[T Float](x []T, n, heads, d int, pos []int, cos, sin []T) {
	half := d / 2
	for t := 0; t < n; t++ {
		c, s := cos[pos[t]*half:(pos[t]+1)*half], sin[pos[t]*half:(pos[t]+1)*half]
		for h := 0; h < heads; h++ {
			v := x[(t*heads+h)*d : (t*heads+h+1)*d]
			for i := 0; i < half; i++ {
				x1, x2 := v[i], v[i+half]
				v[i] = x1*c[i] - x2*s[i]
				v[i+half] = x2*c[i] + x1*s[i]
			}
		}
	}
}

// ropeBackward applies the transposed rotation to the gradient in place:
// dx1 = dy1·cos + dy2·sin, dx2 = dy2·cos − dy1·sin.
func ropeBackward[T Float](dx []T, n, heads, d int, pos []int, cos, sin []T) {
	half := d / 2
	for t := 0; t < n; t++ {
		c, s := cos[pos[t]*half:(pos[t]+1)*half], sin[pos[t]*half:(pos[t]+1)*half]
		for h := 0; h < heads; h++ {
			v := dx[(t*heads+h)*d : (t*heads+h+1)*d]
			for i := 0; i < half; i++ {
				g1, g2 := v[i], v[i+half]
				v[i] = g1*c[i] + g2*s[i]
				v[i+half] = g2*c[i] - g1*s[i]
			}
		}
	}
}

// ---------------------------------------------------------------- attention

// The attention's matrix products are many small ones (per sequence and
// head: [L,D]·[D,L] and [L,L]·[L,D]) run from parallel tasks. Calling a
// cgo BLAS with its own thread pool from several goroutines at once
// oversubscribes the cores, so they run on the pure-Go kernels, whose
// goroutines nest cleanly under parallelTasks.
var attnKernels kernels.Backend = kernels.Go{}

func attnGemm[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	gemmOn(attnKernels, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// seg is one packed sequence: tokens [Off, Off+Len) of the batch.
type seg struct{ Off, Len int }

// attnBlock is the number of query rows processed at once. The attention
// never holds a whole [L, L] probability matrix: the forward saves only the
// log-sum-exp of each row, and the backward recomputes each block's
// probabilities from q, k and that (as FlashAttention does), so its memory
// is O(workers · attnBlock · L) instead of O(heads · L²).
var attnBlock = 64

// attentionForward is causal grouped-query attention within each segment.
// q [N,Q], k, v [N,KV] (after RoPE); out [N,Q]; lse [N,nh] saved.
// For head h (kv head g = h/(nh/nkv)) and a block of query rows i0..i1
// (which see keys 0..i1−1):
//
//	S = q_h[i0:i1]·k_g[:i1]ᵀ/√D, causal mask, lse = log Σ exp S,
//	P = exp(S − lse), out_h[i0:i1] = P·v_g[:i1].
func attentionForward[T Float](q, k, v []T, segs []seg, nh, nkv, d int, lse, out []T) {
	Q, KV := nh*d, nkv*d
	scale := T(1 / math.Sqrt(float64(d)))
	parallelTasks(len(segs)*nh, func(task int) {
		si, h := task/nh, task%nh
		s := segs[si]
		L := s.Len
		g := h / (nh / nkv)
		P := make([]T, min(attnBlock, L)*L)
		kg, vg := k[s.Off*KV+g*d:], v[s.Off*KV+g*d:]
		for i0 := 0; i0 < L; i0 += attnBlock {
			i1 := min(i0+attnBlock, L)
			B := i1 - i0
			qb := q[(s.Off+i0)*Q+h*d:]
			// S [B,i1] = q_h[i0:i1] [B,D] · k_g[:i1]ᵀ [D,i1] · scale
			attnGemm(false, true, B, i1, d, scale, qb, Q, kg, KV, 0, P, i1)
			for r := 0; r < B; r++ {
				i := i0 + r
				row := P[r*i1 : (r+1)*i1]
				mx := row[0]
				for j := 1; j <= i; j++ {
					mx = max(mx, row[j])
				}
				var sum T
				for j := 0; j <= i; j++ {
					e := exp(row[j] - mx)
					row[j] = e
					sum += e
				}
				inv := 1 / sum
				for j := 0; j <= i; j++ {
					row[j] *= inv
				}
				clear(row[i+1:])
				lse[(s.Off+i)*nh+h] = mx + T(math.Log(float64(sum)))
			}
			// out_h[i0:i1] [B,D] = P [B,i1] · v_g[:i1] [i1,D]
			attnGemm(false, false, B, d, i1, 1, P, i1, vg, KV, 0, out[(s.Off+i0)*Q+h*d:], Q)
		}
	})
}

// attentionBackward: given dout [N,Q] and the saved lse, per block of query
// rows, recompute P = exp(q·kᵀ/√D − lse) (causal), then
// dP = dout_h·v_gᵀ; dv_g += Pᵀ·dout_h; dS = P⊙(dP − rowsum(P⊙dP))/√D;
// dq_h = dS·k_g; dk_g += dSᵀ·q_h. Heads sharing a kv head run in one task so
// their dk/dv accumulations do not race. dq, dk, dv are overwritten.
func attentionBackward[T Float](q, k, v, lse, dout []T, segs []seg, nh, nkv, d int, dq, dk, dv []T) {
	Q, KV := nh*d, nkv*d
	scale := T(1 / math.Sqrt(float64(d)))
	group := nh / nkv
	parallelTasks(len(segs)*nkv, func(task int) {
		si, g := task/nkv, task%nkv
		s := segs[si]
		L := s.Len
		P, dP := make([]T, min(attnBlock, L)*L), make([]T, min(attnBlock, L)*L)
		kg, vg := k[s.Off*KV+g*d:], v[s.Off*KV+g*d:]
		dkg, dvg := dk[s.Off*KV+g*d:], dv[s.Off*KV+g*d:]
		for i := 0; i < L; i++ {
			clear(dkg[i*KV : i*KV+d])
			clear(dvg[i*KV : i*KV+d])
		}
		for h := g * group; h < (g+1)*group; h++ {
			for i0 := 0; i0 < L; i0 += attnBlock {
				i1 := min(i0+attnBlock, L)
				B := i1 - i0
				qb, dob, dqb := q[(s.Off+i0)*Q+h*d:], dout[(s.Off+i0)*Q+h*d:], dq[(s.Off+i0)*Q+h*d:]
				// recompute P [B,i1]
				attnGemm(false, true, B, i1, d, scale, qb, Q, kg, KV, 0, P, i1)
				for r := 0; r < B; r++ {
					i := i0 + r
					row := P[r*i1 : (r+1)*i1]
					m := lse[(s.Off+i)*nh+h]
					for j := 0; j <= i; j++ {
						row[j] = exp(row[j] - m)
					}
					clear(row[i+1:])
				}
				// dv_g[:i1] [i1,D] += Pᵀ [i1,B] · dout_h[i0:i1] [B,D]
				attnGemm(true, false, i1, d, B, 1, P, i1, dob, Q, 1, dvg, KV)
				// dP [B,i1] = dout_h[i0:i1] [B,D] · v_g[:i1]ᵀ [D,i1]
				attnGemm(false, true, B, i1, d, 1, dob, Q, vg, KV, 0, dP, i1)
				for r := 0; r < B; r++ {
					i := i0 + r
					pr, dr := P[r*i1:(r+1)*i1], dP[r*i1:(r+1)*i1]
					var dot T
					for j := 0; j <= i; j++ {
						dot += pr[j] * dr[j]
					}
					for j := 0; j <= i; j++ {
						dr[j] = pr[j] * (dr[j] - dot) * scale
					}
					clear(dr[i+1:])
				}
				// dq_h[i0:i1] [B,D] = dS [B,i1] · k_g[:i1] [i1,D]
				attnGemm(false, false, B, d, i1, 1, dP, i1, kg, KV, 0, dqb, Q)
				// dk_g[:i1] [i1,D] += dSᵀ [i1,B] · q_h[i0:i1] [B,D]
				attnGemm(true, false, i1, d, B, 1, dP, i1, qb, Q, 1, dkg, KV)
			}
		}
	})
}

// ---------------------------------------------------------------- SwiGLU

// swigluForward: h = silu(g) ⊙ u, silu(g) = g·σ(g). g, u, h [N,I].
func swigluForward[T Float](g, u, h []T) {
	for i, x := range g {
		h[i] = x / (1 + exp(-x)) * u[i]
	}
}

// swigluBackward: du = dh·silu(g); dg = dh·u·σ(g)·(1 + g·(1−σ(g))).
func swigluBackward[T Float](g, u, dh, dg, du []T) {
	for i, x := range g {
		sg := 1 / (1 + exp(-x))
		du[i] = dh[i] * x * sg
		dg[i] = dh[i] * u[i] * sg * (1 + x*(1-sg))
	}
}

// ---------------------------------------------------------------- residual

// residual: y = a + b; the backward passes dy to both branches, which the
// model does by accumulating into the residual stream's gradient.

// ---------------------------------------------------------------- log-softmax

// logSoftmaxForward turns logits z [V] into probabilities in place and
// returns log p[target] and the entropy −Σ p·log p.
func logSoftmaxForward[T Float](z []T, target int) (lp, ent float64) {
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
	for i, v := range p {
		dz[i] = -g * v
	}
	dz[target] += g
}
