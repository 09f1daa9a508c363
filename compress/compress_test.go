package compress

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// fp16Bound is the documented fp16 error bound for x.
func fp16Bound(x float32) float64 {
	if math.Abs(float64(x)) >= 1.0/(1<<14) {
		return math.Abs(float64(x)) / (1 << 11)
	}
	return 1.0 / (1 << 25)
}

// int8Bound is the documented int8 error bound in a block whose largest
// magnitude is m.
func int8Bound(m float32) float64 {
	return float64(m)/254 + float64(m)/(1<<23) + math.Ldexp(1, -142)
}

func roundTrip(t *testing.T, c Codec, x []float32) []float32 {
	t.Helper()
	enc, err := c.Append(nil, x)
	if err != nil {
		t.Fatalf("%s encode: %v", c, err)
	}
	if len(enc) != c.Size(len(x)) {
		t.Fatalf("%s: %d bytes for %d values, Size says %d", c, len(enc), len(x), c.Size(len(x)))
	}
	out := make([]float32, len(x))
	if err := c.Decode(out, enc); err != nil {
		t.Fatalf("%s decode: %v", c, err)
	}
	return out
}

// values mixes magnitudes from subnormal to large, signs and zeros.
func values(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		switch rng.IntN(6) {
		case 0:
			x[i] = 0
		case 1:
			x[i] = math.Float32frombits(rng.Uint32N(1 << 23)) // subnormal
		default:
			x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(8)-5)))
		}
		if rng.IntN(2) == 0 {
			x[i] = -x[i]
		}
	}
	return x
}

func TestSizes(t *testing.T) {
	for _, tc := range []struct {
		c    Codec
		n    int
		want int
	}{
		{None, 10, 40}, {FP16, 10, 20}, {Int8, 0, 0}, {Int8, 1, 5}, {Int8, 64, 68}, {Int8, 65, 73}, {Int8, 128, 136},
	} {
		if got := tc.c.Size(tc.n); got != tc.want {
			t.Errorf("%s.Size(%d) = %d, want %d", tc.c, tc.n, got, tc.want)
		}
	}
	m := tensor.Named{"a": tensor.New(3, 64), "b": tensor.New(5)}
	if got, want := Int8.Bytes(m), int64(3*68+9); got != want {
		t.Errorf("Int8.Bytes = %d, want %d", got, want)
	}
	if got, want := FP16.Bytes(m), int64(2*197); got != want {
		t.Errorf("FP16.Bytes = %d, want %d", got, want)
	}
}

func TestParse(t *testing.T) {
	for s, want := range map[string]Codec{"": None, "none": None, "fp16": FP16, "int8": Int8} {
		if c, err := Parse(s); err != nil || c != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", s, c, err, want)
		}
	}
	if _, err := Parse("int4"); err == nil || !strings.Contains(err.Error(), "int4") {
		t.Errorf("Parse(int4) = %v, want an error naming it", err)
	}
}

func TestFP16Bound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := values(rng, 20000)
	x = append(x, 65504, -65504, 65519, 1.0/(1<<14), 1.0/(1<<24), 1.0/(1<<25), 1.0/(1<<26), 0, float32(math.Copysign(0, -1)))
	got := roundTrip(t, FP16, x)
	for i, v := range x {
		if d := math.Abs(float64(got[i]) - float64(v)); d > fp16Bound(v) {
			t.Fatalf("fp16 %g -> %g: error %g above the bound %g", v, got[i], d, fp16Bound(v))
		}
	}
	// 2^-25 is exactly half the smallest subnormal: rounds to even (zero);
	// just above it rounds up to the subnormal 2^-24
	if got[len(got)-4] != 0 {
		t.Errorf("fp16(2^-25) = %g, want 0 (ties to even)", got[len(got)-4])
	}
	if math.Signbit(float64(got[len(got)-1])) != true {
		t.Errorf("fp16(-0) lost its sign")
	}
}

