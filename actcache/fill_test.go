package actcache

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"testing"
)

// keyRecord is the record a fake prefix computes for key.
func keyRecord(key string, n int) []float32 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return testRecord(n, h.Sum64())
}

// call is one recorded compute call.
type call struct {
	start int
	keys  []string
}

// fakePrefix returns a ComputeFunc writing keyRecord for every key and
// the list its calls are recorded in; it fails on the call numbered failAt
// (0-based) when failAt >= 0.
func fakePrefix(recLen, failAt int) (ComputeFunc, *[]call) {
	calls := new([]call)
	return func(ctx context.Context, start int, keys []string, out []float32) error {
		*calls = append(*calls, call{start, slices.Clone(keys)})
		if len(out) != len(keys)*recLen {
			return fmt.Errorf("out has %d values for %d keys", len(out), len(keys))
		}
		if len(*calls)-1 == failAt {
			return errors.New("prefix failed")
		}
		for i, k := range keys {
			copy(out[i*recLen:], keyRecord(k, recLen))
		}
		return nil
	}, calls
}

func TestFill(t *testing.T) {
	const recLen = 300
	tests := []struct {
		name      string
		present   []string // stored before Fill
		keys      []string
		batch     int
		wantCalls []call
	}{
		{
			name:  "all missing",
			keys:  []string{"a", "b", "c", "d", "e"},
			batch: 2,
			wantCalls: []call{
				{0, []string{"a", "b"}}, {2, []string{"c", "d"}}, {4, []string{"e"}},
			},
		},
		{
			name:    "skips present and repeated keys",
			present: []string{"b", "d"},
			keys:    []string{"a", "b", "c", "a", "d", "e", "f"},
			batch:   3,
			wantCalls: []call{
				{0, []string{"a", "c", "e"}}, {3, []string{"f"}},
			},
		},
		{
			name:    "nothing missing",
			present: []string{"a", "b"},
			keys:    []string{"b", "a"},
			batch:   4,
		},
		{
			name:      "batch larger than work",
			keys:      []string{Key("x", 0), Key("x", 1)},
			batch:     64,
			wantCalls: []call{{0, []string{Key("x", 0), Key("x", 1)}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Budget of two records: Fill's stores cross into the spill file.
			c, err := New(Options{RecordLen: recLen, MemoryBudget: 2 * recLen * 4, SpillDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, k := range tt.present {
				if _, err := c.Put(k, keyRecord(k, recLen)); err != nil {
					t.Fatal(err)
				}
			}
			compute, calls := fakePrefix(recLen, -1)
			var prog [][2]int
			err = c.Fill(context.Background(), tt.keys, tt.batch, compute, func(done, total int) {
				prog = append(prog, [2]int{done, total})
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(*calls, tt.wantCalls, func(a, b call) bool {
				return a.start == b.start && slices.Equal(a.keys, b.keys)
			}) {
				t.Fatalf("compute calls %v, want %v", *calls, tt.wantCalls)
			}
			total := 0
			for _, cl := range tt.wantCalls {
				total += len(cl.keys)
			}
			wantProg := [][2]int{{0, total}}
			for _, cl := range tt.wantCalls {
				wantProg = append(wantProg, [2]int{cl.start + len(cl.keys), total})
			}
			if !slices.Equal(prog, wantProg) {
				t.Errorf("progress %v, want %v", prog, wantProg)
			}
			got := make([]float32, recLen)
			for _, k := range tt.keys {
				idx, ok := c.Lookup(k)
				if !ok {
					t.Fatalf("key %q missing after Fill", k)
				}
				if err := c.Get(idx, got); err != nil {
					t.Fatal(err)
				}
				if j := sameBits(got, keyRecord(k, recLen)); j >= 0 {
					t.Fatalf("record of %q differs at %d", k, j)
				}
			}
			// A second Fill finds everything present.
			again, calls2 := fakePrefix(recLen, -1)
			if err := c.Fill(context.Background(), tt.keys, tt.batch, again, nil); err != nil || len(*calls2) != 0 {
				t.Errorf("second Fill: %v, %d compute calls", err, len(*calls2))
			}
		})
	}
}

func TestFillErrors(t *testing.T) {
	const recLen = 8
	keys := []string{"a", "b", "c", "d", "e"}
	t.Run("compute fails", func(t *testing.T) {
		c, err := New(Options{RecordLen: recLen, MemoryBudget: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		compute, _ := fakePrefix(recLen, 1)
		err = c.Fill(context.Background(), keys, 2, compute, nil)
		if err == nil || c.Len() != 2 {
			t.Fatalf("Fill = %v with Len %d; want an error and the first batch kept", err, c.Len())
		}
		// Filling again computes only what is still missing.
		compute, calls := fakePrefix(recLen, -1)
		if err := c.Fill(context.Background(), keys, 2, compute, nil); err != nil || c.Len() != 5 || (*calls)[0].keys[0] != "c" {
			t.Fatalf("resumed Fill = %v, Len %d, calls %v", err, c.Len(), *calls)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		c, err := New(Options{RecordLen: recLen, MemoryBudget: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithCancel(context.Background())
		compute, calls := fakePrefix(recLen, -1)
		err = c.Fill(ctx, keys, 2, func(ctx context.Context, start int, k []string, out []float32) error {
			cancel() // stop after this batch
			return compute(ctx, start, k, out)
		}, nil)
		if !errors.Is(err, context.Canceled) || len(*calls) != 1 || c.Len() != 2 {
			t.Fatalf("Fill = %v after %d calls, Len %d; want context.Canceled after 1 call, Len 2", err, len(*calls), c.Len())
		}
	})
	t.Run("bad arguments", func(t *testing.T) {
		c, err := New(Options{RecordLen: recLen})
		if err != nil {
			t.Fatal(err)
		}
		compute, _ := fakePrefix(recLen, -1)
		if err := c.Fill(context.Background(), keys, 0, compute, nil); err == nil {
			t.Error("Fill with batch 0 succeeded")
		}
		if err := c.Fill(context.Background(), keys, 2, nil, nil); err == nil {
			t.Error("Fill with nil compute succeeded")
		}
		c.Close()
		if err := c.Fill(context.Background(), keys, 2, compute, nil); !errors.Is(err, ErrClosed) {
			t.Errorf("Fill after Close = %v, want ErrClosed", err)
		}
	})
}
