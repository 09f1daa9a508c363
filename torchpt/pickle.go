package torchpt

import (
	"fmt"
	"math/big"
	"strings"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"

	"github.com/pfedmma/pfedmma/internal/picklescan"
	"github.com/pfedmma/pfedmma/safetensors"
)

// This file unpickles the data.pkl of a PyTorch archive with a whitelist of
// globals. Nothing in the pickle is executed: the whitelisted torch
// functions are replaced by Go functions that only record what tensor was
// described, and TorchScript module classes (__torch__.*) become inert
// objects that collect their attributes.

// Limits on what a pickle may describe.
const (
	maxElements = int64(1) << 40 // elements of one storage or tensor
	maxRank     = 16
	maxDepth    = 256 // nesting of modules and dicts
)

// storageDTypes maps the torch storage classes to element types.
var storageDTypes = map[string]safetensors.DType{
	"FloatStorage":    safetensors.F32,
	"HalfStorage":     safetensors.F16,
	"BFloat16Storage": safetensors.BF16,
	"DoubleStorage":   safetensors.F64,
	"LongStorage":     safetensors.I64,
	"IntStorage":      safetensors.I32,
	"ShortStorage":    safetensors.I16,
	"CharStorage":     safetensors.I8,
	"ByteStorage":     safetensors.U8,
	"BoolStorage":     safetensors.Bool,
}

// allowed reports whether the pickle global module.name is on the
// whitelist.
func allowed(module, name string) bool {
	switch module {
	case "torch._utils":
		return name == "_rebuild_tensor_v2" || name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state"
	case "torch":
		_, ok := storageDTypes[name]
		return ok
	case "collections":
		return name == "OrderedDict"
	}
	return strings.HasPrefix(module, "__torch__.") || module == "__torch__"
}

// storageClass is a torch.*Storage class: only its element type matters.
type storageClass struct {
	name  string
	dtype safetensors.DType
}

// storage is a persistent reference to the record data/<key> of the
// archive, holding numel elements of dtype.
type storage struct {
	key   string
	dtype safetensors.DType
	numel int64
}

// tensorRef is a tensor described by torch._utils._rebuild_tensor_v2: a
// strided view into a storage.
type tensorRef struct {
	storage *storage
	offset  int64 // in elements
	shape   []int
	stride  []int64
}

// object is an instance of a TorchScript class (__torch__.*): its
// attributes, in pickle order, and any non-dict state it was given.
type object struct {
	class string
	attrs []types.DictEntry
	state any
}

// PySetState records the state given by BUILD.
func (o *object) PySetState(state any) error {
	switch s := state.(type) {
	case *types.Dict:
		o.attrs = append(o.attrs, *s...)
	case *types.OrderedDict:
		for e := s.List.Front(); e != nil; e = e.Next() {
			en := e.Value.(*types.OrderedDictEntry)
			o.attrs = append(o.attrs, types.DictEntry{Key: en.Key, Value: en.Value})
		}
	default:
		o.state = state
	}
	return nil
}

// PyDictSet records one attribute.
func (o *object) PyDictSet(key, value any) error {
	o.attrs = append(o.attrs, types.DictEntry{Key: key, Value: value})
	return nil
}

// objectClass is a TorchScript class; instantiating it makes an empty
// object.
type objectClass struct{ name string }

// PyNew makes an inert object of the class, ignoring the arguments.
func (c *objectClass) PyNew(...any) (any, error) { return &object{class: c.name}, nil }

// function adapts a Go function to a Python callable.
type function func(args ...any) (any, error)

// Call calls f.
func (f function) Call(args ...any) (any, error) { return f(args...) }

// findClass resolves the whitelisted globals.
func findClass(module, name string) (any, error) {
	if err := refuse(module, name); err != nil {
		return nil, err
	}
	switch module {
	case "torch._utils":
		if name == "_rebuild_tensor_v2" {
			return function(rebuildTensor), nil
		}
		return function(rebuildParameter), nil
	case "torch":
		return &storageClass{name: name, dtype: storageDTypes[name]}, nil
	case "collections":
		return &types.OrderedDictClass{}, nil
	}
	return &objectClass{name: module + "." + name}, nil
}

