package custommetrics

import (
	"reflect"
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
)

// wireFamily builds a CollectMetrics family as the codec decodes it.
func wireFamily(name string, kind int64, metrics ...[]any) []any {
	ms := make([]any, len(metrics))
	for i, m := range metrics {
		ms[i] = m
	}
	return []any{name, "help of " + name, kind, ms}
}

func TestCustomMetricsMerge(t *testing.T) {
	labels := func(v string) map[string]any { return map[string]any{"route": v} }
	stubA := []any{
		wireFamily("hits", 0, []any{labels("a"), 2.0, nil, nil, 0.0, int64(0)}, []any{labels("b"), int64(1), nil, nil, 0.0, int64(0)}),
		wireFamily("lat", 2, []any{map[string]any{}, 0.0, []any{0.5, 1.0}, []any{int64(1), int64(2), int64(3)}, 2.5, int64(3)}),
	}
	stubB := []any{
		wireFamily("hits", 0, []any{labels("a"), 3.0, nil, nil, 0.0, int64(0)}),
		wireFamily("lat", 2, []any{map[string]any{}, 0.0, []any{0.5, 1.0}, []any{uint64(0), uint64(1), uint64(1)}, 0.75, uint64(1)}),
		wireFamily("temp", 1, []any{map[string]any{}, 21.5, nil, nil, 0.0, int64(0)}),
	}
	m := NewMerger()
	for _, wire := range [][]any{stubA, stubB} {
		fams, err := Parse(wire)
		if err != nil {
			t.Fatal(err)
		}
		m.Add(fams)
	}
	want := []backendapi.MetricFamily{
		{Name: "hits", Description: "help of hits", Kind: backendapi.MetricCounter, Metrics: []backendapi.Metric{
			{Labels: map[string]string{"route": "a"}, Value: 5},
			{Labels: map[string]string{"route": "b"}, Value: 1},
		}},
		{Name: "lat", Description: "help of lat", Kind: backendapi.MetricHistogram, Metrics: []backendapi.Metric{
			{Labels: map[string]string{}, Buckets: []float64{0.5, 1}, Counts: []uint64{1, 3}, Sum: 3.25, Count: 4},
		}},
		{Name: "temp", Description: "help of temp", Kind: backendapi.MetricGauge, Metrics: []backendapi.Metric{
			{Labels: map[string]string{}, Value: 21.5},
		}},
	}
	if got := m.Families(); !reflect.DeepEqual(got, want) {
		t.Fatalf("merged:\n%+v\nwant:\n%+v", got, want)
	}
}

func TestCustomMetricsMalformed(t *testing.T) {
	tests := []struct {
		name string
		wire any
	}{
		{"not a list", map[string]any{}},
		{"short family", []any{[]any{"x", "help"}}},
		{"unknown kind", []any{wireFamily("x", 7)}},
		{"labels not a map", []any{wireFamily("x", 0, []any{"a=b", 1.0, nil, nil, 0.0, int64(0)})}},
		{"histogram without counts", []any{wireFamily("x", 2, []any{map[string]any{}, 0.0, []any{1.0}, nil, 0.0, int64(0)})}},
		{"buckets out of order", []any{wireFamily("x", 2, []any{map[string]any{}, 0.0, []any{2.0, 1.0}, []any{int64(0), int64(0), int64(0)}, 0.0, int64(0)})}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if fams, err := Parse(tc.wire); err == nil {
				t.Fatalf("parsed %+v", fams)
			}
		})
	}
}
