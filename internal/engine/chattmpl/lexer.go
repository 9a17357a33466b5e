package chattmpl

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

type tokKind int

const (
	tEOF tokKind = iota
	tText
	tVarBegin
	tVarEnd
	tBlockBegin
	tBlockEnd
	tName
	tString
	tInt
	tFloat
	tOp
)

type token struct {
	kind tokKind
	val  string // text, name, operator, decoded string literal, number text
	line int
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "end of template"
	case tVarBegin:
		return "'{{'"
	case tVarEnd:
		return "'}}'"
	case tBlockBegin:
		return "'{%'"
	case tBlockEnd:
		return "'%}'"
	case tString:
		return strconv.Quote(t.val)
	}
	return "'" + t.val + "'"
}

// TemplateSyntaxError is returned by Parse for malformed templates.
type TemplateSyntaxError struct {
	Line int
	Msg  string
}

func (e *TemplateSyntaxError) Error() string {
	return fmt.Sprintf("chattmpl: template syntax error (line %d): %s", e.Line, e.Msg)
}

// normalizeSource mirrors Jinja2's handling of newlines: every \r\n, \r and \n
// becomes \n, and one trailing newline is dropped (keep_trailing_newline=False).
func normalizeSource(src string) string {
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

// lex tokenizes src with Jinja2's default delimiters and
// trim_blocks=True, lstrip_blocks=True.
func lex(src string) ([]token, error) {
	src = normalizeSource(src)
	var toks []token
	line := 1
	pos := 0
	lineStarting := true
	for pos < len(src) {
		// Find the next tag start.
		j := pos
		kind := byte(0)
		for {
			k := strings.IndexByte(src[j:], '{')
			if k < 0 || j+k+1 >= len(src) {
				j = len(src)
				break
			}
			j += k
			c := src[j+1]
			if c == '{' || c == '%' || c == '#' {
				kind = c
				break
			}
			j++
		}
		text := src[pos:j]
		if kind == 0 {
			if text != "" {
				toks = append(toks, token{tText, text, line})
			}
			break
		}
		sign := byte(0)
		if j+2 < len(src) && (src[j+2] == '-' || src[j+2] == '+') {
			sign = src[j+2]
		}
		switch {
		case sign == '-':
			text = pyRStrip(text)
		case sign != '+' && kind != '{':
			lpos := strings.LastIndexByte(text, '\n') + 1
			if lpos > 0 || lineStarting {
				rest := text[lpos:]
				if rest != "" && strings.TrimFunc(rest, pyWhitespace) == "" {
					text = text[:lpos]
				}
			}
		}
		if text != "" {
			toks = append(toks, token{tText, text, line})
		}
		line += strings.Count(src[pos:j], "\n")
		pos = j + 2
		if sign != 0 {
			pos++
		}
		if kind == '#' {
			k := strings.Index(src[pos:], "#}")
			if k < 0 {
				return nil, &TemplateSyntaxError{line, "missing end of comment tag"}
			}
			end := pos + k
			line += strings.Count(src[pos:end], "\n")
			esign := byte(0)
			if end > pos && (src[end-1] == '-' || src[end-1] == '+') {
				esign = src[end-1]
			}
			pos = end + 2
			pos, lineStarting = afterTagEnd(src, pos, esign, true, &line)
			continue
		}
		beginKind, endKind := tVarBegin, tVarEnd
		closer := "}}"
		if kind == '%' {
			beginKind, endKind = tBlockBegin, tBlockEnd
			closer = "%}"
		}
		toks = append(toks, token{beginKind, "", line})
		// Expression tokens until the balanced closer.
		depth := 0
		closed := false
		for pos < len(src) {
			c := src[pos]
			if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' {
				if c == '\n' {
					line++
				}
				pos++
				continue
			}
			if depth == 0 {
				esign := byte(0)
				p := pos
				if (c == '-' || c == '+') && strings.HasPrefix(src[pos+1:], closer) {
					esign = c
					p++
				}
				if strings.HasPrefix(src[p:], closer) {
					toks = append(toks, token{endKind, "", line})
					pos = p + 2
					pos, lineStarting = afterTagEnd(src, pos, esign, kind == '%', &line)
					closed = true
					break
				}
			}
			switch {
			case c == '\'' || c == '"':
				s, n, err := lexString(src[pos:])
				if err != nil {
					return nil, &TemplateSyntaxError{line, err.Error()}
				}
				toks = append(toks, token{tString, s, line})
				line += strings.Count(src[pos:pos+n], "\n")
				pos += n
			case isDigit(c):
				n, isFloat := lexNumber(src[pos:])
				k := tInt
				if isFloat {
					k = tFloat
				}
				toks = append(toks, token{k, strings.ReplaceAll(src[pos:pos+n], "_", ""), line})
				pos += n
			case isNameStart(c):
				n := 1
				for pos+n < len(src) && isNameChar(src[pos+n]) {
					n++
				}
				toks = append(toks, token{tName, src[pos : pos+n], line})
				pos += n
			default:
				op := ""
				for _, cand := range []string{"//", "**", "==", "!=", "<=", ">="} {
					if strings.HasPrefix(src[pos:], cand) {
						op = cand
						break
					}
				}
				if op == "" {
					if strings.IndexByte("+-*/%~=<>()[]{}.,:|;", c) < 0 {
						r, _ := utf8.DecodeRuneInString(src[pos:])
						return nil, &TemplateSyntaxError{line, fmt.Sprintf("unexpected char %q", r)}
					}
					op = string(c)
				}
				switch op {
				case "(", "[", "{":
					depth++
					if depth > MaxParseDepth { // fail before lexing the rest
						return nil, &LimitError{Limit: "parse_depth", Max: MaxParseDepth}
					}
				case ")", "]", "}":
					if depth > 0 {
						depth--
					}
				}
				toks = append(toks, token{tOp, op, line})
				pos += len(op)
			}
		}
		if !closed {
			return nil, &TemplateSyntaxError{line, "unexpected end of template, expected '" + closer + "'"}
		}
		// {% raw %} ... {% endraw %}
		if kind == '%' && len(toks) >= 3 && toks[len(toks)-3].kind == tBlockBegin &&
			toks[len(toks)-2].kind == tName && toks[len(toks)-2].val == "raw" {
			toks = toks[:len(toks)-3]
			k := findEndRaw(src[pos:])
			if k < 0 {
				return nil, &TemplateSyntaxError{line, "missing endraw"}
			}
			body := src[pos : pos+k]
			rest := src[pos+k:]
			// rest starts at "{%"
			if len(rest) > 2 && rest[2] == '-' {
				body = pyRStrip(body)
			}
			if body != "" {
				toks = append(toks, token{tText, body, line})
			}
			line += strings.Count(src[pos:pos+k], "\n")
			end := strings.Index(rest, "%}")
			if end < 0 {
				return nil, &TemplateSyntaxError{line, "missing end of endraw tag"}
			}
			esign := byte(0)
			if rest[end-1] == '-' || rest[end-1] == '+' {
				esign = rest[end-1]
			}
			pos = pos + k + end + 2
			pos, lineStarting = afterTagEnd(src, pos, esign, true, &line)
		}
	}
	toks = append(toks, token{tEOF, "", line})
	return toks, nil
}

