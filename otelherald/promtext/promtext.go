// Package promtext writes the OpenTelemetry SDK's collected metrics in
// the Prometheus text exposition format, version 0.0.4 — what a
// Prometheus server scrapes — without the Prometheus client library.
//
//	reader := sdkmetric.NewManualReader()
//	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
//	http.Handle("/metrics", promtext.Handler(reader))
//
// Names follow OpenTelemetry's rules for Prometheus
// (https://opentelemetry.io/docs/specs/otel/compatibility/prometheus_and_openmetrics/):
// every character outside [a-zA-Z0-9_:] becomes '_' (runs of '_' made one),
// the unit is appended as a suffix unless the name already ends with it
// ("s" → _seconds, "ms" → _milliseconds, "By" → _bytes, "1" → _ratio for a
// gauge; annotations in braces such as {event} are dropped), and a
// monotonic counter gets _total. Attribute keys become label names by the
// same character rule. So herald.delivery.delay (unit s) is
// herald_delivery_delay_seconds, messaging.client.sent.messages (a counter
// of {message}) is messaging_client_sent_messages_total, and its
// messaging.destination.name attribute the label
// messaging_destination_name.
//
// Counters are counters; up-down counters and gauges are gauges;
// explicit-bucket histograms are histograms: cumulative
// name_bucket{le="…"} series ending at le="+Inf", then name_sum and
// name_count. Delta temporality is written as it is (the SDK's default
// is cumulative, which Prometheus expects). Exponential histograms and
// summaries are skipped — Prometheus's text format has no exponential
// histogram — and so are the resource's attributes (no target_info).
// Instruments of several scopes that map to the same name are one family.
package promtext

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// ContentType is the format's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Handler serves reader's metrics, collected at each request, as text.
func Handler(reader *sdkmetric.ManualReader) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(r.Context(), &rm); err != nil {
			http.Error(w, "collecting metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", ContentType)
		_ = Write(w, &rm)
	})
}

type sample struct {
	suffix string // "", "_bucket", "_sum", "_count"
	labels string // {…} or ""
	value  string
}

type family struct {
	name, typ, help string
	samples         []sample
}

// Write writes rm in the text format: for each metric family, in name
// order, its # HELP and # TYPE lines and its samples.
func Write(w io.Writer, rm *metricdata.ResourceMetrics) error {
	fams := map[string]*family{}
	get := func(m metricdata.Metrics, typ string) *family {
		name := Name(m.Name, m.Unit, typ)
		f := fams[name]
		if f == nil {
			f = &family{name: name, typ: typ, help: m.Description}
			fams[name] = f
		}
		return f
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				f := get(m, sumType(d.IsMonotonic))
				for _, p := range d.DataPoints {
					f.add("", labels(p.Attributes, ""), strconv.FormatInt(p.Value, 10))
				}
			case metricdata.Sum[float64]:
				f := get(m, sumType(d.IsMonotonic))
				for _, p := range d.DataPoints {
					f.add("", labels(p.Attributes, ""), float(p.Value))
				}
			case metricdata.Gauge[int64]:
				f := get(m, "gauge")
				for _, p := range d.DataPoints {
					f.add("", labels(p.Attributes, ""), strconv.FormatInt(p.Value, 10))
				}
			case metricdata.Gauge[float64]:
				f := get(m, "gauge")
				for _, p := range d.DataPoints {
					f.add("", labels(p.Attributes, ""), float(p.Value))
				}
			case metricdata.Histogram[int64]:
				f := get(m, "histogram")
				for _, p := range d.DataPoints {
					f.histogram(p.Attributes, p.Bounds, p.BucketCounts, float64(p.Sum), p.Count)
				}
			case metricdata.Histogram[float64]:
				f := get(m, "histogram")
				for _, p := range d.DataPoints {
					f.histogram(p.Attributes, p.Bounds, p.BucketCounts, p.Sum, p.Count)
				}
			}
		}
	}
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	slices.Sort(names)
	bw := bufio.NewWriter(w)
	for _, n := range names {
		f := fams[n]
		if f.help != "" {
			fmt.Fprintf(bw, "# HELP %s %s\n", f.name, escapeHelp(f.help))
		}
		fmt.Fprintf(bw, "# TYPE %s %s\n", f.name, f.typ)
		for _, s := range f.samples {
			fmt.Fprintf(bw, "%s%s%s %s\n", f.name, s.suffix, s.labels, s.value)
		}
	}
	return bw.Flush()
}

func (f *family) add(suffix, labels, value string) {
	f.samples = append(f.samples, sample{suffix: suffix, labels: labels, value: value})
}

