package actcache

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// testRecord returns a deterministic record for seed with ordinary values
// and, at fixed positions, values that only a bit-exact store keeps:
// -0, ±Inf, a NaN with payload, a subnormal and the largest float32.
func testRecord(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	rec := make([]float32, n)
	for i := range rec {
		rec[i] = float32(r.NormFloat64())
	}
	specials := []float32{
		float32(math.Copysign(0, -1)),
		float32(math.Inf(1)),
		float32(math.Inf(-1)),
		math.Float32frombits(0x7fc01234),
		math.Float32frombits(0x00000003),
		math.MaxFloat32,
	}
	for i, v := range specials {
		if i < n {
			rec[i] = v
		}
	}
	return rec
}

// sameBits reports the first index where a and b differ bitwise, or -1.
func sameBits(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

func TestRoundTrip(t *testing.T) {
	const recLen = 1000 // 4000 bytes: 1 record per page-rounded 4 KiB segment below
	recBytes := int64(recLen * 4)
	tests := []struct {
		name    string
		budget  int64
		chunk   int64
		n       int
		wantRAM int // records expected in RAM
	}{
		{"ram-only", 100 * recBytes, 0, 10, 10},
		{"spill-only", 0, 0, 10, 0},
		{"spill-only-many-segments", 0, 3 * recBytes, 10, 0},
		{"mixed", 4*recBytes + 1, 2 * recBytes, 10, 4},
		{"mixed-exact-budget", 3 * recBytes, 0, 7, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(Options{RecordLen: recLen, MemoryBudget: tt.budget, SpillDir: t.TempDir(), SpillChunk: tt.chunk})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := range tt.n {
				idx, err := c.Put(Key("img", i), testRecord(recLen, uint64(i)))
				if err != nil {
					t.Fatalf("Put %d: %v", i, err)
				}
				if idx != i {
					t.Fatalf("Put %d returned index %d", i, idx)
				}
			}
			if c.Len() != tt.n {
				t.Fatalf("Len = %d, want %d", c.Len(), tt.n)
			}
			ram, disk := c.Bytes()
			if ram != int64(tt.wantRAM)*recBytes {
				t.Errorf("RAM bytes = %d, want %d", ram, int64(tt.wantRAM)*recBytes)
			}
			spilled := int64(tt.n-tt.wantRAM) * recBytes
			if disk < spilled || (spilled == 0) != (disk == 0) {
				t.Errorf("disk bytes = %d, want >= %d (and 0 only when nothing spilled)", disk, spilled)
			}
			got := make([]float32, recLen)
			for i := range tt.n {
				idx, ok := c.Lookup(Key("img", i))
				if !ok || idx != i {
					t.Fatalf("Lookup(%q) = %d, %v", Key("img", i), idx, ok)
				}
				if k, err := c.KeyOf(i); err != nil || k != Key("img", i) {
					t.Fatalf("KeyOf(%d) = %q, %v", i, k, err)
				}
				if err := c.Get(i, got); err != nil {
					t.Fatal(err)
				}
				if j := sameBits(got, testRecord(recLen, uint64(i))); j >= 0 {
					t.Fatalf("record %d differs at %d: %v", i, j, got[j])
				}
			}
			// A batch in shuffled order with a repeat, as a data loader asks.
			idxs := []int{tt.n - 1, 0, tt.n / 2, 0, 1}
			batch := make([]float32, len(idxs)*recLen)
			if err := c.GetBatch(idxs, batch); err != nil {
				t.Fatal(err)
			}
			for b, idx := range idxs {
				if j := sameBits(batch[b*recLen:(b+1)*recLen], testRecord(recLen, uint64(idx))); j >= 0 {
					t.Fatalf("batch row %d (record %d) differs at %d", b, idx, j)
				}
			}
			// Overwriting keeps the index and replaces the content.
			last := tt.n - 1
			idx, err := c.Put(Key("img", last), testRecord(recLen, 999))
			if err != nil || idx != last {
				t.Fatalf("overwrite Put = %d, %v; want %d", idx, err, last)
			}
			if err := c.Get(last, got); err != nil {
				t.Fatal(err)
			}
			if j := sameBits(got, testRecord(recLen, 999)); j >= 0 || c.Len() != tt.n {
				t.Fatalf("after overwrite: differs at %d, Len %d", j, c.Len())
			}
		})
	}
}

