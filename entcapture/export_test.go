package entcapture

// WithoutReturning makes captures on d read rows instead of asking the
// wrapper for RETURNING (the path of a client without the wrapper), for
// comparing the two.
func WithoutReturning(d *CaptureDriver) { withoutReturning.Store(d, struct{}{}) }
