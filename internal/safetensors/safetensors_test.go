package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	a := []float32{1, -2.5, 3.25, 0, float32(math.Inf(1)), 1e-3}
	b := []float32{0.1, 0.2, 0.3, 65504, -1e-5, 7}
	c := []float32{1.5, -3, 1e30, 1e-30}
	err := WriteFile(path, []WriteTensor{
		{Name: "b.f16", Shape: []int{2, 3}, Data: b, DType: "F16"},
		{Name: "a.f32", Shape: []int{3, 2}, Data: a},
		{Name: "c.bf16", Shape: []int{4}, Data: c, DType: "BF16"},
		{Name: "empty", Shape: []int{0}, Data: nil},
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata["format"] != "pt" {
		t.Errorf("metadata %v", f.Metadata)
	}
	if got := f.Names(); len(got) != 4 || got[0] != "a.f32" {
		t.Errorf("names %v", got)
	}
	ta := f.Tensor("a.f32")
	va, err := ta.Float32()
	if err != nil || ta.DType != "F32" || ta.Shape[0] != 3 || ta.Shape[1] != 2 {
		t.Fatalf("a: %v %v %v", err, ta.DType, ta.Shape)
	}
	for i := range a {
		if va[i] != a[i] {
			t.Fatalf("a[%d] = %v, want %v", i, va[i], a[i])
		}
	}
	// F32 data is 8-byte aligned in the file, so the view is in place.
	if &va[0] != (*float32)(unsafePointer(ta.Data)) {
		t.Error("F32 tensor was copied, want a view of the mapping")
	}
	vb, _ := f.Tensor("b.f16").Float32()
	for i := range b {
		want := float32(float64(b[i]))
		if math.Abs(float64(vb[i]-want)) > math.Abs(float64(want))*1e-3+1e-7 {
			t.Fatalf("f16 b[%d] = %v, want ~%v", i, vb[i], want)
		}
	}
	vc, _ := f.Tensor("c.bf16").Float32()
	for i := range c {
		if math.Abs(float64(vc[i]-c[i])) > math.Abs(float64(c[i]))*4e-3 {
			t.Fatalf("bf16 c[%d] = %v, want ~%v", i, vc[i], c[i])
		}
	}
	if ve, err := f.Tensor("empty").Float32(); err != nil || len(ve) != 0 {
		t.Fatalf("empty: %v %v", ve, err)
	}
	// Header: data starts 8-byte aligned; offsets as the spec says.
	raw, _ := os.ReadFile(path)
	hlen := binary.LittleEndian.Uint64(raw)
	if (8+hlen)%8 != 0 {
		t.Errorf("data offset %d not 8-aligned", 8+hlen)
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+hlen], &hdr); err != nil {
		t.Fatal(err)
	}
	if string(hdr["c.bf16"]) != `{"dtype":"BF16","shape":[4],"data_offsets":[36,44]}` {
		t.Errorf("header entry %s", hdr["c.bf16"])
	}
}

func TestF16Exhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		exp := (h >> 10) & 0x1f
		mant := h & 0x3ff
		var want float64
		switch {
		case exp == 0x1f && mant != 0:
			if !math.IsNaN(float64(f)) {
				t.Fatalf("%#04x: %v, want NaN", h, f)
			}
			continue
		case exp == 0x1f:
			want = math.Inf(1)
		case exp == 0:
			want = math.Ldexp(float64(mant), -24)
		default:
			want = math.Ldexp(float64(mant|0x400), exp-25)
		}
		if h&0x8000 != 0 {
			want = -want
		}
		if float64(f) != want || math.Signbit(float64(f)) != (h&0x8000 != 0) {
			t.Fatalf("F16ToF32(%#04x) = %v, want %v", h, f, want)
		}
		// Every half value survives float32 -> half exactly.
		if back := F32ToF16(f); back != uint16(h) {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)) = %#04x", h, back)
		}
	}
	// Rounding: halfway cases go to even; overflow to Inf; tiny to zero.
	if F32ToF16(1+1.0/2048) != 0x3c00 || F32ToF16(1+3.0/2048) != 0x3c02 {
		t.Error("round to nearest even")
	}
	if F32ToF16(70000) != 0x7c00 || F32ToF16(1e-9) != 0 {
		t.Error("overflow/underflow")
	}
	if F32ToBF16(1+1.0/256) != 0x3f80 || F32ToBF16(1+3.0/256) != 0x3f82 || F32ToBF16(-2) != 0xc000 {
		t.Error("bf16 rounding")
	}
}

func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		"short":    {1, 2},
		"hugehdr":  {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'},
		"badjson":  append([]byte{3, 0, 0, 0, 0, 0, 0, 0}, "{x}"...),
		"badrange": append([]byte{60, 0, 0, 0, 0, 0, 0, 0}, `{"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}    `...),
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, data, 0o644)
		if f, err := Open(p); err == nil {
			f.Close()
			t.Errorf("%s: want error", name)
		}
	}
}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

// TestUint16: the 16-bit values of F16/BF16 tensors, as a view of the
// mapping when aligned and as a copy when not; other dtypes are refused.
func TestUint16(t *testing.T) {
	vals := []float32{1, -2.5, 0.125, 3e-5, 65504}
	path := filepath.Join(t.TempDir(), "h.safetensors")
	if err := WriteFile(path, []WriteTensor{
		{Name: "a", Shape: []int{5}, Data: vals, DType: "BF16"},
		{Name: "b", Shape: []int{5}, Data: vals, DType: "F16"},
		{Name: "c", Shape: []int{5}, Data: vals},
	}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, name := range []string{"a", "b"} {
		tn := f.Tensor(name)
		h, err := tn.Uint16()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			want := F32ToBF16(v)
			if tn.DType == "F16" {
				want = F32ToF16(v)
			}
			if h[i] != want {
				t.Fatalf("%s[%d] = %#x, want %#x", name, i, h[i], want)
			}
		}
		// misaligned bytes: a copy with the same values
		odd := &Tensor{Name: name, DType: tn.DType, Shape: tn.Shape, Data: append(make([]byte, 1, len(tn.Data)+1), tn.Data...)[1:]}
		h2, err := odd.Uint16()
		if err != nil || fmt.Sprint(h2) != fmt.Sprint(h) {
			t.Fatalf("misaligned %s: %v %v, want %v", name, h2, err, h)
		}
	}
	if _, err := f.Tensor("c").Uint16(); err == nil {
		t.Fatal("F32 tensor: want an error")
	}
	short := *f.Tensor("a")
	short.Data = short.Data[:3]
	if _, err := short.Uint16(); err == nil {
		t.Fatal("short data: want an error")
	}
}
