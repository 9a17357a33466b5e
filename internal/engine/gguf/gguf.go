// Package gguf reads GGUF files (versions 2 and 3), the single-file model
// container of llama.cpp, Ollama and LM Studio: a header, typed metadata
// key/value pairs (tokenizer, hyper-parameters, chat template), tensor
// infos, then the aligned tensor data.
//
// Files are memory-mapped with the same mapping and Linux read-lease guard
// as safetensors files (safetensors.Map), so tensors are used in place.
//
// Why our own reader and not a library: the format is small (the reader is
// a few hundred lines) and what matters here is how it treats hostile
// files, which the usual library (github.com/gpustack/gguf-parser-go) is
// not built for: it is a model-estimation and remote-download tool that
// brings an HTTP client, a DNS cache, json-iterator, testify and
// golang.org/x/exp into the module, and sizes its slices from the header's
// counts. This reader checks every count, length, dimension and offset
// against the bytes actually present before allocating anything, so a
// lying header costs at most work and memory proportional to the file's
// real size: truncated files, lying counts, sizes or offsets, huge arrays
// or strings, nested arrays, unknown tensor types, bad UTF-8, duplicate
// names and overlapping or out-of-bounds tensors are all refused with an
// error naming what is wrong. Tensor layouts and dequantisation are not
// here: they belong to the engine (package kernels).
package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"unicode/utf8"

	"flywheel/internal/safetensors"
)

// Magic is the first four bytes of a GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// MaxDims is the most dimensions a tensor has (ggml's GGML_MAX_DIMS).
const MaxDims = 4

// ValueType is the type of a metadata value.
type ValueType uint32

// Metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// size is the encoded size of a fixed-size value (0 for string and array).
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// Value is one metadata value: a scalar, a string, or an array of one
// element type (arrays of arrays are refused).
type Value struct {
	Type ValueType
	u    uint64 // unsigned integers, bool, float bits
	i    int64  // signed integers
	s    string
	arr  *Array
}

// Array is an array value. Numeric elements stay encoded (a view of the
// file, read on access); strings are decoded.
type Array struct {
	Elem ValueType
	Len  int
	raw  []byte // Len fixed-size little-endian elements
	strs []string
}

// Uint returns a non-negative integer value (any integer type).
func (v Value) Uint() (uint64, bool) {
	switch v.Type {
	case TypeUint8, TypeUint16, TypeUint32, TypeUint64:
		return v.u, true
	case TypeInt8, TypeInt16, TypeInt32, TypeInt64:
		if v.i >= 0 {
			return uint64(v.i), true
		}
	}
	return 0, false
}

// Int returns an integer value (any integer type that fits in int64).
func (v Value) Int() (int64, bool) {
	switch v.Type {
	case TypeUint8, TypeUint16, TypeUint32, TypeUint64:
		if v.u <= math.MaxInt64 {
			return int64(v.u), true
		}
	case TypeInt8, TypeInt16, TypeInt32, TypeInt64:
		return v.i, true
	}
	return 0, false
}

// Float returns a float value (float32, float64 or any integer type).
func (v Value) Float() (float64, bool) {
	switch v.Type {
	case TypeFloat32:
		return float64(math.Float32frombits(uint32(v.u))), true
	case TypeFloat64:
		return math.Float64frombits(v.u), true
	}
	if i, ok := v.Int(); ok {
		return float64(i), true
	}
	return 0, false
}

// Bool returns a bool value.
func (v Value) Bool() (bool, bool) { return v.u != 0, v.Type == TypeBool }

// Str returns a string value.
func (v Value) Str() (string, bool) { return v.s, v.Type == TypeString }

// Array returns an array value.
func (v Value) Array() (*Array, bool) { return v.arr, v.Type == TypeArray }

// Strings returns the elements of a string array.
func (a *Array) Strings() ([]string, bool) { return a.strs, a.Elem == TypeString }

