package server

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stubvisor/stubvisor/backendapi"
)

// Metric names: Triton's for inference statistics (so existing dashboards
// work), stubvisor's own for the stubs.
var (
	modelLabels = []string{"model", "version"}
	stubLabels  = []string{"model", "version", "instance"}

	descRequestSuccess = prometheus.NewDesc("nv_inference_request_success",
		"Number of successful inference requests, all batch sizes", modelLabels, nil)
	descRequestFailure = prometheus.NewDesc("nv_inference_request_failure",
		"Number of failed inference requests, all batch sizes", []string{"model", "version", "reason"}, nil)
	descInferenceCount = prometheus.NewDesc("nv_inference_count",
		"Number of inferences performed (does not include cached requests)", modelLabels, nil)
	descExecCount = prometheus.NewDesc("nv_inference_exec_count",
		"Number of model executions performed (does not include cached requests)", modelLabels, nil)
	descRequestDuration = prometheus.NewDesc("nv_inference_request_duration_us",
		"Cumulative inference request duration in microseconds (includes cached requests)", modelLabels, nil)
	descQueueDuration = prometheus.NewDesc("nv_inference_queue_duration_us",
		"Cumulative inference queuing duration in microseconds (includes cached requests)", modelLabels, nil)
	descComputeInput = prometheus.NewDesc("nv_inference_compute_input_duration_us",
		"Cumulative compute input duration in microseconds (does not include cached requests)", modelLabels, nil)
	descComputeInfer = prometheus.NewDesc("nv_inference_compute_infer_duration_us",
		"Cumulative compute inference duration in microseconds (does not include cached requests)", modelLabels, nil)
	descComputeOutput = prometheus.NewDesc("nv_inference_compute_output_duration_us",
		"Cumulative inference compute output duration in microseconds (does not include cached requests)", modelLabels, nil)

	descCacheHits = prometheus.NewDesc("nv_cache_num_hits_per_model",
		"Number of cache hits per model", modelLabels, nil)
	descCacheHitTime = prometheus.NewDesc("nv_cache_hit_duration_per_model",
		"Total cache hit duration per model, in microseconds", modelLabels, nil)
	descCacheMisses = prometheus.NewDesc("nv_cache_num_misses_per_model",
		"Number of cache misses per model", modelLabels, nil)
	descCacheMissTime = prometheus.NewDesc("nv_cache_miss_duration_per_model",
		"Total cache miss (lookup and insertion) duration per model, in microseconds", modelLabels, nil)

	descModelState = prometheus.NewDesc("stubvisor_model_state",
		"1 for the state a model version is in (as the repository index and /v2/stubs show it), 0 for the others", append(modelLabels[:2:2], "state"), nil)
	descStubState = prometheus.NewDesc("stubvisor_stub_state",
		"1 for the state a stub is in, 0 for the others", append(stubLabels[:3:3], "state"), nil)
	descStubRestarts = prometheus.NewDesc("stubvisor_stub_restarts_total",
		"Number of times the supervisor restarted a stub", stubLabels, nil)
	descStubPool = prometheus.NewDesc("stubvisor_stub_pool_bytes",
		"Shared-memory pool of a stub: bytes in use, capacity and high-water mark", append(stubLabels[:3:3], "kind"), nil)
	descStubInFlight = prometheus.NewDesc("stubvisor_stub_in_flight",
		"Requests handed to a stub and not yet answered", stubLabels, nil)
	descStubRing = prometheus.NewDesc("stubvisor_stub_ring_bytes",
		"Bytes queued in a stub's rings, to the stub (in) and from it (out)", append(stubLabels[:3:3], "direction"), nil)
	descStubHeartbeat = prometheus.NewDesc("stubvisor_stub_heartbeat_age_seconds",
		"Time since a stub last proved it is alive", stubLabels, nil)
	descStubUptime = prometheus.NewDesc("stubvisor_stub_uptime_seconds",
		"Time since a stub process started", stubLabels, nil)
	descStubExecutions = prometheus.NewDesc("stubvisor_stub_executions_total",
		"Model executions a stub has run", stubLabels, nil)
	descStubRequests = prometheus.NewDesc("stubvisor_stub_requests",
		"Requests the current stub process has served (its age in requests)", stubLabels, nil)
	descStubRSS = prometheus.NewDesc("stubvisor_stub_resident_memory_bytes",
		"Resident set size of the current stub process", stubLabels, nil)
	descStubCPU = prometheus.NewDesc("stubvisor_stub_cpu_seconds_total",
		"User and system CPU time of the current stub process", stubLabels, nil)
	descStubFDs = prometheus.NewDesc("stubvisor_stub_open_fds",
		"Open file descriptors of the current stub process", stubLabels, nil)
	descStubThreads = prometheus.NewDesc("stubvisor_stub_threads",
		"Threads of the current stub process", stubLabels, nil)
	descStubRecycles = prometheus.NewDesc("stubvisor_stub_recycles_total",
		"Stubs replaced for crossing MAX_RSS_MB, MAX_REQUESTS_PER_STUB or MAX_STUB_AGE_S", stubLabels, nil)
)