// Every finite fp16 value survives float32 → fp16 → float32 exactly: the
// codec is idempotent, so a message compressed twice is compressed once.
func TestFP16Exhaustive(t *testing.T) {
	x := make([]float32, 0, 1<<16)
	for h := range 1 << 16 {
		if uint16(h)&0x7c00 != 0x7c00 {
			x = append(x, safetensors.HalfToFloat32(uint16(h)))
		}
	}
	got := roundTrip(t, FP16, x)
	for i := range x {
		if math.Float32bits(got[i]) != math.Float32bits(x[i]) {
			t.Fatalf("fp16 value %g came back as %g", x[i], got[i])
		}
	}
}

func TestInt8Bound(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 63, 64, 65, 1000, 4096 + 17} {
		x := values(rng, n)
		got := roundTrip(t, Int8, x)
		for b := 0; b*BlockSize < n; b++ {
			blk := x[b*BlockSize : min((b+1)*BlockSize, n)]
			var m float32
			for _, v := range blk {
				m = max(m, float32(math.Abs(float64(v))))
			}
			for i, v := range blk {
				j := b*BlockSize + i
				if d := math.Abs(float64(got[j]) - float64(v)); d > int8Bound(m) {
					t.Fatalf("n=%d int8 element %d: %g -> %g, error %g above the bound %g (block max %g)", n, j, v, got[j], d, int8Bound(m), m)
				}
			}
		}
	}
}

// The bound is tight: values half a step from a code are off by about
// m/254, and the largest magnitude of a block comes back to within
// float32 rounding.
func TestInt8BoundIsTight(t *testing.T) {
	x := make([]float32, BlockSize)
	x[0] = 127
	x[1] = 0.5    // half a step: rounds to even (0)
	x[2] = -1.5   // rounds to -2
	x[3] = 0.4999 // rounds to 0
	got := roundTrip(t, Int8, x)
	if got[0] != 127 || got[1] != 0 || got[2] != -2 || got[3] != 0 {
		t.Errorf("int8 of [127 0.5 -1.5 0.4999] = %v, want [127 0 -2 0]", got[:4])
	}
	if d := math.Abs(float64(got[1] - x[1])); d != 0.5 || d > int8Bound(127) {
		t.Errorf("error %g at half a step, want 0.5 (= m/254) within the bound %g", d, int8Bound(127))
	}
}

func TestInt8EdgeCases(t *testing.T) {
	// a zero block, a subnormal-only block, a block beside a huge one
	x := make([]float32, 3*BlockSize+5)
	for i := BlockSize; i < 2*BlockSize; i++ {
		x[i] = math.Float32frombits(uint32(i)) // tiny subnormals
	}
	x[2*BlockSize] = math.MaxFloat32
	x[2*BlockSize+1] = -math.MaxFloat32
	x[2*BlockSize+2] = 1
	x[3*BlockSize] = -3
	got := roundTrip(t, Int8, x)
	for i := range BlockSize {
		if got[i] != 0 || math.Signbit(float64(got[i])) {
			t.Fatalf("zero block element %d came back as %g", i, got[i])
		}
	}
	for i := BlockSize; i < len(x); i++ {
		b := i / BlockSize
		var m float32
		for _, v := range x[b*BlockSize : min((b+1)*BlockSize, len(x))] {
			m = max(m, float32(math.Abs(float64(v))))
		}
		if d := math.Abs(float64(got[i]) - float64(x[i])); d > int8Bound(m) || math.IsInf(float64(got[i]), 0) {
			t.Fatalf("element %d: %g -> %g, error %g above %g", i, x[i], got[i], d, int8Bound(m))
		}
	}
	if got[2*BlockSize] != math.MaxFloat32 || got[2*BlockSize+1] != -math.MaxFloat32 {
		t.Errorf("±MaxFloat32 came back as %g, %g", got[2*BlockSize], got[2*BlockSize+1])
	}
	if got[3*BlockSize] != -3 {
		t.Errorf("a short last block's maximum -3 came back as %g", got[3*BlockSize])
	}
}