// Ints returns the elements of an integer array as int64 (uint64 elements
// above MaxInt64 fail).
func (a *Array) Ints() ([]int64, bool) {
	sz := a.Elem.size()
	if sz == 0 || a.Elem == TypeFloat32 || a.Elem == TypeFloat64 || a.Elem == TypeBool {
		return nil, false
	}
	out := make([]int64, a.Len)
	for k := range out {
		v := decodeScalar(a.Elem, a.raw[k*sz:])
		i, ok := v.Int()
		if !ok {
			return nil, false
		}
		out[k] = i
	}
	return out, true
}

func decodeScalar(t ValueType, b []byte) Value {
	v := Value{Type: t}
	switch t {
	case TypeUint8, TypeBool:
		v.u = uint64(b[0])
	case TypeInt8:
		v.i = int64(int8(b[0]))
	case TypeUint16:
		v.u = uint64(binary.LittleEndian.Uint16(b))
	case TypeInt16:
		v.i = int64(int16(binary.LittleEndian.Uint16(b)))
	case TypeUint32, TypeFloat32:
		v.u = uint64(binary.LittleEndian.Uint32(b))
	case TypeInt32:
		v.i = int64(int32(binary.LittleEndian.Uint32(b)))
	case TypeUint64, TypeFloat64:
		v.u = binary.LittleEndian.Uint64(b)
	case TypeInt64:
		v.i = int64(binary.LittleEndian.Uint64(b))
	}
	return v
}

// KV is one metadata pair.
type KV struct {
	Key   string
	Value Value
}

// Tensor is one tensor of the file. Dims are in ggml order: Dims[0] is the
// number of values in a row (the fastest-moving index), so a matrix stored
// row-major as [rows, cols] has Dims {cols, rows}.
type Tensor struct {
	Name   string
	Dims   []uint64
	Type   GGMLType
	Offset uint64 // from the start of the data section
	Data   []byte // a view into the file; valid until the File is closed
}

// NumElements is the product of the dimensions.
func (t *Tensor) NumElements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is a parsed GGUF file.
type File struct {
	Path      string
	Version   uint32
	Alignment int
	KVs       []KV     // in file order
	Tensors   []Tensor // in file order

	kv      map[string]int
	tensors map[string]int
	mapped  *safetensors.File // nil when parsed from memory
}

// Get returns the metadata value of key.
func (f *File) Get(key string) (Value, bool) {
	i, ok := f.kv[key]
	if !ok {
		return Value{}, false
	}
	return f.KVs[i].Value, true
}

// Tensor returns the named tensor, or nil.
func (f *File) Tensor(name string) *Tensor {
	i, ok := f.tensors[name]
	if !ok {
		return nil
	}
	return &f.Tensors[i]
}

// Open memory-maps path and parses it. Close releases the mapping.
func Open(path string) (*File, error) {
	m, err := safetensors.Map(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := parse(path, m.Bytes())
	if err != nil {
		_ = m.Close()
		return nil, err
	}
	f.mapped = m
	return f, nil
}

// Parse parses a GGUF file already in memory (tensor data are views of data).
func Parse(data []byte) (*File, error) { return parse("<memory>", data) }

// DropPages tells the kernel that t's mapped bytes are not needed any more
// (after copying or converting them), so they leave the resident set.
func (f *File) DropPages(t *Tensor) {
	if f.mapped != nil {
		f.mapped.DropPages(&safetensors.Tensor{Data: t.Data})
	}
}

// Close unmaps the file; tensor data become invalid.
func (f *File) Close() error {
	if f.mapped == nil {
		return nil
	}
	err := f.mapped.Close()
	f.mapped = nil
	return err
}

// reader reads the header, checking every length against what is left.
type reader struct {
	b   []byte
	off int
}

var errShort = errors.New("truncated")

func (r *reader) left() int { return len(r.b) - r.off }

func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || n > r.left() {
		return nil, errShort
	}
	b := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return b, nil
}