func TestGetBatchParallel(t *testing.T) {
	// 8 records of 256 Ki floats = 8 MiB: above parallelBytes, so GetBatch
	// splits the copy between workers; half the records are spilled.
	const recLen = 256 << 10
	c, err := New(Options{RecordLen: recLen, MemoryBudget: 4 * recLen * 4, SpillDir: t.TempDir(), Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 8 {
		if _, err := c.Put(Key("p", i), testRecord(recLen, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	idxs := []int{7, 6, 5, 4, 3, 2, 1, 0}
	dst := make([]float32, len(idxs)*recLen)
	if err := c.GetBatch(idxs, dst); err != nil {
		t.Fatal(err)
	}
	for b, idx := range idxs {
		if j := sameBits(dst[b*recLen:(b+1)*recLen], testRecord(recLen, uint64(idx))); j >= 0 {
			t.Fatalf("row %d (record %d) differs at %d", b, idx, j)
		}
	}
}

func TestBFloat16(t *testing.T) {
	const recLen = 512
	for _, budget := range []int64{0, 1 << 20} {
		t.Run(fmt.Sprintf("budget=%d", budget), func(t *testing.T) {
			c, err := New(Options{RecordLen: recLen, MemoryBudget: budget, SpillDir: t.TempDir(), DType: BFloat16})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			want := testRecord(recLen, 1)
			want[5] = 1e30 // replace MaxFloat32, which rounds to +Inf in bf16
			if _, err := c.Put("a", want); err != nil {
				t.Fatal(err)
			}
			ram, _ := c.Bytes()
			if budget > 0 && ram != recLen*2 {
				t.Errorf("RAM bytes = %d, want %d (2 per value)", ram, recLen*2)
			}
			got := make([]float32, recLen)
			if err := c.Get(0, got); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				w, g := float64(want[i]), float64(got[i])
				switch {
				case math.IsNaN(w):
					if !math.IsNaN(g) {
						t.Errorf("value %d: NaN became %v", i, g)
					}
				case math.IsInf(w, 0) || w == 0:
					if g != w || math.Signbit(g) != math.Signbit(w) {
						t.Errorf("value %d: %v became %v", i, w, g)
					}
				case math.Abs(w) >= 0x1p-126: // normal float32: relative error <= 2^-8
					if math.Abs(g-w) > math.Abs(w)*0x1p-8 {
						t.Errorf("value %d: %v became %v, relative error %g > 2^-8", i, w, g, math.Abs(g-w)/math.Abs(w))
					}
				}
			}
		})
	}
}

func TestToBF16(t *testing.T) {
	tests := []struct {
		in   float32
		want float32
	}{
		{1, 1},
		{-2.5, -2.5},
		{1 + 0x1p-8, 1},                         // tie, rounds to even (1)
		{1 + 0x1p-7 + 0x1p-8, 1 + 0x1p-6},       // tie, rounds to even (mantissa 2)
		{1 + 0x1p-8 + 0x1p-12, 1 + 0x1p-7},      // above the tie, rounds up
		{math.MaxFloat32, float32(math.Inf(1))}, // overflows
		{float32(math.Inf(-1)), float32(math.Inf(-1))},
	}
	for _, tt := range tests {
		if got := fromBF16(toBF16(tt.in)); got != tt.want {
			t.Errorf("bf16(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
	if got := fromBF16(toBF16(math.Float32frombits(0x7f800001))); !math.IsNaN(float64(got)) {
		t.Errorf("bf16(signalling NaN with low payload) = %v, want NaN", got)
	}
}

func TestSpillGeometry(t *testing.T) {
	tests := []struct {
		recBytes     int
		chunk, page  int64
		wantRecs     int
		wantSegBytes int64
	}{
		{605184, 64 << 20, 4096, 110, 66572288},
		{4000, 4000, 4096, 1, 4096},
		{4000, 100, 4096, 1, 4096}, // chunk below one record still holds one
		{4096, 8192, 4096, 2, 8192},
	}
	for _, tt := range tests {
		recs, seg := spillGeometry(tt.recBytes, tt.chunk, tt.page)
		if recs != tt.wantRecs || seg != tt.wantSegBytes {
			t.Errorf("spillGeometry(%d, %d, %d) = %d, %d; want %d, %d", tt.recBytes, tt.chunk, tt.page, recs, seg, tt.wantRecs, tt.wantSegBytes)
		}
		if seg%tt.page != 0 || int64(recs*tt.recBytes) > seg {
			t.Errorf("spillGeometry(%d, %d, %d): segment %d not page-aligned or too small", tt.recBytes, tt.chunk, tt.page, seg)
		}
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"zero record", Options{RecordLen: 0}, "record length"},
		{"negative budget", Options{RecordLen: 4, MemoryBudget: -1}, "cache.memory_mib"},
		{"bad dtype", Options{RecordLen: 4, DType: 7}, "cache.dtype"},
		{"negative chunk", Options{RecordLen: 4, SpillChunk: -1}, "spill chunk"},
		{"negative workers", Options{RecordLen: 4, Workers: -1}, "workers"},
		{"missing dir", Options{RecordLen: 4, SpillDir: filepath.Join(dir, "nope")}, "cache.spill_dir"},
		{"dir is a file", Options{RecordLen: 4, SpillDir: file}, "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.opts)
			if err == nil {
				c.Close()
				t.Fatalf("New(%+v) succeeded", tt.opts)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name %q", err, tt.want)
			}
		})
	}
}

func TestAccessErrors(t *testing.T) {
	c, err := New(Options{RecordLen: 4, MemoryBudget: 1 << 10, SpillDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put("a", []float32{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	_, putErr := c.Put("b", []float32{1, 2, 3})
	_, keyErr := c.KeyOf(1)
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"Put short", putErr, ErrRecordLen},
		{"Get negative", c.Get(-1, make([]float32, 4)), ErrIndex},
		{"Get past end", c.Get(1, make([]float32, 4)), ErrIndex},
		{"Get short dst", c.Get(0, make([]float32, 3)), ErrRecordLen},
		{"GetBatch bad index", c.GetBatch([]int{0, 5}, make([]float32, 8)), ErrIndex},
		{"GetBatch short dst", c.GetBatch([]int{0, 0}, make([]float32, 7)), ErrRecordLen},
		{"KeyOf past end", keyErr, ErrIndex},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: error %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	if c.Len() != 1 {
		t.Errorf("failed Put changed Len to %d", c.Len())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_, putErr = c.Put("c", []float32{1, 2, 3, 4})
	for name, err := range map[string]error{
		"Put":      putErr,
		"Get":      c.Get(0, make([]float32, 4)),
		"GetBatch": c.GetBatch([]int{0}, make([]float32, 4)),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: error %v, want ErrClosed", name, err)
		}
	}
}

func TestSpillDirGone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spill")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{RecordLen: 4, MemoryBudget: 16, SpillDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put("ram", []float32{1, 2, 3, 4}); err != nil {
		t.Fatalf("first record fits the budget: %v", err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	_, err = c.Put("spill", []float32{1, 2, 3, 4})
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Put with the spill dir gone: error %v, want one naming %s", err, dir)
	}
	if c.Len() != 1 {
		t.Errorf("failed Put changed Len to %d", c.Len())
	}
}

func TestConcurrentReaders(t *testing.T) {
	// Readers take batches while one writer keeps adding records; run with
	// -race. Records are big enough that batches take the parallel path.
	const recLen = 128 << 10
	c, err := New(Options{RecordLen: recLen, MemoryBudget: 6 * recLen * 4, SpillDir: t.TempDir(), SpillChunk: recLen * 4, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 8 {
		if _, err := c.Put(Key("r", i), testRecord(recLen, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 3 {
		wg.Go(func() {
			dst := make([]float32, 8*recLen)
			idxs := make([]int, 8)
			for it := range 4 {
				for b := range idxs {
					idxs[b] = (g + it + b) % 8
				}
				if err := c.GetBatch(idxs, dst); err != nil {
					errs <- err
					return
				}
				for b, idx := range idxs {
					// Check two values per row: a full compare under -race is slow.
					want := testRecord(recLen, uint64(idx))
					row := dst[b*recLen : (b+1)*recLen]
					if row[10] != want[10] || row[recLen-1] != want[recLen-1] {
						errs <- fmt.Errorf("reader %d: row %d is not record %d", g, b, idx)
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for i := 8; i < 12; i++ {
			if _, err := c.Put(Key("r", i), testRecord(recLen, uint64(i))); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if c.Len() != 12 {
		t.Errorf("Len = %d, want 12", c.Len())
	}
}

func BenchmarkGetBatch(b *testing.B) {
	const recLen, batch, n = 197 * 768, 32, 64
	for _, bc := range []struct {
		name    string
		budget  int64
		dtype   DType
		workers int
	}{
		{"ram", 1 << 40, Float32, 0},
		{"ram-1worker", 1 << 40, Float32, 1},
		{"spill", 0, Float32, 0},
		{"ram-bf16", 1 << 40, BFloat16, 0},
		{"ram-bf16-1worker", 1 << 40, BFloat16, 1},
		{"spill-bf16", 0, BFloat16, 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := New(Options{RecordLen: recLen, MemoryBudget: bc.budget, SpillDir: b.TempDir(), DType: bc.dtype, Workers: bc.workers})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			for i := range n {
				if _, err := c.Put(Key("img", i), testRecord(recLen, uint64(i))); err != nil {
					b.Fatal(err)
				}
			}
			idxs := make([]int, batch)
			dst := make([]float32, batch*recLen)
			r := rand.New(rand.NewPCG(1, 2))
			b.SetBytes(int64(batch * recLen * 4))
			b.ResetTimer()
			for b.Loop() {
				for i := range idxs {
					idxs[i] = r.IntN(n)
				}
				if err := c.GetBatch(idxs, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
