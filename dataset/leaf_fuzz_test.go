package dataset

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// FuzzLEAFFile feeds readLEAFFile LEAF JSON at scale: either the fuzzed
// bytes as the whole file, or a file of `extra` synthetic writers (up to
// 65535) plus a writer "fz" whose user_data is the fuzzed bytes and whose
// num_samples is n. Properties: no panic; an error names the file; every
// writer handed on has as many images as labels, 784 values in [0,1] per
// image and labels in range; and the time stays linear in the writers
// (a quadratic check once took 59 s for 150k writers).
func FuzzLEAFFile(f *testing.F) {
	img := "[" + strings.TrimSuffix(strings.Repeat("0.25,", 28*28), ",") + "]"
	f.Add([]byte(`{"x": [`+img+`], "y": [5]}`), uint16(0), uint8(1), false)
	f.Add([]byte(`{"x": [`+img+`], "y": [5]}`), uint16(60000), uint8(1), false)
	f.Add([]byte(`{"x": [[0.5]], "y": [1]}`), uint16(10), uint8(1), false)
	f.Add([]byte(`{"x": [`+img+`], "y": [62]}`), uint16(3), uint8(1), false)
	f.Add([]byte(`{"users": ["a", "a"], "num_samples": [0, 0], "user_data": {"a": {"x": [], "y": []}}}`), uint16(0), uint8(0), true)
	f.Add([]byte(`{"users": ["a"], "num_samples": [0], "user_data": {"b": {"x": [], "y": []}}}`), uint16(0), uint8(0), true)
	f.Add([]byte(`{"users": ["a"]`), uint16(0), uint8(0), true)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte, extra uint16, n uint8, whole bool) {
		data := b
		if !whole {
			var sb strings.Builder
			sb.WriteString(`{"users": [`)
			for i := range int(extra) {
				fmt.Fprintf(&sb, `"s%d",`, i)
			}
			sb.WriteString(`"fz"], "num_samples": [`)
			for range int(extra) {
				sb.WriteString("0,")
			}
			fmt.Fprintf(&sb, `%d], "user_data": {`, n)
			for i := range int(extra) {
				fmt.Fprintf(&sb, `"s%d": {"x": [], "y": []},`, i)
			}
			sb.WriteString(`"fz": `)
			sb.Write(b)
			sb.WriteString("}}")
			data = []byte(sb.String())
		}
		p := fuzzFile(t, dir, "leaf.json", data)
		start := time.Now()
		err := readLEAFFile(p, func(user string, u *leafUser) error {
			if len(u.X) != len(u.Y) {
				t.Fatalf("user %q: %d images, %d labels", user, len(u.X), len(u.Y))
			}
			for k, x := range u.X {
				if len(x) != FEMNISTImageSide*FEMNISTImageSide {
					t.Fatalf("user %q image %d: %d values", user, k, len(x))
				}
				for _, v := range x {
					if !(v >= 0 && v <= 1) {
						t.Fatalf("user %q image %d: value %v", user, k, v)
					}
				}
				if u.Y[k] < 0 || u.Y[k] >= len(FEMNISTClasses) {
					t.Fatalf("user %q image %d: label %d", user, k, u.Y[k])
				}
			}
			return nil
		}, nil)
		if err != nil && !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not name the file", err)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("%d bytes, %d synthetic writers: %v", len(data), extra, d)
		}
	})
}
