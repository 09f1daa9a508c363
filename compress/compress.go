// Package compress encodes the float32 tensors of a federated message in
// fewer bytes, as NVIDIA FLARE's message quantisation does: IEEE half
// precision (fp16) or 8-bit blockwise quantisation (int8). It is the codec
// only; the wire (package transport) and the simulation (package experiment)
// both apply it, so that a networked run with compression gives the same
// numbers as `pfedmma run` with the same setting.
//
// Encodings, per tensor of n values (little-endian throughout):
//
//   - none: n float32 values, 4n bytes (exact).
//   - fp16: n IEEE 754 binary16 values rounded to nearest even, 2n bytes.
//     For |x| ≥ 2⁻¹⁴ (fp16's smallest normal) the error is at most
//     |x|·2⁻¹¹ (half an fp16 ulp); below it, at most 2⁻²⁵ (half the
//     subnormal spacing 2⁻²⁴). Values whose rounding overflows fp16
//     (|x| ≥ 65520) and NaN/±Inf are refused by the encoder.
//   - int8: the values are cut into blocks of BlockSize (the last block may
//     be shorter); each block stores one float32 scale s = m/127, with m the
//     block's largest |x|, then one signed code q = round(127·x/m) in
//     [−127, 127] per value, decoded as x̂ = q·s. Bytes: 4·⌈n/BlockSize⌉ + n.
//     The error is at most m/254 + m·2⁻²³ + 2⁻¹⁴² per value (half a
//     quantisation step, plus float32 rounding of the scale and of the
//     product); a block of zeros decodes to zeros exactly. NaN/±Inf are
//     refused by the encoder.
//
// Decoding refuses a payload no encoder writes (a wrong length, a negative
// or non-finite scale, the int8 code −128, a non-zero code under a zero
// scale, an fp16 NaN or Inf) with a *FormatError naming the field.
// Encoding and decoding are deterministic functions of their input (no
// fused multiply-add, no randomness), so both sides of the wire agree bit
// for bit.
package compress

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// Codec names an encoding: None, FP16 or Int8 (the values of the
// configuration key federation.compress).
type Codec string

// The codecs.
const (
	None Codec = "none"
	FP16 Codec = "fp16"
	Int8 Codec = "int8"
)

// BlockSize is the number of values sharing one scale in Int8.
const BlockSize = 64

// Names lists the codecs, as federation.compress accepts them.
var Names = []string{string(None), string(FP16), string(Int8)}

// Parse reads a codec name; "" is None.
func Parse(s string) (Codec, error) {
	switch Codec(s) {
	case "", None:
		return None, nil
	case FP16, Int8:
		return Codec(s), nil
	}
	return "", fmt.Errorf("compression %q: want one of none, fp16, int8", s)
}

// Size is the number of bytes encoding n values.
func (c Codec) Size(n int) int {
	switch c {
	case FP16:
		return 2 * n
	case Int8:
		return 4*blocks(n) + n
	}
	return 4 * n
}

// Bytes is the encoded size of every tensor of m (names and shapes not
// counted): what a message's tensors weigh on the wire.
func (c Codec) Bytes(m tensor.Named) int64 {
	var b int64
	for _, t := range m {
		b += int64(c.Size(len(t.Data)))
	}
	return b
}

func blocks(n int) int { return (n + BlockSize - 1) / BlockSize }

// FormatError is a refused value or payload: Field names what is wrong
// ("length", "scale of block 3", "element 17"), Msg says why.
type FormatError struct {
	Field string
	Msg   string
}

func (e *FormatError) Error() string { return e.Field + ": " + e.Msg }

func formatErr(field, format string, args ...any) *FormatError {
	return &FormatError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Append appends the encoding of x to dst. It refuses NaN and ±Inf (and,
// for FP16, finite values beyond its range) with a *FormatError naming the
// element.
func (c Codec) Append(dst []byte, x []float32) ([]byte, error) {
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return dst, formatErr(fmt.Sprintf("element %d", i), "%v cannot be compressed", v)
		}
	}
	switch c {
	case FP16:
		return appendFP16(dst, x)
	case Int8:
		return appendInt8(dst, x), nil
	case None, "":
		for _, v := range x {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
		}
		return dst, nil
	}
	return dst, fmt.Errorf("unknown compression %q", c)
}

