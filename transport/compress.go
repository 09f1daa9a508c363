package transport

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport/pb"
)

// Compressed messages (federation.compress, package compress). Both
// directions are compressed when the federation says so, as FLARE does:
// the coordinator encodes every task's tensors (fit and evaluation) and
// tells the site, in TaskHeader.upload_compression, how to encode its
// upload; it refuses an upload encoded otherwise. `pfedmma run` applies
// the same encode→decode to its simulated messages, so both agree bit for
// bit.

// encodeMessage serialises named tensors for the wire with codec: the
// safetensors payload of encodeBlob without compression, else every
// tensor's encoding concatenated in sorted name order (Blob.compression).
func encodeMessage(n tensor.Named, codec compress.Codec) ([]byte, *pb.Blob, error) {
	if codec == "" || codec == compress.None {
		return encodeBlob(n)
	}
	b := &pb.Blob{Compression: string(codec)}
	if codec == compress.Int8 {
		b.BlockSize = compress.BlockSize
	}
	var data []byte
	for _, name := range sortedNames(n) {
		t := n[name]
		var err error
		if data, err = codec.Append(data, t.Data); err != nil {
			return nil, nil, &tensorError{name: name, codec: codec, err: err}
		}
		shape := make([]int64, len(t.Shape))
		for i, d := range t.Shape {
			shape[i] = int64(d)
		}
		b.Tensors = append(b.Tensors, &pb.TensorInfo{Name: name, Dtype: string(safetensors.F32), Shape: shape})
	}
	b.Size = int64(len(data))
	sum := sha256.Sum256(data)
	b.Sha256 = sum[:]
	return data, b, nil
}

// tensorError is a tensor the codec refused.
type tensorError struct {
	name  string
	codec compress.Codec
	err   error
}

func (e *tensorError) Error() string {
	return fmt.Sprintf("tensor %q (%s): %v", e.name, e.codec, e.err)
}

func (e *tensorError) Unwrap() error { return e.err }

func sortedNames(n tensor.Named) []string {
	names := make([]string, 0, len(n))
	for k := range n {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// codecOf is the codec a Blob declares ("" and "none": none).
func codecOf(b *pb.Blob) (compress.Codec, *refusal) {
	c, err := compress.Parse(b.GetCompression())
	if err != nil {
		return "", refuse(ReasonMalformed, "header field compression: %v", err)
	}
	return c, nil
}

// checkCompression refuses an upload not encoded as the federation's
// federation.compress says.
func (s *Server) checkCompression(b *pb.Blob) *refusal {
	got, rf := codecOf(b)
	if rf != nil {
		return rf
	}
	if want := cmpCodec(s.cfg.Compress); got != want {
		return refuse(ReasonConfig, "upload compressed as %s, the federation's federation.compress is %s", got, want)
	}
	return nil
}

func cmpCodec(c compress.Codec) compress.Codec {
	if c == "" {
		return compress.None
	}
	return c
}

// uploadCompression is what a fit task tells its site (TaskHeader): ""
// without compression, so that a site of an older build is not confused.
func (s *Server) uploadCompression() string {
	if c := cmpCodec(s.cfg.Compress); c != compress.None {
		return string(c)
	}
	return ""
}

// decodeCompressed is decodeBlob for a compressed payload (after its size
// and SHA-256 were checked): the declared tensors are decoded in order,
// with the checks decodeBlob makes; a malformed encoding is refused naming
// the tensor and the field.
func decodeCompressed(data []byte, b *pb.Blob, spec Spec, lim Limits) (tensor.Named, *refusal) {
	codec, rf := codecOf(b)
	if rf != nil {
		return nil, rf
	}
	if codec == compress.Int8 && b.BlockSize != compress.BlockSize {
		return nil, refuse(ReasonMalformed, "header field block_size: %d, int8 blocks here hold %d values", b.BlockSize, compress.BlockSize)
	}
	out := make(tensor.Named, len(b.Tensors))
	off := 0
	for _, ti := range b.Tensors {
		name := ti.Name
		if _, dup := out[name]; dup {
			return nil, refuse(ReasonMalformed, "tensor %q declared twice", name)
		}
		if ti.Dtype != string(safetensors.F32) {
			return nil, refuse(ReasonDType, "tensor %q has dtype %s, want F32", name, ti.Dtype)
		}
		shape := make([]int, len(ti.Shape))
		n := int64(1)
		for i, d := range ti.Shape {
			if d < 0 {
				return nil, refuse(ReasonMalformed, "tensor %q: dimension %d of its shape %v is negative", name, i, ti.Shape)
			}
			if d > 0 && n > lim.MaxTensorBytes/4/d {
				return nil, refuse(ReasonTooLarge, "tensor %q of shape %v has more than %d bytes (limit)", name, ti.Shape, lim.MaxTensorBytes)
			}
			shape[i] = int(d)
			n *= d
		}
		if rf := checkShared(spec, name, shape); rf != nil {
			return nil, rf
		}
		size := codec.Size(int(n))
		if len(data)-off < size {
			return nil, refuse(ReasonMalformed, "tensor %q (%s): payload ends %d bytes into it, its encoding takes %d", name, codec, len(data)-off, size)
		}
		t := &tensor.Tensor{Shape: shape, Data: make([]float32, n)}
		if err := codec.Decode(t.Data, data[off:off+size]); err != nil {
			var fe *compress.FormatError
			if errors.As(err, &fe) {
				return nil, refuse(ReasonMalformed, "tensor %q (%s payload): %s: %s", name, codec, fe.Field, fe.Msg)
			}
			return nil, refuse(ReasonMalformed, "tensor %q (%s payload): %v", name, codec, err)
		}
		off += size
		out[name] = t
	}
	if off != len(data) {
		return nil, refuse(ReasonMalformed, "%s payload holds %d bytes beyond its %d declared tensors", codec, len(data)-off, len(b.Tensors))
	}
	for _, name := range sortedSpec(spec) {
		if _, ok := out[name]; !ok {
			return nil, refuse(ReasonMissingName, "shared tensor %q is missing", name)
		}
	}
	return out, nil
}

func sortedSpec(spec Spec) []string {
	names := make([]string, 0, len(spec))
	for k := range spec {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// isCompressed reports whether b declares a compressed payload.
func isCompressed(b *pb.Blob) bool {
	return b != nil && b.Compression != "" && b.Compression != string(compress.None)
}