var modelStates = []backendapi.ModelState{
	backendapi.ModelUnknown, backendapi.ModelLoading, backendapi.ModelReady,
	backendapi.ModelUnavailable, backendapi.ModelUnloading,
}

var stubStates = []backendapi.StubState{
	backendapi.StubStarting, backendapi.StubReady, backendapi.StubBusy,
	backendapi.StubUnhealthy, backendapi.StubRestarting, backendapi.StubStopped,
}

// metricsCollector is a prometheus.Collector that reads the backend's statistics
// and stub views at scrape time, so the figures are never stale and the
// backend needs no metrics code of its own.
type metricsCollector struct {
	backend backendapi.Backend
	timeout time.Duration
	log     hclog.Logger
}

// newMetricsCollector returns a metricsCollector for backend; each scrape's backend calls
// are bounded by timeout.
func newMetricsCollector(backend backendapi.Backend, timeout time.Duration, log hclog.Logger) *metricsCollector {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &metricsCollector{backend: backend, timeout: timeout, log: log}
}

// Describe implements prometheus.Collector.
func (c *metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descRequestSuccess, descRequestFailure, descInferenceCount, descExecCount,
		descRequestDuration, descQueueDuration, descComputeInput, descComputeInfer, descComputeOutput,
		descCacheHits, descCacheHitTime, descCacheMisses, descCacheMissTime,
		descModelState, descStubState, descStubRestarts, descStubPool, descStubInFlight, descStubRing,
		descStubHeartbeat, descStubUptime, descStubExecutions,
		descStubRequests, descStubRSS, descStubCPU, descStubFDs, descStubThreads, descStubRecycles,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *metricsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if stats, err := c.backend.ModelStatistics(ctx, "", 0); err != nil {
		c.log.Warn("metrics: reading model statistics failed", "error", err)
	} else {
		collectStatistics(ch, stats)
	}
	if stubs, err := c.backend.Stubs(ctx, ""); err != nil {
		c.log.Warn("metrics: reading stubs failed", "error", err)
	} else {
		collectStubs(ch, stubs)
	}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func collectStatistics(ch chan<- prometheus.Metric, stats []backendapi.ModelStatistics) {
	seen := make(map[[2]string]bool, len(stats))
	for i := range stats {
		st := &stats[i]
		key := [2]string{st.Name, st.Version}
		if seen[key] {
			continue // a duplicate series would fail the whole scrape
		}
		seen[key] = true
		counter := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, st.Name, st.Version)
		}
		in := &st.Inference
		counter(descRequestSuccess, float64(in.Success.Count))
		for r, n := range in.FailReasons {
			ch <- prometheus.MustNewConstMetric(descRequestFailure, prometheus.CounterValue, float64(n), st.Name, st.Version, backendapi.FailureReason(r).String())
		}
		counter(descInferenceCount, float64(st.InferenceCount))
		counter(descExecCount, float64(st.ExecutionCount))
		if in.CacheHit.Count+in.CacheMiss.Count > 0 {
			counter(descCacheHits, float64(in.CacheHit.Count))
			counter(descCacheHitTime, micros(in.CacheHit.Total))
			counter(descCacheMisses, float64(in.CacheMiss.Count))
			counter(descCacheMissTime, micros(in.CacheMiss.Total))
		}
		counter(descRequestDuration, micros(in.Success.Total+in.Fail.Total))
		counter(descQueueDuration, micros(in.Queue.Total))
		counter(descComputeInput, micros(in.ComputeInput.Total))
		counter(descComputeInfer, micros(in.ComputeInfer.Total))
		counter(descComputeOutput, micros(in.ComputeOutput.Total))
	}
}