func TestEncodeRefusesNonFinite(t *testing.T) {
	for _, c := range []Codec{FP16, Int8} {
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			x := []float32{1, 2, bad, 4}
			_, err := c.Append(nil, x)
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Field != "element 2" {
				t.Errorf("%s encode of %v: %v, want a refusal naming element 2", c, bad, err)
			}
		}
	}
	_, err := FP16.Append(nil, []float32{1, 70000})
	if err == nil || !strings.Contains(err.Error(), "element 1") || !strings.Contains(err.Error(), "65504") {
		t.Errorf("fp16 encode of 70000: %v, want a refusal naming element 1 and the range", err)
	}
}

func TestDecodeRefusesMalformed(t *testing.T) {
	x := []float32{1, -2, 3, 0.5}
	good8, _ := Int8.Append(nil, x)
	good16, _ := FP16.Append(nil, x)
	nan := math.Float32bits(float32(math.NaN()))
	for _, tc := range []struct {
		name  string
		c     Codec
		data  []byte
		field string
	}{
		{"short int8", Int8, good8[:len(good8)-1], "length"},
		{"long fp16", FP16, append(append([]byte{}, good16...), 0), "length"},
		{"NaN scale", Int8, patch(good8, 0, binary.LittleEndian.AppendUint32(nil, nan)), "scale of block 0"},
		{"negative scale", Int8, patch(good8, 0, binary.LittleEndian.AppendUint32(nil, math.Float32bits(-1))), "scale of block 0"},
		{"Inf scale", Int8, patch(good8, 0, binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(math.Inf(1))))), "scale of block 0"},
		{"code -128", Int8, patch(good8, 4+2, []byte{0x80}), "code of element 2"},
		{"code under zero scale", Int8, patch(good8, 0, []byte{0, 0, 0, 0}), "code of element 0"},
		{"fp16 Inf", FP16, patch(good16, 2, []byte{0x00, 0x7c}), "element 1"},
		{"fp16 NaN", FP16, patch(good16, 6, []byte{0x01, 0xfe}), "element 3"},
	} {
		err := tc.c.Decode(make([]float32, len(x)), tc.data)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v, want a refusal naming %q", tc.name, err, tc.field)
		}
	}
}

func patch(b []byte, at int, with []byte) []byte {
	out := append([]byte{}, b...)
	copy(out[at:], with)
	return out
}

func TestRoundTripNamed(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	m := tensor.Named{"w": {Shape: []int{3, 50}, Data: values(rng, 150)}, "b": {Shape: []int{7}, Data: values(rng, 7)}}
	orig := m.Clone()
	if out, err := None.RoundTrip(m); err != nil || out["w"] != m["w"] {
		t.Errorf("None.RoundTrip must return its input unchanged, got %v", err)
	}
	for _, c := range []Codec{FP16, Int8} {
		out, err := c.RoundTrip(m)
		if err != nil {
			t.Fatal(err)
		}
		for name, ot := range orig {
			if !tensor.SameShape(out[name].Shape, ot.Shape) || out[name] == m[name] {
				t.Fatalf("%s: tensor %q shape %v (new tensor expected)", c, name, out[name].Shape)
			}
			for i, v := range ot.Data {
				if m[name].Data[i] != v {
					t.Fatalf("%s changed its input", c)
				}
			}
			// compressing a compressed message again changes nothing
			again, _ := c.RoundTrip(tensor.Named{name: out[name]})
			if c == FP16 {
				for i, v := range out[name].Data {
					if again[name].Data[i] != v {
						t.Fatalf("fp16 is not idempotent at %q[%d]", name, i)
					}
				}
			}
		}
	}
	m["b"].Data[3] = float32(math.NaN())
	if _, err := Int8.RoundTrip(m); err == nil || !strings.Contains(err.Error(), `tensor "b"`) || !strings.Contains(err.Error(), "element 3") {
		t.Errorf("RoundTrip of a NaN: %v, want an error naming tensor b and element 3", err)
	}
}
