package main

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/internal/testmodel"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// rnFixture is the ResNet CLIP reference (testdata/README: clip-rn-tiny).
const rnFixture = "../../testdata/clip-rn-tiny"

// writeStateDictPT writes the tensors of a safetensors file as a PyTorch
// state dict (torch.save's zip format: an OrderedDict of
// _rebuild_tensor_v2 calls, one storage record per tensor).
func writeStateDictPT(t *testing.T, src, dst string) {
	t.Helper()
	f, err := safetensors.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pkl bytes.Buffer
	str := func(s string) {
		pkl.WriteByte('X')
		binary.Write(&pkl, binary.LittleEndian, uint32(len(s)))
		pkl.WriteString(s)
	}
	i32 := func(v int) {
		pkl.WriteByte('J')
		binary.Write(&pkl, binary.LittleEndian, int32(v))
	}
	ints := func(vs []int) {
		pkl.WriteByte('(')
		for _, v := range vs {
			i32(v)
		}
		pkl.WriteByte('t')
	}
	pkl.WriteString("\x80\x02ccollections\nOrderedDict\n)R(")
	records := map[string][]byte{}
	for k, name := range f.Names() {
		dt, shape, _ := f.Info(name)
		numel := 1
		for _, d := range shape {
			numel *= d
		}
		var data []byte
		class := "FloatStorage"
		switch dt {
		case "F32":
			v, err := f.Float32(name)
			if err != nil {
				t.Fatal(err)
			}
			data = make([]byte, 4*numel)
			for i, x := range v.Data {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
			}
		case "I64":
			v, _, err := f.Int64(name)
			if err != nil {
				t.Fatal(err)
			}
			class = "LongStorage"
			data = make([]byte, 8*numel)
			for i, x := range v {
				binary.LittleEndian.PutUint64(data[8*i:], uint64(x))
			}
		default:
			t.Fatalf("%s: dtype %s", name, dt)
		}
		key := string(rune('0'+k%10)) + strings.Repeat("x", k/10) // distinct keys
		records["data/"+key] = data
		stride := make([]int, len(shape))
		s := 1
		for i := len(shape) - 1; i >= 0; i-- {
			stride[i] = s
			s *= shape[i]
		}
		str(name)
		pkl.WriteString("ctorch._utils\n_rebuild_tensor_v2\n(")
		pkl.WriteString("(")
		str("storage")
		pkl.WriteString("ctorch\n" + class + "\n")
		str(key)
		str("cpu")
		i32(numel)
		pkl.WriteString("tQ")
		i32(0)
		ints(shape)
		ints(stride)
		pkl.WriteString("\x89ccollections\nOrderedDict\n)RtR")
	}
	pkl.WriteString("u.")
	records["data.pkl"] = pkl.Bytes()
	records["version"] = []byte("3\n")
	records["byteorder"] = []byte("little")
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, b := range records {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: "archive/" + name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestResNetInspectAndEmbed: inspect and embed accept the ResNet CLIP
// fixture as safetensors and as a PyTorch .pt state dict (before: both
// panicked with an integer divide by zero), and embed reproduces the
// reference's image features.
func TestResNetInspectAndEmbed(t *testing.T) {
	st := filepath.Join(rnFixture, "openai.safetensors")
	fw, err := safetensors.Open(filepath.Join(rnFixture, "forward.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	images, err := fw.Float32("images")
	if err != nil {
		t.Fatal(err)
	}
	want, err := fw.Float32("image_features")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pixels := filepath.Join(dir, "pixels.safetensors")
	if err := safetensors.Write(pixels, tensor.Named{"pixels": images}, nil, nil); err != nil {
		t.Fatal(err)
	}
	pt := filepath.Join(dir, "rn.pt")
	writeStateDictPT(t, st, pt)
	for _, model := range []string{st, pt} {
		r := cli(t, cliOptions{}, "inspect", "--model", model)
		if r.Code != 0 || !strings.Contains(r.Stdout, "ResNet") || !strings.Contains(r.Stdout, "64×64") {
			t.Errorf("inspect --model %s: exit %d\n%s%s", model, r.Code, r.Stdout, tail(r.Stderr))
		}
		r = cli(t, cliOptions{}, "inspect", "--json", "--model", model)
		var js struct {
			Params       int64 `json:"params"`
			VisionParams int64 `json:"vision_params"`
			Vision       struct {
				ResNet bool `json:"resnet"`
			} `json:"vision"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &js); err != nil || !js.Vision.ResNet || js.VisionParams <= 0 || js.VisionParams >= js.Params {
			t.Errorf("inspect --json --model %s: %+v %v\n%s", model, js, err, tail(r.Stderr))
		}
		r = cli(t, cliOptions{}, "embed", "--model", model, "--pixels", pixels)
		if r.Code != 0 {
			t.Fatalf("embed --model %s: exit %d\n%s", model, r.Code, tail(r.Stderr))
		}
		var out struct {
			Image [][]float32 `json:"image_features"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
			t.Fatal(err)
		}
		if len(out.Image) != want.Shape[0] {
			t.Fatalf("embed --model %s: %d feature rows, want %d", model, len(out.Image), want.Shape[0])
		}
		var maxRef, maxDiff float64
		E := want.Shape[1]
		for i, row := range out.Image {
			if len(row) != E {
				t.Fatalf("row %d has %d features, want %d", i, len(row), E)
			}
			for j, v := range row {
				ref := float64(want.Data[i*E+j])
				maxRef = max(maxRef, math.Abs(ref))
				maxDiff = max(maxDiff, math.Abs(float64(v)-ref))
			}
		}
		if maxDiff > 1e-4*maxRef {
			t.Errorf("embed --model %s: image features differ from the reference by %.3g (max |ref| %.3g, tolerance 1e-4 relative)", model, maxDiff, maxRef)
		}
	}
}

// TestResNetZeroshotRunPredict: zeroshot, run and predict accept a ResNet
// CLIP (before: zeroshot panicked with an integer divide by zero in the ViT
// encoder).
func TestResNetZeroshotRunPredict(t *testing.T) {
	model := t.TempDir()
	if err := testmodel.WriteResNet(model, 24, 5); err != nil {
		t.Fatal(err)
	}
	img := writeWorldImage(t, 0)
	r := cli(t, cliOptions{}, "zeroshot", "--model", model, "--classes", "cat,dog", "--image", img)
	if r.Code != 0 || !strings.Contains(r.Stdout, "cat") || !strings.Contains(r.Stdout, "%") {
		t.Errorf("zeroshot on a ResNet: exit %d\n%s%s", r.Code, r.Stdout, tail(r.Stderr))
	}
	out := filepath.Join(t.TempDir(), "run")
	r = cli(t, cliOptions{}, "run", "--quiet", "--out", out, "--model", model, "--set", "dataset.num_classes=8",
		"--set", "federation.clients=2", "--set", "federation.rounds=1", "--set", "methods=[zeroshot,promptfl]")
	if r.Code != 0 || !strings.Contains(r.Stdout, "promptfl") {
		t.Fatalf("run on a ResNet: exit %d\n%s%s", r.Code, r.Stdout, tail(r.Stderr))
	}
	r = cli(t, cliOptions{}, "predict", "--run", out, "--method", "promptfl", "--client", "1", "--image", img, "--top", "2")
	if r.Code != 0 || !strings.Contains(r.Stdout, "promptfl, site 1") || !strings.Contains(r.Stdout, "2.") {
		t.Errorf("predict on a ResNet run: exit %d\n%s%s", r.Code, r.Stdout, tail(r.Stderr))
	}
}
