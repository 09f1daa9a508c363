package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/pfedmma/pfedmma/internal/inputfile"
)

// FEMNIST (LEAF)
//
// femnist reads LEAF's FEMNIST JSON files from the first of
// DATA/femnist/data, DATA/data and DATA that has train/*.json and
// test/*.json. Each file is one JSON object
//
//	{"users": ["f0000_14", ...], "num_samples": [n, ...],
//	 "user_data": {"f0000_14": {"x": [[784 floats in [0,1]], ...], "y": [label, ...]}, ...}}
//
// Every writer ("user") is one domain, named by its id, in the order the
// files (sorted by name, train before test) first list them; the
// "natural" protocol makes each writer a client. Images are 28×28 gray
// (LEAF's values ×255). The 62 classes are "digit 0".."digit 9",
// "uppercase letter A".., "lowercase letter a".. (CLIP lower-cases its
// input, so the case must be spelled out). femnist_digits keeps the
// digits only (FedOT's FEMNIST), dropping writers left without images.
// [Options.Domains] selects writers by id, or by position (0-based) in the
// order above when an entry is a number that is not a writer id.

// FEMNISTImageSide is the side of a FEMNIST image.
const FEMNISTImageSide = 28

// FEMNISTClasses are the 62 FEMNIST class names in label order.
var FEMNISTClasses = func() []string {
	var out []string
	for c := '0'; c <= '9'; c++ {
		out = append(out, "digit "+string(c))
	}
	for c := 'A'; c <= 'Z'; c++ {
		out = append(out, "uppercase letter "+string(c))
	}
	for c := 'a'; c <= 'z'; c++ {
		out = append(out, "lowercase letter "+string(c))
	}
	return out
}()

func init() {
	for name, f := range map[string]LoaderFunc{
		"femnist":        LoadFEMNIST,
		"femnist_digits": LoadFEMNISTDigits,
	} {
		if err := Register(name, f); err != nil {
			panic(err) // a programming error: two loaders under one name
		}
	}
}

// LoadFEMNIST reads LEAF's FEMNIST (62 classes, one domain per writer).
func LoadFEMNIST(root string, opts Options) (*Dataset, error) {
	return loadFEMNIST("femnist", root, opts, len(FEMNISTClasses))
}

// LoadFEMNISTDigits reads LEAF's FEMNIST keeping the 10 digit classes.
func LoadFEMNISTDigits(root string, opts Options) (*Dataset, error) {
	return loadFEMNIST("femnist_digits", root, opts, 10)
}

// leafFile is one LEAF JSON file with each user's data left raw.
type leafFile struct {
	Users      []string                   `json:"users"`
	NumSamples []int                      `json:"num_samples"`
	UserData   map[string]json.RawMessage `json:"user_data"`
}

// leafUser is one writer's samples.
type leafUser struct {
	X [][]float64 `json:"x"`
	Y []int       `json:"y"`
}

// findFEMNISTDir returns the folder holding train/ and test/.
func findFEMNISTDir(root string) (string, error) {
	cands := []string{filepath.Join(root, "femnist", "data"), filepath.Join(root, "data"), root}
	for _, c := range cands {
		if isDir(filepath.Join(c, "train")) && isDir(filepath.Join(c, "test")) {
			return c, nil
		}
	}
	return "", fmt.Errorf("dataset femnist: no train/ and test/ folders of LEAF JSON files in any of %q", cands)
}

// loadFEMNIST reads the LEAF files under root's FEMNIST folder: the
// selected writers (opts.Domains; all when empty) become the domains, in the
// selection's order, and only labels below numClasses are kept.
func loadFEMNIST(name, root string, opts Options, numClasses int) (*Dataset, error) {
	dir, err := findFEMNISTDir(root)
	if err != nil {
		return nil, err
	}
	files, err := femnistFiles(name, dir)
	if err != nil {
		return nil, err
	}
	all := append(slices.Clone(files["train"]), files["test"]...)
	ids, err := femnistSelection(name, all, opts.Domains)
	if err != nil {
		return nil, err
	}
	r := &femnistReader{
		d:          &Dataset{Name: name, Classes: slices.Clone(FEMNISTClasses[:numClasses])},
		numClasses: numClasses,
		selected:   idSet(ids),
		domainOf:   map[string]int{},
	}
	for _, split := range []string{"train", "test"} {
		for _, file := range files[split] {
			err := readLEAFFile(file, func(user string, u *leafUser) error {
				r.addUser(split, user, u)
				return nil
			}, r.selected)
			if err != nil {
				return nil, fmt.Errorf("dataset %s: %w", name, err)
			}
		}
	}
	if ids != nil {
		if err := r.orderAs(name, ids); err != nil {
			return nil, err
		}
	}
	if len(r.d.Domains) == 0 {
		return nil, fmt.Errorf("dataset %s: %s: no images", name, dir)
	}
	return r.d, nil
}

