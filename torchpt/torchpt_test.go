package torchpt

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/internal/picklescan"
	"github.com/pfedmma/pfedmma/safetensors"
)

const (
	jitFixture       = "../testdata/clip-tiny/jit.pt"
	stateDictFixture = "../testdata/clip-tiny/state_dict.pt"
)

// pk builds pickle bytes.
type pk struct{ bytes.Buffer }

func (p *pk) op(s string) *pk { p.WriteString(s); return p }

// str writes a BINUNICODE string.
func (p *pk) str(s string) *pk {
	p.WriteByte('X')
	binary.Write(&p.Buffer, binary.LittleEndian, uint32(len(s)))
	p.WriteString(s)
	return p
}

// global writes GLOBAL module name.
func (p *pk) global(module, name string) *pk { return p.op("c" + module + "\n" + name + "\n") }

// int1 writes BININT1.
func (p *pk) int1(v byte) *pk { return p.op("K" + string([]byte{v})) }

// tensor writes _rebuild_tensor_v2(storage(class, key, numel), offset,
// shape, stride, False, OrderedDict()).
func (p *pk) tensor(class, key string, numel, offset byte, shape, stride []byte) *pk {
	p.global("torch._utils", "_rebuild_tensor_v2").op("(")
	p.op("(").str("storage").global("torch", class).str(key).str("cpu").int1(numel).op("tQ")
	p.int1(offset).op("(")
	for _, d := range shape {
		p.int1(d)
	}
	p.op("t(")
	for _, d := range stride {
		p.int1(d)
	}
	p.op("t\x89").global("collections", "OrderedDict").op(")R").op("tR")
	return p
}

// archive zips records under "archive/".
func archive(t testing.TB, records map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range records {
			if !yield(k) {
				return
			}
		}
	}) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: "archive/" + name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(records[name])
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// stridedDict is a state dict {"w": 2×3 transposed view of 6 doubles,
// "b": 3 bfloat16 at offset 1 of 4}.
func stridedDict() []byte {
	p := &pk{}
	p.op("\x80\x02").global("collections", "OrderedDict").op(")R(")
	p.str("w").tensor("DoubleStorage", "0", 6, 0, []byte{2, 3}, []byte{1, 2})
	p.str("b").tensor("BFloat16Storage", "1", 4, 1, []byte{3}, []byte{1})
	p.op("u.")
	return p.Bytes()
}

func stridedArchive(t testing.TB) []byte {
	f64 := make([]byte, 6*8)
	for i := range 6 {
		binary.LittleEndian.PutUint64(f64[8*i:], math.Float64bits(float64(i)))
	}
	bf := make([]byte, 4*2)
	for i := range 4 {
		binary.LittleEndian.PutUint16(bf[2*i:], safetensors.Float32ToBF16(float32(i)+0.5))
	}
	return archive(t, map[string][]byte{"data.pkl": stridedDict(), "data/0": f64, "data/1": bf, "version": []byte("3\n")})
}

// scriptArchive is a TorchScript-like archive: a __torch__ module object
// whose submodule holds a half-precision parameter.
func scriptArchive(t testing.TB) []byte {
	p := &pk{}
	p.op("\x80\x02").global("__torch__.m", "Root").op(")\x81}(")
	p.str("training").op("\x89")
	p.str("sub").global("__torch__.m", "Sub").op(")\x81}(")
	p.str("weight").tensor("HalfStorage", "0", 2, 0, []byte{2}, []byte{1})
	p.op("ub")
	p.op("ub.")
	h := make([]byte, 4)
	binary.LittleEndian.PutUint16(h, safetensors.Float32ToHalf(1.5))
	binary.LittleEndian.PutUint16(h[2:], safetensors.Float32ToHalf(-2))
	return archive(t, map[string][]byte{"data.pkl": p.Bytes(), "data/0": h, "constants.pkl": []byte("\x80\x02).")})
}

func TestStridedAndDTypes(t *testing.T) {
	f, err := Parse(stridedArchive(t), "strided.pt")
	if err != nil {
		t.Fatal(err)
	}
	w, shape, err := f.Float32("w")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(shape, []int{2, 3}) || !slices.Equal(w, []float32{0, 2, 4, 1, 3, 5}) {
		t.Errorf("w: shape %v values %v, want [2 3] [0 2 4 1 3 5]", shape, w)
	}
	b, _, err := f.Float32("b")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b, []float32{1.5, 2.5, 3.5}) {
		t.Errorf("b: %v, want [1.5 2.5 3.5]", b)
	}
	if dt, _, _ := f.Info("b"); dt != "BF16" || f.TorchScript() {
		t.Errorf("b dtype %s, torchscript %v", dt, f.TorchScript())
	}
}

func TestTorchScriptObjects(t *testing.T) {
	f, err := Parse(scriptArchive(t), "script.pt")
	if err != nil {
		t.Fatal(err)
	}
	if !f.TorchScript() || !slices.Equal(f.Names(), []string{"sub.weight"}) {
		t.Fatalf("torchscript %v names %v, want true [sub.weight]", f.TorchScript(), f.Names())
	}
	v, _, err := f.Float32("sub.weight")
	if err != nil || !slices.Equal(v, []float32{1.5, -2}) {
		t.Errorf("sub.weight: %v %v", v, err)
	}
}

