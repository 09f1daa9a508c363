package dataset

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/pfedmma/pfedmma/internal/inputfile"
)

// CIFAR image geometry: 32×32, three 1024-byte planes (R, G, B).
const (
	cifarSide   = 32
	cifarPixels = 3 * cifarSide * cifarSide
)

// cifarSpec describes one CIFAR variant in its two on-disk versions.
type cifarSpec struct {
	name      string
	nClasses  int
	binDir    string
	binTrain  []string
	binTest   []string
	binNames  string
	labelByte int // index of the label byte used (CIFAR-100: fine label after the coarse one)
	pyDir     string
	pyTrain   []string
	pyTest    []string
	pyMeta    string
	pyNames   string // key of the class names in the meta dict
	pyLabels  string // key of the labels in a batch dict
}

var (
	cifar10Spec = cifarSpec{
		name: "cifar10", nClasses: 10,
		binDir:   "cifar-10-batches-bin",
		binTrain: []string{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"},
		binTest:  []string{"test_batch.bin"}, binNames: "batches.meta.txt", labelByte: 0,
		pyDir:   "cifar-10-batches-py",
		pyTrain: []string{"data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"},
		pyTest:  []string{"test_batch"}, pyMeta: "batches.meta", pyNames: "label_names", pyLabels: "labels",
	}
	cifar100Spec = cifarSpec{
		name: "cifar100", nClasses: 100,
		binDir: "cifar-100-binary", binTrain: []string{"train.bin"}, binTest: []string{"test.bin"},
		binNames: "fine_label_names.txt", labelByte: 1,
		pyDir: "cifar-100-python", pyTrain: []string{"train"}, pyTest: []string{"test"},
		pyMeta: "meta", pyNames: "fine_label_names", pyLabels: "fine_labels",
	}
)

// LoadCIFAR10 reads CIFAR-10 from root/cifar-10-batches-bin (binary
// version) or, failing that, root/cifar-10-batches-py (Python version).
func LoadCIFAR10(root string, opts Options) (*Dataset, error) { return loadCIFAR(cifar10Spec, root) }

// LoadCIFAR100 reads CIFAR-100 (fine labels) from root/cifar-100-binary or,
// failing that, root/cifar-100-python.
func LoadCIFAR100(root string, opts Options) (*Dataset, error) {
	return loadCIFAR(cifar100Spec, root)
}

func loadCIFAR(spec cifarSpec, root string) (*Dataset, error) {
	bin := filepath.Join(root, spec.binDir)
	py := filepath.Join(root, spec.pyDir)
	var (
		classes     []string
		train, test []Item
		err         error
	)
	switch {
	case isDir(bin):
		classes, train, test, err = loadCIFARBin(spec, bin)
	case isDir(py):
		classes, train, test, err = loadCIFARPy(spec, py)
	default:
		err = fmt.Errorf("no folder %s or %s under %s: %w", spec.binDir, spec.pyDir, root, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", spec.name, err)
	}
	return &Dataset{Name: spec.name, Classes: classes, Domains: []string{spec.name}, Train: train, Test: test}, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func loadCIFARBin(spec cifarSpec, dir string) (classes []string, train, test []Item, err error) {
	namesFile := filepath.Join(dir, spec.binNames)
	b, err := inputfile.ReadFile(namesFile)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("class names %s: %w", namesFile, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			classes = append(classes, PromptName(l))
		}
	}
	if len(classes) != spec.nClasses {
		return nil, nil, nil, fmt.Errorf("class names %s: want %d names, got %d", namesFile, spec.nClasses, len(classes))
	}
	read := func(split string, files []string) ([]Item, error) {
		var items []Item
		for _, f := range files {
			items, err = readCIFARBin(spec, filepath.Join(dir, f), split, items)
			if err != nil {
				return nil, err
			}
		}
		return items, nil
	}
	if train, err = read("train", spec.binTrain); err != nil {
		return nil, nil, nil, err
	}
	if test, err = read("test", spec.binTest); err != nil {
		return nil, nil, nil, err
	}
	return classes, train, test, nil
}

// readCIFARBin appends the records of one binary batch file to items.
func readCIFARBin(spec cifarSpec, file, split string, items []Item) ([]Item, error) {
	b, err := inputfile.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("cifar batch %s: %w", file, err)
	}
	rec := spec.labelByte + 1 + cifarPixels
	if len(b) == 0 {
		return nil, fmt.Errorf("cifar batch %s: empty", file)
	}
	if len(b)%rec != 0 {
		return nil, fmt.Errorf("cifar batch %s: record %d truncated: %d of %d bytes", file, len(b)/rec, len(b)%rec, rec)
	}
	for r := 0; r < len(b)/rec; r++ {
		off := r * rec
		label := int(b[off+spec.labelByte])
		if label >= spec.nClasses {
			return nil, fmt.Errorf("cifar batch %s: record %d: label %d outside [0,%d)", file, r, label, spec.nClasses)
		}
		items = append(items, cifarItem(spec.name, split, len(items), label, b[off+spec.labelByte+1:off+rec:off+rec]))
	}
	return items, nil
}

func cifarItem(name, split string, i, label int, pix []byte) Item {
	return Item{
		Key:    fmt.Sprintf("%s/%s/%d", name, split, i),
		Label:  label,
		Source: Pixels{Width: cifarSide, Height: cifarSide, Channels: 3, Planar: true, Pix: pix},
	}
}

func loadCIFARPy(spec cifarSpec, dir string) (classes []string, train, test []Item, err error) {
	metaFile := filepath.Join(dir, spec.pyMeta)
	meta, err := loadPickle(metaFile)
	if err != nil {
		return nil, nil, nil, err
	}
	namesV, err := dictGet(meta, spec.pyNames)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pickle %s: %w", metaFile, err)
	}
	names, err := pyStrings(namesV)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pickle %s: key %q: %w", metaFile, spec.pyNames, err)
	}
	if len(names) != spec.nClasses {
		return nil, nil, nil, fmt.Errorf("pickle %s: key %q: want %d names, got %d", metaFile, spec.pyNames, spec.nClasses, len(names))
	}
	for _, n := range names {
		classes = append(classes, PromptName(n))
	}
	read := func(split string, files []string) ([]Item, error) {
		var items []Item
		for _, f := range files {
			items, err = readCIFARPy(spec, filepath.Join(dir, f), split, items)
			if err != nil {
				return nil, err
			}
		}
		return items, nil
	}
	if train, err = read("train", spec.pyTrain); err != nil {
		return nil, nil, nil, err
	}
	if test, err = read("test", spec.pyTest); err != nil {
		return nil, nil, nil, err
	}
	return classes, train, test, nil
}

