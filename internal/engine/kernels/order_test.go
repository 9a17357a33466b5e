package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// prefetchTests is the distances the bit-identity tests run: none, one
// line, the calibration's candidates and far past any matrix's end.
var prefetchTests = append([]int{0, 64}, append(prefetchCands, 1<<20)...)

// restartCalibration puts tu back to before its calibration, running the
// default.
func restartCalibration(tu *decodeTuner) {
	tu.mu.Lock()
	defer tu.mu.Unlock()
	tu.set(tu.cands[0])
	tu.rounds = map[int]*calibRound{}
	tu.ratios = make([][]float64, len(tu.cands))
	tu.decided.Store(false)
}

// fixDecode fixes the decode settings for a test and returns what puts
// the previous ones back.
func fixDecode() func() {
	rows, pf := SetRowOrder(true), SetPrefetch(defaultPrefetch)
	return func() { SetRowOrder(rows); SetPrefetch(pf) }
}

// TestOrderCalibrates checks the start-up calibration through the decode
// products of each family: calls that stream enough weight bytes run the
// candidates in turn, each result bit-identical to the default's, and
// after calibRounds rounds of a timed call of each the setting is
// decided, is one of the candidates, and stays.
func TestOrderCalibrates(t *testing.T) {
	if !haveF16C {
		t.Skip("no AVX2")
	}
	defer fixDecode()()
	r := rand.New(rand.NewPCG(7, 8))
	// 256 rows of 256 float32 (256 KiB), of 1024 Q8_0 values (272 KiB),
	// of 2048 Q4_1 values in the four-row layout (320 KiB): all timed
	const n = 256
	a := randSlice(r, 2048)
	wf := &wrows{ld: 256, f: randSlice(r, n*256)}
	w8, _ := randQuant(r, Q8_0, n, 1024)
	w4, _ := randQuant(r, Q4_1x4, n, 2048)
	for _, f := range []struct {
		tuner *decodeTuner
		run   func(c []float32)
	}{
		{halfTuner, func(c []float32) { streamNT(1, n, 256, a, 256, wf, 0, c, n, false) }},
		{quantTuner, func(c []float32) { QuantGemmNT(Q8_0, 1, n, 1024, a, 1024, w8, 0, c, n) }},
		{repackTuner, func(c []float32) { QuantGemmNT(Q4_1x4, 1, n, 2048, a, 2048, w4, 0, c, n) }},
	} {
		tu := f.tuner
		want, got := make([]float32, n), make([]float32, n)
		SetRowOrder(false) // the lockstep kernels, or the four-row kernel at the default distance
		f.run(want)
		restartCalibration(tu)
		calls := len(tu.cands) * calibRounds
		for c := range calls {
			if tu.decided.Load() {
				t.Fatalf("%s: decided after %d calls, want %d", tu.name, c, calls)
			}
			f.run(got)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s call %d: [%d] = %g, want %g", tu.name, c, i, got[i], want[i])
				}
			}
		}
		for i, r := range tu.ratios {
			if len(r) != calibRounds {
				t.Fatalf("%s: candidate %d has %d rounds, want %d", tu.name, i, len(r), calibRounds)
			}
		}
		set := tu.setting()
		if !tu.decided.Load() || !containsSetting(tu.cands, set) {
			t.Fatalf("%s: after %d calls decided %v, setting %+v", tu.name, calls, tu.decided.Load(), set)
		}
		f.run(got)
		if tu.setting() != set {
			t.Fatalf("%s: setting changed after calibration", tu.name)
		}
	}
}

func containsSetting(cands []decodeSetting, s decodeSetting) bool {
	for _, c := range cands {
		if c == s {
			return true
		}
	}
	return false
}

