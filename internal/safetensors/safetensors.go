// Package safetensors reads and writes the safetensors format: an 8-byte
// little-endian header length, a JSON header mapping tensor names to
// {dtype, shape, data_offsets}, then the raw tensor bytes.
//
// Files are memory-mapped for reading, so tensors are used in place (F32 as
// float32, F16/BF16 as their 16-bit values) or converted once into float32
// without an extra copy of the file.
package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"syscall"
	"unsafe"

	"flywheel/internal/atomicfile"
)

// Tensor is one tensor of a file: its dtype, shape and raw little-endian bytes.
type Tensor struct {
	Name  string
	DType string // "F32", "F16", "BF16", ...
	Shape []int
	Data  []byte // a view into the mapped file; valid until the File is closed
}

// NumElements returns the product of the shape.
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Uint16 returns the raw 16-bit values of an F16 or BF16 tensor: a view of
// the mapping when its bytes are 2-byte aligned (no copy; read-only: never
// write into it), else a copy.
func (t *Tensor) Uint16() ([]uint16, error) {
	n := t.NumElements()
	if t.DType != "F16" && t.DType != "BF16" {
		return nil, fmt.Errorf("safetensors: tensor %s: dtype %s is not F16 or BF16", t.Name, t.DType)
	}
	if len(t.Data) != 2*n {
		return nil, fmt.Errorf("safetensors: tensor %s: %d bytes for %d %s values", t.Name, len(t.Data), n, t.DType)
	}
	if n == 0 {
		return []uint16{}, nil
	}
	if littleEndian && uintptr(unsafe.Pointer(&t.Data[0]))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(&t.Data[0])), n), nil
	}
	out := make([]uint16, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(t.Data[2*i:])
	}
	return out, nil
}

// Float32 returns the tensor as float32 values. An F32 tensor whose bytes are
// 4-byte aligned is returned as a view of the mapping (no copy); F16 and BF16
// are converted into a new slice.
func (t *Tensor) Float32() ([]float32, error) {
	n := t.NumElements()
	switch t.DType {
	case "F32":
		if len(t.Data) != 4*n {
			return nil, fmt.Errorf("safetensors: tensor %s: %d bytes for %d F32 values", t.Name, len(t.Data), n)
		}
		if n == 0 {
			return []float32{}, nil
		}
		if littleEndian && uintptr(unsafe.Pointer(&t.Data[0]))%4 == 0 {
			return unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), n), nil
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
		return out, nil
	case "BF16":
		if len(t.Data) != 2*n {
			return nil, fmt.Errorf("safetensors: tensor %s: %d bytes for %d BF16 values", t.Name, len(t.Data), n)
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(t.Data[2*i:])) << 16)
		}
		return out, nil
	case "F16":
		if len(t.Data) != 2*n {
			return nil, fmt.Errorf("safetensors: tensor %s: %d bytes for %d F16 values", t.Name, len(t.Data), n)
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = F16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("safetensors: tensor %s: unsupported dtype %s (want F32, F16 or BF16)", t.Name, t.DType)
}

// Float32Into converts the tensor into dst, which must hold exactly
// NumElements values (a copy even for F32).
func (t *Tensor) Float32Into(dst []float32) error {
	n := t.NumElements()
	if len(dst) != n {
		return fmt.Errorf("safetensors: tensor %s: destination holds %d values, tensor %d", t.Name, len(dst), n)
	}
	size := map[string]int{"F32": 4, "F16": 2, "BF16": 2}[t.DType]
	if size == 0 {
		return fmt.Errorf("safetensors: tensor %s: unsupported dtype %s (want F32, F16 or BF16)", t.Name, t.DType)
	}
	if len(t.Data) != size*n {
		return fmt.Errorf("safetensors: tensor %s: %d bytes for %d %s values", t.Name, len(t.Data), n, t.DType)
	}
	switch t.DType {
	case "F32":
		if littleEndian && n > 0 {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*n), t.Data)
			return nil
		}
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
	case "BF16":
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(t.Data[2*i:])) << 16)
		}
	case "F16":
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	}
	return nil
}

