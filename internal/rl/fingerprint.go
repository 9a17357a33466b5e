package rl

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
)

// ChoiceFingerprint identifies a sampled choice by its n tokens and their
// logprobs, as chat completions return them in logprobs.content and RL
// clients post them back in messages_and_choices: at(i) is the i-th token
// string ("token_id:N" or its text) and its logprob. The call store records
// it for every traced choice with logprobs, and a training job's
// trajectories keep it, which links a trained-on choice to the call that
// sampled it (JSON numbers round-trip float64 exactly, so the figure
// survives the client). "" when n is 0.
func ChoiceFingerprint(n int, at func(i int) (token string, logprob float64)) string {
	if n == 0 {
		return ""
	}
	h := sha256.New()
	var b [8]byte
	for i := range n {
		tok, lp := at(i)
		binary.LittleEndian.PutUint64(b[:], uint64(len(tok)))
		h.Write(b[:])
		h.Write([]byte(tok))
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(lp))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Fingerprint is ChoiceFingerprint of the choice's sampled tokens; "" when
// it has no logprobs (or a token without one).
func (e *Element) Fingerprint() string {
	toks := e.Sampled()
	for _, t := range toks {
		if t.Logprob == nil {
			return ""
		}
	}
	return ChoiceFingerprint(len(toks), func(i int) (string, float64) { return toks[i].Token, *toks[i].Logprob })
}
