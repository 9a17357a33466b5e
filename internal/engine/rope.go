package engine

import "math"

// ropeInvFreq returns the RoPE inverse frequencies θ_i (i < HeadDim/2) of
// cfg in the Hugging Face convention, with the "linear" and "llama3" rope
// scalings applied (ParseConfig refuses every other type). Position p
// rotates the pair (x_i, x_{i+D/2}) of each head by the angle p·θ_i
// (rotate_half). It is the one source of RoPE frequencies: serving and
// training both rotate with the tables of ropeRows over these.
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