func collectStubs(ch chan<- prometheus.Metric, models []backendapi.ModelStubs) {
	seen := make(map[[3]string]bool)
	for _, m := range models {
		if key := [3]string{m.Model, m.Version}; !seen[key] {
			seen[key] = true
			for _, s := range modelStates {
				v := 0.0
				if m.State == s {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(descModelState, prometheus.GaugeValue, v, m.Model, m.Version, string(s))
			}
		}
		for i := range m.Stubs {
			st := &m.Stubs[i]
			key := [3]string{m.Model, m.Version, st.Instance}
			if seen[key] {
				continue
			}
			seen[key] = true
			l := key[:]
			with := func(extra string) []string { return append(l[:3:3], extra) }
			for _, s := range stubStates {
				v := 0.0
				if st.State == s {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(descStubState, prometheus.GaugeValue, v, with(string(s))...)
			}
			ch <- prometheus.MustNewConstMetric(descStubRestarts, prometheus.CounterValue, float64(st.Restarts), l...)
			ch <- prometheus.MustNewConstMetric(descStubPool, prometheus.GaugeValue, float64(st.PoolInUse), with("in_use")...)
			ch <- prometheus.MustNewConstMetric(descStubPool, prometheus.GaugeValue, float64(st.PoolCapacity), with("capacity")...)
			ch <- prometheus.MustNewConstMetric(descStubPool, prometheus.GaugeValue, float64(st.PoolHighWater), with("high_water")...)
			ch <- prometheus.MustNewConstMetric(descStubInFlight, prometheus.GaugeValue, float64(st.InFlight), l...)
			ch <- prometheus.MustNewConstMetric(descStubRing, prometheus.GaugeValue, float64(st.RingDepthIn), with("in")...)
			ch <- prometheus.MustNewConstMetric(descStubRing, prometheus.GaugeValue, float64(st.RingDepthOut), with("out")...)
			ch <- prometheus.MustNewConstMetric(descStubHeartbeat, prometheus.GaugeValue, st.HeartbeatAge.Seconds(), l...)
			ch <- prometheus.MustNewConstMetric(descStubUptime, prometheus.GaugeValue, st.Uptime.Seconds(), l...)
			ch <- prometheus.MustNewConstMetric(descStubExecutions, prometheus.CounterValue, float64(st.Executions), l...)
			ch <- prometheus.MustNewConstMetric(descStubRequests, prometheus.GaugeValue, float64(st.Requests), l...)
			ch <- prometheus.MustNewConstMetric(descStubRecycles, prometheus.CounterValue, float64(st.Recycles), l...)
			if st.PID > 0 {
				ch <- prometheus.MustNewConstMetric(descStubRSS, prometheus.GaugeValue, float64(st.RSSBytes), l...)
				ch <- prometheus.MustNewConstMetric(descStubCPU, prometheus.CounterValue, st.CPUSeconds, l...)
				ch <- prometheus.MustNewConstMetric(descStubFDs, prometheus.GaugeValue, float64(st.OpenFDs), l...)
				ch <- prometheus.MustNewConstMetric(descStubThreads, prometheus.GaugeValue, float64(st.Threads), l...)
			}
		}
	}
}

// customCollector exports the metric families models define
// (pb_utils.MetricFamily). It describes nothing up front, since models
// create families as they run, which makes it an unchecked collector.
type customCollector struct {
	backend backendapi.Backend
	timeout time.Duration
	log     hclog.Logger
}

func (customCollector) Describe(chan<- *prometheus.Desc) {}

func (c customCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	fams, err := c.backend.CustomMetrics(ctx)
	if err != nil {
		c.log.Warn("metrics: reading custom metrics failed", "error", err)
		return
	}
	for _, f := range fams {
		if strings.HasPrefix(f.Name, "nv_") || strings.HasPrefix(f.Name, "stubvisor_") {
			c.log.Warn("metrics: a model's metric family uses a reserved prefix; not exported", "family", f.Name)
			continue
		}
		for _, m := range f.Metrics {
			names := slices.Sorted(maps.Keys(m.Labels))
			values := make([]string, len(names))
			for i, n := range names {
				values[i] = m.Labels[n]
			}
			desc := prometheus.NewDesc(f.Name, f.Description, names, nil)
			var metric prometheus.Metric
			switch f.Kind {
			case backendapi.MetricCounter:
				metric, err = prometheus.NewConstMetric(desc, prometheus.CounterValue, m.Value, values...)
			case backendapi.MetricGauge:
				metric, err = prometheus.NewConstMetric(desc, prometheus.GaugeValue, m.Value, values...)
			default:
				buckets := make(map[float64]uint64, len(m.Buckets))
				for i, b := range m.Buckets {
					buckets[b] = m.Counts[i]
				}
				metric, err = prometheus.NewConstHistogram(desc, m.Count, m.Sum, buckets, values...)
			}
			if err != nil {
				c.log.Warn("metrics: a model's metric cannot be exported", "family", f.Name, "error", err)
				continue
			}
			ch <- metric
		}
	}
}

// newMetricsHandler serves the collectors, plus the Go runtime and process
// collectors, at /metrics in Prometheus text form.
func newMetricsHandler(backend backendapi.Backend, timeout time.Duration, log hclog.Logger) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		newMetricsCollector(backend, timeout, log),
		customCollector{backend: backend, timeout: timeout, log: log},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			writeErrorStatus(w, http.StatusNotFound, msgNotFound)
			return
		}
		if !allow(w, r, http.MethodGet) {
			return
		}
		h.ServeHTTP(w, r)
	})
}
