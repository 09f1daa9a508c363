package dataset

import (
	"bufio"
	"cmp"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/pfedmma/pfedmma/internal/inputfile"
)

// FashionMNISTDir is where Debian's dataset-fashion-mnist package installs
// the files.
const FashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// FashionMNISTClasses are Fashion-MNIST's class names in label order.
var FashionMNISTClasses = []string{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"}

// IDX magic numbers: two zero bytes, the element type (0x08 = uint8) and the
// number of dimensions.
const (
	idxImagesMagic = 0x00000803
	idxLabelsMagic = 0x00000801
	idxMaxElements = 1 << 31
)

// LoadFashionMNIST reads {train,t10k}-{images-idx3,labels-idx1}-ubyte (gzip'd
// with a .gz suffix, or plain) from root/fashion-mnist, else root, else
// [FashionMNISTDir] when root is empty.
func LoadFashionMNIST(root string, opts Options) (*Dataset, error) {
	const name = "fashion_mnist"
	dir := root
	switch {
	case root == "":
		dir = FashionMNISTDir
	case isDir(filepath.Join(root, "fashion-mnist")):
		dir = filepath.Join(root, "fashion-mnist")
	}
	d := &Dataset{Name: name, Classes: slices.Clone(FashionMNISTClasses), Domains: []string{name}}
	for _, sp := range []struct {
		prefix, split string
		dst           *[]Item
	}{{"train", "train", &d.Train}, {"t10k", "test", &d.Test}} {
		items, err := readIDXPair(dir, sp.prefix, name, sp.split)
		if err != nil {
			return nil, fmt.Errorf("dataset %s: %w", name, err)
		}
		*sp.dst = items
	}
	return d, nil
}

func readIDXPair(dir, prefix, name, split string) ([]Item, error) {
	imgFile, err := findIDX(dir, prefix+"-images-idx3-ubyte")
	if err != nil {
		return nil, err
	}
	lblFile, err := findIDX(dir, prefix+"-labels-idx1-ubyte")
	if err != nil {
		return nil, err
	}
	dims, pix, err := ReadIDX(imgFile, idxImagesMagic)
	if err != nil {
		return nil, err
	}
	ldims, labels, err := ReadIDX(lblFile, idxLabelsMagic)
	if err != nil {
		return nil, err
	}
	if dims[0] != ldims[0] {
		return nil, fmt.Errorf("idx %s: %d images but %s has %d labels", imgFile, dims[0], lblFile, ldims[0])
	}
	h, w := dims[1], dims[2]
	items := make([]Item, dims[0])
	for i := range items {
		l := int(labels[i])
		if l >= len(FashionMNISTClasses) {
			return nil, fmt.Errorf("idx %s: label %d: value %d outside [0,%d)", lblFile, i, l, len(FashionMNISTClasses))
		}
		off := i * h * w
		items[i] = Item{
			Key:    fmt.Sprintf("%s/%s/%d", name, split, i),
			Label:  l,
			Source: Pixels{Width: w, Height: h, Channels: 1, Pix: pix[off : off+h*w : off+h*w]},
		}
	}
	return items, nil
}

// findIDX returns base+".gz" or base under dir, whichever exists.
func findIDX(dir, base string) (string, error) {
	for _, f := range []string{base + ".gz", base} {
		p := filepath.Join(dir, f)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("idx %s: no %s[.gz]: %w", dir, base, fs.ErrNotExist)
}

// ReadIDX reads an IDX file of uint8 elements (gzip'd when it ends in .gz):
// a big-endian magic number equal to magic, one big-endian uint32 size per
// dimension, then the elements. It returns the sizes and the data.
func ReadIDX(file string, magic uint32) (dims []int, data []byte, err error) {
	f, err := inputfile.Open(file)
	if err != nil {
		return nil, nil, fmt.Errorf("idx %s: %w", file, err)
	}
	defer f.Close()
	var r io.Reader = bufio.NewReader(f)
	if filepath.Ext(file) == ".gz" {
		gz, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("idx %s: gzip: %w", file, err)
		}
		defer gz.Close()
		r = gz
	}
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, nil, fmt.Errorf("idx %s: magic: %w", file, err)
	}
	if got := binary.BigEndian.Uint32(hdr[:]); got != magic {
		return nil, nil, fmt.Errorf("idx %s: magic: got %#08x, want %#08x", file, got, magic)
	}
	n := 1
	dims = make([]int, hdr[3])
	for i := range dims {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, nil, fmt.Errorf("idx %s: dimension %d: %w", file, i, err)
		}
		dims[i] = int(binary.BigEndian.Uint32(hdr[:]))
		n *= dims[i]
		if dims[i] == 0 || n > idxMaxElements {
			return nil, nil, fmt.Errorf("idx %s: dimension %d: size %d out of range", file, i, dims[i])
		}
	}
	// read what the file holds rather than allocating what its header
	// declares (a small file may declare 2^31 elements)
	data, err = io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil || len(data) != n {
		return nil, nil, fmt.Errorf("idx %s: data: want %d bytes (the header's sizes), the file holds %d: %w", file, n, len(data), cmp.Or(err, io.ErrUnexpectedEOF))
	}
	if m, _ := io.CopyN(io.Discard, r, 1); m != 0 {
		return nil, nil, fmt.Errorf("idx %s: data: trailing bytes after %d elements", file, n)
	}
	return dims, data, nil
}
