package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/internal/inputfile"
)

// coopSpec describes one of CoOp's seven "CLIP datasets".
type coopSpec struct {
	name   string   // loader name
	dirs   []string // candidate dataset folders under DATA
	images string   // images folder inside the dataset folder
	split  string   // split file inside the dataset folder
	// generate builds a split when the split file is missing; nil means
	// the dataset cannot be regenerated from what is on disk.
	generate func(dsDir, imagesDir string, seed uint64) (*SplitFile, error)
}

var (
	coopCaltech101 = coopSpec{
		name: "caltech101", dirs: []string{"caltech-101"}, images: "101_ObjectCategories",
		split: "split_zhou_Caltech101.json",
		generate: folderSplit(immediateClassDirs(
			[]string{"BACKGROUND_Google", "Faces_easy"},
			map[string]string{"airplanes": "airplane", "Faces": "face", "Leopards": "leopard", "Motorbikes": "motorbike"})),
	}
	coopOxfordPets = coopSpec{
		name: "oxford_pets", dirs: []string{"oxford_pets"}, images: "images",
		split: "split_zhou_OxfordPets.json", generate: petsSplit,
	}
	coopOxfordFlowers = coopSpec{
		name: "oxford_flowers", dirs: []string{"oxford_flowers"}, images: "jpg",
		split: "split_zhou_OxfordFlowers.json",
	}
	coopFood101 = coopSpec{
		name: "food101", dirs: []string{"food-101"}, images: "images",
		split: "split_zhou_Food101.json", generate: folderSplit(immediateClassDirs(nil, nil)),
	}
	coopDTD = coopSpec{
		name: "dtd", dirs: []string{"dtd"}, images: "images",
		split: "split_zhou_DescribableTextures.json", generate: folderSplit(immediateClassDirs(nil, nil)),
	}
	coopSUN397 = coopSpec{
		name: "sun397", dirs: []string{"sun397", "SUN397"}, images: "SUN397",
		split: "split_zhou_SUN397.json", generate: folderSplit(sunClassDirs),
	}
	coopUCF101 = coopSpec{
		name: "ucf101", dirs: []string{"ucf101"}, images: "UCF-101-midframes",
		split: "split_zhou_UCF101.json", generate: folderSplit(immediateClassDirs(nil, nil)),
	}
)

// CoOp's split proportions.
const (
	coopTrainFrac = 0.5
	coopValFrac   = 0.2
	petsValFrac   = 0.2
)

// SplitEntry is one row of a CoOp split file: [relpath, label, classname].
type SplitEntry struct {
	// Path is relative to the dataset's images folder, '/'-separated.
	Path string
	// Label is the 0-based class index.
	Label int
	// Class is the class name as stored (underscores kept).
	Class string
}

// SplitFile is the content of a CoOp split_zhou_*.json file.
type SplitFile struct {
	Train, Val, Test []SplitEntry
}

// MarshalJSON writes CoOp's format: {"train": [[path, label, class], ...], ...}.
func (s *SplitFile) MarshalJSON() ([]byte, error) {
	rows := func(es []SplitEntry) [][3]any {
		out := make([][3]any, len(es))
		for i, e := range es {
			out[i] = [3]any{e.Path, e.Label, e.Class}
		}
		return out
	}
	return json.Marshal(struct {
		Train [][3]any `json:"train"`
		Val   [][3]any `json:"val"`
		Test  [][3]any `json:"test"`
	}{rows(s.Train), rows(s.Val), rows(s.Test)})
}

// ReadSplitFile reads and checks a CoOp split file.
func ReadSplitFile(file string) (*SplitFile, error) {
	b, err := inputfile.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("split file %s: %w", file, err)
	}
	s, err := parseSplit(b)
	if err != nil {
		return nil, fmt.Errorf("split file %s: %w", file, err)
	}
	return s, nil
}

func parseSplit(b []byte) (*SplitFile, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	s := &SplitFile{}
	for _, f := range []struct {
		key string
		dst *[]SplitEntry
	}{{"train", &s.Train}, {"val", &s.Val}, {"test", &s.Test}} {
		raw, ok := top[f.key]
		if !ok {
			return nil, fmt.Errorf("field %q: missing", f.key)
		}
		var rows []json.RawMessage
		if err := json.Unmarshal(raw, &rows); err != nil {
			return nil, fmt.Errorf("field %q: not a list: %w", f.key, err)
		}
		*f.dst = make([]SplitEntry, len(rows))
		for i, row := range rows {
			e, err := parseSplitRow(row)
			if err != nil {
				return nil, fmt.Errorf("field %q[%d]: %w", f.key, i, err)
			}
			(*f.dst)[i] = e
		}
	}
	return s, nil
}