// femnistFiles lists the sorted .json files of dir's train/ and test/
// folders; each must hold at least one.
func femnistFiles(name, dir string) (map[string][]string, error) {
	files := map[string][]string{}
	for _, split := range []string{"train", "test"} {
		fs, err := filepath.Glob(filepath.Join(dir, split, "*.json"))
		if err != nil {
			return nil, fmt.Errorf("dataset %s: %w", name, err)
		}
		if len(fs) == 0 {
			return nil, fmt.Errorf("dataset %s: %s: no .json files", name, filepath.Join(dir, split))
		}
		slices.Sort(fs)
		files[split] = fs
	}
	return files, nil
}

// idSet is the set of ids, or nil for nil ids (every writer).
func idSet(ids []string) map[string]bool {
	if ids == nil {
		return nil
	}
	set := map[string]bool{}
	for _, id := range ids {
		set[id] = true
	}
	return set
}

// femnistReader collects the items of the selected writers into d, a domain
// per writer in the order the files first give the writer an item.
type femnistReader struct {
	d          *Dataset
	numClasses int
	selected   map[string]bool // nil: every writer
	domainOf   map[string]int  // writer → domain index in d.Domains
}

// addUser adds the images of one writer of split ("train" or "test") whose
// label is below numClasses, pixels scaled from [0, 1] to bytes.
func (r *femnistReader) addUser(split, user string, u *leafUser) {
	if r.selected != nil && !r.selected[user] {
		return
	}
	d := r.d
	for k, y := range u.Y {
		if y >= r.numClasses {
			continue
		}
		dom, ok := r.domainOf[user]
		if !ok {
			dom = len(d.Domains)
			r.domainOf[user] = dom
			d.Domains = append(d.Domains, user)
		}
		pix := make([]byte, len(u.X[k]))
		for i, v := range u.X[k] {
			pix[i] = byte(math.Round(v * 255))
		}
		it := Item{Key: split + "/" + user + "/" + strconv.Itoa(k), Label: y, Domain: dom,
			Source: Pixels{Width: FEMNISTImageSide, Height: FEMNISTImageSide, Channels: 1, Pix: pix}}
		if split == "train" {
			d.Train = append(d.Train, it)
		} else {
			d.Test = append(d.Test, it)
		}
	}
}

// orderAs renumbers the domains into the order of the selected writer ids,
// failing naming the selected writers that have no images.
func (r *femnistReader) orderAs(name string, ids []string) error {
	var missing []string
	order := map[int]int{}
	for _, id := range ids {
		dom, ok := r.domainOf[id]
		if !ok {
			missing = append(missing, id)
		}
		order[dom] = len(order)
	}
	if len(missing) > 0 {
		return fmt.Errorf("dataset %s: selected writers %q have no images", name, missing)
	}
	for _, sp := range [][]Item{r.d.Train, r.d.Test} {
		for i := range sp {
			sp[i].Domain = order[sp[i].Domain]
		}
	}
	r.d.Domains = ids
	return nil
}

// femnistSelection resolves Options.Domains to writer ids, in order (nil:
// all writers). Entries that are numbers and not writer ids are positions in
// the order the files list the writers; only then are the files scanned for
// their user lists.
func femnistSelection(name string, files, sel []string) ([]string, error) {
	if len(sel) == 0 {
		return nil, nil
	}
	var order []string // writers in file order, read on first need
	scanned := false
	scan := func() error {
		scanned = true
		seen := map[string]bool{}
		for _, f := range files {
			b, err := inputfile.ReadFile(f)
			if err != nil {
				return err
			}
			var top struct {
				Users []string `json:"users"`
			}
			if err := json.Unmarshal(b, &top); err != nil {
				return jsonError(f, b, 0, err)
			}
			for _, u := range top.Users {
				if !seen[u] {
					seen[u] = true
					order = append(order, u)
				}
			}
		}
		return nil
	}
	var out []string
	var known map[string]bool // the writers in order, as a set
	chosen := map[string]bool{}
	for _, s := range sel {
		id := s
		if i, err := strconv.Atoi(s); err == nil {
			if !scanned {
				if err := scan(); err != nil {
					return nil, fmt.Errorf("dataset %s: %w", name, err)
				}
				known = make(map[string]bool, len(order))
				for _, u := range order {
					known[u] = true
				}
			}
			if !known[s] {
				if i < 0 || i >= len(order) {
					return nil, fmt.Errorf("dataset %s: writer %q: neither a writer id nor a position in [0,%d)", name, s, len(order))
				}
				id = order[i]
			}
		}
		if chosen[id] {
			return nil, fmt.Errorf("dataset %s: writer %q selected twice", name, id)
		}
		chosen[id] = true
		out = append(out, id)
	}
	return out, nil
}

