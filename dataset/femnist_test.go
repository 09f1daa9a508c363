package dataset

import (
	"encoding/json"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// leafJSON builds one LEAF file: user u gets labels[u]; image k of user u
// has every value (k+1)/10 except the first, which is u/100.
func leafJSON(t *testing.T, users []string, labels [][]int) []byte {
	t.Helper()
	data := map[string]any{}
	var ns []int
	for u, name := range users {
		var xs [][]float64
		for k := range labels[u] {
			x := make([]float64, 784)
			for i := range x {
				x[i] = float64(k+1) / 10
			}
			x[0] = float64(u) / 100
			xs = append(xs, x)
		}
		data[name] = map[string]any{"x": xs, "y": labels[u]}
		ns = append(ns, len(labels[u]))
	}
	b, err := json.MarshalIndent(map[string]any{"users": users, "num_samples": ns, "user_data": data}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// femnistTree writes DATA/femnist/data/{train,test}/*.json for three writers
// spread over two train files.
func femnistTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "femnist", "data")
	for rel, b := range map[string][]byte{
		"train/all_0.json": leafJSON(t, []string{"f_b", "f_a"}, [][]int{{0, 12, 40}, {1, 2}}),
		"train/all_1.json": leafJSON(t, []string{"f_c"}, [][]int{{61, 5}}),
		"test/all_0.json":  leafJSON(t, []string{"f_b", "f_a", "f_c"}, [][]int{{3}, {11}, {9}}),
	} {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestFEMNIST(t *testing.T) {
	root := femnistTree(t)
	d, err := Load("femnist", root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(d.Domains) != "[f_b f_a f_c]" || len(d.Classes) != 62 {
		t.Fatalf("domains %q, %d classes", d.Domains, len(d.Classes))
	}
	for l, want := range map[int]string{0: "digit 0", 10: "uppercase letter A", 36: "lowercase letter a", 61: "lowercase letter z"} {
		if d.Classes[l] != want {
			t.Errorf("class %d = %q, want %q", l, d.Classes[l], want)
		}
	}
	if len(d.Train) != 7 || len(d.Test) != 3 {
		t.Fatalf("%d train, %d test", len(d.Train), len(d.Test))
	}
	it := d.Train[4] // f_a's second image
	if it.Domain != 1 || it.Label != 2 || it.Key != "train/f_a/1" {
		t.Fatalf("item %+v", it)
	}
	img, err := it.Source.Load()
	if err != nil {
		t.Fatal(err)
	}
	g, ok := img.(*image.Gray)
	if !ok || g.Bounds().Dx() != 28 || g.Pix[0] != 3 || g.Pix[1] != 51 { // round(0.01·255), round(0.2·255)
		t.Fatalf("image %T %v first pixels %v", img, img.Bounds(), g.Pix[:2])
	}
	digits, err := Load("femnist_digits", root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range append(digits.Train, digits.Test...) {
		if it.Label >= 10 {
			t.Fatalf("femnist_digits kept label %d", it.Label)
		}
	}
	if len(digits.Classes) != 10 || len(digits.Train) != 4 || len(digits.Test) != 2 {
		t.Fatalf("digits: %d classes, %d train, %d test", len(digits.Classes), len(digits.Train), len(digits.Test))
	}
}

func TestFEMNISTSelection(t *testing.T) {
	root := femnistTree(t)
	// "2" is no writer id: the writer at position 2 (f_c).
	d, err := Load("femnist", root, Options{Domains: []string{"f_a", "2"}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(d.Domains) != "[f_a f_c]" || len(d.Train) != 4 || len(d.Test) != 2 {
		t.Fatalf("domains %q, %d train, %d test", d.Domains, len(d.Train), len(d.Test))
	}
	for _, it := range d.Train {
		if want := map[string]int{"f_a": 0, "f_c": 1}[strings.Split(it.Key, "/")[1]]; it.Domain != want {
			t.Fatalf("%s in domain %d, want %d", it.Key, it.Domain, want)
		}
	}
	for _, sel := range [][]string{{"f_zz"}, {"7"}, {"f_a", "f_a"}} {
		if _, err := Load("femnist", root, Options{Domains: sel}); err == nil {
			t.Errorf("selection %q: no error", sel)
		}
	}
}

// lineAt is "all_0.json:N:" for the line of text where marker starts.
func lineAt(text, marker string) string {
	return fmt.Sprintf("all_0.json:%d:", 1+strings.Count(text[:strings.Index(text, marker)], "\n"))
}

func TestFEMNISTErrors(t *testing.T) {
	good := string(leafJSON(t, []string{"f_a"}, [][]int{{1, 2}}))
	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"syntax", strings.Replace(good, `"users"`, `"users" [`, 1), []string{lineAt(good, `"users"`), "invalid character"}},
		{"type", strings.Replace(good, `"f_a"
 ]`, `7
 ]`, 1), []string{lineAt(good, "\"f_a\"\n ]"), "cannot unmarshal number"}},
		{"short image", strings.Replace(good, "0.1,\n", "", 1), []string{"all_0.json:", `user "f_a": image 0 has 783 values`}},
		{"value range", strings.Replace(good, "0.2,", "2.5,", 1), []string{`image 1: value 1 is 2.5`}},
		{"label range", strings.Replace(good, "    2\n", "    62\n", 1), []string{"label 62 of image 1"}},
		{"count", strings.Replace(good, "  2\n ]", "  3\n ]", 1), []string{"2 images, 2 labels, num_samples 3"}},
		{"unlisted user", strings.Replace(good, `"f_a": {`, `"f_z": {`, 1), []string{`user_data has user "f_z"`}},
		{"bad value type", strings.Replace(good, "0.2,", `"x",`, 1), []string{lineAt(good, "0.2,"), "cannot unmarshal string"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.text == good {
				t.Fatal("edit did not apply")
			}
			root := t.TempDir()
			for _, split := range []string{"train", "test"} {
				p := filepath.Join(root, "data", split, "all_0.json")
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, []byte(c.text), 0o644)
			}
			_, err := Load("femnist", root, Options{})
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
	if _, err := Load("femnist", t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "no train/ and test/") {
		t.Errorf("empty root: %v", err)
	}
}
