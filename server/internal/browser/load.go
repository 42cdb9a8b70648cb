package browser

// SessionLoad reports the sessions open on this browser (lost ones and ones still being opened
// are not counted) and MaxSessions, so that the use-cases can refuse a session the browser would
// refuse before they record its command (app.SessionLoad).
func (b *Browser) SessionLoad() (open, limit int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.sessions {
		if !s.isLost() {
			open++
		}
	}
	return open, b.cfg.MaxSessions
}