// TestFixtureNames checks the names and dtypes the two fixtures hold.
func TestFixtureNames(t *testing.T) {
	ref, err := safetensors.Open("../testdata/clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{jitFixture, stateDictFixture} {
		f, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(f.Names(), ref.Names()) {
			t.Errorf("%s: names differ from openai.safetensors: %v", p, f.Names())
		}
		counts := map[string]int{}
		for _, n := range f.Names() {
			dt, shape, _ := f.Info(n)
			_, want, _ := ref.Info(n)
			if n == "logit_scale" && len(shape) == 0 {
				shape = []int{1} // a scalar in torch, [1] in the safetensors fixture
			}
			if !slices.Equal(shape, want) {
				t.Errorf("%s: %s shape %v, want %v", p, n, shape, want)
			}
			counts[dt]++
		}
		f.Close()
		if p == jitFixture && (counts["F16"] != 67 || counts["F32"] != 43) {
			t.Errorf("jit.pt dtypes %v, want 67 F16 and 43 F32", counts)
		}
		if p == stateDictFixture && counts["F32"] != 110 {
			t.Errorf("state_dict.pt dtypes %v, want 110 F32", counts)
		}
	}
}

// TestRefusedGlobals: every way to name a global outside the whitelist is
// refused with its name, in a bare pickle and inside an archive.
func TestRefusedGlobals(t *testing.T) {
	system := (&pk{}).op("\x80\x02").global("os", "system").str("echo pwned").op("\x85R.").Bytes()
	cases := []struct {
		name, want string
		pickle     []byte
	}{
		{"GLOBAL os.system", "refusing to load pickle global os.system", system},
		{"INST", "refusing to load pickle global subprocess.Popen",
			(&pk{}).op("(").str("ls").op("isubprocess\nPopen\n.").Bytes()},
		{"STACK_GLOBAL", "refusing to load pickle global os.system",
			(&pk{}).op("\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93").str("ls").op("\x85R.").Bytes()},
		{"STACK_GLOBAL from memo", "refusing to load pickle global torch.system",
			(&pk{}).op("\x80\x04\x8c\x05torch\x94\x8c\x0cFloatStorage\x94\x93\x94" +
				"h\x00\x8c\x06system\x93.").Bytes()},
		{"STACK_GLOBAL computed", "not string literals",
			(&pk{}).op("\x80\x04\x8c\x02os\x94\x8c\x06system\x94(\x93.").Bytes()},
		{"builtin object", "refusing to load pickle global __builtin__.object",
			(&pk{}).op("\x80\x02c__builtin__\nobject\n)\x81.").Bytes()},
		{"copy_reg", "refusing to load pickle global copy_reg._reconstructor",
			(&pk{}).op("\x80\x02ccopy_reg\n_reconstructor\n.").Bytes()},
		{"builtins eval", "refusing to load pickle global builtins.eval",
			(&pk{}).op("\x80\x02cbuiltins\neval\n").str("1").op("\x85R.").Bytes()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := unpickle(c.pickle); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("unpickle: err %v, want %q", err, c.want)
			}
			_, err := Parse(archive(t, map[string][]byte{"data.pkl": c.pickle}), "evil.pt")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "evil.pt") {
				t.Errorf("Parse: err %v, want %q and the file", err, c.want)
			}
		})
	}
}

// TestBadTensors: descriptions that do not fit their storage are errors
// naming the file and the tensor.
func TestBadTensors(t *testing.T) {
	one := func(class string, numel, offset byte, shape, stride []byte, data []byte) []byte {
		p := (&pk{}).op("\x80\x02}(").str("t").tensor(class, "0", numel, offset, shape, stride).op("u.")
		return archive(t, map[string][]byte{"data.pkl": p.Bytes(), "data/0": data})
	}
	cases := []struct {
		name, want string
		data       []byte
	}{
		{"view past storage", "need 7 elements, storage 0 has 6", one("FloatStorage", 6, 1, []byte{2, 3}, []byte{3, 1}, make([]byte, 24))},
		{"record size", "holds 20 bytes, want 24", one("FloatStorage", 6, 0, []byte{6}, []byte{1}, make([]byte, 20))},
		{"rank mismatch", "differ in rank", one("FloatStorage", 6, 0, []byte{2, 3}, []byte{1}, make([]byte, 24))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.data, "bad.pt")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.pt") {
				t.Fatalf("err %v, want %q and the file", err, c.want)
			}
			if c.name != "rank mismatch" && !strings.Contains(err.Error(), `"t"`) {
				t.Errorf("err %v does not name the tensor", err)
			}
		})
	}
	// Integer tensors parse but do not convert to float32.
	f, err := Parse(one("LongStorage", 2, 0, []byte{2}, []byte{1}, make([]byte, 16)), "ints.pt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Float32Into("t", make([]float32, 2)); err == nil || !strings.Contains(err.Error(), "I64") {
		t.Errorf("Float32Into on I64: %v", err)
	}
	if _, err := f.Float32Into("t", make([]float32, 3)); err == nil {
		t.Error("Float32Into with a wrong destination size succeeded")
	}
}