// TestTunerPicksFastest drives a tuner's calibration with injected call
// times (record), on two weight sizes of different speeds: it keeps the
// candidate that is faster, whichever it is, through calls that another
// process interrupted (a tenth of each candidate's, ten times as long)
// and a load that comes and goes (calls up to twice as long), keeps the
// default when no candidate beats it by calibMargin, and decides after
// calibRounds rounds (plus a round of the other size begun).
func TestTunerPicksFastest(t *testing.T) {
	type tcase struct {
		name string
		secs func(cand int) float64 // of a call of 1 MiB
		want int
	}
	cases := []tcase{
		{"all alike", func(int) float64 { return 1e-3 }, 0},
		{"others within the margin", func(c int) float64 { return 1e-3 / (1 + 0.3*calibMargin*float64(min(c, 1))) }, 0},
		{"default slower", func(c int) float64 { return 1e-3 * (1 + 0.1*math.Abs(float64(c-2))) }, 2},
	}
	n := len(newDecodeTuner("", true, true, defaultPrefetch.Quant).cands)
	for f := range n {
		cases = append(cases, tcase{fmt.Sprintf("candidate %d faster", f), func(c int) float64 {
			if c == f {
				return 0.93e-3
			}
			return 1e-3
		}, f})
	}
	for _, c := range cases {
		tu := newDecodeTuner("test", true, true, defaultPrefetch.Quant)
		r := rand.New(rand.NewPCG(3, 4))
		calls := 0
		for !tu.decided.Load() {
			if calls > n*(calibRounds+1) {
				t.Fatalf("%s: undecided after %d calls", c.name, calls)
			}
			bytes := []int{1 << 20, calibMinBytes}[r.IntN(2)]
			set, cand := tu.pick(1, bytes)
			if cand < 0 || set != tu.cands[cand] {
				t.Fatalf("%s: call %d picked %+v, candidate %d", c.name, calls, set, cand)
			}
			secs := c.secs(cand) * float64(bytes) / (1 << 20)
			if bytes == calibMinBytes {
				secs *= 1.3 // small matrices stream slower
			}
			secs *= 1 + float64(calls%97)/97 // the load
			if r.IntN(10) == 0 {
				secs *= 10 // interrupted
			}
			tu.record(cand, bytes, time.Duration(secs*1e9))
			calls++
		}
		if got := tu.setting(); got != tu.cands[c.want] {
			t.Errorf("%s: kept %s, want %s", c.name, tu.describe(got), tu.describe(tu.cands[c.want]))
		}
		if set, cand := tu.pick(1, 1<<20); cand >= 0 || set != tu.setting() {
			t.Errorf("%s: after deciding picked %+v, candidate %d", c.name, set, cand)
		}
	}
}

// TestSetPrefetch checks the fixed-setting API: SetPrefetch returns the
// previous distances, fixes the new ones for every family and ends
// calibration (calls are no longer timed); SetRowOrder keeps them; a
// negative distance panics.
func TestSetPrefetch(t *testing.T) {
	defer fixDecode()()
	for _, tu := range []*decodeTuner{halfTuner, quantTuner, repackTuner} {
		restartCalibration(tu)
	}
	p := Prefetch{Half: 2 << 10, Quant: 16 << 10, Repacked: 3 << 10}
	if old := SetPrefetch(p); old != defaultPrefetch {
		t.Fatalf("SetPrefetch returned %+v, want the defaults %+v", old, defaultPrefetch)
	}
	SetRowOrder(true)
	if got := Prefetching(); got != p {
		t.Fatalf("Prefetching = %+v, want %+v", got, p)
	}
	for tu, pf := range map[*decodeTuner]int{halfTuner: p.Half, quantTuner: p.Quant, repackTuner: p.Repacked} {
		if set, cand := tu.pick(1, 1<<20); cand >= 0 || set != (decodeSetting{rows: true, pf: pf}) {
			t.Errorf("%s: picked %+v, candidate %d, want fixed row order at %d", tu.name, set, cand, pf)
		}
	}
	if old := SetPrefetch(defaultPrefetch); old != p {
		t.Errorf("SetPrefetch returned %+v, want %+v", old, p)
	}
	defer func() {
		if recover() == nil {
			t.Error("SetPrefetch with a negative distance did not panic")
		}
	}()
	SetPrefetch(Prefetch{Half: -1})
}

// TestSetDecodeSetting: every candidate, named as the calibration logs
// it, is the setting SetDecodeSetting fixes; other names are errors.
func TestSetDecodeSetting(t *testing.T) {
	defer fixDecode()()
	for _, tu := range []*decodeTuner{halfTuner, quantTuner, repackTuner} {
		for _, c := range tu.cands {
			restartCalibration(tu)
			if err := SetDecodeSetting(tu.name, tu.describe(c)); err != nil {
				t.Fatal(err)
			}
			if set, cand := tu.pick(1, 1<<20); cand >= 0 || set != c {
				t.Errorf("%s %q: picked %+v, candidate %d, want fixed %+v", tu.name, tu.describe(c), set, cand, c)
			}
		}
	}
	if err := SetDecodeSetting("float32/16-bit", "row order, prefetch 3 KiB"); err == nil {
		t.Error("an unknown setting was accepted")
	}
	if err := SetDecodeSetting("float64", "lockstep"); err == nil {
		t.Error("an unknown family was accepted")
	}
}

