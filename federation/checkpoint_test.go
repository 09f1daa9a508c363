package federation

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/internal/tensortest"
	"github.com/pfedmma/pfedmma/tensor"
)

func sampleCheckpoint() *Checkpoint {
	return &Checkpoint{
		NextRound: 2, Strategy: "fedavg", Seed: 5, Fraction: 0.25, Sampler: []byte{1, 2, 3, 255},
		History: History{Rounds: []RoundReport{
			{Round: 0, Selected: []int{0, 1}, Fit: map[int]Metrics{0: {"loss": math.NaN()}, 1: {"loss": math.Inf(1)}},
				FitMean: Metrics{"loss": math.NaN()}, BytesUp: 8, BytesDown: 4, Seconds: 0.125},
			{Round: 1, Selected: []int{1}, Fit: map[int]Metrics{1: {"loss": 0.1 + 0.2}}, FitMean: Metrics{"loss": 0.1 + 0.2},
				Eval: map[int]Metrics{0: {"acc": 1.0 / 3}, 1: {"acc": math.Inf(-1)}}, EvalMean: Metrics{"acc": math.Inf(-1)}},
		}},
		Clients: []int{0, 1},
		StrategyState: tensor.Named{
			"global/shared.w": {Shape: []int{2}, Data: []float32{0.5, 0.25}},
			"pool/0/w":        {Shape: []int{2, 2}, Data: []float32{1, -0, float32(math.NaN()), 3.5}},
			"rng":             BytesTensor([]byte{7, 8}),
			"empty":           {Shape: []int{0}, Data: []float32{}},
		},
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.ckpt")
	want := sampleCheckpoint()
	if err := WriteCheckpoint(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.NextRound != 2 || got.Strategy != "fedavg" || got.Seed != 5 || got.Fraction != 0.25 || string(got.Sampler) != string(want.Sampler) {
		t.Errorf("header fields: %+v", got)
	}
	if !reflect.DeepEqual(got.Clients, want.Clients) {
		t.Errorf("clients %v, want %v", got.Clients, want.Clients)
	}
	if d := tensortest.BitsDiff(want.StrategyState, got.StrategyState); d != "" {
		t.Errorf("strategy differs at %s", d)
	}
	h := got.History.Rounds
	if len(h) != 2 || !math.IsNaN(h[0].Fit[0]["loss"]) || !math.IsInf(h[0].Fit[1]["loss"], 1) ||
		h[1].Fit[1]["loss"] != 0.1+0.2 || h[1].Eval[0]["acc"] != 1.0/3 || h[0].Eval != nil || h[0].Seconds != 0.125 {
		t.Errorf("history did not round-trip: %+v", h)
	}
	// Overwriting leaves no temporary files behind.
	if err := WriteCheckpoint(path, want); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after two writes, want 1", len(entries))
	}
}

func TestCheckpointCorrupt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.ckpt")
	if err := WriteCheckpoint(path, sampleCheckpoint()); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Tensors are stored in sorted name order after the 8-byte magic; the
	// first is strategy/empty (no bytes), then strategy/global/shared.w.
	tests := []struct {
		name   string
		mutate func([]byte) []byte
		token  string
	}{
		{"tensor byte", func(b []byte) []byte { b[9] ^= 1; return b }, `tensor "strategy/global/shared.w": checksum`},
		{"index byte", func(b []byte) []byte { b[len(b)-40] ^= 1; return b }, "index: checksum"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-10] }, "trailer"},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, "magic"},
		{"empty", func(b []byte) []byte { return nil }, "too short"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".ckpt")
			if err := os.WriteFile(p, tc.mutate(append([]byte(nil), good...)), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadCheckpoint(p)
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.token) {
				t.Errorf("error = %v, want one naming %s and containing %s", err, p, tc.token)
			}
		})
	}
	// The store reports the damaged file too.
	ckpt := filepath.Join(dir, "tensor_byte.ckpt")
	if _, err := (FileStore{Path: ckpt}).Load(); err == nil || !strings.Contains(err.Error(), ckpt) || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("load of damaged checkpoint: %v", err)
	}
	if _, err := (FileStore{Path: filepath.Join(dir, "none")}).Load(); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("load without checkpoint: %v", err)
	}
}

