package apimodel

import "strings"

// Pascal turns snake_case into PascalCase: create_task → CreateTask.
func Pascal(s string) string {
	var b strings.Builder
	for _, part := range strings.Split(s, "_") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// Camel turns snake_case into camelCase: create_task → createTask, task_id → taskId.
func Camel(s string) string {
	p := Pascal(s)
	if p == "" {
		return p
	}
	return strings.ToLower(p[:1]) + p[1:]
}

// goInitialisms are the words Go spells in capitals inside identifiers.
var goInitialisms = map[string]string{"id": "ID", "url": "URL", "http": "HTTP", "json": "JSON", "sha256": "SHA256", "api": "API"}

// GoLocal turns a snake_case parameter name into a Go local identifier: task_id → taskID.
func GoLocal(s string) string {
	parts := strings.Split(s, "_")
	for i, p := range parts {
		if i > 0 {
			if up, ok := goInitialisms[p]; ok {
				parts[i] = up
			} else if p != "" {
				parts[i] = strings.ToUpper(p[:1]) + p[1:]
			}
		}
	}
	out := strings.Join(parts, "")
	switch out {
	case "type", "func", "var", "range", "map", "chan", "go", "select", "case", "default", "package", "import", "return", "break", "continue", "for", "if", "else", "switch", "struct", "interface", "const", "defer", "goto", "fallthrough", "ctx", "opts", "body", "c":
		return out + "_"
	}
	return out
}
