package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport"
)

// UploadsFile is what a site computed it uploads for the task it accepted,
// kept in its state folder.
const UploadsFile = "uploads.json"

// UploadList is what one upload of a site holds, as the site computes it
// from the task it accepted and the method's own code (the strategy's
// global tensors and the plan's per-client uploads, Federated.Spec): never
// from what the coordinator declares.
type UploadList struct {
	Method string `json:"method"`
	// SecureAggregation: the upload is a masked vector (8 bytes a value,
	// and 8 for the weight), the coordinator learns only the sum.
	SecureAggregation bool `json:"secure_aggregation"`
	// Encoding is federation.compress's codec (f32, fp16, int8) or
	// "masked".
	Encoding string         `json:"encoding"`
	Tensors  []UploadTensor `json:"tensors"`
	// Values and Bytes are the whole upload's (names and shapes, a few
	// hundred bytes, not counted).
	Values int64 `json:"values"`
	Bytes  int64 `json:"bytes"`
	// MaxBytes is the site's limit (0: none).
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// UploadTensor is one uploaded tensor: its name, shape, dtype and bytes.
type UploadTensor struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
	DType string `json:"dtype"`
	Bytes int64  `json:"bytes"`
}

// computeUploads is what a site running e (trained method method, shared
// tensors spec) uploads each round.
func computeUploads(e *config.Experiment, method string, spec map[string][]int) (UploadList, error) {
	codec, err := compress.Parse(e.Federation.Compress)
	if err != nil {
		return UploadList{}, fmt.Errorf("%s: federation.compress: %w", TaskName, err)
	}
	l := UploadList{Method: method, SecureAggregation: e.Federation.SecureAggregation, Encoding: string(codec)}
	if codec == compress.None {
		l.Encoding = "f32"
	}
	if l.SecureAggregation {
		l.Encoding = "masked"
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range spec {
			if !yield(k) {
				return
			}
		}
	}) {
		n := int64(tensor.Numel(spec[name]))
		b := int64(codec.Size(int(n)))
		if l.SecureAggregation {
			b = 8 * n
		}
		l.Tensors = append(l.Tensors, UploadTensor{Name: name, Shape: slices.Clone(spec[name]), DType: "F32", Bytes: b})
		l.Values += n
		l.Bytes += b
	}
	if l.SecureAggregation {
		l.Bytes += 8 // the weight
	}
	return l, nil
}

// acceptUploads computes what site c uploads for experiment e (f, the
// method built from it), logs it, keeps it in c.State/uploads.json and
// checks it against the site's --max-upload-mib (a *TaskRefusal). It
// returns the tensors the site may upload.
func (c SiteConfig) acceptUploads(e *config.Experiment, f *experiment.Federated, states ...string) (transport.Spec, error) {
	spec, err := f.Spec()
	if err != nil {
		return nil, err
	}
	l, err := computeUploads(e, f.Name, spec)
	if err != nil {
		return nil, err
	}
	l.MaxBytes = maxBytes(c.Policy.MaxUploadMiB)
	logger := siteLogger(c.Logger)
	tensors := make([]string, len(l.Tensors))
	for i, t := range l.Tensors {
		tensors[i] = fmt.Sprintf("%s%v", t.Name, t.Shape)
	}
	logger.Info("what this site uploads each round", "site", c.Name, "method", l.Method, "tensors", strings.Join(tensors, " "),
		"values", l.Values, "bytes", l.Bytes, "encoding", l.Encoding, "secure_aggregation", l.SecureAggregation)
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return nil, err
	}
	for _, st := range append([]string{c.State}, states...) {
		if err := os.MkdirAll(st, 0o755); err != nil {
			return nil, err
		}
		if err := atomicfile.WriteBytes(filepath.Join(st, UploadsFile), append(data, '\n')); err != nil {
			return nil, err
		}
	}
	if l.MaxBytes > 0 && l.Bytes > l.MaxBytes {
		return nil, &TaskRefusal{fmt.Sprintf("one upload of method %s weighs %.4g MiB (%d bytes, %s, as this site computes it from the task), over %s %g",
			l.Method, float64(l.Bytes)/(1<<20), l.Bytes, l.Encoding, c.Policy.name(policyMaxUpload, "--max-upload-mib"), c.Policy.MaxUploadMiB)}
	}
	return transport.Spec(spec), nil
}

// siteLogger is logger, or the default logger when nil.
func siteLogger(logger *slog.Logger) *slog.Logger {
	if logger == nil {
		return slog.Default()
	}
	return logger
}

// sitePolicy sets tc's upload and download rules: the tensors uploads
// (what the site computed), its limits, and secure aggregation required
// by its policy or by the accepted task.
func (c SiteConfig) sitePolicy(tc *transport.SiteConfig, e *config.Experiment, uploads transport.Spec) {
	tc.Uploads = uploads
	tc.MaxUploadBytes = maxBytes(c.Policy.MaxUploadMiB)
	tc.MaxDownloadBytes = maxBytes(c.Policy.MaxDownloadMiB)
	tc.RequireSecureAggregation = c.Policy.RequireSecureAggregation || e.Federation.SecureAggregation
	tc.MinParticipants = c.Policy.MinParticipants
}

// refuseTask logs why the site refuses the coordinator's task, tells the
// coordinator (as client id) and returns err.
func (c SiteConfig) refuseTask(ctx context.Context, id int, err error) error {
	reason := err.Error()
	if r, ok := errors.AsType[*TaskRefusal](err); ok {
		reason = r.Reason
	}
	logger := siteLogger(c.Logger)
	logger.Error("the site refuses the coordinator's task", "site", c.Name, "reason", reason)
	if rerr := transport.RefuseTask(ctx, c.transport(), id, reason); rerr != nil {
		logger.Warn("the refusal could not be sent to the coordinator", "site", c.Name, "err", rerr)
	}
	return err
}
