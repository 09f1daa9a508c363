package dataset

import (
	"encoding/binary"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"
	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/internal/picklescan"
)

// This file reads the Python pickles the datasets ship with: plain dicts,
// lists and strings, plus numpy arrays as numpy pickles them
// (numpy.core.multiarray._reconstruct + BUILD state for protocols 2–4,
// numpy.core.numeric._frombuffer for protocol 5, _codecs.encode for bytes
// written by Python 3 at protocol 2).

// maxElements bounds the element count of a pickled numpy array.
const maxElements = 1 << 40

// ndarray is a decoded numpy array in C order.
type ndarray struct {
	shape []int
	dtype *npDtype
	data  []byte // raw elements for non-object dtypes
	objs  []any  // elements of object arrays
}

// PySetState takes numpy's state tuple (version, shape, dtype, is_fortran,
// rawdata); the version is absent in old pickles.
func (a *ndarray) PySetState(state any) error {
	t, ok := state.(*types.Tuple)
	if !ok {
		return fmt.Errorf("numpy array state: want a tuple, got %T", state)
	}
	st := []any(*t)
	if len(st) == 5 {
		st = st[1:]
	}
	if len(st) != 4 {
		return fmt.Errorf("numpy array state: want 4 or 5 fields, got %d", len(*t))
	}
	shape, err := toShape(st[0])
	if err != nil {
		return fmt.Errorf("numpy array state: shape: %w", err)
	}
	dt, ok := st[1].(*npDtype)
	if !ok {
		return fmt.Errorf("numpy array state: dtype: got %T", st[1])
	}
	if fortran, _ := toInt(st[2]); fortran != 0 {
		if err := onlyOneAxisLong(shape); err != nil {
			return fmt.Errorf("numpy array state: Fortran-ordered arrays are not supported: %w", err)
		}
	}
	a.shape, a.dtype = shape, dt
	return a.setData(st[3])
}

func onlyOneAxisLong(shape []int) error {
	long := 0
	for _, s := range shape {
		if s > 1 {
			long++
		}
	}
	if long > 1 {
		return fmt.Errorf("shape %v", shape)
	}
	return nil
}

func (a *ndarray) setData(raw any) error {
	n := 1
	for _, s := range a.shape {
		if s > 0 && n > maxElements/s {
			return fmt.Errorf("numpy array: shape %v too large", a.shape)
		}
		n *= s
	}
	if a.dtype.kind == 'O' {
		switch v := raw.(type) {
		case *types.List:
			a.objs = []any(*v)
		case *types.Tuple:
			a.objs = []any(*v)
		default:
			return fmt.Errorf("numpy object array data: want a list, got %T", raw)
		}
		if len(a.objs) != n {
			return fmt.Errorf("numpy object array: %d elements for shape %v", len(a.objs), a.shape)
		}
		return nil
	}
	b, err := toByteSlice(raw)
	if err != nil {
		return fmt.Errorf("numpy array data: %w", err)
	}
	if a.dtype.size <= 0 || len(b) != n*a.dtype.size {
		return fmt.Errorf("numpy array data: %d bytes for shape %v of %d-byte %s elements", len(b), a.shape, a.dtype.size, a.dtype.str)
	}
	a.data = b
	return nil
}

// len returns the number of elements.
func (a *ndarray) len() int {
	if a.dtype.kind == 'O' {
		return len(a.objs)
	}
	return len(a.data) / a.dtype.size
}

// npDtype is a numpy dtype such as u1, <i8, <U37, |S10 or |O.
type npDtype struct {
	str   string // the constructor argument, e.g. "u1", "U37"
	kind  byte   // 'u', 'i', 'b', 'U', 'S', 'O'
	size  int    // element size in bytes
	order byte   // '<', '>', '|', '='
}

