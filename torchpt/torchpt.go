// Package torchpt reads the tensors of PyTorch checkpoints without Python:
// the zip archives written by torch.save (state dicts such as
// pytorch_model.bin, .pth and .pt files, PyTorch ≥ 1.6) and TorchScript
// archives written by torch.jit.save (OpenAI's released CLIP .pt files,
// e.g. ViT-B-16.pt).
//
// The archive's data.pkl is unpickled with a whitelist of globals
// (torch._utils._rebuild_tensor_v2 and _rebuild_parameter, the
// torch.*Storage types, collections.OrderedDict, and TorchScript's
// __torch__.* classes as inert attribute holders): any other global is
// refused and nothing is executed. Tensor names are the dotted paths of
// the tensors in the unpickled tree, as in a state dict
// ("visual.transformer.resblocks.0.attn.in_proj_weight"). Tensor data is
// read lazily from the archive's data/<key> records, with their CRC
// checked.
//
// The API mirrors safetensors.File: Names, Info, Float32Into, Metadata,
// Close.
package torchpt

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/nlpodyssey/gopickle/types"

	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/safetensors"
)

// maxPickle bounds the size of data.pkl.
const maxPickle = 1 << 28

// ErrLegacy marks a checkpoint in the pre-1.6 (non-zip) torch.save format.
var ErrLegacy = errors.New("legacy (PyTorch < 1.6) torch.save format is not supported; " +
	"re-save it with a recent torch.save or convert it to safetensors")

// Tensor describes one tensor of a checkpoint.
type Tensor struct {
	Name  string
	DType safetensors.DType
	Shape []int

	ref    *tensorRef
	record *zip.File
}

// File is an opened PyTorch checkpoint.
type File struct {
	name        string
	closer      io.Closer
	torchScript bool
	tensors     map[string]*Tensor
	names       []string // in pickle order
}

// Open reads the structure of the checkpoint at path (data.pkl and the
// archive directory, not the tensor data).
func Open(path string) (*File, error) {
	fh, err := inputfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("torchpt: %w", err)
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("torchpt: %w", err)
	}
	f, err := NewReader(fh, st.Size(), path)
	if err != nil {
		fh.Close()
		return nil, err
	}
	f.closer = fh
	return f, nil
}

// Parse reads a checkpoint held in memory; name is used in messages.
func Parse(data []byte, name string) (*File, error) {
	return NewReader(bytes.NewReader(data), int64(len(data)), name)
}

// NewReader reads a checkpoint of size bytes from r; name is used in
// messages.
func NewReader(r io.ReaderAt, size int64, name string) (f *File, err error) {
	var head [4]byte
	if n, _ := r.ReadAt(head[:], 0); n < 4 || string(head[:]) != "PK\x03\x04" {
		if n >= 2 && head[0] == 0x80 {
			return nil, fmt.Errorf("torchpt %s: %w", name, ErrLegacy)
		}
		return nil, fmt.Errorf("torchpt %s: not a PyTorch zip archive (truncated or not a checkpoint)", name)
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("torchpt %s: %w", name, err)
	}
	f = &File{name: name, tensors: map[string]*Tensor{}}
	records := map[string]*zip.File{}
	prefix := ""
	for _, zf := range zr.File {
		records[zf.Name] = zf
		if dir, ok := strings.CutSuffix(zf.Name, "/data.pkl"); ok && dir != "" && !strings.Contains(dir, "/") {
			if prefix != "" {
				return nil, fmt.Errorf("torchpt %s: two archives (%s/, %s/) in one file", name, prefix, dir)
			}
			prefix = dir
		}
	}
	if prefix == "" {
		return nil, fmt.Errorf("torchpt %s: no <archive>/data.pkl record", name)
	}
	prefix += "/"
	_, f.torchScript = records[prefix+"constants.pkl"]
	if bo, ok := records[prefix+"byteorder"]; ok {
		b, err := readRecord(bo, 16)
		if err != nil {
			return nil, fmt.Errorf("torchpt %s: %s: %w", name, bo.Name, err)
		}
		if s := strings.TrimSpace(string(b)); s != "little" {
			return nil, fmt.Errorf("torchpt %s: byte order %q is not supported (only little-endian)", name, s)
		}
	}
	pkl := records[prefix+"data.pkl"]
	b, err := readRecord(pkl, maxPickle)
	if err != nil {
		return nil, fmt.Errorf("torchpt %s: %s: %w", name, pkl.Name, err)
	}
	root, err := unpickle(b)
	if err != nil {
		return nil, fmt.Errorf("torchpt %s: %s: %w", name, pkl.Name, err)
	}
	w := walker{f: f, seen: map[any]bool{}}
	if err := w.walk("", root, 0); err != nil {
		return nil, fmt.Errorf("torchpt %s: %w", name, err)
	}
	for _, n := range f.names {
		t := f.tensors[n]
		if err := f.bind(t, records, prefix); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// readRecord reads a whole record of at most limit bytes, checking its CRC.
func readRecord(zf *zip.File, limit uint64) ([]byte, error) {
	if zf.UncompressedSize64 > limit {
		return nil, fmt.Errorf("record of %d bytes, over the limit of %d", zf.UncompressedSize64, limit)
	}
	rc, err := zf.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, int64(zf.UncompressedSize64)+1))
	if err != nil {
		return nil, err
	}
	if uint64(len(b)) != zf.UncompressedSize64 {
		return nil, fmt.Errorf("record holds %d bytes, its header says %d", len(b), zf.UncompressedSize64)
	}
	return b, nil
}

