package gguf

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sample(t testing.TB) []byte {
	t.Helper()
	f32 := make([]byte, 4*8*2)
	for k := range f32 {
		f32[k] = byte(k)
	}
	q := make([]byte, 2*20) // two Q4_1 blocks: one row of 64
	for k := range q {
		q[k] = byte(3 * k)
	}
	b, err := Encode([]KV{
		{"general.architecture", String("llama")},
		{"general.alignment", Uint32(64)},
		{"llama.block_count", Uint32(2)},
		{"llama.rope.freq_base", Float32(10000)},
		{"tokenizer.ggml.tokens", Strings([]string{"a", "b", "ü"})},
		{"tokenizer.ggml.token_type", Int32s([]int32{1, 3, -2})},
		{"tokenizer.ggml.add_bos_token", Bool(true)},
		{"big", Uint64(1 << 40)},
	}, []WriteTensor{
		{Name: "w", Dims: []uint64{8, 2}, Type: F32, Data: f32},
		{Name: "q", Dims: []uint64{64, 1}, Type: Q4_1, Data: q},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	data := sample(t)
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Version != 3 || f.Alignment != 64 || len(f.KVs) != 8 || len(f.Tensors) != 2 {
		t.Fatalf("version %d alignment %d, %d pairs, %d tensors", f.Version, f.Alignment, len(f.KVs), len(f.Tensors))
	}
	if v, _ := f.Get("general.architecture"); v.s != "llama" {
		t.Errorf("architecture %q", v.s)
	}
	if v, _ := f.Get("llama.block_count"); v.Type != TypeUint32 {
		t.Errorf("block_count type %v", v.Type)
	} else if n, ok := v.Uint(); !ok || n != 2 {
		t.Errorf("block_count %d", n)
	}
	if v, _ := f.Get("llama.rope.freq_base"); true {
		if x, ok := v.Float(); !ok || x != 10000 {
			t.Errorf("freq_base %v", x)
		}
	}
	v, _ := f.Get("tokenizer.ggml.tokens")
	a, _ := v.Array()
	if s, ok := a.Strings(); !ok || strings.Join(s, ",") != "a,b,ü" {
		t.Errorf("tokens %q", s)
	}
	v, _ = f.Get("tokenizer.ggml.token_type")
	a, _ = v.Array()
	if x, ok := a.Ints(); !ok || len(x) != 3 || x[1] != 3 || x[2] != -2 {
		t.Errorf("token types %v", x)
	}
	if v, _ := f.Get("tokenizer.ggml.add_bos_token"); true {
		if b, ok := v.Bool(); !ok || !b {
			t.Errorf("add_bos %v %v", b, ok)
		}
	}
	if v, _ := f.Get("big"); true {
		if x, ok := v.Uint(); !ok || x != 1<<40 {
			t.Errorf("big %d", x)
		}
	}
	w := f.Tensor("w")
	if w == nil || w.Type != F32 || w.NumElements() != 16 || len(w.Data) != 64 || w.Data[5] != 5 {
		t.Fatalf("tensor w %+v", w)
	}
	q := f.Tensor("q")
	if q == nil || q.Type != Q4_1 || len(q.Data) != 40 || q.Data[1] != 3 || q.Offset%64 != 0 {
		t.Fatalf("tensor q %+v", q)
	}
	if start := len(data) - 40 - int(q.Offset); start%64 != 0 {
		t.Errorf("data section starts at %d, not 64-aligned", start)
	}
}

// header builds a file by hand: magic, version, counts, then body.
func header(version uint32, nTensors, nKV uint64, body ...[]byte) []byte {
	b := []byte(Magic)
	b = binary.LittleEndian.AppendUint32(b, version)
	b = binary.LittleEndian.AppendUint64(b, nTensors)
	b = binary.LittleEndian.AppendUint64(b, nKV)
	for _, x := range body {
		b = append(b, x...)
	}
	return b
}

func u32(x uint32) []byte { return binary.LittleEndian.AppendUint32(nil, x) }
func u64(x uint64) []byte { return binary.LittleEndian.AppendUint64(nil, x) }
func str(s string) []byte { return append(u64(uint64(len(s))), s...) }

func tensorInfo(name string, typ uint32, off uint64, dims ...uint64) []byte {
	b := str(name)
	b = append(b, u32(uint32(len(dims)))...)
	for _, d := range dims {
		b = append(b, u64(d)...)
	}
	b = append(b, u32(typ)...)
	return append(b, u64(off)...)
}

func TestHostile(t *testing.T) {
	good := sample(t)
	pad := make([]byte, 256)
	cases := []struct {
		name, want string
		data       []byte
	}{
		{"empty", "not a GGUF file", nil},
		{"magic", "not a GGUF file", []byte("GGML0000000000000000000000")},
		{"version1", "unsupported GGUF version 1", header(1, 0, 0)},
		{"truncated header", "truncated header", []byte("GGUF\x03\x00")},
		{"truncated file", "", good[:len(good)-1]},
		{"truncated metadata", "exceeds", good[:60]},
		{"truncated in metadata", "", good[:200]},
		{"lying tensor count", "tensor count", header(3, 1<<60, 0)},
		{"lying metadata count", "metadata count", header(3, 0, 1<<62, pad)},
		{"huge string", "string length", header(3, 0, 1, u64(1<<62), pad)},
		{"huge array", "array: count", header(3, 0, 1, str("k"), u32(uint32(TypeArray)), u32(uint32(TypeUint64)), u64(1<<61), pad)},
		{"huge string array", "array: count", header(3, 0, 1, str("k"), u32(uint32(TypeArray)), u32(uint32(TypeString)), u64(1<<40), pad)},
		{"nested array", "arrays of arrays", header(3, 0, 1, str("k"), u32(uint32(TypeArray)), u32(uint32(TypeArray)), u64(1), pad)},
		{"unknown value type", "unknown value type 13", header(3, 0, 1, str("k"), u32(13), pad)},
		{"bad utf8 key", "not valid UTF-8", header(3, 0, 1, str("k\xff"), u32(uint32(TypeUint8)), []byte{1})},
		{"bad utf8 value", `metadata "k": string is not valid UTF-8`, header(3, 0, 1, str("k"), u32(uint32(TypeString)), str("\xc3\x28"))},
		{"bad utf8 in array", "array element 1: string is not valid UTF-8", header(3, 0, 1, str("k"), u32(uint32(TypeArray)), u32(uint32(TypeString)), u64(2), str("ok"), str("\xed\xa0\x80"))},
		{"duplicate key", `"k" appears twice`, header(3, 0, 2, str("k"), u32(uint32(TypeUint8)), []byte{1}, str("k"), u32(uint32(TypeUint8)), []byte{1})},
		{"bad bool", "bool byte 7", header(3, 0, 1, str("k"), u32(uint32(TypeBool)), []byte{7})},
		{"bad alignment", "general.alignment", header(3, 0, 1, str("general.alignment"), u32(uint32(TypeUint32)), u32(24))},
		{"unknown tensor type", `tensor "t": unknown ggml type 99`, header(3, 1, 0, tensorInfo("t", 99, 0, 4), pad)},
		{"too many dims", "5 dimensions", header(3, 1, 0, tensorInfo("t", 0, 0, 1, 1, 1, 1, 1), pad)},
		{"zero dim", "dimensions", header(3, 1, 0, tensorInfo("t", 0, 0, 4, 0), pad)},
		{"huge dims", "larger than the file", header(3, 1, 0, tensorInfo("t", 0, 0, 1<<40, 1<<40), pad)},
		{"overflowing dims", "larger than the file", header(3, 1, 0, tensorInfo("t", 0, 0, 200, 200, 200, 200), pad)},
		{"partial block", "not whole Q4_0 blocks", header(3, 1, 0, tensorInfo("t", uint32(Q4_0), 0, 48), pad)},
		{"misaligned offset", "not a multiple of the alignment", header(3, 1, 0, tensorInfo("t", 0, 4, 4), pad)},
		{"out of bounds", "run past the end", header(3, 1, 0, tensorInfo("t", 0, 1<<20, 4), pad)},
		{"lying size", "run past the end", header(3, 1, 0, tensorInfo("t", 0, 0, 64, 4), pad)},
		{"overlap", `overlap`, header(3, 2, 0, tensorInfo("a", 0, 0, 16), tensorInfo("b", 0, 32, 16), pad)},
		{"duplicate tensor", `"a" appears twice`, header(3, 2, 0, tensorInfo("a", 0, 0, 4), tensorInfo("a", 0, 32, 4), pad)},
		{"bad utf8 tensor name", "tensor 0: name: string is not valid UTF-8", header(3, 1, 0, tensorInfo("\xff", 0, 0, 4), pad)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.data)
			if err == nil {
				t.Fatal("parsed")
			}
			if !strings.HasPrefix(err.Error(), "gguf: ") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to contain %q", err, c.want)
			}
		})
	}
}

