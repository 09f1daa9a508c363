package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/tensor"
)

// rawFile builds a safetensors file by hand from a header value and a body,
// independently of Encode.
func rawFile(t testing.TB, header any, body []byte) []byte {
	t.Helper()
	hb, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hb)))
	out = append(out, hb...)
	return append(out, body...)
}

// rawJSON builds a safetensors file from literal header text.
func rawJSON(header string, body []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(out, header...), body...)
}

func ent(dtype string, shape []int, begin, end int) map[string]any {
	return map[string]any{"dtype": dtype, "shape": shape, "data_offsets": []int{begin, end}}
}

func TestRoundTrip(t *testing.T) {
	f32 := tensor.Named{
		"b.weight": {Shape: []int{2, 3}, Data: []float32{1, -2, 3.5, float32(math.Inf(1)), 0, 1e-30}},
		"a.bias":   {Shape: []int{3}, Data: []float32{0.25, -0.5, 7}},
		"scalar":   {Shape: []int{}, Data: []float32{4}},
		"empty":    {Shape: []int{0, 5}, Data: []float32{}},
	}
	i64 := map[string]Int64Tensor{
		"labels": {Shape: []int{2, 2}, Data: []int64{0, -1, math.MaxInt64, math.MinInt64}},
	}
	meta := map[string]string{"lr": "0.01", "note": "x"}
	path := filepath.Join(t.TempDir(), "rt.safetensors")
	if err := Write(path, f32, i64, meta); err != nil {
		t.Fatal(err)
	}
	eager, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	lazy, err := OpenLazy(path)
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	for _, f := range []*File{eager, lazy} {
		checkRoundTrip(t, f, f32, i64)
	}
	if err := lazy.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := lazy.Float32("a.bias"); err == nil {
		t.Error("read after Close: no error")
	}
}

func checkRoundTrip(t *testing.T, f *File, f32 tensor.Named, i64 map[string]Int64Tensor) {
	t.Helper()
	if got, want := strings.Join(f.Names(), ","), "a.bias,b.weight,empty,labels,scalar"; got != want {
		t.Errorf("Names = %s, want %s", got, want)
	}
	for name, want := range f32 {
		got, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		if !tensor.SameShape(got.Shape, want.Shape) {
			t.Errorf("%s: shape %v, want %v", name, got.Shape, want.Shape)
		}
		for i := range want.Data {
			if math.Float32bits(got.Data[i]) != math.Float32bits(want.Data[i]) {
				t.Errorf("%s[%d] = %v, want %v", name, i, got.Data[i], want.Data[i])
			}
		}
		if dt, _, ok := f.Info(name); !ok || dt != "F32" {
			t.Errorf("%s: Info dtype %q ok %v", name, dt, ok)
		}
	}
	vals, shape, err := f.Int64("labels")
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.SameShape(shape, []int{2, 2}) {
		t.Errorf("labels shape %v", shape)
	}
	for i, v := range i64["labels"].Data {
		if vals[i] != v {
			t.Errorf("labels[%d] = %d, want %d", i, vals[i], v)
		}
	}
	if m := f.Metadata(); len(m) != 2 || m["lr"] != "0.01" || m["note"] != "x" {
		t.Errorf("Metadata = %v", m)
	}
}

func TestEncodeDeterministicAligned(t *testing.T) {
	named := tensor.Named{}
	for i := range 20 {
		named[string(rune('a'+i))+".w"] = &tensor.Tensor{Shape: []int{1}, Data: []float32{float32(i)}}
	}
	var first []byte
	for range 5 {
		var buf bytes.Buffer
		if err := Encode(&buf, named, nil, map[string]string{"k": "v"}); err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = buf.Bytes()
			if n := binary.LittleEndian.Uint64(first); (8+n)%8 != 0 {
				t.Errorf("data starts at %d, not 8-byte aligned", 8+n)
			}
			continue
		}
		if !bytes.Equal(first, buf.Bytes()) {
			t.Fatal("Encode output differs between runs")
		}
	}
	// Offsets follow sorted names.
	f, err := Parse(first, "det")
	if err != nil {
		t.Fatal(err)
	}
	prev := -1
	for _, name := range f.Names() {
		if e := f.entries[name]; e.begin <= prev {
			t.Errorf("%s starts at %d, after previous %d", name, e.begin, prev)
		} else {
			prev = e.begin
		}
	}
}

