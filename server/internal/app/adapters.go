package app

import (
	"context"
	"fmt"
)

// RecordAdapters records, at start, the protocol adapters this node serves with their versions
// (protocol_adapter, node_protocol_adapter): GET /bap/v1 reads them back (ProtocolAdapters).
func (s *Service) RecordAdapters(ctx context.Context, adapters []ProtocolAdapter) error {
	for _, a := range adapters {
		if a.ID == "" || a.ProtocolVersion == "" {
			return fmt.Errorf("app: protocol adapter %q without an id or a version", a.Name)
		}
	}
	return s.store.RecordAdapters(ctx, s.cfg.NodeID, adapters)
}

// ProtocolAdapters lists the protocol adapters this node recorded at start, by id.
func (s *Service) ProtocolAdapters(ctx context.Context) ([]ProtocolAdapter, error) {
	return s.store.NodeAdapters(ctx, s.cfg.NodeID)
}
