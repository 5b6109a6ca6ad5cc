package amqpfanout

// Up reports whether the shared consumer is up.
func (w *Wakeup) Up() bool { return w.hub.Up() }
