// Package safetensors reads and writes the safetensors tensor file format:
// an 8-byte little-endian header length, a JSON header mapping each tensor
// name to its dtype, shape and byte range, an optional "__metadata__" string
// map, then the raw little-endian tensor bytes.
//
// The reader checks every header field against the file before any tensor
// is touched, so a damaged or hostile file yields an error, never a panic or
// an oversized allocation. Floating-point tensors (F32, F16, BF16, F64) are
// read as float32, integer tensors (I64, I32) as int64.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/tensor"
)

// MaxHeaderSize is the largest JSON header accepted, in bytes (as in the
// reference implementation).
const MaxHeaderSize = 100 << 20

// metadataKey is the reserved header entry holding the string metadata.
const metadataKey = "__metadata__"

// Errors that callers may test for with errors.Is.
var (
	// ErrFormat marks a file that is not valid safetensors.
	ErrFormat = errors.New("invalid safetensors file")
	// ErrNotFound marks a request for a tensor the file does not hold.
	ErrNotFound = errors.New("no such tensor")
	// ErrDType marks a tensor whose element type cannot be converted as asked.
	ErrDType = errors.New("unsupported dtype")
)

// File is a parsed safetensors file. Its tensor bytes are either held in
// memory (Open, Parse) or read on demand from an open file (OpenLazy, which
// needs Close). Its methods are safe for concurrent use, except Close.
type File struct {
	name    string      // path or label used in error messages
	data    []byte      // tensor bytes (after the header), when in memory
	r       io.ReaderAt // source of the tensor bytes otherwise
	base    int64       // offset of the tensor bytes within r
	closer  io.Closer   // closed by Close, if any
	entries map[string]entry
	meta    map[string]string
}

type entry struct {
	dtype      DType
	shape      []int
	begin, end int // byte range within the tensor bytes
}

type headerEntry struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// Open reads the whole safetensors file at path into memory and parses it.
func Open(path string) (*File, error) {
	data, err := inputfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	return Parse(data, path)
}

// OpenLazy parses the header of the safetensors file at path and reads
// tensor bytes only when a tensor is requested, so memory holds one tensor's
// bytes at a time. The caller must Close the File.
func OpenLazy(path string) (*File, error) {
	fd, err := inputfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	st, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	f, err := NewReader(fd, st.Size(), path)
	if err != nil {
		fd.Close()
		return nil, err
	}
	f.closer = fd
	return f, nil
}

// NewReader parses the header of a safetensors file of size bytes read
// through r; tensor bytes are read from r on demand. name labels errors.
func NewReader(r io.ReaderAt, size int64, name string) (*File, error) {
	var lenb [8]byte
	if size < 8 {
		return nil, fmt.Errorf("safetensors %s: truncated: %d bytes, need at least 8 for the header length: %w", name, size, ErrFormat)
	}
	if _, err := r.ReadAt(lenb[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", name, err)
	}
	n := binary.LittleEndian.Uint64(lenb[:])
	if err := checkHeaderLen(n, size-8); err != nil {
		return nil, fmt.Errorf("safetensors %s: %w: %w", name, err, ErrFormat)
	}
	header := make([]byte, n)
	if _, err := r.ReadAt(header, 8); err != nil {
		return nil, fmt.Errorf("safetensors %s: header: %w", name, err)
	}
	f := &File{name: name, r: r, base: 8 + int64(n)}
	if err := f.parseHeader(header, size-8-int64(n)); err != nil {
		return nil, err
	}
	return f, nil
}

// Close releases the file behind an OpenLazy File; for in-memory Files it
// does nothing.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	err := f.closer.Close()
	f.closer = nil
	return err
}

func checkHeaderLen(n uint64, avail int64) error {
	switch {
	case n > MaxHeaderSize:
		return fmt.Errorf("header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	case n < 2:
		return fmt.Errorf("header length %d is too small for a JSON object", n)
	case n > uint64(avail):
		return fmt.Errorf("truncated: header length %d but only %d bytes follow", n, avail)
	}
	return nil
}

// Parse parses a safetensors file held in data; name labels error messages
// (usually the file's path). The returned File keeps a reference to data.
func Parse(data []byte, name string) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("safetensors %s: truncated: %d bytes, need at least 8 for the header length: %w", name, len(data), ErrFormat)
	}
	n := binary.LittleEndian.Uint64(data[:8])
	if err := checkHeaderLen(n, int64(len(data)-8)); err != nil {
		return nil, fmt.Errorf("safetensors %s: %w: %w", name, err, ErrFormat)
	}
	f := &File{name: name, data: data[8+n:]}
	if err := f.parseHeader(data[8:8+n], int64(len(f.data))); err != nil {
		return nil, err
	}
	return f, nil
}

