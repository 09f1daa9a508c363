package dataset

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dnClass is the class folder of label l in the generated lists.
func dnClass(l int) string { return fmt.Sprintf("class_%03d", l) }

// writeOfficialLists writes <site>_{train,test}.txt under dir: every label
// once in train and once in test (edit may rewrite each list of a site).
func writeOfficialLists(t *testing.T, dir string, sites []string, edit func(site string, lines []string) []string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range sites {
		for _, split := range []string{"train", "test"} {
			var lines []string
			for l := range DomainNetFullClasses {
				lines = append(lines, fmt.Sprintf("%s/%s/%s_%s_%03d.jpg %d", s, dnClass(l), s, split, l, l))
			}
			if edit != nil {
				lines = edit(s, lines)
			}
			if err := os.WriteFile(filepath.Join(dir, s+"_"+split+".txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestDomainNetOfficialLists(t *testing.T) {
	root := t.TempDir()
	writeOfficialLists(t, filepath.Join(root, "DomainNet"), DomainNetSites, nil)
	d, err := Load("domainnet", root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Classes) != 345 || d.Classes[7] != "class 007" || len(d.Domains) != 6 {
		t.Fatalf("%d classes (%q), domains %q", len(d.Classes), d.Classes[7], d.Domains)
	}
	if len(d.Train) != 6*345 || len(d.Test) != 6*345 {
		t.Fatalf("%d train, %d test", len(d.Train), len(d.Test))
	}
	it := d.Test[345+3] // infograph, label 3
	if it.Domain != 1 || it.Label != 3 || it.Key != "infograph/class_003/infograph_test_003.jpg" {
		t.Fatalf("item %+v", it)
	}
	if fs, ok := it.Source.(FileSource); !ok || fs.Path != filepath.Join(root, "DomainNet", "infograph", "class_003", "infograph_test_003.jpg") {
		t.Fatalf("source %+v", it.Source)
	}
	// Lists straight in the root, with a domain selection.
	root2 := t.TempDir()
	writeOfficialLists(t, root2, []string{"real", "sketch"}, nil)
	d, err = Load("domainnet", root2, Options{Domains: []string{"sketch", "real"}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Domains[0] != "sketch" || d.Train[0].Domain != 0 || !strings.HasPrefix(d.Train[0].Key, "sketch/") {
		t.Fatalf("domains %q, first %+v", d.Domains, d.Train[0])
	}
}

func TestDomainNetFallsBackToFedBN(t *testing.T) {
	// FedBN's .txt lists end in a class name: the 10-class subset loader
	// takes them.
	root := t.TempDir()
	dir := filepath.Join(root, "DomainNet")
	os.MkdirAll(dir, 0o755)
	for _, s := range DomainNetSites {
		for _, split := range []string{"train", "test"} {
			var b strings.Builder
			for _, c := range DomainNetClasses {
				fmt.Fprintf(&b, "DomainNet/%s/%s/%s_%s.jpg %s\n", s, c, c, split, c)
			}
			os.WriteFile(filepath.Join(dir, s+"_"+split+".txt"), []byte(b.String()), 0o644)
		}
	}
	d, err := Load("domainnet", root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Classes) != 10 {
		t.Fatalf("%d classes, want FedBN's 10", len(d.Classes))
	}
}

func TestDomainNetOfficialErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(site string, lines []string) []string
		want []string
	}{
		{"missing class", func(s string, l []string) []string {
			return l[:len(l)-1]
		}, []string{"344 classes, want 345", "[344]"}},
		{"label naming two classes", func(s string, l []string) []string {
			if s == "painting" {
				l[5] = "painting/other/x.jpg 5"
			}
			return l
		}, []string{"painting_train.txt:6", `label 5 is class "other"`, "clipart_train.txt:6"}},
		{"bad label", func(s string, l []string) []string {
			l[2] = "clipart/class_002/y.jpg two"
			return l
		}, []string{"clipart_train.txt:3", `label "two"`}},
		{"escaping path", func(s string, l []string) []string {
			l[0] = "../clipart/class_000/z.jpg 0"
			return l
		}, []string{"clipart_train.txt:1", "must stay inside"}},
		{"short path", func(s string, l []string) []string {
			l[0] = "z.jpg 0"
			return l
		}, []string{"clipart_train.txt:1", "<domain>/<class>/<file>"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			writeOfficialLists(t, root, DomainNetSites, c.edit)
			_, err := Load("domainnet", root, Options{})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