// F16ToF32 converts an IEEE 754 half-precision value to float32.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		for mant&0x400 == 0 {
			mant <<= 1
			exp--
		}
		exp++
		mant &= 0x3ff
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// File is an open, memory-mapped safetensors file.
type File struct {
	Path     string
	Metadata map[string]string
	tensors  map[string]*Tensor
	names    []string
	mapped   []byte

	gmu   sync.Mutex // guards lease (guard_linux.go)
	lease *os.File   // the mapped file, open while it holds a read lease
}

type headerEntry struct {
	DType       string `json:"dtype"`
	Shape       []int  `json:"shape"`
	DataOffsets [2]int `json:"data_offsets"`
}

// Open memory-maps path and parses its header. On Linux the mapping is
// guarded against the file being truncated or written while mapped (see
// guard_linux.go).
func Open(path string) (*File, error) {
	return openWith(path, parse)
}

// Map memory-maps path read-only, guarded like Open, without parsing it: for
// the other weight containers (GGUF, package gguf) that use the same mapping
// and guard. Bytes returns the mapped bytes; the File has no tensors.
func Map(path string) (*File, error) {
	return openWith(path, func(path string, _ []byte) (*File, error) { return &File{Path: path}, nil })
}

// Bytes returns the whole mapped file (nil for a parsed-from-memory file or
// after Close); read-only: never write into it.
func (f *File) Bytes() []byte { return f.mapped }

func openWith(path string, parse func(string, []byte) (*File, error)) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			f.Close()
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("safetensors: %s: file too short (%d bytes)", path, size)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors: %s: not a regular file", path)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("safetensors: mmap %s: %w", path, err)
	}
	sf, err := parse(path, data)
	if err != nil {
		_ = syscall.Munmap(data)
		return nil, err
	}
	sf.mapped = data
	if sf.guard(f) {
		keep = true // f holds the lease until Close
	}
	return sf, nil
}

func parse(path string, data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("safetensors: %s: file too short", path)
	}
	hlen := binary.LittleEndian.Uint64(data[:8])
	if hlen > uint64(len(data)-8) || hlen > 100<<20 {
		return nil, fmt.Errorf("safetensors: %s: header length %d exceeds file size %d", path, hlen, len(data))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+hlen], &raw); err != nil {
		return nil, fmt.Errorf("safetensors: %s: bad header: %w", path, err)
	}
	body := data[8+hlen:]
	sf := &File{Path: path, tensors: map[string]*Tensor{}}
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &sf.Metadata); err != nil {
				return nil, fmt.Errorf("safetensors: %s: bad __metadata__: %w", path, err)
			}
			continue
		}
		var e headerEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("safetensors: %s: tensor %s: bad header entry: %w", path, name, err)
		}
		lo, hi := e.DataOffsets[0], e.DataOffsets[1]
		if lo < 0 || hi < lo || hi > len(body) {
			return nil, fmt.Errorf("safetensors: %s: tensor %s: data offsets [%d,%d] outside data of %d bytes", path, name, lo, hi, len(body))
		}
		sf.tensors[name] = &Tensor{Name: name, DType: e.DType, Shape: e.Shape, Data: body[lo:hi:hi]}
		sf.names = append(sf.names, name)
	}
	sort.Strings(sf.names)
	return sf, nil
}

// Names returns the tensor names in sorted order.
func (f *File) Names() []string { return f.names }

// Tensor returns the named tensor, or nil.
func (f *File) Tensor(name string) *Tensor { return f.tensors[name] }

// DropPages tells the kernel that the mapped bytes of t are not needed any
// more (after converting an F16/BF16 tensor), so they leave the process's
// resident set; reading them again later faults them back in from the
// file. It is a no-op for files parsed from memory.
func (f *File) DropPages(t *Tensor) {
	if f.mapped == nil || len(t.Data) == 0 {
		return
	}
	base := uintptr(unsafe.Pointer(&f.mapped[0]))
	lo := uintptr(unsafe.Pointer(&t.Data[0])) - base
	hi := lo + uintptr(len(t.Data))
	page := uintptr(os.Getpagesize())
	lo = (lo + page - 1) &^ (page - 1) // only pages entirely inside t
	hi &^= page - 1
	if hi <= lo || hi > uintptr(len(f.mapped)) {
		return
	}
	_ = syscall.Madvise(f.mapped[lo:hi], syscall.MADV_DONTNEED)
}

