package server

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stubvisor/stubvisor/backendapi"
	"github.com/stubvisor/stubvisor/ipc/ipctest"
)

// TestExactDecimalMatchesStrconv compares the fast path with strconv on
// decimals at the edges of its range and on random ones of every length.
func TestExactDecimalMatchesStrconv(t *testing.T) {
	cases := []string{"0", "-0", "0.0", "-0.0", "0.5", "-0.5", "1.5", "15.5", "0.1", "0.2", "0.3",
		"3.14159", "16777215", "16777216", "16777217", "1677721.5", "0.0000000001", "0.00000000001",
		"9007199254740991", "9007199254740993", "1234567890.123456", "12345678901234567",
		"0.1234567890123456789", "1e5", "1.5E-3", "00.5"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		intDigits, fracDigits := rng.IntN(9), rng.IntN(12)
		s := strconv.FormatUint(rng.Uint64N(uint64(math.Pow10(intDigits))+1), 10)
		if fracDigits > 0 {
			f := strconv.FormatUint(rng.Uint64N(uint64(math.Pow10(fracDigits))), 10)
			for len(f) < fracDigits {
				f = "0" + f
			}
			s += "." + f
		}
		if rng.IntN(2) == 0 {
			s = "-" + s
		}
		cases = append(cases, s)
	}
	for _, s := range cases {
		for _, bits := range []int{32, 64} {
			got, ok := exactDecimal([]byte(s), bits)
			if !ok {
				continue
			}
			want, err := strconv.ParseFloat(s, bits)
			if err != nil || math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("exactDecimal(%q, %d) = %v, strconv %v (%v)", s, bits, got, want, err)
			}
		}
	}
	for _, s := range []string{"0.5", "-12.25", "16777215"} {
		if _, ok := exactDecimal([]byte(s), 32); !ok {
			t.Errorf("exactDecimal(%q, 32) fell back", s)
		}
	}
}

// TestAppendSmallIntMatchesStrconv compares the integer fast path with
// strconv's shortest 'g' form.
func TestAppendSmallIntMatchesStrconv(t *testing.T) {
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 9, 10, 99, 100, 999999, -999999, 1e6, -1e6,
		123456, 100000, 0.5, -0.5, 1.5, 1e21, math.MaxInt64, math.SmallestNonzeroFloat64}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		vals = append(vals, float64(rng.IntN(2_000_001)-1_000_000), rng.Float64()*2e6-1e6)
	}
	for _, f := range vals {
		for _, bits := range []int{32, 64} {
			if bits == 32 {
				f = float64(float32(f))
			}
			want := strconv.AppendFloat(nil, f, 'g', -1, bits)
			got, ok := appendSmallInt([]byte("x"), f)
			if ok && string(got) != "x"+string(want) {
				t.Fatalf("appendSmallInt(%v) = %s, strconv %s", f, got[1:], want)
			}
			if got := appendJSONFloat(nil, f, bits); string(got) != string(want) {
				t.Fatalf("appendJSONFloat(%v, %d) = %s, want %s", f, bits, got, want)
			}
		}
	}
}

// BenchmarkEncodeIntegralJSON writes add_sub's reply: FP32 outputs that
// hold whole numbers and zeros.
func BenchmarkEncodeIntegralJSON(b *testing.B) {
	c := getCall()
	defer putCall(c)
	sum, diff := make([]float32, 16), make([]float32, 16)
	for i := range sum {
		sum[i] = float32(2*i + 1)
	}
	resp := &backendapi.InferResponse{ModelName: "add_sub", ModelVersion: 1, Outputs: []backendapi.OutputTensor{
		{Name: "OUTPUT0", DataType: backendapi.TypeFP32, Shape: []int64{16}, Data: ipctest.FP32(sum...)},
		{Name: "OUTPUT1", DataType: backendapi.TypeFP32, Shape: []int64{16}, Data: ipctest.FP32(diff...)}}}
	b.ReportAllocs()
	var out []byte
	for b.Loop() {
		var err error
		if out, _, err = appendInferResponseJSON(out[:0], c, resp); err != nil {
			b.Fatal(err)
		}
	}
}