func TestHalfKnownValues(t *testing.T) {
	cases := []struct {
		f    float32
		bits uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{0.5, 0x3800},
		{65504, 0x7bff},                           // largest finite
		{65519, 0x7bff},                           // rounds down
		{65520, 0x7c00},                           // ties to even: Inf
		{float32(math.Inf(-1)), 0xfc00},           // -Inf
		{float32(math.Ldexp(1, -14)), 0x0400},     // smallest normal
		{float32(math.Ldexp(1, -24)), 0x0001},     // smallest subnormal
		{float32(math.Ldexp(1, -25)), 0x0000},     // tie to even: 0
		{float32(math.Ldexp(3, -26)), 0x0001},     // above the tie: rounds up
		{float32(math.Ldexp(3, -25)), 0x0002},     // 1.5 ulp: tie to even 2
		{1 + float32(math.Ldexp(1, -11)), 0x3c00}, // tie to even
		{1 + float32(math.Ldexp(3, -11)), 0x3c02}, // tie to even (up)
		{float32(1.0 / 3), 0x3555},
		{1e-10, 0x0000},
	}
	for _, c := range cases {
		if got := Float32ToHalf(c.f); got != c.bits {
			t.Errorf("Float32ToHalf(%g) = %#04x, want %#04x", c.f, got, c.bits)
		}
	}
	if h := Float32ToHalf(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("Float32ToHalf(NaN) = %#04x, not a NaN", h)
	}
	// Decoding: known bit patterns.
	dec := map[uint16]float32{0x3c00: 1, 0xc000: -2, 0x7bff: 65504, 0x0001: float32(math.Ldexp(1, -24)),
		0x03ff: float32(math.Ldexp(1023, -24)), 0x3555: 0.333251953125, 0x7c00: float32(math.Inf(1))}
	for b, want := range dec {
		if got := HalfToFloat32(b); got != want {
			t.Errorf("HalfToFloat32(%#04x) = %g, want %g", b, got, want)
		}
	}
	// Every half value survives half → float32 → half; NaNs stay NaN.
	for b := range 1 << 16 {
		h := uint16(b)
		f := HalfToFloat32(h)
		isNaN := h&0x7c00 == 0x7c00 && h&0x3ff != 0
		if isNaN != math.IsNaN(float64(f)) {
			t.Fatalf("HalfToFloat32(%#04x) = %g: NaN-ness wrong", h, f)
		}
		if !isNaN && Float32ToHalf(f) != h {
			t.Fatalf("half %#04x → %g → %#04x", h, f, Float32ToHalf(f))
		}
	}
}

// TestHalfRoundingNearest checks on random float32 values that the chosen
// half is at least as close as its neighbours, with ties going to the even
// one.
func TestHalfRoundingNearest(t *testing.T) {
	checkNearest(t, "half", Float32ToHalf, HalfToFloat32, 0x7c00)
}

func TestBF16RoundingNearest(t *testing.T) {
	checkNearest(t, "bf16", Float32ToBF16, BF16ToFloat32, 0x7f80)
}

func checkNearest(t *testing.T, kind string, enc func(float32) uint16, dec func(uint16) float32, expMask uint16) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		f := math.Float32frombits(rng.Uint32())
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			continue
		}
		h := enc(f)
		got := float64(dec(h))
		if math.IsInf(got, 0) {
			continue // overflow checked in the known-value tests
		}
		d := math.Abs(got - float64(f))
		for _, n := range []uint16{h - 1, h + 1} {
			if n&expMask == expMask || (n^h)&0x8000 != 0 {
				continue // neighbour is Inf/NaN or of the other sign
			}
			nd := math.Abs(float64(dec(n)) - float64(f))
			if nd < d || (nd == d && h&1 == 1) {
				t.Fatalf("%s(%g) = %#04x (%g), but %#04x (%g) is closer or the even tie", kind, f, h, got, n, dec(n))
			}
		}
	}
}

