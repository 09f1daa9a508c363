package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/tensor"
)

// Int64Tensor is a dense row-major int64 array with a shape, for labels,
// token ids and other integer data.
type Int64Tensor struct {
	Shape []int
	Data  []int64
}

// Option changes how Encode and Write store tensors.
type Option func(*options)

type options struct {
	floatType DType
}

// WithFloatType stores the float32 tensors as dt, which must be F32 (the
// default), F16 or BF16. Conversion rounds to nearest even.
func WithFloatType(dt DType) Option { return func(o *options) { o.floatType = dt } }

type item struct {
	name  string
	dtype DType
	shape []int
	f32   []float32
	i64   []int64
}

// Encode writes f32 and i64 as one safetensors stream to w, with meta as the
// "__metadata__" map (omitted when empty). Tensors are laid out in sorted
// name order, so equal inputs give identical bytes.
func Encode(w io.Writer, f32 tensor.Named, i64 map[string]Int64Tensor, meta map[string]string, opts ...Option) error {
	o := options{floatType: F32}
	for _, opt := range opts {
		opt(&o)
	}
	if o.floatType != F32 && o.floatType != F16 && o.floatType != BF16 {
		return fmt.Errorf("safetensors: float type %q, want F32, F16 or BF16: %w", o.floatType, ErrDType)
	}
	items := make([]item, 0, len(f32)+len(i64))
	for name, t := range f32 {
		if t == nil {
			return fmt.Errorf("safetensors: tensor %q: nil", name)
		}
		items = append(items, item{name: name, dtype: o.floatType, shape: t.Shape, f32: t.Data})
	}
	for name, t := range i64 {
		if _, dup := f32[name]; dup {
			return fmt.Errorf("safetensors: tensor %q: present in both the float and the int64 sets", name)
		}
		items = append(items, item{name: name, dtype: I64, shape: t.Shape, i64: t.Data})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].name < items[j].name })

	hb, err := encodeHeader(items, meta)
	if err != nil {
		return err
	}
	// Pad with spaces so the tensor data starts 8-byte aligned, as the
	// reference writer does.
	for (8+len(hb))%8 != 0 {
		hb = append(hb, ' ')
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var lenb [8]byte
	binary.LittleEndian.PutUint64(lenb[:], uint64(len(hb)))
	bw.Write(lenb[:])
	bw.Write(hb)
	for _, it := range items {
		writeData(bw, it)
	}
	// bufio.Writer keeps the first error; Flush reports it.
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	return nil
}

// encodeHeader is the JSON header of items (in order, with their data
// offsets) and meta, refusing a reserved name, a negative dimension and a
// shape its values do not fill.
func encodeHeader(items []item, meta map[string]string) ([]byte, error) {
	header := make(map[string]any, len(items)+1)
	if len(meta) > 0 {
		header[metadataKey] = meta
	}
	offset := int64(0)
	for _, it := range items {
		if it.name == "" || it.name == metadataKey {
			return nil, fmt.Errorf("safetensors: tensor name %q is reserved", it.name)
		}
		n := 1
		for _, d := range it.shape {
			if d < 0 {
				return nil, fmt.Errorf("safetensors: tensor %q: negative dimension in shape %v", it.name, it.shape)
			}
			n *= d
		}
		if have := len(it.f32) + len(it.i64); have != n {
			return nil, fmt.Errorf("safetensors: tensor %q: shape %v needs %d values, got %d", it.name, it.shape, n, have)
		}
		size := int64(n) * int64(it.dtype.Size())
		shape := it.shape
		if shape == nil {
			shape = []int{}
		}
		header[it.name] = map[string]any{
			"dtype":        string(it.dtype),
			"shape":        shape,
			"data_offsets": [2]int64{offset, offset + size},
		}
		offset += size
	}
	hb, err := json.Marshal(header) // map keys come out sorted
	if err != nil {
		return nil, fmt.Errorf("safetensors: header: %w", err)
	}
	return hb, nil
}

// writeData writes one tensor's values, little-endian in its dtype.
func writeData(bw *bufio.Writer, it item) {
	var buf [8]byte
	switch it.dtype {
	case F32:
		for _, v := range it.f32 {
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(v))
			bw.Write(buf[:4])
		}
	case F16:
		for _, v := range it.f32 {
			binary.LittleEndian.PutUint16(buf[:], Float32ToHalf(v))
			bw.Write(buf[:2])
		}
	case BF16:
		for _, v := range it.f32 {
			binary.LittleEndian.PutUint16(buf[:], Float32ToBF16(v))
			bw.Write(buf[:2])
		}
	case I64:
		for _, v := range it.i64 {
			binary.LittleEndian.PutUint64(buf[:], uint64(v))
			bw.Write(buf[:8])
		}
	}
}

// Write stores f32, i64 and meta as a safetensors file at path (see Encode).
// It writes a temporary file in the same directory, syncs it and renames it
// over path, so a crash never leaves a partial file or loses the previous
// one.
func Write(path string, f32 tensor.Named, i64 map[string]Int64Tensor, meta map[string]string, opts ...Option) error {
	err := atomicfile.Write(path, func(w io.Writer) error {
		return Encode(w, f32, i64, meta, opts...)
	})
	if err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	return nil
}
