package events

import "github.com/ThreeDotsLabs/watermill/message"

// Handle runs the relay's handler on one message read by another subscriber (the tests of the
// read from the history when a tenant subscribed after the read began).
func (r *Relay) Handle(m *message.Message) error { return r.handle(m) }
