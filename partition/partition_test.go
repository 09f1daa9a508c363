package partition

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/dataset"
)

// makeItems returns counts[l] items of label l, in label order, all of
// domain dom.
func makeItems(prefix string, counts []int, dom int) []dataset.Item {
	var out []dataset.Item
	for l, n := range counts {
		for i := range n {
			out = append(out, dataset.Item{Key: fmt.Sprintf("%s/d%d/c%d/%d", prefix, dom, l, i), Label: l, Domain: dom,
				Source: dataset.Pixels{Width: 1, Height: 1, Channels: 1, Pix: []byte{byte(l)}}})
		}
	}
	return out
}

func uniform(nClasses, n int) []int {
	out := make([]int, nClasses)
	for i := range out {
		out[i] = n
	}
	return out
}

func TestFewShot(t *testing.T) {
	tests := []struct {
		name   string
		counts []int
		shots  int
		want   []int // per-class counts
	}{
		{"more than shots", []int{20, 30, 17}, 16, []int{16, 16, 16}},
		{"fewer than shots", []int{3, 30, 0, 1}, 4, []int{3, 4, 0, 1}},
		{"one shot", []int{5, 5}, 1, []int{1, 1}},
		{"all", []int{5, 7}, 0, []int{5, 7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			items := makeItems("x", tc.counts, 0)
			// Interleave classes so that "input order" is not class order.
			slices.SortFunc(items, func(a, b dataset.Item) int { return strings.Compare(a.Key[len(a.Key)-1:], b.Key[len(b.Key)-1:]) })
			got := FewShot(items, tc.shots, 7)
			per := make([]int, len(tc.counts))
			for _, it := range got {
				per[it.Label]++
			}
			if !slices.Equal(per, tc.want) {
				t.Errorf("per-class counts %v, want %v", per, tc.want)
			}
			idx := FewShotIndices(items, tc.shots, 7)
			if !slices.IsSorted(idx) {
				t.Errorf("indices not ascending: %v", idx)
			}
			for k, i := range idx {
				if items[i].Key != got[k].Key {
					t.Fatalf("FewShot and FewShotIndices disagree at %d", k)
				}
			}
			again := FewShot(items, tc.shots, 7)
			if fmt.Sprint(keys(again)) != fmt.Sprint(keys(got)) {
				t.Error("same seed, different draw")
			}
		})
	}
	items := makeItems("x", []int{50, 50}, 0)
	if fmt.Sprint(keys(FewShot(items, 4, 1))) == fmt.Sprint(keys(FewShot(items, 4, 2))) {
		t.Error("seeds 1 and 2 drew the same images")
	}
}

func keys(items []dataset.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Key
	}
	return out
}

