package engine

import "fmt"

// KV blocks: a sequence's cached keys and values exported as flat float32
// blocks and appended to another sequence, so that a prefix prefilled once
// (by an earlier request) is not prefilled again (infer's prefix cache).
//
// An exported span of n positions is laid out [layer][keys, values][KV
// head][position][head dim]: KVFloatsPerToken()*n floats.

// KVFloatsPerToken is the number of float32 values one position takes in a
// sequence's KV cache: the keys and values of every layer.
func (m *Model) KVFloatsPerToken() int {
	c := m.Config
	return 2 * c.NumLayers * c.NumKVHeads * c.HeadDim
}

// ExportKV copies the keys and values of positions [from, to) into dst,
// which must hold (to-from)*KVFloatsPerToken() floats, and returns the part
// of dst written.
func (s *Seq) ExportKV(from, to int, dst []float32) []float32 {
	if from < 0 || to > s.n || from > to {
		panic(fmt.Sprintf("engine: Seq.ExportKV(%d, %d) with length %d", from, to, s.n))
	}
	n := to - from
	c := s.m.Config
	KVH, D := c.NumKVHeads, c.HeadDim
	need := n * s.m.KVFloatsPerToken()
	if len(dst) < need {
		panic(fmt.Sprintf("engine: Seq.ExportKV: dst holds %d floats, %d needed", len(dst), need))
	}
	o := 0
	for l := range s.k {
		for _, src := range [2][]float32{s.k[l], s.v[l]} {
			for h := 0; h < KVH; h++ {
				o += copy(dst[o:o+n*D], src[(h*s.cap+from)*D:(h*s.cap+to)*D])
			}
		}
	}
	return dst[:need]
}

// AppendKV appends n positions exported by ExportKV from a sequence of the
// same model and adapter, as if they had been forwarded through s; the
// caller vouches that they are the keys and values of the tokens at those
// positions. The sequence's logits are dropped (Logits returns nil until
// the next Forward).
func (s *Seq) AppendKV(src []float32, n int) {
	c := s.m.Config
	KVH, D := c.NumKVHeads, c.HeadDim
	if n < 0 || len(src) != n*s.m.KVFloatsPerToken() {
		panic(fmt.Sprintf("engine: Seq.AppendKV: %d floats for %d positions, want %d", len(src), n, n*s.m.KVFloatsPerToken()))
	}
	if s.n+n > c.MaxPositionEmbeddings {
		panic(fmt.Sprintf("engine: Seq.AppendKV: %d positions beyond the context length %d", s.n+n, c.MaxPositionEmbeddings))
	}
	s.ensure(s.n + n)
	o := 0
	for l := range s.k {
		for _, dst := range [2][]float32{s.k[l], s.v[l]} {
			for h := 0; h < KVH; h++ {
				o += copy(dst[(h*s.cap+s.n)*D:(h*s.cap+s.n+n)*D], src[o:o+n*D])
			}
		}
	}
	s.n += n
	s.logits = nil
}
