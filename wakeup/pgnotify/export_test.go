package pgnotify

// Up reports whether the shared listening connection is subscribed.
func (w *Wakeup) Up() bool { return w.hub.Up() }