// persistentLoad resolves ('storage', class, key, location, numel).
func persistentLoad(id any) (any, error) {
	t, ok := id.(*types.Tuple)
	if !ok || t.Len() != 5 {
		return nil, fmt.Errorf("persistent id: want a 5-tuple ('storage', class, key, location, numel), got %T", id)
	}
	if s, _ := t.Get(0).(string); s != "storage" {
		return nil, fmt.Errorf("persistent id: kind %v, want 'storage'", t.Get(0))
	}
	cls, ok := t.Get(1).(*storageClass)
	if !ok {
		return nil, fmt.Errorf("persistent id: storage class: got %T", t.Get(1))
	}
	key, ok := t.Get(2).(string)
	if !ok || key == "" || strings.ContainsAny(key, "/\\") || key == "." || key == ".." {
		return nil, fmt.Errorf("persistent id: bad storage key %v", t.Get(2))
	}
	n, ok := toInt64(t.Get(4))
	if !ok || n < 0 || n > maxElements {
		return nil, fmt.Errorf("persistent id: storage %s: bad element count %v", key, t.Get(4))
	}
	return &storage{key: key, dtype: cls.dtype, numel: n}, nil
}

// rebuildTensor stands for _rebuild_tensor_v2(storage, storage_offset,
// size, stride, requires_grad, backward_hooks[, metadata]).
func rebuildTensor(args ...any) (any, error) {
	if len(args) < 4 {
		return nil, fmt.Errorf("_rebuild_tensor_v2: %d arguments, want at least 4", len(args))
	}
	st, ok := args[0].(*storage)
	if !ok {
		return nil, fmt.Errorf("_rebuild_tensor_v2: storage: got %T", args[0])
	}
	off, ok := toInt64(args[1])
	if !ok || off < 0 || off > maxElements {
		return nil, fmt.Errorf("_rebuild_tensor_v2: storage %s: bad offset %v", st.key, args[1])
	}
	shape, err := intTuple(args[2])
	if err != nil {
		return nil, fmt.Errorf("_rebuild_tensor_v2: storage %s: size: %w", st.key, err)
	}
	stride, err := intTuple(args[3])
	if err != nil {
		return nil, fmt.Errorf("_rebuild_tensor_v2: storage %s: stride: %w", st.key, err)
	}
	if len(stride) != len(shape) {
		return nil, fmt.Errorf("_rebuild_tensor_v2: storage %s: size %v and stride %v differ in rank", st.key, shape, stride)
	}
	t := &tensorRef{storage: st, offset: off, shape: make([]int, len(shape)), stride: stride}
	for i, d := range shape {
		t.shape[i] = int(d)
	}
	return t, nil
}

// rebuildParameter stands for _rebuild_parameter(data, requires_grad,
// backward_hooks) and _rebuild_parameter_with_state(…, state): the tensor.
func rebuildParameter(args ...any) (any, error) {
	if len(args) < 1 {
		return nil, fmt.Errorf("_rebuild_parameter: no arguments")
	}
	t, ok := args[0].(*tensorRef)
	if !ok {
		return nil, fmt.Errorf("_rebuild_parameter: data: got %T", args[0])
	}
	return t, nil
}

// intTuple converts a tuple of non-negative integers bounded by
// maxElements.
func intTuple(v any) ([]int64, error) {
	t, ok := v.(*types.Tuple)
	if !ok {
		return nil, fmt.Errorf("want a tuple, got %T", v)
	}
	if t.Len() > maxRank {
		return nil, fmt.Errorf("rank %d over %d", t.Len(), maxRank)
	}
	out := make([]int64, t.Len())
	for i := range out {
		n, ok := toInt64(t.Get(i))
		if !ok || n < 0 || n > maxElements {
			return nil, fmt.Errorf("element %d: bad value %v", i, t.Get(i))
		}
		out[i] = n
	}
	return out, nil
}

func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case *big.Int:
		if x.IsInt64() {
			return x.Int64(), true
		}
	}
	return 0, false
}

// unpickle decodes a pickle with the whitelist above; the opcodes and
// globals are checked first (picklescan.Scan).
func unpickle(b []byte) (any, error) {
	return picklescan.Decode(b, refuse, func(u *pickle.Unpickler) {
		u.FindClass = findClass
		u.PersistentLoad = persistentLoad
	})
}

// refuse is the whitelist as picklescan.Scan takes it: an error for a
// global not on it.
func refuse(module, name string) error {
	if !allowed(module, name) {
		return fmt.Errorf("refusing to load pickle global %s.%s", module, name)
	}
	return nil
}