// readLEAFFile parses one LEAF JSON file and calls fn for every user in the
// order of "users" (users not in want, when want is non-nil, are checked
// for structure only). Errors name the file and line.
func readLEAFFile(file string, fn func(user string, u *leafUser) error, want map[string]bool) error {
	b, err := inputfile.ReadFile(file)
	if err != nil {
		return err
	}
	var top leafFile
	if err := json.Unmarshal(b, &top); err != nil {
		return jsonError(file, b, 0, err)
	}
	at := func(keys ...string) string {
		off, _ := keyOffset(b, keys...)
		return fmt.Sprintf("%s:%d", file, lineOf(b, off))
	}
	switch {
	case top.Users == nil:
		return fmt.Errorf("%s: no \"users\" list", file)
	case top.UserData == nil:
		return fmt.Errorf("%s: no \"user_data\" object", file)
	case len(top.NumSamples) != len(top.Users):
		return fmt.Errorf("%s: %d users but %d num_samples", at("num_samples"), len(top.Users), len(top.NumSamples))
	}
	// linear in the users (a file of 400k users once took hours here)
	listed := make(map[string]bool, len(top.Users))
	for _, user := range top.Users {
		if listed[user] {
			return fmt.Errorf("%s: user %q listed twice in \"users\"", at("users"), user)
		}
		listed[user] = true
	}
	for user := range top.UserData {
		if !listed[user] {
			return fmt.Errorf("%s: user_data has user %q, not in \"users\"", at("user_data", user), user)
		}
	}
	for i, user := range top.Users {
		raw, ok := top.UserData[user]
		if !ok {
			return fmt.Errorf("%s: user %q has no user_data", at("users"), user)
		}
		if want != nil && !want[user] {
			continue
		}
		var u leafUser
		if err := json.Unmarshal(raw, &u); err != nil {
			off, _ := keyOffset(b, "user_data", user)
			return jsonError(file, b, valueStart(b, off), err)
		}
		if len(u.X) != len(u.Y) || len(u.Y) != top.NumSamples[i] {
			return fmt.Errorf("%s: user %q: %d images, %d labels, num_samples %d", at("user_data", user), user, len(u.X), len(u.Y), top.NumSamples[i])
		}
		for k, x := range u.X {
			if len(x) != FEMNISTImageSide*FEMNISTImageSide {
				return fmt.Errorf("%s: user %q: image %d has %d values, want %d", at("user_data", user), user, k, len(x), FEMNISTImageSide*FEMNISTImageSide)
			}
			for j, v := range x {
				if !(v >= 0 && v <= 1) {
					return fmt.Errorf("%s: user %q: image %d: value %d is %g, want [0,1]", at("user_data", user), user, k, j, v)
				}
			}
			if y := u.Y[k]; y < 0 || y >= len(FEMNISTClasses) {
				return fmt.Errorf("%s: user %q: label %d of image %d outside [0,%d)", at("user_data", user), user, y, k, len(FEMNISTClasses))
			}
		}
		if err := fn(user, &u); err != nil {
			return err
		}
	}
	return nil
}

// jsonError places a decoding error of the JSON value starting at byte base
// of b: "file:line:col: message".
func jsonError(file string, b []byte, base int64, err error) error {
	var off int64 = -1
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	}
	if off < 0 {
		return fmt.Errorf("%s: %w", file, err)
	}
	off += base
	line, col := lineCol(b, off)
	return fmt.Errorf("%s:%d:%d: %w", file, line, col, err)
}

// lineOf returns the 1-based line of byte offset off in b.
func lineOf(b []byte, off int64) int {
	l, _ := lineCol(b, off)
	return l
}

// lineCol returns the 1-based line and column of byte offset off in b.
func lineCol(b []byte, off int64) (int, int) {
	off = min(max(off, 0), int64(len(b)))
	line := 1 + bytes.Count(b[:off], []byte{'\n'})
	col := int(off) - (bytes.LastIndexByte(b[:off], '\n') + 1) + 1
	return line, col
}

// keyOffset finds the byte offset just after the key path keys (an object
// key at each level) in the JSON object b; 0 and false when absent.
func keyOffset(b []byte, keys ...string) (int64, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var off int64
	for depth, want := range keys {
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return off, depth > 0
		}
		for {
			t, err := dec.Token()
			if err != nil || t == json.Delim('}') {
				return off, depth > 0
			}
			if t == want {
				off = dec.InputOffset()
				break
			}
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return off, depth > 0
			}
		}
	}
	return off, true
}

// valueStart skips the ':' and blanks after a key ending at off.
func valueStart(b []byte, off int64) int64 {
	for off < int64(len(b)) {
		switch b[off] {
		case ' ', '\t', '\r', '\n', ':':
			off++
			continue
		}
		break
	}
	return off
}
