package relay

import (
	"encoding/json"
	"maps"
	"testing"
)

var headerCases = []string{
	`{}`, ` { } `, `{"a":"b"}`, `{"traceparent": "00-4bf9-01", "author": "ann"}`,
	"{\n\t\"a\" : \"b\" ,\r\n \"c\":\"\"}", `{"a":"b","a":"c"}`, `{"ü":"ß€𝄞"}`,
	`{"a":"b\"c"}`, `{"a":"\u00e9"}`, `{"a":"x\\y"}`, "{\"a\":\"\xff\"}", `{"a":1}`, `{"a":null}`,
	`{"a":"b",}`, `{"a":"b"} x`, `{"a" "b"}`, `["a"]`, `{"a":"b"`, `{`, ``, `null`, `{"a":{"b":"c"}}`,
	"{\"a\":\"b\x01\"}",
}

func checkHeaders(t *testing.T, in string) {
	t.Helper()
	var want map[string]string
	werr := json.Unmarshal([]byte(in), &want)
	got, gerr := decodeHeaders([]byte(in))
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q: decodeHeaders error %v, json.Unmarshal error %v", in, gerr, werr)
	}
	if werr == nil && !maps.Equal(got, want) {
		t.Fatalf("%q: decodeHeaders = %v, json.Unmarshal = %v", in, got, want)
	}
}

func TestDecodeHeadersAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, in := range headerCases {
		checkHeaders(t, in)
	}
}

func FuzzDecodeHeaders(f *testing.F) {
	for _, in := range headerCases {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in string) { checkHeaders(t, in) })
}