func parseSplitRow(row json.RawMessage) (SplitEntry, error) {
	var cols []json.RawMessage
	if err := json.Unmarshal(row, &cols); err != nil || len(cols) != 3 {
		return SplitEntry{}, fmt.Errorf("want [relpath, label, classname], got %.80s", row)
	}
	var e SplitEntry
	if err := json.Unmarshal(cols[0], &e.Path); err != nil || e.Path == "" {
		return e, fmt.Errorf("relpath: want a non-empty string, got %.80s", cols[0])
	}
	if path.IsAbs(e.Path) || filepath.IsAbs(e.Path) {
		return e, fmt.Errorf("relpath %q: must be relative to the images folder", e.Path)
	}
	var num json.Number
	if c := bytes.TrimSpace(cols[1]); len(c) == 0 || c[0] == '"' {
		return e, fmt.Errorf("label: want an integer, got %.80s", cols[1])
	}
	if err := json.Unmarshal(cols[1], &num); err != nil {
		return e, fmt.Errorf("label: want an integer, got %.80s", cols[1])
	}
	l, err := strconv.Atoi(num.String())
	if err != nil || l < 0 {
		return e, fmt.Errorf("label: want an integer >= 0, got %s", num)
	}
	e.Label = l
	if err := json.Unmarshal(cols[2], &e.Class); err != nil || e.Class == "" {
		return e, fmt.Errorf("classname: want a non-empty string, got %.80s", cols[2])
	}
	return e, nil
}

// WriteSplitFile writes s to file in CoOp's JSON format (indented by four
// spaces, as CoOp does), through a temporary file and a rename.
func WriteSplitFile(file string, s *SplitFile) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("split file %s: %w", file, err)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "    "); err != nil {
		return fmt.Errorf("split file %s: %w", file, err)
	}
	if err := atomicfile.WriteBytes(file, buf.Bytes()); err != nil {
		return fmt.Errorf("split file %s: %w", file, err)
	}
	return nil
}

// classList returns the prompt-ready class names ordered by label; every
// label in [0, max] must occur and name one class only.
func (s *SplitFile) classList(file string) ([]string, error) {
	names := map[int]string{}
	maxLabel := -1
	for _, sp := range []struct {
		key string
		es  []SplitEntry
	}{{"train", s.Train}, {"val", s.Val}, {"test", s.Test}} {
		for i, e := range sp.es {
			if prev, ok := names[e.Label]; ok && prev != e.Class {
				return nil, fmt.Errorf("split file %s: field %q[%d]: label %d named %q, earlier %q", file, sp.key, i, e.Label, e.Class, prev)
			}
			names[e.Label] = e.Class
			maxLabel = max(maxLabel, e.Label)
		}
	}
	if maxLabel < 0 {
		return nil, fmt.Errorf("split file %s: no entries", file)
	}
	if maxLabel >= len(names) {
		// labels are not 0..n-1: name the first gap before allocating
		// anything by the largest label (1e9 once ran out of memory)
		for l := range len(names) {
			if _, ok := names[l]; !ok {
				return nil, fmt.Errorf("split file %s: label %d has no images (labels must be 0..%d, one per class; the largest is %d for %d classes)", file, l, len(names)-1, maxLabel, len(names))
			}
		}
	}
	classes := make([]string, maxLabel+1)
	for l := range classes {
		n, ok := names[l]
		if !ok {
			return nil, fmt.Errorf("split file %s: label %d has no images (labels must be 0..%d)", file, l, maxLabel)
		}
		classes[l] = PromptName(n)
	}
	return classes, nil
}

// coopLoader returns the loader of one CoOp dataset.
func coopLoader(spec coopSpec) LoaderFunc {
	return func(root string, opts Options) (*Dataset, error) { return loadCoOp(spec, root, opts) }
}

// findDatasetDir picks the first candidate folder under root that exists;
// root itself is accepted when it already is the dataset folder.
func findDatasetDir(root string, candidates []string, markers ...string) (string, error) {
	for _, c := range candidates {
		d := filepath.Join(root, c)
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d, nil
		}
	}
	for _, m := range markers {
		if _, err := os.Stat(filepath.Join(root, m)); err == nil {
			return root, nil
		}
	}
	return "", fmt.Errorf("no folder %s under %s: %w", strings.Join(candidates, " or "), root, fs.ErrNotExist)
}

