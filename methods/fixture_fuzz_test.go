package methods_test

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/methods"
)

// FuzzLoadFixture: reading any bytes as the parameters or the batch file
// of `pfedmma step`/`round` never panics, and what is accepted is safe to
// compute on: every float tensor finite, no empty examples, client
// indices 0..n-1 without a gap, every numeric hyper-parameter finite.
func FuzzLoadFixture(f *testing.F) {
	for _, p := range []string{"../testdata/mma-l2/step.safetensors", "../testdata/mma-l2/adapters_init.safetensors", "../testdata/mma-l2/round.safetensors"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "lr=0.01")
		f.Add(b[:len(b)/3], "lr=nan")
	}
	f.Add([]byte("\x10\x00\x00\x00\x00\x00\x00\x00{}              "), "unknown_key=3")
	f.Add([]byte{}, "adapter_scale=inf")
	dir := f.TempDir()
	params := "../testdata/mma-l2/adapters_init.safetensors"
	f.Fuzz(func(t *testing.T, b []byte, set string) {
		p := filepath.Join(dir, "batch.safetensors")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, files := range [][2]string{{params, p}, {p, params}} {
			fx, err := methods.LoadFixture(nil, files[0], []string{files[1]}, []string{set})
			if err != nil {
				continue
			}
			seen := map[int]bool{}
			for name, v := range fx.Batch {
				for _, x := range v.Data {
					if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
						t.Fatalf("accepted non-finite %s", name)
					}
				}
				if (name == "images" || name == "labels") && len(v.Data) == 0 {
					t.Fatalf("accepted empty %s", name)
				}
				if i, ok := clientIndex(name); ok {
					seen[i] = true
				}
			}
			for name := range fx.Ints {
				if i, ok := clientIndex(name); ok {
					seen[i] = true
				}
			}
			for i := range len(seen) {
				if !seen[i] {
					t.Fatalf("accepted clients %v with a gap at %d", seen, i)
				}
			}
			for k, v := range fx.Meta {
				if s := strings.ToLower(strings.TrimSpace(v)); s == "nan" || strings.HasSuffix(s, "inf") || strings.HasSuffix(s, "infinity") {
					t.Fatalf("accepted %s=%s", k, v)
				}
			}
		}
	})
}

var clientName = regexp.MustCompile(`^client(0|[1-9][0-9]{0,8})\.`)

// clientIndex returns i of a tensor named client<i>.<rest>.
func clientIndex(name string) (int, bool) {
	m := clientName.FindStringSubmatch(name)
	if m == nil {
		return 0, false
	}
	i, err := strconv.Atoi(m[1])
	return i, err == nil
}
