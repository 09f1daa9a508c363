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
	s := &scanner{b: b, allowed: allowed, memo: map[uint64]string{}, put: map[uint64]bool{}}
	for s.pos < len(b) {
		stop, err := s.step()
		if err != nil || stop {
			return err
		}
	}
	return fmt.Errorf("no STOP opcode: truncated")
}

// scanner is Scan's position in a pickle and what it tracks of the memo.
type scanner struct {
	b       []byte
	pos     int
	allowed func(module, name string) error
	memo    map[uint64]string // memoized string literals
	put     map[uint64]bool   // every memo index written (MEMOIZE writes at len(memo))
	strs    []string          // string literals pushed by the last opcodes
}

// opArgs is what follows an opcode: need fixed bytes, then a length-prefixed
// argument of n bytes. keepStrs marks opcodes that leave the string
// literals pushed before them in place (memo writes, frames).
type opArgs struct {
	need     int
	n        uint64
	keepStrs bool
}

// step checks the opcode at s.pos and moves past it and its arguments;
// stop is true at STOP.
func (s *scanner) step() (stop bool, err error) {
	op, at := s.b[s.pos], s.pos
	s.pos++
	switch op {
	case '.': // STOP
		return true, nil
	case 'I', 'L', 'F', 'S', 'V', 'P', 'g', 'p', 'c', 'i':
		return false, s.lineOp(op, at)
	}
	a, err := s.header(op, at)
	if err != nil {
		return false, err
	}
	return false, s.args(op, at, a)
}

// header checks an opcode that is not text-line based and reads the length
// of its argument, if it has one (then s.pos moves past the length).
func (s *scanner) header(op byte, at int) (opArgs, error) {
	var a opArgs
	var err error
	switch op {
	case '(', '0', '1', '2', 'N', 0x88, 0x89, 'R', ')', ']', '}', 't', 'l', 'd', 'a', 'e', 's', 'u', 'b',
		'o', 0x81, 0x92, 0x85, 0x86, 0x87, 0x8f, 0x90, 0x91, 0x97, 0x98, 'Q':
	case 0x93: // STACK_GLOBAL
		if len(s.strs) < 2 {
			return a, fmt.Errorf("STACK_GLOBAL at byte %d: names are not string literals", at)
		}
		err = s.allowed(s.strs[len(s.strs)-2], s.strs[len(s.strs)-1])
	case 0x94: // MEMOIZE
		s.memoize(uint64(len(s.put)))
		a.keepStrs = true
	case 'K', 0x80, 'h': // BININT1, PROTO, BINGET
		a.need = 1
	case 'q': // BINPUT
		a.need, a.keepStrs = 1, true
	case 0x82, 0x83, 0x84:
		return a, fmt.Errorf("pickle extension opcode %#x at byte %d is not supported", op, at)
	case 'M':
		a.need = 2
	case 'J', 'j': // BININT, LONG_BINGET
		a.need = 4
	case 'r': // LONG_BINPUT
		a.need, a.keepStrs = 4, true
	case 'G':
		a.need = 8
	case 0x95: // FRAME: 8-byte length, then the framed opcodes inline
		a.need, a.keepStrs = 8, true
	case 'U', 'C', 0x8c, 0x8a: // 1-byte length
		a.n, err = s.length(op, at, 1)
	case 'T', 'B', 'X', 0x8b: // 4-byte length
		a.n, err = s.length(op, at, 4)
		if err == nil && (op == 'T' || op == 0x8b) && int32(a.n) < 0 {
			err = fmt.Errorf("opcode %q at byte %d: negative length", op, at)
		}
	case 0x8d, 0x8e, 0x96: // 8-byte length
		a.n, err = s.length(op, at, 8)
	default:
		return a, fmt.Errorf("unknown opcode %#x at byte %d", op, at)
	}
	return a, err
}

// length reads the little-endian length of width bytes (1, 4 or 8) at s.pos
// and moves past it.
func (s *scanner) length(op byte, at, width int) (uint64, error) {
	if len(s.b)-s.pos < width {
		return 0, fmt.Errorf("opcode %q at byte %d: truncated", op, at)
	}
	var n uint64
	switch width {
	case 1:
		n = uint64(s.b[s.pos])
	case 4:
		n = uint64(binary.LittleEndian.Uint32(s.b[s.pos:]))
	default:
		n = binary.LittleEndian.Uint64(s.b[s.pos:])
	}
	s.pos += width
	return n, nil
}