// readCIFARPy appends the images of one pickled batch dict ("data": uint8
// array N×3072, labels: list of N ints) to items.
func readCIFARPy(spec cifarSpec, file, split string, items []Item) ([]Item, error) {
	batch, err := loadPickle(file)
	if err != nil {
		return nil, err
	}
	dataV, err := dictGet(batch, "data")
	if err != nil {
		return nil, fmt.Errorf("pickle %s: %w", file, err)
	}
	data, ok := dataV.(*ndarray)
	if !ok || data.dtype == nil || data.dtype.kind != 'u' || data.dtype.size != 1 || len(data.shape) != 2 || data.shape[1] != cifarPixels {
		return nil, fmt.Errorf("pickle %s: key \"data\": want a uint8 array of shape (N, %d)", file, cifarPixels)
	}
	labelsV, err := dictGet(batch, spec.pyLabels)
	if err != nil {
		return nil, fmt.Errorf("pickle %s: %w", file, err)
	}
	labels, err := pyInts(labelsV)
	if err != nil {
		return nil, fmt.Errorf("pickle %s: key %q: %w", file, spec.pyLabels, err)
	}
	if len(labels) != data.shape[0] {
		return nil, fmt.Errorf("pickle %s: key %q: %d labels for %d images", file, spec.pyLabels, len(labels), data.shape[0])
	}
	for r, l := range labels {
		if l < 0 || l >= spec.nClasses {
			return nil, fmt.Errorf("pickle %s: key %q: element %d: label %d outside [0,%d)", file, spec.pyLabels, r, l, spec.nClasses)
		}
		off := r * cifarPixels
		items = append(items, cifarItem(spec.name, split, len(items), l, data.data[off:off+cifarPixels:off+cifarPixels]))
	}
	return items, nil
}
