// Package custommetrics merges the metric families a model defines with
// pb_utils.MetricFamily, as each of its stubs reports them when /metrics is
// scraped: it decodes a stub's CollectMetrics answer and adds up the series
// that share a family and label set across the model's instances, as Triton
// does with one registry for all of them.
package custommetrics

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/stubvisor/stubvisor/backendapi"
)

// Merger adds up the series of several stubs.
type Merger struct {
	fams   map[string]*backendapi.MetricFamily
	series map[string]int // family name + labels -> index in its Metrics
}

// NewMerger returns an empty Merger.
func NewMerger() *Merger {
	return &Merger{fams: map[string]*backendapi.MetricFamily{}, series: map[string]int{}}
}

// Add merges one stub's families.
func (m *Merger) Add(fams []backendapi.MetricFamily) {
	for _, f := range fams {
		fam := m.fams[f.Name]
		if fam == nil {
			fam = &backendapi.MetricFamily{Name: f.Name, Description: f.Description, Kind: f.Kind}
			m.fams[f.Name] = fam
		} else if fam.Kind != f.Kind {
			continue // two models disagree about the family; the first wins
		}
		for _, x := range f.Metrics {
			key := f.Name + "\x00" + labelKey(x.Labels)
			i, ok := m.series[key]
			if !ok {
				m.series[key] = len(fam.Metrics)
				fam.Metrics = append(fam.Metrics, x)
				continue
			}
			have := &fam.Metrics[i]
			if !slices.Equal(have.Buckets, x.Buckets) {
				continue // histograms with other bounds cannot be added
			}
			have.Value += x.Value
			have.Sum += x.Sum
			have.Count += x.Count
			for i := range have.Counts {
				have.Counts[i] += x.Counts[i]
			}
		}
	}
}

// families returns the merged families sorted by name.
// Families returns the merged families.
func (m *Merger) Families() []backendapi.MetricFamily {
	out := make([]backendapi.MetricFamily, 0, len(m.fams))
	for _, name := range slices.Sorted(maps.Keys(m.fams)) {
		out = append(out, *m.fams[name])
	}
	return out
}

func labelKey(labels map[string]string) string {
	keys := slices.Sorted(maps.Keys(labels))
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
		b.WriteByte(0)
	}
	return b.String()
}

// Parse reads a CollectMetrics reply (ipc/messages.go).
func Parse(v any) ([]backendapi.MetricFamily, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("metric families: %T, want a list", v)
	}
	out := make([]backendapi.MetricFamily, 0, len(list))
	for _, f := range list {
		fl, ok := f.([]any)
		if !ok || len(fl) < 4 {
			return nil, fmt.Errorf("metric family: %v", f)
		}
		name, _ := fl[0].(string)
		desc, _ := fl[1].(string)
		kind, kok := number(fl[2])
		metrics, mok := fl[3].([]any)
		if name == "" || !kok || !mok || kind < 0 || kind > float64(backendapi.MetricHistogram) {
			return nil, fmt.Errorf("metric family: %v", f)
		}
		fam := backendapi.MetricFamily{Name: name, Description: desc, Kind: backendapi.MetricKind(kind)}
		for _, x := range metrics {
			m, err := parseMetric(x, fam.Kind)
			if err != nil {
				return nil, fmt.Errorf("metric family %s: %w", name, err)
			}
			fam.Metrics = append(fam.Metrics, m)
		}
		out = append(out, fam)
	}
	return out, nil
}

func parseMetric(v any, kind backendapi.MetricKind) (backendapi.Metric, error) {
	var m backendapi.Metric
	l, ok := v.([]any)
	if !ok || len(l) < 6 {
		return m, fmt.Errorf("metric: %v", v)
	}
	labels, ok := l[0].(map[string]any)
	if !ok {
		return m, fmt.Errorf("metric labels: %v", l[0])
	}
	m.Labels = make(map[string]string, len(labels))
	for k, lv := range labels {
		m.Labels[k] = fmt.Sprint(lv)
	}
	m.Value, _ = number(l[1])
	m.Sum, _ = number(l[4])
	count, _ := number(l[5])
	m.Count = uint64(count)
	if kind != backendapi.MetricHistogram {
		return m, nil
	}
	bounds, bok := l[2].([]any)
	counts, cok := l[3].([]any)
	if !bok || !cok || len(counts) != len(bounds)+1 {
		return m, fmt.Errorf("histogram buckets %v with counts %v", l[2], l[3])
	}
	for _, b := range bounds {
		f, _ := number(b)
		m.Buckets = append(m.Buckets, f)
	}
	for _, c := range counts[:len(bounds)] { // the last is +Inf: Count
		f, _ := number(c)
		m.Counts = append(m.Counts, uint64(f))
	}
	if !sort.Float64sAreSorted(m.Buckets) {
		return m, fmt.Errorf("histogram buckets %v out of order", m.Buckets)
	}
	return m, nil
}

// number reads a msgpack number of any width.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case uint64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}