// bind checks a tensor against its storage record: the record must exist,
// hold exactly the storage's elements, and contain the strided view.
func (f *File) bind(t *Tensor, records map[string]*zip.File, prefix string) error {
	r := t.ref
	st := r.storage
	size := int64(st.dtype.Size())
	if size == 0 {
		return fmt.Errorf("torchpt %s: tensor %q: unsupported element type", f.name, t.Name)
	}
	rec := records[prefix+"data/"+st.key]
	if rec == nil {
		return fmt.Errorf("torchpt %s: tensor %q: missing storage record %sdata/%s", f.name, t.Name, prefix, st.key)
	}
	if rec.UncompressedSize64 != uint64(st.numel*size) {
		return fmt.Errorf("torchpt %s: tensor %q: storage record %s holds %d bytes, want %d (%d %s elements)",
			f.name, t.Name, rec.Name, rec.UncompressedSize64, st.numel*size, st.numel, st.dtype)
	}
	if err := checkDeclaredSize(rec); err != nil {
		return fmt.Errorf("torchpt %s: tensor %q: storage record %s: %w", f.name, t.Name, rec.Name, err)
	}
	numel := int64(1)
	last := r.offset // index of the view's last element
	for i, d := range r.shape {
		if d == 0 {
			numel = 0
			break
		}
		numel *= int64(d) // bounded: each dim ≤ maxElements, checked below
		if numel > maxElements {
			return fmt.Errorf("torchpt %s: tensor %q: shape %v too large", f.name, t.Name, r.shape)
		}
		if s := r.stride[i]; s > 0 {
			if int64(d-1) > (maxElements-last)/s {
				return fmt.Errorf("torchpt %s: tensor %q: shape %v stride %v run past any storage", f.name, t.Name, r.shape, r.stride)
			}
			last += int64(d-1) * s
		}
	}
	if numel > 0 && last >= st.numel {
		return fmt.Errorf("torchpt %s: tensor %q: shape %v stride %v offset %d need %d elements, storage %s has %d",
			f.name, t.Name, r.shape, r.stride, r.offset, last+1, st.key, st.numel)
	}
	t.record = rec
	return nil
}

// maxInflateRatio bounds how much larger than its compressed bytes a
// compressed storage record may declare itself (beyond inflateSlack):
// torch.save stores records uncompressed, and float weights deflate by a
// few percent, so a larger ratio is a decompression bomb.
const (
	maxInflateRatio = 64
	inflateSlack    = 64 << 20
)

// checkDeclaredSize compares a record's declared size with the bytes the
// archive holds for it: a stored record must hold exactly what it
// declares; a compressed one may not declare more than maxInflateRatio
// times its compressed size (plus inflateSlack).
func checkDeclaredSize(rec *zip.File) error {
	declared, actual := rec.UncompressedSize64, rec.CompressedSize64
	switch {
	case rec.Method == zip.Store && declared != actual:
		return fmt.Errorf("declares %d bytes but holds %d", declared, actual)
	case rec.Method != zip.Store && declared > inflateSlack && declared/maxInflateRatio > actual:
		return fmt.Errorf("declares %d bytes (%.1f GiB) from %d compressed bytes: a decompression bomb, refused (a real checkpoint stores its tensors uncompressed)",
			declared, float64(declared)/(1<<30), actual)
	}
	return nil
}

