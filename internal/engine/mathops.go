package engine

import (
	"math"
	"runtime"
	"sync"

	"flywheel/internal/engine/kernels"
)

// matmulT computes y[m,out] = x[m,in] · wᵀ (w is [out,in], the HF layout),
// overwriting y, through the default kernel backend.
func matmulT(x []float32, m, in int, w []float32, out int, y []float32) {
	kernels.Default().Sgemm(false, true, m, out, in, 1, x, in, w, in, 0, y, out)
}

// parallelRange splits [0,n) into contiguous chunks across GOMAXPROCS
// goroutines when the total work (n*cost) is large enough to pay for them.
func parallelRange(n, cost int, f func(lo, hi int)) {
	w := min(runtime.GOMAXPROCS(0), n)
	if w <= 1 || n*cost < 1<<15 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + w - 1) / w
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() { defer wg.Done(); f(lo, hi) }()
	}
	wg.Wait()
}

// rmsNorm writes x / sqrt(mean(x²) + eps) · w into dst (dst may be x).
func rmsNorm(dst, x, w []float32, eps float32) { kernels.RMSNorm(dst, x, w, eps) }

// siluMul computes g = silu(g)·u elementwise.
func siluMul(g, u []float32) { kernels.SwiGLU(g, g, u) }

// softmaxInPlace turns x into softmax(x) (-Inf entries become 0).
func softmaxInPlace(x []float32) { kernels.Softmax(x) }

// RopeInvFreq returns the RoPE inverse frequencies θ_i (i < HeadDim/2) of
// cfg in the Hugging Face convention, with the "linear" and "llama3" rope
// scalings applied. Position p rotates the pair (x_i, x_{i+D/2}) of each
// head by the angle p·θ_i (rotate_half).
func RopeInvFreq(cfg *Config) []float64 { return ropeInvFreq(cfg) }

// ropeInvFreq implements RopeInvFreq.
func ropeInvFreq(cfg *Config) []float64 {
	half := cfg.HeadDim / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(cfg.RopeTheta, float64(2*i)/float64(cfg.HeadDim))
	}
	rs := cfg.RopeScaling
	if rs == nil {
		return inv
	}
	rt := rs.RopeType
	if rt == "" {
		rt = rs.Type
	}
	switch rt {
	case "linear":
		for i := range inv {
			inv[i] /= rs.Factor
		}
	case "llama3":
		old := float64(rs.OriginalMaxPositionEmbeddings)
		lowWavelen := old / rs.LowFreqFactor
		highWavelen := old / rs.HighFreqFactor
		for i, f := range inv {
			wavelen := 2 * math.Pi / f
			switch {
			case wavelen < highWavelen:
			case wavelen > lowWavelen:
				inv[i] = f / rs.Factor
			default:
				smooth := (old/wavelen - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
				inv[i] = (1-smooth)*f/rs.Factor + smooth*f
			}
		}
	}
	return inv
}

// ropeApply rotates each head vector of x (heads·D values) in place with
// the HF rotate_half convention: pairs (i, i+D/2).
func ropeApply(x []float32, heads, D int, cos, sin []float32) {
	half := D / 2
	for h := 0; h < heads; h++ {
		v := x[h*D : h*D+D]
		a, b := v[:half], v[half:D]
		for i := 0; i < half; i++ {
			x0, x1 := a[i], b[i]
			a[i] = x0*cos[i] - x1*sin[i]
			b[i] = x1*cos[i] + x0*sin[i]
		}
	}
}