func TestBF16KnownValues(t *testing.T) {
	cases := []struct {
		f     float32
		bits  uint16
		exact bool // f is a bfloat16 value, so decoding bits gives f back
	}{
		{1, 0x3f80, true},
		{-2, 0xc000, true},
		{float32(math.Pi), 0x4049, false},
		{1 + float32(math.Ldexp(1, -8)), 0x3f80, false}, // tie to even (down)
		{1 + float32(math.Ldexp(3, -8)), 0x3f82, false}, // tie to even (up)
		{math.MaxFloat32, 0x7f80, false},                // rounds to Inf
		{float32(math.Inf(-1)), 0xff80, true},
		{float32(math.Ldexp(1, -133)), 0x0001, true}, // smallest bf16 subnormal
	}
	for _, c := range cases {
		if got := Float32ToBF16(c.f); got != c.bits {
			t.Errorf("Float32ToBF16(%g) = %#04x, want %#04x", c.f, got, c.bits)
		}
		if got := BF16ToFloat32(c.bits); c.exact && got != c.f {
			t.Errorf("BF16ToFloat32(%#04x) = %g, want %g", c.bits, got, c.f)
		}
	}
	if got := BF16ToFloat32(0x4049); got != 3.140625 {
		t.Errorf("BF16ToFloat32(0x4049) = %g, want 3.140625", got)
	}
	if h := Float32ToBF16(float32(math.NaN())); !math.IsNaN(float64(BF16ToFloat32(h))) {
		t.Errorf("Float32ToBF16(NaN) = %#04x, not a NaN", h)
	}
}

// TestReadDTypes reads hand-built F16, BF16, F64 and I32 tensors.
func TestReadDTypes(t *testing.T) {
	var body []byte
	body = binary.LittleEndian.AppendUint16(body, 0x3c00) // f16 1
	body = binary.LittleEndian.AppendUint16(body, 0xb800) // f16 -0.5
	body = binary.LittleEndian.AppendUint16(body, 0x4049) // bf16 3.140625
	body = binary.LittleEndian.AppendUint16(body, 0xbf80) // bf16 -1
	body = binary.LittleEndian.AppendUint64(body, math.Float64bits(0.1))
	body = binary.LittleEndian.AppendUint32(body, uint32(0xfffffffe)) // i32 -2
	body = binary.LittleEndian.AppendUint32(body, 7)
	data := rawFile(t, map[string]any{
		"h":            ent("F16", []int{2}, 0, 4),
		"b":            ent("BF16", []int{2, 1}, 4, 8),
		"d":            ent("F64", []int{}, 8, 16),
		"i":            ent("I32", []int{2}, 16, 24),
		"__metadata__": map[string]string{"a": "b"},
	}, body)
	f, err := Parse(data, "dtypes")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]float32{"h": {1, -0.5}, "b": {3.140625, -1}, "d": {float32(0.1)}}
	for name, w := range want {
		got, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range w {
			if got.Data[i] != w[i] {
				t.Errorf("%s[%d] = %g, want %g", name, i, got.Data[i], w[i])
			}
		}
	}
	iv, _, err := f.Int64("i")
	if err != nil || iv[0] != -2 || iv[1] != 7 {
		t.Errorf("Int64(i) = %v, %v; want [-2 7]", iv, err)
	}
	dst := make([]float32, 2)
	if shape, err := f.Float32Into("b", dst); err != nil || dst[0] != 3.140625 || !tensor.SameShape(shape, []int{2, 1}) {
		t.Errorf("Float32Into(b) = %v %v %v", shape, dst, err)
	}
	if _, err := f.Float32Into("b", make([]float32, 3)); err == nil {
		t.Error("Float32Into with a wrong-size destination: no error")
	}
}