// walker collects the tensors of an unpickled tree.
type walker struct {
	f    *File
	seen map[any]bool // containers already visited (shared or cyclic)
}

func join(prefix string, key any) (string, bool) {
	k, ok := key.(string)
	if !ok || k == "" {
		return "", false
	}
	if prefix == "" {
		return k, true
	}
	return prefix + "." + k, true
}

// walk visits v found at path name: tensors are recorded; dicts, ordered
// dicts and TorchScript objects are descended into by their string keys;
// everything else is ignored.
func (w *walker) walk(name string, v any, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%q: nested more than %d levels", name, maxDepth)
	}
	var entries []types.DictEntry
	switch x := v.(type) {
	case *tensorRef:
		if name == "" {
			return fmt.Errorf("the pickle holds a single tensor, not a state dict or module")
		}
		if _, dup := w.f.tensors[name]; dup {
			return fmt.Errorf("tensor %q appears twice", name)
		}
		w.f.tensors[name] = &Tensor{Name: name, DType: x.storage.dtype, Shape: x.shape, ref: x}
		w.f.names = append(w.f.names, name)
		return nil
	case *types.Dict:
		if w.seen[x] {
			return nil
		}
		w.seen[x] = true
		entries = *x
	case *types.OrderedDict:
		if w.seen[x] {
			return nil
		}
		w.seen[x] = true
		for e := x.List.Front(); e != nil; e = e.Next() {
			en := e.Value.(*types.OrderedDictEntry)
			entries = append(entries, types.DictEntry{Key: en.Key, Value: en.Value})
		}
	case *object:
		if w.seen[x] {
			return nil
		}
		w.seen[x] = true
		entries = x.attrs
	default:
		return nil
	}
	for _, e := range entries {
		child, ok := join(name, e.Key)
		if !ok {
			continue
		}
		if err := w.walk(child, e.Value, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// Name returns the file name given to Open.
func (f *File) Name() string { return f.name }

// TorchScript reports whether the file is a TorchScript archive.
func (f *File) TorchScript() bool { return f.torchScript }

// Len returns the number of tensors.
func (f *File) Len() int { return len(f.names) }

// Names lists the tensors, sorted.
func (f *File) Names() []string {
	return slices.Sorted(slices.Values(f.names))
}

// Tensors lists the tensors in the order the pickle holds them.
func (f *File) Tensors() []Tensor {
	out := make([]Tensor, len(f.names))
	for i, n := range f.names {
		out[i] = *f.tensors[n]
	}
	return out
}

// Info returns the element type (a safetensors dtype name) and shape of a
// tensor.
func (f *File) Info(name string) (dtype string, shape []int, ok bool) {
	t, ok := f.tensors[name]
	if !ok {
		return "", nil, false
	}
	return string(t.DType), slices.Clone(t.Shape), true
}

// Metadata returns nil: PyTorch checkpoints carry no string metadata.
func (f *File) Metadata() map[string]string { return nil }

// Close releases the file.
func (f *File) Close() error {
	if f.closer != nil {
		return f.closer.Close()
	}
	return nil
}

// Float32 reads a float tensor and returns its values (C order) and
// shape.
func (f *File) Float32(name string) ([]float32, []int, error) {
	t, ok := f.tensors[name]
	if !ok {
		return nil, nil, fmt.Errorf("torchpt %s: no tensor %q", f.name, name)
	}
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	dst := make([]float32, n)
	shape, err := f.Float32Into(name, dst)
	return dst, shape, err
}

// Float32Into converts a float tensor (F32, F16, BF16, F64) into dst,
// which must have exactly its element count, and returns its shape.
func (f *File) Float32Into(name string, dst []float32) ([]int, error) {
	t, ok := f.tensors[name]
	if !ok {
		return nil, fmt.Errorf("torchpt %s: no tensor %q", f.name, name)
	}
	if !t.DType.IsFloat() {
		return nil, fmt.Errorf("torchpt %s: tensor %q: dtype %s is not a float type", f.name, name, t.DType)
	}
	r := t.ref
	numel := 1
	for _, d := range r.shape {
		numel *= d
	}
	if len(dst) != numel {
		return nil, fmt.Errorf("torchpt %s: tensor %q: shape %v has %d elements, destination %d", f.name, name, r.shape, numel, len(dst))
	}
	if numel == 0 {
		return slices.Clone(t.Shape), nil
	}
	size := t.DType.Size()
	// Only the span of the storage the view covers is read (a small
	// tensor viewing a huge storage reads a little), all of it when the
	// view covers the record (then its CRC is checked too).
	lo, hi := r.offset, r.offset
	for i, d := range r.shape {
		hi += int64(d-1) * r.stride[i] // bounded by bind
	}
	span := (hi - lo + 1) * int64(size)
	var data []byte
	var err error
	if lo == 0 && uint64(span) == t.record.UncompressedSize64 {
		data, err = readRecord(t.record, t.record.UncompressedSize64)
	} else if span <= 4*int64(numel)*int64(size)+1<<20 {
		data, err = readSpan(t.record, lo*int64(size), span)
	} else {
		err = f.readSparse(t, dst)
		if err == nil {
			return slices.Clone(t.Shape), nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("torchpt %s: tensor %q: %s: %w", f.name, name, t.record.Name, err)
	}
	// Walk the strided view in C order.
	idx := make([]int, len(r.shape))
	off := r.offset
	for i := range dst {
		dst[i] = decode(t.DType, data[(off-lo)*int64(size):])
		off = r.next(idx, off)
	}
	return slices.Clone(t.Shape), nil
}

// next moves the C-order index idx of the view one element on and returns
// the storage offset (in elements) of that element, given off, the offset
// of the element at idx.
func (r *tensorRef) next(idx []int, off int64) int64 {
	for k := len(idx) - 1; k >= 0; k-- {
		idx[k]++
		off += r.stride[k]
		if idx[k] < r.shape[k] {
			break
		}
		off -= int64(idx[k]) * r.stride[k]
		idx[k] = 0
	}
	return off
}

// readSpan reads n bytes at offset start of a record, streaming past the
// bytes before them.
func readSpan(zf *zip.File, start, n int64) ([]byte, error) {
	rc, err := zf.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if _, err := io.CopyN(io.Discard, rc, start); err != nil {
		return nil, fmt.Errorf("reading to byte %d: %w", start, err)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(rc, b); err != nil {
		return nil, fmt.Errorf("reading bytes %d..%d: %w", start, start+n, err)
	}
	return b, nil
}

// readSparse fills dst with a view whose elements lie far apart in its
// storage: the elements' offsets are sorted and the record is streamed
// once, keeping one element at a time.
func (f *File) readSparse(t *Tensor, dst []float32) error {
	r := t.ref
	size := int64(t.DType.Size())
	offs := make([]int64, len(dst))
	order := make([]int, len(dst))
	idx := make([]int, len(r.shape))
	off := r.offset
	for i := range dst {
		offs[i], order[i] = off, i
		off = r.next(idx, off)
	}
	slices.SortFunc(order, func(a, b int) int { return int(offs[a] - offs[b]) })
	rc, err := t.record.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	var pos int64 // bytes read so far
	el := make([]byte, size)
	for k, i := range order {
		at := offs[i] * size
		if k > 0 && offs[i] == offs[order[k-1]] {
			dst[i] = dst[order[k-1]] // a zero stride repeats an element
			continue
		}
		if _, err := io.CopyN(io.Discard, rc, at-pos); err != nil {
			return fmt.Errorf("reading to byte %d: %w", at, err)
		}
		if _, err := io.ReadFull(rc, el); err != nil {
			return fmt.Errorf("reading byte %d: %w", at, err)
		}
		pos = at + size
		dst[i] = decode(t.DType, el)
	}
	return nil
}

// decode converts the little-endian element at the start of b.
func decode(dt safetensors.DType, b []byte) float32 {
	le := binary.LittleEndian
	switch dt {
	case safetensors.F32:
		return math.Float32frombits(le.Uint32(b))
	case safetensors.F16:
		return safetensors.HalfToFloat32(le.Uint16(b))
	case safetensors.BF16:
		return safetensors.BF16ToFloat32(le.Uint16(b))
	default: // F64
		return float32(math.Float64frombits(le.Uint64(b)))
	}
}
