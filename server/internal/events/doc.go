// Package events is the event-delivery adapter: it writes every command's events to the
// transactional outbox (`outbox_event`) with the watermill-sql publisher on the command's own
// transaction (Outbox, called by the store just before commit), and relays committed outbox
// messages to this node's app.Broker with a watermill Router over a watermill-sql subscriber
// (Relay). Schema and Offsets adapt watermill-sql to the outbox table and its feed order
// (migrations/0002_event_delivery.sql); the Relay is woken on commit instead of waiting for a poll.
//
// It implements ports of app and must not import a transport, generated wire types, the
// composition root, or pgx (the daemon hands it a watermill-sql Beginner built on the pool).
package events
