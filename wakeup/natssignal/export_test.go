package natssignal

// Up reports whether the shared subscription is up.
func (w *Wakeup) Up() bool { return w.hub.Up() }
