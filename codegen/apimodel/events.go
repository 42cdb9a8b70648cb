package apimodel

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

// EventMessage is one AsyncAPI message: an Event of one `type` with its `data` schema.
type EventMessage struct {
	Type    string // "task.state_changed" (the message name and the payload's `type` const)
	Key     string // components.messages key (taskStateChanged)
	Title   string
	Summary string
	Payload string // payload schema name (TaskStateChangedEvent)
	Data    string // `data` schema name (TaskStateChangedData)
}

// EventMessages reads the messages of a bundled AsyncAPI document, sorted by type.
func LoadEvents(path string) ([]EventMessage, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseEvents(raw)
}

// ParseEvents parses the messages of a bundled AsyncAPI document. Each payload must be an
// allOf of Event and an object fixing `type` (const) and `data` ($ref to a named schema).
func ParseEvents(raw []byte) ([]EventMessage, error) {
	var top map[string]any
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, err
	}
	comps := obj(top["components"])
	schemas := obj(comps["schemas"])
	var out []EventMessage
	seen := map[string]bool{}
	for key, m := range obj(comps["messages"]) {
		msg := obj(m)
		e := EventMessage{
			Type:    str(msg["name"]),
			Key:     key,
			Title:   strings.TrimSpace(str(msg["title"])),
			Summary: strings.TrimSpace(str(msg["summary"])),
		}
		payload, ok := refName(obj(msg["payload"]))
		if !ok {
			return nil, fmt.Errorf("message %s: payload must $ref a named schema", key)
		}
		e.Payload = payload
		ps := obj(schemas[payload])
		if ps == nil {
			return nil, fmt.Errorf("message %s: schema %s missing", key, payload)
		}
		var typeConst string
		for _, part := range arr(ps["allOf"]) {
			props := obj(obj(part)["properties"])
			if t := obj(props["type"]); t != nil {
				typeConst = str(t["const"])
			}
			if dref, ok := refName(obj(props["data"])); ok {
				e.Data = dref
			}
		}
		if typeConst == "" || e.Data == "" {
			return nil, fmt.Errorf("message %s: payload %s must be allOf [Event, {type: {const}, data: {$ref}}]", key, payload)
		}
		if e.Type == "" {
			e.Type = typeConst
		}
		if typeConst != e.Type {
			return nil, fmt.Errorf("message %s: name %q differs from the payload's type %q", key, e.Type, typeConst)
		}
		if schemas[e.Data] == nil {
			return nil, fmt.Errorf("message %s: data schema %s missing", key, e.Data)
		}
		if seen[e.Type] {
			return nil, fmt.Errorf("event type %s has two messages", e.Type)
		}
		seen[e.Type] = true
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}