func loadCoOp(spec coopSpec, root string, opts Options) (*Dataset, error) {
	dsDir, err := findDatasetDir(root, spec.dirs, spec.split, spec.images)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", spec.name, err)
	}
	imagesDir := filepath.Join(dsDir, spec.images)
	splitPath := filepath.Join(dsDir, spec.split)
	var split *SplitFile
	switch _, statErr := os.Stat(splitPath); {
	case statErr == nil:
		if split, err = ReadSplitFile(splitPath); err != nil {
			return nil, fmt.Errorf("dataset %s: %w", spec.name, err)
		}
	case errors.Is(statErr, fs.ErrNotExist) && spec.generate != nil:
		slog.Info("split file missing; generating CoOp split", "dataset", spec.name, "file", splitPath, "seed", opts.Seed)
		if split, err = spec.generate(dsDir, imagesDir, opts.Seed); err != nil {
			return nil, fmt.Errorf("dataset %s: generate %s: %w", spec.name, splitPath, err)
		}
		if !opts.NoWriteSplit {
			if err := WriteSplitFile(splitPath, split); err != nil {
				slog.Warn("could not save generated split", "dataset", spec.name, "err", err)
			}
		}
	case errors.Is(statErr, fs.ErrNotExist):
		return nil, fmt.Errorf("dataset %s: split file %s: missing, and %s cannot be regenerated without it", spec.name, splitPath, spec.name)
	default:
		return nil, fmt.Errorf("dataset %s: split file %s: %w", spec.name, splitPath, statErr)
	}
	classes, err := split.classList(splitPath)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", spec.name, err)
	}
	if !isDir(imagesDir) {
		return nil, fmt.Errorf("dataset %s: images folder %s: missing", spec.name, imagesDir)
	}
	realRoot := resolvedRoot(imagesDir)
	items := func(what string, es []SplitEntry) ([]Item, error) {
		out := make([]Item, len(es))
		for i, e := range es {
			rel, err := localPath(e.Path)
			if err != nil {
				return nil, fmt.Errorf("dataset %s: split file %s: %s entry %d: %w", spec.name, splitPath, what, i+1, err)
			}
			out[i] = Item{
				Key:    e.Path,
				Label:  e.Label,
				Source: FileSource{Path: filepath.Join(imagesDir, rel), Root: realRoot, Decode: opts.Decode},
			}
		}
		return out, nil
	}
	d := &Dataset{Name: spec.name, Classes: classes, Domains: []string{spec.name}}
	for _, sp := range []struct {
		what string
		es   []SplitEntry
		dst  *[]Item
	}{{"train", split.Train, &d.Train}, {"val", split.Val, &d.Val}, {"test", split.Test, &d.Test}} {
		if *sp.dst, err = items(sp.what, sp.es); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// folderClass is a class folder: its path relative to the images folder and
// the class name to store in the split file.
type folderClass struct {
	rel, name string
}

// folderSplit generates CoOp's read_and_split_data split from class folders:
// classes in sorted folder order, each class's images shuffled and cut
// 50/20/30 (train/val/test).
func folderSplit(discover func(imagesDir string) ([]folderClass, error)) func(string, string, uint64) (*SplitFile, error) {
	return func(_, imagesDir string, seed uint64) (*SplitFile, error) {
		classes, err := discover(imagesDir)
		if err != nil {
			return nil, err
		}
		if len(classes) == 0 {
			return nil, fmt.Errorf("%s: no class folders with images", imagesDir)
		}
		rng := newRand(seed, streamCoOpSplit)
		s := &SplitFile{}
		for label, c := range classes {
			imgs, err := listImages(filepath.Join(imagesDir, filepath.FromSlash(c.rel)))
			if err != nil {
				return nil, err
			}
			rng.Shuffle(len(imgs), func(i, j int) { imgs[i], imgs[j] = imgs[j], imgs[i] })
			n := len(imgs)
			nTrain := roundHalfEven(float64(n) * coopTrainFrac)
			nVal := roundHalfEven(float64(n) * coopValFrac)
			if nTrain == 0 || nVal == 0 || n-nTrain-nVal <= 0 {
				return nil, fmt.Errorf("class folder %s: %d images cannot be split 50/20/30 with every part non-empty", c.rel, n)
			}
			for i, im := range imgs {
				e := SplitEntry{Path: path.Join(c.rel, im), Label: label, Class: c.name}
				switch {
				case i < nTrain:
					s.Train = append(s.Train, e)
				case i < nTrain+nVal:
					s.Val = append(s.Val, e)
				default:
					s.Test = append(s.Test, e)
				}
			}
		}
		return s, nil
	}
}

// listImages returns the sorted image file names directly inside dir.
func listImages(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("class folder %s: %w", dir, err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && isImageFile(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil // ReadDir sorts by name
}

// immediateClassDirs discovers class folders as the non-hidden directories
// directly inside the images folder, skipping ignored ones and renaming
// classes as given.
func immediateClassDirs(ignore []string, rename map[string]string) func(string) ([]folderClass, error) {
	return func(imagesDir string) ([]folderClass, error) {
		ents, err := os.ReadDir(imagesDir)
		if err != nil {
			return nil, fmt.Errorf("images folder: %w", err)
		}
		var out []folderClass
		for _, e := range ents {
			n := e.Name()
			if !e.IsDir() || strings.HasPrefix(n, ".") || slices.Contains(ignore, n) {
				continue
			}
			name := n
			if r, ok := rename[n]; ok {
				name = r
			}
			out = append(out, folderClass{rel: n, name: name})
		}
		return out, nil
	}
}

// sunClassDirs discovers SUN397's nested classes (SUN397/a/abbey,
// SUN397/a/apartment_building/outdoor): every folder holding images is a
// class, named as CoOp names it from ClassName.txt — the components after the
// letter folder, reversed ("outdoor apartment_building").
func sunClassDirs(imagesDir string) ([]folderClass, error) {
	var out []folderClass
	err := filepath.WalkDir(imagesDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || p == imagesDir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		imgs, err := listImages(p)
		if err != nil || len(imgs) == 0 {
			return err
		}
		rel, err := filepath.Rel(imagesDir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		parts := strings.Split(rel, "/")
		if len(parts) > 1 && len(parts[0]) == 1 {
			parts = parts[1:]
		}
		slices.Reverse(parts)
		out = append(out, folderClass{rel: rel, name: strings.Join(parts, " ")})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("images folder %s: %w", imagesDir, err)
	}
	slices.SortFunc(out, func(a, b folderClass) int { return strings.Compare(a.rel, b.rel) })
	return out, nil
}

// petsSplit regenerates CoOp's OxfordPets split from annotations/trainval.txt
// and annotations/test.txt ("Abyssinian_100 1 1 1": image stem, 1-based
// class id, ...): breed = stem without its trailing number, lower-cased;
// trainval is cut per class into 80% train / 20% val.
func petsSplit(dsDir, _ string, seed uint64) (*SplitFile, error) {
	trainval, err := readPetsList(filepath.Join(dsDir, "annotations", "trainval.txt"))
	if err != nil {
		return nil, err
	}
	test, err := readPetsList(filepath.Join(dsDir, "annotations", "test.txt"))
	if err != nil {
		return nil, err
	}
	byLabel := map[int][]SplitEntry{}
	for _, e := range trainval {
		byLabel[e.Label] = append(byLabel[e.Label], e)
	}
	labels := slices.Sorted(maps.Keys(byLabel))
	rng := newRand(seed, streamCoOpSplit)
	s := &SplitFile{Test: test}
	for _, l := range labels {
		es := byLabel[l]
		rng.Shuffle(len(es), func(i, j int) { es[i], es[j] = es[j], es[i] })
		nVal := roundHalfEven(float64(len(es)) * petsValFrac)
		if nVal == 0 || nVal == len(es) {
			return nil, fmt.Errorf("annotations/trainval.txt: class %d has %d images, too few for a 80/20 train/val cut", l+1, len(es))
		}
		s.Val = append(s.Val, es[:nVal]...)
		s.Train = append(s.Train, es[nVal:]...)
	}
	return s, nil
}

func readPetsList(file string) ([]SplitEntry, error) {
	f, err := inputfile.Open(file)
	if err != nil {
		return nil, fmt.Errorf("pets list %s: %w", file, err)
	}
	defer f.Close()
	var out []SplitEntry
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		fields := strings.Fields(t)
		if len(fields) < 2 {
			return nil, fmt.Errorf("pets list %s: line %d: want \"image class_id ...\", got %q", file, line, t)
		}
		id, err := strconv.Atoi(fields[1])
		if err != nil || id < 1 {
			return nil, fmt.Errorf("pets list %s: line %d: class_id %q: want an integer >= 1", file, line, fields[1])
		}
		stem := fields[0]
		i := strings.LastIndexByte(stem, '_')
		if i <= 0 {
			return nil, fmt.Errorf("pets list %s: line %d: image %q: want breed_number", file, line, stem)
		}
		out = append(out, SplitEntry{Path: stem + ".jpg", Label: id - 1, Class: strings.ToLower(stem[:i])})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("pets list %s: %w", file, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pets list %s: no entries", file)
	}
	return out, nil
}
