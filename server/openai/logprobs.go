package openai

import (
	"bytes"
	"encoding/json"
	"sort"
)

// Log-probabilities come from vLLM-layout models as the vLLM backend's
// logprobs output: per token, an object {"<token id>": {"logprob",
// "rank", "decoded_token"}}, the sampled token first, as vLLM writes it,
// then the top alternatives. The first entry is the token chosen (Triton's
// frontend takes the one of lowest rank, which is the same token unless
// sampling picked another); the alternatives are listed best rank first.

type vllmLogprob struct {
	Logprob float64 `json:"logprob"`
	Rank    int     `json:"rank"`
	Token   string  `json:"decoded_token"`
}

// rankedEntries decodes one token's entry: the chosen token first, then
// every entry best rank first.
func rankedEntries(raw json.RawMessage) []vllmLogprob {
	var m map[string]vllmLogprob
	if json.Unmarshal(raw, &m) != nil || len(m) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	_, _ = dec.Token()
	first, _ := dec.Token()
	key, _ := first.(string)
	chosen, ok := m[key]
	if !ok {
		return nil
	}
	out := make([]vllmLogprob, 0, len(m)+1)
	out = append(out, chosen)
	for _, v := range m {
		out = append(out, v)
	}
	rest := out[1:]
	sort.SliceStable(rest, func(i, j int) bool {
		if rest[i].Rank != rest[j].Rank {
			return rest[i].Rank < rest[j].Rank
		}
		return rest[i].Token < rest[j].Token
	})
	return out
}

// completionLogprob is the completions API's logprobs object.
type completionLogprob struct {
	TextOffset    []int                `json:"text_offset"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	Tokens        []string             `json:"tokens"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
}

// completionLogprobs converts the entries from index from on; nil when
// there are none.
func completionLogprobs(entries []json.RawMessage, from int) *completionLogprob {
	if from >= len(entries) {
		return nil
	}
	lp := &completionLogprob{}
	offset := 0
	for i, raw := range entries {
		ranked := rankedEntries(raw)
		if len(ranked) == 0 {
			continue
		}
		if i >= from {
			top := make(map[string]float64, len(ranked))
			for _, e := range ranked[1:] {
				top[e.Token] = e.Logprob
			}
			lp.TextOffset = append(lp.TextOffset, offset)
			lp.TokenLogprobs = append(lp.TokenLogprobs, ranked[0].Logprob)
			lp.Tokens = append(lp.Tokens, ranked[0].Token)
			lp.TopLogprobs = append(lp.TopLogprobs, top)
		}
		offset += len(ranked[0].Token)
	}
	return lp
}

// chatLogprobs is the chat API's logprobs object.
type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

type chatTokenLogprob struct {
	Token       string         `json:"token"`
	Logprob     float64        `json:"logprob"`
	Bytes       []int          `json:"bytes"`
	TopLogprobs []chatTopToken `json:"top_logprobs"`
}

type chatTopToken struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func tokenBytes(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

// chatLogprobsOf converts the entries from index from on (top is
// top_logprobs, the alternatives to list); nil when there are none.
func chatLogprobsOf(entries []json.RawMessage, from, top int) *chatLogprobs {
	if from >= len(entries) {
		return nil
	}
	lp := &chatLogprobs{Content: []chatTokenLogprob{}}
	for _, raw := range entries[from:] {
		ranked := rankedEntries(raw)
		if len(ranked) == 0 {
			continue
		}
		t := chatTokenLogprob{Token: ranked[0].Token, Logprob: ranked[0].Logprob, Bytes: tokenBytes(ranked[0].Token), TopLogprobs: []chatTopToken{}}
		for _, e := range ranked[1:min(top+1, len(ranked))] {
			t.TopLogprobs = append(t.TopLogprobs, chatTopToken{Token: e.Token, Logprob: e.Logprob, Bytes: tokenBytes(e.Token)})
		}
		lp.Content = append(lp.Content, t)
	}
	return lp
}
