package clientbase

import (
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

func named(vals map[string][]float32) tensor.Named {
	out := tensor.Named{}
	for name, v := range vals {
		t := tensor.New(len(v))
		copy(t.Data, v)
		out[name] = t
	}
	return out
}

func TestInstall(t *testing.T) {
	b := &Base{Method: "m", Task: &protocol.ClientTask{ID: 3}}
	p := named(map[string][]float32{"a": {0, 0}, "b": {0}})
	if err := b.Install(p, named(map[string][]float32{"a": {1, 2}}), nil); err != nil {
		t.Fatal(err)
	}
	if got := p["a"].Data; got[0] != 1 || got[1] != 2 {
		t.Errorf("a = %v, want [1 2]", got)
	}
	for _, tc := range []struct {
		in      tensor.Named
		accepts func(string) bool
		want    string
	}{
		{named(map[string][]float32{"c": {1}}), nil, `m client 3: received unexpected tensor "c"`},
		{named(map[string][]float32{"b": {1}}), func(n string) bool { return n == "a" }, `m client 3: received unexpected tensor "b"`},
		{named(map[string][]float32{"a": {1}}), nil, `m client 3: received "a" with shape [1], want [2]`},
	} {
		err := b.Install(p, tc.in, tc.accepts)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Install: %v, want %q", err, tc.want)
		}
	}
}

func TestLoadTensors(t *testing.T) {
	b := &Base{Method: "m", Task: &protocol.ClientTask{ID: 1}}
	p := named(map[string][]float32{"a": {0, 0}})
	r := named(map[string][]float32{"x": {0}})
	st := tensor.Named{"param/a": named(map[string][]float32{"a": {5, 6}})["a"], "recv/x": named(map[string][]float32{"x": {7}})["x"]}
	if err := b.LoadTensors(st, Saved{"param/", p}, Saved{"recv/", r}); err != nil {
		t.Fatal(err)
	}
	if p["a"].Data[1] != 6 || r["x"].Data[0] != 7 {
		t.Errorf("loaded %v %v", p["a"].Data, r["x"].Data)
	}
	delete(st, "recv/x")
	err := b.LoadTensors(st, Saved{"param/", p}, Saved{"recv/", r})
	if err == nil || !strings.Contains(err.Error(), "m client 1 state: no recv/x of shape [1]") {
		t.Errorf("missing tensor: %v", err)
	}
}

func TestParamsAndShared(t *testing.T) {
	p := named(map[string][]float32{"b": {1}, "a": {2}, "c": {3}})
	g := named(map[string][]float32{"b": {10}, "a": {20}, "c": {30}})
	ps := Params(p, g, func(n string) bool { return n != "c" })
	if len(ps) != 2 || ps[0].Name != "a" || ps[1].Name != "b" || ps[0].Grad[0] != 20 || ps[1].Value[0] != 1 {
		t.Fatalf("Params = %+v", ps)
	}
	up := Shared(p, func(n string) bool { return n == "c" })
	if len(up) != 1 || up["c"].Data[0] != 3 {
		t.Fatalf("Shared = %v", up)
	}
	up["c"].Data[0] = 9
	if p["c"].Data[0] != 3 {
		t.Error("Shared does not copy")
	}
}
