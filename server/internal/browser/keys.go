package browser

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/chromedp/cdproto/input"
)

type keyDef struct {
	key  string
	code string
	vk   int64
	text string
}

var namedKeys = map[string]keyDef{
	"enter":      {"Enter", "Enter", 13, "\r"},
	"tab":        {"Tab", "Tab", 9, ""},
	"backspace":  {"Backspace", "Backspace", 8, ""},
	"delete":     {"Delete", "Delete", 46, ""},
	"escape":     {"Escape", "Escape", 27, ""},
	"esc":        {"Escape", "Escape", 27, ""},
	"space":      {" ", "Space", 32, " "},
	"arrowup":    {"ArrowUp", "ArrowUp", 38, ""},
	"arrowdown":  {"ArrowDown", "ArrowDown", 40, ""},
	"arrowleft":  {"ArrowLeft", "ArrowLeft", 37, ""},
	"arrowright": {"ArrowRight", "ArrowRight", 39, ""},
	"home":       {"Home", "Home", 36, ""},
	"end":        {"End", "End", 35, ""},
	"pageup":     {"PageUp", "PageUp", 33, ""},
	"pagedown":   {"PageDown", "PageDown", 34, ""},
	"insert":     {"Insert", "Insert", 45, ""},
	"f1":         {"F1", "F1", 112, ""}, "f2": {"F2", "F2", 113, ""}, "f3": {"F3", "F3", 114, ""},
	"f4": {"F4", "F4", 115, ""}, "f5": {"F5", "F5", 116, ""}, "f6": {"F6", "F6", 117, ""},
	"f7": {"F7", "F7", 118, ""}, "f8": {"F8", "F8", 119, ""}, "f9": {"F9", "F9", 120, ""},
	"f10": {"F10", "F10", 121, ""}, "f11": {"F11", "F11", 122, ""}, "f12": {"F12", "F12", 123, ""},
}

var modifierKeys = map[string]struct {
	bit int64
	def keyDef
}{
	"alt":     {1, keyDef{"Alt", "AltLeft", 18, ""}},
	"control": {2, keyDef{"Control", "ControlLeft", 17, ""}},
	"ctrl":    {2, keyDef{"Control", "ControlLeft", 17, ""}},
	"meta":    {4, keyDef{"Meta", "MetaLeft", 91, ""}},
	"cmd":     {4, keyDef{"Meta", "MetaLeft", 91, ""}},
	"shift":   {8, keyDef{"Shift", "ShiftLeft", 16, ""}},
}

// parsedKey is a key with its modifiers, ready to dispatch.
type parsedKey struct {
	mods     int64
	modDefs  []keyDef
	key      keyDef
	commands []string
}

// parseKey parses "Enter", "a", "Shift+Tab", "Control+a".
func parseKey(s string) (parsedKey, error) {
	var pk parsedKey
	if s == "" {
		return pk, fmt.Errorf("%w: press_key needs a key", ErrInvalidRequest)
	}
	parts := strings.Split(s, "+")
	if strings.HasSuffix(s, "++") { // "Control++"
		parts = append(parts[:len(parts)-2], "+")
	}
	for _, m := range parts[:len(parts)-1] {
		md, ok := modifierKeys[strings.ToLower(strings.TrimSpace(m))]
		if !ok {
			return pk, fmt.Errorf("%w: unknown modifier %q (use Alt, Control, Meta, Shift)", ErrInvalidRequest, m)
		}
		pk.mods |= md.bit
		pk.modDefs = append(pk.modDefs, md.def)
	}
	last := parts[len(parts)-1]
	if d, ok := namedKeys[strings.ToLower(last)]; ok && utf8.RuneCountInString(last) > 1 {
		pk.key = d
	} else if utf8.RuneCountInString(last) == 1 {
		r, _ := utf8.DecodeRuneInString(last)
		ch := last
		if pk.mods&8 != 0 {
			ch = strings.ToUpper(ch)
		}
		d := keyDef{key: ch, text: ch}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
			up := strings.ToUpper(last)
			d.code = "Key" + up
			d.vk = int64(up[0])
		case r >= '0' && r <= '9':
			d.code = "Digit" + last
			d.vk = int64(r)
		case r == ' ':
			d = namedKeys["space"]
		}
		pk.key = d
	} else if d, ok := namedKeys[strings.ToLower(last)]; ok {
		pk.key = d
	} else {
		return pk, fmt.Errorf("%w: unknown key %q", ErrInvalidRequest, last)
	}
	if pk.mods&(1|2|4) != 0 {
		pk.key.text = "" // a shortcut types nothing
		if pk.mods&(2|4) != 0 && strings.EqualFold(pk.key.key, "a") {
			pk.commands = []string{"selectAll"}
		}
	}
	return pk, nil
}

// pressKey dispatches the key (with its modifiers) to the focused element
// of the page.
func (s *Session) pressKey(ctx context.Context, sess *cdpSession, pk parsedKey) error {
	var fs []*future
	var mods int64
	for _, m := range pk.modDefs {
		mods |= modifierKeys[strings.ToLower(m.key)].bit
		fs = append(fs, start(ctx, sess, input.DispatchKeyEvent, input.DispatchKeyEventParams{
			Type: input.DispatchKeyEventTypeRawKeyDown, Modifiers: mods, Key: m.key, Code: m.code, WindowsVirtualKeyCode: m.vk, NativeVirtualKeyCode: m.vk,
		}))
	}
	down := input.DispatchKeyEventParams{
		Type: input.DispatchKeyEventTypeKeyDown, Modifiers: pk.mods, Key: pk.key.key, Code: pk.key.code,
		WindowsVirtualKeyCode: pk.key.vk, NativeVirtualKeyCode: pk.key.vk, Text: pk.key.text, UnmodifiedText: pk.key.text,
		Commands: pk.commands,
	}
	if pk.key.text == "" {
		down.Type = input.DispatchKeyEventTypeRawKeyDown
	}
	fs = append(fs, start(ctx, sess, input.DispatchKeyEvent, down))
	fs = append(fs, start(ctx, sess, input.DispatchKeyEvent, input.DispatchKeyEventParams{
		Type: input.DispatchKeyEventTypeKeyUp, Modifiers: pk.mods, Key: pk.key.key, Code: pk.key.code, WindowsVirtualKeyCode: pk.key.vk, NativeVirtualKeyCode: pk.key.vk,
	}))
	for i := len(pk.modDefs) - 1; i >= 0; i-- {
		m := pk.modDefs[i]
		mods &^= modifierKeys[strings.ToLower(m.key)].bit
		fs = append(fs, start(ctx, sess, input.DispatchKeyEvent, input.DispatchKeyEventParams{
			Type: input.DispatchKeyEventTypeKeyUp, Modifiers: mods, Key: m.key, Code: m.code, WindowsVirtualKeyCode: m.vk, NativeVirtualKeyCode: m.vk,
		}))
	}
	return s.mapErr(waitAll(ctx, fs...))
}