func TestWriteHalfTypes(t *testing.T) {
	src := tensor.Named{"w": {Shape: []int{4}, Data: []float32{1, -0.5, 3.140625, 1e6}}}
	for _, dt := range []DType{F16, BF16} {
		var buf bytes.Buffer
		if err := Encode(&buf, src, nil, nil, WithFloatType(dt)); err != nil {
			t.Fatal(err)
		}
		f, err := Parse(buf.Bytes(), string(dt))
		if err != nil {
			t.Fatal(err)
		}
		if got, _, _ := f.Info("w"); got != string(dt) {
			t.Errorf("stored dtype %s, want %s", got, dt)
		}
		got, err := f.Float32("w")
		if err != nil {
			t.Fatal(err)
		}
		var want []float32
		for _, v := range src["w"].Data {
			if dt == F16 {
				want = append(want, HalfToFloat32(Float32ToHalf(v)))
			} else {
				want = append(want, BF16ToFloat32(Float32ToBF16(v)))
			}
		}
		for i := range want {
			if got.Data[i] != want[i] {
				t.Errorf("%s[%d] = %g, want %g", dt, i, got.Data[i], want[i])
			}
		}
	}
	if err := Encode(&bytes.Buffer{}, src, nil, nil, WithFloatType(I64)); !errors.Is(err, ErrDType) {
		t.Errorf("WithFloatType(I64): err %v, want ErrDType", err)
	}
}

func TestParseErrors(t *testing.T) {
	good := rawFile(t, map[string]any{"w": ent("F32", []int{2}, 0, 8)}, make([]byte, 8))
	long := binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1)
	cases := []struct {
		name string
		data []byte
		want string // substring of the error
	}{
		{"empty", nil, "truncated"},
		{"short", good[:5], "truncated"},
		{"header past end", good[:20], "truncated"},
		{"header too long", append(long, make([]byte, 16)...), "exceeds"},
		{"bad json", append(binary.LittleEndian.AppendUint64(nil, 5), []byte("{\"w\":")...), "header JSON"},
		{"not object", rawFile(t, []int{1, 2}, nil), "want an object"},
		{"offsets past end", rawFile(t, map[string]any{"w": ent("F32", []int{2}, 0, 8)}, make([]byte, 4)), `tensor "w": data_offsets [0,8] outside`},
		{"offsets reversed", rawFile(t, map[string]any{"w": ent("F32", []int{0}, 4, 0)}, make([]byte, 4)), `tensor "w": data_offsets`},
		{"size mismatch", rawFile(t, map[string]any{"w": ent("F32", []int{3}, 0, 8)}, make([]byte, 12)), `tensor "w": shape [3] of F32 needs 12 bytes`},
		{"huge shape", rawFile(t, map[string]any{"w": ent("F32", []int{1 << 40, 1 << 40}, 0, 8)}, make([]byte, 8)), `tensor "w": shape`},
		{"negative dim", rawFile(t, map[string]any{"w": ent("F32", []int{-2}, 0, 8)}, make([]byte, 8)), "negative dimension"},
		{"unknown dtype", rawFile(t, map[string]any{"w": ent("F17", []int{2}, 0, 8)}, make([]byte, 8)), `unknown dtype "F17"`},
		{"overlap", rawFile(t, map[string]any{"a": ent("F32", []int{2}, 0, 8), "b": ent("F32", []int{1}, 4, 8)}, make([]byte, 8)), "overlap"},
		{"one offset", rawFile(t, map[string]any{"w": map[string]any{"dtype": "F32", "shape": []int{1}, "data_offsets": []int{0}}}, make([]byte, 4)), "data_offsets has 1 values"},
		{"no shape", rawFile(t, map[string]any{"w": map[string]any{"dtype": "F32", "data_offsets": []int{0, 4}}}, make([]byte, 4)), "missing shape"},
		{"extra field", rawFile(t, map[string]any{"w": map[string]any{"dtype": "F32", "shape": []int{1}, "data_offsets": []int{0, 4}, "x": 1}}, make([]byte, 4)), "unknown field"},
		{"metadata not strings", rawFile(t, map[string]any{"__metadata__": map[string]int{"a": 1}}, nil), "__metadata__"},
		{"duplicate", rawJSON(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), `duplicate key "w"`},
		{"trailing json", rawJSON(`{} {}`, nil), "data after the header"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, perr := Parse(c.data, "case.safetensors")
			_, rerr := NewReader(bytes.NewReader(c.data), int64(len(c.data)), "case.safetensors")
			for _, err := range []error{perr, rerr} {
				if err == nil {
					t.Fatalf("no error, want %q", c.want)
				}
				if !errors.Is(err, ErrFormat) {
					t.Errorf("error %v is not ErrFormat", err)
				}
				msg := err.Error()
				if !strings.Contains(msg, "case.safetensors") || !strings.Contains(msg, c.want) {
					t.Errorf("error %q: want the file name and %q", msg, c.want)
				}
			}
		})
	}
	if _, err := Parse(good, "good"); err != nil {
		t.Errorf("valid file: %v", err)
	}
}

