// Package promparse reads the Prometheus text exposition format 0.0.4
// strictly, for tests: every line must be a # HELP, # TYPE, another
// comment, a blank line or a sample of a family whose # TYPE came first;
// names, label names, escapes and values must be valid; a series appears
// once; a histogram's buckets are cumulative, end at le="+Inf" and agree
// with its _count. The first violation is an error naming the line.
package promparse

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Sample is one line of data.
type Sample struct {
	Name   string // with its suffix: x_bucket, x_sum, x_count
	Labels map[string]string
	Value  float64
}

// Family is a metric family: its # TYPE, # HELP and samples.
type Family struct {
	Name, Type, Help string
	Samples          []Sample
}

var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	types      = map[string]bool{"counter": true, "gauge": true, "histogram": true, "summary": true, "untyped": true}
)

// Parse reads text into families, by name.
func Parse(text string) (map[string]*Family, error) {
	fams := map[string]*Family{}
	seen := map[string]bool{}
	if text != "" && !strings.HasSuffix(text, "\n") {
		return nil, fmt.Errorf("the text does not end with a newline")
	}
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		n := i + 1
		switch {
		case strings.TrimSpace(line) == "":
			continue
		case strings.HasPrefix(line, "#"):
			f := strings.Fields(line)
			if len(f) >= 2 && (f[1] == "HELP" || f[1] == "TYPE") {
				if len(f) < 3 || !metricName.MatchString(f[2]) {
					return nil, fmt.Errorf("line %d: %s without a valid metric name: %q", n, f[1], line)
				}
				fam := fams[f[2]]
				if fam == nil {
					fam = &Family{Name: f[2]}
					fams[f[2]] = fam
				}
				if f[1] == "TYPE" {
					if len(f) != 4 || !types[f[3]] {
						return nil, fmt.Errorf("line %d: bad TYPE: %q", n, line)
					}
					if fam.Type != "" {
						return nil, fmt.Errorf("line %d: a second TYPE for %s", n, f[2])
					}
					if len(fam.Samples) > 0 {
						return nil, fmt.Errorf("line %d: TYPE for %s after its samples", n, f[2])
					}
					fam.Type = f[3]
				} else {
					if fam.Help != "" {
						return nil, fmt.Errorf("line %d: a second HELP for %s", n, f[2])
					}
					_, help, _ := strings.Cut(line, f[2])
					fam.Help = strings.TrimPrefix(help, " ")
				}
			}
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w: %q", n, err, line)
		}
		fam := familyOf(fams, s.Name)
		if fam == nil || fam.Type == "" {
			return nil, fmt.Errorf("line %d: sample %s before a TYPE line for its family", n, s.Name)
		}
		if fam.Type == "histogram" {
			switch s.Name {
			case fam.Name + "_bucket":
				if _, ok := s.Labels["le"]; !ok {
					return nil, fmt.Errorf("line %d: a histogram bucket without le", n)
				}
			case fam.Name + "_sum", fam.Name + "_count":
			default:
				return nil, fmt.Errorf("line %d: %s in histogram %s", n, s.Name, fam.Name)
			}
		} else if s.Name != fam.Name {
			return nil, fmt.Errorf("line %d: %s in %s %s", n, s.Name, fam.Type, fam.Name)
		}
		if fam.Type == "counter" && (s.Value < 0 || math.IsNaN(s.Value)) {
			return nil, fmt.Errorf("line %d: a counter at %v", n, s.Value)
		}
		key := s.Name + seriesKey(s.Labels)
		if seen[key] {
			return nil, fmt.Errorf("line %d: the series %s again", n, key)
		}
		seen[key] = true
		fam.Samples = append(fam.Samples, s)
	}
	for _, f := range fams {
		if f.Type == "" {
			return nil, fmt.Errorf("%s has a HELP and no TYPE", f.Name)
		}
		if f.Type == "histogram" {
			if err := checkHistogram(f); err != nil {
				return nil, err
			}
		}
	}
	return fams, nil
}

// familyOf finds the family a sample name belongs to.
func familyOf(fams map[string]*Family, name string) *Family {
	if f := fams[name]; f != nil {
		return f
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if f := fams[base]; f != nil && f.Type == "histogram" {
				return f
			}
		}
	}
	return nil
}

func seriesKey(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString("," + k + "=" + strconv.Quote(l[k]))
	}
	return "{" + b.String() + "}"
}