func findEndRaw(s string) int {
	off := 0
	for {
		k := strings.Index(s[off:], "{%")
		if k < 0 {
			return -1
		}
		p := off + k + 2
		if p < len(s) && (s[p] == '-' || s[p] == '+') {
			p++
		}
		q := p
		for q < len(s) && (s[q] == ' ' || s[q] == '\t' || s[q] == '\n') {
			q++
		}
		if strings.HasPrefix(s[q:], "endraw") {
			return off + k
		}
		off = off + k + 2
	}
}

// afterTagEnd applies '-' (strip all following whitespace) or trim_blocks
// (drop one newline after block and comment tags). It reports the new position
// and whether the consumed tag end finished with a newline.
func afterTagEnd(src string, pos int, sign byte, block bool, line *int) (int, bool) {
	switch {
	case sign == '-':
		start := pos
		for pos < len(src) {
			r, n := utf8.DecodeRuneInString(src[pos:])
			if !pyWhitespace(r) {
				break
			}
			pos += n
		}
		*line += strings.Count(src[start:pos], "\n")
		return pos, pos > start && src[pos-1] == '\n'
	case sign == '+' || !block:
		return pos, false
	}
	if pos < len(src) && src[pos] == '\n' {
		*line++
		return pos + 1, true
	}
	return pos, false
}

func isDigit(c byte) bool     { return c >= '0' && c <= '9' }
func isNameStart(c byte) bool { return c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isNameChar(c byte) bool  { return isNameStart(c) || isDigit(c) }

func lexNumber(s string) (int, bool) {
	n := 0
	for n < len(s) && (isDigit(s[n]) || s[n] == '_') {
		n++
	}
	isFloat := false
	if n+1 < len(s) && s[n] == '.' && isDigit(s[n+1]) {
		isFloat = true
		n++
		for n < len(s) && (isDigit(s[n]) || s[n] == '_') {
			n++
		}
	}
	if n < len(s) && (s[n] == 'e' || s[n] == 'E') {
		m := n + 1
		if m < len(s) && (s[m] == '+' || s[m] == '-') {
			m++
		}
		if m < len(s) && isDigit(s[m]) {
			isFloat = true
			n = m
			for n < len(s) && isDigit(s[n]) {
				n++
			}
		}
	}
	return n, isFloat
}

// lexString decodes a Python-style string literal at the start of s and
// returns it with the number of bytes consumed.
func lexString(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	i := 1
	for i < len(s) {
		c := s[i]
		if c == q {
			return b.String(), i + 1, nil
		}
		if c != '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		if i+1 >= len(s) {
			break
		}
		e := s[i+1]
		i += 2
		switch e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		case 'a':
			b.WriteByte('\a')
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i - 1
			k := j
			for k < len(s) && k < j+3 && s[k] >= '0' && s[k] <= '7' {
				k++
			}
			v, _ := strconv.ParseUint(s[j:k], 8, 32)
			b.WriteRune(rune(v))
			i = k
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+n > len(s) {
				return "", 0, fmt.Errorf("truncated \\%c escape", e)
			}
			v, err := strconv.ParseUint(s[i:i+n], 16, 32)
			if err != nil {
				return "", 0, fmt.Errorf("bad \\%c escape", e)
			}
			b.WriteRune(rune(v))
			i += n
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", 0, fmt.Errorf("unterminated string literal")
}
