package actcache

import (
	"math"
	"unsafe"
)

// newSlot returns n zero bytes aligned to 8 bytes, so that they can be
// viewed as float32 or uint16 values.
func newSlot(n int) []byte {
	words := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), n)
}

// f32Bytes views f as its bytes in native byte order.
func f32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

// u16View views b (2-byte aligned, even length) as uint16 values in native
// byte order.
func u16View(b []byte) []uint16 {
	if len(b) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/2)
}

// encode stores src into dst (len(src)×dt.size() bytes) in format dt.
func encode(dst []byte, src []float32, dt DType) {
	if dt == Float32 {
		copy(dst, f32Bytes(src))
		return
	}
	h := u16View(dst)
	for i, v := range src {
		h[i] = toBF16(v)
	}
}

// decode loads src (len(dst)×dt.size() bytes in format dt) into dst.
func decode(dst []float32, src []byte, dt DType) {
	if dt == Float32 {
		copy(f32Bytes(dst), src)
		return
	}
	h := u16View(src)[:len(dst)]
	for i, v := range h {
		dst[i] = fromBF16(v)
	}
}

// toBF16 rounds v to bfloat16, to nearest with ties to even. NaN stays a
// (quiet) NaN.
func toBF16(v float32) uint16 {
	b := math.Float32bits(v)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep sign, force a quiet mantissa bit
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// fromBF16 widens a bfloat16 to float32 exactly.
func fromBF16(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}