func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("no value")
	}
	s.Name = line[:i]
	if !metricName.MatchString(s.Name) {
		return s, fmt.Errorf("bad metric name %q", s.Name)
	}
	rest := line[i:]
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		for {
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq < 0 {
				return s, fmt.Errorf("a label without '='")
			}
			name := rest[:eq]
			if !labelName.MatchString(name) {
				return s, fmt.Errorf("bad label name %q", name)
			}
			if _, dup := s.Labels[name]; dup {
				return s, fmt.Errorf("label %s twice", name)
			}
			rest = rest[eq+1:]
			if !strings.HasPrefix(rest, `"`) {
				return s, fmt.Errorf("label %s's value is not quoted", name)
			}
			var val strings.Builder
			j := 1
			for ; j < len(rest); j++ {
				c := rest[j]
				if c == '"' {
					break
				}
				if c == '\n' {
					return s, fmt.Errorf("a raw newline in label %s", name)
				}
				if c == '\\' {
					j++
					if j >= len(rest) {
						return s, fmt.Errorf("an escape at the end of label %s", name)
					}
					switch rest[j] {
					case '\\':
						val.WriteByte('\\')
					case '"':
						val.WriteByte('"')
					case 'n':
						val.WriteByte('\n')
					default:
						return s, fmt.Errorf(`bad escape \%c in label %s`, rest[j], name)
					}
					continue
				}
				val.WriteByte(c)
			}
			if j >= len(rest) {
				return s, fmt.Errorf("label %s's value is not closed", name)
			}
			s.Labels[name] = val.String()
			rest = rest[j+1:]
			if strings.HasPrefix(rest, ",") {
				rest = rest[1:]
			} else if !strings.HasPrefix(rest, "}") {
				return s, fmt.Errorf("want ',' or '}' after label %s", name)
			}
		}
	}
	if !strings.HasPrefix(rest, " ") {
		return s, fmt.Errorf("no space before the value")
	}
	f := strings.Fields(rest)
	if len(f) < 1 || len(f) > 2 {
		return s, fmt.Errorf("want a value and an optional timestamp")
	}
	v, err := parseValue(f[0])
	if err != nil {
		return s, err
	}
	s.Value = v
	if len(f) == 2 {
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			return s, fmt.Errorf("bad timestamp %q", f[1])
		}
	}
	return s, nil
}

func parseValue(v string) (float64, error) {
	switch v {
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	if strings.ContainsAny(v, "_xXpP") || strings.EqualFold(v, "inf") || strings.EqualFold(v, "infinity") {
		return 0, fmt.Errorf("bad value %q", v)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("bad value %q", v)
	}
	return f, nil
}

// checkHistogram: per series, buckets in increasing le, counts not
// decreasing, the last le="+Inf", equal to _count; a _sum and a _count.
func checkHistogram(f *Family) error {
	type series struct {
		les        []float64
		counts     []float64
		sum, count bool
		countV     float64
	}
	all := map[string]*series{}
	get := func(l map[string]string) *series {
		c := map[string]string{}
		for k, v := range l {
			if k != "le" {
				c[k] = v
			}
		}
		k := seriesKey(c)
		if all[k] == nil {
			all[k] = &series{}
		}
		return all[k]
	}
	for _, s := range f.Samples {
		se := get(s.Labels)
		switch s.Name {
		case f.Name + "_bucket":
			le, err := parseValue(s.Labels["le"])
			if err != nil || math.IsNaN(le) {
				return fmt.Errorf("%s: bad le %q", f.Name, s.Labels["le"])
			}
			if n := len(se.les); n > 0 && (le <= se.les[n-1] || s.Value < se.counts[n-1]) {
				return fmt.Errorf("%s%s: buckets not cumulative in increasing le at le=%q", f.Name, seriesKey(s.Labels), s.Labels["le"])
			}
			se.les, se.counts = append(se.les, le), append(se.counts, s.Value)
		case f.Name + "_sum":
			se.sum = true
		case f.Name + "_count":
			se.count, se.countV = true, s.Value
		}
	}
	for k, se := range all {
		n := len(se.les)
		switch {
		case n == 0 || !math.IsInf(se.les[n-1], 1):
			return fmt.Errorf("%s%s: no le=\"+Inf\" bucket last", f.Name, k)
		case !se.sum || !se.count:
			return fmt.Errorf("%s%s: no _sum or _count", f.Name, k)
		case se.counts[n-1] != se.countV:
			return fmt.Errorf("%s%s: +Inf bucket %v but _count %v", f.Name, k, se.counts[n-1], se.countV)
		}
	}
	return nil
}

// Names are every sample name of fams (x_bucket, x_sum, x_count for a
// histogram x; not x itself), sorted.
func Names(fams map[string]*Family) []string {
	set := map[string]bool{}
	for _, f := range fams {
		for _, s := range f.Samples {
			set[s.Name] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
