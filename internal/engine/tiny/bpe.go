package tiny

import (
	_ "embed"
	"sort"
	"sync"

	"github.com/dlclark/regexp2"
)

//go:embed corpus.txt
var corpus string

// gpt2Split is the GPT-2 pre-tokenizer pattern (the one HF's ByteLevel
// pre-tokenizer applies with use_regex: true).
const gpt2Split = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// byteToUnicode is GPT-2's reversible byte -> printable rune table, and
// byteOrder the bytes in GPT-2's vocabulary order (printable ones first).
var byteToUnicode, byteOrder = func() ([256]rune, [256]byte) {
	var bs []int
	for b := '!'; b <= '~'; b++ {
		bs = append(bs, int(b))
	}
	for b := 0xA1; b <= 0xAC; b++ {
		bs = append(bs, b)
	}
	for b := 0xAE; b <= 0xFF; b++ {
		bs = append(bs, b)
	}
	in := map[int]bool{}
	for _, b := range bs {
		in[b] = true
	}
	cs := append([]int(nil), bs...)
	n := 0
	for b := 0; b < 256; b++ {
		if !in[b] {
			bs = append(bs, b)
			cs = append(cs, 256+n)
			n++
		}
	}
	var table [256]rune
	var order [256]byte
	for i, b := range bs {
		table[b] = rune(cs[i])
		order[i] = byte(b)
	}
	return table, order
}()

func byteLevel(s string) string {
	rs := make([]rune, 0, len(s))
	for i := 0; i < len(s); i++ {
		rs = append(rs, byteToUnicode[s[i]])
	}
	return string(rs)
}

// bpeResult is a trained byte-level BPE: the vocabulary in id order and the
// merges in rank order (each "left right").
type bpeResult struct {
	vocab  []string
	merges [][2]string
}

var (
	trainOnce  sync.Map // numMerges -> *bpeResult
	trainMutex sync.Mutex
)

// trainBPE learns up to numMerges merges from the embedded corpus. It is
// deterministic: the most frequent pair wins, ties broken by the smaller
// (left, right) token strings. Results are cached per process.
func trainBPE(numMerges int) *bpeResult {
	if r, ok := trainOnce.Load(numMerges); ok {
		return r.(*bpeResult)
	}
	trainMutex.Lock()
	defer trainMutex.Unlock()
	if r, ok := trainOnce.Load(numMerges); ok {
		return r.(*bpeResult)
	}
	r := train(numMerges)
	trainOnce.Store(numMerges, r)
	return r
}

func train(numMerges int) *bpeResult {
	re := regexp2.MustCompile(gpt2Split, regexp2.None)
	counts := map[string]int{}
	m, _ := re.FindStringMatch(corpus)
	for m != nil {
		counts[byteLevel(m.String())]++
		m, _ = re.FindNextMatch(m)
	}
	res := &bpeResult{}
	ids := map[string]int{}
	for _, b := range byteOrder {
		s := string(byteToUnicode[b])
		ids[s] = len(res.vocab)
		res.vocab = append(res.vocab, s)
	}
	type word struct {
		sym  []int
		freq int
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	words := make([]word, len(keys))
	for i, k := range keys {
		var sym []int
		for _, r := range k {
			sym = append(sym, ids[string(r)])
		}
		words[i] = word{sym: sym, freq: counts[k]}
	}
	type pair struct{ a, b int }
	pc := map[pair]int{}
	for _, w := range words {
		for j := 0; j+1 < len(w.sym); j++ {
			pc[pair{w.sym[j], w.sym[j+1]}] += w.freq
		}
	}
	for len(res.merges) < numMerges {
		best, bestN := pair{-1, -1}, 0
		for p, n := range pc {
			if n <= 0 {
				continue
			}
			if n > bestN || (n == bestN && (res.vocab[p.a] < res.vocab[best.a] ||
				(res.vocab[p.a] == res.vocab[best.a] && res.vocab[p.b] < res.vocab[best.b]))) {
				best, bestN = p, n
			}
		}
		if bestN == 0 {
			break
		}
		merged := res.vocab[best.a] + res.vocab[best.b]
		nid, dup := ids[merged]
		if !dup { // a string reached by two splits keeps its first id
			nid = len(res.vocab)
			ids[merged] = nid
			res.vocab = append(res.vocab, merged)
		}
		res.merges = append(res.merges, [2]string{res.vocab[best.a], res.vocab[best.b]})
		for wi := range words {
			w := &words[wi]
			has := false
			for j := 0; j+1 < len(w.sym); j++ {
				if w.sym[j] == best.a && w.sym[j+1] == best.b {
					has = true
					break
				}
			}
			if !has {
				continue
			}
			for j := 0; j+1 < len(w.sym); j++ {
				pc[pair{w.sym[j], w.sym[j+1]}] -= w.freq
			}
			out := w.sym[:0:0]
			for j := 0; j < len(w.sym); j++ {
				if j+1 < len(w.sym) && w.sym[j] == best.a && w.sym[j+1] == best.b {
					out = append(out, nid)
					j++
				} else {
					out = append(out, w.sym[j])
				}
			}
			w.sym = out
			for j := 0; j+1 < len(w.sym); j++ {
				pc[pair{w.sym[j], w.sym[j+1]}] += w.freq
			}
		}
		for p, n := range pc {
			if n <= 0 {
				delete(pc, p)
			}
		}
	}
	return res
}
