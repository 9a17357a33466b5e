package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
)

// Config is the part of a tokenizer_config.json that serving needs. Token
// fields are "" when absent or null.
type Config struct {
	BOSToken                  string
	EOSToken                  string
	PadToken                  string
	UnkToken                  string
	AdditionalSpecialTokens   []string
	ChatTemplate              string            // the default template
	ChatTemplates             map[string]string // named templates (list form), including "default"
	CleanUpTokenizationSpaces bool              // transformers' default (true) when absent
	AddBOSToken               *bool
	AddEOSToken               *bool
	ModelMaxLength            float64 // 0 when absent
	TokenizerClass            string
}

// LoadConfig reads a tokenizer_config.json.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return ParseConfig(data)
}

// ParseConfig parses the contents of a tokenizer_config.json.
func ParseConfig(data []byte) (*Config, error) {
	var raw struct {
		BOS            json.RawMessage `json:"bos_token"`
		EOS            json.RawMessage `json:"eos_token"`
		Pad            json.RawMessage `json:"pad_token"`
		Unk            json.RawMessage `json:"unk_token"`
		ChatTemplate   json.RawMessage `json:"chat_template"`
		CleanUp        *bool           `json:"clean_up_tokenization_spaces"`
		AddBOS         *bool           `json:"add_bos_token"`
		AddEOS         *bool           `json:"add_eos_token"`
		ModelMaxLength float64         `json:"model_max_length"`
		TokenizerClass string          `json:"tokenizer_class"`
	}
	var addl struct {
		Additional []json.RawMessage `json:"additional_special_tokens"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("tokenizer: malformed tokenizer_config.json: %w", err)
	}
	if err := json.Unmarshal(data, &addl); err != nil {
		return nil, fmt.Errorf("tokenizer: malformed tokenizer_config.json: %w", err)
	}
	c := &Config{
		AddBOSToken:               raw.AddBOS,
		AddEOSToken:               raw.AddEOS,
		ModelMaxLength:            raw.ModelMaxLength,
		TokenizerClass:            raw.TokenizerClass,
		CleanUpTokenizationSpaces: raw.CleanUp == nil || *raw.CleanUp,
	}
	var err error
	for _, f := range []struct {
		dst  *string
		raw  json.RawMessage
		name string
	}{{&c.BOSToken, raw.BOS, "bos_token"}, {&c.EOSToken, raw.EOS, "eos_token"}, {&c.PadToken, raw.Pad, "pad_token"}, {&c.UnkToken, raw.Unk, "unk_token"}} {
		if *f.dst, err = tokenContent(f.raw); err != nil {
			return nil, fmt.Errorf("tokenizer: malformed tokenizer_config.json %s: %w", f.name, err)
		}
	}
	for _, a := range addl.Additional {
		s, err := tokenContent(a)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: malformed tokenizer_config.json additional_special_tokens: %w", err)
		}
		c.AdditionalSpecialTokens = append(c.AdditionalSpecialTokens, s)
	}
	if !isNull(raw.ChatTemplate) {
		var s string
		if json.Unmarshal(raw.ChatTemplate, &s) == nil {
			c.ChatTemplate = s
		} else {
			var list []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(raw.ChatTemplate, &list); err != nil {
				return nil, fmt.Errorf("tokenizer: malformed tokenizer_config.json chat_template: %w", err)
			}
			c.ChatTemplates = map[string]string{}
			for _, t := range list {
				c.ChatTemplates[t.Name] = t.Template
			}
			c.ChatTemplate = c.ChatTemplates["default"]
		}
	}
	return c, nil
}

// tokenContent reads a token given as a string or as an AddedToken object.
func tokenContent(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", err
	}
	return obj.Content, nil
}
