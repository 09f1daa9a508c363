package deploy

import (
	"testing"

	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/config"
)

// TestTaskUploadBytesCompressed: the upload size a task announces (what a
// site's --max-upload-mib compares) is the encoded size.
func TestTaskUploadBytesCompressed(t *testing.T) {
	spec := map[string][]int{"a": {3, 64}, "b": {5}}
	for _, c := range []compress.Codec{compress.None, compress.FP16, compress.Int8} {
		e, err := config.Compose(config.Sources{Preset: "world-base2novel", Sets: []string{"federation.compress=" + string(c)}})
		if err != nil {
			t.Fatal(err)
		}
		task, err := serveTask(e, ModelID{Weights: "sha", Vocab: "vocab"}, spec)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(c.Size(192) + c.Size(5)); task.UploadBytes != want {
			t.Errorf("%s: task announces %d upload bytes, want %d", c, task.UploadBytes, want)
		}
	}
}
