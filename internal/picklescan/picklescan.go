// Package picklescan reads Python pickles safely: Scan checks a pickle's
// opcodes and globals against a whitelist before anything is unpickled,
// and Decode unpickles a scanned pickle with gopickle, turning a panic on
// malformed input into an error. The dataset readers (numpy pickles) and
// the PyTorch archive reader (torchpt) share it; each brings its own
// whitelist and class resolution.
package picklescan

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/nlpodyssey/gopickle/pickle"
)

// Decode scans b with Scan, then unpickles it with an unpickler that setup
// configures (its FindClass, PersistentLoad and the like); extension codes
// are refused. A panic inside gopickle on input the scan let through
// becomes an error as a last line of defence.
func Decode(b []byte, allowed func(module, name string) error, setup func(u *pickle.Unpickler)) (v any, err error) {
	if err := Scan(b, allowed); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("malformed pickle: %v", r)
		}
	}()
	u := pickle.NewUnpickler(bytes.NewReader(b))
	u.GetExtension = func(code int) (any, error) {
		return nil, fmt.Errorf("refusing pickle extension code %d", code)
	}
	setup(&u)
	return u.Load()
}

// Scan walks the opcodes of pickle b without executing them. It rejects
// unknown opcodes, extension opcodes, arguments that run past the end (so
// that a corrupt length cannot make the unpickler allocate gigabytes),
// empty LONG arguments, and every global allowed refuses (it returns the
// error to report), including those that gopickle would resolve by itself
// (__builtin__.object, copy_reg._reconstructor). STACK_GLOBAL must take
// its names from string literals or memoized string literals.
func Scan(b []byte, allowed func(module, name string) error) error {
	le := binary.LittleEndian
	memo := map[uint64]string{} // memoized string literals
	put := map[uint64]bool{}    // every memo index written (MEMOIZE writes at len(memo))
	var strs []string           // string literals pushed by the last opcodes
	for pos := 0; pos < len(b); {
		op := b[pos]
		at := pos
		pos++
		rest := len(b) - pos
		need := 0 // fixed argument bytes
		var n uint64
		pushed := "" // string literal this opcode pushes
		isStr := false
		keepStrs := false
		switch op {
		case '.': // STOP
			return nil
		case '(', '0', '1', '2', 'N', 0x88, 0x89, 'R', ')', ']', '}', 't', 'l', 'd', 'a', 'e', 's', 'u', 'b',
			'o', 0x81, 0x92, 0x85, 0x86, 0x87, 0x8f, 0x90, 0x91, 0x97, 0x98, 'Q':
		case 0x93: // STACK_GLOBAL
			if len(strs) < 2 {
				return fmt.Errorf("STACK_GLOBAL at byte %d: names are not string literals", at)
			}
			module, name := strs[len(strs)-2], strs[len(strs)-1]
			if err := allowed(module, name); err != nil {
				return err
			}
		case 0x94: // MEMOIZE
			idx := uint64(len(put))
			if len(strs) > 0 {
				memo[idx] = strs[len(strs)-1]
			} else {
				delete(memo, idx)
			}
			put[idx] = true
			keepStrs = true
		case 'K', 0x80:
			need = 1
		case 'q': // BINPUT
			need = 1
			keepStrs = true
		case 'h': // BINGET
			need = 1
		case 0x82, 0x83, 0x84:
			return fmt.Errorf("pickle extension opcode %#x at byte %d is not supported", op, at)
		case 'M':
			need = 2
		case 'J':
			need = 4
		case 'r': // LONG_BINPUT
			need = 4
			keepStrs = true
		case 'j': // LONG_BINGET
			need = 4
		case 'G':
			need = 8
		case 0x95: // FRAME: 8-byte length, then the framed opcodes inline
			need = 8
			keepStrs = true
		case 'I', 'L', 'F', 'S', 'V', 'P', 'g', 'p', 'c', 'i':
			lines := 1
			if op == 'c' || op == 'i' {
				lines = 2
			}
			var args [2]string
			for k := range lines {
				i := bytes.IndexByte(b[pos:], '\n')
				if i < 0 {
					return fmt.Errorf("opcode %q at byte %d: unterminated line", op, at)
				}
				args[k] = string(b[pos : pos+i])
				pos += i + 1
			}
			switch op {
			case 'c', 'i':
				if err := allowed(args[0], args[1]); err != nil {
					return err
				}
			case 'L':
				if s := strings.TrimSuffix(args[0], "L"); s == "" || s == "-" {
					return fmt.Errorf("LONG at byte %d: empty", at)
				}
			case 'p': // PUT: forget what the index held
				idx, err := strconv.ParseUint(strings.TrimSpace(args[0]), 10, 64)
				if err != nil {
					return fmt.Errorf("PUT at byte %d: bad index %q", at, args[0])
				}
				delete(memo, idx)
				put[idx] = true
			}
			strs = strs[:0]
			continue
		case 'U', 'C', 0x8c, 0x8a: // 1-byte length
			if rest < 1 {
				return fmt.Errorf("opcode %q at byte %d: truncated", op, at)
			}
			n, pos = uint64(b[pos]), pos+1
		case 'T', 'B', 'X', 0x8b: // 4-byte length
			if rest < 4 {
				return fmt.Errorf("opcode %q at byte %d: truncated", op, at)
			}
			n, pos = uint64(le.Uint32(b[pos:])), pos+4
			if (op == 'T' || op == 0x8b) && int32(n) < 0 {
				return fmt.Errorf("opcode %q at byte %d: negative length", op, at)
			}
		case 0x8d, 0x8e, 0x96: // 8-byte length
			if rest < 8 {
				return fmt.Errorf("opcode %q at byte %d: truncated", op, at)
			}
			n, pos = le.Uint64(b[pos:]), pos+8
		default:
			return fmt.Errorf("unknown opcode %#x at byte %d", op, at)
		}
		if rest < need {
			return fmt.Errorf("opcode %q at byte %d: truncated", op, at)
		}
		switch op {
		case 0x95:
			if le.Uint64(b[pos:]) > uint64(len(b)-pos-8) {
				return fmt.Errorf("frame at byte %d: longer than the input", at)
			}
		case 'q', 'r':
			idx := uint64(b[pos])
			if op == 'r' {
				idx = uint64(le.Uint32(b[pos:]))
			}
			if len(strs) > 0 {
				memo[idx] = strs[len(strs)-1]
			} else {
				delete(memo, idx)
			}
			put[idx] = true
		case 'h', 'j':
			idx := uint64(b[pos])
			if op == 'j' {
				idx = uint64(le.Uint32(b[pos:]))
			}
			if s, ok := memo[idx]; ok {
				pushed, isStr = s, true
			}
		}
		pos += need
		if n > uint64(len(b)-pos) {
			return fmt.Errorf("opcode %q at byte %d: argument of %d bytes runs past the end", op, at, n)
		}
		if (op == 0x8a || op == 0x8b) && n == 0 {
			return fmt.Errorf("LONG at byte %d: empty", at)
		}
		if op == 'X' || op == 0x8c || op == 0x8d {
			pushed, isStr = string(b[pos:pos+int(n)]), true
		}
		pos += int(n)
		switch {
		case isStr:
			strs = append(strs, pushed)
			if len(strs) > 2 {
				strs = strs[len(strs)-2:]
			}
		case !keepStrs:
			strs = strs[:0]
		}
	}
	return fmt.Errorf("no STOP opcode: truncated")
}