func (r *reader) u32() (uint32, error) {
	b, err := r.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *reader) u64() (uint64, error) {
	b, err := r.bytes(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// count reads a uint64 count of items each taking at least minSize bytes,
// refusing counts the rest of the file cannot hold.
func (r *reader) count(minSize int) (int, error) {
	n, err := r.u64()
	if err != nil {
		return 0, err
	}
	if n > uint64(r.left()/minSize) {
		return 0, fmt.Errorf("count %d exceeds what the %d bytes left can hold", n, r.left())
	}
	return int(n), nil
}

func (r *reader) str() (string, error) {
	n, err := r.u64()
	if err != nil {
		return "", err
	}
	if n > uint64(r.left()) {
		return "", fmt.Errorf("string length %d exceeds the %d bytes left", n, r.left())
	}
	b, _ := r.bytes(int(n))
	if !utf8.Valid(b) {
		return "", errors.New("string is not valid UTF-8")
	}
	return string(b), nil
}

func (r *reader) value(t ValueType, inArray bool) (Value, error) {
	switch {
	case t == TypeString:
		s, err := r.str()
		return Value{Type: t, s: s}, err
	case t == TypeArray:
		if inArray {
			return Value{}, errors.New("arrays of arrays are not supported")
		}
		et, err := r.u32()
		if err != nil {
			return Value{}, err
		}
		elem := ValueType(et)
		if elem == TypeArray {
			return Value{}, errors.New("arrays of arrays are not supported")
		}
		sz := elem.size()
		if sz == 0 && elem != TypeString {
			return Value{}, fmt.Errorf("array of unknown value type %d", et)
		}
		minSize := sz
		if elem == TypeString {
			minSize = 8
		}
		n, err := r.count(minSize)
		if err != nil {
			return Value{}, fmt.Errorf("array: %w", err)
		}
		a := &Array{Elem: elem, Len: n}
		if elem == TypeString {
			a.strs = make([]string, n) // n*8 <= bytes left: bounded by the file
			for k := range a.strs {
				if a.strs[k], err = r.str(); err != nil {
					return Value{}, fmt.Errorf("array element %d: %w", k, err)
				}
			}
		} else {
			a.raw, _ = r.bytes(n * sz)
			if elem == TypeBool {
				for k, c := range a.raw {
					if c > 1 {
						return Value{}, fmt.Errorf("array element %d: bool byte %d", k, c)
					}
				}
			}
		}
		return Value{Type: t, arr: a}, nil
	}
	sz := t.size()
	if sz == 0 {
		return Value{}, fmt.Errorf("unknown value type %d", uint32(t))
	}
	b, err := r.bytes(sz)
	if err != nil {
		return Value{}, err
	}
	if t == TypeBool && b[0] > 1 {
		return Value{}, fmt.Errorf("bool byte %d", b[0])
	}
	return decodeScalar(t, b), nil
}

func parse(path string, data []byte) (*File, error) {
	fail := func(format string, a ...any) (*File, error) {
		return nil, fmt.Errorf("gguf: %s: "+format, append([]any{path}, a...)...)
	}
	r := &reader{b: data}
	magic, err := r.bytes(4)
	if err != nil || string(magic) != Magic {
		return fail("not a GGUF file (no %q magic)", Magic)
	}
	version, err := r.u32()
	if err != nil {
		return fail("truncated header")
	}
	if version != 2 && version != 3 {
		return fail("unsupported GGUF version %d (supported: 2, 3)", version)
	}
	// A tensor info takes at least 8+4+8+4+8 bytes; a pair 8+4+1.
	nTensors, err := r.count(32)
	if err != nil {
		return fail("tensor count: %v", err)
	}
	nKV, err := r.count(13)
	if err != nil {
		return fail("metadata count: %v", err)
	}
	f := &File{Path: path, Version: version, Alignment: DefaultAlignment, kv: make(map[string]int, nKV), tensors: make(map[string]int, nTensors)}
	f.KVs = make([]KV, 0, nKV)
	for k := 0; k < nKV; k++ {
		key, err := r.str()
		if err != nil {
			return fail("metadata pair %d: key: %v", k, err)
		}
		if key == "" {
			return fail("metadata pair %d: empty key", k)
		}
		if _, dup := f.kv[key]; dup {
			return fail("metadata key %q appears twice", key)
		}
		t, err := r.u32()
		if err != nil {
			return fail("metadata %q: %v", key, errShort)
		}
		v, err := r.value(ValueType(t), false)
		if err != nil {
			return fail("metadata %q: %v", key, err)
		}
		f.kv[key] = len(f.KVs)
		f.KVs = append(f.KVs, KV{Key: key, Value: v})
	}
	if v, ok := f.Get("general.alignment"); ok {
		a, ok := v.Uint()
		if !ok || v.Type != TypeUint32 || a == 0 || a&(a-1) != 0 || a > 1<<16 {
			return fail("general.alignment must be a uint32 power of two up to 65536")
		}
		f.Alignment = int(a)
	}
	f.Tensors = make([]Tensor, 0, nTensors)
	for k := 0; k < nTensors; k++ {
		name, err := r.str()
		if err != nil {
			return fail("tensor %d: name: %v", k, err)
		}
		if _, dup := f.tensors[name]; dup {
			return fail("tensor %q appears twice", name)
		}
		nd, err := r.u32()
		if err != nil {
			return fail("tensor %q: %v", name, errShort)
		}
		if nd == 0 || nd > MaxDims {
			return fail("tensor %q: %d dimensions (want 1 to %d)", name, nd, MaxDims)
		}
		t := Tensor{Name: name, Dims: make([]uint64, nd)}
		n := uint64(1)
		for d := range t.Dims {
			if t.Dims[d], err = r.u64(); err != nil {
				return fail("tensor %q: %v", name, errShort)
			}
			if t.Dims[d] == 0 || t.Dims[d] > uint64(len(data)) || n > uint64(len(data))*64/t.Dims[d] {
				return fail("tensor %q: dimensions %v larger than the file", name, t.Dims[:d+1])
			}
			n *= t.Dims[d]
		}
		typ, err := r.u32()
		if err != nil {
			return fail("tensor %q: %v", name, errShort)
		}
		t.Type = GGMLType(typ)
		if t.Type.BlockBytes() == 0 {
			return fail("tensor %q: unknown ggml type %d", name, typ)
		}
		if t.Dims[0]%uint64(t.Type.BlockElems()) != 0 {
			return fail("tensor %q: rows of %d values are not whole %s blocks of %d", name, t.Dims[0], t.Type, t.Type.BlockElems())
		}
		if t.Offset, err = r.u64(); err != nil {
			return fail("tensor %q: %v", name, errShort)
		}
		if t.Offset%uint64(f.Alignment) != 0 {
			return fail("tensor %q: offset %d is not a multiple of the alignment %d", name, t.Offset, f.Alignment)
		}
		f.tensors[name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	start := (uint64(r.off) + uint64(f.Alignment) - 1) / uint64(f.Alignment) * uint64(f.Alignment)
	if nTensors > 0 && start > uint64(len(data)) {
		return fail("truncated before the tensor data")
	}
	body := uint64(len(data)) - min(start, uint64(len(data)))
	order := make([]int, len(f.Tensors))
	for k := range f.Tensors {
		t := &f.Tensors[k]
		size := t.NumElements() / uint64(t.Type.BlockElems()) * uint64(t.Type.BlockBytes())
		if t.Offset > body || size > body-t.Offset {
			return fail("tensor %q: %d bytes at offset %d run past the end of the data (%d bytes)", t.Name, size, t.Offset, body)
		}
		lo := start + t.Offset
		t.Data = data[lo : lo+size : lo+size]
		order[k] = k
	}
	sort.Slice(order, func(a, b int) bool { return f.Tensors[order[a]].Offset < f.Tensors[order[b]].Offset })
	for k := 1; k < len(order); k++ {
		p, q := &f.Tensors[order[k-1]], &f.Tensors[order[k]]
		if p.Offset+uint64(len(p.Data)) > q.Offset {
			return fail("tensors %q and %q overlap", p.Name, q.Name)
		}
	}
	return f, nil
}
