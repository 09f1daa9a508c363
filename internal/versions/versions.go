// Package versions reports the versions of the pfedmma binary and of the
// libraries that compute in it (`pfedmma version`).
package versions

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"text/tabwriter"
	"time"

	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/preprocess"
)

// Write prints one line per component to w: the binary's VCS revision and
// Go version, the CPU, the float32 and bfloat16 GEMM backends, both GEMM
// rates at ViT-B/16's shapes (the figures engine.precision auto compares)
// and the JPEG decoder.
func Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "pfedmma\t%s (%s, %s/%s)\n", revision(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(tw, "CPU\t%s\n", gemm.CPU())
	fmt.Fprintf(tw, "float32 GEMM\t%s, %s kernels, %d threads\n", gemm.Backend(), gemm.CoreName(), gemm.Threads())
	fmt.Fprintf(tw, "bfloat16 GEMM\t%s\n", gemm.BF16Backend())
	// both rates at ViT-B/16's shapes (a batch of 2 images)
	probe := gemm.ProbePrecision(vitB16Shapes, 400*time.Millisecond)
	fmt.Fprintf(tw, "GEMM rates (ViT-B/16 shapes)\t%s\n", probe)
	fmt.Fprintf(tw, "JPEG decoder\t%s\n", preprocess.JPEGDecoder())
	return tw.Flush()
}

// revision is the VCS revision the binary was built from, "(devel)" when
// unknown.
func revision() string {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v = s.Value
			}
		}
	}
	return v
}

// vitB16Shapes are a ViT-B/16 block's four weight products for 2 images
// (197 tokens each, width 768, MLP 3072).
var vitB16Shapes = []gemm.Shape{{M: 2 * 197, N: 2304, K: 768}, {M: 2 * 197, N: 768, K: 768}, {M: 2 * 197, N: 3072, K: 768}, {M: 2 * 197, N: 768, K: 3072}}
