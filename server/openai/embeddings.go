package openai

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"

	"github.com/stubvisor/stubvisor/backendapi"
)

// Embeddings use the vLLM backend's embedding layout, as Triton's
// frontend does: the input embedding_request holds {"input": <text>,
// "pooling_params": {"dimensions": [n]}} as JSON, and the output
// text_output the vector as a JSON array; num_input_tokens, when the model
// gives it, counts the prompt tokens. Each input string of a request is
// one model request, run one after another.

type embeddingResponse struct {
	Object string            `json:"object"`
	Data   []embeddingObject `json:"data"`
	Model  string            `json:"model"`
	Usage  embeddingUsage    `json:"usage"`
}

type embeddingObject struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float64, or base64 of float32s
}

type embeddingUsage struct {
	PromptTokens int64 `json:"prompt_tokens"`
	TotalTokens  int64 `json:"total_tokens"`
}

func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req embeddingRequest
	if err := s.readBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	inputs, err := embeddingInputs(&req)
	if err != nil {
		writeError(w, err)
		return
	}
	info, _, err := s.models.lookup(r.Context(), req.Model, true)
	if err != nil {
		writeError(w, err)
		return
	}
	out := embeddingResponse{Object: "list", Model: req.Model, Data: make([]embeddingObject, 0, len(inputs))}
	for i, text := range inputs {
		vec, tokens, err := s.embed(r, info, text, req.Dimensions)
		if err != nil {
			writeError(w, err)
			return
		}
		obj := embeddingObject{Object: "embedding", Index: i, Embedding: vec}
		if req.EncodingFormat == "base64" {
			obj.Embedding = base64Floats(vec)
		}
		out.Data = append(out.Data, obj)
		out.Usage.PromptTokens += tokens
	}
	out.Usage.TotalTokens = out.Usage.PromptTokens
	writeJSON(w, http.StatusOK, out)
}

// embeddingInputs validates the request and returns its input strings.
func embeddingInputs(req *embeddingRequest) ([]string, error) {
	if req.Model == "" {
		return nil, badRequest("model", "'model' is required")
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		return nil, badRequest("encoding_format", "encoding_format must be float or base64, got %q", req.EncodingFormat)
	}
	if req.Dimensions != nil && *req.Dimensions < 1 {
		return nil, badRequest("dimensions", "dimensions must be at least 1, got %d", *req.Dimensions)
	}
	var one string
	if json.Unmarshal(req.Input, &one) == nil {
		if one == "" {
			return nil, badRequest("input", "input must be non-empty")
		}
		return []string{one}, nil
	}
	var list []string
	if json.Unmarshal(req.Input, &list) != nil || len(list) == 0 {
		return nil, badRequest("input", "input must be a non-empty string or array of strings")
	}
	for i, s := range list {
		if s == "" {
			return nil, badRequest("input", "input[%d] must be non-empty", i)
		}
	}
	return list, nil
}

// embed runs one input through the model.
func (s *Server) embed(r *http.Request, info *modelInfo, text string, dims *int) ([]float64, int64, error) {
	type pooling struct {
		Dimensions []int `json:"dimensions,omitempty"`
	}
	body := struct {
		Input   string  `json:"input"`
		Pooling pooling `json:"pooling_params"`
	}{Input: text}
	if dims != nil {
		body.Pooling.Dimensions = []int{*dims}
	}
	js, _ := json.Marshal(body)
	req := &backendapi.InferRequest{ModelName: info.name}
	b := tensorBuilder{info: info, req: req}
	b.add("embedding_request", string(js))
	b.add("return_num_input_tokens", true)
	b.add("return_num_output_tokens", true)
	if b.err != nil {
		return nil, 0, b.err
	}
	submit, end := s.trace(r, info.name)
	defer end()
	submit(req)
	var vec []float64
	var tokens int64
	var got bool
	var respErr error
	err := s.backend.InferStream(r.Context(), req, func(resp *backendapi.InferResponse, err error, final bool) {
		if err != nil {
			respErr = err
			return
		}
		if resp == nil || got {
			return
		}
		text, ok := outputText(resp, "text_output")
		if !ok {
			return
		}
		got = true
		if json.Unmarshal([]byte(text), &vec) != nil {
			respErr = backendapi.Errorf(backendapi.Internal, "model '%s' answered an embedding that is not a JSON array of numbers", info.name)
		}
		tokens, _ = outputCount(resp, "num_input_tokens")
	})
	switch {
	case err != nil:
		return nil, 0, err
	case respErr != nil:
		return nil, 0, respErr
	case !got:
		return nil, 0, backendapi.Errorf(backendapi.Internal, "model '%s' answered no text_output", info.name)
	}
	return vec, tokens, nil
}

// base64Floats is OpenAI's base64 encoding: little-endian float32s.
func base64Floats(v []float64) string {
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(f)))
	}
	return base64.StdEncoding.EncodeToString(b)
}
