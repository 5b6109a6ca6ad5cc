// Package annotation holds the names of the schema annotations that tie
// entcapture's Mixin to entcapturegen's code generation. Only the two
// read them, so they are not part of entcapture's API; entcapturegen's
// templates spell the same names ($.Annotations.HeraldCapture,
// HeraldCascade).
package annotation

// Capture is the name of the annotation entcapture.Mixin adds
// (entcapture.Annotation), which tells the generator that a schema is
// captured.
const Capture = "HeraldCapture"

// Cascade marks, in code generation, a schema that is not captured but
// whose deletes cascade to captured rows: the generator adds it, and its
// templates install entcapturert.CascadeHook on such schemas.
const Cascade = "HeraldCascade"