func newDtype(str string) (*npDtype, error) {
	if str == "" {
		return nil, fmt.Errorf("numpy dtype: empty type string")
	}
	d := &npDtype{str: str, kind: str[0], order: '='}
	if d.kind == '<' || d.kind == '>' || d.kind == '|' || d.kind == '=' {
		d.order, str = d.kind, str[1:]
		if str == "" {
			return nil, fmt.Errorf("numpy dtype %q: no kind", d.str)
		}
		d.kind = str[0]
	}
	if len(str) > 1 {
		n, err := strconv.Atoi(str[1:])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("numpy dtype %q: bad size", d.str)
		}
		d.size = n
	}
	switch d.kind {
	case 'U':
		d.size *= 4 // "U37" counts characters of 4 bytes
	case 'b', 'u', 'i', 'S', 'O':
	default:
		return nil, fmt.Errorf("numpy dtype %q: unsupported kind %q", d.str, d.kind)
	}
	return d, nil
}

// PySetState takes numpy's dtype state (version, byteorder, subdescr, names,
// fields, elsize, alignment, flags).
func (d *npDtype) PySetState(state any) error {
	t, ok := state.(*types.Tuple)
	if !ok || t.Len() < 2 {
		return fmt.Errorf("numpy dtype %q state: want a tuple, got %T", d.str, state)
	}
	if s, ok := toStr(t.Get(1)); ok && len(s) == 1 {
		d.order = s[0]
	}
	if t.Len() >= 6 {
		if n, ok := toInt(t.Get(5)); ok && n > 0 {
			d.size = n
		}
	}
	return nil
}

func (d *npDtype) byteOrder() binary.ByteOrder {
	if d.order == '>' {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// callable adapts a Go function to a Python callable.
type callable func(args ...any) (any, error)

func (c callable) Call(args ...any) (any, error) { return c(args...) }

// pyClass is a Python class that only needs to exist (numpy.ndarray as the
// argument of _reconstruct).
type pyClass struct{ module, name string }

func (c *pyClass) PyNew(...any) (any, error) {
	return nil, fmt.Errorf("pickle: cannot instantiate %s.%s", c.module, c.name)
}

// findClass resolves the pickle globals numpy arrays and Python 3 bytes
// need (the whitelist); any other global is an error.
func findClass(module, name string) (any, error) {
	numpyMod := func(sub string) bool {
		return module == "numpy.core."+sub || module == "numpy._core."+sub
	}
	switch {
	case numpyMod("multiarray") && name == "_reconstruct":
		return callable(npReconstruct), nil
	case module == "numpy" && name == "ndarray":
		return &pyClass{module, name}, nil
	case module == "numpy" && name == "dtype":
		return callable(npDtypeNew), nil
	case numpyMod("numeric") && name == "_frombuffer":
		return callable(npFromBuffer), nil
	case numpyMod("multiarray") && name == "scalar":
		return callable(npScalar), nil
	case module == "_codecs" && name == "encode":
		return callable(codecsEncode), nil
	case (module == "__builtin__" || module == "builtins") && name == "bytearray":
		return callable(pyBytearray), nil
	}
	return nil, fmt.Errorf("pickle: class %s.%s is not allowed", module, name)
}

// npReconstruct is numpy's _reconstruct: an empty array that BUILD fills.
func npReconstruct(args ...any) (any, error) {
	if len(args) < 1 {
		return nil, fmt.Errorf("numpy _reconstruct: no arguments")
	}
	return &ndarray{}, nil
}

// npDtypeNew is numpy.dtype(type string).
func npDtypeNew(args ...any) (any, error) {
	if len(args) < 1 {
		return nil, fmt.Errorf("numpy dtype: no arguments")
	}
	s, ok := toStr(args[0])
	if !ok {
		return nil, fmt.Errorf("numpy dtype: want a type string, got %T", args[0])
	}
	return newDtype(s)
}

// npFromBuffer is numpy's _frombuffer(buffer, dtype, shape, order).
func npFromBuffer(args ...any) (any, error) {
	if len(args) != 4 {
		return nil, fmt.Errorf("numpy _frombuffer: want 4 arguments, got %d", len(args))
	}
	dt, ok := args[1].(*npDtype)
	if !ok {
		return nil, fmt.Errorf("numpy _frombuffer: dtype: got %T", args[1])
	}
	shape, err := toShape(args[2])
	if err != nil {
		return nil, fmt.Errorf("numpy _frombuffer: shape: %w", err)
	}
	if o, _ := toStr(args[3]); o == "F" {
		if err := onlyOneAxisLong(shape); err != nil {
			return nil, fmt.Errorf("numpy _frombuffer: Fortran order not supported: %w", err)
		}
	}
	a := &ndarray{shape: shape, dtype: dt}
	return a, a.setData(args[0])
}

// npScalar is numpy's scalar(dtype, raw bytes): a numpy scalar such as
// np.int64(3).
func npScalar(args ...any) (any, error) {
	if len(args) != 2 {
		return nil, fmt.Errorf("numpy scalar: want 2 arguments, got %d", len(args))
	}
	dt, ok := args[0].(*npDtype)
	if !ok {
		return nil, fmt.Errorf("numpy scalar: dtype: got %T", args[0])
	}
	a := &ndarray{shape: nil, dtype: dt}
	if err := a.setData(args[1]); err != nil {
		return nil, fmt.Errorf("numpy scalar: %w", err)
	}
	return a.element(0)
}

// codecsEncode is _codecs.encode(str, "latin1"), as Python 3 writes bytes
// at protocol 2.
func codecsEncode(args ...any) (any, error) {
	if len(args) < 1 {
		return nil, fmt.Errorf("_codecs.encode: no arguments")
	}
	s, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("_codecs.encode: want a str, got %T", args[0])
	}
	if len(args) > 1 {
		if enc, _ := args[1].(string); enc != "latin1" && enc != "latin-1" && enc != "iso-8859-1" {
			return nil, fmt.Errorf("_codecs.encode: unsupported encoding %q", enc)
		}
	}
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xff {
			return nil, fmt.Errorf("_codecs.encode: rune %U is not latin-1", r)
		}
		b = append(b, byte(r))
	}
	return b, nil
}