func FuzzReadCheckpoint(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "seed.ckpt")
	if err := WriteCheckpoint(path, sampleCheckpoint()); err != nil {
		f.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := readCheckpoint(bytes.NewReader(data), int64(len(data)))
		if err == nil && c.StrategyState == nil {
			t.Error("nil strategy state without error")
		}
	})
}

// evalInstall is a client whose evaluation installs the tensors it is sent.
type evalInstall struct {
	id int
	w  []float32
}

func (c *evalInstall) ID() int          { return c.id }
func (c *evalInstall) NumExamples() int { return 1 }
func (c *evalInstall) Fit(_ context.Context, ins FitIns) (FitRes, error) {
	for i := range c.w {
		c.w[i] += 1
	}
	return FitRes{Params: tensor.Named{"w": {Shape: []int{len(c.w)}, Data: append([]float32(nil), c.w...)}}}, nil
}
func (c *evalInstall) Evaluate(_ context.Context, ins EvaluateIns) (EvaluateRes, error) {
	if t := ins.Params["w"]; t != nil {
		copy(c.w, t.Data)
	}
	return EvaluateRes{Metrics: Metrics{"w0": float64(c.w[0])}}, nil
}
func (c *evalInstall) State() (tensor.Named, error) {
	return tensor.Named{"w": {Shape: []int{len(c.w)}, Data: append([]float32(nil), c.w...)}}, nil
}
func (c *evalInstall) LoadState(st tensor.Named) error { copy(c.w, st["w"].Data); return nil }

// TestSiteKeepsEvaluatedState: a site whose evaluation installs what it
// was sent saves that state, so that the same site restarted (a fresh
// client on its folder) holds — and keeps — what it evaluated.
func TestSiteKeepsEvaluatedState(t *testing.T) {
	dir := t.TempDir()
	s := NewSite(&evalInstall{w: make([]float32, 2)}, dir)
	ctx := context.Background()
	if _, err := s.Fit(ctx, FitIns{Round: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Evaluate(ctx, EvaluateIns{Round: 0, Params: tensor.Named{"w": {Shape: []int{2}, Data: []float32{7, 8}}}}); err != nil {
		t.Fatal(err)
	}
	fresh := &evalInstall{w: make([]float32, 2)}
	if err := NewSite(fresh, dir).Restore(); err != nil {
		t.Fatal(err)
	}
	if fresh.w[0] != 7 || fresh.w[1] != 8 {
		t.Fatalf("the restarted site holds %v, it evaluated [7 8]", fresh.w)
	}
	// the next round continues from the evaluated state
	next := &evalInstall{w: make([]float32, 2)}
	res, err := NewSite(next, dir).Fit(ctx, FitIns{Round: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Params["w"].Data[0] != 8 {
		t.Fatalf("round 1 trained from %v, want the evaluated [7 8]", res.Params["w"].Data)
	}
}

// craftTrailer is a file of the magic, body and a trailer naming the index
// at off+n (its CRC that of the n bytes at off, when they exist).
func craftTrailer(body []byte, off, n uint64) []byte {
	b := append([]byte(ckptMagic), body...)
	var tr [trailerSize]byte
	binary.LittleEndian.PutUint64(tr[0:], off)
	binary.LittleEndian.PutUint64(tr[8:], n)
	if off+n <= uint64(len(b)) && off <= off+n {
		binary.LittleEndian.PutUint32(tr[16:], crc32.Checksum(b[off:off+n], castagnoli))
	}
	copy(tr[20:], ckptEnd)
	return append(b, tr[:]...)
}

// TestCheckpointTrailerOutOfRange: a trailer whose index starts past the
// trailer (at the file's end, with a length that wraps around to fit) is
// refused with an error, not a panic (it made a slice of 2^64−24 bytes).
func TestCheckpointTrailerOutOfRange(t *testing.T) {
	const size = uint64(len(ckptMagic) + trailerSize)
	for _, off := range []uint64{size, size - 1, size - trailerSize + 1} {
		b := craftTrailer(nil, off, (size-trailerSize)-off)
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("index at %d: panic %v", off, p)
				}
			}()
			_, err := readCheckpoint(bytes.NewReader(b), int64(len(b)))
			if err == nil || !strings.Contains(err.Error(), "does not fit a file of 32 bytes") {
				t.Errorf("index at %d: %v, want a refusal of the trailer", off, err)
			}
		}()
	}
}
