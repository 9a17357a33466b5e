package trace

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"
)

// UUIDv7 (RFC 9562): 48-bit Unix milliseconds, version 7, a 12-bit counter in
// rand_a (method 1 of section 6.2, so ids made in the same millisecond by this
// process still sort in creation order), variant 10, 62 random bits.
var uuidState struct {
	sync.Mutex
	lastMS  int64
	counter uint16 // 12 bits used
}

// NewUUIDv7 returns a new UUIDv7 string in canonical lowercase form.
func NewUUIDv7() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	ms := time.Now().UnixMilli()

	uuidState.Lock()
	if ms <= uuidState.lastMS {
		uuidState.counter++
		if uuidState.counter > 0xFFF { // counter overflow: borrow the next millisecond
			uuidState.lastMS++
			uuidState.counter = uint16(binary.BigEndian.Uint16(b[6:8]) & 0x3FF)
		}
		ms = uuidState.lastMS
	} else {
		uuidState.lastMS = ms
		// start the counter low and random so there is room to increment
		uuidState.counter = uint16(binary.BigEndian.Uint16(b[6:8]) & 0x3FF)
	}
	counter := uuidState.counter
	uuidState.Unlock()

	b[0] = byte(ms >> 40)
	b[1] = byte(ms >> 32)
	b[2] = byte(ms >> 24)
	b[3] = byte(ms >> 16)
	b[4] = byte(ms >> 8)
	b[5] = byte(ms)
	b[6] = 0x70 | byte(counter>>8)&0x0F
	b[7] = byte(counter)
	b[8] = 0x80 | b[8]&0x3F
	return formatUUID(b)
}

func formatUUID(b [16]byte) string {
	var s [36]byte
	j := 0
	for i := 0; i < 16; i++ {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			s[j] = '-'
			j++
		}
		s[j] = hexdigits[b[i]>>4]
		s[j+1] = hexdigits[b[i]&0xF]
		j += 2
	}
	return string(s[:])
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// validID reports whether s is a call, trace or parent id the store accepts:
// a UUID in its 36-character hyphenated form (any version), or an
// OpenTelemetry id: a 32-hex-digit trace id or a 16-hex-digit span id. Hex
// digits may be upper or lower case; ids are stored as sent. The all-zero
// OpenTelemetry ids are invalid by that spec and rejected.
func validID(s string) bool {
	switch len(s) {
	case 36:
		for i := 0; i < 36; i++ {
			c := s[i]
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if c != '-' {
					return false
				}
				continue
			}
			if !isHex(s[i : i+1]) {
				return false
			}
		}
		return true
	case 32, 16:
		if !isHex(s) {
			return false
		}
		for i := 0; i < len(s); i++ {
			if s[i] != '0' {
				return true
			}
		}
		return false
	}
	return false
}
