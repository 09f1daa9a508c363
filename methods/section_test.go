package methods

import (
	"testing"

	"github.com/pfedmma/pfedmma/config"
)

type secA struct{ N int }

func (*secA) Check(*config.Checker) {}

type secB struct{}

func (*secB) Check(*config.Checker) {}

// TestSection: the method's own section comes back; another section type,
// a nil section or a nil pointer is an error naming the method and both
// types.
func TestSection(t *testing.T) {
	a := &secA{N: 3}
	got, err := Section[secA]("m", a)
	if err != nil || got != a {
		t.Fatalf("Section(a) = %v, %v; want a", got, err)
	}
	for _, tc := range []struct {
		sec  config.Section
		want string
	}{
		{&secB{}, "m: config section is *methods.secB, want *methods.secA"},
		{nil, "m: config section is <nil>, want *methods.secA"},
		{(*secA)(nil), "m: config section is *methods.secA, want *methods.secA"},
	} {
		if _, err := Section[secA]("m", tc.sec); err == nil || err.Error() != tc.want {
			t.Errorf("Section(%T): %v, want %q", tc.sec, err, tc.want)
		}
	}
}