// histogram adds one point: OTel's bucket counts are per bucket, the
// format's are cumulative (each le counts every observation ≤ it).
func (f *family) histogram(attrs attribute.Set, bounds []float64, counts []uint64, sum float64, count uint64) {
	var cum uint64
	for i, b := range bounds {
		if i < len(counts) {
			cum += counts[i]
		}
		f.add("_bucket", labels(attrs, float(b)), strconv.FormatUint(cum, 10))
	}
	f.add("_bucket", labels(attrs, "+Inf"), strconv.FormatUint(count, 10))
	f.add("_sum", labels(attrs, ""), float(sum))
	f.add("_count", labels(attrs, ""), strconv.FormatUint(count, 10))
}

func sumType(monotonic bool) string {
	if monotonic {
		return "counter"
	}
	return "gauge"
}

// float writes a value as the format reads it: Go's shortest 'g' form,
// +Inf, -Inf or NaN.
func float(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// labels renders attrs (and le, when not "") as {k="v",…}, keys sorted
// after sanitising; keys that sanitise to the same name have their
// values joined with ';', as OTel's rules say.
func labels(attrs attribute.Set, le string) string {
	if attrs.Len() == 0 && le == "" {
		return ""
	}
	vals := map[string]string{}
	var keys []string
	for _, kv := range attrs.ToSlice() {
		k := LabelName(string(kv.Key))
		if old, ok := vals[k]; ok {
			vals[k] = old + ";" + kv.Value.String()
			continue
		}
		vals[k] = kv.Value.String()
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + `="` + escapeValue(vals[k]) + `"`)
	}
	if le != "" {
		if len(keys) > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`le="` + le + `"`)
	}
	b.WriteByte('}')
	return b.String()
}

var valueEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeValue(s string) string { return valueEscaper.Replace(s) }

var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

func escapeHelp(s string) string { return helpEscaper.Replace(s) }

// sanitize replaces every character outside [a-zA-Z0-9_] (and ':' when
// colon) with '_', makes runs of '_' one, and prefixes '_' to a leading
// digit.
func sanitize(s string, colon bool) string {
	var b strings.Builder
	last := rune(0)
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || colon && r == ':'
		if !ok {
			r = '_'
		}
		if r == '_' && last == '_' {
			continue
		}
		b.WriteRune(r)
		last = r
	}
	out := b.String()
	if out == "" {
		return "_"
	}
	if out[0] >= '0' && out[0] <= '9' {
		out = "_" + out
	}
	return out
}

// LabelName is the label name of an attribute key.
func LabelName(key string) string { return sanitize(key, false) }

// units maps the UCUM units OpenTelemetry uses to Prometheus's words.
var units = map[string]string{
	"d": "days", "h": "hours", "min": "minutes", "s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds",
	"By": "bytes", "KiBy": "kibibytes", "MiBy": "mebibytes", "GiBy": "gibibytes", "TiBy": "tibibytes",
	"KBy": "kilobytes", "MBy": "megabytes", "GBy": "gigabytes", "TBy": "terabytes",
	"m": "meters", "V": "volts", "A": "amperes", "J": "joules", "W": "watts", "g": "grams",
	"Cel": "celsius", "Hz": "hertz", "%": "percent",
}

// perUnits are the words of the units after a '/' ("m" is a minute there).
var perUnits = map[string]string{"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month", "y": "year"}

// unitSuffix is the name suffix of an OTel unit: "" for none, "1" unless
// a gauge, and annotations ({event}).
func unitSuffix(unit, typ string) string {
	unit = strings.TrimSpace(unit)
	// Drop annotations: {event}, or the {…} part of "By{packet}".
	for {
		i := strings.IndexByte(unit, '{')
		if i < 0 {
			break
		}
		j := strings.IndexByte(unit[i:], '}')
		if j < 0 {
			break
		}
		unit = unit[:i] + unit[i+j+1:]
	}
	if unit == "" {
		return ""
	}
	if unit == "1" {
		if typ == "gauge" {
			return "ratio"
		}
		return ""
	}
	per := ""
	if a, b, ok := strings.Cut(unit, "/"); ok {
		unit = a
		pb, found := perUnits[b]
		if !found {
			pb = b
		}
		per = "per_" + pb
	}
	w, ok := units[unit]
	if !ok {
		w = unit
	}
	if per != "" {
		if w == "" {
			return per
		}
		return w + "_" + per
	}
	return w
}

// Name is the Prometheus name of an instrument: its name sanitised, the
// unit's word appended unless the name already ends with it, and _total
// for a counter.
func Name(name, unit, typ string) string {
	n := sanitize(name, true)
	if s := unitSuffix(unit, typ); s != "" {
		s = sanitize(s, false)
		if !strings.HasSuffix(n, "_"+s) && n != s {
			n += "_" + s
		}
	}
	if typ == "counter" && !strings.HasSuffix(n, "_total") {
		n += "_total"
	}
	return n
}