// parseHeader checks the JSON header against bodyLen tensor bytes.
func (f *File) parseHeader(header []byte, bodyLen int64) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("safetensors %s: %s: %w", f.name, fmt.Sprintf(format, args...), ErrFormat)
	}
	raw, err := decodeObject(header)
	if err != nil {
		return fail("header JSON: %v", err)
	}
	f.entries = make(map[string]entry, len(raw))
	type span struct {
		name       string
		begin, end int
	}
	spans := make([]span, 0, len(raw))
	for key, msg := range raw {
		if key == metadataKey {
			if err := json.Unmarshal(msg, &f.meta); err != nil {
				return fail("%s: want an object of strings: %v", metadataKey, err)
			}
			continue
		}
		e, err := checkEntry(msg, bodyLen)
		if err != nil {
			return fail("tensor %q: %v", key, err)
		}
		f.entries[key] = e
		spans = append(spans, span{key, e.begin, e.end})
	}
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].begin != spans[j].begin {
			return spans[i].begin < spans[j].begin
		}
		return spans[i].end < spans[j].end
	})
	for i := 1; i < len(spans); i++ {
		a, b := spans[i-1], spans[i]
		if b.begin < a.end {
			return fail("tensor %q bytes [%d,%d) overlap tensor %q bytes [%d,%d)", b.name, b.begin, b.end, a.name, a.begin, a.end)
		}
	}
	return nil
}

// bytes returns the stored bytes of entry e of tensor name.
func (f *File) bytes(name string, e entry) ([]byte, error) {
	if f.data != nil || f.r == nil {
		return f.data[e.begin:e.end], nil
	}
	b := make([]byte, e.end-e.begin)
	if _, err := f.r.ReadAt(b, f.base+int64(e.begin)); err != nil {
		return nil, fmt.Errorf("safetensors %s: tensor %q: %w", f.name, name, err)
	}
	return b, nil
}

// decodeObject splits a JSON object into its members, rejecting duplicate
// keys and trailing data.
func decodeObject(b []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("want an object, got %v", tok)
	}
	out := make(map[string]json.RawMessage)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("want a key, got %v", tok)
		}
		var msg json.RawMessage
		if err := dec.Decode(&msg); err != nil {
			return nil, fmt.Errorf("member %q: %w", key, err)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		out[key] = msg
	}
	if _, err := dec.Token(); err != nil { // closing brace
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("data after the header object")
	}
	return out, nil
}

// checkEntry validates one tensor's header entry against a body of size
// bodyLen bytes.
func checkEntry(msg json.RawMessage, bodyLen int64) (entry, error) {
	var h headerEntry
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return entry{}, err
	}
	dt := DType(h.DType)
	size := dt.Size()
	if size == 0 {
		return entry{}, fmt.Errorf("unknown dtype %q", h.DType)
	}
	if h.Shape == nil {
		return entry{}, errors.New("missing shape")
	}
	if len(h.DataOffsets) != 2 {
		return entry{}, fmt.Errorf("data_offsets has %d values, want 2", len(h.DataOffsets))
	}
	shape := make([]int, len(h.Shape))
	numel := int64(1)
	for i, d := range h.Shape {
		if d < 0 {
			return entry{}, fmt.Errorf("negative dimension in shape %v", h.Shape)
		}
		// Every byte must lie in the file, so a valid size is below bodyLen;
		// checking against it keeps the product from overflowing.
		if d > 0 && numel > bodyLen/d {
			numel = bodyLen + 1
		} else {
			numel *= d
		}
		shape[i] = int(d)
	}
	begin, end := h.DataOffsets[0], h.DataOffsets[1]
	if begin < 0 || end < begin || end > bodyLen {
		return entry{}, fmt.Errorf("data_offsets [%d,%d] outside the %d data bytes", begin, end, bodyLen)
	}
	if numel > bodyLen || numel*int64(size) != end-begin {
		return entry{}, fmt.Errorf("shape %v of %s needs %d bytes, data_offsets [%d,%d] hold %d",
			h.Shape, dt, satMul(numel, int64(size)), begin, end, end-begin)
	}
	return entry{dtype: dt, shape: shape, begin: int(begin), end: int(end)}, nil
}

