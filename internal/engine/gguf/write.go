package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Values to write. Each makes the Value a file read back would hold.

// String is a string value.
func String(s string) Value { return Value{Type: TypeString, s: s} }

// Uint32 is a uint32 value.
func Uint32(x uint32) Value { return Value{Type: TypeUint32, u: uint64(x)} }

// Uint64 is a uint64 value.
func Uint64(x uint64) Value { return Value{Type: TypeUint64, u: x} }

// Float32 is a float32 value.
func Float32(x float32) Value { return Value{Type: TypeFloat32, u: uint64(math.Float32bits(x))} }

// Bool is a bool value.
func Bool(b bool) Value {
	v := Value{Type: TypeBool}
	if b {
		v.u = 1
	}
	return v
}

// Strings is an array of strings.
func Strings(s []string) Value {
	return Value{Type: TypeArray, arr: &Array{Elem: TypeString, Len: len(s), strs: s}}
}

// Int32s is an array of int32.
func Int32s(x []int32) Value {
	raw := make([]byte, 0, 4*len(x))
	for _, v := range x {
		raw = binary.LittleEndian.AppendUint32(raw, uint32(v))
	}
	return Value{Type: TypeArray, arr: &Array{Elem: TypeInt32, Len: len(x), raw: raw}}
}

// WriteTensor is a tensor to write: its raw bytes in Type's layout, Dims in
// ggml order (Dims[0] is the row length).
type WriteTensor struct {
	Name string
	Dims []uint64
	Type GGMLType
	Data []byte
}

// Encode returns a GGUF version 3 file of kvs and tensors, tensor data
// aligned to general.alignment (when set in kvs) or DefaultAlignment. For
// tests and tools; a model written by a test is read back by Open.
func Encode(kvs []KV, tensors []WriteTensor) ([]byte, error) {
	align := uint64(DefaultAlignment)
	b := []byte(Magic)
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(tensors)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(kvs)))
	str := func(s string) {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, kv := range kvs {
		if kv.Key == "general.alignment" {
			a, _ := kv.Value.Uint()
			if a == 0 || a&(a-1) != 0 {
				return nil, fmt.Errorf("gguf: general.alignment %d is not a power of two", a)
			}
			align = a
		}
		str(kv.Key)
		b = binary.LittleEndian.AppendUint32(b, uint32(kv.Value.Type))
		b = appendValue(b, kv.Value)
	}
	off := uint64(0)
	offs := make([]uint64, len(tensors))
	for k, t := range tensors {
		n := uint64(1)
		for _, d := range t.Dims {
			n *= d
		}
		be := uint64(t.Type.BlockElems())
		if be == 0 || n%be != 0 || uint64(len(t.Data)) != n/be*uint64(t.Type.BlockBytes()) {
			return nil, fmt.Errorf("gguf: tensor %s: %d bytes do not hold %v values of %s", t.Name, len(t.Data), t.Dims, t.Type)
		}
		str(t.Name)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(t.Dims)))
		for _, d := range t.Dims {
			b = binary.LittleEndian.AppendUint64(b, d)
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(t.Type))
		b = binary.LittleEndian.AppendUint64(b, off)
		offs[k] = off
		off = (off + uint64(len(t.Data)) + align - 1) / align * align
	}
	pad := func() {
		for uint64(len(b))%align != 0 {
			b = append(b, 0)
		}
	}
	pad()
	start := uint64(len(b))
	for k, t := range tensors {
		for uint64(len(b)) < start+offs[k] {
			b = append(b, 0)
		}
		b = append(b, t.Data...)
	}
	return b, nil
}

func appendValue(b []byte, v Value) []byte {
	switch v.Type {
	case TypeString:
		b = binary.LittleEndian.AppendUint64(b, uint64(len(v.s)))
		return append(b, v.s...)
	case TypeArray:
		b = binary.LittleEndian.AppendUint32(b, uint32(v.arr.Elem))
		b = binary.LittleEndian.AppendUint64(b, uint64(v.arr.Len))
		if v.arr.Elem == TypeString {
			for _, s := range v.arr.strs {
				b = appendValue(b, String(s))
			}
			return b
		}
		return append(b, v.arr.raw...)
	case TypeInt8, TypeInt16, TypeInt32, TypeInt64:
		return appendFixed(b, v.Type.size(), uint64(v.i))
	}
	return appendFixed(b, v.Type.size(), v.u)
}

func appendFixed(b []byte, size int, x uint64) []byte {
	for k := 0; k < size; k++ {
		b = append(b, byte(x>>(8*k)))
	}
	return b
}