func TestFewShotCache(t *testing.T) {
	dir := t.TempDir()
	items := makeItems("x", []int{10, 10, 3}, 0)
	got, err := CachedFewShot(dir, "toy", items, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	p := FewShotPath(dir, 2, 5)
	if filepath.Base(p) != "shot_2-seed_5.json" {
		t.Errorf("path %s", p)
	}
	d, err := LoadFewShot(p)
	if err != nil {
		t.Fatal(err)
	}
	if d.Dataset != "toy" || d.Shots != 2 || d.Seed != 5 || !slices.Equal(d.Keys, keys(got)) {
		t.Errorf("cached draw %+v, want keys %v", d, keys(got))
	}
	// The cache wins over a fresh draw: edit it to a different valid draw.
	d.Keys = []string{items[0].Key, items[1].Key}
	if err := SaveFewShot(p, d); err != nil {
		t.Fatal(err)
	}
	again, err := CachedFewShot(dir, "toy", items, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys(again), d.Keys) {
		t.Errorf("cache not used: %v", keys(again))
	}
	// Keys the dataset no longer has are an error.
	d.Keys = append(d.Keys, "gone")
	if err := SaveFewShot(p, d); err != nil {
		t.Fatal(err)
	}
	if _, err := CachedFewShot(dir, "toy", items, 2, 5); err == nil || !strings.Contains(err.Error(), `"gone"`) {
		t.Errorf("missing key: %v", err)
	}
	if _, err := CachedFewShot(dir, "other", items, 2, 5); err == nil || !strings.Contains(err.Error(), "holds toy") {
		t.Errorf("mismatched cache: %v", err)
	}
	if err := os.WriteFile(p, []byte(`{"dataset": "toy"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFewShot(p); err == nil || !strings.Contains(err.Error(), `"keys"`) {
		t.Errorf("no keys: %v", err)
	}
}

func TestSplitBaseNovel(t *testing.T) {
	tests := []struct {
		n           int
		base, novel []int
	}{
		{2, []int{0}, []int{1}},
		{5, []int{0, 1, 2}, []int{3, 4}},
		{6, []int{0, 1, 2}, []int{3, 4, 5}},
		{101, iota0(51), nil},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			b, err := SplitBaseNovel(tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(b.Base, tc.base) {
				t.Errorf("base %v, want %v", b.Base, tc.base)
			}
			if tc.novel != nil && !slices.Equal(b.Novel, tc.novel) {
				t.Errorf("novel %v, want %v", b.Novel, tc.novel)
			}
			if len(b.Base)+len(b.Novel) != tc.n {
				t.Errorf("%d+%d classes, want %d", len(b.Base), len(b.Novel), tc.n)
			}
			for i, l := range b.Novel {
				if b.NovelMap[l] != i {
					t.Errorf("novel %d relabelled %d, want %d", l, b.NovelMap[l], i)
				}
				if _, ok := b.BaseMap[l]; ok {
					t.Errorf("novel label %d in base map", l)
				}
			}
			for i, l := range b.Base {
				if b.BaseMap[l] != i {
					t.Errorf("base %d relabelled %d, want %d", l, b.BaseMap[l], i)
				}
			}
		})
	}
	if _, err := SplitBaseNovel(1); err == nil {
		t.Error("1 class accepted")
	}
	b, _ := SplitBaseNovel(5)
	if got := b.NovelNames([]string{"a", "b", "c", "d", "e"}); !slices.Equal(got, []string{"d", "e"}) {
		t.Errorf("novel names %v", got)
	}
}

func TestPathological(t *testing.T) {
	tests := []struct {
		classes, clients int
		sizes            []int
		fail             bool
	}{
		{50, 10, []int{5, 5, 5, 5, 5, 5, 5, 5, 5, 5}, false}, // Caltech101
		{51, 10, []int{5, 5, 5, 5, 5, 5, 5, 5, 5, 6}, false}, // Food101, UCF101
		{19, 10, []int{2, 2, 2, 2, 2, 2, 2, 2, 2, 1}, false}, // OxfordPets
		{24, 10, []int{2, 2, 2, 2, 2, 2, 2, 2, 2, 6}, false}, // DTD: round(2.4) = 2
		{199, 10, []int{20, 20, 20, 20, 20, 20, 20, 20, 20, 19}, false},
		{25, 10, []int{2, 2, 2, 2, 2, 2, 2, 2, 2, 7}, false}, // round(2.5) = 2, half to even
		{15, 10, nil, true}, // round(1.5) = 2: 9 clients take 18 > 15
		{3, 5, nil, true},
		{4, 0, nil, true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d/%d", tc.classes, tc.clients), func(t *testing.T) {
			classes := iota0(tc.classes)
			got, err := Pathological(classes, tc.clients, 3)
			if tc.fail {
				if err == nil {
					t.Fatalf("want error, got %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var all []int
			for i, g := range got {
				if len(g) != tc.sizes[i] {
					t.Errorf("client %d: %d classes, want %d", i, len(g), tc.sizes[i])
				}
				all = append(all, g...)
			}
			slices.Sort(all)
			if !slices.Equal(all, classes) {
				t.Errorf("classes not dealt exactly once: %v", all)
			}
			again, _ := Pathological(classes, tc.clients, 3)
			other, _ := Pathological(classes, tc.clients, 4)
			if fmt.Sprint(again) != fmt.Sprint(got) {
				t.Error("same seed, different deal")
			}
			if fmt.Sprint(other) == fmt.Sprint(got) {
				t.Error("seeds 3 and 4 dealt the same")
			}
		})
	}
}

func TestBaseToNovel(t *testing.T) {
	const nClasses, nClients = 21, 5 // base 11 classes: 2,2,2,2,3
	train := FewShot(makeItems("tr", uniform(nClasses, 6), 0), 4, 1)
	test := makeItems("te", uniform(nClasses, 3), 0)
	b, err := NewBaseToNovel(train, test, nClasses, nClients, 9)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Split.Base) != 11 || len(b.Novel) != 10*3 || len(b.Base) != 11*3 {
		t.Fatalf("base %d classes, %d base / %d novel test items", len(b.Split.Base), len(b.Base), len(b.Novel))
	}
	seen := map[int]int{}
	for ci, c := range b.Clients {
		if c.ID != ci || len(c.Classes) == 0 {
			t.Errorf("client %d: %+v", ci, c)
		}
		for _, l := range c.Classes {
			if _, dup := seen[l]; dup {
				t.Errorf("class %d on clients %d and %d", l, seen[l], ci)
			}
			seen[l] = ci
			if _, ok := b.Split.BaseMap[l]; !ok {
				t.Errorf("client %d holds novel class %d", ci, l)
			}
		}
		if len(c.Train) != 4*len(c.Classes) || len(c.Test) != 3*len(c.Classes) {
			t.Errorf("client %d: %d train / %d test for %d classes", ci, len(c.Train), len(c.Test), len(c.Classes))
		}
		for _, i := range c.Train {
			if !slices.Contains(c.Classes, train[i].Label) {
				t.Errorf("client %d train item of class %d", ci, train[i].Label)
			}
		}
		for _, i := range c.Test {
			if !slices.Contains(c.Classes, test[i].Label) {
				t.Errorf("client %d local test item of class %d", ci, test[i].Label)
			}
		}
		others := b.OthersBase(test, ci)
		if len(others)+len(c.Test) != len(b.Base) {
			t.Errorf("client %d: %d others + %d local != %d base", ci, len(others), len(c.Test), len(b.Base))
		}
	}
	if len(seen) != 11 {
		t.Errorf("%d base classes dealt, want 11", len(seen))
	}
	// Relabelled views: base test labels in [0,11), novel in [0,10).
	novel, err := Select(test, b.Novel, b.Split.NovelMap)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range novel {
		if it.Label < 0 || it.Label >= 10 {
			t.Fatalf("novel item relabelled to %d", it.Label)
		}
	}
	if novel[0].Label != 0 || test[b.Novel[0]].Label != 11 {
		t.Errorf("first novel item: label %d (was %d), want 0 (was 11)", novel[0].Label, test[b.Novel[0]].Label)
	}
	if _, err := Select(test, b.Novel, b.Split.BaseMap); err == nil {
		t.Error("novel items relabelled with the base map")
	}
	if _, err := Select(test, []int{len(test)}, nil); err == nil {
		t.Error("index out of range accepted")
	}
	// Too many clients for the base classes.
	if _, err := NewBaseToNovel(train, test, nClasses, 12, 9); err == nil {
		t.Error("12 clients for 11 base classes accepted")
	}
}

// checkPartition verifies the invariants every Dirichlet partition has.
func checkPartition(t *testing.T, clients []Client, nTrain, nTest, minSize int) {
	t.Helper()
	seenTr, seenTe := make([]bool, nTrain), make([]bool, nTest)
	for ci, c := range clients {
		if c.ID != ci {
			t.Errorf("client %d has ID %d", ci, c.ID)
		}
		if len(c.Train) < minSize || len(c.Test) < minSize {
			t.Errorf("client %d: %d train / %d test, want >= %d", ci, len(c.Train), len(c.Test), minSize)
		}
		for _, i := range c.Train {
			if seenTr[i] {
				t.Fatalf("train item %d dealt twice", i)
			}
			seenTr[i] = true
		}
		for _, i := range c.Test {
			if seenTe[i] {
				t.Fatalf("test item %d dealt twice", i)
			}
			seenTe[i] = true
		}
	}
	for i, s := range seenTr {
		if !s {
			t.Fatalf("train item %d not dealt", i)
		}
	}
	for i, s := range seenTe {
		if !s {
			t.Fatalf("test item %d not dealt", i)
		}
	}
}

func TestDirichlet(t *testing.T) {
	tests := []struct {
		name      string
		classes   int
		perTrain  int
		perTest   int
		cfg       DirichletConfig
		wantError bool
	}{
		{"cifar-like beta 0.5", 10, 200, 40, DirichletConfig{Clients: 20, Beta: 0.5}, false},
		{"beta 0.1", 10, 200, 200, DirichletConfig{Clients: 10, Beta: 0.1}, false},
		{"beta 10", 20, 50, 50, DirichletConfig{Clients: 10, Beta: 10}, false},
		{"min size 3", 5, 20, 20, DirichletConfig{Clients: 8, Beta: 0.3, MinSize: 3}, false},
		{"impossible min size", 2, 10, 10, DirichletConfig{Clients: 3, Beta: 0.5, MinSize: 7}, true},
		{"bad beta", 2, 10, 10, DirichletConfig{Clients: 2, Beta: 0}, true},
		{"retries run out", 10, 12, 12, DirichletConfig{Clients: 10, Beta: 0.01, MinSize: 11, MaxRetries: 5}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			train := makeItems("tr", uniform(tc.classes, tc.perTrain), 0)
			test := makeItems("te", uniform(tc.classes, tc.perTest), 0)
			clients, err := Dirichlet(train, test, tc.cfg, 11)
			if tc.wantError {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(clients) != tc.cfg.Clients {
				t.Fatalf("%d clients, want %d", len(clients), tc.cfg.Clients)
			}
			checkPartition(t, clients, len(train), len(test), tc.cfg.withDefaults().MinSize)
			// Test follows train: per client and class, the test share
			// matches the train share up to the truncation of two cuts.
			for ci, c := range clients {
				trN := map[int]int{}
				teN := map[int]int{}
				for _, i := range c.Train {
					trN[train[i].Label]++
				}
				for _, i := range c.Test {
					teN[test[i].Label]++
				}
				for l := range tc.classes {
					ftr := float64(trN[l]) / float64(tc.perTrain)
					fte := float64(teN[l]) / float64(tc.perTest)
					if math.Abs(ftr-fte) > 1/float64(tc.perTrain)+1/float64(tc.perTest)+1e-9 {
						t.Errorf("client %d class %d: train share %.3f, test share %.3f", ci, l, ftr, fte)
					}
					if tc.perTrain == tc.perTest && trN[l] != teN[l] {
						t.Errorf("client %d class %d: %d train but %d test with equal class sizes", ci, l, trN[l], teN[l])
					}
				}
				// A client stops receiving once it holds N/K items, so it
				// ends below N/K plus one class.
				if float64(len(c.Train)) >= float64(len(train))/float64(tc.cfg.Clients)+float64(tc.perTrain) {
					t.Errorf("client %d: %d train items, cap %d/%d + %d", ci, len(c.Train), len(train), tc.cfg.Clients, tc.perTrain)
				}
				if !slices.IsSorted(c.Train) || !slices.IsSorted(c.Test) {
					t.Errorf("client %d indices not sorted", ci)
				}
				for _, l := range c.Classes {
					if trN[l] == 0 {
						t.Errorf("client %d lists class %d without items", ci, l)
					}
				}
			}
			again, _ := Dirichlet(train, test, tc.cfg, 11)
			other, _ := Dirichlet(train, test, tc.cfg, 12)
			if fmt.Sprint(again) != fmt.Sprint(clients) {
				t.Error("same seed, different partition")
			}
			if fmt.Sprint(other) == fmt.Sprint(clients) {
				t.Error("seeds 11 and 12 gave the same partition")
			}
		})
	}
}

// TestDirichletSkew checks that small β concentrates each client on few
// classes and large β spreads it, measured by the mean largest class share.
func TestDirichletSkew(t *testing.T) {
	train := makeItems("tr", uniform(10, 300), 0)
	test := makeItems("te", uniform(10, 100), 0)
	meanTop := func(beta float64) float64 {
		clients, err := Dirichlet(train, test, DirichletConfig{Clients: 10, Beta: beta}, 5)
		if err != nil {
			t.Fatal(err)
		}
		s := 0.0
		for _, c := range clients {
			n := make([]int, 10)
			for _, i := range c.Train {
				n[train[i].Label]++
			}
			s += float64(slices.Max(n)) / float64(len(c.Train))
		}
		return s / float64(len(clients))
	}
	lo, hi := meanTop(0.1), meanTop(100)
	if !(lo > 0.5 && hi < 0.25) {
		t.Errorf("mean top-class share: β=0.1 %.2f (want > 0.5), β=100 %.2f (want < 0.25)", lo, hi)
	}
}

func TestDirichletMinSizeRetry(t *testing.T) {
	// With β = 0.05 a single draw almost never gives 10 clients 15 items
	// each; the retry loop must find one that does.
	train := makeItems("tr", uniform(10, 40), 0)
	test := makeItems("te", uniform(10, 40), 0)
	cfg := DirichletConfig{Clients: 10, Beta: 0.05, MinSize: 15, MaxRetries: 100000}
	clients, err := Dirichlet(train, test, cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkPartition(t, clients, len(train), len(test), 15)
	// The first attempt alone does not satisfy it (so the retry mattered).
	cfg.MaxRetries = 1
	if _, err := Dirichlet(train, test, cfg, 1); err == nil {
		t.Error("first attempt already satisfied the minimum; pick a harder case")
	}
}

func TestDomainDirichlet(t *testing.T) {
	var train, test []dataset.Item
	// Domains listed out of order to check clients are ordered by domain.
	for _, d := range []int{2, 0, 1} {
		train = append(train, makeItems("tr", uniform(10, 8+4*d), d)...)
		test = append(test, makeItems("te", uniform(10, 4+d), d)...)
	}
	cfg := DirichletConfig{Clients: 2, Beta: 0.5, MinSize: 5}
	clients, err := DomainDirichlet(train, test, cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(clients) != 6 {
		t.Fatalf("%d clients, want 6", len(clients))
	}
	checkPartition(t, clients, len(train), len(test), 5)
	for ci, c := range clients {
		if c.Domain != ci/2 {
			t.Errorf("client %d: domain %d, want %d", ci, c.Domain, ci/2)
		}
		for _, i := range c.Train {
			if train[i].Domain != c.Domain {
				t.Errorf("client %d (domain %d) holds train item of domain %d", ci, c.Domain, train[i].Domain)
			}
		}
		for _, i := range c.Test {
			if test[i].Domain != c.Domain {
				t.Errorf("client %d (domain %d) holds test item of domain %d", ci, c.Domain, test[i].Domain)
			}
		}
	}
	// One client per domain: each client is its whole domain.
	one, err := DomainDirichlet(train, test, DirichletConfig{Clients: 1, Beta: 0.5}, 3)
	if err != nil {
		t.Fatal(err)
	}
	for d, c := range one {
		if len(c.Train) != 10*(8+4*d) || len(c.Test) != 10*(4+d) {
			t.Errorf("domain %d: %d train / %d test", d, len(c.Train), len(c.Test))
		}
	}
	// A domain's partition does not depend on the other domains.
	var train0, test0 []dataset.Item
	for _, it := range train {
		if it.Domain == 0 {
			train0 = append(train0, it)
		}
	}
	for _, it := range test {
		if it.Domain == 0 {
			test0 = append(test0, it)
		}
	}
	alone, err := DomainDirichlet(train0, test0, cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	for j := range 2 {
		if fmt.Sprint(keysAt(train0, alone[j].Train)) != fmt.Sprint(keysAt(train, clients[j].Train)) {
			t.Errorf("domain 0 client %d changed when other domains were dropped", j)
		}
	}
	// Too small a domain fails and names the domain.
	if _, err := DomainDirichlet(train, test, DirichletConfig{Clients: 2, Beta: 0.5, MinSize: 25}, 3); err == nil || !strings.Contains(err.Error(), "domain 0") {
		t.Errorf("small domain: %v", err)
	}
}

func keysAt(items []dataset.Item, idx []int) []string {
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = items[i].Key
	}
	return out
}

func TestGammaMoments(t *testing.T) {
	// Gamma(a, 1) has mean a and variance a.
	for _, a := range []float64{0.1, 0.5, 1, 3, 10} {
		rng := newRand(42, 0)
		const n = 200000
		var s, s2 float64
		for range n {
			x := gammaSample(rng, a)
			if x < 0 || math.IsNaN(x) {
				t.Fatalf("a=%g: sample %g", a, x)
			}
			s += x
			s2 += x * x
		}
		mean := s / n
		variance := s2/n - mean*mean
		// Standard error of the mean is sqrt(a/n); allow 5 of them.
		if math.Abs(mean-a) > 5*math.Sqrt(a/n) {
			t.Errorf("a=%g: mean %.4f", a, mean)
		}
		if math.Abs(variance-a)/a > 0.05 {
			t.Errorf("a=%g: variance %.4f", a, variance)
		}
	}
}
