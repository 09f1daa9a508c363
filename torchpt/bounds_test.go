package torchpt

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"math"
	"runtime"
	"strings"
	"testing"
)

// zerosDeflate returns a deflate stream of n zero bytes (n a multiple of
// 1 MiB) without compressing n bytes: one flushed (byte-aligned) segment
// of 1 MiB of zeros repeated, then an empty final block.
func zerosDeflate(t *testing.T, n int64) []byte {
	t.Helper()
	var seg bytes.Buffer
	fw, err := flate.NewWriter(&seg, flate.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fw.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := fw.Flush(); err != nil {
		t.Fatal(err)
	}
	out := bytes.Repeat(seg.Bytes(), int(n>>20))
	return append(out, 0x03, 0x00) // final fixed-Huffman block, empty
}

// bombArchive is a state dict whose tensor "t" ([2] float32) views a
// FloatStorage of numel elements held in a deflated record.
func bombArchive(t *testing.T, numel int64) []byte {
	t.Helper()
	p := &pk{}
	p.op("\x80\x02}(").str("t")
	p.global("torch._utils", "_rebuild_tensor_v2").op("(")
	p.op("(").str("storage").global("torch", "FloatStorage").str("0").str("cpu")
	p.op("\x8a\x08") // LONG1 of 8 bytes
	binary.Write(&p.Buffer, binary.LittleEndian, numel)
	p.op("tQ").int1(0).op("(").int1(2).op("t(").int1(1).op("t\x89").global("collections", "OrderedDict").op(")R").op("tR")
	p.op("u.")
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.CreateHeader(&zip.FileHeader{Name: "archive/data.pkl", Method: zip.Store})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(p.Bytes())
	body := zerosDeflate(t, numel*4)
	w, err = zw.CreateRaw(&zip.FileHeader{Name: "archive/data/0", Method: zip.Deflate,
		CompressedSize64: uint64(len(body)), UncompressedSize64: uint64(numel * 4)})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(body)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestDeflatedStorageBomb: a small tensor viewing a 16 GiB storage held in
// a 16 MB deflated record is refused when the file is opened, naming the
// tensor and the sizes (before: reading it inflated all 16 GiB: "fatal
// error: out of memory").
func TestDeflatedStorageBomb(t *testing.T) {
	data := bombArchive(t, 4<<30) // 16 GiB of float32
	_, err := Parse(data, "bomb.pt")
	if err == nil {
		t.Fatal("a 16 GiB deflated storage behind a 2-element tensor was accepted")
	}
	for _, want := range []string{"bomb.pt", `"t"`, "17179869184", "decompression bomb"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// TestStoredSizeMismatch: a stored record whose header declares more bytes
// than it holds is refused naming the tensor.
func TestStoredSizeMismatch(t *testing.T) {
	p := (&pk{}).op("\x80\x02}(").str("t").tensor("FloatStorage", "0", 6, 0, []byte{6}, []byte{1}).op("u.")
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "archive/data.pkl", Method: zip.Store})
	w.Write(p.Bytes())
	w, err := zw.CreateRaw(&zip.FileHeader{Name: "archive/data/0", Method: zip.Store, CompressedSize64: 8, UncompressedSize64: 24})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(make([]byte, 8))
	zw.Close()
	_, err = Parse(buf.Bytes(), "lie.pt")
	if err == nil || !strings.Contains(err.Error(), "declares 24 bytes but holds 8") || !strings.Contains(err.Error(), `"t"`) {
		t.Errorf("err %v", err)
	}
}

// TestSmallViewOfLargeStorage: a 2-element view into a 64 MiB storage
// (stored, as torch.save writes a slice's whole storage) reads a little,
// not the storage; sparse and transposed views read the right elements.
func TestSmallViewOfLargeStorage(t *testing.T) {
	const numel = 16 << 20
	st := make([]byte, numel*4)
	for _, i := range []int{5, 6, 7, numel - 1} {
		binary.LittleEndian.PutUint32(st[4*i:], math.Float32bits(float32(i)))
	}
	p := &pk{}
	p.op("\x80\x02}(")
	p.str("small")
	p.global("torch._utils", "_rebuild_tensor_v2").op("(")
	p.op("(").str("storage").global("torch", "FloatStorage").str("0").str("cpu").op("J")
	binary.Write(&p.Buffer, binary.LittleEndian, int32(numel))
	p.op("tQ").int1(5).op("(").int1(3).op("t(").int1(1).op("t\x89").global("collections", "OrderedDict").op(")R").op("tR")
	// "far": elements 5 and numel-1 (stride numel-6)
	p.str("far")
	p.global("torch._utils", "_rebuild_tensor_v2").op("(")
	p.op("(").str("storage").global("torch", "FloatStorage").str("0").str("cpu").op("J")
	binary.Write(&p.Buffer, binary.LittleEndian, int32(numel))
	p.op("tQ").int1(5).op("(").int1(2).op("t(").op("J")
	binary.Write(&p.Buffer, binary.LittleEndian, int32(numel-6))
	p.op("t\x89").global("collections", "OrderedDict").op(")R").op("tR")
	p.op("u.")
	data := archive(t, map[string][]byte{"data.pkl": p.Bytes(), "data/0": st})
	f, err := Parse(data, "view.pt")
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	small, _, err := f.Float32("small")
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if small[0] != 5 || small[1] != 6 || small[2] != 7 {
		t.Errorf("small = %v, want [5 6 7]", small)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Errorf("reading 3 floats of a 64 MiB storage allocated %d bytes", got)
	}
	runtime.ReadMemStats(&before)
	far, _, err := f.Float32("far")
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if far[0] != 5 || far[1] != numel-1 {
		t.Errorf("far = %v, want [5 %d]", far, numel-1)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Errorf("reading 2 far-apart floats of a 64 MiB storage allocated %d bytes", got)
	}
}
