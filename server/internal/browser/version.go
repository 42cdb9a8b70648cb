package browser

// Version is what the browser said it is when it (last) started: its product and version (for
// example "Chrome/131.0.6778.85") and the DevTools protocol version. Both are "" while no
// browser process runs.
func (b *Browser) Version() (product, protocol string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc == nil {
		return "", ""
	}
	return b.proc.p.version.Product, b.proc.p.version.ProtocolVersion
}
