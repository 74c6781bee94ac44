package main

import (
	"net/http"
	"strings"
	"testing"
)

// Custom metrics a model defines with pb_utils.MetricFamily appear on the
// metrics port, the series of its two instances added up.
func TestCustomMetrics(t *testing.T) {
	s := startServer(t, copyRepo(t, "custom_metrics"))
	for _, v := range []float32{5, 50, 500} {
		r := postInfer(s.HTTP, "custom_metrics", map[string]any{"inputs": []map[string]any{
			{"name": "IN", "shape": []int{1}, "datatype": "FP32", "data": []float32{v}}}})
		if r.err != nil || r.code != http.StatusOK {
			t.Fatalf("infer %v: %v %d %s", v, r.err, r.code, r.body)
		}
	}
	text, _ := s.scrape()
	for _, line := range []string{
		"# HELP custom_requests_total Requests the model executed",
		"# TYPE custom_requests_total counter",
		`custom_requests_total{model="custom_metrics"} 3`,
		"# TYPE custom_last_in gauge",
		`custom_last_in{model="custom_metrics"} `,
		"# TYPE custom_in histogram",
		`custom_in_bucket{model="custom_metrics",le="1"} 0`,
		`custom_in_bucket{model="custom_metrics",le="10"} 1`,
		`custom_in_bucket{model="custom_metrics",le="100"} 2`,
		`custom_in_bucket{model="custom_metrics",le="+Inf"} 3`,
		`custom_in_sum{model="custom_metrics"} 555`,
		`custom_in_count{model="custom_metrics"} 3`,
	} {
		if !strings.Contains(text, line) {
			t.Errorf("scrape lacks %q", line)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", text)
	}
}
