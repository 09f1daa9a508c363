package dataset

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"image"
	"image/color"
	"image/png"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// writeFile writes b to root/rel, creating folders.
func writeFile(t *testing.T, root, rel string, b []byte) string {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// pngBytes encodes a 3×2 image whose first pixel encodes v.
func pngBytes(t *testing.T, v uint8) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 3, 2))
	for i := 0; i < 6; i++ {
		img.Set(i%3, i/3, color.RGBA{v, uint8(i), 255 - v, 255})
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// writeClassFolders writes n[c] tiny PNGs into root/<class>/ for each class.
func writeClassFolders(t *testing.T, root string, classes []string, n []int) {
	t.Helper()
	for ci, c := range classes {
		for i := 0; i < n[ci]; i++ {
			writeFile(t, root, c+"/img_"+string(rune('a'+i/26))+string(rune('a'+i%26))+".png", pngBytes(t, uint8(ci)))
		}
	}
}

// cifarRecord returns one binary CIFAR record: label bytes, then planes whose
// first pixel is (seed, seed+1, seed+2).
func cifarRecord(labels []byte, seed byte) []byte {
	rec := append([]byte(nil), labels...)
	pix := make([]byte, cifarPixels)
	for c := 0; c < 3; c++ {
		for i := 0; i < 1024; i++ {
			pix[c*1024+i] = seed + byte(c) + byte(i)
		}
	}
	return append(rec, pix...)
}

// idxBytes builds an IDX file (gzip'd when gz) with the given magic and dims.
func idxBytes(t *testing.T, magic uint32, dims []int, data []byte, gz bool) []byte {
	t.Helper()
	var raw bytes.Buffer
	binary.Write(&raw, binary.BigEndian, magic)
	for _, d := range dims {
		binary.Write(&raw, binary.BigEndian, uint32(d))
	}
	raw.Write(data)
	if !gz {
		return raw.Bytes()
	}
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(raw.Bytes())
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// pickler is a minimal pickle writer producing the opcode streams Python 2
// (py2: str is bytes) and Python 3 emit for dicts, lists and numpy arrays.
type pickler struct {
	buf   bytes.Buffer
	py2   bool // strings as SHORT_BINSTRING/BINSTRING, ints for bools
	proto byte
}

func newPickler(proto byte, py2 bool) *pickler {
	p := &pickler{py2: py2, proto: proto}
	p.buf.Write([]byte{0x80, proto})
	return p
}

func (p *pickler) op(b ...byte) *pickler { p.buf.Write(b); return p }

func (p *pickler) global(mod, name string) *pickler {
	p.buf.WriteString("c" + mod + "\n" + name + "\n")
	return p
}

func (p *pickler) int(n int) *pickler {
	switch {
	case n >= 0 && n < 256:
		p.op('K', byte(n))
	case n >= 0 && n < 65536:
		p.op('M', byte(n), byte(n>>8))
	default:
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(int32(n)))
		p.op('J').op(b[:]...)
	}
	return p
}

func (p *pickler) bool(v bool) *pickler {
	if p.py2 {
		if v {
			return p.int(1)
		}
		return p.int(0)
	}
	if v {
		return p.op(0x88)
	}
	return p.op(0x89)
}

// rawStr writes a Python 2 str (bytes).
func (p *pickler) rawStr(b []byte) *pickler {
	if len(b) < 256 {
		p.op('U', byte(len(b)))
	} else {
		var l [4]byte
		binary.LittleEndian.PutUint32(l[:], uint32(len(b)))
		p.op('T').op(l[:]...)
	}
	return p.op(b...)
}

// str writes a text string.
func (p *pickler) str(s string) *pickler {
	if p.py2 {
		return p.rawStr([]byte(s))
	}
	var l [4]byte
	binary.LittleEndian.PutUint32(l[:], uint32(len(s)))
	p.op('X').op(l[:]...)
	p.buf.WriteString(s)
	return p
}

// bytes writes a bytes object the way each Python writes it.
func (p *pickler) bytes(b []byte) *pickler {
	switch {
	case p.py2:
		return p.rawStr(b)
	case p.proto >= 3:
		var l [4]byte
		binary.LittleEndian.PutUint32(l[:], uint32(len(b)))
		return p.op('B').op(l[:]...).op(b...)
	}
	// Python 3, protocol 2: _codecs.encode(latin-1 text, "latin1").
	runes := make([]rune, len(b))
	for i, c := range b {
		runes[i] = rune(c)
	}
	return p.global("_codecs", "encode").str(string(runes)).str("latin1").op(0x86, 'R')
}

func (p *pickler) none() *pickler { return p.op('N') }

func (p *pickler) tuple(items ...func()) *pickler {
	p.op('(')
	for _, f := range items {
		f()
	}
	return p.op('t')
}

func (p *pickler) shape(s []int) *pickler {
	p.op('(')
	for _, n := range s {
		p.int(n)
	}
	return p.op('t')
}

// dtype writes numpy.dtype(str, False, True) with its state.
func (p *pickler) dtype(str string, order string, elsize int) *pickler {
	p.global("numpy", "dtype").str(str).bool(false).bool(true).op(0x87, 'R')
	p.op('(').int(3).str(order).none().none().none().int(elsize).int(elsize).int(0).op('t', 'b')
	return p
}

// ndarray writes numpy's protocol 2–4 reduction of an array; raw is the
// element bytes, or objs (object arrays) written as a list of strings.
func (p *pickler) ndarray(dtStr, order string, elsize int, shape []int, raw []byte, objs []string) *pickler {
	p.global("numpy.core.multiarray", "_reconstruct").global("numpy", "ndarray")
	p.int(0).op(0x85).bytes([]byte("b")).op(0x87, 'R')
	p.op('(').int(1).shape(shape).dtype(dtStr, order, elsize).bool(false)
	if objs != nil {
		p.op(']', '(')
		for _, o := range objs {
			p.str(o)
		}
		p.op('e')
	} else {
		p.bytes(raw)
	}
	return p.op('t', 'b')
}

// frombuffer writes numpy's protocol 5 in-band reduction of an array.
func (p *pickler) frombuffer(dtStr, order string, elsize int, shape []int, raw []byte) *pickler {
	p.global("numpy.core.numeric", "_frombuffer")
	p.op('(').bytes(raw).dtype(dtStr, order, elsize).shape(shape).str("C").op('t', 'R')
	return p
}

func (p *pickler) list(items ...func()) *pickler {
	p.op(']', '(')
	for _, f := range items {
		f()
	}
	return p.op('e')
}

// dict writes {key: value()} in the order given.
func (p *pickler) dict(kv ...any) *pickler {
	p.op('}', '(')
	for i := 0; i < len(kv); i += 2 {
		p.str(kv[i].(string))
		kv[i+1].(func())()
	}
	return p.op('u')
}

func (p *pickler) done() []byte { p.op('.'); return p.buf.Bytes() }

// ucs4 encodes strings as numpy's fixed-width little-endian UCS4 elements.
func ucs4(strs []string) ([]byte, int) {
	width := 1
	for _, s := range strs {
		width = max(width, len([]rune(s)))
	}
	var out []byte
	for _, s := range strs {
		rs := []rune(s)
		for i := 0; i < width; i++ {
			var r rune
			if i < len(rs) {
				r = rs[i]
			}
			out = binary.LittleEndian.AppendUint32(out, uint32(r))
		}
	}
	return out, width
}

// TestMain keeps the loaders' informational logs out of test output.
func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(m.Run())
}