func satMul(a, b int64) int64 {
	if a != 0 && a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// Name is the path or label the file was opened with.
func (f *File) Name() string { return f.name }

// Len is the number of tensors in the file.
func (f *File) Len() int { return len(f.entries) }

// Names lists the tensor names in sorted order.
func (f *File) Names() []string {
	names := make([]string, 0, len(f.entries))
	for k := range f.entries {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Info returns a tensor's dtype and shape; ok is false when there is no such
// tensor. The shape is a fresh copy.
func (f *File) Info(name string) (dtype string, shape []int, ok bool) {
	e, ok := f.entries[name]
	if !ok {
		return "", nil, false
	}
	return string(e.dtype), slices.Clone(e.shape), true
}

// Metadata returns a copy of the "__metadata__" map (nil when absent).
func (f *File) Metadata() map[string]string {
	if f.meta == nil {
		return nil
	}
	out := make(map[string]string, len(f.meta))
	for k, v := range f.meta {
		out[k] = v
	}
	return out
}

func (f *File) lookup(name string) (entry, error) {
	e, ok := f.entries[name]
	if !ok {
		return entry{}, fmt.Errorf("safetensors %s: tensor %q: %w", f.name, name, ErrNotFound)
	}
	return e, nil
}

// Float32 reads a floating-point tensor (F32, F16, BF16 or F64) as float32.
func (f *File) Float32(name string) (*tensor.Tensor, error) {
	e, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	t := tensor.New(e.shape...)
	if err := f.decodeFloat(name, e, t.Data); err != nil {
		return nil, err
	}
	return t, nil
}

// Float32Into reads a floating-point tensor into dst, which must have exactly
// as many elements as the tensor; it returns the tensor's shape.
func (f *File) Float32Into(name string, dst []float32) ([]int, error) {
	e, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	if n := tensor.Numel(e.shape); n != len(dst) {
		return nil, fmt.Errorf("safetensors %s: tensor %q: shape %v has %d elements, destination %d",
			f.name, name, e.shape, n, len(dst))
	}
	if err := f.decodeFloat(name, e, dst); err != nil {
		return nil, err
	}
	return slices.Clone(e.shape), nil
}

func (f *File) decodeFloat(name string, e entry, dst []float32) error {
	if !e.dtype.IsFloat() {
		return fmt.Errorf("safetensors %s: tensor %q: dtype %s, want F32, F16, BF16 or F64: %w",
			f.name, name, e.dtype, ErrDType)
	}
	b, err := f.bytes(name, e)
	if err != nil {
		return err
	}
	switch e.dtype {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = HalfToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	default:
		return fmt.Errorf("safetensors %s: tensor %q: dtype %s, want F32, F16, BF16 or F64: %w",
			f.name, name, e.dtype, ErrDType)
	}
	return nil
}

// Int64 reads an integer tensor (I64 or I32) and returns its values and
// shape.
func (f *File) Int64(name string) ([]int64, []int, error) {
	e, err := f.lookup(name)
	if err != nil {
		return nil, nil, err
	}
	if !e.dtype.IsInt() {
		return nil, nil, fmt.Errorf("safetensors %s: tensor %q: dtype %s, want I64 or I32: %w",
			f.name, name, e.dtype, ErrDType)
	}
	b, err := f.bytes(name, e)
	if err != nil {
		return nil, nil, err
	}
	out := make([]int64, tensor.Numel(e.shape))
	switch e.dtype {
	case I64:
		for i := range out {
			out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
	case I32:
		for i := range out {
			out[i] = int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
	default:
		return nil, nil, fmt.Errorf("safetensors %s: tensor %q: dtype %s, want I64 or I32: %w",
			f.name, name, e.dtype, ErrDType)
	}
	return out, slices.Clone(e.shape), nil
}

// Float32All reads every floating-point tensor of the file; integer and
// other tensors are skipped.
func (f *File) Float32All() (tensor.Named, error) {
	out := make(tensor.Named)
	for name, e := range f.entries {
		if !e.dtype.IsFloat() {
			continue
		}
		t, err := f.Float32(name)
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}

// String describes the file in one line.
func (f *File) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "safetensors %s: %d tensors", f.name, len(f.entries))
	if len(f.meta) > 0 {
		fmt.Fprintf(&sb, ", %d metadata keys", len(f.meta))
	}
	return sb.String()
}