// pyBytearray is the builtin bytearray([source]).
func pyBytearray(args ...any) (any, error) {
	if len(args) == 0 {
		return []byte{}, nil
	}
	return toByteSlice(args[0])
}

// loadPickle reads a pickle file with [decodePickle].
func loadPickle(file string) (any, error) {
	b, err := inputfile.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("pickle %s: %w", file, err)
	}
	v, err := decodePickle(b)
	if err != nil {
		return nil, fmt.Errorf("pickle %s: %w", file, err)
	}
	return v, nil
}

// decodePickle unpickles b, resolving only the numpy and builtin globals
// above; anything else is an error (picklescan checks the opcodes and
// globals before anything is unpickled).
func decodePickle(b []byte) (any, error) {
	return picklescan.Decode(b, knownClass, func(u *pickle.Unpickler) { u.FindClass = findClass })
}

// knownClass is findClass's whitelist as picklescan.Scan takes it: the
// error findClass gives for a global it does not resolve.
func knownClass(module, name string) error {
	_, err := findClass(module, name)
	return err
}

// element returns element i of a 1-element-per-item view: an int for
// integer dtypes, a string for U/S dtypes, the object for O.
func (a *ndarray) element(i int) (any, error) {
	if a.dtype.kind == 'O' {
		return a.objs[i], nil
	}
	sz := a.dtype.size
	b := a.data[i*sz : (i+1)*sz]
	bo := a.dtype.byteOrder()
	switch a.dtype.kind {
	case 'u', 'b':
		switch sz {
		case 1:
			return int(b[0]), nil
		case 2:
			return int(bo.Uint16(b)), nil
		case 4:
			return int(bo.Uint32(b)), nil
		case 8:
			return int(bo.Uint64(b)), nil
		}
	case 'i':
		switch sz {
		case 1:
			return int(int8(b[0])), nil
		case 2:
			return int(int16(bo.Uint16(b))), nil
		case 4:
			return int(int32(bo.Uint32(b))), nil
		case 8:
			return int(int64(bo.Uint64(b))), nil
		}
	case 'S':
		return strings.TrimRight(string(b), "\x00"), nil
	case 'U':
		var sb strings.Builder
		for j := 0; j+4 <= len(b); j += 4 {
			r := rune(bo.Uint32(b[j:]))
			if r == 0 {
				break
			}
			if !utf8.ValidRune(r) {
				return nil, fmt.Errorf("numpy %s element %d: invalid code point %#x", a.dtype.str, i, r)
			}
			sb.WriteRune(r)
		}
		return sb.String(), nil
	}
	return nil, fmt.Errorf("numpy dtype %s: unsupported element size %d", a.dtype.str, sz)
}

