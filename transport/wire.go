package transport

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"

	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport/pb"
)

// ProtocolVersion is the version of the wire protocol this package speaks.
// A peer of another version is refused with FAILED_PRECONDITION.
const ProtocolVersion = 1

// ChunkSize is the largest slice of tensor bytes in one message; with the
// header fields every message stays under MaxMessageSize.
const ChunkSize = 1 << 20

// MaxMessageSize bounds every gRPC message in both directions.
const MaxMessageSize = 4 << 20

// Spec declares the tensors a site uploads after local training: each name
// with its shape (float32 only). An upload must hold exactly these names. A
// nil Spec checks no names or shapes (the other checks still apply).
type Spec map[string][]int

// Limits bound what a site may upload. Zero fields take the defaults.
type Limits struct {
	// MaxTensorBytes bounds one tensor (default 64 MiB), MaxUploadBytes a
	// whole upload (default 256 MiB).
	MaxTensorBytes int64
	MaxUploadBytes int64
	// MinExamples and MaxExamples bound the example counts a site declares
	// and uploads (defaults 1 and 1<<30).
	MinExamples int64
	MaxExamples int64
}

func (l Limits) withDefaults() Limits {
	if l.MaxTensorBytes <= 0 {
		l.MaxTensorBytes = 64 << 20
	}
	if l.MaxUploadBytes <= 0 {
		l.MaxUploadBytes = 256 << 20
	}
	if l.MinExamples <= 0 {
		l.MinExamples = 1
	}
	if l.MaxExamples <= 0 {
		l.MaxExamples = 1 << 30
	}
	return l
}

// Refusal reasons, as counted by the refused-updates metric.
const (
	ReasonVersion      = "version"
	ReasonUnknownTask  = "unknown_task"
	ReasonRoundClosed  = "round_closed"
	ReasonReplay       = "replay"
	ReasonWrongRound   = "wrong_round"
	ReasonWrongSite    = "wrong_site"
	ReasonExamples     = "examples"
	ReasonTooLarge     = "too_large"
	ReasonChecksum     = "checksum"
	ReasonMalformed    = "malformed"
	ReasonUnknownName  = "unknown_tensor"
	ReasonMissingName  = "missing_tensor"
	ReasonShape        = "shape"
	ReasonDType        = "dtype"
	ReasonNonFinite    = "non_finite"
	ReasonMetrics      = "metrics"
	ReasonTaskMismatch = "task_kind"
	ReasonConfig       = "config"
	ReasonDuplicate    = "duplicate_session"
	// ReasonCoordinator is the coordinator's own failure (its storage),
	// not the site's fault.
	ReasonCoordinator = "coordinator_error"
)

// Metadata headers of the registration: the site process's session token
// and its resolved configuration ("key=value" lines).
const (
	sessionHeader  = "pfedmma-session"
	settingsHeader = "pfedmma-settings-bin"
)

// FailureKey, in a DONE task's settings, carries why the coordinator
// failed: the site then exits with an error.
const FailureKey = "coordinator_failed"

// refusal is a refused upload: a reason code and a message for the site.
type refusal struct {
	code string
	msg  string
}

func (r *refusal) Error() string { return r.msg }

func refuse(code, format string, args ...any) *refusal {
	return &refusal{code: code, msg: fmt.Sprintf(format, args...)}
}

// encodeBlob serialises named tensors as safetensors bytes (F32) and
// describes them.
func encodeBlob(n tensor.Named) ([]byte, *pb.Blob, error) {
	var buf bytes.Buffer
	if err := safetensors.Encode(&buf, n, nil, nil); err != nil {
		return nil, nil, err
	}
	b := &pb.Blob{Size: int64(buf.Len())}
	sum := sha256.Sum256(buf.Bytes())
	b.Sha256 = sum[:]
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range n {
			if !yield(k) {
				return
			}
		}
	}) {
		t := n[name]
		shape := make([]int64, len(t.Shape))
		for i, d := range t.Shape {
			shape[i] = int64(d)
		}
		b.Tensors = append(b.Tensors, &pb.TensorInfo{Name: name, Dtype: string(safetensors.F32), Shape: shape})
	}
	return buf.Bytes(), b, nil
}

