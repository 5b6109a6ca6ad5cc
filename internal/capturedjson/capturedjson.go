// Package capturedjson holds the payload types of the messages that
// capture code builds for captured changes (internal/capture's
// Spec.Messages). envelope's Writer recognises them: it stores their bytes
// as they are, without encoding them again, and takes the ordering-key
// lock of a RowKeyed message shared. A user's Message cannot hold them
// (the package is internal), so only capture code sets either.
package capturedjson

// JSON is an envelope the capture code built: already valid JSON.
type JSON []byte

// MarshalJSON returns the JSON itself.
func (j JSON) MarshalJSON() ([]byte, error) { return j, nil }

// RowKeyed is JSON of an event whose ordering key is its row's own and
// whose row the write locks (the model's default ordering key, see
// internal/capture's Spec.RowKeyed): writers of different rows need not
// wait on each other, so the Writer takes its key's lock shared — enough
// to order it against an Enqueue of the same key.
type RowKeyed []byte

// MarshalJSON returns the JSON itself.
func (j RowKeyed) MarshalJSON() ([]byte, error) { return j, nil }