// args checks and moves past an opcode's fixed and length-prefixed
// arguments, tracking memo writes and reads of string literals, then keeps
// the string literals STACK_GLOBAL may take its names from.
func (s *scanner) args(op byte, at int, a opArgs) error {
	pushed, isStr, err := s.fixed(op, at, a.need)
	if err != nil {
		return err
	}
	s.pos += a.need
	if a.n > uint64(len(s.b)-s.pos) {
		return fmt.Errorf("opcode %q at byte %d: argument of %d bytes runs past the end", op, at, a.n)
	}
	if (op == 0x8a || op == 0x8b) && a.n == 0 {
		return fmt.Errorf("LONG at byte %d: empty", at)
	}
	if op == 'X' || op == 0x8c || op == 0x8d {
		pushed, isStr = string(s.b[s.pos:s.pos+int(a.n)]), true
	}
	s.pos += int(a.n)
	switch {
	case isStr:
		s.strs = append(s.strs, pushed)
		if len(s.strs) > 2 {
			s.strs = s.strs[len(s.strs)-2:]
		}
	case !a.keepStrs:
		s.strs = s.strs[:0]
	}
	return nil
}

// fixed checks the need fixed argument bytes at s.pos: a frame must fit in
// the input, BINPUT and LONG_BINPUT write the memo, and BINGET and
// LONG_BINGET of a memoized string literal push it (isStr).
func (s *scanner) fixed(op byte, at, need int) (pushed string, isStr bool, err error) {
	if len(s.b)-s.pos < need {
		return "", false, fmt.Errorf("opcode %q at byte %d: truncated", op, at)
	}
	le, b, pos := binary.LittleEndian, s.b, s.pos
	switch op {
	case 0x95:
		if le.Uint64(b[pos:]) > uint64(len(b)-pos-8) {
			return "", false, fmt.Errorf("frame at byte %d: longer than the input", at)
		}
	case 'q':
		s.memoize(uint64(b[pos]))
	case 'r':
		s.memoize(uint64(le.Uint32(b[pos:])))
	case 'h':
		pushed, isStr = s.memo[uint64(b[pos])]
	case 'j':
		pushed, isStr = s.memo[uint64(le.Uint32(b[pos:]))]
	}
	return pushed, isStr, nil
}

// memoize records a memo write at idx: the last string literal, if the
// opcode before pushed one, else nothing the scan can name.
func (s *scanner) memoize(idx uint64) {
	if len(s.strs) > 0 {
		s.memo[idx] = s.strs[len(s.strs)-1]
	} else {
		delete(s.memo, idx)
	}
	s.put[idx] = true
}

// lineOp checks a text-line opcode (one line; GLOBAL and INST two):
// GLOBAL's and INST's names must be allowed, a LONG not empty, and PUT's
// index a number (it forgets what the index held). The string literals
// are cleared.
func (s *scanner) lineOp(op byte, at int) error {
	lines := 1
	if op == 'c' || op == 'i' {
		lines = 2
	}
	var args [2]string
	for k := range lines {
		i := bytes.IndexByte(s.b[s.pos:], '\n')
		if i < 0 {
			return fmt.Errorf("opcode %q at byte %d: unterminated line", op, at)
		}
		args[k] = string(s.b[s.pos : s.pos+i])
		s.pos += i + 1
	}
	switch op {
	case 'c', 'i':
		if err := s.allowed(args[0], args[1]); err != nil {
			return err
		}
	case 'L':
		if v := strings.TrimSuffix(args[0], "L"); v == "" || v == "-" {
			return fmt.Errorf("LONG at byte %d: empty", at)
		}
	case 'p': // PUT: forget what the index held
		idx, err := strconv.ParseUint(strings.TrimSpace(args[0]), 10, 64)
		if err != nil {
			return fmt.Errorf("PUT at byte %d: bad index %q", at, args[0])
		}
		delete(s.memo, idx)
		s.put[idx] = true
	}
	s.strs = s.strs[:0]
	return nil
}