// TestPrefetchBitIdentical checks that the one-stream decode kernels
// return, at every prefetch distance, exactly what their lockstep twins
// return (the four-row kernels: what they return at the default
// distance): float32, F16 and BF16 rows over several lengths and strides,
// and every quantized format with one block, odd and even numbers of
// blocks (the kernels take two or four blocks per step and the rest at
// the end). Without AVX-512: the AVX2 float32/16-bit kernels.
func TestPrefetchBitIdentical(t *testing.T) {
	if !haveF16C {
		t.Skip("no AVX2")
	}
	r := rand.New(rand.NewPCG(9, 10))
	// Each instruction set's one-row kernels: float32, F16, BF16 rows.
	type oneRow struct {
		name string
		ks   []int
		lock func(kz int, x, f *float32, h, b *uint16, ld int, out *[3][4]float32)
		row  func(kz int, x, f *float32, h, b *uint16, ld int, out *[3][4]float32, pf int)
	}
	sets := []oneRow{
		{"AVX2", []int{8, 24, 576, 1536},
			func(kz int, x, f *float32, h, b *uint16, ld int, o *[3][4]float32) {
				dot4(kz, x, f, ld, &o[0])
				hdot4F16Y(kz, x, h, ld, &o[1])
				hdot4BF16Y(kz, x, b, ld, &o[2])
			},
			func(kz int, x, f *float32, h, b *uint16, ld int, o *[3][4]float32, pf int) {
				dot4R(kz, x, f, ld, &o[0], pf)
				hdot4F16R(kz, x, h, ld, &o[1], pf)
				hdot4BF16R(kz, x, b, ld, &o[2], pf)
			}},
	}
	if haveAVX512 {
		sets = append(sets, oneRow{"AVX-512", []int{32, 96, 576, 1536},
			func(kz int, x, f *float32, h, b *uint16, ld int, o *[3][4]float32) {
				dot1F32Z(kz, x, f, ld, &o[0])
				dot1F16Z(kz, x, h, ld, &o[1])
				dot1BF16Z(kz, x, b, ld, &o[2])
			},
			func(kz int, x, f *float32, h, b *uint16, ld int, o *[3][4]float32, pf int) {
				dot1F32R(kz, x, f, ld, &o[0], pf)
				dot1F16R(kz, x, h, ld, &o[1], pf)
				dot1BF16R(kz, x, b, ld, &o[2], pf)
			}})
	}
	for _, set := range sets {
		for _, kz := range set.ks {
			for _, pad := range []int{0, 5} {
				ld := kz + pad
				x := randSlice(r, kz)
				f := randSlice(r, 4*ld)
				h, _ := randHalf(r, F16, 4*ld)
				b, _ := randHalf(r, BF16, 4*ld)
				var want, got [3][4]float32
				set.lock(kz, &x[0], &f[0], &h[0], &b[0], ld, &want)
				for _, pf := range prefetchTests {
					set.row(kz, &x[0], &f[0], &h[0], &b[0], ld, &got, pf)
					for i := range want {
						if !sameBits(want[i][:], got[i][:]) || want[i][0] == 0 {
							t.Fatalf("%s %s k=%d ld=%d prefetch %d: row order %v, lockstep %v",
								set.name, []string{"F32", "F16", "BF16"}[i], kz, ld, pf, got[i], want[i])
						}
					}
				}
			}
		}
	}
	if !haveAVX512 {
		t.Skip("no AVX-512: the quantized rows' row-order kernels")
	}
	for _, qt := range append(allQuant, allRepacked...) {
		kern := quantKernel(qt)
		if kern == nil { // Q8_0x4 without VNNI
			continue
		}
		for _, k := range []int{32, 96, 512, 768, 800} {
			if k%qt.BlockElems() != 0 {
				continue
			}
			const rows = 12
			x := randSlice(r, k)
			w, _ := randQuant(r, qt, rows, k)
			nb := k / qt.BlockElems()
			var prep []float32
			if kern.prep != nil {
				prep = make([]float32, kern.prepSize(nb))
				kern.prep(prep, x)
			}
			want, got := make([]float32, rows), make([]float32, rows)
			kern.dots(nb, x, prep, w, qt.RowBytes(k), want, defaultPrefetch.Repacked)
			for _, pf := range prefetchTests {
				kern.rowDots(nb, x, prep, w, qt.RowBytes(k), got, pf)
				if !sameBits(want, got) || want[0] == 0 {
					t.Fatalf("%v k=%d prefetch %d: %v, want %v", qt, k, pf, got, want)
				}
			}
		}
	}
}

// sameBits reports whether a and b hold the same float32 bit patterns.
func sameBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}
