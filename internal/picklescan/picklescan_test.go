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

// TestScanLengthsAndMemo covers the argument checks the first table does
// not, and STACK_GLOBAL names taken from the memo: BINPUT/BINGET and their
// LONG forms carry a string literal, a text PUT over the index forgets it.
func TestScanLengthsAndMemo(t *testing.T) {
	const builtins = "X\x08\x00\x00\x00builtins"
	for _, tc := range []struct {
		name, want string // want "" is a pickle Scan accepts
		b          string
	}{
		{"truncated length", "opcode 'X' at byte 2: truncated", "\x80\x02X\x01\x00"},
		{"truncated argument", "opcode 'M' at byte 2: truncated", "\x80\x02M\x01"},
		{"negative length", "negative length", "\x80\x02T\xff\xff\xff\xff."},
		{"unterminated line", "unterminated line", "\x80\x02cbuiltins"},
		{"empty text LONG", "LONG at byte 2: empty", "\x80\x02L-L\n."},
		{"bad PUT index", "PUT at byte 3: bad index", "\x80\x02(px\n."},
		{"frame that fits", "", "\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00K\x01."},
		{"BINGET names", "", "\x80\x02" + builtins + "q\x01X\x03\x00\x00\x00intq\x02h\x01h\x02\x93."},
		{"LONG_BINGET names", "",
			"\x80\x02" + builtins + "r\x01\x00\x00\x00X\x03\x00\x00\x00intr\x02\x00\x00\x00j\x01\x00\x00\x00j\x02\x00\x00\x00\x93."},
		{"LONG_BINGET names refused", errRefused.Error(),
			"\x80\x02X\x02\x00\x00\x00osr\x01\x00\x00\x00X\x06\x00\x00\x00systemr\x02\x00\x00\x00j\x01\x00\x00\x00j\x02\x00\x00\x00\x93."},
		{"PUT forgets", "not string literals", "\x80\x02" + builtins + "q\x01X\x03\x00\x00\x00intq\x02(p1\nh\x01h\x02\x93."},
	} {
		err := Scan([]byte(tc.b), only)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Scan = %v, want nil", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Scan = %v, want %q", tc.name, err, tc.want)
		}
	}
}
