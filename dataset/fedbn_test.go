package dataset

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// siteEntries are the (path, class) pairs written for site s and split sp.
func siteEntries(dir, s, sp string, classes []string) [][2]string {
	var out [][2]string
	for i, c := range classes {
		out = append(out, [2]string{fmt.Sprintf("%s/%s/%s/%s_%d.png", dir, s, c, sp, i), c})
	}
	return out
}

// listFile formats pairs in the list format of ext.
func listFile(ext string, pairs [][2]string) []byte {
	var b strings.Builder
	b.WriteString("# header comment\n")
	for _, p := range pairs {
		switch ext {
		case ".tsv":
			fmt.Fprintf(&b, "%s\t%s\n", p[0], p[1])
		case ".csv":
			fmt.Fprintf(&b, "%s,%s\n", p[0], p[1])
		default:
			fmt.Fprintf(&b, "%s   %s\n", p[0], p[1])
		}
	}
	return []byte(b.String())
}

// pklPair pickles a FedBN (paths, labels) pair in one of numpy's shapes.
func pklPair(kind string, pairs [][2]string) []byte {
	var paths, labels []string
	for _, p := range pairs {
		paths = append(paths, p[0])
		labels = append(labels, p[1])
	}
	uarr := func(p *pickler, strs []string) {
		raw, w := ucs4(strs)
		p.ndarray(fmt.Sprintf("U%d", w), "<", 4*w, []int{len(strs)}, raw, nil)
	}
	switch kind {
	case "tuple of U arrays, protocol 2":
		p := newPickler(2, false)
		p.tuple(func() { uarr(p, paths) }, func() { uarr(p, labels) })
		return p.done()
	case "list of object arrays, protocol 3":
		p := newPickler(3, false)
		p.list(func() { p.ndarray("O8", "|", 8, []int{len(paths)}, nil, paths) },
			func() { p.ndarray("O8", "|", 8, []int{len(labels)}, nil, labels) })
		return p.done()
	case "2xN U array, protocol 5":
		p := newPickler(5, false)
		raw, w := ucs4(append(slices.Clone(paths), labels...))
		p.frombuffer(fmt.Sprintf("<U%d", w), "<", 4*w, []int{2, len(paths)}, raw)
		return p.done()
	case "tuple of lists, python 2":
		p := newPickler(2, true)
		strs := func(xs []string) func() {
			return func() {
				p.op(']', '(')
				for _, x := range xs {
					p.str(x)
				}
				p.op('e')
			}
		}
		p.tuple(strs(paths), strs(labels))
		return p.done()
	case "length mismatch":
		p := newPickler(2, false)
		p.tuple(func() { uarr(p, paths) }, func() { uarr(p, labels[1:]) })
		return p.done()
	}
	panic("unknown kind " + kind)
}

func TestFedBN(t *testing.T) {
	formats := []string{".tsv", ".csv", ".txt",
		"tuple of U arrays, protocol 2", "list of object arrays, protocol 3", "2xN U array, protocol 5", "tuple of lists, python 2"}
	for _, format := range formats {
		t.Run(format, func(t *testing.T) {
			root := t.TempDir()
			for _, s := range OfficeCaltech10Sites {
				for _, sp := range []string{"train", "test"} {
					pairs := siteEntries("office_caltech_10", s, sp, OfficeCaltech10Classes)
					if sp == "train" { // drop one class to check labels are looked up, not counted
						pairs = pairs[1:]
					}
					if strings.HasPrefix(format, ".") {
						writeFile(t, root, "office_caltech_10/"+s+"_"+sp+format, listFile(format, pairs))
					} else {
						writeFile(t, root, "office_caltech_10/"+s+"_"+sp+".pkl", pklPair(format, pairs))
					}
					for _, p := range pairs {
						writeFile(t, root, p[0], pngBytes(t, 7))
					}
				}
			}
			d, err := Load("office_caltech10", root, Options{Domains: []string{"webcam", "amazon"}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(d.Domains, []string{"webcam", "amazon"}) {
				t.Errorf("domains = %q", d.Domains)
			}
			if d.Classes[5] != "laptop computer" || d.Classes[0] != "back pack" || len(d.Classes) != 10 {
				t.Errorf("classes = %q", d.Classes)
			}
			if len(d.Train) != 18 || len(d.Test) != 20 {
				t.Fatalf("sizes %d/%d, want 18/20", len(d.Train), len(d.Test))
			}
			for _, sp := range [][]Item{d.Train, d.Test} {
				for _, it := range sp {
					// Paths encode site and class: check label and domain pairing.
					parts := strings.Split(it.Key, "/")
					if d.Domains[it.Domain] != parts[1] || OfficeCaltech10Classes[it.Label] != parts[2] {
						t.Errorf("item %q: domain %d label %d", it.Key, it.Domain, it.Label)
					}
				}
			}
			if _, err := d.Train[0].Source.Load(); err != nil {
				t.Errorf("load: %v", err)
			}
		})
	}
}

func TestFedBNErrors(t *testing.T) {
	tests := []struct {
		name  string
		file  string
		data  []byte
		opts  Options
		wants []string
	}{
		{"unknown class", "clipart_train.tsv", []byte("DomainNet/clipart/cat/1.png\tcat\n"), Options{Domains: []string{"clipart"}},
			[]string{"clipart_train.tsv", "entry 1", `class "cat"`}},
		{"tsv fields", "clipart_train.tsv", []byte("a\tbird\textra\n"), Options{Domains: []string{"clipart"}},
			[]string{"clipart_train.tsv", "line 1"}},
		{"csv fields", "clipart_train.csv", []byte("a,bird\nb\n"), Options{Domains: []string{"clipart"}},
			[]string{"clipart_train.csv", "line 2"}},
		{"pkl length mismatch", "clipart_train.pkl", pklPair("length mismatch", siteEntries("DomainNet", "clipart", "train", DomainNetClasses)), Options{Domains: []string{"clipart"}},
			[]string{"clipart_train.pkl", "10 paths but 9 labels"}},
		{"absolute path", "clipart_train.txt", []byte("/abs/x.png bird\n"), Options{Domains: []string{"clipart"}},
			[]string{"clipart_train.txt", "relative"}},
		{"bad domain", "clipart_train.tsv", nil, Options{Domains: []string{"photo"}},
			[]string{`domain "photo"`}},
		{"missing site file", "clipart_train.tsv", []byte("x\tbird\n"), Options{Domains: []string{"clipart", "real"}},
			[]string{"clipart_test"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.data != nil {
				writeFile(t, filepath.Join(root, "DomainNet"), tc.file, tc.data)
			}
			_, err := Load("domainnet", root, tc.opts)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
