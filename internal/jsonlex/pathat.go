package jsonlex

// PathAt is the path of the innermost value of the JSON document d whose
// text holds the byte at off (a container's brackets and the space and
// punctuation between its members are the container's): where in a
// document a decoder's error offset points. encoding/json's type errors
// name the field by Go struct path ("SamplingRequest.temperature" for a
// field of an embedded struct, "messages.content" without the element's
// index); PathAt gives the JSON path ("messages[1].content"). d is scanned
// once, up to the value that holds off; ok is false when d is not valid
// JSON up to there, nests deeper than encoding/json's 10,000 levels on the
// way, or off is outside its first value.
func PathAt(d []byte, off int) (p Path, ok bool) {
	i := SkipSpace(d, 0)
	if off < i {
		return "", false
	}
	st := MakePathStack(8)
	_, found, err := pathAt(d, i, off, &st)
	if err != nil || !found {
		return "", false
	}
	return st.Path(), true
}

// pathAtMaxDepth is how deep PathAt follows a document: encoding/json's
// limit, so any document it decoded up to a type error is followed.
const pathAtMaxDepth = 10000

// pathAt scans the value at d[i] (off >= i): when it holds off it returns
// found with st at the innermost value that does, else the offset just
// past it (st as it was).
func pathAt(d []byte, i, off int, st *PathStack) (end int, found bool, err error) {
	if i >= len(d) {
		return i, false, errAt(i, "unexpected end of input")
	}
	if st.Len() > pathAtMaxDepth {
		return i, false, errAt(i, "nesting too deep")
	}
	switch d[i] {
	case '{', '[':
		if off == i {
			return i, true, nil
		}
		obj := d[i] == '{'
		closer := byte(']')
		if obj {
			closer = '}'
		}
		j := SkipSpace(d, i+1)
		for n := 0; ; n++ {
			if j < len(d) && d[j] == closer && n == 0 {
				return j + 1, off <= j, nil
			}
			if off < j {
				return j, true, nil // between members: the container's
			}
			if obj {
				kend, esc, err := ScanString(d, j)
				if err != nil {
					return j, false, err
				}
				key := Unquote(d[j+1:kend-1], esc, Replace)
				j = SkipSpace(d, kend)
				if j >= len(d) || d[j] != ':' {
					return j, false, errAt(j, "expected ':'")
				}
				if off <= j {
					return j, true, nil
				}
				j = SkipSpace(d, j+1)
				st.PushKey(key)
			} else {
				st.PushIndex(n)
			}
			if off < j {
				st.Pop()
				return j, true, nil
			}
			vend, found, err := pathAt(d, j, off, st)
			if found || err != nil {
				return vend, found, err
			}
			st.Pop()
			j = SkipSpace(d, vend)
			if j < len(d) && d[j] == ',' {
				if off <= j {
					return j, true, nil
				}
				j = SkipSpace(d, j+1)
				continue
			}
			if j < len(d) && d[j] == closer {
				return j + 1, off <= j, nil
			}
			return j, false, errAt(j, "expected ',' or a closing bracket")
		}
	}
	end, err = SkipValue(d, i, 0, true)
	return end, err == nil && off < end, err
}
