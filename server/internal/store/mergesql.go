package store

import (
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Merging the same statement of several commands into one (group commit, groupcommit.go).
//
// A one-row INSERT costs PostgreSQL mostly its statement, not its row: executor start-up and the
// preparation of the table's CHECK expressions are paid per statement (docs/benchmarks.md, "What a
// one-row statement costs"). When several commands commit together, the same INSERT of each is
// sent as one statement of all their rows. Two forms merge:
//
//   - `INSERT INTO t (cols) VALUES (tuple)`, the tuple last, holding parameters and constants
//     only: the tuples are repeated, each with its parameters renumbered after the previous ones;
//   - `INSERT … FROM unnest($1::T[], …) …` whose every parameter is an array: the arrays are
//     concatenated, position by position.
//
// Anything else (an `INSERT … SELECT` reading a table, `ON CONFLICT`, `RETURNING`, `UPDATE`) is
// sent once per command, unchanged. The statements are this package's own, never a caller's.

// mergeForm is how a statement's copies merge; zero: they do not.
type mergeForm struct {
	kind mergeKind
	// head is the statement up to its VALUES tuple, tuple the tuple (kind mergeValues).
	head, tuple string
	// params is the number of parameters the statement takes.
	params int
}

type mergeKind uint8

const (
	mergeNone mergeKind = iota
	mergeValues
	mergeUnnest
)

var (
	paramRe      = regexp.MustCompile(`\$([0-9]+)`)
	arrayParamRe = regexp.MustCompile(`\$([0-9]+)::[a-z0-9_ ]+\[\]`)
	valuesHeadRe = regexp.MustCompile(`(?is)^\s*INSERT\s+INTO\s+[a-z_][a-z0-9_.]*\s*\([a-z0-9_,\s"]+\)\s*VALUES\s*$`)
	unnestHeadRe = regexp.MustCompile(`(?is)^\s*INSERT\s+INTO\s+[a-z_][a-z0-9_.]*\s*\([a-z0-9_,\s"]+\)\s*SELECT\s.*\sFROM\s+unnest\(`)
)

// merger merges statements; it remembers each statement text's form, and each merged text, once
// worked out. Safe for concurrent use.
type merger struct {
	forms  sync.Map // string → mergeForm
	merged sync.Map // mergedKey → string
}

type mergedKey struct {
	sql string
	n   int
}

// formOf says how copies of sql merge.
func (m *merger) formOf(sql string) mergeForm {
	if f, ok := m.forms.Load(sql); ok {
		return f.(mergeForm)
	}
	f := parseForm(sql)
	m.forms.Store(sql, f)
	return f
}

func parseForm(sql string) mergeForm {
	params := 0
	uses := paramRe.FindAllStringSubmatch(sql, -1)
	for _, m := range uses {
		n, err := strconv.Atoi(m[1])
		if err != nil || n < 1 {
			return mergeForm{}
		}
		params = max(params, n)
	}
	if strings.Contains(sql, "$$") || strings.Contains(sql, "--") || strings.Contains(sql, "/*") || strings.Contains(sql, ";") {
		return mergeForm{}
	}
	upper := strings.ToUpper(sql)
	if strings.Contains(upper, "RETURNING") || strings.Contains(upper, "ON CONFLICT") {
		return mergeForm{}
	}
	if unnestHeadRe.MatchString(sql) {
		// Every parameter must be an array, or the rows would not be the merged commands' rows.
		if len(arrayParamRe.FindAllString(sql, -1)) != len(uses) || params == 0 {
			return mergeForm{}
		}
		return mergeForm{kind: mergeUnnest, params: params}
	}
	// VALUES (tuple), the tuple last: find the last top-level parenthesis group.
	trimmed := strings.TrimRight(sql, " \t\r\n")
	if !strings.HasSuffix(trimmed, ")") {
		return mergeForm{}
	}
	open, depth, quoted := -1, 0, false
	for i := len(trimmed) - 1; i >= 0; i-- {
		switch c := trimmed[i]; {
		case c == '\'':
			quoted = !quoted
		case quoted:
		case c == ')':
			depth++
		case c == '(':
			depth--
			if depth == 0 {
				open = i
			}
		}
		if open >= 0 {
			break
		}
	}
	if open < 0 || quoted || !valuesHeadRe.MatchString(trimmed[:open]) {
		return mergeForm{}
	}
	tuple := trimmed[open:]
	if quotedDollar(tuple) {
		return mergeForm{}
	}
	return mergeForm{kind: mergeValues, head: trimmed[:open], tuple: tuple, params: params}
}

// quotedDollar reports whether a '$' appears inside a string constant of s.
func quotedDollar(s string) bool {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\'':
			quoted = !quoted
		case quoted && s[i] == '$':
			return true
		}
	}
	return false
}

// mergeQueries returns the one statement standing for qs (copies of one statement text, one per
// command), or ok false when they cannot merge.
func (m *merger) mergeQueries(qs []*pgx.QueuedQuery) (q *pgx.QueuedQuery, ok bool) {
	f := m.formOf(qs[0].SQL)
	if f.kind == mergeNone {
		return nil, false
	}
	for _, x := range qs {
		if len(x.Arguments) != f.params || x.Fn != nil {
			return nil, false
		}
	}
	switch f.kind {
	case mergeValues:
		args := make([]any, 0, f.params*len(qs))
		for _, x := range qs {
			args = append(args, x.Arguments...)
		}
		return &pgx.QueuedQuery{SQL: m.valuesSQL(qs[0].SQL, f, len(qs)), Arguments: args}, true
	case mergeUnnest:
		for _, x := range qs {
			if !sameLengths(x.Arguments) {
				// unnest pads a command's shorter arrays with NULLs; concatenated, its values would
				// slide into another command's rows.
				return nil, false
			}
		}
		args := make([]any, f.params)
		for i := range f.params {
			first := reflect.ValueOf(qs[0].Arguments[i])
			if first.Kind() != reflect.Slice || first.Type().Elem().Kind() == reflect.Uint8 {
				return nil, false // not an array parameter ([]byte is bytea)
			}
			all := reflect.MakeSlice(first.Type(), 0, first.Len()*len(qs))
			for _, x := range qs {
				v := reflect.ValueOf(x.Arguments[i])
				if v.Type() != first.Type() {
					return nil, false
				}
				all = reflect.AppendSlice(all, v)
			}
			args[i] = all.Interface()
		}
		return &pgx.QueuedQuery{SQL: qs[0].SQL, Arguments: args}, true
	case mergeNone:
	}
	return nil, false
}

// sameLengths reports whether args are slices of one length.
func sameLengths(args []any) bool {
	n := -1
	for _, a := range args {
		v := reflect.ValueOf(a)
		if v.Kind() != reflect.Slice || (n >= 0 && v.Len() != n) {
			return false
		}
		n = v.Len()
	}
	return true
}

// valuesSQL is sql with its VALUES tuple repeated n times, the k-th copy's parameters numbered
// after the (k-1)-th's.
func (m *merger) valuesSQL(sql string, f mergeForm, n int) string {
	key := mergedKey{sql, n}
	if s, ok := m.merged.Load(key); ok {
		return s.(string)
	}
	var b strings.Builder
	b.WriteString(f.head)
	for k := range n {
		if k > 0 {
			b.WriteString(", ")
		}
		off := k * f.params
		b.WriteString(paramRe.ReplaceAllStringFunc(f.tuple, func(p string) string {
			i, _ := strconv.Atoi(p[1:])
			return "$" + strconv.Itoa(i+off)
		}))
	}
	s := b.String()
	m.merged.Store(key, s)
	return s
}
