package serve

import (
	"net/http"

	"flywheel/internal/httpx"
)

// handleTokenize is POST /tokenize (vLLM's convention): {model, prompt,
// add_special_tokens=true} or {model, messages, add_generation_prompt=true,
// continue_final_message, tools, chat_template_kwargs,
// add_special_tokens=false} -> {count, max_model_len, tokens, token_strs}.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) error {
	var req TokenizeRequest
	p, body, err := readRequest(r, &req)
	if err != nil {
		return err
	}
	if req.Prompt == nil && req.Messages == nil {
		return httpx.Invalid("prompt", "missing_field", "either prompt or messages is required")
	}
	if req.Prompt != nil && req.Messages != nil {
		return httpx.Invalid("messages", "invalid_value", "give either prompt or messages, not both")
	}
	_, lm, err := s.resolveModel(r.Context(), p, req.Model)
	if err != nil {
		return err
	}
	var ids []int
	if req.Prompt != nil {
		add := true
		if req.AddSpecialTokens != nil {
			add = *req.AddSpecialTokens
		}
		if err := lm.checkPromptBytes("prompt", "the prompt is", len(*req.Prompt)); err != nil {
			return err
		}
		ids = lm.tok.Encode(*req.Prompt, add)
	} else {
		addGen, cont := true, false
		if req.ContinueFinalMessage != nil && *req.ContinueFinalMessage {
			cont, addGen = true, false
			if req.AddGenerationPrompt != nil && *req.AddGenerationPrompt {
				return httpx.Invalid("continue_final_message", "invalid_value", "continue_final_message and add_generation_prompt cannot both be true")
			}
		} else if req.AddGenerationPrompt != nil {
			addGen = *req.AddGenerationPrompt
		}
		for i, m := range req.Messages {
			if m.Role == "developer" {
				req.Messages[i].Role = "system"
			}
		}
		in := chatInput{ctx: r.Context(), messages: req.Messages, addGenerationPrompt: addGen, continueFinalMessage: cont, kwargs: req.ChatTemplateKwargs}
		if len(req.Tools) > 0 {
			in.tools = rawField(body, "tools")
		}
		if err := lm.checkPromptBytes("messages", "the messages, tools and chat_template_kwargs are", promptBytes(in.messages, in.tools, in.kwargs)); err != nil {
			return err
		}
		text, err := lm.render(in)
		if err != nil {
			return err
		}
		add := false
		if req.AddSpecialTokens != nil {
			add = *req.AddSpecialTokens
		}
		ids = lm.tok.Encode(text, add)
	}
	resp := TokenizeResponse{Count: len(ids), MaxModelLen: lm.maxLen(), Tokens: ids}
	if resp.Tokens == nil {
		resp.Tokens = []int{}
	}
	if req.ReturnTokenStrs != nil && *req.ReturnTokenStrs {
		resp.TokenStrs = make([]string, len(ids))
		for i, id := range ids {
			resp.TokenStrs[i] = lm.tok.IDToToken(id)
		}
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// handleDetokenize is POST /detokenize: {model, tokens} -> {prompt}.
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) error {
	var req DetokenizeRequest
	p, _, err := readRequest(r, &req)
	if err != nil {
		return err
	}
	if req.Tokens == nil {
		return httpx.Invalid("tokens", "missing_field", "tokens is required")
	}
	_, lm, err := s.resolveModel(r.Context(), p, req.Model)
	if err != nil {
		return err
	}
	n := min(lm.tok.VocabSize(), lm.m.Config.VocabSize)
	for i, id := range req.Tokens {
		if id < 0 || id >= n || lm.tok.IDToToken(id) == "" {
			return httpx.Invalid("tokens", "invalid_value", "tokens[%d]: token id %d is not in the vocabulary", i, id)
		}
	}
	httpx.WriteJSON(w, http.StatusOK, DetokenizeResponse{Prompt: lm.tok.Decode(req.Tokens, false)})
	return nil
}
