package dataset

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLEAFManyUsersLinear: a LEAF file of 200k users is read in linear
// time (before: the user check was quadratic, 150k users took 59 s), and
// a user listed twice is refused naming the file.
func TestLEAFManyUsersLinear(t *testing.T) {
	const users = 200000
	root := t.TempDir()
	write := func(rel string, names []string, withImage string) {
		var sb strings.Builder
		sb.WriteString(`{"users": [`)
		for i, n := range names {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, "%q", n)
		}
		sb.WriteString(`], "num_samples": [`)
		for i, n := range names {
			if i > 0 {
				sb.WriteByte(',')
			}
			if n == withImage {
				sb.WriteByte('1')
			} else {
				sb.WriteByte('0')
			}
		}
		sb.WriteString(`], "user_data": {`)
		img := "[" + strings.TrimSuffix(strings.Repeat("0.5,", 28*28), ",") + "]"
		for i, n := range names {
			if i > 0 {
				sb.WriteByte(',')
			}
			if n == withImage {
				fmt.Fprintf(&sb, `%q: {"x": [%s], "y": [3]}`, n, img)
			} else {
				fmt.Fprintf(&sb, `%q: {"x": [], "y": []}`, n)
			}
		}
		sb.WriteString("}}")
		p := filepath.Join(root, "femnist", "data", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, users)
	for i := range names {
		names[i] = fmt.Sprintf("f%07d", i)
	}
	write("train/a.json", names, names[users-1])
	write("test/a.json", []string{"f0000000"}, "f0000000")
	start := time.Now()
	ds, err := Load("femnist", root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("reading %d users took %v", users, d)
	}
	if len(ds.Domains) != 2 || len(ds.Train) != 1 || len(ds.Test) != 1 {
		t.Errorf("domains %d, train %d, test %d", len(ds.Domains), len(ds.Train), len(ds.Test))
	}
	write("test/a.json", []string{"f0000000", "f0000000"}, "f0000000")
	if _, err := Load("femnist", root, Options{}); err == nil || !strings.Contains(err.Error(), "listed twice") || !strings.Contains(err.Error(), "test/a.json") {
		t.Errorf("a user listed twice: %v", err)
	}
}