// TestCycles: a dict that contains itself is walked once.
func TestCycles(t *testing.T) {
	p := (&pk{}).op("\x80\x02}q\x00").str("self").op("h\x00s.").Bytes()
	f, err := Parse(archive(t, map[string][]byte{"data.pkl": p}), "cycle.pt")
	if err != nil || f.Len() != 0 {
		t.Errorf("cycle: %v, %d tensors", err, f.Len())
	}
}

// TestTruncated cuts archives at many points: an error naming the file,
// never a panic.
func TestTruncated(t *testing.T) {
	data, err := os.ReadFile(jitFixture)
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range [][]byte{data, stridedArchive(t), scriptArchive(t)} {
		for _, n := range []int{0, 3, 4, 50, len(src) / 2, len(src) - 23, len(src) - 1} {
			if _, err := Parse(src[:n], "cut.pt"); err == nil || !strings.Contains(err.Error(), "cut.pt") {
				t.Errorf("cut at %d of %d: err %v", n, len(src), err)
			}
		}
	}
}

// fixturePickle returns the data.pkl of a fixture archive.
func fixturePickle(t testing.TB, path string) []byte {
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/data.pkl") {
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("%s: no data.pkl", path)
	return nil
}

// scriptPickle is a small TorchScript-style data.pkl (the fixtures' own
// are 13–17 kB, too large for the fuzzer to minimise quickly).
func scriptPickle() []byte {
	p := &pk{}
	p.op("\x80\x02").global("__torch__.m", "Root").op(")\x81}q\x00(")
	p.str("training").op("\x89").str("hook").op("N")
	p.str("sub").global("__torch__.m", "Sub").op(")\x81}(")
	p.str("weight").tensor("HalfStorage", "0", 2, 0, []byte{2}, []byte{1})
	p.str("bias").tensor("FloatStorage", "1", 2, 0, []byte{2}, []byte{1})
	p.op("ub")
	p.op("ub.")
	return p.Bytes()
}

// FuzzPickle: the restricted unpickler and the tree walk never panic; a
// parsed tree's tensors have bounded shapes and consistent ranks.
func FuzzPickle(f *testing.F) {
	f.Add(stridedDict())
	f.Add(scriptPickle())
	f.Add((&pk{}).op("\x80\x02cos\nsystem\n").str("ls").op("\x85R.").Bytes())
	f.Add((&pk{}).op("\x80\x04\x8c\x05torch\x94\x8c\x0cFloatStorage\x94\x93.").Bytes())
	f.Add((&pk{}).op("\x80\x02}q\x00").str("self").op("h\x00s.").Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := unpickle(b)
		if err != nil {
			return
		}
		file := &File{name: "fuzz", tensors: map[string]*Tensor{}}
		w := walker{f: file, seen: map[any]bool{}}
		if err := w.walk("", v, 0); err != nil {
			return
		}
		for _, n := range file.names {
			r := file.tensors[n].ref
			if len(r.shape) != len(r.stride) || len(r.shape) > maxRank {
				t.Fatalf("%s: shape %v stride %v", n, r.shape, r.stride)
			}
			for _, d := range r.shape {
				if d < 0 || int64(d) > maxElements {
					t.Fatalf("%s: shape %v", n, r.shape)
				}
			}
		}
	})
}

// FuzzTorchArchive: Parse never panics; every tensor of a parsed archive
// reads (or fails) without panicking, with the shape Info reports.
func FuzzTorchArchive(f *testing.F) {
	f.Add(stridedArchive(f))
	f.Add(scriptArchive(f))
	f.Add(archive(f, map[string][]byte{"data.pkl": stridedDict()}))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(b, "fuzz.pt")
		if err != nil {
			return
		}
		for _, n := range file.Names() {
			dt, shape, ok := file.Info(n)
			if !ok {
				t.Fatalf("%s listed but not found", n)
			}
			numel := 1
			for _, d := range shape {
				numel *= d
			}
			if numel > 1<<20 || !safetensors.DType(dt).IsFloat() {
				continue
			}
			got, err := file.Float32Into(n, make([]float32, numel))
			if err == nil && !slices.Equal(got, shape) {
				t.Fatalf("%s: read shape %v, Info %v", n, got, shape)
			}
		}
	})
}

// TestFixturePickles: both fixtures' data.pkl pass the opcode scan and
// unpickle with the whitelist alone.
func TestFixturePickles(t *testing.T) {
	for _, p := range []string{jitFixture, stateDictFixture} {
		b := fixturePickle(t, p)
		if err := picklescan.Scan(b, refuse); err != nil {
			t.Errorf("%s: scan: %v", p, err)
		}
		if _, err := unpickle(b); err != nil {
			t.Errorf("%s: unpickle: %v", p, err)
		}
	}
}