// chunks cuts data into ChunkSize pieces (one empty piece for no data).
func chunks(data []byte) [][]byte {
	if len(data) == 0 {
		return [][]byte{{}}
	}
	var out [][]byte
	for len(data) > 0 {
		n := min(ChunkSize, len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

func hexSum(b []byte) string { return hex.EncodeToString(b) }

// decodeBlob checks data against its description (size, SHA-256, every
// tensor's name, dtype and shape) and, when spec is not nil, against the
// spec; it refuses NaN and ±Inf values and tensors over the limit.
func decodeBlob(data []byte, b *pb.Blob, spec Spec, lim Limits) (tensor.Named, *refusal) {
	if b == nil {
		return nil, refuse(ReasonMalformed, "no tensor description in the header")
	}
	if int64(len(data)) != b.Size {
		return nil, refuse(ReasonMalformed, "received %d bytes, header declares %d", len(data), b.Size)
	}
	sum := sha256.Sum256(data)
	if !bytes.Equal(sum[:], b.Sha256) {
		return nil, refuse(ReasonChecksum, "SHA-256 %s does not match the declared %s", hexSum(sum[:]), hexSum(b.Sha256))
	}
	if isCompressed(b) {
		return decodeCompressed(data, b, spec, lim)
	}
	f, err := safetensors.Parse(data, "upload")
	if err != nil {
		return nil, refuse(ReasonMalformed, "%v", err)
	}
	declared := map[string]*pb.TensorInfo{}
	for _, ti := range b.Tensors {
		if _, dup := declared[ti.Name]; dup {
			return nil, refuse(ReasonMalformed, "tensor %q declared twice", ti.Name)
		}
		declared[ti.Name] = ti
	}
	names := f.Names()
	if len(names) != len(declared) {
		return nil, refuse(ReasonMalformed, "payload holds %d tensors, header declares %d", len(names), len(declared))
	}
	out := make(tensor.Named, len(names))
	for _, name := range names {
		dt, shape, _ := f.Info(name)
		ti, ok := declared[name]
		if !ok {
			return nil, refuse(ReasonMalformed, "tensor %q is not declared in the header", name)
		}
		if dt != ti.Dtype || !sameShape64(shape, ti.Shape) {
			return nil, refuse(ReasonMalformed, "tensor %q is %s%v, header declares %s%v", name, dt, shape, ti.Dtype, ti.Shape)
		}
		if dt != string(safetensors.F32) {
			return nil, refuse(ReasonDType, "tensor %q has dtype %s, want F32", name, dt)
		}
		if rf := checkShared(spec, name, shape); rf != nil {
			return nil, rf
		}
		if nb := 4 * int64(tensor.Numel(shape)); nb > lim.MaxTensorBytes {
			return nil, refuse(ReasonTooLarge, "tensor %q has %d bytes, limit %d", name, nb, lim.MaxTensorBytes)
		}
		t, err := f.Float32(name)
		if err != nil {
			return nil, refuse(ReasonMalformed, "%v", err)
		}
		for i, v := range t.Data {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, refuse(ReasonNonFinite, "tensor %q element %d is %v", name, i, v)
			}
		}
		out[name] = t
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range spec {
			if !yield(k) {
				return
			}
		}
	}) {
		if _, ok := out[name]; !ok {
			return nil, refuse(ReasonMissingName, "shared tensor %q is missing", name)
		}
	}
	return out, nil
}

// checkShared refuses, when spec is not nil, a tensor that is not one of
// the method's shared tensors or has another shape than spec gives it.
func checkShared(spec Spec, name string, shape []int) *refusal {
	if spec == nil {
		return nil
	}
	want, ok := spec[name]
	if !ok {
		return refuse(ReasonUnknownName, "tensor %q is not a shared tensor of the method", name)
	}
	if !slices.Equal(shape, want) {
		return refuse(ReasonShape, "tensor %q has shape %v, want %v", name, shape, want)
	}
	return nil
}

func sameShape64(a []int, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if int64(a[i]) != b[i] {
			return false
		}
	}
	return true
}