func appendFP16(dst []byte, x []float32) ([]byte, error) {
	for i, v := range x {
		h := safetensors.Float32ToHalf(v)
		if h&0x7c00 == 0x7c00 {
			return dst, formatErr(fmt.Sprintf("element %d", i), "%v is beyond fp16's range ±65504 (use federation.compress=int8 or none)", v)
		}
		dst = binary.LittleEndian.AppendUint16(dst, h)
	}
	return dst, nil
}

// appendInt8 writes the block scales, then the codes.
func appendInt8(dst []byte, x []float32) []byte {
	nb := blocks(len(x))
	codes := make([]byte, len(x))
	for b := range nb {
		blk := x[b*BlockSize : min((b+1)*BlockSize, len(x))]
		var m float32
		for _, v := range blk {
			m = max(m, float32(math.Abs(float64(v))))
		}
		s := float32(float64(m) / 127)
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(s))
		if s == 0 {
			continue // zeros, or values too small for a float32 scale: codes 0
		}
		for i, v := range blk {
			q := math.RoundToEven(float64(v) * 127 / float64(m))
			q = max(-127, min(127, q))
			codes[b*BlockSize+i] = byte(int8(q))
		}
	}
	return append(dst, codes...)
}

// Decode fills dst from data, the encoding of len(dst) values. It refuses
// a payload no encoder writes with a *FormatError naming the field.
func (c Codec) Decode(dst []float32, data []byte) error {
	if want := c.Size(len(dst)); len(data) != want {
		return formatErr("length", "%d bytes, want %d for %d values (%s)", len(data), want, len(dst), c.layout(len(dst)))
	}
	switch c {
	case FP16:
		for i := range dst {
			h := binary.LittleEndian.Uint16(data[2*i:])
			if h&0x7c00 == 0x7c00 {
				return formatErr(fmt.Sprintf("element %d", i), "fp16 bits %#04x are NaN or Inf", h)
			}
			dst[i] = safetensors.HalfToFloat32(h)
		}
	case Int8:
		nb := blocks(len(dst))
		codes := data[4*nb:]
		for b := range nb {
			s := math.Float32frombits(binary.LittleEndian.Uint32(data[4*b:]))
			if !(s >= 0) || math.IsInf(float64(s), 0) {
				return formatErr(fmt.Sprintf("scale of block %d", b), "%v is not a finite non-negative number", s)
			}
			for i := b * BlockSize; i < min((b+1)*BlockSize, len(dst)); i++ {
				q := int8(codes[i])
				if q == -128 {
					return formatErr(fmt.Sprintf("code of element %d", i), "-128 is outside [-127, 127]")
				}
				if s == 0 && q != 0 {
					return formatErr(fmt.Sprintf("code of element %d", i), "%d under the zero scale of block %d", q, b)
				}
				// the scale may round up: keep m = MaxFloat32 finite
				dst[i] = float32(max(-math.MaxFloat32, min(math.MaxFloat32, float64(q)*float64(s))))
			}
		}
	case None, "":
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
	default:
		return fmt.Errorf("unknown compression %q", c)
	}
	return nil
}

func (c Codec) layout(n int) string {
	switch c {
	case FP16:
		return "2 bytes each"
	case Int8:
		return fmt.Sprintf("%d float32 block scales of %d values, then %d int8 codes", blocks(n), BlockSize, n)
	}
	return "4 bytes each"
}

// RoundTrip returns what the other side of the wire receives for m:
// every tensor encoded and decoded (new tensors; m is not changed). None
// returns m itself. An error names the tensor.
func (c Codec) RoundTrip(m tensor.Named) (tensor.Named, error) {
	if c == None || c == "" || m == nil {
		return m, nil
	}
	out := make(tensor.Named, len(m))
	var buf []byte
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}) {
		t := m[name]
		var err error
		if buf, err = c.Append(buf[:0], t.Data); err != nil {
			return nil, fmt.Errorf("tensor %q (%s): %w", name, c, err)
		}
		d := &tensor.Tensor{Shape: slices.Clone(t.Shape), Data: make([]float32, len(t.Data))}
		if err := c.Decode(d.Data, buf); err != nil {
			return nil, fmt.Errorf("tensor %q (%s): %w", name, c, err)
		}
		out[name] = d
	}
	return out, nil
}
