package picklescan

import (
	"errors"
	"strings"
	"testing"

	"github.com/nlpodyssey/gopickle/pickle"
)

var errRefused = errors.New("refused by the caller")

// only allows the global builtins.int.
func only(module, name string) error {
	if module == "builtins" && name == "int" {
		return nil
	}
	return errRefused
}

func TestScanRejects(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		b          []byte
	}{
		{"empty", "no STOP opcode", nil},
		{"unknown opcode", "unknown opcode 0xff", []byte{0x80, 2, 0xff, '.'}},
		{"long argument", "runs past the end", []byte{0x80, 3, 'B', 0xff, 0xff, 0xff, 0x7f, 'x', '.'}},
		{"long frame", "frame at byte 2", []byte{0x80, 4, 0x95, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '.'}},
		{"extension", "extension opcode", []byte{0x80, 2, 0x82, 1, '.'}},
		{"empty LONG1", "LONG at byte 2: empty", []byte{0x80, 2, 0x8a, 0, '.'}},
		{"GLOBAL", errRefused.Error(), []byte("\x80\x02cos\nsystem\n.")},
		{"STACK_GLOBAL", errRefused.Error(), []byte("\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93.")},
		{"STACK_GLOBAL computed", "not string literals", []byte("\x80\x04))\x93.")},
	} {
		err := Scan(tc.b, only)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Scan = %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := Scan([]byte("\x80\x04\x8c\x08builtins\x94\x8c\x03int\x94\x93."), only); err != nil {
		t.Errorf("allowed STACK_GLOBAL: %v", err)
	}
}

func TestDecode(t *testing.T) {
	v, err := Decode([]byte{0x80, 2, 'K', 5, '.'}, only, func(*pickle.Unpickler) {})
	if err != nil || v != 5 {
		t.Fatalf("Decode = %v, %v; want 5", v, err)
	}
	// refused before the unpickler runs: FindClass is never reached
	called := false
	_, err = Decode([]byte("\x80\x02cos\nsystem\n."), only, func(u *pickle.Unpickler) {
		u.FindClass = func(string, string) (any, error) { called = true; return nil, nil }
	})
	if !errors.Is(err, errRefused) || called {
		t.Errorf("Decode of a refused global: %v (FindClass called: %v)", err, called)
	}
}
