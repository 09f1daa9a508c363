package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSeedsLinearAndBounded: the duplicate-seed check is linear (before:
// quadratic, 80k seeds took 2.7 s and six million hung), the number of
// seeds is bounded naming the key, and a configuration file over
// MaxFileBytes is refused naming the file before it is parsed (a 47 MB
// list of seeds took minutes and GiBs).
func TestSeedsLinearAndBounded(t *testing.T) {
	e, err := Preset(DefaultPreset)
	if err != nil {
		t.Fatal(err)
	}
	e.Seeds = make([]uint64, 300000)
	for i := range e.Seeds {
		e.Seeds[i] = uint64(i + 1)
	}
	e.Seeds[len(e.Seeds)-1] = 7 // one repeat, at the end
	start := time.Now()
	errs := e.check()
	if d := time.Since(start); d > 20*time.Second { // quadratic: ~40 s on 2 cores
		t.Errorf("validating 300000 seeds took %v", d)
	}
	var got []string
	for _, fe := range errs {
		got = append(got, fe.Error())
	}
	all := strings.Join(got, "\n")
	if !strings.Contains(all, "seeds: 300000 seeds; at most") || !strings.Contains(all, "seeds[299999]: seed 7 repeats seeds[6]") {
		t.Errorf("errors:\n%s", all)
	}

	big := filepath.Join(t.TempDir(), "big.yaml")
	var sb strings.Builder
	sb.WriteString("seeds: [")
	for i := 1; sb.Len() <= MaxFileBytes; i++ {
		fmt.Fprintf(&sb, "%d,", i)
	}
	sb.WriteString("0]\n")
	if err := os.WriteFile(big, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Compose(Sources{File: big})
	if err == nil || !strings.Contains(err.Error(), big) || !strings.Contains(err.Error(), "at most") {
		t.Errorf("config of %d bytes: %v", sb.Len(), err)
	}
	// a real list of seeds is accepted
	if _, err := Compose(Sources{Sets: []string{"seeds=[1, 2, 3]"}}); err != nil {
		t.Errorf("seeds=[1, 2, 3]: %v", err)
	}
}
