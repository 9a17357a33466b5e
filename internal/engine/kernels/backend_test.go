package kernels

import (
	"math/rand/v2"
	"os"
	"testing"
)

func TestOpenBLAS(t *testing.T) {
	ob, err := LoadOpenBLAS()
	if err != nil {
		t.Skipf("OpenBLAS not available (apt-get install libopenblas0-pthread): %v", err)
	}
	t.Logf("%s", Describe(ob))
	testBackend(t, ob)
	// every case straight through cblas_sgemm, bypassing the Go routing
	r := rand.New(rand.NewPCG(11, 12))
	for _, g := range gemmCases(true) {
		if g.m > 0 && g.n > 0 && g.k > 0 {
			checkGemm(t, openBLASDirect{ob}, g, r)
		}
	}
}

// openBLASDirect sends every product to cblas_sgemm.
type openBLASDirect struct{ o *OpenBLAS }

func (openBLASDirect) Name() string { return "openblas-direct" }
func (d openBLASDirect) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	d.o.cblas(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func TestAutoAndEnv(t *testing.T) {
	ob, obErr := LoadOpenBLAS()
	cases := map[string]string{"go": "go", "naive": "naive", "GO": "go", "bogus": "", "": "", "auto": ""}
	auto := "go"
	if obErr == nil && (!haveAVX2 || ob.vectorCore()) {
		auto = "openblas" // chosen only when its kernels are vector ones
	}
	for env, want := range cases {
		t.Setenv(EnvKernels, env)
		if want == "" {
			want = auto
		}
		if got := Auto().Name(); got != want {
			t.Errorf("%s=%q: Auto() = %s, want %s", EnvKernels, env, got, want)
		}
	}
	forced := "go"
	if obErr == nil {
		forced = "openblas" // forced, whatever its kernels
	}
	t.Setenv(EnvKernels, "openblas")
	if got := Auto().Name(); got != forced {
		t.Errorf("%s=openblas: Auto() = %s, want %s", EnvKernels, got, forced)
	}
}

func TestDefault(t *testing.T) {
	prev := Default()
	if prev == nil {
		t.Fatal("Default() is nil")
	}
	t.Logf("default backend: %s", Describe(prev))
	if os.Getenv(EnvKernels) == "" && prev.Name() == "naive" {
		t.Fatal("Default() is naive without " + EnvKernels)
	}
	SetDefault(Naive{})
	if Default().Name() != "naive" {
		t.Fatal("SetDefault did not take")
	}
	SetDefault(prev)
}

func TestDescribe(t *testing.T) {
	if d := Describe(Go{}); len(d) < 4 {
		t.Fatalf("Describe(Go{}) = %q", d)
	}
	if d := Describe(Naive{}); d != "naive" {
		t.Fatalf("Describe(Naive{}) = %q", d)
	}
}

// OpenBLAS counts as vector kernels only for AVX2-or-better core names.
func TestOpenBLASVectorCore(t *testing.T) {
	for core, want := range map[string]bool{"Haswell": true, "SkylakeX": true, "Zen": true, "Prescott": false, "Core2": false, "Sandybridge": false, "": false} {
		if got := (&OpenBLAS{core: core}).vectorCore(); got != want {
			t.Errorf("core %q: vectorCore %v, want %v", core, got, want)
		}
	}
}