// toInt converts a pickled integer (or bool) to int.
func toInt(v any) (int, bool) {
	switch x := v.(type) {
	case int:
		return x, true
	case int32:
		return int(x), true
	case int64:
		return int(x), true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case *big.Int:
		if x.IsInt64() {
			return int(x.Int64()), true
		}
	}
	return 0, false
}

// toStr converts a pickled str or bytes to a Go string.
func toStr(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	case *types.ByteArray:
		return string(*x), true
	}
	return "", false
}

// toByteSlice converts pickled bytes (Python 2 str, Python 3 bytes,
// bytearray) to a byte slice.
func toByteSlice(v any) ([]byte, error) {
	switch x := v.(type) {
	case []byte:
		return x, nil
	case string:
		return []byte(x), nil
	case *types.ByteArray:
		return []byte(*x), nil
	}
	return nil, fmt.Errorf("want bytes, got %T", v)
}

func toShape(v any) ([]int, error) {
	t, ok := v.(*types.Tuple)
	if !ok {
		return nil, fmt.Errorf("want a tuple, got %T", v)
	}
	shape := make([]int, t.Len())
	for i := range shape {
		n, ok := toInt(t.Get(i))
		if !ok || n < 0 {
			return nil, fmt.Errorf("dimension %d: got %v", i, t.Get(i))
		}
		shape[i] = n
	}
	return shape, nil
}

// pySeq returns the elements of a list, tuple or 1-D numpy array.
func pySeq(v any) ([]any, error) {
	switch x := v.(type) {
	case *types.List:
		return []any(*x), nil
	case *types.Tuple:
		return []any(*x), nil
	case *ndarray:
		if x.dtype == nil {
			return nil, fmt.Errorf("numpy array without state")
		}
		if len(x.shape) != 1 {
			return nil, fmt.Errorf("want a 1-D array, got shape %v", x.shape)
		}
		out := make([]any, x.len())
		for i := range out {
			e, err := x.element(i)
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	}
	return nil, fmt.Errorf("want a list, tuple or 1-D array, got %T", v)
}

// pyInts converts a sequence of integers.
func pyInts(v any) ([]int, error) {
	seq, err := pySeq(v)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(seq))
	for i, e := range seq {
		n, ok := toInt(e)
		if !ok {
			return nil, fmt.Errorf("element %d: want an integer, got %T", i, e)
		}
		out[i] = n
	}
	return out, nil
}

// pyStrings converts a sequence of str or bytes.
func pyStrings(v any) ([]string, error) {
	seq, err := pySeq(v)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(seq))
	for i, e := range seq {
		s, ok := toStr(e)
		if !ok {
			return nil, fmt.Errorf("element %d: want a string, got %T", i, e)
		}
		out[i] = s
	}
	return out, nil
}

// dictGet looks up a str or bytes key in a pickled dict.
func dictGet(v any, key string) (any, error) {
	d, ok := v.(*types.Dict)
	if !ok {
		return nil, fmt.Errorf("want a dict, got %T", v)
	}
	for _, e := range *d {
		if k, ok := toStr(e.Key); ok && k == key {
			return e.Value, nil
		}
	}
	return nil, fmt.Errorf("key %q: missing", key)
}