// Every truncation of a valid file is refused (never a panic).
func TestTruncations(t *testing.T) {
	good := sample(t)
	for n := 0; n < len(good); n++ {
		if _, err := Parse(good[:n]); err == nil {
			t.Fatalf("truncated to %d of %d bytes: parsed", n, len(good))
		}
	}
	if _, err := Parse(good); err != nil {
		t.Fatal(err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.gguf")); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("missing file: %v", err)
	}
	p := filepath.Join(dir, "bad.gguf")
	os.WriteFile(p, []byte("GGUF\x03\x00\x00\x00 and then nothing useful"), 0o644)
	if _, err := Open(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("bad file: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

// FuzzParse: no input panics, and whatever parses has tensors inside the
// data and strings that are valid UTF-8.
func FuzzParse(f *testing.F) {
	f.Add(sample(f))
	f.Add(header(3, 1, 1, str("k"), u32(uint32(TypeArray)), u32(uint32(TypeString)), u64(1), str("x"), tensorInfo("t", 2, 0, 32), make([]byte, 64)))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Parse(data)
		if err != nil {
			return
		}
		for _, tn := range g.Tensors {
			if uint64(len(tn.Data)) != tn.NumElements()/uint64(tn.Type.BlockElems())*uint64(tn.Type.BlockBytes()) {
				t.Fatalf("tensor %s: %d bytes", tn.Name, len(tn.Data))
			}
		}
	})
}