func TestWrongDTypeAndMissing(t *testing.T) {
	f, err := Parse(rawFile(t, map[string]any{
		"f": ent("F32", []int{1}, 0, 4),
		"i": ent("I64", []int{1}, 4, 12),
		"u": ent("U8", []int{1}, 12, 13),
	}, make([]byte, 13)), "x.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		call func() error
		is   error
	}{
		{"Float32(i)", func() error { _, err := f.Float32("i"); return err }, ErrDType},
		{"Float32(u)", func() error { _, err := f.Float32("u"); return err }, ErrDType},
		{"Int64(f)", func() error { _, _, err := f.Int64("f"); return err }, ErrDType},
		{"Float32(missing)", func() error { _, err := f.Float32("missing"); return err }, ErrNotFound},
		{"Int64(missing)", func() error { _, _, err := f.Int64("missing"); return err }, ErrNotFound},
	}
	for _, c := range checks {
		err := c.call()
		if !errors.Is(err, c.is) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.is)
			continue
		}
		if !strings.Contains(err.Error(), "x.safetensors") {
			t.Errorf("%s: error %q does not name the file", c.name, err)
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	cases := []struct {
		name string
		f32  tensor.Named
		i64  map[string]Int64Tensor
		want string
	}{
		{"size", tensor.Named{"w": {Shape: []int{3}, Data: []float32{1, 2}}}, nil, `"w": shape [3] needs 3 values, got 2`},
		{"negative", tensor.Named{"w": {Shape: []int{-1}, Data: nil}}, nil, "negative"},
		{"nil", tensor.Named{"w": nil}, nil, "nil"},
		{"reserved", tensor.Named{"__metadata__": {Shape: []int{1}, Data: []float32{1}}}, nil, "reserved"},
		{"both", tensor.Named{"w": {Shape: []int{1}, Data: []float32{1}}}, map[string]Int64Tensor{"w": {Shape: []int{1}, Data: []int64{1}}}, "both"},
	}
	for _, c := range cases {
		err := Encode(&bytes.Buffer{}, c.f32, c.i64, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
}

// TestWriteAtomic checks that a failed write leaves the previous file intact
// and no temporary files behind.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.safetensors")
	good := tensor.Named{"w": {Shape: []int{1}, Data: []float32{42}}}
	if err := Write(path, good, nil, nil); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	bad := tensor.Named{"w": {Shape: []int{2}, Data: []float32{1}}}
	if err := Write(path, bad, nil, nil); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("bad write: err %v, want an error naming %s", err, path)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Error("failed write changed the existing file")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after a failed write, want 1", len(entries))
	}
	if err := Write(filepath.Join(dir, "missing", "x.safetensors"), good, nil, nil); err == nil {
		t.Error("write into a missing directory: no error")
	}
}

// TestFixture reads a reference file written by the Python safetensors
// library.
func TestFixture(t *testing.T) {
	f, err := Open("../testdata/clip-tiny/forward.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int{"images": {3, 3, 32, 32}, "tokens": {4, 77}, "image_features": {3, 64},
		"text_features": {4, 64}, "logits_per_image": {3, 4}}
	if f.Len() != len(want) {
		t.Errorf("%d tensors, want %d: %v", f.Len(), len(want), f.Names())
	}
	for name, shape := range want {
		_, got, ok := f.Info(name)
		if !ok || !tensor.SameShape(got, shape) {
			t.Errorf("%s: shape %v (ok %v), want %v", name, got, ok, shape)
		}
	}
	tok, _, err := f.Int64("tokens")
	if err != nil {
		t.Fatal(err)
	}
	// Every prompt starts with SOT (998) and contains EOT (999), the row max.
	for r := range 4 {
		row := tok[r*77 : (r+1)*77]
		hasEOT := false
		for _, v := range row {
			hasEOT = hasEOT || v == 999
		}
		if row[0] != 998 || !hasEOT {
			t.Errorf("tokens row %d = %v, want SOT first and an EOT", r, row[:8])
		}
	}
	all, err := f.Float32All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 {
		t.Errorf("Float32All read %d tensors, want 4 (tokens is I64)", len(all))
	}
}