// Close unmaps the file. Tensor data and F32 views become invalid.
func (f *File) Close() error {
	if f.mapped == nil {
		return nil
	}
	f.unguard()
	err := syscall.Munmap(f.mapped)
	f.mapped = nil
	return err
}

// WriteTensor is a float32 tensor to write. DType selects the stored type:
// "" or "F32" (default), "F16" or "BF16" (rounded to nearest even).
type WriteTensor struct {
	Name  string
	Shape []int
	Data  []float32
	DType string
}

func (t *WriteTensor) dtype() string {
	if t.DType == "" {
		return "F32"
	}
	return t.DType
}

// F32ToBF16 rounds a float32 to bfloat16 (round to nearest even; NaN stays NaN).
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F32ToF16 rounds a float32 to IEEE half precision (round to nearest even,
// overflow to infinity, gradual underflow).
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b >> 23) & 0xff)
	mant := b & 0x7fffff
	if exp == 0xff { // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 { // subnormal half (or zero)
		if e < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		half := m >> shift
		rem := m & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | uint16(half)
	}
	half := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++ // may carry into the exponent, which is still correct (up to Inf)
	}
	return sign | uint16(half)
}

// WriteFile writes tensors to path atomically: a temp file in the same
// folder, fsync, then rename. The file is world-readable (0644). The output
// is deterministic: tensors sorted by name, header keys sorted, data
// 8-byte aligned.
func WriteFile(path string, tensors []WriteTensor, metadata map[string]string) error {
	sorted := append([]WriteTensor(nil), tensors...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	off := 0
	for _, t := range sorted {
		n := 1
		for _, d := range t.Shape {
			n *= d
		}
		if n != len(t.Data) {
			return fmt.Errorf("safetensors: tensor %s: shape %v has %d elements, data has %d", t.Name, t.Shape, n, len(t.Data))
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		size := 4
		switch t.dtype() {
		case "F32":
		case "F16", "BF16":
			size = 2
		default:
			return fmt.Errorf("safetensors: tensor %s: cannot write dtype %s", t.Name, t.DType)
		}
		header[t.Name] = headerEntry{DType: t.dtype(), Shape: shape, DataOffsets: [2]int{off, off + size*n}}
		off += size * n
	}
	hb, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	for len(hb)%8 != 0 { // pad so the data starts 8-byte aligned
		hb = append(hb, ' ')
	}
	tmp, err := atomicfile.Create(path, 0o644)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	defer tmp.Abort()
	buf := make([]byte, 8, 8+len(hb))
	binary.LittleEndian.PutUint64(buf, uint64(len(hb)))
	buf = append(buf, hb...)
	if _, err := tmp.Write(buf); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	var conv []byte
	for _, t := range sorted {
		if len(t.Data) == 0 {
			continue
		}
		var b []byte
		switch t.dtype() {
		case "F32":
			if littleEndian {
				b = unsafe.Slice((*byte)(unsafe.Pointer(&t.Data[0])), 4*len(t.Data))
			} else {
				conv = conv[:0]
				for _, v := range t.Data {
					conv = binary.LittleEndian.AppendUint32(conv, math.Float32bits(v))
				}
				b = conv
			}
		case "F16", "BF16":
			conv = conv[:0]
			for _, v := range t.Data {
				var h uint16
				if t.dtype() == "F16" {
					h = F32ToF16(v)
				} else {
					h = F32ToBF16(v)
				}
				conv = binary.LittleEndian.AppendUint16(conv, h)
			}
			b = conv
		}
		if _, err := tmp.Write(b); err != nil {
			return fmt.Errorf("safetensors: %w", err)
		}
	}
	if err := tmp.Commit(); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}