func FuzzParse(f *testing.F) {
	// Seeds from the reference fixtures: the fuzzer stalls on inputs of
	// hundreds of kilobytes, so each contributes its real header with a cut
	// body (an error path) and a shrunken valid copy with the same names,
	// dtypes and metadata.
	for _, p := range []string{"../testdata/clip-tiny/forward.safetensors", "../testdata/mma-l2/step.safetensors"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		n := binary.LittleEndian.Uint64(b)
		f.Add(b[:8+n+64])
		f.Add(shrink(f, b))
	}
	f.Add(rawFile(f, map[string]any{"w": ent("F16", []int{2}, 0, 4), "__metadata__": map[string]string{"a": "b"}}, make([]byte, 4)))
	f.Add(rawFile(f, map[string]any{"i": ent("I32", []int{1, 1}, 0, 4), "b": ent("BF16", []int{}, 4, 6)}, make([]byte, 6)))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data, "fuzz")
		lazy, lerr := NewReader(bytes.NewReader(data), int64(len(data)), "fuzz")
		if (err == nil) != (lerr == nil) {
			t.Fatalf("Parse err %v, NewReader err %v", err, lerr)
		}
		if err != nil {
			return
		}
		for _, name := range file.Names() {
			a, aerr := file.Float32(name)
			b, berr := lazy.Float32(name)
			if (aerr == nil) != (berr == nil) || (aerr == nil && !slices.Equal(a.Data, b.Data) && !hasNaN(a.Data)) {
				t.Fatalf("Float32(%q): in-memory and lazy reads differ", name)
			}
			dt, shape, ok := file.Info(name)
			if !ok {
				t.Fatalf("Info(%q) not found", name)
			}
			tt, err := file.Float32(name)
			if DType(dt).IsFloat() != (err == nil) {
				t.Fatalf("Float32(%q) of %s: err %v", name, dt, err)
			}
			if err == nil && len(tt.Data) != tensor.Numel(shape) {
				t.Fatalf("Float32(%q): %d values for shape %v", name, len(tt.Data), shape)
			}
			if _, _, err := file.Int64(name); DType(dt).IsInt() != (err == nil) {
				t.Fatalf("Int64(%q) of %s: err %v", name, dt, err)
			}
		}
		// Whatever parses re-encodes and parses again.
		all, err := file.Float32All()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := Encode(&buf, all, nil, file.Metadata()); err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(buf.Bytes(), "re-encoded"); err != nil {
			t.Fatalf("re-encoded file does not parse: %v", err)
		}
	})
}

// shrink re-encodes a safetensors file keeping at most two elements of each
// tensor.
func shrink(t testing.TB, data []byte) []byte {
	t.Helper()
	file, err := Parse(data, "seed")
	if err != nil {
		t.Fatal(err)
	}
	f32 := tensor.Named{}
	i64 := map[string]Int64Tensor{}
	for _, name := range file.Names() {
		if v, err := file.Float32(name); err == nil {
			k := min(2, len(v.Data))
			f32[name] = &tensor.Tensor{Shape: []int{k}, Data: v.Data[:k]}
		} else if v, _, err := file.Int64(name); err == nil {
			k := min(2, len(v))
			i64[name] = Int64Tensor{Shape: []int{1, k}, Data: v[:k]}
		}
	}
	var buf bytes.Buffer
	if err := Encode(&buf, f32, i64, file.Metadata()); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func hasNaN(v []float32) bool {
	for _, x := range v {
		if x != x {
			return true
		}
	}
	return false
}
